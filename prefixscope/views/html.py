"""The report as one self-contained HTML file: the summary, every finding with its evidence
and fix, the gate, the scenarios' stable prefixes and the plots (PNG, inline).

Safe to open whatever the logs held: every piece of text goes through `html.escape`
(quotes included), the plots are pixels (log text drawn, never markup), and a Content
Security Policy forbids scripts and every load but the inline images -- so a `<script>`
planted in a prompt can neither run nor reach the network, even were an escape missed.
Characters that draw nothing or reorder the line around them (bidi controls, zero-width
characters: `views.invisible`) are shown as ``\\uNNNN``.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterator
from typing import Any

from prefixscope.findings.model import LENS_KINDS, Finding, Report
from prefixscope.views import plots, wording
from prefixscope.views.invisible import escaped
from prefixscope.views.json import jsonable

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; " \
      "form-action 'none'"
_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;
color:#222;overflow-wrap:break-word}code{overflow-wrap:anywhere}
h1{font-size:1.6em}h2{margin-top:2em;border-bottom:1px solid #ddd}
.scroll{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:.2em .7em;border-bottom:1px solid #eee;
text-align:left;vertical-align:top}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;
overflow-wrap:normal;white-space:nowrap}
table.evidence{font-size:.9em;margin:.3em 0 .6em}table.evidence th{font-weight:normal;color:#555}
table.evidence table{margin:0}
.badge{display:inline-block;padding:0 .5em;border-radius:.8em;font-size:.8em;font-weight:bold;
vertical-align:middle}.approx{background:#fff3cd;color:#7a5600;border:1px solid #e0c36a}
td.cause{white-space:nowrap}
@media (max-width:640px){body{font-size:13px;margin:1em auto;padding:0 .6em}
td,th{padding:.2em .35em}table.findings .wide{display:none}}
.finding{border-left:4px solid #999;padding:.3em 1em;margin:1em 0;background:#fafafa}
.high{border-color:#c44e52}.medium{border-color:#dd8452}.low{border-color:#4c72b0}
.info{border-color:#aaa}.lens{border-color:#8172b3}
tr.group th{font-weight:normal;font-style:italic;color:#555;padding-top:.6em}
.sev{font-weight:bold;text-transform:uppercase;font-size:.8em}
.fix{color:#1b5e20}pre{white-space:pre-wrap;word-break:break-all;background:#f3f3f3;
padding:.5em;font-size:12px}.pass{color:#1b5e20}.fail{color:#b71c1c;font-weight:bold}
figure{margin:1.5em 0}figcaption{color:#555;font-size:.9em}img{max-width:100%}
.bar{display:flex;height:1.4em;width:100%;border:1px solid #ccc;margin:.5em 0}
.bar span{display:block;height:100%}.key{display:inline-block;width:.9em;height:.9em;
margin-right:.4em;vertical-align:middle}.caveat{color:#8a5a00}.legend{color:#555;font-size:.9em}
"""


