"""`diff` for a person: one pair's divergence side by side, or lost tokens by cause."""

from __future__ import annotations

from rich.table import Table

from prefixscope.analyses.diff import DiffReport, PairDiff, block_size_breakdown
from prefixscope.model import words
from prefixscope.views.terminal import Screen, shown


def _highlight(text_a: str, text_b: str, first: int) -> tuple[str, str]:
    """Rich markup of both context texts with the differing middle highlighted."""

    suffix = 0
    while (suffix < min(len(text_a), len(text_b)) - first
           and text_a[len(text_a) - 1 - suffix] == text_b[len(text_b) - 1 - suffix]):
        suffix += 1

    def mark(t: str) -> str:
        end = len(t) - suffix
        return (shown(t[:first]) + "[bold reverse]" + shown(t[first:end]) + "[/]"
                + shown(t[end:]))
    return mark(text_a), mark(text_b)


def pair_screen(p: PairDiff, block_source: str, screen: Screen) -> Screen:
    """One pair: where it diverges, both sides around it, the tokens at the split, the cause."""
    screen.print(f"[bold]A[/] {shown(p.a)}  →  [bold]B[/] {shown(p.b)}"
              + (f"   session {shown(p.session)}" if p.session else "")
              + f"   tokens {p.tokens_a:,} → {p.tokens_b:,}")
    fd = p.first_divergence
    if fd is None:
        screen.print(f"[green]no divergence[/]: {p.cause}")
    else:
        screen.print(f"first divergence at token {fd.token:,} (char {fd.char_b:,}) in "
                  f"[bold cyan]{shown(' › '.join(fd.segment.split('.')))}[/]")
        text_a, text_b = fd.texts()
        a_text, b_text = _highlight(text_a.replace("\n", "⏎"), text_b.replace("\n", "⏎"),
                                    fd.first_char - fd.context_start)
        screen.print(f"  A: …{a_text}…")
        screen.print(f"  B: …{b_text}…")
        screen.print(f"  tokens at the split: {shown(repr(fd.token_a))} | "
                  f"{shown(repr(fd.token_b))}")
    screen.print(f"reusable {p.reusable_tokens:,} · lost [bold]{p.lost_tokens:,}[/] tokens "
              f"(block {p.block_size}, {p.block_size_source or block_source})"
              + (f"  [yellow](approximate: {words.STAND_IN})[/]" if p.approximate else ""))
    screen.print(f"cause: [bold]{p.cause}[/] — {shown(p.detail)}")
    if p.shortfall is not None and p.shortfall > 0:
        screen.print(f"the log says B got {p.observed_cached:,} cached tokens: "
                     f"{p.shortfall:,} fewer than its prefix allowed")
    return screen


# Below this width the worst pairs are listed, not tabled: two whole ids and the detail
# do not fit one row.
_WIDE = 150


def _worst_pairs(pairs: list[PairDiff], screen: Screen) -> None:
    """The pairs that lost the most: a table on a wide screen, else two lines a pair (the
    ids are never cut either way)."""
    if screen.width < _WIDE:
        screen.print("[italic]worst pairs[/]")
        for p in pairs:
            fd = p.first_divergence
            where = "" if fd is None else f" at token {fd.token:,} in {shown(fd.segment)}"
            screen.print(f"  lost [bold]{p.lost_tokens:,}[/]{where} · {p.cause}: "
                         f"{shown(p.detail)}")
            screen.print(f"    [dim]{shown(p.a)} → {shown(p.b)}[/]")
        return
    w = Table(title="worst pairs", show_edge=False, title_justify="left")
    for col in ("a", "b", "token", "segment", "lost", "cause", "detail"):
        # ids and numbers whole, on one line; the detail wraps
        w.add_column(col, no_wrap=col != "detail", overflow="fold",
                     justify="right" if col in ("token", "lost") else "left")
    for p in pairs:
        fd = p.first_divergence
        w.add_row(shown(p.a), shown(p.b), "-" if fd is None else f"{fd.token:,}",
                  "-" if fd is None else shown(fd.segment), f"{p.lost_tokens:,}", p.cause,
                  shown(p.detail))
    screen.print(w)


def summary_screen(report: DiffReport, worst: int, screen: Screen) -> Screen:
    """Lost tokens by cause, the worst pairs, and why some pairs were not diffed."""
    t = report.totals
    if report.block_size is not None:
        blocks = f"block {report.block_size}, {report.block_size_source}"
    else:  # groups of different block sizes
        blocks = "blocks: " + ", ".join(
            f"{bs} ({src}) in {n:,} pairs" for bs, src, n in block_size_breakdown(report))
    table = Table(title=f"{t.pairs:,} pairs · {t.lost_tokens:,} tokens lost · {blocks}",
                  show_edge=False, title_justify="left")
    table.add_column("cause")
    table.add_column("pairs", justify="right")
    table.add_column("lost tokens", justify="right")
    table.add_column("share of lost", justify="right")
    for cause, c in sorted(t.by_cause.items(), key=lambda kv: -kv[1].lost_tokens):
        share = c.lost_tokens / t.lost_tokens if t.lost_tokens else 0.0
        table.add_row(cause, f"{c.pairs:,}", f"{c.lost_tokens:,}", f"{share:.1%}")
    screen.print(table)
    bad = sorted((p for p in report.pairs if p.lost_tokens), key=lambda p: -p.lost_tokens)
    if bad and worst:
        _worst_pairs(bad[:worst], screen)
    short = [p for p in report.pairs if (p.shortfall or 0) > p.block_size]
    if short:
        screen.print(f"{len(short):,} pair(s) got {sum(p.shortfall or 0 for p in short):,} "
                     "cached tokens less than their unchanged prefix allowed (the log's own "
                     "usage): eviction, expiry or the provider — `prefixscope simulate` tells "
                     "which")
    approximate = sum(p.approximate for p in report.pairs)
    if approximate:
        screen.warn(f"{approximate:,} pair(s) counted with a {words.STAND_IN} (the model's "
                    "own is not available offline): their token numbers are estimates; pass "
                    f"--tokenizer ({words.CLAUDE_NOT_PUBLIC})")
    for reason, n in t.skipped_reasons.items():
        screen.warn(f"{n} pair(s) not diffed: {reason}")
    return screen
