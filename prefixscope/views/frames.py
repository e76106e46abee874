"""Typed results -> Polars frames: every table a result shows, for a notebook.

One registry per result type (`REPORT_TABLES`, `DIFF_TABLES`, `SIMULATE_TABLES`,
`RENDER_TABLES`, `CALLS_TABLES`): table name -> the function building it. Each frame has a
fixed schema (an empty table keeps its columns and types) documented in docs/api.md, and
holds the numbers the result's JSON holds (dollars rounded as the JSON rounds them), so a
frame's column sums to the total the report prints: the ledger entries' cause columns sum to
their `missed_tokens`, the causes' `tokens` to the ledger's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from prefixscope.analyses.diff import DiffReport
from prefixscope.analyses.prompt_spans import RenderResult
from prefixscope.analyses.simulate import MISS_CLASSES, SimulateReport
from prefixscope.findings.calls import Calls
from prefixscope.findings.ledger import CAUSES, NOT_LOSSES
from prefixscope.findings.model import Report
from prefixscope.model.errors import Error
from prefixscope.views.json import jsonable

if TYPE_CHECKING:
    import polars as pl


def _frame(rows: list[dict[str, Any]], schema: Mapping[str, str]) -> pl.DataFrame:
    """`rows` as a frame of `schema` (column -> Polars type name)."""
    import polars as pl

    types = {name: getattr(pl, spelled) for name, spelled in schema.items()}
    return pl.DataFrame(rows, schema=types, orient="row") if rows else pl.DataFrame(
        schema=types)


def _usd(value: float | None) -> float | None:
    return None if value is None else round(float(value), 6)


def findings_frame(report: Report) -> pl.DataFrame:
    """One row per finding, ranked (`rank` 1 first), its evidence as JSON text."""
    return _frame([{
        "rank": n, "kind": f.kind, "severity": f.severity, "title": f.title,
        "segment": f.segment, "lost_tokens": f.lost_tokens, "share": float(f.share),
        "lost_usd": _usd(f.lost_usd), "fix": f.fix, "fix_hit_rate": f.fix_hit_rate,
        "evidence": json.dumps(jsonable(dict(f.evidence)), ensure_ascii=False),
    } for n, f in enumerate(report.findings, 1)], {
        "rank": "Int64", "kind": "Utf8", "severity": "Utf8", "title": "Utf8",
        "segment": "Utf8", "lost_tokens": "Int64", "share": "Float64", "lost_usd": "Float64",
        "fix": "Utf8", "fix_hit_rate": "Float64", "evidence": "Utf8"})


def causes_frame(report: Report) -> pl.DataFrame:
    """The ledger by cause: every cause in ledger order (zeros included), its tokens, its
    share of the missed tokens, whether it is a loss, and its lost dollars."""
    ledger = report.ledger
    rows = []
    if ledger is not None:
        usd = ledger.money.lost_usd_by_cause if ledger.money is not None else {}
        for cause in CAUSES:
            tokens = ledger.by_cause.get(cause, 0)
            rows.append({"cause": cause, "tokens": tokens,
                         "share": tokens / ledger.missed_tokens if ledger.missed_tokens
                         else None,
                         "loss": cause not in NOT_LOSSES, "lost_usd": _usd(usd.get(cause))})
    return _frame(rows, {"cause": "Utf8", "tokens": "Int64", "share": "Float64",
                         "loss": "Boolean", "lost_usd": "Float64"})


def entries_frame(report: Report) -> pl.DataFrame:
    """The ledger per request of the basis: its tokens, one column per cause (0 when the
    cause has none of its missed tokens), the break it blames, and its lost dollars."""
    ledger = report.ledger
    rows = []
    for e in ledger.entries if ledger is not None else ():
        priced = ledger is not None and e.id in ledger.prices
        rows.append({
            "id": e.id, "session": e.session, "domain": e.domain, "engine": e.engine,
            "prompt_tokens": e.prompt_tokens, "cached_tokens": e.cached_tokens,
            "missed_tokens": e.missed_tokens,
            **{cause: e.causes.get(cause, 0) for cause in CAUSES},
            "break_kind": e.break_kind, "break_segment": e.break_segment,
            "gap_seconds": e.gap_seconds, "expected_tokens": e.expected_tokens,
            "lost_usd": _usd(sum(e.lost_usd.values())) if priced else None})
    return _frame(rows, {
        "id": "Utf8", "session": "Utf8", "domain": "Utf8", "engine": "Utf8",
        "prompt_tokens": "Int64", "cached_tokens": "Int64", "missed_tokens": "Int64",
        **dict.fromkeys(CAUSES, "Int64"), "break_kind": "Utf8", "break_segment": "Utf8",
        "gap_seconds": "Float64", "expected_tokens": "Int64", "lost_usd": "Float64"})


def breakdown_frame(report: Report) -> pl.DataFrame:
    """The ledger by the `by` dimensions: one column per dimension, then the row's numbers.

    Raises:
        Error: the report was made without `by`.
    """
    import polars as pl

    b = report.breakdown
    if b is None:
        raise Error("the report has no breakdown: make it with by= (e.g. "
                    "prefixscope.report(store, by=\"day\"))")
    rows = [{**{d: None if r.key[d] is None else str(jsonable(r.key[d])) for d in b.by},
             "requests": r.requests, "prompt_tokens": r.prompt_tokens,
             "cached_tokens": r.cached_tokens, "hit_rate": r.hit_rate,
             "missed_tokens": r.missed_tokens, "lost_tokens": r.lost_tokens,
             "spend_usd": _usd(r.spend_usd), "lost_usd": _usd(r.lost_usd),
             "top_cause": r.top_cause} for r in b.rows]
    frame = _frame(rows, {**dict.fromkeys(b.by, "Utf8"), "requests": "Int64",
                          "prompt_tokens": "Int64", "cached_tokens": "Int64",
                          "hit_rate": "Float64", "missed_tokens": "Int64",
                          "lost_tokens": "Int64", "spend_usd": "Float64", "lost_usd": "Float64",
                          "top_cause": "Utf8"})
    return frame.with_columns(pl.col("day").str.to_date()) if "day" in b.by else frame


def gate_frame(report: Report) -> pl.DataFrame:
    """The gate's checks (none without a gate option)."""
    return _frame([{"name": c.name, "passed": c.passed,
                    "value": None if c.value is None else float(c.value),
                    "threshold": None if c.threshold is None else float(c.threshold),
                    "detail": c.detail} for c in report.gate.checks],
                  {"name": "Utf8", "passed": "Boolean", "value": "Float64",
                   "threshold": "Float64", "detail": "Utf8"})


