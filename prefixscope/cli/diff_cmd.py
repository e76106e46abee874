"""`prefixscope diff`: where two consecutive turns first diverge, and why."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from prefixscope.cli import console
from prefixscope.cli.exitcodes import ExitCode
from prefixscope.cli.manual import OUTPUT, SCOPE, Command
from prefixscope.cli.options import (
    BlockSize,
    Gateway,
    JsonOut,
    Project,
    Quiet,
    Since,
    StoreOpt,
    Tokenizer,
    Until,
    WhatIf,
    Workers,
    checked_options,
    scope,
    what_if_tuple,
)


class Runner(StrEnum):
    """Where `diff --all` runs."""

    local = "local"
    ray = "ray"


def register(app: typer.Typer) -> None:
    app.command("diff", cls=Command)(diff)


def diff(
    refs: Annotated[list[str] | None, typer.Argument(
        metavar="A B | LOGS",
        help="Two requests A B (store ids, id prefixes, or files holding one request body); "
             "with --session/--all: log files to ingest (else --store).",
        show_default=False)] = None,
    store: StoreOpt = None,
    session: Annotated[str | None, typer.Option(
        "--session", metavar="ID", rich_help_panel=SCOPE,
        help="Diff every consecutive pair of this session.")] = None,
    all_sessions: Annotated[bool, typer.Option(
        "--all", rich_help_panel=SCOPE,
        help="Diff every consecutive pair of every session.")] = False,
    since: Since = None,
    until: Until = None,
    project: Project = None,
    gateway: Gateway = "auto",
    tokenizer: Tokenizer = "auto",
    what_if: WhatIf = None,
    block_size: BlockSize = None,
    context: Annotated[int, typer.Option(
        "--context", "-C", metavar="CHARS", min=0, rich_help_panel=OUTPUT,
        help="Characters of text shown around the divergence.")] = 40,
    worst: Annotated[int, typer.Option(
        "--worst", metavar="N", min=0, rich_help_panel=OUTPUT,
        help="Worst pairs listed with --session/--all.")] = 10,
    workers: Workers = None,
    runner: Annotated[Runner, typer.Option(
        "--runner", metavar="local|ray", rich_help_panel=OUTPUT,
        help="Where --all runs: local, or ray (Ray Data over `export --parquet` output, "
             "with the package's ray extra; docs/scale.md).")] = Runner.local,
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
    from prefixscope.analyses.diff import diff_sessions, diff_two
    from prefixscope.cli.storeopen import maybe_store, open_store
    from prefixscope.distributed import DistributedError
    from prefixscope.parallel import WorkerError
    from prefixscope.prompt import RenderError, RenderOptions
    from prefixscope.store.lookup import LookupError_, resolve_request
    from prefixscope.tokenizers import TokenizerError
    from prefixscope.views.json import diff_json
    from prefixscope.views.terminal.diff import pair_screen, summary_screen

    options = checked_options(RenderOptions(gateway=gateway, tokenizer=tokenizer,
                                            what_if=what_if_tuple(what_if)))
    refs = refs or []
    if session is not None and not session.strip():
        raise console.fail("--session needs a session id (see: prefixscope sql \"select "
                           "distinct session from sessions\")", ExitCode.USAGE)
    pairwise = session is None and not all_sessions
    if pairwise and len(refs) != 2:
        raise console.fail("give two requests A B, or --session S, or --all", ExitCode.USAGE)
    if (runner is Runner.ray and (session is not None or not all_sessions)) or \
            (runner is Runner.local and (parquet_in or parquet_out)):
        raise console.fail("--runner ray runs --all (without --session); --parquet-in and "
                           "--parquet-out go with it", ExitCode.USAGE)
    try:
        if pairwise:
            with maybe_store(store) as st:
                a, b = (resolve_request(r, st) for r in refs)
                report = diff_two(a, b, options, st, block_size=block_size, context=context)
        else:
            with open_store(refs or None, store, quiet=quiet, json_mode=json_out,
                            scope=scope(since, until, project)) as st, \
                    console.counter(json_out, quiet, "diff") as progress:
                if runner is Runner.ray:
                    from prefixscope.distributed.ray_runner import diff_all_ray

                    report = diff_all_ray(st, options, block_size=block_size, context=context,
                                          parquet_in=parquet_in, parquet_out=parquet_out)
                else:
                    report = diff_sessions(st, session, options, block_size=block_size,
                                           context=context, progress=progress,
                                           workers=workers)
    except (LookupError_, LookupError, RenderError, TokenizerError, WorkerError,
            DistributedError) as exc:
        raise console.fail(str(exc).splitlines()[0]) from None
    report = console.redacted(report)  # secrets masked before any view cuts text
    if json_out:
        console.print_json(diff_json(report))
    elif pairwise:
        console.show(pair_screen(report.pairs[0], report.block_size_source, console.screen()))
    else:
        console.show(summary_screen(report, worst, console.screen()), quiet)
