"""`prefixscope sql`: ad-hoc read-only DuckDB SQL over the store."""

from __future__ import annotations

import csv
import sys
from typing import Annotated

import typer

from . import console
from .options import StoreOpt


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

    from ..store import DEFAULT_STORE, Store, StoreError

    try:
        st = Store.open(store or DEFAULT_STORE, read_only=True)
    except StoreError as exc:
        raise console.fail(str(exc)) from None
    try:
        rel = st.con.execute(query)
        columns = [d[0] for d in rel.description] if rel.description else []
        rows = rel.fetchall() if columns else []
    except duckdb.Error as exc:
        raise console.fail(f"SQL: {str(exc).splitlines()[0]}") from None
    finally:
        st.close()
    if json_out:
        console.print_json([dict(zip(columns, row, strict=True)) for row in rows])
    elif csv_out:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(rows)
    else:
        from rich.table import Table

        table = Table(show_edge=False, pad_edge=False)
        for c in columns:
            table.add_column(c, overflow="fold")
        for row in rows:
            table.add_row(*(_cell(v, max_width) for v in row))
        console.out.print(table)
        console.note(f"{len(rows)} row(s)")


def _cell(value: object, max_width: int) -> str:
    text = "NULL" if value is None else str(value)
    if max_width and len(text) > max_width:
        return text[: max_width - 1] + "…"
    return text