def scenarios_frame(report: Report) -> pl.DataFrame:
    """Each recorded scenario's (session's) stable prefix."""
    return _frame([{"scenario": s.scenario, "turns": s.turns,
                    "stable_prefix_tokens": s.stable_prefix_tokens} for s in report.scenarios],
                  {"scenario": "Utf8", "turns": "Int64", "stable_prefix_tokens": "Int64"})


def what_ifs_frame(report: Report) -> pl.DataFrame:
    """The what-ifs priced: a render transform's replayed gain, a TTL choice's dollars."""
    return _frame([{"name": w.name, "detail": w.detail, "gain_tokens": w.gain_tokens,
                    "hit_rate_predicted": w.hit_rate_predicted, "saved_usd": _usd(w.saved_usd),
                    "cost_usd": _usd(w.cost_usd), "net_usd": _usd(w.net_usd)}
                   for w in report.what_ifs],
                  {"name": "Utf8", "detail": "Utf8", "gain_tokens": "Int64",
                   "hit_rate_predicted": "Float64", "saved_usd": "Float64",
                   "cost_usd": "Float64", "net_usd": "Float64"})


def pairs_frame(report: DiffReport) -> pl.DataFrame:
    """One row per diffed pair: the first divergence (null columns when append-only or
    identical), its segment and cause, and the tokens it cost."""
    rows = []
    for p in report.pairs:
        fd = p.first_divergence
        rows.append({
            "a": p.a, "b": p.b, "session": p.session, "tokens_a": p.tokens_a,
            "tokens_b": p.tokens_b, "first_divergence": None if fd is None else fd.token,
            "segment": None if fd is None else fd.segment, "cause": p.cause,
            "detail": p.detail, "block_size": p.block_size,
            "reusable_tokens": p.reusable_tokens, "lost_tokens": p.lost_tokens,
            "observed_cached": p.observed_cached, "shortfall": p.shortfall,
            "approximate": p.approximate, "block_size_source": p.block_size_source,
            "char_a": None if fd is None else fd.char_a,
            "char_b": None if fd is None else fd.char_b,
            "text_a": None if fd is None else fd.text_a,
            "text_b": None if fd is None else fd.text_b,
            "token_a": None if fd is None else fd.token_a,
            "token_b": None if fd is None else fd.token_b})
    return _frame(rows, {
        "a": "Utf8", "b": "Utf8", "session": "Utf8", "tokens_a": "Int64", "tokens_b": "Int64",
        "first_divergence": "Int64", "segment": "Utf8", "cause": "Utf8", "detail": "Utf8",
        "block_size": "Int64", "reusable_tokens": "Int64", "lost_tokens": "Int64",
        "observed_cached": "Int64", "shortfall": "Int64", "approximate": "Boolean",
        "block_size_source": "Utf8", "char_a": "Int64", "char_b": "Int64", "text_a": "Utf8",
        "text_b": "Utf8", "token_a": "Utf8", "token_b": "Utf8"})


