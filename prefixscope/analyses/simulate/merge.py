"""simulate's last job: replays of separate cache domains merged into one report,
and the per-request rows the store keeps."""

from __future__ import annotations

from collections.abc import Sequence

from prefixscope.analyses.simulate.classify import _rate
from prefixscope.analyses.simulate.model import MISS_CLASSES, SimulateReport, WhatIfResult


def stored_rows(report: SimulateReport) -> list[tuple[str, str | None, int, int | None, int,
                                                       int, int | None, dict[str, int]]]:
    """The per-request results as `Store.save_simulation` takes them."""
    return [(r.id, r.session, r.prompt_tokens, r.observed, r.predicted, r.ideal, r.shortfall,
             dict(r.misses)) for r in report.per_request]



def merge_replays(reports: Sequence[SimulateReport]) -> SimulateReport:
    """Replays of separate cache domains (`SimulateOptions.source_files`) as one report:
    counts and miss classes summed, hit rates token-weighted over all of them, each what-if's
    gain summed; the per-domain fit and capacity curve stay with each domain's report."""
    if len(reports) == 1:
        return reports[0]
    per_request = tuple(r for report in reports for r in report.per_request)
    prompt = sum(report.prompt_tokens for report in reports)
    predicted = sum(r.predicted for r in per_request)
    misses = dict.fromkeys(MISS_CLASSES, 0)
    for report in reports:
        for name, n in report.misses.items():
            misses[name] += n
    # Each domain's observed rate is over its log's own prompt tokens: weighted by those.
    observed_prompt = sum(_observed_basis(report) for report in reports
                          if report.hit_rate_observed is not None)
    observed = sum((report.hit_rate_observed or 0.0) * _observed_basis(report)
                   for report in reports if report.hit_rate_observed is not None)
    agreed = [(report.agreement, sum(r.observed is not None for r in report.per_request))
              for report in reports if report.agreement is not None]
    what_if = []
    for transform in dict.fromkeys(w.transform for report in reports for w in report.what_if):
        results = [w for report in reports for w in report.what_if if w.transform == transform]
        gain = sum(w.gain_tokens for w in results)
        ideal = [(w.hit_rate_ideal, report.prompt_tokens) for report in reports
                 for w in report.what_if if w.transform == transform]
        what_if.append(WhatIfResult(
            transform, _weighted(ideal), _rate(predicted + gain, prompt), gain))
    skipped: dict[str, int] = {}
    for report in reports:
        for reason, n in report.skipped.items():
            skipped[reason] = skipped.get(reason, 0) + n
    units = {report.unit for report in reports}
    largest = max(reports, key=lambda report: report.prompt_tokens)
    return SimulateReport(
        engine=largest.engine, unit=largest.unit if len(units) > 1 else units.pop(),
        capacity_tokens=None, requests=len(per_request), prompt_tokens=prompt,
        hit_rate_observed=_rate(round(observed), observed_prompt) if observed_prompt else None,
        hit_rate_predicted=_rate(predicted, prompt),
        hit_rate_ideal=_rate(sum(r.ideal for r in per_request), prompt),
        agreement=(sum(a * n for a, n in agreed) / sum(n for _, n in agreed)
                   if agreed and sum(n for _, n in agreed) else None),
        misses=misses, per_request=per_request, what_if=tuple(what_if), skipped=skipped,
        approximate_requests=sum(report.approximate_requests for report in reports),
        observed_above_ideal=sum(report.observed_above_ideal for report in reports))


def _observed_basis(report: SimulateReport) -> int:
    """The weight of a domain's observed hit rate: its observed requests' prompt tokens."""
    return sum(r.prompt_tokens for r in report.per_request if r.observed is not None)


def _weighted(pairs: Sequence[tuple[float | None, int]]) -> float | None:
    known = [(v, w) for v, w in pairs if v is not None]
    total = sum(w for _, w in known)
    return sum(v * w for v, w in known) / total if total else None
