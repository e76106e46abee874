"""`segments` for a person: the segments ranked by the tokens their changes invalidate."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from prefixscope.analyses.segments import SegmentsReport, SegmentStats
from prefixscope.views.terminal import Screen, shown


def segments_screen(reports: Sequence[SegmentsReport], top: int, screen: Screen) -> Screen:
    """One ranked table (and headline) per group."""
    if not reports:
        screen.print("no requests in the store: nothing to census")
    for report in reports:
        _report(report, top, screen)
    return screen


def _fmt(v: float | None, spec: str = ",.0f") -> str:
    return "-" if v is None else format(v, spec)


def _report(report: SegmentsReport, top: int, screen: Screen) -> None:
    t = report.totals
    key = ", ".join(f"{k}={v}" for k, v in report.group.items())
    label = shown(f"[{key}] ") if key else ""
    if not t.requests:
        screen.print(f"{label}no request with a body: nothing to census")
        if t.without_body:
            screen.warn(f"{label}{t.without_body:,} request(s) have no request body in the "
                         "log (billing logs like new-api's and Claude Code transcripts store "
                         "none): ingest a log with bodies (Langfuse, raw captures) for the same "
                         "traffic")
        return
    table = Table(title=f"{label}{t.requests:,} requests with a body · {t.pairs:,} consecutive "
                        "same-session pairs · ranked by invalidated tokens",
                  show_edge=False, title_justify="left")
    rows: list[tuple[str, ...]] = []
    for s in report.segments[:top]:
        how = ", ".join(f"{k} {v}" for k, v in s.change_kinds.items())
        if s.unique_per_request:
            how = (how + "; unique per request") if how else "unique per request"
        rows.append((shown(s.segment), f"{s.distinct:,}/{s.requests:,}",
                     "-" if s.change_rate is None else f"{s.change_rate:.1%} of {s.pairs:,}",
                     how, _fmt(s.token_start_median),
                     _fmt(s.tokens_after_median), _fmt(s.invalidated_tokens), shown(s.preview)))
    headers: tuple[str, ...] = ("segment", "distinct/held", "changed/pairs", "how", "at token",
                                "after", "invalidated", "preview")
    widest = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    # Fit the terminal: numbers never wrap, "how" wraps if it must, the preview takes the
    # rest -- or is left out (it stays in --json) when fewer than 20 columns are left for it.
    fixed = sum(w for h, w in zip(headers, widest, strict=True) if h not in ("how", "preview"))
    room = screen.width - fixed - 3 * len(headers)
    how_width = min(widest[3], 30)
    with_preview = room - how_width >= 20
    if not with_preview:
        headers, rows = headers[:-1], [r[:-1] for r in rows]
        how_width = max(10, min(widest[3], room + 3))
    for header, width in zip(headers, widest, strict=False):
        if header == "how":
            table.add_column(header, width=how_width)
        elif header == "preview":
            table.add_column(header, no_wrap=True, overflow="ellipsis",
                             width=min(widest[7], room - how_width))
        else:
            table.add_column(header, no_wrap=True, min_width=width,
                             justify="left" if header == "segment" else "right")
    for row in rows:
        table.add_row(*row)
    screen.print(table)
    headline = _headline(report.segments[0]) if report.segments else None
    if headline:
        screen.print(headline, soft_wrap=True)
    if len(report.segments) > top:
        screen.note(f"... {len(report.segments) - top} more segment(s) (--top, --json)")
    if t.without_body:
        screen.warn(f"{label}{t.without_body:,} request(s) without a body in the log were not "
                     "censused")


def _headline(top: SegmentStats) -> str | None:
    """One sentence on the top-ranked segment, when it changes in most pairs."""

    if top.change_rate is None or top.change_rate < 0.5:
        return None
    how = "is unique per request and " if top.unique_per_request else ""
    kinds = ", ".join(k for k, _ in sorted(top.change_kinds.items(), key=lambda kv: -kv[1]))
    where = ""
    if top.token_start_median is not None and top.tokens_after_median is not None:
        where = (f": from token {top.token_start_median:,.0f} on, a median "
                 f"{top.tokens_after_median:,.0f} tokens are recomputed each time")
    return (f"→ [bold]{shown(top.segment)}[/] ({shown(top.preview)}) {how}changes in "
            f"{top.change_rate:.0%} of consecutive pairs ({kinds}){where}")
