"""`prefixscope export`: write the store's tables as Parquet for other tools, or a
share-safe bundle (no text) that ``prefixscope report`` and trace simulators replay."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from prefixscope.cli import console
from prefixscope.cli.manual import OUTPUT, Command
from prefixscope.cli.options import Gateway, Quiet, StoreOpt, Tokenizer


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
    from prefixscope.cli.exitcodes import ExitCode
    from prefixscope.store import DEFAULT_STORE, Store, StoreError
    from prefixscope.store.export import TABLES, export_parquet

    if (parquet is None) == (bundle is None):
        raise console.fail("give one of --parquet DIR or --bundle DIR", ExitCode.USAGE)
    if bundle is not None:
        _export_bundle(bundle, store or DEFAULT_STORE, gateway, tokenizer, quiet)
        return
    assert parquet is not None
    if parquet.exists() and not parquet.is_dir():
        raise console.fail(f"--parquet {parquet} is a file: give a directory (export writes "
                           f"{', '.join(t + '.parquet' for t in TABLES)} into it)",
                           ExitCode.USAGE)
    try:
        with Store.open(store or DEFAULT_STORE, read_only=True, writes_into=parquet) as st:
            written = export_parquet(st, parquet)
    except StoreError as exc:
        raise console.fail(str(exc)) from None
    for target in written:
        console.wrote(target, quiet)


def _export_bundle(directory: Path, store: str | Path, gateway: str, tokenizer: str,
                   quiet: int) -> None:
    from prefixscope import api
    from prefixscope.findings.bundle import EVIDENCE_FILE, REQUESTS_FILE

    if not Path(store).is_file():
        raise console.fail(f"no store at {store}: run prefixscope ingest first (or --store)")
    try:
        with console.api_notes(quiet):
            api.export_bundle(store, directory, gateway=gateway, tokenizer=tokenizer)
    except api.Error as exc:
        raise console.api_error(exc) from None
    for name in (REQUESTS_FILE, EVIDENCE_FILE):
        console.wrote(directory / name, quiet)
