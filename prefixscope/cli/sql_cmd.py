"""`prefixscope sql`: ad-hoc read-only DuckDB SQL over the store."""

from __future__ import annotations

from typing import Annotated

import typer

from prefixscope.cli import console
from prefixscope.cli.manual import OUTPUT, Command
from prefixscope.cli.options import Logs, Quiet, SkipMissing, StoreOpt


def register(app: typer.Typer) -> None:
    app.command("sql", cls=Command)(sql)


def sql(
    query: Annotated[str, typer.Argument(metavar="QUERY",
                                         help="A SQL query (DuckDB dialect). Tables: requests, "
                                              "bodies, parts, sessions; view: turns.")],
    logs: Logs = None,
    store: StoreOpt = None,
    skip_missing: SkipMissing = False,
    json_out: Annotated[bool, typer.Option("--json", rich_help_panel=OUTPUT,
                                           help="Rows as a JSON list of objects.")] = False,
    csv_out: Annotated[bool, typer.Option("--csv", rich_help_panel=OUTPUT,
                                          help="Rows as CSV with a header.")] = False,
    max_width: Annotated[int, typer.Option("--max-width", metavar="CHARS",
                                           rich_help_panel=OUTPUT,
                                           help="Cut table cells to this many characters (0: "
                                                "no limit).")] = 80,
    quiet: Quiet = 0,
) -> None:
    """Run read-only SQL on the store (or on LOGS, ingested into a temporary one) and print
    the rows.

    Example:
        prefixscope sql "select source_format, count(*) from requests group by 1" sample_logs/
        prefixscope sql "select session, count(*) from turns group by 1" --store cc.duckdb

    More: docs/store.md.
    """
    from prefixscope.cli.exitcodes import ExitCode
    from prefixscope.cli.storeopen import open_store
    from prefixscope.store import DEFAULT_STORE, Store, StoreError
    from prefixscope.store.sqlquery import SqlError, run_readonly
    from prefixscope.views import sqlrows

    if json_out and csv_out:
        raise console.fail("--json and --csv cannot be combined: pick one", ExitCode.USAGE)
    try:
        with (open_store(logs, None, quiet=quiet, json_mode=json_out or csv_out,
                         skip_missing=skip_missing) if logs
              else Store.open(store or DEFAULT_STORE, read_only=True)) as st:
            result = run_readonly(st, query)
    except StoreError as exc:
        raise console.fail(str(exc)) from None
    except SqlError as exc:
        raise console.fail(str(exc), ExitCode.USAGE if exc.usage else ExitCode.ERROR) from None
    if result.statements > 1:
        console.warn(f"{result.statements} statements: only the last one's rows are shown",
                     quiet)
    # the values asked for (BLOBs as the text every format shows), secrets masked; a
    # column's name is query text and can hold one too (`select 1 as "sk-…"`)
    rows = console.redacted(sqlrows.plain_values(result.rows))
    columns, renamed = sqlrows.unique_columns(console.redacted(list(result.columns)))
    if renamed:
        console.warn("duplicate column names renamed: "
                     + ", ".join(f"{a} -> {b}" for a, b in renamed))
    if json_out:
        console.print_json(sqlrows.rows_json(columns, rows))
    elif csv_out:
        console.write_raw(sqlrows.rows_csv(columns, rows))
    else:
        console.print_out(sqlrows.rows_table(columns, rows, max_width))
        console.note(f"{len(rows)} row(s)", quiet)
