"""`prefixscope sql`: ad-hoc read-only DuckDB SQL over the store."""

from __future__ import annotations

import csv
import json
import math
import sys
from typing import Annotated, Any

import typer

from prefixscope.cli import console
from prefixscope.cli.options import StoreOpt


def register(app: typer.Typer) -> None:
    app.command("sql")(sql)


def sql(
    query: Annotated[str, typer.Argument(help="A SQL query (DuckDB dialect). Tables: requests, "
                                              "bodies, sessions; view: turns.")],
    store: StoreOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Rows as a JSON list of objects.")]
    = False,
    csv_out: Annotated[bool, typer.Option("--csv", help="Rows as CSV with a header.")] = False,
    max_width: Annotated[int, typer.Option("--max-width", help="Cut table cells to this many "
                                                               "characters (0: no limit).")]
    = 80,
) -> None:
    """Run read-only SQL on the store and print the rows.

    Example:
        prefixscope sql "select source_format, count(*) from requests group by 1"
    """
    import duckdb

    from prefixscope.cli.exitcodes import ExitCode
    from prefixscope.store import DEFAULT_STORE, Store, StoreError

    if json_out and csv_out:
        raise console.fail("--json and --csv cannot be combined: pick one", ExitCode.USAGE)
    if not query.strip():
        raise console.fail("empty SQL query", ExitCode.USAGE)
    try:
        st = Store.open(store or DEFAULT_STORE, read_only=True)
    except StoreError as exc:
        raise console.fail(str(exc)) from None
    try:
        statements = st.con.extract_statements(query)
        if not statements:
            raise console.fail("the SQL holds no statement (only comments?)", ExitCode.USAGE)
        if any(s.type == duckdb.StatementType.LOAD for s in statements):
            raise console.fail("SQL: INSTALL/LOAD are not allowed: prefixscope works offline "
                               "and DuckDB would download the extension")
        # No SET can turn extension auto-install (network) back on.
        st.con.execute("SET lock_configuration = true")
        rel = st.con.execute(query)
        columns = [d[0] for d in rel.description] if rel is not None and rel.description else []
        rows = rel.fetchall() if columns else []
    except duckdb.Error as exc:
        raise console.fail(f"SQL: {str(exc).splitlines()[0]}") from None
    finally:
        st.close()
    if len(statements) > 1:
        console.warn(f"{len(statements)} statements: only the last one's rows are shown")
    columns = _unique(columns)
    if json_out:
        console.print_json([{c: _json_value(v) for c, v in zip(columns, row, strict=True)}
                            for row in rows])
    elif csv_out:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([_text(v, null="") for v in row] for row in rows)
    else:
        from rich.markup import escape
        from rich.table import Table

        table = Table(show_edge=False, pad_edge=False)
        for c in columns:
            table.add_column(escape(c), overflow="fold")
        for row in rows:
            table.add_row(*(escape(_cell(v, max_width)) for v in row))
        console.out.print(table)
        console.note(f"{len(rows)} row(s)")


def _unique(columns: list[str]) -> list[str]:
    """Column names made unique (``a``, ``a_1``): a JSON object cannot hold a key twice."""
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
    if out != columns:
        console.warn("duplicate column names renamed: "
                     + ", ".join(f"{a} -> {b}" for a, b in zip(columns, out, strict=True)
                                 if a != b))
    return out


def _json_value(value: Any) -> Any:
    """A value valid in strict JSON: NaN/Infinity become null, bytes become text."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", errors="backslashreplace")
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    return value


def _text(value: object, null: str = "NULL") -> str:
    """One cell as text; lists and structs as JSON (not Python's repr)."""
    if value is None:
        return null
    if isinstance(value, list | tuple | dict):
        return json.dumps(_json_value(value), ensure_ascii=False, default=str)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", errors="backslashreplace")
    return str(value)


def _cell(value: object, max_width: int) -> str:
    text = _text(value)
    if max_width and len(text) > max_width:
        return text[: max_width - 1] + "…"
    return text
