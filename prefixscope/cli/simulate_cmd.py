"""`prefixscope simulate`: replay the logs through a cache model and say why tokens missed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from prefixscope import api
from prefixscope.cli import console
from prefixscope.cli.options import (
    Gateway,
    JsonOut,
    Logs,
    Project,
    Quiet,
    Since,
    StoreOpt,
    Tokenizer,
    Until,
    WhatIf,
    defaults,
)
from prefixscope.engines import ENGINES

API = defaults(api.simulate)  # the library's defaults, read by the options below


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)


def simulate(
    logs: Logs = None,
    store: StoreOpt = None,
    engine: Annotated[str, typer.Option(
        "--engine", "-e", help="Cache model: auto (as report chooses it: cached values on "
        "block multiples -> vllm at that block, else the models' hosted API, else vllm when "
        "the log has prompts), " + ", ".join(ENGINES) + ".")] = API["engine"],
    block_size: Annotated[int | None, typer.Option(
        "--block-size", "-b", min=1, help="The engine's unit: vLLM block (16), SGLang page (1), "
        "LMCache chunk (256), OpenAI step (128).", show_default=False)] = None,
    capacity: Annotated[str | None, typer.Option(
        "--capacity", help="Cache size: N (tokens), 'N blocks', or NGiB with "
        "--bytes-per-token (default: unlimited).", show_default=False)] = None,
    bytes_per_token: Annotated[int | None, typer.Option(
        "--bytes-per-token", min=1, help="KV bytes per token, for a capacity in GiB/MiB.",
        show_default=False)] = None,
    trace_block_size: Annotated[int | None, typer.Option(
        "--trace-block-size", min=1, help="Tokens per id of a block-hash trace (Mooncake 512, "
        "Bailian 16; default: the trace's own, else 512).", show_default=False)] = None,
    cache_output: Annotated[bool, typer.Option("--cache-output", help="Also cache the logged "
                                               "output's tokens.")] = False,
    ttl: Annotated[float | None, typer.Option(
        "--ttl", min=0, help="Hosted engines' retention in seconds (default: Anthropic 300, "
        "OpenAI 600 idle, DeepSeek none).", show_default=False)] = None,
    concurrent: Annotated[bool, typer.Option("--concurrent", help="Overlapping requests "
                                             "overlap: a running request's blocks cannot be "
                                             "evicted (needs logged durations).")] = False,
    fit: Annotated[bool, typer.Option("--fit", help="Search the block size and capacity that "
                                      "best reproduce the observed cached tokens.")] = False,
    curve: Annotated[str | None, typer.Option(
        "--capacity-curve", help="Capacities C1,C2,... (each like --capacity) to replay.",
        show_default=False)] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write the capacity curve as PNG "
                                              "or SVG.", show_default=False)] = None,
    per_request: Annotated[bool, typer.Option("--per-request", help="Every request's observed,"
                                              " predicted and ideal cached tokens and misses "
                                              "(with --json).")] = False,
    save: Annotated[bool, typer.Option("--save/--no-save", help="Store the per-request "
                                       "results in the store's `simulated` table (with "
                                       "--store; replaces an earlier run of the same engine, "
                                       "block size and capacity).")]
    = API["save"],
    gateway: Gateway = API["gateway"],
    tokenizer: Tokenizer = API["tokenizer"],
    what_if: WhatIf = None,
    workers: Annotated[int | None, typer.Option(
        "--workers", "-j", min=1, help="Processes running the independent replays side by side "
        "(predicted and ideal, --fit's candidates, --capacity-curve points, what-ifs; "
        "default: the machine's cores on a store of 500 requests or more; 1: this process "
        "only). Results do not depend on it.", show_default=False)] = None,
    json_out: JsonOut = False,
    since: Since = None,
    until: Until = None,
    project: Project = None,
    quiet: Quiet = 0,
) -> None:
    """Replay the requests through a faithful cache model: observed vs predicted vs ideal
    cached tokens, the class of every uncached token, what a fix would gain.

    Example:
        prefixscope simulate sample_logs/ --engine vllm --fit
        prefixscope simulate mooncake.jsonl --capacity-curve 1e6,1e7,1e8 --plot curve.png
    """
    from prefixscope.cli.storeopen import input_store
    from prefixscope.views.json import simulate_json
    from prefixscope.views.terminal.simulate import simulate_screen

    try:
        with input_store(logs, store, quiet=quiet, json_mode=json_out) as st, \
                console.counter(json_out, quiet, "simulate") as progress, \
                console.api_notes(quiet):
            report = api.simulate(
                st, engine=engine, block_size=block_size, capacity=capacity,
                bytes_per_token=bytes_per_token, trace_block_size=trace_block_size,
                cache_output=cache_output, ttl=ttl, concurrent=concurrent, fit=fit,
                capacities=[c for c in (curve or "").split(",") if c.strip()], save=save,
                gateway=gateway, tokenizer=tokenizer, what_if=what_if or (), workers=workers,
                since=since, until=until, project=project, progress=progress)
    except api.Error as exc:
        raise console.api_error(exc) from None
    if plot is not None:
        from prefixscope.views.plots import plot_capacity_curve

        try:
            plot_capacity_curve(report, plot)
        except (OSError, ValueError) as exc:
            raise console.fail(f"cannot write {plot}: {exc}") from None
        console.note(f"wrote {plot}", quiet)
    if json_out:
        console.print_json(simulate_json(report, per_request=per_request))
    else:
        console.show(simulate_screen(report, console.screen()), quiet)
