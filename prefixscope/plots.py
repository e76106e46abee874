"""Plots with matplotlib (Agg, no display): figures for bucket and the HTML report."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_bucket(report: Any, path: Path) -> None:
    """Cached-token and cached-fraction histograms, one row per group, to PNG or SVG.

    Raises:
        ValueError: the file type is neither .png nor .svg.
    """
    if path.suffix.lower() not in (".png", ".svg"):
        raise ValueError("the plot file must end in .png or .svg")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = report.groups or ()
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
            ax.set_title(f"{label} — hit rate {group.hit_rate:.1%}" if group.hit_rate is not None
                         else label, fontsize=9)
            if col == 0:
                for spike in group.spikes:
                    ax.axvline(spike.cached_tokens, color="#c44e52", linestyle="--", linewidth=1)
                    ax.annotate(f"{spike.cached_tokens:,}", (spike.cached_tokens, 0),
                                textcoords="offset points", xytext=(3, 30), fontsize=8,
                                color="#c44e52")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
