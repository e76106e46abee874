"""`prefixscope simulate`: replay the logs through a cache model and say why tokens missed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from prefixscope.cli import console
from prefixscope.cli.exitcodes import ExitCode
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
    StoreOpt,
    Tokenizer,
    Until,
    WhatIf,
    capacity_tokens,
    checked_options,
    scope,
    what_if_tuple,
)
from prefixscope.engines import ENGINES


def register(app: typer.Typer) -> None:
    app.command("simulate", cls=Command)(simulate)


def simulate(
    logs: Logs = None,
    store: StoreOpt = None,
    since: Since = None,
    until: Until = None,
    project: Project = None,
    gateway: Gateway = "auto",
    tokenizer: Tokenizer = "auto",
    what_if: WhatIf = None,
    engine: Engine = "auto",
    block_size: BlockSize = None,
    capacity: Capacity = None,
    bytes_per_token: BytesPerToken = None,
    fit: Annotated[bool, typer.Option(
        "--fit", rich_help_panel=ENGINE,
        help="Fit the block size and capacity that best reproduce the observed cached tokens, "
             "and replay at the fit (without it, only when the log got less cache than an "
             "unlimited one predicts).")] = False,
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
        help="Store the per-request results in the store's `simulated` table (with --store; "
             "replaces an earlier run of the same engine, block size and capacity).")] = True,
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
    from prefixscope.analyses.simulate import (
        AUTO_MIN_REPLAY_REQUESTS,
        HOSTED,
        SimulateError,
        SimulateOptions,
        stored_rows,
    )
    from prefixscope.cli.storeopen import open_store
    from prefixscope.findings.defaults import (
        USAGE_ONLY,
        choose_engine,
        replay_with_defaults,
        usage_only_fix,
    )
    from prefixscope.parallel import effective_workers
    from prefixscope.prompt import RenderError, RenderOptions
    from prefixscope.tokenizers import TokenizerError
    from prefixscope.views.json import simulate_json
    from prefixscope.views.terminal.simulate import simulate_screen

    if engine != "auto" and engine not in ENGINES:
        raise console.fail(f"unknown engine {engine!r}; known: auto, {', '.join(ENGINES)}",
                           ExitCode.USAGE)
    render = checked_options(RenderOptions(gateway=gateway, tokenizer=tokenizer))
    curve_points = [capacity_tokens(c.strip(), block_size, bytes_per_token)
                    for c in (curve or "").split(",") if c.strip()]
    scoped = scope(since, until, project)
    # a temporary store (of LOGS, or a scope's copy) is gone after the command
    keep = save and not logs and scoped is None
    with open_store(logs, store, quiet=quiet, json_mode=json_out, writable=keep,
                    scope=scoped) as st, \
            console.counter(json_out, quiet, "simulate") as progress:
        records = st.usage_records()
        chosen = choose_engine(records, engine, block_size, with_bodies=bool(st.body_count()))
        if chosen.engine is None:  # the log's fault, not the command line's: exit 1
            fix = "" if "--engine" in chosen.why else (
                f"; pass --engine (one of {', '.join(ENGINES)})")
            raise console.fail(f"--engine auto cannot replay this log: {chosen.why}{fix}")
        if engine == "auto":
            console.note(f"replaying with {chosen.engine}: {chosen.why}", quiet)
        options = SimulateOptions(
            engine=chosen.engine, unit=chosen.unit, trace_block_size=trace_block_size,
            capacity_tokens=capacity_tokens(capacity, chosen.unit, bytes_per_token),
            cache_output=cache_output, render=render, concurrent=concurrent, ttl_seconds=ttl)
        try:
            n = effective_workers(workers, st.count(), auto_minimum=AUTO_MIN_REPLAY_REQUESTS)
            replayed = replay_with_defaults(
                st, options, unit_source=chosen.unit_source,
                capacity_given=capacity is not None, fit=fit, what_if=what_if_tuple(what_if),
                capacity_curve=curve_points, progress=progress, workers=n)
        except SimulateError as exc:
            raise console.fail(str(exc), ExitCode.USAGE) from None
        except (RenderError, TokenizerError) as exc:
            raise console.fail(str(exc).splitlines()[0]) from None
        report = replayed.report
        if not report.requests:
            reasons = "; ".join(f"{n:,} {why}" for why, n in report.skipped.items())
            if chosen.engine not in HOSTED and st.count() and not st.body_count():
                raise console.fail(f"{USAGE_ONLY}: {chosen.engine} has no prompt to replay; "
                                   f"replay it from its usage with {usage_only_fix(records)}")
            raise console.fail(f"nothing to replay ({reasons or 'no requests'})")
        if keep:
            st.save_simulation(report.engine, report.unit, report.capacity_tokens,
                               stored_rows(report))
            console.note(f"saved {report.requests:,} results in {st.path} (table simulated)",
                         quiet)
    report = console.redacted(report)  # secrets masked before any view or plot cuts text
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
        console.show(simulate_screen(report, console.screen(), unit_source=replayed.unit_source,
                                     capacity_source=replayed.capacity_source), quiet)
