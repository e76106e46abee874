"""Plots with matplotlib (Agg, no display): figures for bucket and the HTML report."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from prefixscope.analyses.bucket import BucketReport
from prefixscope.analyses.diff import DiffReport
from prefixscope.analyses.simulate import SimulateReport
from prefixscope.model import UsageRecord
from prefixscope.model.atomic import atomic_path

MAX_PLOT_GROUPS = 12
_SECOND = timedelta(seconds=1)


def plot_bucket(report: BucketReport, path: Path) -> int:
    """Cached-token and cached-fraction histograms, one row per group, to PNG or SVG.

    At most `MAX_PLOT_GROUPS` groups are drawn (those with the most requests, in report
    order) so that ``--by session`` stays a readable figure.

    Returns:
        The number of groups drawn.

    Raises:
        ValueError: the file type is neither .png nor .svg.
    """
    if path.suffix.lower() not in (".png", ".svg"):
        raise ValueError("the plot file must end in .png or .svg")
    fig, drawn = bucket_figure(report)
    save(fig, path)
    return drawn


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (no display), imported on first use."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=path.suffix.lstrip(".").lower())
    pyplot().close(fig)


def percent_axis(axis: Any) -> None:
    """Ticks of a 0..1 axis read as percents."""
    from matplotlib.ticker import PercentFormatter

    axis.set_major_formatter(PercentFormatter(1.0, decimals=0))


def integer_axis(axis: Any) -> None:
    """Ticks only at whole numbers (turns, requests)."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def label(text: object, limit: int = 40) -> str:
    """Log text as a plot label: `$` would start matplotlib's math mode, so it is escaped."""
    flat = " ".join(str(text).split())
    flat = flat if len(flat) <= limit else flat[:limit - 1] + "…"
    return flat.replace("$", r"\$")


def bucket_figure(report: BucketReport) -> tuple[Any, int]:
    """The bucket histograms (see `plot_bucket`) as a figure, and the groups drawn."""
    plt = pyplot()
    largest = sorted(report.groups or (), key=lambda g: -g.requests)[:MAX_PLOT_GROUPS]
    groups = [g for g in report.groups if any(g is kept for kept in largest)]
    rows = max(1, len(groups))
    fig, axes = plt.subplots(rows, 2, figsize=(11, 2.8 * rows), squeeze=False)
    for row, group in enumerate(groups):
        title = label(", ".join(f"{k}={v}" for k, v in group.key.items()) or "all requests",
                      80)
        for col, (hist, xlabel) in enumerate(((group.histogram, "cached tokens per request"),
                                              (group.fraction_histogram, "cached / prompt"))):
            ax = axes[row][col]
            bars = ax.bar([b.lo for b in hist], [b.requests for b in hist],
                          width=[b.hi - b.lo for b in hist], align="edge", color="#4c72b0",
                          edgecolor="white")
            ax.bar_label(bars, labels=[f"{b.requests:,}" if b.requests else "" for b in hist],
                         fontsize=7, padding=1)
            ax.set_xlabel(xlabel)
            ax.set_ylabel("requests")
            integer_axis(ax.yaxis)
            ax.margins(y=0.15)
            if col == 1:
                percent_axis(ax.xaxis)
            ax.set_title(f"{title} — hit rate {group.hit_rate:.1%}" if group.hit_rate is not None
                         else title, fontsize=9)
            if col == 0:
                for n, spike in enumerate(group.spikes):
                    blocks = (f" = {spike.blocks:g} × {group.block_size}"
                              if spike.blocks is not None else "")
                    ax.axvline(spike.cached_tokens, color="#c44e52", linestyle="--", linewidth=1)
                    left, right = ax.get_xlim()
                    on_left = spike.cached_tokens < (left + right) / 2
                    ax.annotate(f"{spike.cached_tokens:,}{blocks}\n{spike.share:.0%} of requests",
                                xy=(spike.cached_tokens, 1), xycoords=("data", "axes fraction"),
                                xytext=(4 if on_left else -4, -4 - 24 * n),
                                textcoords="offset points", ha="left" if on_left else "right",
                                va="top", fontsize=8, color="#c44e52",
                                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8})
    fig.tight_layout()
    return fig, len(groups)


