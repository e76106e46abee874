"""The report as Markdown, for a pull-request comment (GitHub's CommonMark with tables).

Every piece of text that may come from a log (titles, segments, excerpts, scenario names)
goes through `md_text`: line breaks flattened, and outside code spans what CommonMark
would read as markup backslash-escaped or entity-encoded, so a logged prompt cannot add a
link, an image, emphasis, a table row or raw HTML to the comment. Inside a code span
(`` `cache_control` ``, written by a fix) nothing is escaped -- CommonMark shows a code
span's text as it is, so an escape there would be printed -- but a pipe in a table cell,
which GitHub's tables split on even inside code.

A PR comment acts on more than markup: GitHub links an ``@user`` or ``@org/team`` and
notifies them, and turns a bare URL, ``www.`` address or e-mail address into a link. An
escape does not stop either (both act on the rendered text), so each of these in log text
is put in a code span, where GitHub does neither. Characters that draw nothing or reorder
the line (bidi controls, zero-width characters: `views.invisible`) are shown as
``\\uNNNN``, in code spans too.
"""

from __future__ import annotations

import bisect
import re

from prefixscope.findings.model import LENS_KINDS, Finding, Report
from prefixscope.views import wording
from prefixscope.views.invisible import escaped as _shown

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_TICKS = re.compile("`+")
# Outside code spans: what may open markup anywhere in a line (emphasis, links and images,
# code, strikethrough, a cell's end, an escape, raw HTML and entities). `_` only where it
# could delimit emphasis: inside a word (snake_case) CommonMark never reads it so.
_INLINE = re.compile(r"[\\`*\[\]|~]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
# What opens a block at the start of a line: a heading, a quote, a list item, a
# setext underline; an ordered list item's number ("1." / "1)").
_BLOCK = re.compile(r"^(?:[#>+=-]|\d{1,9}(?=[.)]))")
# What GitHub turns into a mention or a link in a comment's text (an e-mail address, a
# mention, a URL, a www. address), each from where its run of characters starts and taken
# whole (possessive): linear time on any text.
_LIVE = re.compile(
    r"(?<![\w.+-])[\w.+-]++@[\w-]++(?:\.[\w-]++)++"
    r"|(?<![\w@/`])@[A-Za-z0-9][\w-]*+(?:/[\w.-]++)?"
    r"|(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*+://[^\s<>`|]*+"
    r"|(?<![\w.-])www\.[^\s<>`|]*+", re.IGNORECASE)


def md_text(text: str, *, cell: bool = False) -> str:
    """`text` inert in Markdown (and in the HTML a Markdown renderer lets through), its
    code spans kept as code; `cell`: for a table cell (a pipe escaped in code spans too)."""
    flat = _shown(_CONTROL.sub(" ", " ".join(text.split())))
    out = []
    for code, part in _spans(flat):
        if code:
            out.append(part.replace("|", "\\|") if cell else part)
            continue
        at = 0
        for live in _LIVE.finditer(part):
            out.append(_inert(part[at:live.start()]))
            out.append(md_code(live.group()))
            at = live.end()
        out.append(_inert(part[at:]))
    escaped = "".join(out)
    m = _BLOCK.match(escaped)
    if m is None:
        return escaped
    at = m.end() if m.group()[0].isdigit() else 0  # "1\." is no list item; "\#" no heading
    return escaped[:at] + "\\" + escaped[at:]


def _inert(part: str) -> str:
    """Text outside code spans, its markup escaped."""
    part = part.replace("&", "&amp;").replace("<", "&lt;")
    return _INLINE.sub(lambda m: "\\" + m.group(), part)


def _spans(text: str) -> list[tuple[bool, str]]:
    """`text` cut into (is a code span, the part), as CommonMark reads it: a run of n
    backticks opens a code span closed by the next run of exactly n backticks; a run
    no such run follows is literal backticks."""
    runs = list(_TICKS.finditer(text))
    # each length's runs in order: the closing run is found by bisection, not by a scan
    # of every later run (a hostile text of many unmatched runs would be quadratic)
    by_length: dict[int, list[int]] = {}
    for at, run in enumerate(runs):
        by_length.setdefault(len(run.group()), []).append(at)
    parts: list[tuple[bool, str]] = []
    plain = 0  # where the text not yet in a code span starts
    i = 0
    while i < len(runs):
        opening = runs[i]
        same = by_length[len(opening.group())]
        after = bisect.bisect_right(same, i)
        closing = same[after] if after < len(same) else None
        if closing is None:
            i += 1
            continue
        if opening.start() > plain:
            parts.append((False, text[plain:opening.start()]))
        parts.append((True, text[opening.start():runs[closing].end()]))
        plain = runs[closing].end()
        i = closing + 1
    if plain < len(text):
        parts.append((False, text[plain:]))
    return parts


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
                  f"{md_text(s.engine or '–', cell=True)} |", "",
                  md_text(wording.RATES_LEGEND) + ".", ""]
    # each caveat a quote of its own, a blank line after it (else the next line joins it)
    for line in (*wording.replay_lines(s), wording.approximate_line(report)):
        if line:
            lines += [f"> {md_text(line)}", ""]
    for line in (wording.ledger_line(report.ledger), wording.verdicts_line(report),
                 wording.money_line(s), wording.recorded_cost_line(s),
                 *wording.what_if_lines(report)):
        if line:
            lines += [md_text(line), ""]
    if report.breakdown is not None:
        b = report.breakdown
        lines += [f"## By {md_text(', '.join(b.by))}", "",
                  "| " + " | ".join(md_text(d, cell=True) for d in b.by)
                  + " | requests | prompt | cached | hit rate | spend | lost $ | top loss |",
                  "|" + "---|" * len(b.by) + "---:|---:|---:|---:|---:|---:|---|"]
        for row in b.rows:
            cells = [md_text("(not logged)" if row.key[d] is None else str(row.key[d]), cell=True)
                     for d in b.by]
            lines.append("| " + " | ".join(cells) + f" | {row.requests:,} | "
                         f"{row.prompt_tokens:,} | {row.cached_tokens:,} | "
                         f"{_pct(row.hit_rate)} | {_money(row.spend_usd)} | "
                         f"{_money(row.lost_usd)} | {md_text(row.top_cause or '–', cell=True)} |")
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
            lines.append(f"| {n} | {wording.finding_label(f)} | {md_text(f.kind, cell=True)} | "
                         f"{'–' if lens else f'{f.lost_tokens:,}'} | "
                         f"{'–' if lens else f'{f.share:.1%}'} | {dollars} | "
                         f"{md_text(f.title, cell=True)} |")
        lines.append("")
        for n, f in shown:
            where = f" · {md_text(f.segment)}" if f.segment else ""
            lines += [f"**{n}. {wording.finding_label(f)} {md_text(f.kind)}** · "
                      f"{md_text(wording.finding_cost(f))}{where}", "",
                      md_text(f.title), "", *_evidence(report, f),
                      f"Fix: {md_text(f.fix)}", ""]
    if report.findings:
        if len(report.findings) > top:
            lines += [f"… and {len(report.findings) - top} more (see the JSON or HTML "
                      "report).", ""]
    if report.gate.checks:
        lines += [f"## Gate: {'passed' if report.gate.passed else 'FAILED'}", "",
                  "| check | result | detail |", "|---|---|---|"]
        lines += [f"| {md_text(c.name, cell=True)} | {'pass' if c.passed else '**FAIL**'} | "
                  f"{md_text(c.detail, cell=True)} |" for c in report.gate.checks]
        lines.append("")
    if report.notes:
        lines += ["## Notes", ""] + [f"- {md_text(n)}" for n in report.notes] + [""]
    return "\n".join(lines)


def md_code(text: str) -> str:
    """`text` as one code span showing it as it is: fenced by more backticks than any run
    of them it holds, padded with a space where it starts or ends with one (CommonMark
    strips a space from each side)."""
    flat = _shown(_CONTROL.sub(" ", text.replace("\n", " ")))
    fence = "`" * (max((len(m.group()) for m in _TICKS.finditer(flat)), default=0) + 1)
    pad = " " if flat[:1] in ("`", " ") or flat[-1:] in ("`", " ") else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def _evidence(report: Report, f: Finding) -> list[str]:
    """A break finding's evidence as a person scans it: the change its JSON excerpt names,
    and where its first example pair diverges, was / now as code."""
    out = []
    excerpt = f.evidence.get("excerpt") if f.evidence.get("example_pairs") else None
    if excerpt:
        out += [f"Change: {md_text(str(excerpt))}", ""]
    found = wording.divergence(report, f)
    if found is not None:
        token, segment, was, now = found
        out += [f"First divergence at token {token:,} in {md_text(segment)}: was "
                f"{md_code(was)} now {md_code(now)}", ""]
    return out
