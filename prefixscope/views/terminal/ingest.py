"""`ingest` for a person: what the store holds per format, and what was skipped and why."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.markup import escape
from rich.table import Table

from prefixscope.store.load import IngestResult
from prefixscope.views.terminal import Screen


def ingest_screen(result: IngestResult, summary: Sequence[Mapping[str, Any]], store: str,
                  screen: Screen) -> Screen:
    """Per-format totals of the store, what this run added, and what it skipped."""
    def num(v: object) -> str:
        return "-" if v is None else f"{v:,}"

    table = Table(title=f"store {escape(store)}", show_edge=False, pad_edge=False,
                  title_justify="left")
    for col in ("format", "requests", "sessions", "with body", "prompt tokens", "cached tokens",
                "hit rate"):
        table.add_column(col, justify="left" if col == "format" else "right")
    for row in summary:
        rate = row["hit_rate"]
        table.add_row(row["source_format"], num(row["requests"]), num(row["sessions"]),
                      num(row["with_body"]), num(row["prompt_tokens"]), num(row["cached_tokens"]),
                      "-" if rate is None else f"{rate:.2%}")
    if summary:
        screen.print(table)
    screen.print(
        f"{result.ingested:,} new request(s) in {escape(store)} "
        f"({result.already_present:,} already there) from {result.files:,} file(s); "
        f"{result.sessions:,} session(s); "
        f"{result.skipped:,} skipped")
    if result.duplicates:
        screen.print(f"{result.duplicates:,} request(s) linked as a second log of a call "
                     "another source logged too: totals over all sources count it once")
    for name in result.empty:
        screen.note(f"note: {name} is recognized but holds no model calls")
    for e in result.errors[:20]:
        place = f"{e.file}:{e.line}" if e.line is not None else e.file
        screen.warn(f"skipped {place}: {e.reason}")
    if len(result.errors) > 20 or result.skipped > len(result.errors):
        screen.warn(f"... {result.skipped - min(20, len(result.errors)):,} more skipped "
                     "(see --json for the first 100)")
    return screen
