"""`build_report`: the finders run over the gathered evidence, ranked by the prompt tokens
each finding costs, each given its share of all prompt tokens and a severity, then gated."""

from __future__ import annotations

from prefixscope.findings.evidence import Evidence
from prefixscope.findings.finders import FINDERS
from prefixscope.findings.gate import GateOptions, evaluate, scenario_prefixes
from prefixscope.findings.model import SEVERITIES, Finding, Report, Summary

HIGH_SHARE = 0.05  # a finding costing this share of all prompt tokens is high severity
MEDIUM_SHARE = 0.01


def summarize(ev: Evidence) -> Summary:
    u = ev.usage
    sim = ev.simulate
    return Summary(
        requests=u.requests, sessions=u.sessions, prompt_tokens=u.prompt_tokens or 0,
        cached_tokens=u.cached_tokens or 0, hit_rate=u.hit_rate,
        hit_rate_predicted=sim.hit_rate_predicted if sim else None,
        hit_rate_ideal=sim.hit_rate_ideal if sim else None,
        engine=sim.engine if sim else None, replayed_requests=sim.requests if sim else 0,
        replayed_prompt_tokens=sim.prompt_tokens if sim else 0)


def share_basis(summary: Summary, ev: Evidence) -> int:
    """All prompt tokens: as the log counts them, else as the replay or the diff did."""
    if summary.prompt_tokens:
        return max(summary.prompt_tokens, summary.replayed_prompt_tokens)
    if summary.replayed_prompt_tokens:
        return summary.replayed_prompt_tokens
    if ev.diff is not None:
        return sum(p.tokens_b for p in ev.diff.pairs)
    return 0


def severity(finding: Finding) -> str:
    if finding.severity:
        return finding.severity
    if finding.share >= HIGH_SHARE:
        return "high"
    if finding.share >= MEDIUM_SHARE:
        return "medium"
    return "low" if finding.lost_tokens else "info"


def build_report(ev: Evidence, gate: GateOptions | None = None) -> Report:
    summary = summarize(ev)
    basis = share_basis(summary, ev)
    found: list[Finding] = []
    for finder in FINDERS:
        for f in finder(ev):
            shared = f.lost_tokens / basis if basis else 0.0
            f = Finding(f.kind, f.severity, f.title, f.segment, f.lost_tokens, shared,
                        f.evidence, f.fix, f.fix_hit_rate)
            found.append(Finding(f.kind, severity(f), f.title, f.segment, f.lost_tokens,
                                 f.share, f.evidence, f.fix, f.fix_hit_rate))
    rank = {s: n for n, s in enumerate(SEVERITIES)}
    found.sort(key=lambda f: (-f.lost_tokens, rank[f.severity], f.kind, f.segment or ""))
    scenarios = scenario_prefixes(ev.diff, ev.scenarios)
    return Report(summary, tuple(found), evaluate(gate or GateOptions(), summary, ev.diff,
                                                   scenarios), scenarios, ev.notes, ev)
