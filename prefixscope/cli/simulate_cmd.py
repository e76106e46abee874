"""`prefixscope simulate`: replay the logs through a cache model and say why tokens missed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from prefixscope.cli import console
from prefixscope.cli.exitcodes import ExitCode
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
    capacity_tokens,
    checked_options,
    scope,
    what_if_tuple,
)
from prefixscope.engines import ENGINES


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)


def simulate(
    logs: Logs = None,
    store: StoreOpt = None,
    engine: Annotated[str, typer.Option(
        "--engine", "-e", help="Cache model: auto (as report chooses it: cached values on "
        "block multiples -> vllm at that block, else the models' hosted API, else vllm when "
        "the log has prompts); " + "; ".join(f"{n} ({s.about})" for n, s in ENGINES.items()
                                              if s.replays != "traces")
        + ".")] = "auto",
    block_size: Annotated[int | None, typer.Option(
        "--block-size", "-b", min=1, help="The engine's unit (default: "
        + ", ".join(f"{n} {s.block_parameter.replace('_', ' ')} {s.block_size}"
                    for n, s in ENGINES.items()
                    if s.block_parameter is not None and s.replays != "traces")
        + ").", show_default=False)] = None,
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
        "--ttl", min=0, help="Hosted engines' retention in seconds (default: "
        + ", ".join(f"{n} {'none' if s.ttl_seconds is None else f'{s.ttl_seconds:g}'}"
                    for n, s in ENGINES.items() if s.ttl_parameter is not None)
        + ").", show_default=False)] = None,
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
                                       "block size and capacity).")] = True,
    gateway: Gateway = "auto",
    tokenizer: Tokenizer = "auto",
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
    from prefixscope.analyses.simulate import (
        AUTO_MIN_REPLAY_REQUESTS,
        SimulateError,
        SimulateOptions,
        simulate_store,
        stored_rows,
    )
    from prefixscope.cli.storeopen import open_store
    from prefixscope.parallel import effective_workers
    from prefixscope.prompt import RenderError, RenderOptions
    from prefixscope.tokenizers import TokenizerError
    from prefixscope.views.json import simulate_json
    from prefixscope.views.terminal.simulate import simulate_screen

    if engine != "auto" and engine not in ENGINES:
        raise console.fail(f"unknown engine {engine!r}; known: auto, {', '.join(ENGINES)}",
                           ExitCode.USAGE)
    render = checked_options(RenderOptions(gateway=gateway, tokenizer=tokenizer))
    curves = [c.strip() for c in (curve or "").split(",") if c.strip()]
    scoped = scope(since, until, project)
    # a temporary store (of LOGS, or a scope's copy) is gone after the command
    keep = save and not logs and scoped is None
    with open_store(logs, store, quiet=quiet, json_mode=json_out, writable=keep,
                    scope=scoped) as st, \
            console.counter(json_out, quiet, "simulate") as progress:
        unit = block_size
        if engine == "auto":
            from prefixscope.findings.evidence import auto_engine

            chosen, unit, why = auto_engine(st.usage_records(), block_size)
            if chosen is None:  # the log's fault, not the command line's: exit 1
                raise console.fail(f"nothing to replay with --engine auto: {why}; pass "
                                   f"--engine (one of {', '.join(ENGINES)})")
            engine = chosen
            console.note(f"replaying with {engine}"
                         + (f" (block {unit})" if unit and engine == "vllm" else "")
                         + f": {why}", quiet)
        # 'N blocks' are the engine's blocks: --block-size (or inferred), else its default
        block = unit or ENGINES[engine].block_size
        options = SimulateOptions(
            engine=engine, unit=unit, trace_block_size=trace_block_size,
            capacity_tokens=capacity_tokens(capacity, block, bytes_per_token),
            cache_output=cache_output, render=render, concurrent=concurrent, ttl_seconds=ttl)
        curve_points = [capacity_tokens(c, block, bytes_per_token) for c in curves]
        try:
            n = effective_workers(workers, st.count(), auto_minimum=AUTO_MIN_REPLAY_REQUESTS)
            report = simulate_store(st, options, what_if=what_if_tuple(what_if),
                                    capacity_curve=curve_points, fit=fit, progress=progress,
                                    workers=n)
        except SimulateError as exc:
            raise console.fail(str(exc), ExitCode.USAGE) from None
        except (RenderError, TokenizerError) as exc:
            raise console.fail(str(exc).splitlines()[0]) from None
        if not report.requests:
            reasons = "; ".join(f"{n:,} {why}" for why, n in report.skipped.items())
            hint = ""
            if not ENGINES[engine].hosted and st.count() and not st.body_count():
                hint = (": a usage-only log (no bodies, no block ids) replays from its usage "
                        "with a hosted engine: `--engine anthropic` (or openai, deepseek)")
            raise console.fail(f"nothing to replay ({reasons or 'no requests'}){hint}")
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
        console.note(f"wrote {plot}", quiet)
    if json_out:
        console.print_json(simulate_json(report, per_request=per_request))
    else:
        console.show(simulate_screen(report, console.screen()), quiet)
