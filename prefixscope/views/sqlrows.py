"""Rows of an ad-hoc SQL query as a terminal table, CSV or strict JSON."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from typing import Any

from rich.markup import escape
from rich.table import Table


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


def rows_json(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
    return [{c: json_value(v) for c, v in zip(columns, row, strict=True)} for row in rows]


def rows_csv(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([cell_text(v, null="") for v in row] for row in rows)
    return buffer.getvalue()


def rows_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], max_width: int) -> Table:
    table = Table(show_edge=False, pad_edge=False)
    for c in columns:
        table.add_column(escape(c), overflow="fold")
    for row in rows:
        cells = []
        for v in row:
            text = cell_text(v)
            if max_width and len(text) > max_width:
                text = text[: max_width - 1] + "…"
            cells.append(escape(text))
        table.add_row(*cells)
    return table
