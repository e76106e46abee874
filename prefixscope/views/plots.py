"""Plots with matplotlib (Agg, no display): figures for bucket and the HTML report."""

from __future__ import annotations

from pathlib import Path

from prefixscope.analyses.bucket import BucketReport
from prefixscope.analyses.simulate import SimulateReport

MAX_PLOT_GROUPS = 12


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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    largest = sorted(report.groups or (), key=lambda g: -g.requests)[:MAX_PLOT_GROUPS]
    groups = [g for g in report.groups if any(g is kept for kept in largest)]
    rows = max(1, len(groups))
    fig, axes = plt.subplots(rows, 2, figsize=(11, 2.8 * rows), squeeze=False)
    for row, group in enumerate(groups):
        label = ", ".join(f"{k}={v}" for k, v in group.key.items()) or "all requests"
        for col, (hist, xlabel) in enumerate(((group.histogram, "cached tokens per request"),
                                              (group.fraction_histogram, "cached / prompt"))):
            ax = axes[row][col]
            ax.bar([b.lo for b in hist], [b.requests for b in hist],
                   width=[b.hi - b.lo for b in hist], align="edge", color="#4c72b0",
                   edgecolor="white")
            ax.set_xlabel(xlabel)
            ax.set_ylabel("requests")
            ax.yaxis.get_major_locator().set_params(integer=True)
            ax.set_title(f"{label} — hit rate {group.hit_rate:.1%}" if group.hit_rate is not None
                         else label, fontsize=9)
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
    fig.savefig(path)
    plt.close(fig)
    return len(groups)


def plot_capacity_curve(report: SimulateReport, path: Path) -> None:
    """Predicted hit rate against cache capacity, the ideal ceiling and the observed rate.

    Raises:
        ValueError: the file type is neither .png nor .svg, or there is no curve.
    """
    if path.suffix.lower() not in (".png", ".svg"):
        raise ValueError("the plot file must end in .png or .svg")
    finite = [p for p in report.capacity_curve
              if p.capacity_tokens is not None and p.hit_rate is not None]
    if not finite:
        raise ValueError("no finite capacity in the curve (give --capacity-curve C1,C2,...)")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([float(p.capacity_tokens or 0) for p in finite],
            [float(p.hit_rate or 0.0) for p in finite], marker="o",
            color="#4c72b0", label=f"{report.engine} (LRU), predicted")
    if report.hit_rate_ideal is not None:
        ax.axhline(report.hit_rate_ideal, color="#55a868", linestyle="--",
                   label=f"ideal {report.hit_rate_ideal:.1%}")
    if report.hit_rate_observed is not None:
        ax.axhline(report.hit_rate_observed, color="#c44e52", linestyle=":",
                   label=f"observed {report.hit_rate_observed:.1%}")
    ax.set_xscale("log")
    ax.set_xlabel("cache capacity (tokens)")
    ax.set_ylabel("token-weighted hit rate")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
