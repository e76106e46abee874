"""`prefixscope segments`: which parts of the request change between turns, and what it costs."""

from __future__ import annotations

from typing import Annotated

import typer

from prefixscope import api
from prefixscope.cli import console
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
    defaults,
)

API = defaults(api.segments)  # the library's defaults, read by the options below


def register(app: typer.Typer) -> None:
    app.command("segments", cls=Command)(segments)


def segments(
    logs: Logs = None,
    store: StoreOpt = None,
    skip_missing: SkipMissing = False,
    since: Since = None,
    until: Until = None,
    project: Project = None,
    gateway: Gateway = API["gateway"],
    tokenizer: Tokenizer = API["tokenizer"],
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
    from prefixscope.cli.storeopen import input_store
    from prefixscope.views.terminal.segments import segments_screen

    with input_store(logs, store, quiet=quiet, json_mode=json_out,
                     skip_missing=skip_missing) as handle, console.api_notes(quiet), \
            console.counter(json_out, quiet, "segments") as progress:
        with console.api_errors():
            result = api.segments(handle, by=by, tokens=not no_tokens, show_text=show_text,
                                  gateway=gateway, tokenizer=tokenizer,
                                  what_if=what_if or (), workers=workers, since=since,
                                  until=until, project=project, progress=progress)
    if json_out:
        console.print_json(result.to_dict())
    else:
        console.show(segments_screen(list(result.reports), top, console.screen()), quiet)
