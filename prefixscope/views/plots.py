"""Plots with matplotlib (Agg, no display): figures for bucket and the HTML report."""

from __future__ import annotations

from pathlib import Path

from prefixscope.analyses.bucket import BucketReport

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
