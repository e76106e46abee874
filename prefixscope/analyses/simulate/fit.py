"""simulate's fourth job: the block size and capacity (or, hosted, the retention)
whose replay reproduces the observed cached tokens best."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from prefixscope.analyses.simulate.model import (
    _FIT_UNITS,
    FitResult,
    SimulateOptions,
    _Prepared,
    engine_block_size,
)
from prefixscope.analyses.simulate.replay import _at_capacities, _replays, _sweeps
from prefixscope.engines import ENGINES


def fit_parameters(prepared: Sequence[_Prepared], options: SimulateOptions,
                   units_to_try: Sequence[int] | None = None, *,
                   workers: int = 1, sweep: bool = True) -> FitResult | None:
    """The unit and capacity whose replay reproduces the observed cached tokens best.

    Score: the share of observed requests predicted exactly, then the smaller mean
    absolute error (a coarser unit is "within one unit" of anything, so that alone would
    pick the largest). Units: the engine's candidates (16…512 tokens), or `units_to_try`.
    Capacities: unlimited and halvings of the log's prompt tokens, then a search between
    the best one's neighbours, coarse, then narrowing 8x per pass down to single blocks.
    Ties go to the smaller unit and the larger capacity. Each unit's candidates come from
    one sweep of the log (`engines.sweep`; every capacity at once), the chosen one's too
    (replayed where the sweep does not follow it); `sweep=False` replays every candidate
    instead (the same result, ~100 replays: for the bench). `workers` > 1: the units'
    sweeps (or a step's replays) run in that many processes (same result).
    """
    observed = [p.observed for p in prepared if p.observed is not None]
    if not observed:
        return None  # nothing to fit to
    spec = ENGINES[options.engine]
    if spec.ttl_parameter is not None:
        return _fit_ttl(prepared, options, workers)
    # `units_to_try`: the unit is known (the caller inferred it): fit the capacity alone.
    units: Sequence[int | None] = (
        (units_to_try or _FIT_UNITS) if spec.block_parameter is not None
        else (None,))
    total = sum(p.n_tokens for p in prepared) or 1
    # every capacity of a unit from one pass (a unit's capacities replayed one by one where
    # its policy has no exact sweep)
    swept = dict(zip(units, _sweeps(prepared, [replace(options, unit=size) for size in units],
                                    workers) if sweep else [None] * len(units), strict=True))

    def scores(block_size: int | None, capacities: Sequence[int | None],
               into: dict[int | None, tuple[float, float]]) -> None:
        todo = [c for c in dict.fromkeys(capacities) if c not in into]
        cached = _at_capacities(prepared, replace(options, unit=block_size), todo, workers,
                                swept[block_size], sweep=False)
        for c, hits in zip(todo, cached, strict=True):
            into[c] = _score(prepared, hits)

    best: tuple[tuple[float, float], int | None, int | None] | None = None
    for block_size in units:
        size = block_size or 1
        grid: list[int | None] = [None, *(max(size, total >> k) for k in range(12))]
        scored: dict[int | None, tuple[float, float]] = {}
        scores(block_size, grid, scored)
        # Capacity matters between the largest capacity that scores below unlimited and
        # the smallest that scores like it: search that interval in whole blocks, coarse
        # then block by block around the best.
        finite = [c for c in grid if c is not None]
        knee = min((c for c in finite if scored[c] == scored[None]), default=None)
        below = max((c for c in finite if knee is not None and c < knee), default=None)
        if knee is not None and below is not None:
            lo, hi = below // size, knee // size
            step = max(1, (hi - lo) // 48)
            scores(block_size, [blocks * size for blocks in range(lo, hi + 1, step)], scored)
            # then narrow around the best, each pass 8 times finer, down to single blocks:
            # a bounded number of replays however wide the interval (the exhaustive
            # block-by-block pass was 2 * step replays: thousands on a GB log)
            while step > 1:
                around = max((c for c in scored if c is not None), key=lambda c: scored[c])
                step = max(1, step // 8)
                scores(block_size, [blocks * size for blocks in range(
                    max(1, around // size - 8 * step), around // size + 8 * step + 1, step)],
                    scored)
        for capacity, value in scored.items():
            candidate = (value, block_size, capacity)
            if best is None or value > best[0] or (
                    value == best[0] and capacity is None and best[2] is not None):
                best = candidate
    assert best is not None
    _, block_size, capacity = best
    chosen = replace(options, unit=block_size, capacity_tokens=capacity)
    fitted = engine_block_size(options.engine, block_size)[0]
    its_sweep = swept[block_size]
    cached = its_sweep.cached(capacity) if its_sweep is not None else None
    if cached is None:  # no sweep, or one that does not follow the capacity chosen
        cached = _replays(prepared, [chosen], 1, read_sweeps=sweep)[0]
    return FitResult(fitted, capacity, _agreement(prepared, cached, fitted))



# Retention times tried for hosted engines: 1 minute to 1 day (Anthropic 5 min / 1 h,
# OpenAI in-memory "5-10 minutes" and 24 h extended retention).
_FIT_TTLS = (60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0)


def _fit_ttl(prepared: Sequence[_Prepared], options: SimulateOptions,
             workers: int = 1) -> FitResult:
    """A hosted engine's retention time that reproduces the observed values best (exact
    matches first, then the smaller mean error; ties go to the shorter TTL)."""
    block_size = engine_block_size(options.engine, options.unit)[0]
    best: tuple[tuple[float, float], float, float] | None = None
    runs: list[SimulateOptions | None] = [replace(options, ttl_seconds=ttl)
                                          for ttl in _FIT_TTLS]
    for ttl, cached in zip(_FIT_TTLS, _replays(prepared, runs, workers), strict=True):
        score = _score(prepared, cached)
        if best is None or score > best[0]:
            best = (score, ttl, _agreement(prepared, cached, block_size))
    assert best is not None
    return FitResult(block_size, None, best[2], best[1])


def _errors(prepared: Sequence[_Prepared], cached: Sequence[int]) -> list[int]:
    """|predicted − observed| of every request whose log reports cached tokens."""
    return [abs(c - p.observed) for p, c in zip(prepared, cached, strict=True)
            if p.observed is not None]


def _score(prepared: Sequence[_Prepared], cached: Sequence[int]) -> tuple[float, float]:
    """(share predicted exactly, − mean absolute error): what a fit maximises."""
    errors = _errors(prepared, cached)
    return sum(e == 0 for e in errors) / len(errors), -sum(errors) / len(errors)


def _agreement(prepared: Sequence[_Prepared], cached: Sequence[int], block_size: int) -> float:
    errors = _errors(prepared, cached)
    return sum(e <= block_size for e in errors) / len(errors)
