"""ClickHouse values as exports print them: ``Map`` / ``Array`` / string literals.

Langfuse v3 keeps observations in ClickHouse, and its blob-storage exports and
``clickhouse-client`` dumps of the ``observations`` / ``events_full`` tables print
``Map(String, ...)`` and ``Array`` columns as ClickHouse literals in CSV
(``{'input':10,'output':'x'}``, ``['a','b']``). This module parses those literals
into Python values; the same columns arrive as JSON in JSON exports.
"""

from __future__ import annotations

from typing import Any

import orjson


def clickhouse_literal(text: str) -> Any:
    """Parse a ClickHouse ``Map`` / ``Array`` / string literal as printed in CSV output
    (``{'input':10,'output':'x'}``, ``['a','b']``); None when it is not one."""
    try:
        value, end = _ch_value(text, _ch_skip(text, 0))
    except (IndexError, ValueError):
        return None
    return value if _ch_skip(text, end) == len(text) else None


def _ch_skip(s: str, i: int) -> int:
    while i < len(s) and s[i] in " \t\r\n":
        i += 1
    return i


def _ch_value(s: str, i: int) -> tuple[Any, int]:
    if s[i] == "{":
        out: dict[str, Any] = {}
        i = _ch_skip(s, i + 1)
        while s[i] != "}":
            key, i = _ch_value(s, i)
            i = _ch_skip(s, i)
            if s[i] != ":":
                raise ValueError("expected ':'")
            value, i = _ch_value(s, _ch_skip(s, i + 1))
            out[str(key)] = value
            i = _ch_skip(s, i)
            if s[i] == ",":
                i = _ch_skip(s, i + 1)
        return out, i + 1
    if s[i] == "[":
        items: list[Any] = []
        i = _ch_skip(s, i + 1)
        while s[i] != "]":
            value, i = _ch_value(s, i)
            items.append(value)
            i = _ch_skip(s, i)
            if s[i] == ",":
                i = _ch_skip(s, i + 1)
        return items, i + 1
    if s[i] == "'":
        chars: list[str] = []
        i += 1
        escapes = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "b": "\b", "f": "\f"}
        while s[i] != "'":
            if s[i] == "\\":
                i += 1
                chars.append(escapes.get(s[i], s[i]))
            else:
                chars.append(s[i])
            i += 1
        return "".join(chars), i + 1
    end = i
    while end < len(s) and s[end] not in ",:]}":
        end += 1
    token = s[i:end].strip()
    if not token:
        raise ValueError("empty token")
    try:
        return orjson.loads(token), end
    except orjson.JSONDecodeError:
        return token, end
