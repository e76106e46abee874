"""simulate's second job: prepared requests replayed through an engine, one
capacity at a time (`_replay`) or every capacity in one pass (`_sweep`), in worker
processes that share the prepared requests (`parallel.Pool(shared=)`)."""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import xxhash

from prefixscope.analyses.simulate.model import (
    ANTHROPIC_READ_LAG,
    SimulateError,
    SimulateOptions,
    _Prepared,
    engine_block_size,
)
from prefixscope.engines import ENGINES, get_engine
from prefixscope.engines.base import Admission, Engine, Units, run_contents
from prefixscope.engines.sweep import BlocktraceSweep, Sweep, SweepResult
from prefixscope.parallel import Pool, shared


class _Expander:
    """The whole token ids and units of compact `_Prepared` prompts, in log order: a
    prompt's are kept only while a later prompt still extends it (its `base`), so a
    replay holds about one prompt per running session. A prompt that extends its base
    reuses the base's block keys for the shared blocks (`Engine.units_extending`), and
    one that appends to it writes its own ids after the base's in their buffer
    (`_HeldIds`): an agent's turn costs its new ids, not a copy of its whole prompt."""

    def __init__(self, prepared: Sequence[_Prepared], engine: Engine,
                 log_ttl: bool = True) -> None:
        self._engine = engine
        # A usage-only Anthropic prompt's entry lives as long as its usage shows (1 hour
        # after 1-hour writes), unless the replay was given a retention (`--ttl`, a fit)
        self._log_ttl = log_ttl
        self._left = Counter(p.base for p in prepared if p.base is not None)
        self._held: dict[str, tuple[_HeldIds, Units | None]] = {}
        self._namespace: dict[str, str | None] = {}  # a held prompt's namespace
        self._base_namespace: str | None = None  # that of the base `full_ids` last used
        # Of the last `units`: its base's units and how many of its leading keys are
        # probably the base's (a hint: `VllmSweep.step` checks it); the base's units when
        # that was their last use
        self.prefix: tuple[Units, int] | None = None
        self.released: Units | None = None

    def full_ids(self, p: _Prepared) -> tuple[np.ndarray, Units | None]:
        """`p`'s whole prompt token ids, and its base's units when it has a base (call
        once per request, in order; never written after, `_HeldIds`)."""
        held, base = None, None
        self.released = None
        if p.base is not None:
            if p.base not in self._held:
                raise ValueError(f"request {p.id} extends {p.base}, not replayed before it")
            held, base = self._held[p.base]
            self._base_namespace = self._namespace.get(p.base)
            self._left[p.base] -= 1
            last = not self._left[p.base]
            if last:
                del self._held[p.base], self._left[p.base]
                self._namespace.pop(p.base, None)
                self.released = base
        keep = bool(self._left.get(p.id))
        if held is not None:
            mine = held.extended(p, last, keep)
        elif keep:
            mine = _HeldIds.of((np.asarray(p.ids),))
        else:
            return p.whole_ids(None), base
        if keep:
            self._held[p.id] = (mine, None)
            self._namespace[p.id] = p.namespace
        return mine.ids, base

    def holds(self, request_id: str) -> bool:
        """Is this request's prompt kept for a later one that extends it?"""
        return request_id in self._held

    def _salted(self, ids: np.ndarray, base: Units | None, p: _Prepared) -> Units:
        """`p`'s units with its namespace on the first block, where the engine's units are
        chained blocks (raw token ids and content blocks carry no namespace)."""
        engine = self._engine
        plain = engine.units(ids[:0])
        if not plain.chained or plain.ends is not None:
            return engine.units(ids)
        prefix = contents = None
        if base is not None and self._base_namespace == p.namespace:
            prefix = base.keys[: min(p.shared // engine.unit, base.n_full)]
        if base is not None and p.resumed is not None:  # (a block's c has no namespace)
            contents = run_contents(base, engine.unit, p.resumed)
        return Units.chain(ids, engine.unit, namespace=p.namespace, prefix_keys=prefix,
                           contents=contents)

    def units(self, p: _Prepared, output: bool) -> tuple[Units, Units | None]:
        """(prompt, prompt + output when `output` and the log has one) of `p`."""
        engine = self._engine
        self.prefix = None
        if p.trace is not None:
            return Units.blocks(p.trace, p.trace_tokens, p.trace_block), None
        if p.segments is not None:
            if ENGINES[engine.name].replays == "segments":
                ends = [max(0, end - ANTHROPIC_READ_LAG) for _, end in p.segments[:-1]]
                ends.append(p.segments[-1][1])
                ttl = p.write_ttl if self._log_ttl and p.write_ttl is not None \
                    else _ttl(engine)
                return Units.segments([key for key, _ in p.segments], ends,
                                      breakpoints={len(ends) - 1: ttl},
                                      namespace=p.namespace), None
            return engine.units(_synthetic_ids(p.segments)), None
        ids, base = self.full_ids(p)
        if p.blocks is not None:
            keys = [xxhash.xxh3_64_hexdigest(ids[start:end].tobytes())
                    for start, end in zip([0] + [e for _, e in p.blocks[:-1]],
                                          [e for _, e in p.blocks], strict=True)]
            return Units.segments(keys, [e for _, e in p.blocks], n_tokens=len(ids),
                                  breakpoints=dict(p.breakpoints), namespace=p.namespace), None
        if p.namespace is not None:
            prompt = self._salted(ids, base, p)
        else:
            prompt = (engine.units(ids) if base is None or self._base_namespace is not None
                      else engine.units_extending(ids, base, p.shared, p.resumed))
        if base is not None and self._base_namespace == p.namespace:
            self.prefix = (base, p.shared // engine.unit)  # the keys cut from the base's
        if p.id in self._held:
            self._held[p.id] = (self._held[p.id][0], prompt)
        if output and p.output_ids is not None:
            whole = np.concatenate((ids, np.asarray(p.output_ids)))
            return prompt, engine.units_extending(whole, prompt, len(ids))
        return prompt, None



class _HeldIds:
    """A held prompt's whole token ids, ``buffer[:n]``, in a buffer with room after them:
    a successor that appends to the prompt (an agent's next turn) writes its own ids
    there instead of copying the prompt whole.

    Why that is `whole_ids`: a successor with no `resumed` run that shares all n tokens
    has the ids ``base[:n] + own``, and the buffer's first n are ``base``; writing ``own``
    at n makes ``buffer[:n + len(own)]`` exactly that. Nothing handed out is written:
    every array returned is some ``buffer[:m]``, and a write falls at or after the end of
    the held prompt it extends, the longest prefix of the buffer handed out so far, so
    only where this is the base's last successor (`_Expander.full_ids` drops it then; an
    earlier successor's write would lie under the next one's). Any other successor (a
    cut history, a run found again, another dtype, no room left) is copied into a new
    buffer, as `whole_ids` concatenates it. A prompt that is no one's base has no room."""

    __slots__ = ("buffer", "n")

    def __init__(self, buffer: np.ndarray, n: int) -> None:
        self.buffer, self.n = buffer, n

    @property
    def ids(self) -> np.ndarray:
        return self.buffer[: self.n]

    @classmethod
    def of(cls, parts: Sequence[np.ndarray], room: bool = True) -> _HeldIds:
        """The concatenation of `parts` in a new buffer, with room for a later turn's ids
        where `room` (an entry's own ids belong to the prepared list: never written)."""
        n = sum(len(part) for part in parts)
        buffer = np.empty(n + (n // 8 + _ROOM if room else 0), dtype=np.result_type(*parts))
        np.concatenate(parts, out=buffer[:n])
        return cls(buffer, n)

    def extended(self, p: _Prepared, last: bool, keep: bool) -> _HeldIds:
        """`p.whole_ids(self.ids)` as held ids: in this buffer where `p` appends to this
        prompt and is its `last` successor (the class doc), else in a new buffer, with
        room where `keep` (`p` is held for a later prompt)."""
        own = np.asarray(p.ids)  # (read back once, when spilled)
        n = self.n + len(own)
        if last and p.resumed is None and p.shared == self.n and n <= len(self.buffer) \
                and own.dtype == self.buffer.dtype:
            self.buffer[self.n: n] = own
            return _HeldIds(self.buffer, n)
        return _HeldIds.of(p.whole_parts(self.ids, own), room=keep)


# A held prompt's buffer has room for an eighth more and this many tokens: a turn adds a
# percent or two of its prompt, so a session's prompt is copied whole every few turns,
# not every turn, and a held prompt costs an eighth more memory (half more: no faster)
_ROOM = 4096


def _ttl(engine: Engine) -> float:
    return float(getattr(engine, "ttl", 300.0))


def _synthetic_ids(segments: Sequence[tuple[str, int]]) -> np.ndarray:
    """Stand-in token ids for a prompt known only by its length: each request's new tokens
    are a sequence derived from its id, so prompts of one session share their prefix."""
    parts, start = [], 0
    for key, end in segments:
        seed = int.from_bytes(key.encode()[:8].ljust(8, b"\0"), "little") % (1 << 31)
        parts.append((seed + np.arange(max(0, end - start), dtype=np.int64)) % (1 << 31))
        start = max(start, end)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _engine(options: SimulateOptions, unlimited: bool) -> Engine:
    """The engine `options` name, configured (`unlimited`: no capacity)."""
    _, params = engine_block_size(options.engine, options.unit)
    capacity = None if unlimited else options.capacity_tokens
    kwargs: dict[str, float | int | bool] = dict(params)
    if capacity is not None:
        kwargs["capacity_tokens"] = capacity
    spec = ENGINES[options.engine]
    if spec.cache_output:
        kwargs["cache_output"] = options.cache_output
    if options.automatic_breakpoints and spec.reads_at_breakpoints:
        kwargs["automatic"] = True
    if options.ttl_seconds is not None:
        if spec.ttl_parameter is None:
            raise SimulateError(f"--engine {options.engine} has no retention time to set")
        kwargs[spec.ttl_parameter] = options.ttl_seconds
    if capacity is None and spec.unlimited is not None:
        return spec.unlimited(**kwargs)
    return spec.factory(**kwargs)


def _replay(prepared: Sequence[_Prepared], options: SimulateOptions, *,
            unlimited: bool = False) -> list[int]:
    """Cached tokens of each request: predicted (or, `unlimited`, the ideal: no capacity
    limit, no clock)."""
    return _replay_together(prepared, [(options, unlimited)])[0]


def _replay_together(prepared: Sequence[_Prepared],
                     runs: Sequence[tuple[SimulateOptions, bool]]) -> list[list[int]]:
    """`_replay(prepared, options, unlimited=unlimited)` of each (options, unlimited) run,
    each prompt's units cut once for all of them: the runs must cut the same units
    (`_cut_alike`). Each engine sees the same units, in the same order, as it would alone
    (an engine never writes the units it is given)."""
    states = [_Run(prepared, options, unlimited) for options, unlimited in runs]
    first = states[0]
    expander = _Expander(prepared, first.engine, log_ttl=first.options.ttl_seconds is None)
    for i, p in enumerate(prepared):
        if p.trace is not None:
            prompt, _ = expander.units(p, False)
            for state in states:
                state.trace(p, prompt)
            continue
        prompt, sequence = expander.units(p, first.options.cache_output)
        for state in states:
            state.step(i, p, prompt, sequence, expander.prefix)
    return [state.finish() for state in states]


def _cut_alike(a: tuple[SimulateOptions, bool], b: tuple[SimulateOptions, bool]) -> bool:
    """Do the replays `a` and `b` cut every prompt into the same units (`_Expander`): the
    same engine, output flag and unit, units cut by the same code (an unlimited engine
    class may be another) and, for an engine replaying segments, the same retention of an
    entry the log gives none (the units carry it)?"""
    (oa, ua), (ob, ub) = a, b
    if oa.engine != ob.engine or oa.cache_output != ob.cache_output or \
            (oa.ttl_seconds is None) != (ob.ttl_seconds is None):
        return False
    ea, eb = _engine(oa, ua), _engine(ob, ub)
    ta, tb = type(ea), type(eb)
    if ea.unit != eb.unit or ta.units is not tb.units or \
            ta.units_extending is not tb.units_extending:
        return False
    return ENGINES[oa.engine].replays != "segments" or _ttl(ea) == _ttl(eb)


class _Run:
    """One replay's engine and what it has returned so far (`_replay_together`)."""

    def __init__(self, prepared: Sequence[_Prepared], options: SimulateOptions,
                 unlimited: bool) -> None:
        self.options, self.unlimited = options, unlimited
        self.engine = _engine(options, unlimited)
        self.traces: dict[tuple[str, int], Engine] = {}  # one per (model, block size)
        self.capacity = None if unlimited else options.capacity_tokens
        self.out: list[int] = []
        # (end time, order, admission, sequence) of the requests still running
        # (--concurrent)
        self.running: list[tuple[float, int, Admission, Units | None]] = []
        # sequential with a clock: the engine may forget what no later request can find
        self.horizons = None if unlimited or options.concurrent else _horizons(prepared)
        self.overlaps = options.concurrent and not unlimited

    def trace(self, p: _Prepared, prompt: Units) -> None:
        trace_engine = self.traces.get((p.trace_engine, p.trace_block))
        if trace_engine is None:
            spec = ENGINES[p.trace_engine]
            trace_engine = self.traces[(p.trace_engine, p.trace_block)] = get_engine(
                p.trace_engine, **spec.block_kwargs(p.trace_block),
                capacity_tokens=self.capacity)
        self.out.append(trace_engine.step(prompt).cached_tokens)

    def step(self, i: int, p: _Prepared, prompt: Units, sequence: Units | None,
             prefix: tuple[Units, int] | None) -> None:
        engine, out, running = self.engine, self.out, self.running
        now = None if self.unlimited else p.seconds
        horizon = None if self.horizons is None else self.horizons[i]
        if horizon is not None:
            engine.expire(horizon)
        if not (self.overlaps and p.seconds is not None):
            out.append(engine.step(prompt, sequence=sequence, now=now,
                                   prefix=prefix).cached_tokens)
            return
        while running and running[0][0] <= p.seconds:  # finished before this one starts
            end, _, admission, done = heapq.heappop(running)
            engine.release(admission, sequence=done, now=end)
        admission = engine.admit(prompt, now=now)
        out.append(admission.lookup.cached_tokens)
        if p.duration:
            heapq.heappush(running, (p.seconds + p.duration, len(out), admission, sequence))
        else:
            engine.release(admission, sequence=sequence, now=now)

    def finish(self) -> list[int]:
        while self.running:
            end, _, admission, done = heapq.heappop(self.running)
            self.engine.release(admission, sequence=done, now=end)
        return self.out


def _horizons(prepared: Sequence[_Prepared]) -> list[float | None]:
    """For each request, the least time of it and the requests after it that the engine
    steps (not a trace's): every `now` the engine sees from it on is at least that, in
    whatever order the times come (`Engine.expire`). None where one of them has no time
    (a `now` of None finds every entry alive); a NaN time is passed over (it finds none).
    Infinite where none is left (nothing to keep for)."""
    out: list[float | None] = [None] * len(prepared)
    least: float | None = math.inf
    for i in range(len(prepared) - 1, -1, -1):
        p = prepared[i]
        if p.trace is None and least is not None:
            if p.seconds is None:
                least = None
            elif p.seconds < least:  # (False for a NaN)
                least = p.seconds
        out[i] = least
    return out


_IDEAL = None  # a run of `_replays`: the ideal replay (unlimited, no clock)


def _replays(prepared: Sequence[_Prepared], runs: Sequence[SimulateOptions | None],
             workers: int, *, read_sweeps: bool = True) -> list[list[int]]:
    """`_replay(prepared, run)` of each run (None: the ideal replay of the first run's
    engine), in up to `workers` processes sharing `prepared`: each replay is independent
    of the others, so the results are the same as one after another. Runs that are the
    same replay (`_replay_key`) are replayed once, and inside `remembered_replays` once
    per block of code. A sequential replay at a capacity, of an engine with an exact sweep
    (`engines.sweep`), is read off the sweep of its engine (one pass, every capacity; the
    sweep equals the replay at every capacity it follows, tests/test_engine_sweep.py),
    which costs less than the replay through the block pool and serves every capacity of
    the block; a capacity the sweep does not follow is replayed (`read_sweeps=False`: every
    run replayed). An unlimited replay is read off its engine's sweep when that sweep is
    made here or was made already (its unlimited capacity: the ideal replay costs nothing
    more)."""
    return replays_many([(prepared, runs)], workers, read_sweeps=read_sweeps)[0]


def replays_many(items: Sequence[tuple[Sequence[_Prepared], Sequence[SimulateOptions | None]]],
                 workers: int, *, read_sweeps: bool = True) -> list[list[list[int]]]:
    """`_replays(prepared, runs)` of each (prepared, runs) item, the replays of them all in
    one pool of up to `workers` processes (what-if replays of different inputs run side by
    side)."""
    plans = [_ReplayPlan(prepared, runs, read_sweeps) for prepared, runs in items]
    _run_jobs([(i, job) for i, plan in enumerate(plans) for job in plan.jobs], plans, workers)
    for plan in plans:
        plan.read_sweeps()
    _run_jobs([(i, key) for i, plan in enumerate(plans) for key in plan.left], plans, workers)
    return [[list(plan.memo[key]) for key in plan.keys] for plan in plans]


class _ReplayPlan:
    """One `_replays` call's jobs: its runs' keys, the replays and sweeps to run, and the
    runs to replay after all (a capacity their sweep does not follow)."""

    def __init__(self, prepared: Sequence[_Prepared], runs: Sequence[SimulateOptions | None],
                 read_sweeps: bool) -> None:
        base = next(run for run in runs if run is not None)
        self.prepared = prepared
        self.keys = [_replay_key(base, True) if run is None else _replay_key(run, False)
                     for run in runs]
        self.memo = _memo(prepared)
        todo = [key for key in dict.fromkeys(self.keys) if key not in self.memo]
        self.swept = {key: _sweep_key(key[0]) for key in todo
                      if read_sweeps and _swept_run(*key)}
        # an ideal replay is the sweep's unlimited capacity: read off a sweep made anyway,
        # else off a sweep of that capacity alone (an engine with a sweep, sequential)
        made = {*self.swept.values(), *(key for key in self.memo if key[0] == "sweep")}
        for key in todo:
            if read_sweeps and key[1]:
                sweep = _sweep_key(key[0])
                if sweep in made:
                    self.swept[key] = sweep
                elif _swept_run(replace(key[0], capacity_tokens=0), False):
                    self.swept[key] = ("ideal", sweep[1])
        self.jobs: list[tuple[Any, ...]] = [k for k in dict.fromkeys(self.swept.values())
                                            if k not in self.memo]
        self.jobs += [key for key in todo if key not in self.swept]
        self.left: list[tuple[Any, ...]] = []

    def read_sweeps(self) -> None:
        for key, sweep_key in self.swept.items():
            sweep = self.memo[sweep_key]
            cached = sweep.cached(key[0].capacity_tokens) if sweep else None
            if cached is None:
                self.left.append(key)  # the sweep does not follow this capacity
            else:
                self.memo[key] = cached


def _run_jobs(jobs: Sequence[tuple[int, tuple[Any, ...]]], plans: Sequence[_ReplayPlan],
              workers: int) -> None:
    """Run each (plan index, job) in up to `workers` processes sharing the plans' prepared
    requests; each result into its plan's memo."""
    if not jobs:
        return
    tasks = _tasks(jobs, workers)
    with Pool(min(workers, len(tasks)), shared=[plan.prepared for plan in plans]) as pool:
        for task, results in zip(tasks, pool.map(_jobs_of, tasks), strict=True):
            for (i, job), result in zip(task, results, strict=True):
                plans[i].memo[job] = result


def _tasks(jobs: Sequence[tuple[int, tuple[Any, ...]]], workers: int
           ) -> list[list[tuple[int, tuple[Any, ...]]]]:
    """The jobs as tasks for `workers` processes. Where the jobs outnumber the workers,
    the replays of one plan that cut the same units (`_cut_alike`) run in one task
    (`_replay_together`: each prompt cut once for all of them: the 0.25 GiB Codex store's
    predicted and ideal replays 4.26 -> 3.50 s of CPU in one process), in as many tasks as
    keep every worker busy; with a worker for each job they run side by side (together,
    on two cores, the two replays' 2.19 s of wall would be 3.50)."""
    if len(jobs) <= workers:
        return [[job] for job in jobs]
    tasks: list[list[tuple[int, tuple[Any, ...]]]] = []
    for job in jobs:
        i, key = job
        task = None if _is_sweep(key) else next(
            (t for t in tasks if len(t) < _TOGETHER and t[0][0] == i
             and not _is_sweep(t[0][1]) and _cut_alike(t[0][1], key)), None)
        if task is None:
            tasks.append([job])
        else:
            task.append(job)
    while len(tasks) < workers and max(len(t) for t in tasks) > 1:
        big = max(range(len(tasks)), key=lambda n: len(tasks[n]))
        half = len(tasks[big]) // 2
        tasks[big:big + 1] = [tasks[big][:half], tasks[big][half:]]
    return tasks


# At most this many replays in one task: the expansion is shared, not the engines, and
# each holds its whole cache (a fit's ten retentions in one process would hold ten)
_TOGETHER = 2


def _is_sweep(key: tuple[Any, ...]) -> bool:
    return key[0] in ("sweep", "ideal")


def _jobs_of(task: list[tuple[int, tuple[Any, ...]]]) -> list[Any]:
    """The results of a task's jobs (`_tasks`): a sweep, a replay, or replays together."""
    if len(task) == 1:
        return [_job_of(task[0])]
    return list(_replay_together(shared()[task[0][0]], [key for _, key in task]))


def _job_of(job: tuple[int, tuple[Any, ...]]) -> Any:
    """A replay (`_replay_key`) or a sweep (`_sweep_key`) of the shared prepared requests
    of `job`'s plan (its index in the shared list)."""
    i, key = job
    prepared = shared()[i]
    if _is_sweep(key):
        return _sweep(prepared, key[1], unlimited=key[0] == "ideal")
    return _replay(prepared, key[0], unlimited=key[1])


def _swept_run(options: SimulateOptions, unlimited: bool) -> bool:
    """Is this replay one a sweep gives: sequential, at a capacity, its engine's policy a
    stack algorithm?"""
    return (not unlimited and options.capacity_tokens is not None and not options.concurrent
            and ENGINES[options.engine].sweep is not None)


def _sweep_key(run: SimulateOptions) -> tuple[str, SimulateOptions]:
    """The memo key of `run`'s sweep (a sweep reads no capacity)."""
    return ("sweep", replace(_replay_key(run, True)[0], concurrent=run.concurrent))


def _replay_key(options: SimulateOptions, unlimited: bool) -> tuple[SimulateOptions, bool]:
    """The job `_replay(prepared, options, unlimited=unlimited)` is: a predicted replay
    with no capacity, no overlap and no retention clock is the ideal replay (`now` is read
    by engines with a TTL alone, engines/base.py), and the ideal replay reads neither the
    capacity nor the overlap."""
    spec = ENGINES[options.engine]
    if spec.block_parameter is not None and options.unit is None:  # the default, named
        options = replace(options, unit=spec.block_size)
    if not unlimited and options.capacity_tokens is None and not options.concurrent \
            and spec.ttl_parameter is None:
        unlimited = True
    if unlimited:
        options = replace(options, capacity_tokens=None, concurrent=False)
    return options, unlimited


# Inside `remembered_replays`: (the prepared requests, {job: its result}) by id of the
# prepared requests (held, so the id is not reused while the block runs).
_REMEMBERED: ContextVar[dict[int, tuple[Sequence[_Prepared], dict[Any, Any]]] | None] = \
    ContextVar("remembered_replays", default=None)


# What one `remembered_replays` block made (`swept_ahead`), for a later block to remember.
Remembered = dict[int, tuple[Sequence[_Prepared], dict[Any, Any]]]


@contextmanager
def remembered_replays(ahead: Remembered | None = None) -> Iterator[None]:
    """Within the block, a replay (or sweep) of the same prepared requests with the same
    options is run once: report replays a domain, fits it (one sweep), then replays it at
    the fit, whose predicted replay is read off that sweep and whose ideal is the
    first's. `ahead`: what an earlier block made (`swept_ahead`), remembered here too."""
    token = _REMEMBERED.set(dict(ahead) if ahead else {})
    try:
        yield
    finally:
        _REMEMBERED.reset(token)


def _memo(prepared: Sequence[_Prepared]) -> dict[Any, Any]:
    remembered = _REMEMBERED.get()
    if remembered is None:
        return {}
    held = remembered.setdefault(id(prepared), (prepared, {}))
    assert held[0] is prepared
    return held[1]


@dataclass(frozen=True, slots=True)
class _Swept:
    """Every capacity's cached tokens of a sequential replay, from one pass (`_sweep`): the
    engine's requests in one sweep, each block-trace size's in its own."""

    streams: tuple[SweepResult, ...]
    stream: np.ndarray  # per request (log order): its stream
    index: np.ndarray  # ... and its place in that stream

    def cached(self, capacity_tokens: int | None) -> list[int] | None:
        """Each request's cached tokens at `capacity_tokens` (None: unlimited), or None
        where the sweep does not follow that capacity (replay it instead)."""
        out = np.zeros(len(self.stream), dtype=np.int64)
        for i, result in enumerate(self.streams):
            units = None if capacity_tokens is None else capacity_tokens // result.unit
            if not result.follows(units):
                return None
            mine = self.stream == i
            out[mine] = np.asarray(result.cached_tokens(units), dtype=np.int64)[self.index[mine]]
        return out.tolist()


def _sweep(prepared: Sequence[_Prepared], options: SimulateOptions,
           unlimited: bool = False) -> _Swept | None:
    """`_replay(prepared, options)` at every capacity in one pass (None: the engine's policy
    is not a stack algorithm, or the replay overlaps requests; docs/simulate.md).
    `unlimited`: at the unlimited capacity alone (the ideal replay), where the engine's
    sweep can skip the others."""
    return _staged(prepared, options, unlimited)()


def _staged(prepared: Sequence[_Prepared], options: SimulateOptions,
            unlimited: bool = False) -> Callable[[], _Swept | None]:
    """`_sweep` in two steps: the requests given to the engine's sweep now, and the sweep
    made (`VllmSweep.result`: its replay, and most of its memory) when the function
    returned is called. Report stages a domain's base sweep while its workers make the
    what-ifs' input, and makes it once they are gone (`swept_ahead`)."""
    make = ENGINES[options.engine].sweep
    if options.concurrent or make is None or any(
            p.trace is not None and p.trace_engine != "blocktrace" for p in prepared):
        return lambda: None  # (an LMCache lookup-hash trace replays LMCache's chunk LRU)
    engine = _engine(replace(options, capacity_tokens=None), True)  # cuts the units
    sweeps: dict[int | None, Sweep] = {None: make(
        block_size=engine.unit, cache_output=options.cache_output,
        unlimited=unlimited)}  # trace block -> sweep
    stream, index = [], []
    seen: Counter[int | None] = Counter()
    expander = _Expander(prepared, engine, log_ttl=options.ttl_seconds is None)
    for p in prepared:
        key = p.trace_block if p.trace is not None else None
        if key not in sweeps:
            sweeps[key] = BlocktraceSweep(block_size=p.trace_block)
        stream.append(list(sweeps).index(key))
        index.append(seen[key])
        seen[key] += 1
        prompt, sequence = expander.units(p, options.cache_output and p.trace is None)
        sweeps[key].step(prompt, sequence=sequence, prefix=expander.prefix,
                         keep=expander.holds(p.id))
        if expander.released is not None:
            sweeps[key].forget(expander.released)
    streams, at = np.array(stream, dtype=np.int64), np.array(index, dtype=np.int64)
    staged = tuple(sweeps.values())
    return lambda: _Swept(tuple(sweep.result() for sweep in staged), streams, at)


def _sweeps(prepared: Sequence[_Prepared], runs: Sequence[SimulateOptions],
            workers: int) -> list[_Swept | None]:
    """`_sweep(prepared, run)` of each run, in up to `workers` processes sharing `prepared`
    (each once inside `remembered_replays`; a sweep reads no capacity)."""
    keys = [_sweep_key(run) for run in runs]
    memo = _memo(prepared)
    todo = [key for key in dict.fromkeys(keys) if key not in memo]
    if todo:
        with Pool(min(workers, len(todo)), shared=[prepared]) as pool:
            memo.update(zip(todo, pool.map(_job_of, [(0, key) for key in todo]), strict=True))
    return [memo[key] for key in keys]


def sweep_ahead(prepared: Sequence[_Prepared], options: SimulateOptions,
                workers: int = 1) -> None:
    """Inside `remembered_replays`, sweep `options`' replay now where its engine has an exact
    sweep: a caller that will likely fit a capacity (whose sweep this is) gets its
    unlimited replay read off the same pass (`_replays`) instead of replaying it apart.
    Elsewhere, or for an engine with no sweep, nothing. (A what-if's input is not swept
    here beside it: whether it needs its unlimited capacity alone or every capacity is
    known after the fit; `findings.domains._replay_steps`.)"""
    if _REMEMBERED.get() is None or options.concurrent \
            or ENGINES[options.engine].sweep is None:
        return
    _sweeps(prepared, [options], workers)


def swept_ahead(prepared: Sequence[_Prepared], options: SimulateOptions
                ) -> Callable[[], Remembered]:
    """`sweep_ahead(prepared, options)` in this process, outside any `remembered_replays`
    block, in two steps (`_staged`): the requests staged now, the sweep made when the
    function returned is called, for a later block given what it returns
    (`remembered_replays(ahead)`). Report stages a domain's base sweep while its workers
    make the what-ifs' input, and makes it once they are gone, before the block that
    replays the domain. The sweep reads nothing but `prepared` and `options`, so it is the
    one that block would make, under the key it would look for."""
    if options.concurrent or ENGINES[options.engine].sweep is None:
        return dict
    key = _sweep_key(options)
    made = _staged(prepared, key[1])
    return lambda: {id(prepared): (prepared, {key: made()})}


def _at_capacities(prepared: Sequence[_Prepared], options: SimulateOptions,
                   capacities: Sequence[int | None], workers: int,
                   swept: _Swept | None = None, sweep: bool = True) -> list[list[int]]:
    """Cached tokens of each request at each capacity: from one sweep where it follows
    (`swept`, else made here), the other capacities replayed one by one."""
    if swept is None and sweep:
        swept = _sweeps(prepared, [options], 1)[0]
    out: list[list[int] | None] = [None if swept is None else swept.cached(c)
                                   for c in capacities]
    todo = [i for i, cached in enumerate(out) if cached is None]
    replayed = _replays(prepared, [replace(options, capacity_tokens=capacities[i])
                                   for i in todo], workers, read_sweeps=False) if todo else []
    for i, cached in zip(todo, replayed, strict=True):
        out[i] = cached
    return [cached for cached in out if cached is not None]


def _within_sessions(prepared: Sequence[_Prepared], options: SimulateOptions) -> list[int]:
    """Each request's cached tokens in an unlimited cache (no clock) that holds its own
    session's earlier requests and nothing else: the most it can reuse within its
    conversation (what pinning a session to one replica keeps). Each session is replayed
    through an engine of its own; a request threading left without a session has none
    (0). With chained keys a request's hit is a prefix, and so is the part of it its own
    session sent before: at any capacity, ``min(cached, this)`` of its cached tokens are
    reuse within its conversation and the rest reuse across conversations (docs/simulate.md,
    "Within and across conversations")."""
    units_of = _engine(options, True)
    engines: dict[str, Engine] = {}
    traces: dict[tuple[str, str, int], Engine] = {}
    out = []
    expander = _Expander(prepared, units_of)
    for p in prepared:
        prompt, sequence = expander.units(p, options.cache_output and p.trace is None)
        if p.session is None:
            out.append(0)
            continue
        if p.trace is not None:
            key = (p.session, p.trace_engine, p.trace_block)
            engine = traces.get(key)
            if engine is None:
                spec = ENGINES[p.trace_engine]
                engine = traces[key] = get_engine(p.trace_engine,
                                                  **spec.block_kwargs(p.trace_block))
            out.append(engine.step(prompt).cached_tokens)
            continue
        engine = engines.get(p.session)
        if engine is None:
            engine = engines[p.session] = _engine(options, True)
        out.append(engine.step(prompt, sequence=sequence, now=None).cached_tokens)
    return out