def plot_capacity_curve(report: SimulateReport, path: Path) -> None:
    """Predicted hit rate against cache capacity, the part of it that is reuse within a
    conversation (the rest is across conversations), the ideal ceiling and the observed
    rate.

    Raises:
        ValueError: the file type is neither .png nor .svg, or there is no curve.
    """
    if path.suffix.lower() not in (".png", ".svg"):
        raise ValueError("the plot file must end in .png or .svg")
    save(capacity_figure(report), path)


def capacity_figure(report: SimulateReport) -> Any:
    """The capacity curve (see `plot_capacity_curve`) as a figure.

    Raises:
        ValueError: there is no finite capacity in the curve.
    """
    finite = [p for p in report.capacity_curve
              if p.capacity_tokens is not None and p.hit_rate is not None]
    if not finite:
        raise ValueError("no finite capacity in the curve (give --capacity-curve C1,C2,...)")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([float(p.capacity_tokens or 0) for p in finite],
            [float(p.hit_rate or 0.0) for p in finite], marker="o",
            color="#4c72b0", label=f"{report.engine} (LRU), predicted")
    if any(p.prompt_tokens for p in finite):  # the split: within below, across above it
        ax.plot([float(p.capacity_tokens or 0) for p in finite],
                [float(p.hit_rate_within or 0.0) for p in finite], marker=".",
                color="#8172b2", linestyle="-.",
                label="of it, reuse within a conversation (the rest: across conversations)")
    if report.hit_rate_ideal is not None:
        ax.axhline(report.hit_rate_ideal, color="#55a868", linestyle="--",
                   label=f"ideal {report.hit_rate_ideal:.1%}")
    if report.hit_rate_observed is not None:
        ax.axhline(report.hit_rate_observed, color="#c44e52", linestyle=":",
                   label=f"observed {report.hit_rate_observed:.1%}")
    for p in finite:
        ax.annotate(f"{p.hit_rate or 0.0:.1%}", (float(p.capacity_tokens or 0), p.hit_rate or 0.0),
                    textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("cache capacity (tokens)")
    ax.set_ylabel("token-weighted hit rate")
    ax.set_ylim(0, 1.05)
    percent_axis(ax.yaxis)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def png_base64(fig: Any) -> str:
    """The figure as base64 PNG text (for a data: URI), the figure closed."""
    import base64
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    pyplot().close(fig)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def dimension_figure(reports: Sequence[BucketReport], limit: int = 10) -> Any:
    """Token-weighted hit rate of each group, one panel per dimension."""
    plt = pyplot()
    fig, axes = plt.subplots(len(reports), 1, figsize=(8, 0.5 + 0.35 * limit * len(reports)),
                             squeeze=False)
    for ax, report in zip((row[0] for row in axes), reports, strict=True):
        groups = sorted((g for g in report.groups if g.hit_rate is not None),
                        key=lambda g: -g.prompt_tokens)[:limit]
        names = [label(", ".join("(not logged)" if v is None else str(v)
                                 for v in g.key.values())) for g in groups]
        rates = [g.hit_rate or 0.0 for g in groups]
        bars = ax.barh(range(len(groups)), rates, color="#4c72b0")
        ax.bar_label(bars, labels=[f"{r:.1%}" for r in rates], fontsize=8, padding=2)
        ax.set_yticks(range(len(groups)), names, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlim(0, 1.1)
        percent_axis(ax.xaxis)
        ax.set_title(f"hit rate by {label(', '.join(report.by))}", fontsize=9)
        ax.set_xlabel("token-weighted hit rate (cached / prompt tokens)", fontsize=8)
        ax.set_ylabel(label(", ".join(report.by)), fontsize=8)
    fig.tight_layout()
    return fig


def time_figure(records: Sequence[UsageRecord], bins: int = 40) -> Any | None:
    """Token-weighted hit rate over time (None: no timestamped usage)."""
    points = [(r.timestamp, r.prompt_tokens, r.cached_tokens) for r in records
              if r.timestamp is not None and r.prompt_tokens and r.cached_tokens is not None
              and r.duplicate_of is None]
    if len(points) < 2:
        return None
    start = min(p[0] for p in points)
    span = max((max(p[0] for p in points) - start).total_seconds(), 1.0)
    prompt = [0] * bins
    cached = [0] * bins
    for ts, p, c in points:
        k = min(bins - 1, int((ts - start).total_seconds() / span * bins))
        prompt[k] += p or 0
        cached[k] += c or 0
    # An empty bin is a gap in the log: the line breaks there (NaN) instead of drawing a
    # straight line across weeks without a request.
    xs = [start + (span * (k + 0.5) / bins) * _SECOND for k in range(bins)]
    ys = [cached[k] / prompt[k] if prompt[k] else float("nan") for k in range(bins)]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.plot(xs, ys, marker="o", color="#4c72b0")
    shown = [(x, y) for x, y, p in zip(xs, ys, prompt, strict=True) if p]
    if len(shown) <= 12:
        for x, y in shown:
            ax.annotate(f"{y:.1%}", (x, y), textcoords="offset points", xytext=(0, 6),
                        ha="center", fontsize=7)
    ax.set_ylim(0, 1.1)
    percent_axis(ax.yaxis)
    ax.set_ylabel("token-weighted hit rate")
    ax.set_xlabel(f"request time ({_bin_width(span / bins)} per point; gaps: no requests)")
    ax.set_title("token-weighted hit rate over time", fontsize=9)
    fig.autofmt_xdate()
    fig.tight_layout()
    return fig


def _bin_width(seconds: float) -> str:
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            n = seconds / size
            return f"{n:.0f} {unit}{'s' if round(n) != 1 else ''}" if n >= 1.5 else f"1 {unit}"
    return f"{seconds:.0f} s"


def sessions_figure(records: Sequence[UsageRecord], worst: int = 4) -> Any | None:
    """Prompt and cached tokens per turn of the sessions that lost the most (None: none)."""
    turns: dict[str, list[tuple[int, int]]] = {}
    for r in records:
        if r.session and r.prompt_tokens is not None and r.cached_tokens is not None \
                and r.duplicate_of is None:
            turns.setdefault(r.session, []).append((r.prompt_tokens, r.cached_tokens))
    ranked = sorted((s for s in turns if len(turns[s]) > 1),
                    key=lambda s: -sum(p - c for p, c in turns[s]))[:worst]
    if not ranked:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(len(ranked), 1, figsize=(8, 2.2 * len(ranked)), squeeze=False)
    for ax, session in zip((row[0] for row in axes), ranked, strict=True):
        xs = list(range(1, len(turns[session]) + 1))
        ax.fill_between(xs, [p for p, _ in turns[session]], color="#dd8452", alpha=0.5,
                        label="prompt tokens")
        ax.fill_between(xs, [c for _, c in turns[session]], color="#4c72b0", alpha=0.8,
                        label="cached tokens")
        prompt = sum(p for p, _ in turns[session])
        rate = sum(c for _, c in turns[session]) / prompt if prompt else 0.0
        ax.set_title(f"session {label(session, 48)} — hit rate {rate:.1%}", fontsize=9)
        ax.set_ylabel("tokens")
        ax.set_xlabel("turn", fontsize=8)
        integer_axis(ax.xaxis)
        ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig


def divergence_figure(diff: DiffReport, bins: int = 30) -> Any | None:
    """Where consecutive turns first diverge (token index), stacked by cause."""
    by_cause: dict[str, list[int]] = {}
    for pair in diff.pairs:
        if pair.first_divergence is not None and pair.cause not in ("identical", "append-only"):
            by_cause.setdefault(pair.cause, []).append(pair.first_divergence.token)
    if not by_cause:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.hist(list(by_cause.values()), bins=bins, stacked=True,
            label=[label(c) for c in by_cause])
    ax.set_xlabel("token index of the first divergence")
    ax.set_ylabel("pairs")
    ax.set_title("where consecutive turns diverge", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