def diff_causes_frame(report: DiffReport) -> pl.DataFrame:
    """The pairs and lost tokens per cause, as the totals count them."""
    return _frame([{"cause": c, "pairs": t.pairs, "lost_tokens": t.lost_tokens}
                   for c, t in report.totals.by_cause.items()],
                  {"cause": "Utf8", "pairs": "Int64", "lost_tokens": "Int64"})


def simulated_frame(report: SimulateReport) -> pl.DataFrame:
    """One row per replayed request: observed, predicted and ideal cached tokens, and its
    uncached tokens per miss class (the classes sum to ``prompt_tokens`` minus the
    cached tokens the classes are counted against)."""
    return _frame([{
        "id": r.id, "session": r.session, "prompt_tokens": r.prompt_tokens,
        "observed": r.observed, "predicted": r.predicted, "ideal": r.ideal,
        "shortfall": r.shortfall, **{m: r.misses.get(m, 0) for m in MISS_CLASSES},
    } for r in report.per_request], {
        "id": "Utf8", "session": "Utf8", "prompt_tokens": "Int64", "observed": "Int64",
        "predicted": "Int64", "ideal": "Int64", "shortfall": "Int64",
        **dict.fromkeys(MISS_CLASSES, "Int64")})


def misses_frame(report: SimulateReport) -> pl.DataFrame:
    """Uncached prompt tokens per miss class, every class (zeros included)."""
    return _frame([{"class": m, "tokens": report.misses.get(m, 0)} for m in MISS_CLASSES],
                  {"class": "Utf8", "tokens": "Int64"})


def capacity_curve_frame(report: SimulateReport) -> pl.DataFrame:
    """The predicted hit rate at each capacity replayed (null capacity: unlimited), and
    its cached tokens within a conversation and across conversations."""
    return _frame([{"capacity_tokens": c.capacity_tokens, "hit_rate": c.hit_rate,
                    "within_tokens": c.within_tokens, "across_tokens": c.across_tokens,
                    "hit_rate_within": c.hit_rate_within,
                    "hit_rate_across": c.hit_rate_across}
                   for c in report.capacity_curve],
                  {"capacity_tokens": "Int64", "hit_rate": "Float64", "within_tokens": "Int64",
                   "across_tokens": "Int64", "hit_rate_within": "Float64",
                   "hit_rate_across": "Float64"})


