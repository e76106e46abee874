"""`prefixscope bucket`: hit rate by dimension and what the cached-token distribution says."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from prefixscope import api
from prefixscope.cli import console
from prefixscope.cli.manual import ENGINE, MODEL, OUTPUT, Command
from prefixscope.cli.options import (
    BlockSize,
    By,
    Gateway,
    JsonOut,
    Logs,
    Project,
    Quiet,
    Since,
    SkipMissing,
    StoreOpt,
    Tokenizer,
    Until,
    WhatIf,
    defaults,
)

if TYPE_CHECKING:
    from prefixscope.views.results import BucketResult

API = defaults(api.bucket)  # the library's defaults, read by the options below


def register(app: typer.Typer) -> None:
    app.command("bucket", cls=Command)(bucket)


def bucket(
    logs: Logs = None,
    store: StoreOpt = None,
    skip_missing: SkipMissing = False,
    since: Since = None,
    until: Until = None,
    project: Project = None,
    gateway: Gateway = API["gateway"],
    tokenizer: Tokenizer = API["tokenizer"],
    what_if: WhatIf = None,
    no_explain: Annotated[bool, typer.Option(
        "--no-explain", rich_help_panel=MODEL,
        help="Do not render requests to explain spikes.")] = False,
    block_size: BlockSize = None,
    price_per_mtok: Annotated[float | None, typer.Option(
        "--price-per-mtok", metavar="USD", min=0.0, rich_help_panel=ENGINE,
        help="Dollars per million uncached prompt tokens of a self-hosted engine (hosted "
             "APIs: their list prices).", show_default=False)] = None,
    by: By = None,
    bins: Annotated[int, typer.Option("--bins", metavar="N", min=1, rich_help_panel=OUTPUT,
                                      help="Histogram bins.")] = API["bins"],
    plot: Annotated[Path | None, typer.Option(
        "--plot", metavar="FILE", rich_help_panel=OUTPUT,
        help="Write the histograms as a PNG or SVG file.", show_default=False)] = None,
    json_out: JsonOut = False,
    quiet: Quiet = 0,
) -> None:
    """Token-weighted hit rate per group, the cached-token histogram, spikes at exact
    constants, the block size, and the template boundary each constant is.

    Example:
        prefixscope bucket one-api.db --by endpoint
        prefixscope bucket --store cc.duckdb --by endpoint,day --plot cached.png

    More: docs/investigate.md.
    """
    from prefixscope.cli.storeopen import input_store
    from prefixscope.views.terminal.bucket import bucket_screen

    with input_store(logs, store, quiet=quiet, json_mode=json_out,
                     skip_missing=skip_missing) as handle, console.api_notes(quiet):
        with console.api_errors():
            result = api.bucket(handle, by=by, bins=bins, block_size=block_size,
                                price_per_mtok=price_per_mtok, explain=not no_explain,
                                gateway=gateway, tokenizer=tokenizer, what_if=what_if or (),
                                since=since, until=until, project=project)
    if plot is not None:
        _plot(result, plot, quiet)
    if json_out:
        console.print_json(result.to_dict())
    else:
        console.show(bucket_screen(result.report, console.screen(), result.spend,
                                   result.by), quiet)


def _plot(result: BucketResult, plot: Path, quiet: int) -> None:
    from prefixscope.views.plots import plot_bucket

    report = result.report
    try:
        drawn = plot_bucket(report, plot)
    except (OSError, ValueError) as exc:
        raise console.fail(f"cannot write {plot}: {exc}") from None
    more = (f" (the {drawn} largest of {len(report.groups)} groups)"
            if drawn < len(report.groups) else "")
    console.wrote(plot, quiet, more)
