"""`prefixscope render`: the prompt one request became upstream, segment by segment."""

from __future__ import annotations

from typing import Annotated

import typer

from prefixscope.cli import console
from prefixscope.cli.manual import OUTPUT, Command
from prefixscope.cli.options import (
    Gateway,
    JsonOut,
    Quiet,
    StoreOpt,
    Tokenizer,
    WhatIf,
    checked_options,
    what_if_tuple,
)


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
    gateway: Gateway = "auto",
    tokenizer: Tokenizer = "auto",
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
    from pathlib import Path

    from prefixscope.analyses.render import render_report
    from prefixscope.cli.storeopen import maybe_store, open_store
    from prefixscope.prompt import RenderError, RenderOptions
    from prefixscope.store.lookup import LookupError_, request_from_file, resolve_request
    from prefixscope.tokenizers import TokenizerError
    from prefixscope.views.json import render_json
    from prefixscope.views.terminal.render import render_screen

    options = checked_options(RenderOptions(gateway=gateway, tokenizer=tokenizer,
                                            what_if=what_if_tuple(what_if)))
    try:
        if request == "-" or Path(request).is_file():
            req = request_from_file(Path(request))
        elif logs:
            with open_store(logs, None, quiet=quiet, json_mode=json_out) as st:
                req = resolve_request(request, st)
        else:
            with maybe_store(store) as st:
                req = resolve_request(request, st)
        result = render_report(req, options)
    except (LookupError_, RenderError, TokenizerError) as exc:
        raise console.fail(str(exc).splitlines()[0]) from None
    result = console.redacted(result)  # secrets masked before any view cuts text
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
