"""`simulate` for a person: observed / predicted / ideal hit rates, where the uncached
tokens went, what each fix would buy, and the capacity curve."""

from __future__ import annotations

from rich.table import Table

from prefixscope.analyses.simulate import MISS_CLASSES, SimulateReport
from prefixscope.engines.choose import NO_UNIT
from prefixscope.views import wording
from prefixscope.views.terminal import (
    Screen,
    count,
    hit_rate_table,
    percent,
    phrase_lines,
    shown,
)

_MEANING = {
    "new": "never sent before (not a miss)",
    "cold": "first request of a session",
    "break": "sent before in the session, after a change earlier in the prompt",
    "compaction": "the history was compacted into a summary",
    "eviction": "cached in the ideal cache, evicted at this capacity",
    "ttl": "the provider's retention expired",
    "provider": "intact, live prefix the hosted API did not serve",
    "unexplained": "the log disagrees with the model (parameters or usage semantics)",
}


_WIDE = 120  # below: the requests the log got less cache for are lines, not a table
AGREEMENT = ("agreement: the share of the requests whose log reports cached tokens that the "
             "replay predicts within one block")


def simulate_screen(report: SimulateReport, screen: Screen, *, worst: int = 10) -> Screen:
    """The replay's parameters (and what chose each: `SimulateReport.unit_source`,
    `capacity_source`), its hit rates, the uncached tokens by class, the requests the log
    got less cache than predicted, what-ifs and the curve."""
    unit_source, capacity_source = report.unit_source, report.capacity_source
    capacity = ("unlimited" if report.capacity_tokens is None
                else f"{report.capacity_tokens:,} tokens")
    if capacity_source and not capacity_source.startswith("unlimited"):
        capacity += f" ({capacity_source})"
    elif capacity_source and capacity_source != "unlimited":
        capacity = capacity_source
    block = f"block {report.unit}" + (f" ({unit_source})" if unit_source else "") + " · "
    if unit_source == NO_UNIT:
        block = ""
    for line in phrase_lines(f"[bold]{shown(report.engine)}[/] · {block}capacity {capacity}",
                             screen.width):
        screen.print(line)
    screen.print(f"{count(report.requests, 'request')} · {report.prompt_tokens:,} prompt "
                 "tokens replayed")
    if report.fit is not None:
        fit_capacity = ("unlimited" if report.fit.capacity_tokens is None
                        else f"{report.fit.capacity_tokens:,} tokens")
        ttl = ("" if report.fit.ttl_seconds is None
               else f", retention {report.fit.ttl_seconds:,.0f} s")
        screen.print(f"best fit: block {report.fit.unit}, capacity {fit_capacity}{ttl} "
                     f"(agreement {percent(report.fit.agreement)}): the tables below replay "
                     "at it")
    rates = hit_rate_table(observed=percent(report.hit_rate_observed),
                           predicted=percent(report.hit_rate_predicted),
                           ideal=percent(report.hit_rate_ideal),
                           agreement=percent(report.agreement))
    screen.print(rates)
    screen.print(f"[dim]{wording.RATES_LEGEND}; {AGREEMENT}[/]", soft_wrap=True)
    total = sum(report.misses.values())
    misses = Table(show_edge=False, title="uncached prompt tokens by class",
                   title_justify="left")
    for col, justify in (("class", "left"), ("tokens", "right"), ("share", "right"),
                         ("meaning", "left")):
        misses.add_column(col, justify=justify)  # type: ignore[arg-type]
    for name in MISS_CLASSES:
        n = report.misses.get(name, 0)
        if n:
            misses.add_row(name, f"{n:,}", f"{n / total:.1%}", _MEANING[name])
    screen.print(misses)
    short = sorted((r for r in report.per_request if (r.shortfall or 0) > report.unit),
                   key=lambda r: -(r.shortfall or 0))
    if short and worst:
        title = "requests the log got less cache than the model predicts"
        if screen.width < _WIDE:  # two whole ids do not fit a row: a line per request
            screen.print(f"[italic]{title}[/]")
            for r in short[:worst]:
                screen.print(f"  prompt {r.prompt_tokens:,} · observed {r.observed or 0:,} · "
                             f"predicted {r.predicted:,} · ideal {r.ideal:,}")
                screen.print(f"    [dim]{shown(r.id)} · session {shown(r.session or '-')}[/]")
        else:
            table = Table(show_edge=False, title_justify="left", title=title)
            for col in ("request", "session", "prompt", "observed", "predicted", "ideal"):
                table.add_column(col, no_wrap=True,
                                 justify="left" if col in ("request", "session") else "right")
            for r in short[:worst]:
                table.add_row(shown(r.id), shown(r.session or "-"), f"{r.prompt_tokens:,}",
                              f"{r.observed or 0:,}", f"{r.predicted:,}", f"{r.ideal:,}")
            screen.print(table)
    for w in report.what_if:
        screen.print(f"what-if [bold]{shown(w.transform)}[/]: ideal {percent(w.hit_rate_ideal)}"
                     f", predicted {percent(w.hit_rate_predicted)}, "
                     f"{w.gain_tokens:+,} cached tokens")
    if report.capacity_curve:
        curve = Table(show_edge=False, title="capacity curve: the predicted hit rate, "
                      "reuse within a conversation (a prefix its own session sent before) + "
                      "across conversations (only another session sent it)",
                      title_justify="left")
        curve.add_column("capacity (tokens)", justify="right")
        curve.add_column("hit rate", justify="right")
        curve.add_column("within", justify="right")
        curve.add_column("across", justify="right")
        for point in report.capacity_curve:
            curve.add_row("unlimited" if point.capacity_tokens is None
                          else f"{point.capacity_tokens:,}", percent(point.hit_rate),
                          percent(point.hit_rate_within), percent(point.hit_rate_across))
        screen.print(curve)
    for reason, n in report.skipped.items():
        screen.warn(f"{n:,} request(s) not replayed: {reason}")
    if report.approximate_requests and not _tokenizer_published(report.engine):
        screen.warn(f"{report.approximate_requests:,} request(s) rendered with a "
                    f"{wording.STAND_IN} for Claude's, which Anthropic does not publish (no "
                    "--tokenizer can make them exact): predicted and ideal are in its "
                    "tokens, observed is the log's usage")
    elif report.approximate_requests:
        screen.warn(f"{report.approximate_requests:,} request(s) rendered with a "
                    f"{wording.STAND_IN} (their model's own is not available offline): "
                    "predicted and ideal are in its tokens, the log's in the model's; pass "
                    f"--tokenizer ({wording.CLAUDE_NOT_PUBLIC})")
    if report.observed_above_ideal:
        screen.warn(f"the log reports {report.observed_above_ideal:,} cached tokens beyond the "
                    "ideal ceiling: reuse the model cannot see (another session's prefix, "
                    "cached outputs) or usage with other semantics")
    return screen


def _tokenizer_published(engine: str) -> bool:
    """The models `engine` serves have a published tokenizer (its `EngineSpec`)."""
    from prefixscope.engines import ENGINES

    spec = ENGINES.get(engine)
    return spec is None or spec.tokenizer_published
