"""simulate's third job: the predicted and ideal replays turned into each request's
miss classes and the report's totals."""

from __future__ import annotations

from collections.abc import Sequence

from prefixscope.analyses.simulate.model import (
    MISS_CLASSES,
    RequestSim,
    SimulateOptions,
    SimulateReport,
    _Prepared,
    engine_block_size,
)
from prefixscope.analyses.simulate.replay import _IDEAL, _replays
from prefixscope.engines import ENGINES


def replay_report(prepared: Sequence[_Prepared], options: SimulateOptions,
                  skipped: dict[str, int], *, workers: int = 1) -> SimulateReport:
    """Predicted and ideal replays, the miss classes and the totals."""
    block_size, _ = engine_block_size(options.engine, options.unit)
    predicted, ideal = _replays(prepared, [options, _IDEAL], workers)
    hosted = ENGINES[options.engine].hosted
    length = {p.id: p.n_tokens for p in prepared}
    per_request = tuple(
        RequestSim(p.id, p.session, p.n_tokens, p.observed, pred, ide,
                   _classify(p, pred, ide, length.get(p.prev) if p.prev else None, hosted,
                             block_size if p.trace is None else p.trace_block),
                   unit=None if p.trace is None else p.trace_block)
        for p, pred, ide in zip(prepared, predicted, ideal, strict=True))
    misses = dict.fromkeys(MISS_CLASSES, 0)
    for r in per_request:
        for name, n in r.misses.items():
            misses[name] += n
    observed = [(r, p) for r, p in zip(per_request, prepared, strict=True)
                if r.observed is not None]
    prompt_tokens = sum(r.prompt_tokens for r in per_request)
    within = [abs(r.predicted - (r.observed or 0))
              <= (block_size if p.trace is None else p.trace_block) for r, p in observed]
    # The observed rate is the log's own: its cached over its prompt tokens (as bucket).
    logged = [(r.observed or 0, p.logged_prompt) for r, p in observed if p.logged_prompt]
    return SimulateReport(
        engine=options.engine, unit=block_size, capacity_tokens=options.capacity_tokens,
        requests=len(per_request), prompt_tokens=prompt_tokens,
        hit_rate_observed=_rate(sum(c for c, _ in logged), sum(n or 0 for _, n in logged)),
        hit_rate_predicted=_rate(sum(predicted), prompt_tokens),
        hit_rate_ideal=_rate(sum(ideal), prompt_tokens),
        agreement=(sum(within) / len(within)) if within else None,
        approximate_requests=sum(p.approximate for p in prepared),
        observed_above_ideal=sum(max(0, (r.observed or 0) - r.ideal) for r, _ in observed),
        misses=misses, per_request=per_request, skipped=dict(skipped))


def _classify(p: _Prepared, predicted: int, ideal: int, prev_tokens: int | None,
              hosted: bool, block_size: int) -> dict[str, int]:
    """Uncached prompt tokens of one request, per class (see the module docstring)."""
    n = p.n_tokens
    out: dict[str, int] = {}

    def add(name: str, tokens: int) -> None:
        if tokens > 0:
            out[name] = out.get(name, 0) + tokens

    got = predicted if p.observed is None else min(p.observed, n)
    # The classes partition the request's uncached tokens, n - got: those beyond what
    # the ideal cache (or the log, when it got more) holds, those the ideal holds but
    # this capacity / TTL lost, and those the model predicts cached but the log missed.
    beyond = n - max(ideal, got)
    if p.prev is None and not p.compacted:
        add("cold", beyond)
    elif p.compacted:
        add("compaction", beyond)
    else:
        # What the predecessor already sent, as whole units this prompt could reuse.
        sent = (min(prev_tokens or 0, max(n - 1, 0)) // block_size) * block_size
        # A replay from usage assumes the session append-only: it cannot see a break,
        # unless the log records the change (`_Prepared.changed`).
        broken = 0 if p.segments is not None and not p.changed else \
            max(0, sent - max(ideal, got))
        add("break", min(broken, beyond))
        add("new", beyond - min(broken, beyond))
    add("ttl" if hosted else "eviction", ideal - max(predicted, got))
    if p.observed is not None:
        add("provider" if hosted else "unexplained", min(predicted, ideal) - got)
    return out


def _rate(cached: int, prompt: int) -> float | None:
    return cached / prompt if prompt else None


def _hit_rate(prepared: Sequence[_Prepared], cached: Sequence[int]) -> float | None:
    return _rate(sum(cached), sum(p.n_tokens for p in prepared))
