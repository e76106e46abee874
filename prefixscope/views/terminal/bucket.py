"""`bucket` for a person: hit rate per group, cached-token histograms, spikes explained."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.table import Table

from prefixscope.analyses.bucket import BucketReport, HistogramBin
from prefixscope.views.terminal import Screen, breakdown_table, count, percent, shown

if TYPE_CHECKING:
    from prefixscope.findings.breakdown import Breakdown


def bucket_screen(report: BucketReport, screen: Screen, spend: Breakdown | None = None,
                  by: Sequence[str] = ()) -> Screen:
    """The summary table, then per group its histogram, spikes and notes; with `spend`
    (the report's ledger by the dimensions `by`), its usage and dollars table."""
    t = report.totals
    bs = f"block size {report.block_size} ({report.block_size_source})" if report.block_size \
        else "block size unknown"
    summary = Table(title=f"hit rate = cached / prompt tokens · {count(t.requests, 'request')} · "
                          f"{bs}",
                    caption="requests, prompt, cached: the requests reporting both prompt and "
                            "cached tokens (the hit rate's basis) and their sums",
                    caption_justify="left",
                    show_edge=False, title_justify="left")
    for col in report.by:
        summary.add_column(col, no_wrap=True)
    for col in ("requests", "prompt", "cached", "hit rate", "mean of ratios", "0 cached",
                "block"):
        summary.add_column(col, justify="right", no_wrap=True)
    for g in report.groups:
        summary.add_row(*(shown(str(g.key[d])) for d in report.by), f"{g.requests:,}",
                        f"{g.prompt_tokens:,}", f"{g.cached_tokens:,}", percent(g.hit_rate),
                        percent(g.mean_request_hit_rate), f"{g.zero_cached:,}",
                        str(g.block_size or "?"))
    if len(report.groups) > 1:
        once = "all, each call once" if sum(g.requests for g in report.groups) > t.requests \
            else "all"
        summary.add_row(*([once] + [""] * (len(report.by) - 1) if report.by else []),
                        f"{t.requests:,}", f"{t.prompt_tokens:,}", f"{t.cached_tokens:,}",
                        percent(t.hit_rate), "", "", "", style="bold")
    screen.print(summary)
    for g in report.groups:
        label = ", ".join(f"{k}={v}" for k, v in g.key.items()) or "all requests"
        screen.print(f"\n[bold]{shown(label)}[/] · {count(g.requests, 'request')} · hit "
                     f"rate {percent(g.hit_rate)} — cached tokens per request")
        if g.block_size and g.block_basis != "forced":
            fits = ", ".join(str(c) for c in g.block_size_candidates)
            screen.print(f"  block size {g.block_size}, from {_BASIS[g.block_basis]} "
                         f"(sizes that fit: {fits})")
        for line in histogram_lines(g.histogram, g.requests, [s.cached_tokens for s in g.spikes]):
            screen.print(line)
        if g.fraction_histogram:
            screen.print(f"  cached / prompt  {sparkline(g.fraction_histogram)}  (10% bins)")
        for s in g.spikes:
            blocks = f" = {s.blocks:g} × {g.block_size}" if s.blocks is not None else ""
            screen.print(f"  [bold magenta]spike[/] [bold]{s.cached_tokens:,}[/]{blocks} · "
                         f"{s.requests:,} of {count(g.requests, 'request')} ({s.share:.1%})")
            screen.print(f"    {shown(s.explanation)}", soft_wrap=True)
        for note in g.notes:
            screen.warn(note)
    for note in report.notes:
        screen.warn(note)
    if t.without_usage:
        screen.note(f"{t.without_usage:,} request(s) report no prompt or no cached tokens and "
                    "are not counted")
    if spend is not None and spend.rows:
        screen.print()
        screen.print(breakdown_table(spend, "usage and dollars by " + ", ".join(by)))
        screen.print("[dim]lost $ and top loss: the report's ledger (`prefixscope report "
                     "--by " + ",".join(by) + "` shows the same)[/]")
    return screen


_BASIS = {"group": "its own cached tokens", "sources": "every cached token of its log format(s)",
          "overall": "every cached token in the store", "none": "nothing"}


def histogram_lines(histogram: Sequence[HistogramBin], total: int, spikes: list[int],
                    width: int = 40) -> list[str]:
    """Rich-markup lines: one bar per bin, whole-token edges, spikes marked."""
    peak = max((b.requests for b in histogram), default=0)
    if not peak:
        return []
    edges = [(f"{b.lo:,.0f}", f"{max(b.hi - 1, b.lo):,.0f}") for b in histogram]
    lo_w = max(len(lo) for lo, _ in edges)
    hi_w = max(len(hi) for _, hi in edges)
    count_w = len(f"{peak:,}")
    lines = []
    for b, (lo, hi) in zip(histogram, edges, strict=True):
        span = f"  {lo:>{lo_w}} – {hi:>{hi_w}} "
        if not b.requests:
            lines.append(f"[dim]{span}·[/]")
            continue
        bar = "█" * max(1, round(width * b.requests / peak))
        marks = [v for v in spikes if b.lo <= v < b.hi or (v == b.hi and b is histogram[-1])]
        mark = ("  [magenta]◀ " + ", ".join(f"{v:,}" for v in marks) + "[/]") if marks else ""
        lines.append(f"{span}[cyan]{bar:<{width}}[/] {b.requests:>{count_w},} "
                     f"{b.requests / total:>6.1%}{mark}")
    return lines


def sparkline(histogram: Sequence[HistogramBin]) -> str:
    """0% ▁█▃ 100%: one character per bin, height by requests; '·' for an empty bin."""
    ticks = "▁▂▃▄▅▆▇█"
    peak = max((b.requests for b in histogram), default=0) or 1
    chars = "".join("[dim]·[/]" if not b.requests else
                    ticks[max(0, -(-b.requests * len(ticks) // peak) - 1)] for b in histogram)
    return f"{histogram[0].lo:.0%} {chars} {histogram[-1].hi:.0%}"
