"""simulate: replay the logged requests through a faithful cache model, and say why every
uncached prompt token missed.

"Before blaming eviction, reproduce the miss on an idle server." Each request is cut into
the engine's units (rendered and tokenized exactly as the upstream saw it, or the
block ids of a block-hash trace) and replayed in log order twice:

* **predicted**: the engine with the configured capacity (and, for hosted APIs, the
  requests' timestamps, so TTLs expire);
* **ideal**: the same engine with unlimited capacity and no clock (nothing is ever
  evicted or expires): the ceiling no cache configuration can beat.

A request's uncached prompt tokens (against what the log observed, else the
prediction) fall into classes, in this order of the prompt:

* tokens the ideal cache does not hold either: ``cold`` (the session's first request),
  ``compaction`` (the predecessor was compacted into a summary, also when threading
  could not tell which session it was: a ``continuation``; or the log records a
  compaction before the request, the store's session events, as report's ledger
  reads them), ``break`` (the
  predecessor sent them, but its prefix changed earlier), ``new`` (never sent before:
  not a miss);
* tokens the ideal holds but the model does not: ``eviction`` (capacity) or ``ttl``
  (a hosted API's retention expired);
* tokens the model predicts cached but the log did not get: ``provider`` for a hosted
  API (an intact, live prefix missed: routing, overflow, best effort), ``unexplained``
  for a self-hosted engine (wrong parameters, or wrong usage semantics).

The classes partition each request's uncached tokens exactly. Cached tokens the log
reports beyond the ideal (reuse the model cannot see: another session's prefix, cached
outputs, other usage semantics) are not uncached tokens: they are totalled apart
(`SimulateReport.observed_above_ideal`).

Block-hash traces (Mooncake, Bailian) are replayed with the ``blocktrace`` engine whatever
``--engine`` says: their ids follow the Mooncake convention
(cached = ``min(matched_blocks * block_size, input_length)``). LMCache lookup-hash logs
(`TRACE_ENGINES`) are chunk hashes of LMCache's own: the ``lmcache`` engine replays them.

With a hosted engine, logs without bodies (Claude Code session files, gateway billing
logs) are replayed from their usage: each request's prompt is its session predecessor's
prompt plus new tokens (``prompt_tokens`` says how many), i.e. the session is assumed
append-only -- usage
cannot show a prefix change, so such a replay finds no ``break``. The ``anthropic``
engine replays logged Anthropic bodies by their content blocks and their own
``cache_control`` marks (caching is opt-in); without a body it replays from usage with
a breakpoint at each prompt's end (automatic mode), reading ``ANTHROPIC_READ_LAG``
tokens short of the previous prompt, as Claude Code's warm turns do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from prefixscope.analyses.simulate.classify import _hit_rate, replay_report
from prefixscope.analyses.simulate.fit import fit_parameters
from prefixscope.analyses.simulate.merge import merge_replays, stored_rows
from prefixscope.analyses.simulate.model import (
    ANTHROPIC_READ_LAG,
    AUTO_MIN_REPLAY_REQUESTS,
    DEFAULT_TRACE_BLOCK,
    MISS_CLASSES,
    TRACE_ENGINES,
    CurvePoint,
    FitResult,
    RequestSim,
    SimulateError,
    SimulateOptions,
    SimulateReport,
    WhatIfResult,
    _Prepared,
    engine_block_size,
    spec_of,
)
from prefixscope.analyses.simulate.prepare import (
    _compact,
    prepare,
    prepare_what_ifs,
)
from prefixscope.analyses.simulate.replay import (
    _IDEAL,
    Remembered,
    _at_capacities,
    _Expander,
    _replay,
    _replays,
    _sweep,
    _within_sessions,
    remembered_replays,
    replays_many,
    sweep_ahead,
    swept_ahead,
)
from prefixscope.store import Store

# (the options with the transform added, the transform) -> that what-if's replay input
WhatIfInput = Callable[[SimulateOptions, str], Sequence[_Prepared]]


def simulate_store(store: Store, options: SimulateOptions, *, what_if: Sequence[str] = (),
                   capacity_curve: Sequence[int | None] = (), fit: bool = False,
                   fit_units: Sequence[int] | None = None,
                   progress: Callable[[int, int], None] | None = None,
                   workers: int = 1) -> SimulateReport:
    """Replay a store's requests; see the module docstring.

    Raises:
        SimulateError: unknown engine or parameters.
        RenderError, TokenizerError: a bad render option (a request that cannot be
            rendered is counted in `skipped` instead).
    """
    engine_block_size(options.engine, options.unit)  # a bad engine or unit fails before any render
    prepared, skipped = prepare(store, options, progress=progress)
    return replay_prepared(store, prepared, skipped, options, what_if=what_if,
                           capacity_curve=capacity_curve, fit=fit, fit_units=fit_units,
                           workers=workers)


def replay_prepared(store: Store, prepared: Sequence[_Prepared], skipped: dict[str, int],
                    options: SimulateOptions, *, what_if: Sequence[str] = (),
                    capacity_curve: Sequence[int | None] = (), fit: bool = False,
                    fit_units: Sequence[int] | None = None, workers: int = 1,
                    what_if_input: WhatIfInput | None = None) -> SimulateReport:
    """`simulate_store` on requests `prepare` already rendered for `options`' engine: the
    unit and capacity may differ from the ones they were prepared with (they only matter to
    the replay), so one render serves an unlimited replay, a fit and the fitted replay.
    `store` is read again only for what-ifs, which render the log differently.
    `workers` > 1: independent replays (predicted and ideal, a fit's candidates, the
    capacity curve's points) run in that many processes; the report is the same.
    `what_if_input(changed options, transform)`: a what-if replay's input, as
    `prepare_what_if(store, changed, prepared, (transform,))` gives it (made elsewhere:
    report's worker processes, Ray)."""
    block_size, _ = engine_block_size(options.engine, options.unit)
    report = replay_report(prepared, options, skipped, workers=workers)
    if fit:
        report = replace(report, fit=fit_parameters(prepared, options, fit_units,
                                                     workers=workers))
    if capacity_curve:
        cached = _at_capacities(prepared, options, capacity_curve, workers)
        report = replace(report, capacity_curve=_curve(prepared, options, capacity_curve,
                                                       cached))
    if what_if:
        report = replace(report, what_if=_what_ifs(store, options, tuple(what_if), report,
                                                   prepared, workers, what_if_input))
    assert report.unit == block_size
    return report



def _curve(prepared: Sequence[_Prepared], options: SimulateOptions,
           capacities: Sequence[int | None],
           cached: Sequence[Sequence[int]]) -> tuple[CurvePoint, ...]:
    """Each capacity's point, its cached tokens split within / across conversations: of a
    request's cached tokens, as many as its own session could give it are within
    (`_within_sessions`), the rest across."""
    own = _within_sessions(prepared, options)
    prompt = sum(p.n_tokens for p in prepared)
    points = []
    for capacity, hits in zip(capacities, cached, strict=True):
        within = sum(min(hit, mine) for hit, mine in zip(hits, own, strict=True))
        points.append(CurvePoint(capacity, _hit_rate(prepared, hits), within,
                                 sum(hits) - within, prompt))
    return tuple(points)


def _what_ifs(store: Store, options: SimulateOptions, transforms: tuple[str, ...],
              base: SimulateReport, base_prepared: Sequence[_Prepared], workers: int = 1,
              what_if_input: WhatIfInput | None = None) -> tuple[WhatIfResult, ...]:
    """The replay with each transform added to the render: only the requests it may change
    are rendered again (`prepare.prepare_what_if`); the others keep their tokens. `workers`
    what-ifs at a time, their replays side by side in one pool."""
    base_cached = sum(r.predicted for r in base.per_request)
    if what_if_input is None:
        # every what-if's input made here from one read of the log (each is about as big
        # as the base's entries, compact; the replays still run `workers` at a time),
        # handed out in the order of `transforms`, as asked below (by position, not by
        # name: a name may be given twice)
        made = iter(prepare_what_ifs(store, options, base_prepared, transforms))
        what_if_input = lambda _changed, _transform: next(made)  # noqa: E731
    out = []
    at_once = max(1, workers)
    for start in range(0, len(transforms), at_once):
        chunk = transforms[start:start + at_once]
        changed = [options.with_what_if(t) for t in chunk]
        inputs = [what_if_input(c, t) for c, t in zip(changed, chunk, strict=True)]
        replayed = replays_many([(p, [c, _IDEAL]) for p, c in zip(inputs, changed,
                                                                    strict=True)], workers)
        out += [WhatIfResult(t, _hit_rate(p, ideal), _hit_rate(p, predicted),
                             sum(predicted) - base_cached)
                for t, p, (predicted, ideal) in zip(chunk, inputs, replayed, strict=True)]
    return tuple(out)


__all__ = ["ANTHROPIC_READ_LAG", "AUTO_MIN_REPLAY_REQUESTS", "DEFAULT_TRACE_BLOCK",
           "TRACE_ENGINES", "MISS_CLASSES",
           "CurvePoint", "FitResult", "Remembered", "RequestSim", "SimulateError",
           "SimulateOptions", "SimulateReport", "WhatIfInput", "WhatIfResult", "_Expander",
           "_Prepared",
           "_at_capacities", "_compact", "_replay", "_replays", "_sweep", "engine_block_size",
           "fit_parameters", "merge_replays", "prepare", "remembered_replays", "replay_prepared",
           "replay_report",
           "simulate_store", "spec_of", "stored_rows", "sweep_ahead", "swept_ahead"]
