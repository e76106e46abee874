"""`prefixscope export`: write the store's tables as Parquet for other tools."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from prefixscope.cli import console
from prefixscope.cli.manual import OUTPUT, Command
from prefixscope.cli.options import Quiet, StoreOpt


def register(app: typer.Typer) -> None:
    app.command("export", cls=Command)(export)


def export(
    parquet: Annotated[Path, typer.Option("--parquet", metavar="DIR", rich_help_panel=OUTPUT,
                                          help="Directory to write TABLE.parquet files "
                                               "into.")],
    store: StoreOpt = None,
    quiet: Quiet = 0,
) -> None:
    """Export requests, bodies, parts, sessions and the turns view as Parquet files.

    Example:
        prefixscope export --parquet out/ && duckdb -c "from 'out/turns.parquet'"

    More: docs/store.md, docs/scale.md.
    """
    from prefixscope.cli.exitcodes import ExitCode
    from prefixscope.store import DEFAULT_STORE, Store, StoreError
    from prefixscope.store.export import TABLES, export_parquet

    if parquet.exists() and not parquet.is_dir():
        raise console.fail(f"--parquet {parquet} is a file: give a directory (export writes "
                           f"{', '.join(t + '.parquet' for t in TABLES)} into it)",
                           ExitCode.USAGE)
    try:
        with Store.open(store or DEFAULT_STORE, read_only=True) as st:
            written = export_parquet(st, parquet)
    except StoreError as exc:
        raise console.fail(str(exc)) from None
    for target in written:
        console.wrote(target, quiet)