def esc(value: object) -> str:
    """Any value as inert HTML text (invisible and reordering characters shown)."""
    return html.escape(escaped(str(value)), quote=True)


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def report_html(report: Report) -> str:
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">',
             '<meta name="referrer" content="no-referrer">',
             "<title>prefixscope report</title>", f"<style>{_STYLE}</style></head><body>",
             "<h1>prefixscope report" + (' <span class="badge approx">approximate</span>'
                                          if wording.approximate_line(report) else "")
             + "</h1>"]
    parts += _summary(report)
    parts += _breakdown(report)
    parts += _findings(report)
    parts += _gate(report)
    parts += _scenarios(report)
    parts += _plots(report)
    if report.notes:
        parts.append("<h2>Notes</h2><ul>")
        parts += [f"<li>{esc(n)}</li>" for n in report.notes]
        parts.append("</ul>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _summary(report: Report) -> list[str]:
    s = report.summary
    r = s.replay
    out = [f"<p>{esc(wording.basis_line(s))}.</p>"]
    if r is not None or s.hit_rate is not None:
        out += [f"<p>{esc(wording.rates_title(s))}:</p>",
                '<div class="scroll"><table><tr><th class="n">observed</th>'
                '<th class="n">predicted</th><th class="n">ideal</th><th>replayed with</th></tr>',
                f'<tr><td class="n">{_pct(r.hit_rate_observed if r else s.hit_rate)}</td>'
                f'<td class="n">{_pct(s.hit_rate_predicted)}</td>'
                f'<td class="n">{_pct(s.hit_rate_ideal)}</td><td>{esc(s.engine or "–")}</td>'
                "</tr></table></div>", f'<p class="legend">{esc(wording.RATES_LEGEND)}.</p>']
    out += [f'<p class="caveat">{esc(line)}.</p>' for line in wording.replay_lines(s)]
    approximate = wording.approximate_line(report)
    if approximate:
        out.append(f'<p class="caveat"><span class="badge approx">approximate</span> '
                   f"{esc(approximate.removeprefix('approximate: '))}.</p>")
    out += [f"<p>{esc(line)}.</p>" for line in (wording.money_line(s),
                                                  wording.recorded_cost_line(s)) if line]
    out += [f"<p>{esc(line)}.</p>" for line in wording.what_if_lines(report)]
    return out + _ledger(report)


# One color per ledger cause (the unavoidable ones grey), for the stacked bar.
_CAUSE_COLORS = {
    "cold": "#c7c7c7", "new": "#dedede", "rounding": "#ededed", "break": "#c44e52",
    "compaction": "#8172b3", "not-requested": "#ccb974", "routing": "#64b5cd",
    "ttl": "#dd8452", "below-minimum": "#937860",
    "eviction": "#4c72b0", "provider": "#da8bc3", "unexplained": "#55a868",
}


def _ledger(report: Report) -> list[str]:
    """The missed tokens as a stacked bar (CSS, no script) and a table that sums."""
    ledger = report.ledger
    line = wording.ledger_line(ledger)
    if ledger is None or line is None:
        return []
    out = ["<h2>Where the missed tokens went</h2>", f"<p>{esc(line)}.</p>"]
    verdicts = wording.verdicts_line(report)
    if verdicts is not None:
        out.append(f"<p>{esc(verdicts)}.</p>")
    if not ledger.missed_tokens:
        return out
    parts = sorted(((c, n) for c, n in ledger.by_cause.items() if n), key=lambda kv: -kv[1])
    usd = ledger.money.lost_usd_by_cause if ledger.money is not None else {}
    out.append('<div class="bar" role="img" aria-label="missed tokens by cause">')
    out += [f'<span style="width:{100 * n / ledger.missed_tokens:.3f}%;'
            f'background:{_CAUSE_COLORS[c]}" title="{esc(c)} {n:,}"></span>' for c, n in parts]
    out.append("</div>")
    out.append('<div class="scroll"><table><tr><th>cause</th><th class="n">tokens</th>'
               '<th class="n">share of missed</th><th class="n">lost $</th></tr>')
    for c, n in parts:
        dollars = wording.usd(usd[c]) if c in usd else "–"
        out.append(f'<tr><td class="cause"><span class="key" '
                   f'style="background:{_CAUSE_COLORS[c]}"></span>'
                   f'{esc(c)}</td><td class="n">{n:,}</td>'
                   f'<td class="n">{n / ledger.missed_tokens:.1%}</td>'
                   f'<td class="n">{esc(dollars)}</td></tr>')
    out.append(f'<tr><th>missed</th><th class="n">{ledger.missed_tokens:,}</th>'
               '<th class="n">100%</th><th></th></tr></table></div>')
    return out


def _breakdown(report: Report) -> list[str]:
    b = report.breakdown
    if b is None:
        return []
    out = [f"<h2>By {esc(', '.join(b.by))}</h2>", '<div class="scroll"><table><tr>'
           + "".join(f"<th>{esc(d)}</th>" for d in b.by)
           + "<th>requests</th><th>prompt</th><th>cached</th><th>hit rate</th><th>spend</th>"
             "<th>lost $</th><th>top loss</th></tr>"]
    for r in b.rows:
        cells = "".join(f"<td>{esc('(not logged)' if r.key[d] is None else r.key[d])}</td>"
                        for d in b.by)
        money = [wording.usd(v) if v is not None else "–" for v in (r.spend_usd, r.lost_usd)]
        out.append(f'<tr>{cells}<td class="n">{r.requests:,}</td>'
                   f'<td class="n">{r.prompt_tokens:,}</td><td class="n">{r.cached_tokens:,}'
                   f'</td><td class="n">{_pct(r.hit_rate)}</td><td class="n">{esc(money[0])}'
                   f'</td><td class="n">{esc(money[1])}</td><td>{esc(r.top_cause or "–")}'
                   "</td></tr>")
    return [*out, "</table></div>"]


def _findings(report: Report) -> list[str]:
    out = ["<h2>Findings</h2>"]
    if not report.findings:
        return [*out, f"<p>{esc(wording.no_findings_line(report))}.</p>"]
    out += findings_table(report)
    for group, shown in wording.grouped(report.findings):
        out.append(f'<h3 class="group">{esc(wording.GROUP_TITLES[group])}</h3>')
        for n, f in shown:
            out += _finding(report, n, f)
    return out


def findings_table(report: Report) -> list[str]:
    """The page's table of findings in the report's reading order, a titled row before
    each group (causes, lenses, what costs nothing), one row each linking to its section
    (a notebook shows the same table: `prefixscope.api.Report._repr_html_`)."""
    # on a phone the kind, share and dollars columns give way to the finding itself
    out = ['<div class="scroll"><table class="findings"><tr><th class="n">#</th>'
           '<th>severity</th><th class="wide">kind</th><th class="n">lost tokens</th>'
           '<th class="n wide">share</th><th class="n wide">lost $</th><th>finding</th>'
           "</tr>"]
    for group, shown in wording.grouped(report.findings):
        out.append(f'<tr class="group"><th colspan="7">{esc(wording.GROUP_TITLES[group])}'
                   "</th></tr>")
        out += [f'<tr><td class="n">{n}</td><td>{esc(wording.finding_label(f))}</td>'
                f'<td class="wide">{esc(f.kind)}</td>'
                f'<td class="n">{_lost(f)}</td><td class="n wide">{_share(f)}</td>'
                f'<td class="n wide">{esc(wording.usd(f.lost_usd)) if f.lost_usd else "–"}'
                f'</td><td><a href="#f{n}">{esc(f.title)}</a></td></tr>' for n, f in shown]
    out.append("</table></div>")
    return out


def _lost(f: Finding) -> str:
    """A lens claims no token: its cell is empty, what it shows is in its section."""
    return "–" if f.kind in LENS_KINDS else f"{f.lost_tokens:,}"


def _share(f: Finding) -> str:
    return "–" if f.kind in LENS_KINDS else f"{f.share:.1%}"


def _finding(report: Report, n: int, f: Finding) -> list[str]:
    where = f" · segment <code>{esc(f.segment)}</code>" if f.segment else ""
    after = ""
    # said once: most fixes already give the hit rate a replay of the fix reaches
    if f.fix_hit_rate is not None and _pct(f.fix_hit_rate) not in f.fix:
        after = f" Expected hit rate after the fix: {_pct(f.fix_hit_rate)}."
    label = wording.finding_label(f)
    return [f'<section class="finding {esc(label)}" id="f{n}">',
            f'<p><span class="sev">{esc(label)}</span> <b>{esc(f.kind)}</b>{where} · '
            f"{esc(wording.finding_cost(f))}</p>",
            f"<p><b>{esc(f.title)}</b></p>", *_divergence(report, f),
            f'<p class="fix">Fix: {esc(f.fix)}{esc(after)}</p>',
            f'<details><summary>evidence</summary><div class="scroll">'
            f"{evidence_table(jsonable(dict(f.evidence)))}</div></details>",
            "</section>"]


def _divergence(report: Report, f: Finding) -> list[str]:
    """A break finding's first divergence, was / now, as the terminal and Markdown say it."""
    found = wording.divergence(report, f)
    if found is None:
        return []
    token, segment, was, now = found
    return [f'<p class="divergence">first divergence at token {token:,} in '
            f"<code>{esc(segment)}</code>: was <code>{esc(was)}</code> now "
            f"<code>{esc(now)}</code></p>"]


def evidence_value(key: str, value: Any) -> str:
    """One evidence value as inert HTML a person reads: numbers rounded (shares and rates
    as percents), lists joined, mappings as a nested table."""
    if value is None:
        return "unlimited" if "capacity" in key else "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if any(word in key for word in ("share", "rate", "agreement", "coverage", "curve")) \
                and 0 <= value <= 1:
            return f"{value:.1%}"
        return f"{value:,.0f}" if value.is_integer() or abs(value) >= 100 else f"{value:,.2f}"
    if isinstance(value, dict):
        return evidence_table(value)
    if isinstance(value, list | tuple):
        if all(not isinstance(v, dict | list | tuple) for v in value):
            return ", ".join(evidence_value(key, v) for v in value) or "–"
        return "<br>".join(evidence_value(key, v) if not isinstance(v, list | tuple) else
                           " → ".join(evidence_value(key, x) for x in v) for v in value)
    return esc(value)


def evidence_table(evidence: dict[str, Any]) -> str:
    """A finding's evidence (its JSON form) as a two-column table."""
    if not evidence:
        return "–"
    rows = "".join(f'<tr><th>{esc(str(k).replace("_", " "))}</th>'
                   f"<td>{evidence_value(str(k), v)}</td></tr>" for k, v in evidence.items())
    return f'<table class="evidence">{rows}</table>'



def _gate(report: Report) -> list[str]:
    if not report.gate.checks:
        return []
    verdict = "passed" if report.gate.passed else "FAILED"
    out = [f'<h2>Gate: <span class="{"pass" if report.gate.passed else "fail"}">{verdict}'
           "</span></h2>", '<div class="scroll"><table><tr><th>check</th><th>result</th>'
           '<th class="n">value</th><th class="n">threshold</th><th>detail</th></tr>']
    out += [f'<tr><td>{esc(c.name)}</td><td class="{"pass" if c.passed else "fail"}">'
            f'{"pass" if c.passed else "FAIL"}</td><td class="n">{esc(c.value)}</td>'
            f'<td class="n">{esc(c.threshold)}</td><td>{esc(c.detail)}</td></tr>'
            for c in report.gate.checks]
    return [*out, "</table></div>"]


def _scenarios(report: Report) -> list[str]:
    if not report.scenarios:
        return []
    out = ["<h2>Stable prefix per scenario</h2>",
           "<p>The fewest tokens any turn of the session shares with the next "
           "(<code>--write-baseline</code> saves these; <code>--baseline</code> fails when "
           "one shrinks).</p>",
           '<div class="scroll"><table><tr><th>scenario</th><th class="n">turns</th>'
           '<th class="n">stable prefix tokens</th></tr>']
    out += [f'<tr><td>{esc(s.scenario)}</td><td class="n">{s.turns}</td>'
            f'<td class="n">{s.stable_prefix_tokens:,}</td></tr>' for s in report.scenarios]
    return [*out, "</table></div>"]


def _plots(report: Report) -> list[str]:
    out = ["<h2>Plots</h2>"]
    drawn = 0
    for caption, make in _figures(report):
        try:
            fig = make()
        except ValueError:  # nothing to draw for this plot
            continue
        if fig is None:
            continue
        out.append(f'<figure><img alt="{esc(caption)}" src="data:image/png;base64,'
                   f'{plots.png_base64(fig)}"><figcaption>{esc(caption)}</figcaption></figure>')
        drawn += 1
    return out if drawn else []


def _figures(report: Report) -> Iterator[tuple[str, Callable[[], Any]]]:
    ev = report.evidence
    if ev is None:
        return
    yield ("Cached tokens per request, per log; dashed lines: spikes at exact constants",
           lambda: plots.bucket_figure(ev.bucket)[0] if ev.bucket.groups else None)
    if ev.by_dimension:
        yield ("Token-weighted hit rate by dimension",
               lambda: plots.dimension_figure(ev.by_dimension))
    yield "Token-weighted hit rate over time", lambda: plots.time_figure(ev.records)
    yield ("Prompt vs cached tokens per turn, the sessions that lost the most",
           lambda: plots.sessions_figure(ev.records))
    diff, sim = ev.diff, ev.simulate
    if diff is not None:
        yield ("Where consecutive turns first diverge, by cause",
               lambda: plots.divergence_figure(diff))
    if sim is not None and sim.capacity_curve:
        yield ("Predicted hit rate by cache capacity (replay)",
               lambda: plots.capacity_figure(sim))
