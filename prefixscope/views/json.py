"""Typed analysis results -> the documented JSON shapes (declared in `jsonshapes`,
documented in docs/json.md; tests hold the three together). The diff's and the ingest's
are apart, with their result types (`views.diffed`, `views.ingested`), and re-exported
here: a diff or an ingest imports none of the analyses this module reads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from prefixscope.analyses.bucket import Boundary, BucketReport, HistogramBin
from prefixscope.analyses.diff import PairDiff
from prefixscope.analyses.engine_cache import EngineLogAnalysis, RateSummary, stamp
from prefixscope.analyses.prompt_spans import RenderResult
from prefixscope.analyses.segments import (
    SegmentsReport,
    SegmentStats,
    SegmentsTotals,
    census,
)
from prefixscope.analyses.simulate import MISS_CLASSES, RequestSim, SimulateReport
from prefixscope.findings.breakdown import Breakdown
from prefixscope.findings.calls import Call, Calls
from prefixscope.findings.ledger import Basis, Ledger, Money, RecordedCost
from prefixscope.findings.model import ReplayBasis, Report
from prefixscope.findings.values import Policy
from prefixscope.findings.verdicts import VerdictCall, reconcile
from prefixscope.model.hashing import HASH_VERSION
from prefixscope.views import wording
from prefixscope.views.ingested import ingest_json as ingest_json
from prefixscope.views.ingested import usage_summary_json as usage_summary_json
from prefixscope.views.jsonshapes import (
    BasisJson,
    BoundaryJson,
    BreakdownJson,
    BucketJson,
    CallJson,
    CallsJson,
    EngineLogJson,
    EngineRateJson,
    LedgerJson,
    MissesJson,
    MoneyJson,
    PolicyJson,
    RecordedCostJson,
    RenderJson,
    ReplayBasisJson,
    ReportJson,
    SegmentRowJson,
    SegmentsByJson,
    SegmentsJson,
    SegmentsTotalsJson,
    SimulateJson,
    SimulateRequestJson,
    VerdictCallJson,
)


def bucket_json(report: BucketReport, spend: Breakdown | None = None) -> BucketJson:
    """The documented JSON shape (docs/json.md); `spend`: usage and dollars by the same
    dimensions (with --by)."""
    def bins(hist: Sequence[HistogramBin]) -> list[Any]:
        return [{"lo": b.lo, "hi": b.hi, "requests": b.requests} for b in hist]

    return {
        "groups": [{
            "key": g.key, "requests": g.requests, "prompt_tokens": g.prompt_tokens,
            "cached_tokens": g.cached_tokens, "hit_rate": g.hit_rate,
            "mean_request_hit_rate": g.mean_request_hit_rate, "zero_cached": g.zero_cached,
            "histogram": bins(g.histogram), "fraction_histogram": bins(g.fraction_histogram),
            "block_size": g.block_size, "block_size_basis": g.block_basis,
            "block_size_candidates": list(g.block_size_candidates),
            "spikes": [{
                "cached_tokens": s.cached_tokens, "requests": s.requests, "share": s.share,
                "blocks": s.blocks,
                "boundary": None if s.boundary is None else _boundary_json(s.boundary),
                "explanation": s.explanation,
            } for s in g.spikes],
            "notes": list(g.notes),
        } for g in report.groups],
        "totals": {"requests": report.totals.requests,
                   "prompt_tokens": report.totals.prompt_tokens,
                   "cached_tokens": report.totals.cached_tokens,
                   "hit_rate": report.totals.hit_rate,
                   "without_usage": report.totals.without_usage},
        "by": list(report.by),
        "block_size": report.block_size,
        "block_size_source": report.block_size_source,
        "block_size_candidates": list(report.block_size_candidates),
        "spend": breakdown_json(spend),
        "notes": list(report.notes),
    }


def _boundary_json(b: Boundary) -> BoundaryJson:
    # A boundary bucket reports was counted over the rendered requests (bucket_store).
    assert b.distinct_after is not None
    return {"segment_before": b.segment_before, "segment_after": b.segment_after,
            "token": b.token, "requests": b.requests, "rendered": b.rendered,
            "distinct_after": b.distinct_after}


def segments_json(reports: list[SegmentsReport], by: tuple[str, ...] = ()
                ) -> SegmentsJson | SegmentsByJson:
    """The documented JSON shape (docs/json.md): one census, or one per --by group."""
    def seg(s: SegmentStats) -> SegmentRowJson:
        return {"segment": s.segment, "kind": s.kind, "requests": s.requests,
                "distinct": s.distinct, "pairs": s.pairs, "change_rate": s.change_rate,
                "unique_per_request": s.unique_per_request, "change_kinds": s.change_kinds,
                "token_start_median": s.token_start_median,
                "tokens_after_median": s.tokens_after_median,
                "invalidated_tokens": s.invalidated_tokens, "preview": s.preview}

    def tot(t: SegmentsTotals) -> SegmentsTotalsJson:
        return {"requests": t.requests, "pairs": t.pairs, "segments": t.segments,
                "without_body": t.without_body, "hash_version": t.hash_version}

    if not by:
        only = reports[0] if reports else census([], [])
        return {"segments": [seg(s) for s in only.segments], "totals": tot(only.totals)}
    return {
        "groups": [{"key": r.group, "segments": [seg(s) for s in r.segments],
                    "totals": tot(r.totals)} for r in reports],
        "by": list(by),
        "totals": {"requests": sum(r.totals.requests for r in reports),
                   "pairs": sum(r.totals.pairs for r in reports),
                   "without_body": sum(r.totals.without_body for r in reports),
                   "hash_version": HASH_VERSION},
    }


def render_json(result: RenderResult, *, show_text: bool = False) -> RenderJson:
    """The documented JSON shape (stable keys)."""
    out: RenderJson = {
        "request": result.request,
        "gateway": result.gateway,
        "tokenizer": result.tokenizer,
        "tokens": result.tokens,
        "approximate": result.approximate,
        "segments": [
            {"segment": s.segment, "kind": s.kind, "char_start": s.char_start,
             "char_end": s.char_end, "token_start": s.token_start, "token_end": s.token_end}
            for s in result.segments],
    }
    if show_text:
        out["text"] = result.text
    return out


def simulate_json(report: SimulateReport, *, per_request: bool = False) -> SimulateJson:
    m = report.misses
    misses: MissesJson = {
        "new": m.get("new", 0), "cold": m.get("cold", 0), "break": m.get("break", 0),
        "eviction": m.get("eviction", 0), "ttl": m.get("ttl", 0),
        "compaction": m.get("compaction", 0), "provider": m.get("provider", 0),
        "unexplained": m.get("unexplained", 0)}
    assert set(misses) == set(MISS_CLASSES)
    out: SimulateJson = {
        "engine": report.engine, "block_size": report.unit,
        "capacity_tokens": report.capacity_tokens, "requests": report.requests,
        "prompt_tokens": report.prompt_tokens,
        "hit_rate": {"observed": report.hit_rate_observed,
                     "predicted": report.hit_rate_predicted, "ideal": report.hit_rate_ideal},
        "agreement": report.agreement, "misses": misses,
        "what_if": [{"transform": w.transform, "hit_rate_ideal": w.hit_rate_ideal,
                     "hit_rate_predicted": w.hit_rate_predicted, "gain_tokens": w.gain_tokens}
                    for w in report.what_if],
        "capacity_curve": [{"capacity_tokens": c.capacity_tokens, "hit_rate": c.hit_rate,
                            "within_tokens": c.within_tokens, "across_tokens": c.across_tokens,
                            "hit_rate_within": c.hit_rate_within,
                            "hit_rate_across": c.hit_rate_across}
                           for c in report.capacity_curve],
        "fit": None if report.fit is None else {
            "block_size": report.fit.unit, "capacity_tokens": report.fit.capacity_tokens,
            "agreement": report.fit.agreement, "ttl_seconds": report.fit.ttl_seconds},
        "skipped": dict(report.skipped),
        "approximate_requests": report.approximate_requests,
        "observed_above_ideal": report.observed_above_ideal,
    }
    if per_request:
        out["per_request"] = [_simulated_request(r) for r in report.per_request]
    return out


def _simulated_request(r: RequestSim) -> SimulateRequestJson:
    return {"id": r.id, "session": r.session, "prompt_tokens": r.prompt_tokens,
            "observed": r.observed, "predicted": r.predicted, "ideal": r.ideal,
            "shortfall": r.shortfall, "misses": dict(r.misses)}


def report_json(report: Report) -> ReportJson:
    s = report.summary
    return {
        "summary": {"requests": s.requests, "sessions": s.sessions,
                    "prompt_tokens": s.prompt_tokens, "cached_tokens": s.cached_tokens,
                    "hit_rate": s.hit_rate, "hit_rate_predicted": s.hit_rate_predicted,
                    "hit_rate_ideal": s.hit_rate_ideal, "engine": s.engine,
                    "replayed_requests": s.replayed_requests,
                    "replayed_prompt_tokens": s.replayed_prompt_tokens,
                    "basis": _basis_json(s.basis),
                    "replay": _replay_basis_json(s.replay),
                    "money": _money_json(s.money)},
        "ledger": _ledger_json(report.ledger, report.evidence.verdicts
                               if report.evidence is not None else {},
                               report.evidence.diff.pairs if report.evidence is not None
                               and report.evidence.diff is not None else ()),
        "what_if": [{"name": w.name, "detail": w.detail, "gain_tokens": w.gain_tokens,
                     "hit_rate_predicted": w.hit_rate_predicted,
                     "saved_usd": _usd(w.saved_usd), "cost_usd": _usd(w.cost_usd),
                     "net_usd": _usd(w.net_usd), "policy": _policy_json(w.policy)}
                    for w in report.what_ifs],
        "by": breakdown_json(report.breakdown),
        "findings": [{"kind": f.kind, "severity": f.severity, "title": f.title,
                      "segment": f.segment, "lost_tokens": f.lost_tokens,
                      "share": float(f.share), "lost_usd": _usd(f.lost_usd),
                      "evidence": jsonable(dict(f.evidence)),
                      "fix": f.fix, "fix_hit_rate": f.fix_hit_rate}
                     for f in report.findings],
        "gate": {"passed": report.gate.passed,
                 "checks": [{"name": c.name, "passed": c.passed, "value": c.value,
                             "threshold": c.threshold, "detail": c.detail}
                            for c in report.gate.checks]},
        "scenarios": [{"scenario": p.scenario, "turns": p.turns,
                       "stable_prefix_tokens": p.stable_prefix_tokens}
                      for p in report.scenarios],
        "notes": list(report.notes),
    }


def calls_json(calls: Calls) -> CallsJson:
    """`prefixscope calls --json` (docs/json.md)."""
    return {
        "basis": calls.basis, "session": calls.session, "requests": calls.requests,
        "prompt_tokens": calls.prompt_tokens, "cached_tokens": calls.cached_tokens,
        "missed_tokens": calls.missed_tokens, "by_cause": calls.by_cause,
        "outside_requests": calls.outside_requests,
        "sessions": [{"session": s.session, "requests": len(s.calls),
                      "prompt_tokens": s.prompt_tokens, "cached_tokens": s.cached_tokens,
                      "cache_write_tokens": s.cache_write_tokens,
                      "missed_tokens": s.missed_tokens, "hit_rate": s.hit_rate,
                      "by_cause": s.by_cause, "calls": [_call_json(c) for c in s.calls]}
                     for s in calls.sessions],
    }


def _call_json(c: Call) -> CallJson:
    return {"id": c.id, "time": c.timestamp.isoformat() if c.timestamp else None,
            "model": c.model, "prompt_tokens": c.prompt_tokens,
            "cached_tokens": c.cached_tokens, "cache_write_tokens": c.cache_write_tokens,
            "missed_tokens": c.missed_tokens, "cause": c.cause, "causes": dict(c.causes),
            "break_kind": c.break_kind, "break_segment": c.break_segment,
            "gap_seconds": None if c.gap_seconds is None else float(c.gap_seconds),
            "events": [{"kind": e.kind, "detail": e.detail,
                        "time": e.timestamp.isoformat() if e.timestamp else None,
                        "line": e.source_line} for e in c.events],
            "recorded": c.recorded,
            "verdict": None if c.verdict is None else {
                "reason": c.verdict, "missed_tokens": c.verdict_missed_tokens}}


def breakdown_json(b: Breakdown | None) -> BreakdownJson | None:
    if b is None:
        return None
    return {"dimensions": list(b.by), "basis": b.basis, "rows": [
        {"key": jsonable(r.key), "requests": r.requests, "prompt_tokens": r.prompt_tokens,
         "cached_tokens": r.cached_tokens, "hit_rate": r.hit_rate,
         "missed_tokens": r.missed_tokens, "lost_tokens": r.lost_tokens,
         "spend_usd": _usd(r.spend_usd), "lost_usd": _usd(r.lost_usd),
         "top_cause": r.top_cause} for r in b.rows]}


def _policy_json(policy: Policy | None) -> PolicyJson | None:
    if policy is None:
        return None
    return {"net_usd": _dollars(policy.net_usd), "pinning": policy.pinning,
            "parts": [{"agent": p.agent, "project": p.project,
                       "model": p.model, "requests": p.requests,
                       "expired_requests": p.expired_requests, "ttl_tokens": p.ttl_tokens,
                       "choice": p.choice, "pin_backend": p.pin,
                       "net_usd": _dollars(p.net_usd),
                       "options": [{"name": o.name, "saved_usd": _dollars(o.saved_usd),
                                    "cost_usd": _dollars(o.cost_usd),
                                    "net_usd": _dollars(o.net_usd),
                                    "kept_requests": o.kept_requests,
                                    "kept_tokens": o.kept_tokens, "pings": o.pings,
                                    "ping_minutes": o.ping_minutes,
                                    "moved_tokens": o.moved_tokens,
                                    "moved_requests": o.moved_requests,
                                    "moved_usd": _dollars(o.moved_usd)} for o in p.options],
                       "turns": [{"turn": t.turn, "requests": t.requests,
                                  "expired_requests": t.expired_requests,
                                  "ttl_tokens": t.ttl_tokens,
                                  "kept_requests": t.kept_requests,
                                  "kept_tokens": t.kept_tokens,
                                  "saved_usd": _dollars(t.saved_usd), "pings": t.pings,
                                  "ping_usd": _dollars(t.ping_usd),
                                  "moved_tokens": t.moved_tokens,
                                  "moved_usd": _dollars(t.moved_usd)} for t in p.turns],
                       "routing_tokens": p.routing_tokens, "pin_usd": _usd(p.pin_usd),
                       "reused_share": p.reused_share,
                       "break_even_share": p.break_even_share,
                       "payback_pause_minutes": p.payback_pause_minutes,
                       "volatile_tokens": p.volatile_tokens, "move": p.move,
                       "detail": p.detail} for p in policy.parts]}


def _dollars(value: float) -> float:
    """Dollars to the micro-dollar, always a float (an empty sum is the int 0)."""
    return round(float(value), 6)


def _usd(value: float | None) -> float | None:
    """Dollars to the micro-dollar: sums of per-call prices carry float noise below it."""
    return None if value is None else round(float(value), 6)


def _basis_json(b: Basis | None) -> BasisJson | None:
    if b is None:
        return None
    return {"source": b.source, "requests": b.requests, "prompt_tokens": b.prompt_tokens,
            "cached_tokens": b.cached_tokens, "outside_requests": b.outside_requests,
            "outside_prompt_tokens": b.outside_prompt_tokens,
            "outside_reason": b.outside_reason}


def _replay_basis_json(r: ReplayBasis | None) -> ReplayBasisJson | None:
    if r is None:
        return None
    return {"requests": r.requests, "prompt_tokens": r.prompt_tokens,
            "cached_tokens": r.cached_tokens, "replayed_prompt_tokens": r.replayed_prompt_tokens,
            "logged_prompt_tokens": r.logged_prompt_tokens,
            "rebuilt_prompt_tokens": r.rebuilt_prompt_tokens,
            "coverage": r.coverage, "partial": r.partial, "not_rebuilt": r.not_rebuilt,
            "hit_rate_observed": r.hit_rate_observed, "hit_rate_predicted": r.hit_rate_predicted,
            "hit_rate_ideal": r.hit_rate_ideal, "with_body": r.with_body,
            "above_ideal": wording.above_ideal(r)}


def _money_json(m: Money | None) -> MoneyJson | None:
    if m is None:
        return None
    return {"source": m.source, "priced_requests": m.priced_requests,
            "unpriced_requests": m.unpriced_requests, "unknown_models": list(m.unknown_models),
            "spend_usd": _usd(m.spend_usd) or 0.0, "saved_usd": _usd(m.saved_usd) or 0.0,
            "write_premium_usd": _usd(m.write_premium_usd) or 0.0,
            "net_saved_usd": _usd(m.net_saved_usd) or 0.0,
            "lost_usd": _usd(m.lost_usd) or 0.0,
            "lost_usd_by_cause": {c: _usd(v) or 0.0 for c, v in m.lost_usd_by_cause.items()},
            "recorded": _recorded_json(m.recorded)}


def _recorded_json(r: RecordedCost | None) -> RecordedCostJson | None:
    if r is None:
        return None
    return {"requests": r.requests, "usd": _usd(r.usd) or 0.0,
            "compared_requests": r.compared_requests,
            "compared_recorded_usd": _usd(r.compared_recorded_usd) or 0.0,
            "compared_list_usd": _usd(r.compared_list_usd) or 0.0,
            "ratio": round(r.ratio, 4) if r.ratio is not None else None,
            "by_model": [{"model": m.model, "requests": m.requests,
                          "recorded_usd": _usd(m.recorded_usd) or 0.0,
                          "list_usd": _usd(m.list_usd) or 0.0} for m in r.by_model]}


def _ledger_json(ledger: Ledger | None, verdicts: Mapping[str, tuple[str, int | None]],
                 pairs: Sequence[PairDiff]) -> LedgerJson | None:
    if ledger is None:
        return None
    agreed = reconcile(ledger, verdicts, pairs)
    by_cause: dict[str, object] = {}
    for cause, tokens in ledger.by_cause.items():
        if cause == "break":
            by_cause[cause] = {"tokens": tokens, "by_kind": dict(ledger.break_by_kind),
                               "by_segment": dict(ledger.break_by_segment)}
        else:
            by_cause[cause] = tokens
    basis = _basis_json(ledger.basis)
    assert basis is not None
    return {"basis": basis, "missed_tokens": ledger.missed_tokens, "by_cause": by_cause,
            "lost_tokens": ledger.lost_tokens,
            "lost_usd": ({c: _usd(v) or 0.0 for c, v in ledger.money.lost_usd_by_cause.items()}
                         if ledger.money is not None else None),
            "provider_verdicts": {"calls": agreed.calls, "compared": agreed.compared,
                                  "agree": agreed.agree,
                                  "provider_missed_tokens": agreed.provider_missed_tokens,
                                  "lost_tokens": agreed.lost_tokens,
                                  "matrix": {ours: dict(theirs)
                                             for ours, theirs in agreed.matrix.items()},
                                  "per_call": [_verdict_call_json(c)
                                               for c in agreed.per_call]}}


def _verdict_call_json(c: VerdictCall) -> VerdictCallJson:
    return {"id": c.id, "session": c.session, "reason": c.reason,
            "provider_missed_tokens": c.provider_missed_tokens, "cause": c.cause,
            "kind": c.kind, "segment": c.segment, "lost_tokens": c.lost_tokens,
            "cause_tokens": c.cause_tokens,
            "first_divergence_token": c.first_divergence_token,
            "divergence_segment": c.divergence_segment, "agrees": c.agrees,
            "diffed": c.diffed}


def jsonable(value: Any) -> Any:
    """`value` with tuples as lists, dates as ISO text, other non-JSON leaves as text."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)
