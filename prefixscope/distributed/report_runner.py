"""`report --runner ray`: report's per-session stage (`analyses.onepass.session_stage`:
render and tokenize each request once, diff its pairs, build each cache domain's replay
input) as Ray tasks, one run of whole sessions each; the driver merges their parts as the
local runner does, so the report is the same (tests/test_distributed.py).

The driver reads the store (it loads each run's requests and ships them with the task:
the workers need no access to the store's file, only prefixscope and the tokenizers
offline) and then runs the rest of report itself: bucket, segments, the usage lint, each
domain's replays and the ledger. What runs where is in docs/scale.md.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from prefixscope.analyses.onepass import (
    PassResult,
    PassSetup,
    StageResult,
    merge_stages,
    session_runs,
    session_stage,
)
from prefixscope.distributed import DistributedError
from prefixscope.distributed.ray_runner import _last_line, import_ray
from prefixscope.model import Request
from prefixscope.store import Store

_RUNS_PER_CPU = 4  # sessions differ in length: smaller runs even out the workers
_IN_FLIGHT_PER_CPU = 2  # runs shipped ahead of the workers: the driver holds no more
_LOAD = 64  # requests loaded from the store in one query


def report_pass_ray(store: Store, setup: PassSetup, *, diff: bool = True) -> PassResult:
    """`onepass.one_pass(store, setup)` with its runs of sessions as Ray tasks: the same
    result. Joins the cluster RAY_ADDRESS names, else starts a local Ray on loopback (or
    uses the one this process already started).

    Raises:
        DistributedError: Ray missing, or the run failed.
    """
    ray = import_ray()
    started = not ray.is_initialized()
    if started:
        local = {} if os.environ.get("RAY_ADDRESS") else {"_node_ip_address": "127.0.0.1"}
        ray.init(include_dashboard=False, log_to_driver=False, **local)
    try:
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        order, cut = session_runs(store, setup, cpus * _RUNS_PER_CPU)
        task = ray.remote(_stage)
        pending: list[Any] = []
        refs: list[Any] = []
        for ids, pairs in cut:
            while len(pending) >= cpus * _IN_FLIGHT_PER_CPU:
                _, pending = ray.wait(pending, num_returns=1)
            ref = task.remote(_load(store, ids), setup.subset(ids), tuple(pairs))
            refs.append(ref)
            pending.append(ref)
        parts: list[StageResult] = ray.get(refs)
    except ray.exceptions.RayError as exc:
        raise DistributedError(f"the Ray run failed: {_last_line(exc)}") from None
    finally:
        if started:
            ray.shutdown()
    return merge_stages(parts, setup, order, store, diff=diff)


def _stage(requests: list[Request], setup: PassSetup, pairs: tuple[int, ...]) -> StageResult:
    return session_stage(requests, setup, pairs)


def _load(store: Store, ids: Sequence[str]) -> list[Request]:
    out: list[Request] = []
    for start in range(0, len(ids), _LOAD):
        chunk = ids[start:start + _LOAD]
        loaded = store.get_many(chunk)
        out.extend(loaded[rid] for rid in chunk)
    return out
