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
    from prefixscope import api
    from prefixscope.cli.exitcodes import ExitCode
    from prefixscope.cli.storeopen import input_store
    from prefixscope.views import sqlrows
    from prefixscope.views.terminal.sqltable import rows_table

    if json_out and csv_out:
        raise console.fail("--json and --csv cannot be combined: pick one", ExitCode.USAGE)
    with input_store(logs, store, quiet=quiet, json_mode=json_out or csv_out,
                     skip_missing=skip_missing) as handle:
        with console.api_errors():
            result = api.sql(handle, query)
    if result.statements > 1:
        console.warn(f"{result.statements} statements: only the last one's rows are shown",
                     quiet)
    if result.renamed:
        console.warn("duplicate column names renamed: "
                     + ", ".join(f"{a} -> {b}" for a, b in result.renamed))
    if json_out:
        console.print_json(result.to_dict())
    elif csv_out:
        console.write_raw(sqlrows.rows_csv(result.columns, result.rows))
    else:
        console.print_out(rows_table(result.columns, result.rows, max_width))
        console.note(f"{len(result.rows)} row(s)", quiet)
