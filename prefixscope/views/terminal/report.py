"""`report` for a person: the log in three hit rates, then the findings that cost the most
prompt tokens, each with its fix, then the gate."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from prefixscope.findings.model import Report
from prefixscope.views.terminal import Screen, count, hit_rate_table, percent, visible

_COLOR = {"high": "red", "medium": "yellow", "low": "cyan", "info": "dim"}


def report_screen(report: Report, screen: Screen, *, top: int = 10) -> Screen:
    s = report.summary
    screen.print(f"[bold]{count(s.requests, 'request')}[/] in "
                 f"{count(s.sessions, 'session')} · {s.prompt_tokens:,} prompt tokens, "
                 f"{s.cached_tokens:,} cached")
    rates = hit_rate_table(observed=percent(s.hit_rate), predicted=percent(s.hit_rate_predicted),
                           ideal=percent(s.hit_rate_ideal),
                           replayed_with=escape(s.engine or "-"))
    screen.print(rates)
    if s.engine and s.replayed_requests < s.requests:
        screen.print(f"[dim]predicted and ideal: over the {count(s.replayed_requests, 'request')}"
                     " the replay could rebuild (a body, a trace, or usage for a hosted API)[/]")
    if not report.findings:
        screen.print("no findings: nothing in these logs is costing cache")
    for n, f in enumerate(report.findings[:top], 1):
        color = _COLOR.get(f.severity, "white")
        cost = (f"{f.lost_tokens:,} tokens ({f.share:.1%})" if f.lost_tokens
                else "no token cost")
        screen.print(f"\n[bold]{n}.[/] [{color}]{f.severity}[/] [bold]{escape(f.kind)}[/]"
                     f" · {cost}" + (f" · {escape(visible(f.segment))}" if f.segment else ""))
        screen.print(f"   {escape(visible(f.title))}", soft_wrap=True)
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