def simulate_what_if_frame(report: SimulateReport) -> pl.DataFrame:
    """Each what-if transform replayed on its own."""
    return _frame([{"transform": w.transform, "hit_rate_ideal": w.hit_rate_ideal,
                    "hit_rate_predicted": w.hit_rate_predicted, "gain_tokens": w.gain_tokens}
                   for w in report.what_if],
                  {"transform": "Utf8", "hit_rate_ideal": "Float64",
                   "hit_rate_predicted": "Float64", "gain_tokens": "Int64"})


def calls_frame(calls: Calls) -> pl.DataFrame:
    """One row per call shown, sessions in order and each session's calls in time order:
    in / read / write / missed and a column per ledger cause (they sum to
    ``missed_tokens``), the session events recorded before it (``kind: detail``, joined
    by ``; ``), the one that decided its cause, and the provider's verdict."""
    return _frame([{
        "session": s.session, "id": c.id, "timestamp": c.timestamp, "model": c.model,
        "prompt_tokens": c.prompt_tokens, "cached_tokens": c.cached_tokens,
        "cache_write_tokens": c.cache_write_tokens, "missed_tokens": c.missed_tokens,
        "cause": c.cause, **{cause: c.causes.get(cause, 0) for cause in CAUSES},
        "break_kind": c.break_kind, "break_segment": c.break_segment,
        "gap_seconds": c.gap_seconds,
        "events": "; ".join(f"{e.kind}: {e.detail}" for e in c.events) or None,
        "recorded": c.recorded, "verdict": c.verdict,
        "verdict_missed_tokens": c.verdict_missed_tokens,
    } for s in calls.sessions for c in s.calls], {
        "session": "Utf8", "id": "Utf8", "timestamp": "Datetime", "model": "Utf8",
        "prompt_tokens": "Int64", "cached_tokens": "Int64", "cache_write_tokens": "Int64",
        "missed_tokens": "Int64", "cause": "Utf8", **dict.fromkeys(CAUSES, "Int64"),
        "break_kind": "Utf8", "break_segment": "Utf8", "gap_seconds": "Float64",
        "events": "Utf8", "recorded": "Utf8", "verdict": "Utf8",
        "verdict_missed_tokens": "Int64"})


def segments_frame(result: RenderResult) -> pl.DataFrame:
    """Every segment span of the rendered prompt with its character and token spans."""
    return _frame([{"segment": s.segment, "kind": s.kind, "char_start": s.char_start,
                    "char_end": s.char_end, "token_start": s.token_start,
                    "token_end": s.token_end} for s in result.segments],
                  {"segment": "Utf8", "kind": "Utf8", "char_start": "Int64",
                   "char_end": "Int64", "token_start": "Int64", "token_end": "Int64"})


def tokens_frame(result: RenderResult) -> pl.DataFrame:
    """One row per token: its id, its characters in the text (up to the next token's
    start) and the segment its first character is in."""
    import polars as pl

    starts = result.token_starts
    ends = (*starts[1:], len(result.text))
    spans = [(s.char_start, s.char_end, s.segment) for s in result.segments]
    segment_of: list[str | None] = []
    at = 0
    for start in starts:  # the starts ascend: one pass over the spans
        while at < len(spans) and spans[at][1] <= start:
            at += 1
        segment_of.append(spans[at][2] if at < len(spans) else None)
    return pl.DataFrame({
        "token": range(len(starts)), "id": list(result.token_ids), "char_start": list(starts),
        "char_end": list(ends), "segment": segment_of,
        "text": [result.text[s:e] for s, e in zip(starts, ends, strict=True)],
    }, schema={"token": pl.Int64, "id": pl.Int64, "char_start": pl.Int64,
               "char_end": pl.Int64, "segment": pl.Utf8, "text": pl.Utf8})


