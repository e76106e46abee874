"""`prefixscope render`: the prompt one request became upstream, segment by segment."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from prefixscope.cli import console
from prefixscope.cli.options import (
    Gateway,
    JsonOut,
    Quiet,
    StoreOpt,
    Tokenizer,
    WhatIf,
    what_if_tuple,
)

# Colours cycled over the segments of the rendered text (template glue is dim).
_PALETTE = ("cyan", "green", "magenta", "yellow", "blue", "red", "bright_cyan",
            "bright_green", "bright_magenta")
ELIDE_AT = 400  # characters of one segment shown without --show-text


def register(app: typer.Typer) -> None:
    app.command("render")(render)


def render(
    request: Annotated[str, typer.Argument(help="A request id (or unique prefix, or the "
                                                "source's own id) in the store, or a file "
                                                "holding one request body (- for stdin).")],
    logs: Annotated[list[str] | None, typer.Argument(help="Log files to ingest into a "
                                                          "temporary store and look the "
                                                          "request up in.",
                                                     show_default=False)] = None,
    store: StoreOpt = None,
    gateway: Gateway = "auto",
    tokenizer: Tokenizer = "deepseek-v4",
    what_if: WhatIf = None,
    show_text: Annotated[bool, typer.Option("--show-text", help="The whole rendered text "
                                                                "(JSON: add \"text\").")]
    = False,
    json_out: JsonOut = False,
    quiet: Quiet = 0,
) -> None:
    """Render a request as the upstream model saw it: gateway conversion, chat template and
    the model's tokenizer, with every segment's character and token span.

    Example:
        prefixscope render 3f2a --store cc.duckdb --gateway anthropic-to-openai
        prefixscope render body.json --tokenizer ~/models/Qwen3-8B --json
    """
    from pathlib import Path

    from prefixscope.analyses.render import render_report
    from prefixscope.cli.diff_cmd import _maybe_store, checked_options
    from prefixscope.cli.storeopen import open_store
    from prefixscope.prompt import RenderError, RenderOptions
    from prefixscope.store.lookup import LookupError_, request_from_file, resolve_request
    from prefixscope.tokenizers import TokenizerError
    from prefixscope.views.json import render_json

    options = checked_options(RenderOptions(gateway=gateway, tokenizer=tokenizer,
                                            what_if=what_if_tuple(what_if)))
    try:
        if request == "-" or Path(request).is_file():
            req = request_from_file(Path(request))
        elif logs:
            with open_store(logs, None, quiet=quiet, json_mode=json_out) as st:
                req = resolve_request(request, st)
        else:
            with _maybe_store(store) as st:
                req = resolve_request(request, st)
        result = render_report(req, options)
    except (LookupError_, RenderError, TokenizerError) as exc:
        raise console.fail(str(exc).splitlines()[0]) from None
    if json_out:
        console.print_json(render_json(result, show_text=show_text))
        return
    _print(result, show_text, quiet)


def _print(result: Any, show_text: bool, quiet: int) -> None:
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    text = Text()
    colour_of: dict[str, str] = {}
    for row in result.segments:
        piece = result.text[row.char_start:row.char_end]
        if not show_text and len(piece) > ELIDE_AT:
            half = ELIDE_AT // 2
            piece = f"{piece[:half]} … [{len(piece) - ELIDE_AT:,} chars] … {piece[-half:]}"
        if row.segment == "template":
            text.append(piece, style="dim")
        else:
            element = row.segment.split(".", 1)[0]
            colour = colour_of.setdefault(element, _PALETTE[len(colour_of) % len(_PALETTE)])
            text.append(piece, style=colour)
    console.out.print(text)
    console.out.print()
    table = Table(show_edge=False, title_justify="left",
                  title=f"{len(result.segments):,} segment spans · {result.tokens:,} tokens"
                        + (" (approximate)" if result.approximate else ""))
    for col, justify in (("segment", "left"), ("kind", "left"), ("chars", "right"),
                         ("tokens", "right"), ("token span", "right")):
        table.add_column(col, justify=justify, overflow="fold")
    for row in result.segments:
        table.add_row(escape(row.segment), row.kind, f"{row.char_end - row.char_start:,}",
                      f"{row.token_end - row.token_start:,}",
                      f"{row.token_start:,}–{row.token_end:,}",
                      style="dim" if row.segment == "template" else None)
    console.out.print(table)
    console.out.print(
        f"[bold]{result.tokens:,} tokens[/] · gateway {escape(result.gateway)} "
        f"({result.gateway_source}) · tokenizer {escape(result.tokenizer)}"
        + (f" · what-if {escape(', '.join(result.what_if))}" if result.what_if else "")
        + (" · [yellow]approximate (proxy tokenizer for a hosted model)[/]"
           if result.approximate else ""))
    for note in result.notes:
        console.note(f"note: {note}", quiet)
    if result.attribution != "exact":
        console.warn(f"segment attribution is {result.attribution}: see docs/render.md", quiet)
