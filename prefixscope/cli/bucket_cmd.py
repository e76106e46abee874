"""`prefixscope bucket`: hit rate by dimension and what the cached-token distribution says."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from . import console
from .options import (
    BlockSize,
    Gateway,
    JsonOut,
    Logs,
    Quiet,
    StoreOpt,
    Tokenizer,
    WhatIf,
    what_if_tuple,
)


def register(app: typer.Typer) -> None:
    app.command("bucket")(bucket)


def bucket(
    logs: Logs = None,
    store: StoreOpt = None,
    by: Annotated[str | None, typer.Option("--by", help="Group by dimensions, comma-separated: "
                                                        "endpoint, model, client, user, channel, "
                                                        "day, source, session.")] = None,
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
    from ..bucket import bucket_store, report_json
    from ..render import RenderOptions, TokenizerError
    from .storeopen import open_store

    dims = tuple(d.strip() for d in (by or "").split(",") if d.strip())
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
        from ..plots import plot_bucket

        try:
            plot_bucket(report, plot)
        except (OSError, ValueError) as exc:
            raise console.fail(f"cannot write {plot}: {exc}") from None
        console.note(f"wrote {plot}", quiet)
    if json_out:
        console.print_json(report_json(report))
    else:
        _print(report, quiet)


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v:.2%}"


def _print(report: Any, quiet: int) -> None:
    from rich.markup import escape
    from rich.table import Table

    t = report.totals
    summary = Table(title=f"hit rate (token-weighted) · {t.requests:,} requests · block size "
                          f"{report.block_size or '?'} ({report.block_size_source})",
                    show_edge=False, title_justify="left")
    for col in (*report.by, "requests", "prompt tokens", "cached tokens", "hit rate",
                "mean per request", "zero cached", "block"):
        summary.add_column(col, justify="left" if col in report.by else "right")
    for g in report.groups:
        summary.add_row(*(escape(str(g.key[d])) for d in report.by), f"{g.requests:,}",
                        f"{g.prompt_tokens:,}", f"{g.cached_tokens:,}", _pct(g.hit_rate),
                        _pct(g.mean_request_hit_rate), f"{g.zero_cached:,}",
                        str(g.block_size or "?"))
    summary.add_row(*(["all"] + [""] * (len(report.by) - 1) if report.by else []),
                    f"{t.requests:,}", f"{t.prompt_tokens:,}", f"{t.cached_tokens:,}",
                    _pct(t.hit_rate), "", "", "", style="bold")
    console.out.print(summary)
    for g in report.groups:
        label = ", ".join(f"{k}={v}" for k, v in g.key.items()) or "all requests"
        console.out.print(f"\n[bold]{escape(label)}[/] — cached tokens per request")
        _bars(g.histogram)
        for s in g.spikes:
            blocks = f" = {s.blocks:g} × {g.block_size}" if s.blocks is not None else ""
            console.out.print(f"  [bold magenta]spike[/] {s.cached_tokens:,}{blocks}: "
                              f"{s.requests:,} requests ({s.share:.1%})")
            console.out.print(f"    {escape(s.explanation)}")
        for note in g.notes:
            console.warn(note, quiet)
    if t.without_usage:
        console.note(f"{t.without_usage:,} request(s) report no prompt or no cached tokens and "
                     "are not counted", quiet)


def _bars(histogram: Any, width: int = 40) -> None:
    peak = max((b.requests for b in histogram), default=0)
    for b in histogram:
        if not peak:
            break
        bar = "█" * max(1 if b.requests else 0, round(width * b.requests / peak))
        console.out.print(f"  {b.lo:>10,.0f} – {b.hi:<10,.0f} {bar} {b.requests:,}")
