"""`prefixscope bucket`: hit rate by dimension and what the cached-token distribution says."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from prefixscope.cli import console
from prefixscope.cli.options import (
    BlockSize,
    By,
    Gateway,
    JsonOut,
    Logs,
    Quiet,
    StoreOpt,
    Tokenizer,
    WhatIf,
    dimensions,
    what_if_tuple,
)


def register(app: typer.Typer) -> None:
    app.command("bucket")(bucket)


def bucket(
    logs: Logs = None,
    store: StoreOpt = None,
    by: By = None,
    bins: Annotated[int, typer.Option("--bins", min=1, help="Histogram bins.")] = 20,
    block_size: BlockSize = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write the histograms as a PNG "
                                                             "or SVG file.")] = None,
    gateway: Gateway = "auto",
    tokenizer: Tokenizer = "deepseek-v4",
    what_if: WhatIf = None,
    no_explain: Annotated[bool, typer.Option("--no-explain", help="Do not render requests to "
                                                                  "explain spikes.")] = False,
    json_out: JsonOut = False,
    quiet: Quiet = 0,
) -> None:
    """Token-weighted hit rate per group, the cached-token histogram, spikes at exact
    constants, the block size, and the template boundary each constant is.

    Example:
        prefixscope bucket one-api.db --by endpoint
        prefixscope bucket --store cc.duckdb --by endpoint,day --plot cached.png
    """
    from prefixscope.analyses.bucket import bucket_store
    from prefixscope.cli.storeopen import open_store
    from prefixscope.prompt import RenderOptions
    from prefixscope.tokenizers import TokenizerError
    from prefixscope.views.json import bucket_json

    dims = dimensions(by)
    options = RenderOptions(gateway=gateway, tokenizer=tokenizer, what_if=what_if_tuple(what_if))
    with open_store(logs, store, quiet=quiet, json_mode=json_out) as st:
        try:
            report = bucket_store(st, dims, bins=bins, block_size=block_size, options=options,
                                  explain=not no_explain)
        except ValueError as exc:
            raise console.fail(str(exc), 2) from None
        except TokenizerError as exc:
            raise console.fail(str(exc)) from None
    if plot is not None:
        from prefixscope.views.plots import plot_bucket

        try:
            drawn = plot_bucket(report, plot)
        except (OSError, ValueError) as exc:
            raise console.fail(f"cannot write {plot}: {exc}") from None
        more = (f" (the {drawn} largest of {len(report.groups)} groups)"
                if drawn < len(report.groups) else "")
        console.note(f"wrote {plot}{more}", quiet)
    if json_out:
        console.print_json(bucket_json(report))
    else:
        _print(report, quiet)


def _n(count: int, noun: str) -> str:
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v:.2%}"


def _print(report: Any, quiet: int) -> None:
    from rich.markup import escape
    from rich.table import Table

    t = report.totals
    bs = f"block size {report.block_size} ({report.block_size_source})" if report.block_size \
        else "block size unknown"
    summary = Table(title=f"hit rate = cached / prompt tokens · {_n(t.requests, 'request')} · "
                          f"{bs}",
                    show_edge=False, title_justify="left")
    for col in report.by:
        summary.add_column(col, no_wrap=True)
    for col in ("requests", "prompt", "cached", "hit rate", "mean of ratios", "0 cached",
                "block"):
        summary.add_column(col, justify="right", no_wrap=True)
    for g in report.groups:
        summary.add_row(*(escape(str(g.key[d])) for d in report.by), f"{g.requests:,}",
                        f"{g.prompt_tokens:,}", f"{g.cached_tokens:,}", _pct(g.hit_rate),
                        _pct(g.mean_request_hit_rate), f"{g.zero_cached:,}",
                        str(g.block_size or "?"))
    if len(report.groups) > 1:
        summary.add_row(*(["all"] + [""] * (len(report.by) - 1) if report.by else []),
                        f"{t.requests:,}", f"{t.prompt_tokens:,}", f"{t.cached_tokens:,}",
                        _pct(t.hit_rate), "", "", "", style="bold")
    console.out.print(summary)
    for g in report.groups:
        label = ", ".join(f"{k}={v}" for k, v in g.key.items()) or "all requests"
        console.out.print(f"\n[bold]{escape(label)}[/] · {_n(g.requests, 'request')} · hit "
                          f"rate {_pct(g.hit_rate)} — cached tokens per request")
        for line in histogram_lines(g.histogram, g.requests, [s.cached_tokens for s in g.spikes]):
            console.out.print(line)
        if g.fraction_histogram:
            console.out.print(f"  cached / prompt  {sparkline(g.fraction_histogram)}  "
                              "(10% bins)")
        for s in g.spikes:
            blocks = f" = {s.blocks:g} × {g.block_size}" if s.blocks is not None else ""
            console.out.print(f"  [bold magenta]spike[/] [bold]{s.cached_tokens:,}[/]{blocks} · "
                              f"{s.requests:,} of {_n(g.requests, 'request')} ({s.share:.1%})")
            console.out.print(f"    {escape(s.explanation)}", soft_wrap=True)
        for note in g.notes:
            console.warn(note, quiet)
    for note in report.notes:
        console.warn(note, quiet)
    if t.without_usage:
        console.note(f"{t.without_usage:,} request(s) report no prompt or no cached tokens and "
                     "are not counted", quiet)


def histogram_lines(histogram: Any, total: int, spikes: list[int], width: int = 40) -> list[str]:
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


def sparkline(histogram: Any) -> str:
    """0% ▁█▃ 100%: one character per bin, height by requests; '·' for an empty bin."""
    ticks = "▁▂▃▄▅▆▇█"
    peak = max((b.requests for b in histogram), default=0) or 1
    chars = "".join("[dim]·[/]" if not b.requests else
                    ticks[max(0, -(-b.requests * len(ticks) // peak) - 1)] for b in histogram)
    return f"{histogram[0].lo:.0%} {chars} {histogram[-1].hi:.0%}"
