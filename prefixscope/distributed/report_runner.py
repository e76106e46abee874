"""`report --runner ray`: report's per-session stages as Ray tasks, one run of whole
sessions each -- the walk (`analyses.onepass.session_stage`: render and tokenize each
request once, diff its pairs, build each cache domain's replay input) and each what-if's
renders (`onepass.what_if_stage`); the driver merges their parts as the local runner
does, so the report is the same (tests/test_distributed.py).

The driver reads the store (it loads each run's requests and ships them with the task:
the workers need no access to the store's file, only prefixscope and the tokenizers
offline) and then runs the rest of report itself: bucket, segments, the usage lint, each
domain's replays and the ledger. What runs where is in docs/scale.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any

from prefixscope.analyses.onepass import (
    PassResult,
    PassSetup,
    StageResult,
    StageRunner,
    WhatIfTask,
    merge_stages,
    session_runs,
    session_stage,
    what_if_stage,
)
from prefixscope.analyses.simulate import _Prepared
from prefixscope.distributed import DistributedError
from prefixscope.distributed.ray_runner import _last_line, import_ray, ray_session
from prefixscope.model import Request
from prefixscope.store import Store

_RUNS_PER_CPU = 4  # sessions differ in length: smaller runs even out the workers
_IN_FLIGHT_PER_CPU = 2  # runs shipped ahead of the workers: the driver holds no more


@contextmanager
def ray_stages() -> Iterator[StageRunner]:
    """report's stages on Ray while the context is open: joins the cluster RAY_ADDRESS
    names, else starts a local Ray on loopback (or uses the one this process started).

    Raises:
        DistributedError: Ray missing, or a run failed.
    """
    ray = import_ray()
    with ray_session(ray):
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        yield StageRunner(partial(_walk, ray, cpus), partial(_what_ifs, ray, cpus),
                          cpus * _RUNS_PER_CPU)


def _walk(ray: Any, cpus: int, store: Store, setup: PassSetup) -> PassResult:
    order, cut = session_runs(store, setup, cpus * _RUNS_PER_CPU)
    parts: list[StageResult] = _map(
        ray, cpus, store, _stage,
        [(ids, (setup.subset(ids, pairs), tuple(pairs))) for ids, pairs in cut])
    return merge_stages(parts, setup, order, store)


def _what_ifs(ray: Any, cpus: int, store: Store, tasks: Sequence[WhatIfTask]
              ) -> list[list[list[_Prepared]]]:
    return _map(ray, cpus, store, what_if_stage, [(t.ids, (t,)) for t in tasks])


def _map(ray: Any, cpus: int, store: Store, run: Callable[..., Any],
         jobs: Sequence[tuple[Sequence[str], tuple[Any, ...]]]) -> list[Any]:
    """`run(requests, *args)` of each job as a Ray task, its requests loaded here and
    shipped with it (at most a few jobs ahead of the workers), results in job order."""
    task = ray.remote(run)
    pending: list[Any] = []
    refs: list[Any] = []
    try:
        for ids, args in jobs:
            while len(pending) >= cpus * _IN_FLIGHT_PER_CPU:
                _, pending = ray.wait(pending, num_returns=1)
            ref = task.remote(list(store.iter_ids(ids)), *args)
            refs.append(ref)
            pending.append(ref)
        return list(ray.get(refs))
    except ray.exceptions.RayError as exc:
        raise DistributedError(f"the Ray run failed: {_last_line(exc)}") from None


def _stage(requests: list[Request], setup: PassSetup, pairs: tuple[int, ...]) -> StageResult:
    return session_stage(requests, setup, pairs)
