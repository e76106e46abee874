"""Rows of an ad-hoc SQL query as plain values, CSV or strict JSON (the terminal table:
`views.terminal.sqltable`, apart so that the library, which reads the rows, imports no
rich).

The values are the store's, so log text: a CSV cell a spreadsheet would run as a formula
is neutralised (`csv_cell`).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from typing import Any

# OWASP's CSV-injection rule: a cell starting with one of these is a formula to
# Excel / LibreOffice / Google Sheets (tab and carriage return as well: spreadsheets
# strip them and read the "=" after).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def unique_columns(columns: Sequence[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """Column names made unique (``a``, ``a_1``): a JSON object cannot hold a key twice.
    Returns the names and the (old, new) renames."""
    seen: dict[str, int] = {}
    out: list[str] = []
    for name in columns:
        candidate = name
        while candidate in seen:
            seen[name] += 1
            candidate = f"{name}_{seen[name]}"
        seen.setdefault(name, 0)
        seen[candidate] = seen.get(candidate, 0)
        out.append(candidate)
    return out, [(a, b) for a, b in zip(columns, out, strict=True) if a != b]


def json_value(value: Any) -> Any:
    """A value valid in strict JSON: NaN/Infinity become null, bytes become text."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", errors="backslashreplace")
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    return value


def cell_text(value: object, null: str = "NULL") -> str:
    """One cell as text; lists and structs as JSON (not Python's repr)."""
    if value is None:
        return null
    if isinstance(value, list | tuple | dict):
        return json.dumps(json_value(value), ensure_ascii=False, default=str)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", errors="backslashreplace")
    return str(value)


def plain_values(rows: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """Rows with BLOBs as text (`cell_text`'s decoding), so that masking, which reads
    strings, sees them as every output shows them."""
    return [tuple(_plain(v) for v in row) for row in rows]


def _plain(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", errors="backslashreplace")
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def csv_cell(value: object) -> str:
    """One CSV cell; text a spreadsheet would evaluate gets a leading ``'`` (OWASP: "CSV
    Injection"), which spreadsheets show as text. Numbers are left as they are (``-5``)."""
    text = cell_text(value, null="")
    if isinstance(value, str) and text.startswith(_FORMULA_START):
        return "'" + text
    return text


def rows_json(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
    return [{c: json_value(v) for c, v in zip(columns, row, strict=True)} for row in rows]


def rows_csv(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([csv_cell(c) for c in columns])
    writer.writerows([csv_cell(v) for v in row] for row in rows)
    return buffer.getvalue()
