"""`report` for a person: the log in three hit rates, then the findings that cost the most
prompt tokens, each with its fix, then the gate."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from prefixscope.findings.model import Finding, Report
from prefixscope.views import wording
from prefixscope.views.terminal import (
    Screen,
    breakdown_table,
    count,
    hit_rate_table,
    percent,
    visible,
)

_COLOR = {"high": "red", "medium": "yellow", "low": "cyan", "info": "dim", "lens": "magenta"}


def report_screen(report: Report, screen: Screen, *, top: int = 10) -> Screen:
    s = report.summary
    screen.print(escape(wording.basis_line(s)), soft_wrap=True)
    if s.replay is not None or s.hit_rate is not None:
        r = s.replay
        rates = hit_rate_table(
            titled=False, observed=percent(r.hit_rate_observed if r is not None else s.hit_rate),
            predicted=percent(s.hit_rate_predicted), ideal=percent(s.hit_rate_ideal),
            replayed_with=escape(s.engine or "-"))
        # said on its own line: a table's title wraps at the table's width
        screen.print(escape(wording.rates_title(s)), soft_wrap=True)
        screen.print(rates)
        screen.print(f"[dim]{escape(wording.RATES_LEGEND)}[/]", soft_wrap=True)
    for line in (*wording.replay_lines(s), wording.approximate_line(report)):
        if line:
            screen.print(f"[yellow]{escape(line)}[/]", soft_wrap=True)
    for said in (wording.ledger_line(report.ledger), wording.verdicts_line(report),
                 wording.money_line(s), wording.recorded_cost_line(s),
                 *wording.what_if_lines(report)):
        if said:
            screen.print(escape(said), soft_wrap=True)
    if report.breakdown is not None:
        screen.print()
        screen.print(breakdown_table(report.breakdown, "the ledger by " +
                                     ", ".join(report.breakdown.by)))
    if not report.findings:
        screen.print(escape(wording.no_findings_line(report)))
    for group, shown in wording.grouped(report.findings[:top]):
        screen.print(f"\n[bold underline]{escape(wording.GROUP_TITLES[group])}[/]")
        for n, f in shown:
            label = wording.finding_label(f)
            screen.print(f"\n[bold]{n}.[/] [{_COLOR.get(label, 'white')}]{label}[/] "
                         f"[bold]{escape(f.kind)}[/] · {escape(wording.finding_cost(f))}"
                         + (f" · {escape(visible(f.segment))}" if f.segment else ""))
            screen.print(f"   {escape(visible(f.title))}", soft_wrap=True)
            for said in _evidence(report, f):
                screen.print(f"   [dim]{escape(visible(said))}[/]", soft_wrap=True)
            screen.print(f"   [green]fix:[/] {escape(visible(f.fix))}", soft_wrap=True)
    hidden = len(report.findings) - top
    if hidden > 0:
        screen.print(f"\n… and {count(hidden, 'more finding')} (--json, --md or --html list "
                     "them all)")
    if report.gate.checks:
        gate = Table(show_edge=False, title=f"gate: {'passed' if report.gate.passed else 'FAILED'}",
                     title_justify="left")
        for col in ("check", "result", "detail"):
            gate.add_column(col)
        for c in report.gate.checks:
            gate.add_row(escape(visible(c.name)), "[green]pass[/]" if c.passed else
                         "[red]FAIL[/]", escape(visible(c.detail)))
        screen.print()
        screen.print(gate)
    for note in report.notes:
        screen.note(visible(note))
    return screen


def _evidence(report: Report, f: Finding) -> list[str]:
    """What a break finding's evidence shows at a glance: the change its JSON excerpt
    names, and where its first example pair diverges (was / now)."""
    excerpt = f.evidence.get("excerpt") if f.evidence.get("example_pairs") else None
    out = [f"change: {excerpt}"] if excerpt else []
    line = wording.divergence_line(report, f)
    return out + [line] if line else out
