"""One exported table, whatever its container: SQLite, CSV, JSON array, JSON lines, API page.

Gateways log to a database table (new-api ``logs``, LiteLLM ``LiteLLM_SpendLogs``,
Bifrost ``logs``), and users hand that table over in whichever container they got
it in: the database file, a CSV dump, a JSON array, JSON lines, or an admin API's
page (``{"data": [...]}``, ``{"logs": [...]}``, ``{"data": {"items": [...]}}``).
The formats read rows by column name, so the container is decided here once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prefixscope.ingest.readers import BadRecord
from prefixscope.ingest.readers.csv import iter_csv_rows
from prefixscope.ingest.readers.json import iter_json_records
from prefixscope.ingest.readers.sqlite import iter_sqlite_rows
from prefixscope.ingest.source import Probe, Source

# API-style wrappers around the rows: {"data": [...]} / {"logs": [...]} / {"items": [...]}.
_WRAPPER_KEYS = ("data", "logs", "items", "rows")


def _wrapped_rows(document: dict[str, Any]) -> list[Any] | None:
    """The row list of an API-style wrapper object; None when it is not one."""
    for key in _WRAPPER_KEYS:
        inner = document.get(key)
        if isinstance(inner, dict) and isinstance(inner.get("items"), list):
            return inner["items"]
        if isinstance(inner, list):
            return inner
    return None


def iter_table_rows(source: Source, probe_: Probe, table: str) -> Iterator[tuple[int, Any]]:
    """Rows of an exported table, whatever the container: SQLite, CSV, JSON or JSON lines."""
    if probe_.kind == "sqlite":
        yield from iter_sqlite_rows(source, table)
    elif probe_.kind == "csv":
        yield from iter_csv_rows(source)
    else:
        for place, rec in iter_json_records(source, probe_):
            if place == 1 and isinstance(rec, dict) and probe_.kind == "json":
                rows = _wrapped_rows(rec)
                if rows is not None:
                    yield from enumerate(rows, start=1)
                    continue
            yield place, rec


def unusable_row(row: Any, noun: str) -> str | None:
    """Why a row `iter_table_rows` yielded cannot be read at all (the reader's `BadRecord`,
    or not an object: a JSON export of something else); None for a row object."""
    if isinstance(row, BadRecord):
        return str(row)
    if not isinstance(row, dict):
        return f"{noun} is a {type(row).__name__}, not an object"
    return None


def first_table_row(probe: Probe) -> dict[str, Any]:
    """The first row of an exported table, as `iter_table_rows` yields it (wrappers unwrapped)."""
    if probe.kind == "csv":
        return dict.fromkeys(probe.header or [], "")
    first = probe.first
    if probe.kind == "json" and isinstance(probe.document, dict):
        rows = _wrapped_rows(probe.document)
        if rows is not None:
            first = next((x for x in rows if isinstance(x, dict)), None)
    return first if isinstance(first, dict) else {}


def row_keys(probe: Probe) -> set[str]:
    """Column names of the first row of a CSV / JSON / JSON-lines table export."""
    if probe.kind not in ("csv", "json", "jsonl"):
        return set()
    return set(first_table_row(probe))
