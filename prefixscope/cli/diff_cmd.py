"""`prefixscope diff`: where two consecutive turns first diverge, and why."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from prefixscope import api
from prefixscope.cli import console
from prefixscope.cli.exitcodes import ExitCode
from prefixscope.cli.manual import OUTPUT, SCOPE, Command
from prefixscope.cli.options import (
    BlockSize,
    Gateway,
    JsonOut,
    Project,
    Quiet,
    Runner,
    Since,
    SkipMissing,
    StoreOpt,
    Tokenizer,
    Until,
    WhatIf,
    Workers,
    defaults,
)

API = defaults(api.diff)  # the library's defaults, read by the options below
RUNNER = Runner(API["runner"])


def register(app: typer.Typer) -> None:
    app.command("diff", cls=Command)(diff)


def diff(
    refs: Annotated[list[str] | None, typer.Argument(
        metavar="A B | LOGS",
        help="Two requests A B (store ids, id prefixes, or files holding one request body); "
             "with --session/--all: log files to ingest (else --store).",
        show_default=False)] = None,
    store: StoreOpt = None,
    skip_missing: SkipMissing = False,
    session: Annotated[str | None, typer.Option(
        "--session", metavar="ID", rich_help_panel=SCOPE,
        help="Diff every consecutive pair of this session.")] = None,
    all_sessions: Annotated[bool, typer.Option(
        "--all", rich_help_panel=SCOPE,
        help="Diff every consecutive pair of every session.")] = False,
    since: Since = None,
    until: Until = None,
    project: Project = None,
    gateway: Gateway = API["gateway"],
    tokenizer: Tokenizer = API["tokenizer"],
    what_if: WhatIf = None,
    block_size: BlockSize = None,
    context: Annotated[int, typer.Option(
        "--context", "-C", metavar="CHARS", min=0, rich_help_panel=OUTPUT,
        help="Characters of text shown around the divergence.")] = API["context"],
    worst: Annotated[int, typer.Option(
        "--worst", metavar="N", min=0, rich_help_panel=OUTPUT,
        help="Worst pairs listed with --session/--all.")] = 10,
    workers: Workers = None,
    runner: Annotated[Runner, typer.Option(
        "--runner", metavar="local|ray", rich_help_panel=OUTPUT,
        help="Where --all runs: local, or ray (Ray Data over `export --parquet` output, "
             "with the package's ray extra; docs/scale.md).")]
    = RUNNER,
    parquet_in: Annotated[str | None, typer.Option(
        "--parquet-in", metavar="DIR", rich_help_panel=OUTPUT,
        help="--runner ray: the `export --parquet` directory of this store (path or URI the "
             "workers read; default: exported to a temporary directory).",
        show_default=False)] = None,
    parquet_out: Annotated[str | None, typer.Option(
        "--parquet-out", metavar="DIR", rich_help_panel=OUTPUT,
        help="--runner ray: a new directory the workers write the per-pair results to as "
             "Parquet.", show_default=False)] = None,
    json_out: JsonOut = False,
    quiet: Quiet = 0,
) -> None:
    """Find the first divergent token of consecutive requests, its segment and its cause.

    Example:
        prefixscope diff 3f2a 9c1d --store cc.duckdb --gateway anthropic-to-openai
        prefixscope diff --all sample_logs/ --what-if strip-billing-header

    More: docs/diff.md.
    """
    from prefixscope.cli.storeopen import input_store, maybe_input_store

    refs = refs or []
    pairwise = session is None and not all_sessions
    if pairwise and len(refs) != 2:
        raise console.fail("give two requests A B, or --session S, or --all", ExitCode.USAGE)
    common: dict[str, Any] = {"gateway": gateway, "tokenizer": tokenizer, "what_if": what_if or (),
              "block_size": block_size, "context": context, "runner": runner.value,
              "parquet_in": parquet_in, "parquet_out": parquet_out}
    with console.api_errors():
        if pairwise:
            with maybe_input_store(store) as st:
                report = api.diff(st, *refs, **common)
        else:
            with input_store(refs or None, store, quiet=quiet, json_mode=json_out,
                             skip_missing=skip_missing) as st, \
                    console.counter(json_out, quiet, "diff") as progress, \
                    console.api_notes(quiet):
                report = api.diff(st, session=session, workers=workers, since=since,
                                  until=until, project=project, progress=progress, **common)
    _show(report, pairwise=pairwise, json_out=json_out, worst=worst, quiet=quiet)


def _show(report: Any, *, pairwise: bool, json_out: bool, worst: int, quiet: int) -> None:
    """The diff's view, imported where it is shown, as report's: a --json diff imports no
    rich (the terminal view's tables: 0.055 s of CPU), nor `views.json`'s other shapes."""
    if json_out:
        from prefixscope.views.diffed import diff_json

        console.print_json(diff_json(report))
        return
    from prefixscope.views.terminal.diff import pair_screen, summary_screen

    if pairwise:
        console.show(pair_screen(report.pairs[0], report.block_size_source, console.screen()))
    else:
        console.show(summary_screen(report, worst, console.screen()), quiet)