def _rate_json(r: RateSummary) -> EngineRateJson:
    return {"points": r.points, "min": r.min, "median": r.median, "max": r.max, "last": r.last}


def engine_log_json(a: EngineLogAnalysis) -> EngineLogJson:
    p, sg, o, lm = a.prometheus, a.sglang, a.offload, a.lmcache
    return {
        "files": [{"file": f, "kind": a.kinds[f], "year_from": a.year_from[f]}
                  for f in a.files],
        "lines": a.lines, "matched": dict(a.matched), "skipped": a.skipped,
        "skips": [{"file": s.file, "line": s.line, "reason": s.reason} for s in a.skips],
        "year_known": a.year_known, "block_size": a.block_size,
        "config": [{"key": c.key, "value": c.value, "file": c.file, "line": c.line}
                   for c in a.config],
        "first": stamp(a.first), "last": stamp(a.last),
        "series_summary": {"prefix_hit_rate": _rate_json(a.prefix_hit_rate),
                           "external_hit_rate": _rate_json(a.external_hit_rate),
                           "kv_usage": _rate_json(a.kv_usage),
                           "cpu_prefix_hit_rate": _rate_json(a.cpu_prefix_hit_rate)},
        "servers": [{"server": v.server, "file": v.file, "source": v.source,
                     "process": v.process, "engine": v.engine, "why": v.why,
                     "lines": v.lines, "first_line": v.first_line, "last_line": v.last_line,
                     "first": stamp(v.first), "last": stamp(v.last),
                     "prefix_hit_rate": _rate_json(v.prefix_hit_rate),
                     "external_hit_rate": _rate_json(v.external_hit_rate),
                     "kv_usage": _rate_json(v.kv_usage), "new_tokens": v.new_tokens,
                     "cached_tokens": v.cached_tokens, "hit_rate": v.hit_rate}
                    for v in a.servers],
        "series": [{"time": stamp(s.time), "file": s.file,
                    "line": s.line, "engine": s.engine,
                    "prompt_throughput": s.prompt_throughput,
                    "generation_throughput": s.generation_throughput, "running": s.running,
                    "waiting": s.waiting, "preemptions": s.preemptions, "kv_usage": s.kv_usage,
                    "prefix_hit_rate": s.prefix_hit_rate,
                    "external_hit_rate": s.external_hit_rate, "mm_hit_rate": s.mm_hit_rate,
                    "cpu_prefix_hit_rate": s.cpu_prefix_hit_rate, "process": s.process,
                    "server": s.server}
                   for s in a.series],
        "offload": {"transfer_lines": o.transfer_lines, "store_points": o.store_points,
                    "load_points": o.load_points, "store_bytes": o.store_bytes,
                    "load_bytes": o.load_bytes, "store_operations": o.store_operations,
                    "load_operations": o.load_operations},
        "prometheus": None if p is None else {
            "files": p.files, "samples": p.samples, "prefix_queries": p.prefix_queries,
            "prefix_hits": p.prefix_hits, "hit_rate": p.hit_rate,
            "external_queries": p.external_queries, "external_hits": p.external_hits,
            "external_hit_rate": p.external_hit_rate, "prompt_tokens": p.prompt_tokens,
            "prompt_tokens_cached": p.prompt_tokens_cached, "kv_usage": p.kv_usage,
            "preemptions": p.preemptions, "running": p.running, "waiting": p.waiting,
            "offload_store_bytes": p.offload_store_bytes,
            "offload_load_bytes": p.offload_load_bytes},
        "sglang": None if sg is None else {
            "prefill_lines": sg.prefill_lines, "new_tokens": sg.new_tokens,
            "cached_tokens": sg.cached_tokens, "hit_rate": sg.hit_rate,
            "max_token_usage": sg.max_token_usage, "max_queue": sg.max_queue},
        "lmcache": None if lm is None else {
            "lookups": lm.lookups, "lookup_tokens": lm.lookup_tokens,
            "hit_tokens": lm.hit_tokens, "hit_rate": lm.hit_rate,
            "loading_lookups": lm.loading_lookups, "load_tokens": lm.load_tokens,
            "stores": lm.stores, "stored_tokens": lm.stored_tokens,
            "stores_from": lm.stores_from, "retrievals": lm.retrievals,
            "required_tokens": lm.required_tokens, "retrieved_tokens": lm.retrieved_tokens,
            "failed_retrievals": lm.failed_retrievals, "lost_blocks": lm.lost_blocks,
            "retrieved_rate": lm.retrieved_rate},
        "findings": [{"kind": f.kind, "title": f.title, "fix": f.fix,
                      "evidence": {k: _json_scalar(v) for k, v in f.evidence.items()}}
                     for f in a.findings],
    }


def _json_scalar(v: object) -> int | float | str | None:
    """An evidence value as JSON: numbers and strings as they are, anything else as text."""
    if v is None or isinstance(v, int | float | str) and not isinstance(v, bool):
        return v
    return str(v)
