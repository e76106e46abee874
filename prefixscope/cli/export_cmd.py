"""`prefixscope export`: write the store's tables as Parquet for other tools, or a
share-safe bundle (no text) that ``prefixscope report`` and trace simulators replay."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from prefixscope.cli import console
from prefixscope.cli.manual import OUTPUT, Command
from prefixscope.cli.options import Gateway, Quiet, StoreOpt, Tokenizer, defaults


def register(app: typer.Typer) -> None:
    app.command("export", cls=Command)(export)


def export(
    parquet: Annotated[Path | None, typer.Option(
        "--parquet", metavar="DIR", rich_help_panel=OUTPUT,
        help="Directory to write TABLE.parquet files into.")] = None,
    bundle: Annotated[Path | None, typer.Option(
        "--bundle", metavar="DIR", rich_help_panel=OUTPUT,
        help="Directory to write a share-safe bundle into: every request's usage, time, "
             "session, model, backend, its prompt's segments as keyed hashes with their "
             "token spans (no text) and the ledger's causes; `prefixscope report DIR` "
             "gives the same report (docs/bundle.md).")] = None,
    store: StoreOpt = None,
    gateway: Gateway = "auto",
    tokenizer: Tokenizer = "auto",
    quiet: Quiet = 0,
) -> None:
    """Export requests, bodies, parts, sessions, session events and the turns view as
    Parquet files, or a share-safe bundle of the store (hashes, usage and causes; no text).

    Example:
        prefixscope export --parquet out/ && duckdb -c "from 'out/turns.parquet'"
        prefixscope export --bundle share/ && prefixscope report share/

    More: docs/store.md, docs/scale.md, docs/bundle.md.
    """
    from prefixscope import api

    with console.api_errors():
        with console.api_notes(quiet):
            written = api.export(store or Path(defaults(api.open)["path"]), parquet=parquet,
                                 bundle=bundle, gateway=gateway, tokenizer=tokenizer)
    for path in written:
        console.wrote(path, quiet)
