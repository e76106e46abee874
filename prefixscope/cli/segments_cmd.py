"""`prefixscope segments`: which parts of the request change between turns, and what it costs."""

from __future__ import annotations

from typing import Annotated

import typer

from prefixscope.cli import console
from prefixscope.cli.exitcodes import ExitCode
from prefixscope.cli.manual import MODEL, OUTPUT, Command
from prefixscope.cli.options import (
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
    Workers,
    dimensions,
    scope,
    what_if_tuple,
)


def register(app: typer.Typer) -> None:
    app.command("segments", cls=Command)(segments)


def segments(
    logs: Logs = None,
    store: StoreOpt = None,
    skip_missing: SkipMissing = False,
    since: Since = None,
    until: Until = None,
    project: Project = None,
    gateway: Gateway = "auto",
    tokenizer: Tokenizer = "auto",
    what_if: WhatIf = None,
    no_tokens: Annotated[bool, typer.Option(
        "--no-tokens", rich_help_panel=MODEL,
        help="Do not render: change rates only, no token positions.")] = False,
    by: By = None,
    top: Annotated[int, typer.Option("--top", metavar="N", min=1, rich_help_panel=OUTPUT,
                                     help="Segments shown per group.")] = 15,
    show_text: Annotated[bool, typer.Option("--show-text", rich_help_panel=OUTPUT,
                                            help="Longer, unredacted previews.")] = False,
    workers: Workers = None,
    json_out: JsonOut = False,
    quiet: Quiet = 0,
) -> None:
    """Census of every request segment: how often it changes between turns, and how many
    tokens a change there invalidates.

    Example:
        prefixscope segments langfuse-export.jsonl --gateway anthropic-to-openai

    More: docs/segments.md.
    """
    from prefixscope.analyses.segments import segments_store
    from prefixscope.cli.storeopen import open_store
    from prefixscope.parallel import WorkerError
    from prefixscope.prompt import RenderOptions
    from prefixscope.tokenizers import TokenizerError
    from prefixscope.views.json import segments_json
    from prefixscope.views.terminal.segments import segments_screen

    dims = dimensions(by)
    options = RenderOptions(gateway=gateway, tokenizer=tokenizer, what_if=what_if_tuple(what_if))
    with open_store(logs, store, quiet=quiet, json_mode=json_out, skip_missing=skip_missing,
                    scope=scope(since, until, project)) as st, \
            console.counter(json_out, quiet, "segments") as progress:
        try:
            reports = segments_store(st, dims, options=options, with_tokens=not no_tokens,
                                     show_text=show_text, progress=progress,
                                     workers=workers)
        except ValueError as exc:
            raise console.fail(str(exc), ExitCode.USAGE) from None
        except (TokenizerError, WorkerError) as exc:
            raise console.fail(str(exc)) from None
    reports = console.redacted(reports)  # secrets masked before any view cuts text
    if json_out:
        console.print_json(segments_json(reports, dims))
    else:
        console.show(segments_screen(reports, top, console.screen()), quiet)
