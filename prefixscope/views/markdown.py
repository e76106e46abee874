"""The report as Markdown, for a pull-request comment.

Every piece of text that may come from a log (titles, segments, excerpts, scenario names)
goes through `md_text`: Markdown and HTML metacharacters are backslash-escaped or
entity-encoded and line breaks flattened, so a logged prompt cannot add a link, an image,
a table row or raw HTML to the comment.
"""

from __future__ import annotations

import re

from prefixscope.findings.model import LENS_KINDS, Report
from prefixscope.views import wording

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#!|~])")
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def md_text(text: str) -> str:
    """`text` inert in Markdown (and in the HTML a Markdown renderer lets through)."""
    flat = _CONTROL.sub(" ", " ".join(text.split()))
    flat = flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", flat)


def _money(value: float | None) -> str:
    return "–" if value is None else md_text(wording.usd(value))


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def report_markdown(report: Report, *, top: int = 20) -> str:
    s = report.summary
    r = s.replay
    lines = ["# prefixscope report", "", md_text(wording.basis_line(s)), ""]
    if r is not None or s.hit_rate is not None:
        lines += [md_text(wording.rates_title(s)) + ":", "",
                  "| observed | predicted | ideal | replayed with |", "|---:|---:|---:|---|",
                  f"| {_pct(r.hit_rate_observed if r else s.hit_rate)} | "
                  f"{_pct(s.hit_rate_predicted)} | {_pct(s.hit_rate_ideal)} | "
                  f"{md_text(s.engine or '–')} |", ""]
    lines += [f"> {md_text(line)}" for line in (*wording.replay_lines(s),
                                                wording.approximate_line(report)) if line]
    for line in (wording.ledger_line(report.ledger), wording.money_line(s),
                 *wording.what_if_lines(report)):
        if line:
            lines += [md_text(line), ""]
    if report.breakdown is not None:
        b = report.breakdown
        lines += [f"## By {md_text(', '.join(b.by))}", "",
                  "| " + " | ".join(md_text(d) for d in b.by) + " | requests | prompt | cached "
                  "| hit rate | spend | lost $ | top loss |",
                  "|" + "---|" * len(b.by) + "---:|---:|---:|---:|---:|---:|---|"]
        for row in b.rows:
            cells = [md_text("(not logged)" if row.key[d] is None else str(row.key[d]))
                     for d in b.by]
            lines.append("| " + " | ".join(cells) + f" | {row.requests:,} | "
                         f"{row.prompt_tokens:,} | {row.cached_tokens:,} | "
                         f"{_pct(row.hit_rate)} | {_money(row.spend_usd)} | "
                         f"{_money(row.lost_usd)} | {md_text(row.top_cause or '–')} |")
        lines.append("")
    lines += ["## Findings", ""]
    if not report.findings:
        lines += [md_text(wording.no_findings_line(report)) + ".", ""]
    for group, shown in wording.grouped(report.findings[:top]):
        lines += [f"### {md_text(wording.GROUP_TITLES[group])}", "",
                  "| # | severity | kind | lost tokens | share | lost $ | finding |",
                  "|---:|---|---|---:|---:|---:|---|"]
        for n, f in shown:
            lens = f.kind in LENS_KINDS
            dollars = md_text(wording.usd(f.lost_usd)) if f.lost_usd else "–"
            lines.append(f"| {n} | {wording.finding_label(f)} | {md_text(f.kind)} | "
                         f"{'–' if lens else f'{f.lost_tokens:,}'} | "
                         f"{'–' if lens else f'{f.share:.1%}'} | {dollars} | "
                         f"{md_text(f.title)} |")
        lines.append("")
        for n, f in shown:
            where = f" · {md_text(f.segment)}" if f.segment else ""
            lines += [f"**{n}. {wording.finding_label(f)} {md_text(f.kind)}** · "
                      f"{md_text(wording.finding_cost(f))}{where}", "",
                      md_text(f.title), "", f"Fix: {md_text(f.fix)}", ""]
    if report.findings:
        if len(report.findings) > top:
            lines += [f"… and {len(report.findings) - top} more (see the JSON or HTML "
                      "report).", ""]
    if report.gate.checks:
        lines += [f"## Gate: {'passed' if report.gate.passed else 'FAILED'}", "",
                  "| check | result | detail |", "|---|---|---|"]
        lines += [f"| {md_text(c.name)} | {'pass' if c.passed else '**FAIL**'} | "
                  f"{md_text(c.detail)} |" for c in report.gate.checks]
        lines.append("")
    if report.notes:
        lines += ["## Notes", ""] + [f"- {md_text(n)}" for n in report.notes] + [""]
    return "\n".join(lines)
