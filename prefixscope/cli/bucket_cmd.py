"""`prefixscope bucket`: hit rate by dimension and what the cached-token distribution says."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from prefixscope.cli import console
from prefixscope.cli.exitcodes import ExitCode
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
    dimensions,
    scope,
    what_if_tuple,
)


def register(app: typer.Typer) -> None:
    app.command("bucket", cls=Command)(bucket)


def bucket(
    logs: Logs = None,
    store: StoreOpt = None,
    skip_missing: SkipMissing = False,
    since: Since = None,
    until: Until = None,
    project: Project = None,
    gateway: Gateway = "auto",
    tokenizer: Tokenizer = "auto",
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
                                      help="Histogram bins.")] = 20,
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
    from prefixscope import api
    from prefixscope.analyses.bucket import bucket_store
    from prefixscope.cli.storeopen import input_store
    from prefixscope.prompt import RenderOptions
    from prefixscope.tokenizers import TokenizerError
    from prefixscope.views.json import bucket_json
    from prefixscope.views.terminal.bucket import bucket_screen

    dims = dimensions(by)
    options = RenderOptions(gateway=gateway, tokenizer=tokenizer, what_if=what_if_tuple(what_if))
    with input_store(logs, store, quiet=quiet, json_mode=json_out,
                     skip_missing=skip_missing) as handle, console.api_notes(quiet):
        try:
            with api._reading(handle, scope(since, until, project)) as st:
                report = bucket_store(st, dims, bins=bins, block_size=block_size,
                                      options=options, explain=not no_explain)
            # ccusage's view, usage and dollars by the same dimensions: the report's own
            # ledger (prompts diffed, every missed token attributed), so both commands name
            # the same cause for the same loss
            spend = None if not dims else api.report(
                handle, by=dims, block_size=block_size, price_per_mtok=price_per_mtok,
                gateway=gateway, tokenizer=tokenizer, what_if=what_if or (), since=since,
                until=until, project=project).breakdown
        except api.Error as exc:  # the store cannot be opened, or the scope is empty
            raise console.api_error(exc) from None
        except ValueError as exc:
            raise console.fail(str(exc), ExitCode.USAGE) from None
        except TokenizerError as exc:
            raise console.fail(str(exc)) from None
    report = console.redacted(report)  # secrets masked before any view or plot cuts text
    if plot is not None:
        from prefixscope.views.plots import plot_bucket

        try:
            drawn = plot_bucket(report, plot)
        except (OSError, ValueError) as exc:
            raise console.fail(f"cannot write {plot}: {exc}") from None
        more = (f" (the {drawn} largest of {len(report.groups)} groups)"
                if drawn < len(report.groups) else "")
        console.wrote(plot, quiet, more)
    if json_out:
        console.print_json(bucket_json(report, spend))
    else:
        screen = bucket_screen(report, console.screen())
        if spend is not None and spend.rows:
            from prefixscope.views.terminal import breakdown_table

            screen.print()
            screen.print(breakdown_table(spend, "usage and dollars by " + ", ".join(dims)))
            screen.print("[dim]lost $ and top loss: the report's ledger (`prefixscope report "
                         "--by " + ",".join(dims) + "` shows the same)[/]")
        console.show(screen, quiet)
