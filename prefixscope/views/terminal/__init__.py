"""Typed results -> what a person reads in a terminal (rich markup, tables, histograms).

A view never writes anywhere: it fills a `Screen` (stdout renderables in order, plus
warnings and notes for stderr), and the command line decides where each goes and
what `--quiet` hides. Every piece of log text a view shows goes through rich's
`escape`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from prefixscope.views.invisible import escaped

# C0 and C1 control characters but newline and tab: a log's ESC sequences, bells and
# carriage returns would otherwise act on the reader's terminal.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Characters a terminal draws as nothing, or that reorder what is drawn (`views.invisible`):
# a tool name or an excerpt holding one is shown with it escaped, so what is read is what
# is there.


@dataclass
class Screen:
    """What one command shows: `print` calls for stdout, warnings and notes for stderr."""

    width: int = 200  # the terminal's width (tables that fit it need to know)
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # plain text, shown unless -qq
    notes: list[str] = field(default_factory=list)  # plain text, shown unless -q

    def print(self, *objects: Any, **kwargs: Any) -> None:
        """Queue `rich.Console.print(*objects, **kwargs)` for stdout.

        A table's title and caption are printed as lines of their own, above and below
        it: rich wraps them at the table's width, which cuts a title mid-phrase whenever
        the table is narrower than what its title says."""
        from rich.table import Table

        if len(objects) == 1 and isinstance(objects[0], Table) and (
                objects[0].title or objects[0].caption):
            table = objects[0]
            title, caption = table.title, table.caption
            table.title = table.caption = None
            for line in phrase_lines(str(title), self.width) if title else ():
                self.calls.append(((f"[italic]{line}[/]",), {}))
            self.calls.append(((table,), kwargs))
            if caption:
                self.calls.append(((f"[dim]{caption}[/]",), {}))
            return
        self.calls.append((objects, kwargs))

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def note(self, message: str) -> None:
        self.notes.append(message)


def phrase_lines(markup: str, width: int) -> list[str]:
    """A title (rich markup) as lines no wider than `width`, broken only between its
    " · " phrases (a phrase wider than the line is left whole for the terminal)."""
    from rich.text import Text

    lines: list[str] = []
    for phrase in markup.split(" · "):
        joined = f"{lines[-1]} · {phrase}" if lines else phrase
        if lines and Text.from_markup(joined).cell_len > width:
            lines.append(phrase)
        elif lines:
            lines[-1] = joined
        else:
            lines.append(phrase)
    return lines


def visible(text: str) -> str:
    """`text` with control characters shown as ``\\xNN`` instead of acting on a terminal, and
    invisible or reordering ones (bidi controls, zero-width characters) as ``\\uNNNN``."""
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    return escaped(text)


def one_line(text: str) -> str:
    """`visible`, and a newline shown as ``\\x0a``: a file name or a log value inside a
    one-line message (an error, a warning, a progress bar) cannot start a line of its own."""
    return visible(text).replace("\n", "\\x0a")


def shown(text: str) -> str:
    """Log text for rich markup: control characters as ``\\xNN``, markup escaped."""
    from rich.markup import escape

    return escape(visible(text))


def count(n: int, noun: str) -> str:
    """"1 request", "2,000 requests"."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def percent(v: float | None) -> str:
    return "-" if v is None else f"{v:.2%}"


def hit_rate_table(*, titled: bool = True, **columns: str) -> Any:
    """The one-row table of hit rates (observed, predicted, ideal, ...) `simulate` and
    `report` open with: column name -> the cell, already formatted (`titled`: under the
    title "hit rate (cached / prompt tokens)"; else the caller says what it is over)."""
    from rich.table import Table

    table = Table(show_edge=False, title="hit rate (cached / prompt tokens)" if titled
                  else None, title_justify="left")
    for name in columns:
        table.add_column(name.replace("_", " "), justify="right")
    table.add_row(*columns.values())
    return table


def breakdown_table(b: Any, title: str) -> Any:
    """A `findings.breakdown.Breakdown` as a table: one row per group, a total row."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(show_edge=False, title=title, title_justify="left")
    for dim in b.by:
        table.add_column(dim, no_wrap=True)
    for col in ("requests", "prompt", "cached", "hit rate", "spend", "lost $"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("top loss")

    def usd(v: float | None) -> str:
        return "-" if v is None else (f"${v:,.4f}" if v and abs(v) < 0.01 else f"${v:,.2f}")

    for r in b.rows:
        table.add_row(*(escape(visible("(not logged)" if r.key[d] is None else str(r.key[d])))
                        for d in b.by), f"{r.requests:,}", f"{r.prompt_tokens:,}",
                      f"{r.cached_tokens:,}", percent(r.hit_rate), usd(r.spend_usd),
                      usd(r.lost_usd), r.top_cause or "-")
    spend = [r.spend_usd for r in b.rows if r.spend_usd is not None]
    lost = [r.lost_usd for r in b.rows if r.lost_usd is not None]
    prompt = sum(r.prompt_tokens for r in b.rows)
    cached = sum(r.cached_tokens for r in b.rows)
    table.add_row(*(["total"] + [""] * (len(b.by) - 1)), f"{sum(r.requests for r in b.rows):,}",
                  f"{prompt:,}", f"{cached:,}", percent(cached / prompt if prompt else None),
                  usd(sum(spend)) if spend else "-", usd(sum(lost)) if lost else "-", "",
                  style="bold")
    return table
