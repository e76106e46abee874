"""The engines on the real Mooncake FAST'25 traces (tests/data/real/mooncake/).

Each line: ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids`` (one
prefix-chained id per 512-token block, the last may be partial). Every expected
value comes from a deliberately plain loop written here, never from the engines:

* the ideal (infinite cache) token-weighted hit rate, with a request's hit
  ``min(leading ids seen before * 512, input_length)``, is the published
  37.36 % (conversation) and 65.12 % (synthetic) of tests/data/real/README.md;
* the `blocktrace` engine at a few capacities equals a plain OrderedDict block-LRU;
* the `vllm` engine equals the same plain loops under vLLM's rules (full blocks
  only, hit at most ``input_length - 1``) and, with a capacity, the list-based
  transcription of vLLM's block pool in test_engine_vllm.py.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from functools import cache
from pathlib import Path

import pytest
from test_engine_vllm import vllm_reference_replay

from prefixscope.engines import Units, get_engine

# not in the fast loop (`pytest -m "not slow"`): whole real Mooncake traces
pytestmark = pytest.mark.slow

BLOCK = 512
TRACES = ("conversation", "synthetic")


@cache
def _load(path: Path) -> tuple[tuple[tuple[int, ...], int], ...]:
    rows = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return tuple((tuple(r["hash_ids"]), r["input_length"]) for r in rows)


def load(real: Path, name: str) -> tuple[tuple[tuple[int, ...], int], ...]:
    return _load(real / "mooncake" / f"{name}_trace.jsonl")


def ideal_by_seen_set(trace) -> list[int]:
    seen: set[int] = set()
    out = []
    for ids, length in trace:
        matched = 0
        for h in ids:
            if h not in seen:
                break
            matched += 1
        out.append(min(matched * BLOCK, length))
        seen.update(ids)
    return out


def plain_block_lru(trace, capacity: int) -> list[int]:
    lru: OrderedDict[int, None] = OrderedDict()
    out = []
    for ids, length in trace:
        matched = 0
        for h in ids:
            if h not in lru:
                break
            matched += 1
        out.append(min(matched * BLOCK, length))
        for h in reversed(ids):  # tail first: the head ends most recent
            if h in lru:
                lru.move_to_end(h)
            else:
                lru[h] = None
                if len(lru) > capacity:
                    lru.popitem(last=False)
    return out


def ideal_vllm_rules(trace) -> list[int]:
    seen: set[int] = set()
    out = []
    for ids, length in trace:
        full = ids[: length // BLOCK]
        matched = 0
        for h in full:
            if h not in seen:
                break
            matched += 1
        out.append(min(matched, (length - 1) // BLOCK) * BLOCK)
        seen.update(full)
    return out


def replay(engine, trace) -> list[int]:
    return [engine.step(Units.blocks(ids, length, BLOCK)).cached_tokens for ids, length in trace]


@pytest.mark.parametrize(("name", "percent"), [("conversation", 37.36), ("synthetic", 65.12)])
def test_ideal_hit_rate_is_the_published_one(real, name, percent):
    trace = load(real, name)
    expected = ideal_by_seen_set(trace)
    total = sum(length for _, length in trace)
    assert round(100 * sum(expected) / total, 2) == percent
    assert replay(get_engine("blocktrace"), trace) == expected


@pytest.mark.parametrize("name", TRACES)
@pytest.mark.parametrize("capacity", [1_000, 10_000, 50_000])
def test_lru_replay_equals_a_plain_block_lru(real, name, capacity):
    trace = load(real, name)
    engine = get_engine("blocktrace", capacity_blocks=capacity)
    assert replay(engine, trace) == plain_block_lru(trace, capacity)


@pytest.mark.parametrize("name", TRACES)
def test_vllm_rules_ideal(real, name):
    trace = load(real, name)
    assert replay(get_engine("vllm", block_size=BLOCK), trace) == ideal_vllm_rules(trace)


@pytest.mark.parametrize("name", TRACES)
@pytest.mark.parametrize("capacity", [500, 3_000])
def test_vllm_pool_equals_the_transcribed_block_pool(real, name, capacity):
    trace = load(real, name)
    engine = get_engine("vllm", block_size=BLOCK, capacity_blocks=capacity)
    requests = [(list(ids[: length // BLOCK]), length) for ids, length in trace]
    assert replay(engine, trace) == vllm_reference_replay(requests, BLOCK, capacity)


@pytest.mark.parametrize("name", TRACES)
def test_every_engine_stays_under_its_ideal(real, name):
    trace = load(real, name)[:3000]
    ideal = ideal_vllm_rules(trace)
    for engine in (get_engine("sglang", page_size=BLOCK, capacity_blocks=2_000),
                   get_engine("lmcache", chunk_size=BLOCK, capacity_blocks=2_000)):
        hits = replay(engine, trace)
        # lmcache's whole-prompt hit gives back one token where vLLM gives back a block
        assert all(h <= i or (h == length - 1 and length % BLOCK == 0)
                   for h, i, (_, length) in zip(hits, ideal, trace, strict=True))


@pytest.mark.parametrize("name", TRACES)
def test_blocktrace_agrees_with_kvcache_simulator(real, name):
    """kvcache.ai's simulator (optional peer, `pip install kvcache-simulator`) measures
    the second half of a trace with an LRU over trie leaves and a ceiling; on these
    traces both agree with the blocktrace engine to the token."""
    plan_mod = pytest.importorskip("kvcache_sim.plan")
    policies = pytest.importorskip("kvcache_sim.policies")
    trace_mod = pytest.importorskip("kvcache_sim.trace")
    path = real / "mooncake" / f"{name}_trace.jsonl"
    with path.open(encoding="utf-8") as f:
        plan = plan_mod.build_execution_plan(trace_mod.parse_trace_lines(f, block_size=BLOCK),
                                             0.5)
    trace = load(real, name)
    start = plan.warmup_requests
    assert start == len(trace) // 2
    assert policies.simulate_ceiling(plan).hitTokens == \
        sum(replay(get_engine("blocktrace"), trace)[start:])
    for capacity in (1_000, 16_000):
        theirs = policies.simulate_policy(plan, "lru", capacity)
        ours = replay(get_engine("blocktrace", capacity_blocks=capacity), trace)
        assert theirs.hitTokens == sum(ours[start:])
