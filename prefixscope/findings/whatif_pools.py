"""Where the what-ifs' replay inputs are made: every domain's at once by the walk's
workers, by runs of sessions in spawned processes or a runner (Ray), else here; the
entries are the same wherever they are made (`analyses.onepass`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from prefixscope.analyses.onepass import (
    PassResult,
    StageRunner,
    WhatIfJob,
    WhatIfRunner,
    pool_what_ifs,
    what_if_pass,
    what_if_passes,
)
from prefixscope.analyses.pool import worker_pool
from prefixscope.analyses.simulate import (
    SimulateError,
    SimulateOptions,
    WhatIfInput,
)
from prefixscope.analyses.simulate.prepare import Links, prepare_what_if
from prefixscope.findings.values import Plans, ReportOptions
from prefixscope.parallel import Pool
from prefixscope.prompt import RenderError
from prefixscope.store import Store
from prefixscope.tokenizers import TokenizerError


def ready_what_ifs(store: Store, options: ReportOptions, links: Links, passed: PassResult,
                   planned: Plans, what_if_of: dict[str, str], pool: Pool,
                   meanwhile: Callable[[], object] | None = None
                   ) -> dict[str, dict[str, list[Any]]]:
    """Every planned domain's what-if replay inputs (domain -> transform -> entries), made
    by `pool`'s workers all at once (`onepass.what_if_passes`), as `replay_domains` would make
    them one by one: the input depends on the domain's entries, its files and render
    options, and its engine alone. Empty when one cannot be made: each domain's replay
    then makes its own, and says why it failed. `meanwhile()` is called here while the
    workers run their tasks (not at all when there is none)."""
    transforms = sorted(set(what_if_of.values()))
    keys: list[tuple[str, str]] = []
    jobs: list[WhatIfJob] = []
    for domain, (engine, unit, files) in planned[0].items():
        if domain in passed.failed or domain not in passed.prepared:
            continue
        for transform in transforms:
            jobs.append((SimulateOptions(engine=engine, unit=unit,
                                         capacity_tokens=options.capacity_tokens,
                                         render=options.render, source_files=tuple(files)
                                         ).with_what_if(transform),
                         passed.prepared[domain][0], transform))
            keys.append((domain, transform))
    if not jobs:
        return {}
    try:
        made = what_if_passes(store, links, jobs, pool_what_ifs(pool, meanwhile),
                              pool.workers * _WHAT_IF_RUNS_PER_WORKER)
    except (SimulateError, RenderError, TokenizerError):
        return {}
    ready: dict[str, dict[str, list[Any]]] = {}
    for (domain, transform), entries in zip(keys, made, strict=True):
        ready.setdefault(domain, {})[transform] = entries
    return ready


def ready_input(ready: dict[str, list[Any]], otherwise: WhatIfInput | None, store: Store,
                prepared: Sequence[Any]) -> WhatIfInput:
    """A domain's what-if input: the one made already, else as `otherwise` makes it (else
    as `replay_prepared` makes it without one: `prepare_what_if` here)."""
    def made(changed: SimulateOptions, transform: str) -> Sequence[Any]:
        if transform in ready:  # handed over: held no longer than its replays need it
            return ready.pop(transform)
        if otherwise is not None:
            return otherwise(changed, transform)
        return prepare_what_if(store, changed, prepared, (transform,))
    return made


def what_if_runner(store: Store, runner: StageRunner | None, workers: int
                   ) -> tuple[WhatIfRunner, int] | None:
    """Where the what-ifs' renders run: `runner`'s, else `workers` spawned processes (the
    store read-only: they open its file), else this process (None)."""
    if runner is not None:
        return runner.what_ifs, runner.parts
    if workers > 1 and store.read_only and store.body_count():
        return _PoolWhatIfs(workers), workers * _WHAT_IF_RUNS_PER_WORKER
    return None


# What-if tasks per worker: a task holds its run's base entries and makes each what-if's
# entries for it, so smaller runs keep a worker smaller (2.09 GiB report: 4 -> 16, peak
# summed memory 1,169 -> 1,060 MB, the same time).
_WHAT_IF_RUNS_PER_WORKER = 16


class _PoolWhatIfs:
    """What-if tasks in a pool started on first use, for one what-if at a time: closed as
    soon as its results are in (idle workers would hold their memory through the
    replays)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def __call__(self, store: Store, tasks: Sequence[Any]) -> list[list[Any]]:
        with worker_pool(min(self.workers, len(tasks))) as pool:
            return pool_what_ifs(pool)(store, tasks)


def runner_input(store: Store, links: Links, prepared: Sequence[Any], run: WhatIfRunner,
                 parts: int) -> WhatIfInput:
    """A domain's what-if replay input made by `run`, by runs of sessions
    (`onepass.what_if_pass`): the same entries `prepare_what_if` makes here."""
    def made(changed: SimulateOptions, transform: str) -> Sequence[Any]:
        return what_if_pass(store, links, changed, prepared, transform, run, parts)
    return made