def policy_frame(report: Report) -> pl.DataFrame:
    """`what_if=("policy",)`: one row per kind of request, its choice and each option's net
    (null: not priced for the kind); empty when the policy was not asked for."""
    rows = []
    for w in report.what_ifs:
        for p in w.policy.parts if w.policy is not None else ():
            net = {o.name: _usd(o.net_usd) for o in p.options}
            rows.append({"agent": p.agent, "project": p.project, "model": p.model,
                         "requests": p.requests, "expired_requests": p.expired_requests,
                         "ttl_tokens": p.ttl_tokens, "choice": p.choice,
                         "pin_backend": p.pin, "net_usd": _usd(p.net_usd),
                         "net_as_logged": net.get("as-logged"), "net_ttl_1h": net.get("ttl-1h"),
                         "net_keep_warm": net.get("keep-warm"),
                         "net_ttl_1h_keep_warm": net.get("ttl-1h+keep-warm"),
                         "volatile_tokens": p.volatile_tokens, "move": p.move,
                         "net_move_volatile": net.get("move-volatile"),
                         "net_ttl_1h_move_volatile": net.get("ttl-1h+move-volatile"),
                         "net_keep_warm_move_volatile": net.get("keep-warm+move-volatile"),
                         "net_ttl_1h_keep_warm_move_volatile": net.get(
                             "ttl-1h+keep-warm+move-volatile"),
                         "pin_usd": _usd(p.pin_usd),
                         "payback_pause_minutes": p.payback_pause_minutes,
                         "reused_share": p.reused_share,
                         "break_even_share": p.break_even_share})
    return _frame(rows, {"agent": "Utf8", "project": "Utf8", "model": "Utf8",
                         "requests": "Int64", "expired_requests": "Int64",
                         "ttl_tokens": "Int64", "choice": "Utf8", "pin_backend": "Boolean",
                         "net_usd": "Float64", "net_as_logged": "Float64", "net_ttl_1h": "Float64",
                         "net_keep_warm": "Float64", "net_ttl_1h_keep_warm": "Float64",
                         "volatile_tokens": "Int64", "move": "Utf8",
                         "net_move_volatile": "Float64",
                         "net_ttl_1h_move_volatile": "Float64",
                         "net_keep_warm_move_volatile": "Float64",
                         "net_ttl_1h_keep_warm_move_volatile": "Float64",
                         "pin_usd": "Float64", "payback_pause_minutes": "Float64",
                         "reused_share": "Float64", "break_even_share": "Float64"})


REPORT_TABLES: dict[str, Callable[[Report], pl.DataFrame]] = {
    "findings": findings_frame, "causes": causes_frame, "entries": entries_frame,
    "breakdown": breakdown_frame, "gate": gate_frame, "scenarios": scenarios_frame,
    "what_ifs": what_ifs_frame, "policy": policy_frame,
}
DIFF_TABLES: dict[str, Callable[[DiffReport], pl.DataFrame]] = {
    "pairs": pairs_frame, "causes": diff_causes_frame,
}
SIMULATE_TABLES: dict[str, Callable[[SimulateReport], pl.DataFrame]] = {
    "requests": simulated_frame, "misses": misses_frame,
    "capacity_curve": capacity_curve_frame, "what_if": simulate_what_if_frame,
}
RENDER_TABLES: dict[str, Callable[[RenderResult], pl.DataFrame]] = {
    "segments": segments_frame, "tokens": tokens_frame,
}
CALLS_TABLES: dict[str, Callable[[Calls], pl.DataFrame]] = {"calls": calls_frame}


def table_of(tables: Mapping[str, Callable[[Any], pl.DataFrame]], name: str,
             result: Any) -> pl.DataFrame:
    """Table `name` of `result` from its registry.

    Raises:
        Error: no such table.
    """
    make = tables.get(name)
    if make is None:
        raise Error(f"no table {name!r} (tables: {', '.join(tables)})", usage=True)
    return make(result)
