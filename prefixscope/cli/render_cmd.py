"""`prefixscope render`: the prompt one request became upstream, segment by segment."""

from __future__ import annotations

from typing import Annotated

import typer

from prefixscope import api
from prefixscope.cli import console
from prefixscope.cli.manual import OUTPUT, Command
from prefixscope.cli.options import (
    Gateway,
    JsonOut,
    Quiet,
    SkipMissing,
    StoreOpt,
    Tokenizer,
    WhatIf,
    defaults,
)

API = defaults(api.render)  # the library's defaults, read by the options below


def register(app: typer.Typer) -> None:
    app.command("render", cls=Command)(render)


def render(
    request: Annotated[str, typer.Argument(
        metavar="REQUEST", help="A request id (or unique prefix, or the source's own id) in "
                                "the store, or a file holding one request body (- for stdin).")],
    logs: Annotated[list[str] | None, typer.Argument(
        metavar="LOGS", help="Log files to ingest into a temporary store and look the request "
                             "up in.", show_default=False)] = None,
    store: StoreOpt = None,
    skip_missing: SkipMissing = False,
    gateway: Gateway = API["gateway"],
    tokenizer: Tokenizer = API["tokenizer"],
    what_if: WhatIf = None,
    show_text: Annotated[bool, typer.Option(
        "--show-text", rich_help_panel=OUTPUT,
        help="The whole rendered text; piped, exactly the prompt and nothing else (JSON: add "
             "\"text\").")] = False,
    json_out: JsonOut = False,
    quiet: Quiet = 0,
) -> None:
    """Render a request as the upstream model saw it: gateway conversion, chat template and
    the model's tokenizer, with every segment's character and token span.

    Example:
        prefixscope render 3f2a --store cc.duckdb --gateway anthropic-to-openai
        prefixscope render body.json --tokenizer ~/models/Qwen3-8B --json

    More: docs/render.md.
    """
    from contextlib import AbstractContextManager

    from prefixscope.cli.storeopen import input_store, maybe_input_store
    from prefixscope.views.json import render_json
    from prefixscope.views.terminal.render import render_screen

    # LOGS given: the request is looked up in them (--store is not read)
    where: AbstractContextManager[api.Store | None] = (
        input_store(logs, None, quiet=quiet, json_mode=json_out, skip_missing=skip_missing)
        if logs
        else maybe_input_store(store))
    with console.api_errors():
        with where as st:
            result = api.render(st, request, gateway=gateway, tokenizer=tokenizer,
                                what_if=what_if or ())
    if json_out:
        console.print_json(render_json(result, show_text=show_text))
        return
    if show_text and not console.stdout_is_terminal():
        # Piped: the prompt byte for byte (no wrapping, no tab expansion, no colour);
        # what the terminal view adds goes to stderr.
        console.write_raw(result.text)
        for note in result.notes:
            console.note(f"note: {note}", quiet)
        return
    console.show(render_screen(result, show_text, console.screen()), quiet)
