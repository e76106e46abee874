"""Replays of one log run together (`_replay_together`: each prompt cut into units once for
all of them) answer what each would alone: vLLM's pool at each capacity against the plain
reference pool of tests/test_engine_vllm.py; a report's replays grouped so only where the
jobs outnumber the workers (`_tasks`)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from test_engine_sweep import prepared
from test_engine_vllm import prompts, vllm_reference_replay

from prefixscope.analyses.simulate.model import SimulateOptions
from prefixscope.analyses.simulate.replay import (
    _IDEAL,
    _replay_key,
    _replay_together,
    _replays,
    _tasks,
)
from prefixscope.engines.base import block_keys


def reference(reqs: list[list[int]], bs: int, blocks: int | None) -> list[int]:
    """vLLM's pool replayed plainly (None: more blocks than the log has)."""
    keys = [(block_keys(t, bs).tolist(), len(t)) for t in reqs]
    return vllm_reference_replay(keys, bs, blocks if blocks is not None
                                 else sum(len(t) for t in reqs) + 1)


@settings(max_examples=100, deadline=None)
@given(prompts, st.integers(1, 5), st.lists(st.integers(0, 12), min_size=1, max_size=4))
def test_replays_together_are_each_the_reference_pool(reqs, bs, capacities):
    log = prepared(reqs)
    runs = [(SimulateOptions(unit=bs, capacity_tokens=c * bs), False) for c in capacities]
    runs.append((SimulateOptions(unit=bs), True))  # the ideal: no capacity
    got = _replay_together(log, runs)
    assert got == [reference(reqs, bs, c) for c in capacities] + [reference(reqs, bs, None)]


class TestTasks:
    def test_replays_that_outnumber_the_workers_share_a_task(self):
        a, b, c = (_replay_key(SimulateOptions(unit=2, capacity_tokens=n), False)
                   for n in (4, 8, 16))
        ideal = _replay_key(SimulateOptions(unit=2), True)
        sglang = _replay_key(SimulateOptions(engine="sglang", unit=2, capacity_tokens=4), False)
        jobs = [(0, a), (0, b), (0, ideal), (1, c), (0, sglang)]
        # one worker: plan 0's vLLM replays cut alike, two a task; plan 1's and SGLang's
        # on their own
        assert _tasks(jobs, 1) == [[(0, a), (0, b)], [(0, ideal)], [(1, c)], [(0, sglang)]]
        # a worker for each job: each on its own, side by side
        assert _tasks(jobs, 5) == [[job] for job in jobs]
        # two workers, three jobs: one task of two, the third beside it
        assert _tasks(jobs[:3], 2) == [[(0, a), (0, b)], [(0, ideal)]]
        # three workers, four jobs alike: two tasks of two, one split so every worker has one
        d = _replay_key(SimulateOptions(unit=2, capacity_tokens=32), False)
        assert _tasks([(0, a), (0, b), (0, ideal), (0, d)], 3) == [
            [(0, a)], [(0, b)], [(0, ideal), (0, d)]]

    def test_one_worker_replays_together_the_same_answers(self):
        reqs = [[7, 3, 3, 1, 4, 1], [7, 3, 3, 1, 4, 1, 5, 9], [7, 3, 2], [7, 3, 3, 1, 4, 1, 5]]
        got = _replays(prepared(reqs), [SimulateOptions(unit=2, capacity_tokens=4),
                                        SimulateOptions(unit=2, capacity_tokens=2),
                                        _IDEAL], 1, read_sweeps=False)
        # Hand trace, block 2, keys by pair: A = 73 31 41; B = A + 59; C = 73 and a lone 2;
        # D = A + a lone 5. Two blocks: B hits 73 31 (4), C hits 73 (2) and its lone 2 takes
        # the block of 31 (a freed tail goes first), so D hits 73 alone (2). One block: 73
        # is all any can hit. Unlimited: B and D hit A's 3 blocks (6), C 73 (2).
        assert got == [[0, 4, 2, 2], [0, 2, 2, 2], [0, 6, 2, 6]]
        assert got == [reference(reqs, 2, 2), reference(reqs, 2, 1), reference(reqs, 2, None)]
