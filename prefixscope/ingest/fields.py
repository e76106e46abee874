"""Field-level helpers shared by the format parsers: numbers, times, JSON-in-strings, usage.

Logs disagree on everything: numbers arrive as strings, times as ISO text or epoch
seconds / milliseconds / nanoseconds, JSON as strings that are themselves JSON
strings (Langfuse double-encodes). And "input tokens" means two different things
(formats.md §0, §10): Anthropic-native `input_tokens` excludes cache reads and
writes, OpenAI `prompt_tokens` / Responses `input_tokens` / OTel include them. The
`usage_*` functions below turn each convention into `Usage` with cache-inclusive
`prompt_tokens`, keep the convention in `semantics`, and leave unreported values
as None.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from prefixscope.model import Usage

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


def dig(obj: Any, *path: str | int) -> Any:
    """obj[p0][p1]... or None when any step is missing."""
    for step in path:
        if isinstance(obj, dict):
            obj = obj.get(step)  # type: ignore[arg-type]
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


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _sum_present(*values: int | None) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def usage_anthropic(u: dict[str, Any] | None) -> Usage:
    """Anthropic Messages usage: `input_tokens` EXCLUDES cache reads and writes."""
    if not isinstance(u, dict):
        return Usage()
    uncached = to_int(u.get("input_tokens"))
    read = to_int(u.get("cache_read_input_tokens"))
    write = to_int(u.get("cache_creation_input_tokens"))
    if write is None and isinstance(u.get("cache_creation"), dict):
        cc = u["cache_creation"]
        write = _sum_present(to_int(cc.get("ephemeral_5m_input_tokens")),
                             to_int(cc.get("ephemeral_1h_input_tokens")))
    prompt = None if uncached is None else uncached + (read or 0) + (write or 0)
    return Usage(prompt_tokens=prompt, cached_tokens=read, cache_write_tokens=write,
                 output_tokens=to_int(u.get("output_tokens")), semantics="anthropic")


def usage_openai_chat(u: dict[str, Any] | None) -> Usage:
    """OpenAI Chat usage (also vLLM, DeepSeek): `prompt_tokens` INCLUDES cached tokens."""
    if not isinstance(u, dict):
        return Usage()
    details = _dict(u.get("prompt_tokens_details"))
    deepseek_hit = to_int(u.get("prompt_cache_hit_tokens"))
    read = deepseek_hit if deepseek_hit is not None else to_int(first_present(
        details.get("cached_tokens"), details.get("cached_read_tokens"),
        u.get("cache_read_input_tokens")))
    write = to_int(first_present(u.get("cache_write_tokens"), details.get("cache_write_tokens"),
                                 details.get("cached_write_tokens"),
                                 details.get("cache_creation_tokens"),
                                 u.get("cache_creation_input_tokens")))
    prompt = to_int(u.get("prompt_tokens"))
    if prompt is None and deepseek_hit is not None:
        prompt = _sum_present(deepseek_hit, to_int(u.get("prompt_cache_miss_tokens")))
    return Usage(prompt_tokens=prompt, cached_tokens=read, cache_write_tokens=write,
                 output_tokens=to_int(u.get("completion_tokens")),
                 semantics="deepseek" if deepseek_hit is not None else "openai")


def usage_openai_responses(u: dict[str, Any] | None) -> Usage:
    """OpenAI Responses usage: `input_tokens` INCLUDES cached tokens."""
    if not isinstance(u, dict):
        return Usage()
    details = _dict(u.get("input_tokens_details"))
    return Usage(prompt_tokens=to_int(u.get("input_tokens")),
                 cached_tokens=to_int(details.get("cached_tokens")),
                 cache_write_tokens=to_int(details.get("cache_write_tokens")),
                 output_tokens=to_int(u.get("output_tokens")), semantics="openai-responses")


def usage_auto(u: Any, endpoint: str = "unknown") -> Usage:
    """Pick the convention from the keys present, falling back on the endpoint protocol."""
    if not isinstance(u, dict):
        return Usage()
    if "prompt_tokens" in u or "prompt_cache_hit_tokens" in u:
        return usage_openai_chat(u)
    if "input_tokens_details" in u:
        return usage_openai_responses(u)
    if "cache_read_input_tokens" in u or "cache_creation_input_tokens" in u:
        return usage_anthropic(u)
    if "input_tokens" in u:
        if endpoint == "openai-responses":
            return usage_openai_responses(u)
        return usage_anthropic(u)
    return Usage()


def merge_usage(base: Usage, later: Usage) -> Usage:
    """Fields of `later` where it reported them, else `base`'s (SSE: delta after start)."""
    return Usage(
        prompt_tokens=first_present(later.prompt_tokens, base.prompt_tokens),
        cached_tokens=first_present(later.cached_tokens, base.cached_tokens),
        cache_write_tokens=first_present(later.cache_write_tokens, base.cache_write_tokens),
        output_tokens=first_present(later.output_tokens, base.output_tokens),
        semantics=base.semantics or later.semantics,
    )


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
