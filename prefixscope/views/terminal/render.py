"""`render` for a person: the prompt the upstream saw, coloured by segment, and its spans."""

from __future__ import annotations

from rich.console import JustifyMethod
from rich.table import Table
from rich.text import Text

from prefixscope.analyses.prompt_spans import RenderResult
from prefixscope.views import wording
from prefixscope.views.terminal import Screen, shown, visible

_PALETTE = ("cyan", "green", "magenta", "yellow", "blue", "red", "bright_cyan",
            "bright_green", "bright_magenta")
ELIDE_AT = 400  # characters of one segment shown without --show-text



def render_screen(result: RenderResult, show_text: bool, screen: Screen) -> Screen:
    """The prompt coloured by segment (long segments elided), then the segment table."""
    text = Text()
    colour_of: dict[str, str] = {}
    for row in result.segments:
        piece = result.text[row.char_start:row.char_end]
        if not show_text and len(piece) > ELIDE_AT:
            half = ELIDE_AT // 2
            piece = f"{piece[:half]} … [{len(piece) - ELIDE_AT:,} chars] … {piece[-half:]}"
        piece = visible(piece)
        if row.segment == "template":
            text.append(piece, style="dim")
        else:
            element = row.segment.split(".", 1)[0]
            colour = colour_of.setdefault(element, _PALETTE[len(colour_of) % len(_PALETTE)])
            text.append(piece, style=colour)
    screen.print(text)
    screen.print()
    table = Table(show_edge=False, title_justify="left",
                  title=f"{len(result.segments):,} segment spans · {result.tokens:,} tokens"
                        + (" (approximate)" if result.approximate else ""))
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("segment", "left"), ("kind", "left"), ("chars", "right"), ("tokens", "right"),
        ("token span", "right"))
    for col, justify in columns:
        table.add_column(col, justify=justify, overflow="fold")
    for row in result.segments:
        table.add_row(shown(row.segment), row.kind, f"{row.char_end - row.char_start:,}",
                      f"{row.token_end - row.token_start:,}",
                      f"{row.token_start:,}–{row.token_end:,}",
                      style="dim" if row.segment == "template" else None)
    screen.print(table)
    screen.print(
        f"[bold]{result.tokens:,} tokens[/] · gateway {shown(result.gateway)} "
        f"({result.gateway_source}) · tokenizer {shown(result.tokenizer)}"
        + (f" · what-if {shown(', '.join(result.what_if))}" if result.what_if else "")
        + (f" · [yellow]approximate ({wording.STAND_IN})[/]"
           if result.approximate else ""))
    for note in result.notes:
        screen.note(f"note: {note}")
    if result.attribution != "exact":
        screen.warn(f"segment attribution is {result.attribution}: see docs/render.md")
    return screen
