"""`prefixscope simulate`: replay the logs through a cache model and say why tokens missed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from prefixscope import api
from prefixscope.cli import console
from prefixscope.cli.manual import ENGINE, OUTPUT, Command
from prefixscope.cli.options import (
    BlockSize,
    BytesPerToken,
    Capacity,
    Engine,
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

API = defaults(api.simulate)  # the library's defaults, read by the options below


def register(app: typer.Typer) -> None:
    app.command("simulate", cls=Command)(simulate)


def simulate(
    logs: Logs = None,
    store: StoreOpt = None,
    skip_missing: SkipMissing = False,
    since: Since = None,
    until: Until = None,
    project: Project = None,
    gateway: Gateway = API["gateway"],
    tokenizer: Tokenizer = API["tokenizer"],
    what_if: WhatIf = None,
    engine: Engine = API["engine"],
    block_size: BlockSize = None,
    capacity: Capacity = None,
    bytes_per_token: BytesPerToken = None,
    fit: Annotated[bool, typer.Option(
        "--fit", rich_help_panel=ENGINE,
        help="Fit the block size and capacity that best reproduce the observed cached tokens, "
             "and replay at the fit (without it, only when the log got less cache than an "
             "unlimited one predicts).")] = API["fit"],
    trace_block_size: Annotated[int | None, typer.Option(
        "--trace-block-size", metavar="N", min=1, rich_help_panel=ENGINE,
        help="Tokens per id of a block-hash trace (Mooncake 512, Bailian 16; default: the "
             "trace's own, else 512).", show_default=False)] = None,
    ttl: Annotated[float | None, typer.Option(
        "--ttl", metavar="SECONDS", min=0, rich_help_panel=ENGINE,
        help="Hosted engines' retention (default: Anthropic 300, OpenAI 600 idle, DeepSeek "
             "none).", show_default=False)] = None,
    cache_output: Annotated[bool, typer.Option(
        "--cache-output", rich_help_panel=ENGINE,
        help="Also cache the logged output's tokens.")] = False,
    concurrent: Annotated[bool, typer.Option(
        "--concurrent", rich_help_panel=ENGINE,
        help="Overlapping requests overlap: a running request's blocks cannot be evicted "
             "(needs logged durations).")] = False,
    curve: Annotated[str | None, typer.Option(
        "--capacity-curve", metavar="SIZE,...", rich_help_panel=ENGINE,
        help="Capacities to replay, comma-separated (each like --capacity).",
        show_default=False)] = None,
    plot: Annotated[Path | None, typer.Option(
        "--plot", metavar="FILE", rich_help_panel=OUTPUT,
        help="Write the capacity curve as PNG or SVG.", show_default=False)] = None,
    per_request: Annotated[bool, typer.Option(
        "--per-request", rich_help_panel=OUTPUT,
        help="Every request's observed, predicted and ideal cached tokens and misses (with "
             "--json).")] = False,
    save: Annotated[bool, typer.Option(
        "--save/--no-save", rich_help_panel=OUTPUT,
        help="Also store the per-request results in the store's `simulated` table (with "
             "--store; replaces an earlier run of the same engine, block size and capacity). "
             "Off by default: simulate only reads the store.")
    ] = API["save"],
    workers: Annotated[int | None, typer.Option(
        "--workers", "-j", metavar="N", min=1, rich_help_panel=OUTPUT,
        help="Processes running the independent replays side by side (predicted and ideal, "
             "--fit's candidates, --capacity-curve points, what-ifs; default: the machine's "
             "cores on a store of 500 requests or more; 1: this process only). Results do "
             "not depend on it.", show_default=False)] = None,
    json_out: JsonOut = False,
    quiet: Quiet = 0,
) -> None:
    """Replay the requests through a faithful cache model: observed vs predicted vs ideal
    cached tokens, the class of every uncached token, what a fix would gain.

    Example:
        prefixscope simulate sample_logs/ --engine vllm --fit
        prefixscope simulate mooncake.jsonl --capacity-curve 1e6,1e7,1e8 --plot curve.png

    More: docs/simulate.md.
    """
    from prefixscope.cli.storeopen import input_store
    from prefixscope.views.json import simulate_json
    from prefixscope.views.terminal.simulate import simulate_screen

    with console.api_errors():
        with input_store(logs, store, quiet=quiet, json_mode=json_out,
                         skip_missing=skip_missing) as st, \
                console.counter(json_out, quiet, "simulate") as progress, \
                console.api_notes(quiet):
            report = api.simulate(
                st, engine=engine, block_size=block_size, capacity=capacity,
                bytes_per_token=bytes_per_token, trace_block_size=trace_block_size,
                cache_output=cache_output, ttl=ttl, concurrent=concurrent, fit=fit,
                capacities=[c for c in (curve or "").split(",") if c.strip()], save=save,
                gateway=gateway, tokenizer=tokenizer, what_if=what_if or (), workers=workers,
                since=since, until=until, project=project, progress=progress)
    if plot is not None:
        from prefixscope.views.plots import plot_capacity_curve

        try:
            plot_capacity_curve(report, plot)
        except (OSError, ValueError) as exc:
            raise console.fail(f"cannot write {plot}: {exc}") from None
        console.wrote(plot, quiet)
    if json_out:
        console.print_json(simulate_json(report, per_request=per_request))
    else:
        console.show(simulate_screen(report, console.screen()), quiet)
