"""Field-level helpers shared by the format parsers: numbers, times, ids, JSON-in-strings.

Logs disagree on everything: numbers arrive as strings, times as ISO text or epoch
seconds / milliseconds / nanoseconds, JSON as strings that are themselves JSON
strings (Langfuse double-encodes). Every format reads its fields through these
helpers so that the same odd value means the same thing whatever the source; token
counts are `prefixscope.ingest.normalize.usage`'s.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

_EPOCH = datetime(1970, 1, 1)


def to_int(value: Any) -> int | None:
    """An int from an int, integral float or numeric string; None for missing/blank/bad."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else None
    if isinstance(value, str):
        s = value.strip()
        if not s or s.lower() in {"null", "none", "nan"}:
            return None
        try:
            return int(s)
        except ValueError:
            try:
                f = float(s)
            except ValueError:
                return None
            return int(f) if math.isfinite(f) else None
    return None


def to_text(value: Any) -> str | None:
    """A non-empty string for ids and names (ints and integral floats from SQLite / JSON
    become their digits); None for missing, blank, booleans and containers."""
    if value is None or isinstance(value, (bool, dict, list)):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    s = str(value).strip()
    return s or None


def str_or_none(value: Any) -> str | None:
    """`value` when it is a non-empty string, else None (nothing converted or stripped)."""
    return value if isinstance(value, str) and value else None


def to_float(value: Any) -> float | None:
    """A float from a number or numeric string; None for missing, blank, booleans and text."""
    if value is None or value == "" or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def to_bool(value: Any) -> bool | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return bool(value)
    if isinstance(value, str):
        s = value.strip().lower()
        if s in {"true", "t", "1", "yes"}:
            return True
        if s in {"false", "f", "0", "no"}:
            return False
    return None


def parse_time(value: Any) -> datetime | None:
    """A naive-UTC datetime from ISO text or epoch s / ms / us / ns (guessed by magnitude)."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value
    if isinstance(value, str):
        s = value.strip()
        if not s:
            return None
        try:
            num = float(s)
        except ValueError:
            try:
                dt = datetime.fromisoformat(s.replace("Z", "+00:00").replace(" UTC", "+00:00"))
            except ValueError:
                return None
            return dt.astimezone(UTC).replace(tzinfo=None) if dt.tzinfo else dt
        value = num
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        v = float(value)
        if not math.isfinite(v):
            return None
        mag = abs(v)
        if mag >= 1e17:
            seconds = v / 1e9
        elif mag >= 1e14:
            seconds = v / 1e6
        elif mag >= 1e11:
            seconds = v / 1e3
        else:
            seconds = v
        try:
            return _EPOCH + timedelta(seconds=seconds)
        except OverflowError:
            return None
    return None


def loads_deep(value: Any, max_depth: int = 4) -> Any:
    """Parse JSON strings repeatedly until the result is not one (Langfuse double-encodes).

    Text that is not JSON is returned unchanged.
    """
    for _ in range(max_depth):
        if not isinstance(value, (str, bytes)):
            return value
        s = value.strip() if isinstance(value, str) else value.strip().decode("utf-8", "replace")
        if not s or s[0] not in '[{"' and s not in ("null", "true", "false"):
            return value
        try:
            value = orjson.loads(s)
        except orjson.JSONDecodeError:
            return value
    return value


def json_text(value: Any) -> Any:
    """A JSON column value parsed (exports keep JSON columns as text); "" and None stay None."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        value = value.decode("utf-8", "replace")
    if isinstance(value, str) and not value.strip():
        return None
    return loads_deep(value)


def is_empty_json(value: Any) -> bool:
    return value is None or value == {} or value == [] or value == ""


def strings(value: Any) -> Iterator[str]:
    """Every string inside a JSON value (dict values and list items, depth first, last
    item first); keys are not visited."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def as_object(value: Any) -> dict[str, Any]:
    """`value` when it is a JSON object, else an empty one (read-only use)."""
    return value if isinstance(value, dict) else {}


def as_array(value: Any) -> list[Any]:
    """`value` when it is a JSON array, else an empty one (read-only use)."""
    return value if isinstance(value, list) else []


def dig(obj: Any, *path: str | int) -> Any:
    """obj[p0][p1]... or None when any step is missing."""
    for step in path:
        if isinstance(obj, dict):
            obj = obj.get(step)
        elif isinstance(obj, list) and isinstance(step, int) and -len(obj) <= step < len(obj):
            obj = obj[step]
        else:
            return None
    return obj


def first_present(*values: Any) -> Any:
    for v in values:
        if v is not None and v != "":
            return v
    return None


# new-api `other.request_conversion` step names -> protocol short names.
_GATEWAY_STEPS = {
    "claude messages": "anthropic",
    "openai compatible": "openai",
    "openai responses": "openai-responses",
    "google gemini": "gemini",
}


def gateway_from_conversion(conversion: Any) -> str | None:
    """["Claude Messages", "OpenAI Compatible"] -> "anthropic-to-openai"; None if no conversion.

    A JSON string of the list is accepted too (Langfuse metadata values are text).
    """
    conversion = loads_deep(conversion)
    if not isinstance(conversion, list):
        return None
    chain = [_GATEWAY_STEPS.get(str(step).strip().lower(), str(step).strip().lower())
             for step in conversion if str(step).strip()]
    if len(chain) < 2 or len(set(chain)) < 2:
        return None
    return "-to-".join(chain)
