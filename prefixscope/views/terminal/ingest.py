"""`ingest` for a person: what the store holds per format, and what was skipped and why."""

from __future__ import annotations

from rich.table import Table

from prefixscope.store.load import IngestResult
from prefixscope.store.store import UsageSummary
from prefixscope.views.terminal import Screen, count, shown


def _num(v: int | None) -> str:
    return "-" if v is None else f"{v:,}"


def _row(u: UsageSummary, label: str) -> list[str]:
    rate = u.hit_rate
    return [label, _num(u.requests), _num(u.sessions), _num(u.with_body),
            _num(u.prompt_tokens), _num(u.cached_tokens), "-" if rate is None else f"{rate:.2%}",
            _num(u.rate_requests) if u.rate_requests else "-",
            _num(u.rate_prompt_tokens) if u.rate_requests else "-",
            _num(u.duplicates) if u.duplicates else ""]


def ingest_screen(result: IngestResult, store: str, screen: Screen) -> Screen:
    """Per-format totals of the store (each rate beside the requests and prompt tokens it is
    over), every call once when several formats are stored, what this run added, and what
    it skipped."""
    table = Table(title=f"store {shown(store)}", show_edge=False, pad_edge=False,
                  title_justify="left",
                  caption="prompt / cached tokens: summed over the requests reporting them; "
                          "hit rate: cached / prompt tokens over the requests reporting both "
                          "(the two 'over' columns)" + (
                              "; copies: requests that are a second log of a call another log "
                              "file holds too" if result.duplicates else ""),
                  caption_justify="left")
    columns = ["format", "requests", "sessions", "with body", "prompt tokens", "cached tokens",
               "hit rate", "over requests", "over prompt"]
    if result.duplicates:
        columns.append("copies")
    for col in columns:
        table.add_column(col, justify="left" if col == "format" else "right")
    width = len(columns)
    for u in result.summary:
        table.add_row(*_row(u, u.format)[:width])
    if result.totals is not None and (len(result.summary) > 1 or result.duplicates):
        label = "all, each call once" if result.duplicates else "all"
        table.add_row(*_row(result.totals, label)[:width], style="bold")
    if result.summary:
        screen.print(table)
    if result.failed:  # --strict rolled everything back: there is nothing to count
        screen.print(f"nothing stored in {shown(store)}: {result.skipped:,} record(s) or "
                     f"file(s) skipped in {result.files:,} file(s) read")
    else:
        screen.print(
            f"{result.ingested:,} new request(s) in {shown(store)} "
            f"({result.already_present:,} already there) from {result.files:,} file(s); "
            f"{result.sessions:,} session(s); "
            f"{result.skipped:,} skipped")
    if result.duplicates:
        screen.print(f"{result.duplicates:,} request(s) linked as a second log of a call "
                     "another source logged too: totals over all sources count it once")
    for name in result.empty:
        screen.note(f"note: {name} is recognized but holds no model calls")
    if result.engine_logs:
        names = ", ".join(result.engine_logs[:5]) + (", ..." if len(result.engine_logs) > 5
                                                      else "")
        screen.note(f"note: {count(len(result.engine_logs), 'engine log')} ({names}): engine "
                    "statistics, not model calls; read by `prefixscope engine-log` / `report`")
    for e in result.errors[:20]:
        place = f"{e.file}:{e.line}" if e.line is not None else e.file
        screen.warn(f"skipped {place}: {e.reason}")
    if len(result.errors) > 20 or result.skipped > len(result.errors):
        screen.warn(f"... {result.skipped - min(20, len(result.errors)):,} more skipped "
                     "(see --json for the first 100)")
    return screen
