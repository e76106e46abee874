"""Every capacity in one pass (`engines.sweep`): the sweep's hit of every request at every
capacity equals a replay at that capacity, request by request.

Oracles: `VllmEngine` / `BlocktraceEngine` replayed once per capacity, the list-based
transcription of vLLM's pool in test_engine_vllm.py, a plain OrderedDict LRU, and hand
traces of tiny scenarios. Where the sweep says it does not follow a capacity (a
duplicated block touched through its later copy) the simulate layer replays that
capacity; the scenario that needs it is traced by hand below. SGLang's and LMCache's
policies are not stack algorithms: the two counterexamples (a larger cache hitting less)
are checked here, and docs/simulate.md traces them."""

from __future__ import annotations

from collections import OrderedDict
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_engine_vllm import TRUNK, prompts, vllm_reference_replay

from prefixscope.analyses.simulate import SimulateOptions, _at_capacities, _Prepared
from prefixscope.engines import ENGINES, Units, get_engine
from prefixscope.engines.base import block_keys
from prefixscope.engines.blocktrace import BlocktraceEngine
from prefixscope.engines.sweep import BlocktraceSweep, VllmSweep
from prefixscope.engines.vllm import VllmEngine


def swept(requests: list[tuple[Units, Units | None]], bs: int, cache_output: bool = True):
    sweep = VllmSweep(block_size=bs, cache_output=cache_output)
    for prompt, sequence in requests:
        sweep.step(prompt, sequence=sequence)
    return sweep.result()


def prepared(prompts: list[list[int]]) -> list[_Prepared]:
    """Requests of one session given by their token ids, for simulate's replay helpers."""
    return [_Prepared(str(i), "s", None, False, None, None, np.array(t), None, None, 0, 0)
            for i, t in enumerate(prompts)]


class TestHandTraced:
    def test_lru_tails_first_at_every_capacity(self):
        """test_engine_vllm's TestEviction scenario (block 4): A = a0 a1 a2, B = a0 a1 b2,
        C = c0, then A again; capacity 3 is traced there. Capacity 1: A holds a0 only
        (overflow), B hits a0 (4), C evicts it, A misses. Capacity 2: A holds a0 a1, B
        hits both (8), C evicts a1 (the LRU front: freed tail first), A hits a0 (4).
        Capacity 4: B's b2 takes the fresh block, C evicts a2, A hits a0 a1 (8; a2 can
        never hit: at most (12 - 1) // 4 = 2 blocks)."""
        engine = VllmEngine(block_size=4)
        a = engine.units(list(range(12)))
        b = engine.units(list(range(8)) + [100, 101, 102, 103])
        c = engine.units([200, 201, 202, 203])
        result = swept([(a, None), (b, None), (c, None), (a, None)], 4)
        expected = {0: [0, 0, 0, 0], 1: [0, 4, 0, 0], 2: [0, 8, 0, 4], 3: [0, 8, 0, 8],
                    4: [0, 8, 0, 8], None: [0, 8, 0, 8]}
        assert {c: result.cached_tokens(c) for c in expected} == expected
        assert all(result.follows(c) for c in expected)

    def test_a_fully_cached_aligned_prompt_recomputes_its_last_block_into_a_copy(self):
        """Block 4: P (8 tokens: p0 p1) twice, then P + 5 tokens. The second P may hit
        one block only ((8 - 1) // 4), so p1 is recomputed into a new block. Capacity 3:
        a fresh block, so two copies of p1 are held and the third request hits p0 p1 (8).
        Capacity 1: p0 only, hit 4 twice. Capacity 2: the new block is the LRU front,
        p1's own block, evicted and rewritten: one copy, the later one, which the recency
        list (moving the first-inserted copy) cannot tell apart; the sweep flags capacity
        2 and simulate replays it: 8."""
        engine = VllmEngine(block_size=4)
        p = engine.units(list(range(8)))
        longer = engine.units(list(range(13)))
        result = swept([(p, None), (p, None), (longer, None)], 4)
        assert result.cached_tokens(1) == [0, 4, 4]
        assert result.follows(3) and result.cached_tokens(3) == [0, 4, 8]
        assert result.follows(None) and result.cached_tokens(None) == [0, 4, 8]
        assert not result.follows(2)
        log = prepared([list(range(8)), list(range(8)), list(range(13))])
        assert _at_capacities(log, SimulateOptions(unit=4), [2 * 4], 1) == [[0, 4, 8]]

    def test_a_capacity_holding_only_the_later_copy_is_replayed(self):
        """Block 1, capacity 3: [0], [1, 0], [0], [0, 1], [1, 0]. The third request's a
        (= [0]) is recomputed (last-token rule) into the free queue's front, a's own
        block at capacity 3: one copy. With more room a fresh block takes the copy and
        the first stays. The fourth request hits a (1). The list moved a's first copy and
        keeps the later one as an entry capacity 3 does not hold, one slot too many: it
        says b (= [1]) was evicted before the fifth request, the pool still holds it
        (hit 1). Capacities 1..3 are flagged; simulate replays them."""
        engine = VllmEngine(block_size=1)
        log = ([0], [1, 0], [0], [0, 1], [1, 0])
        result = swept([(engine.units(t), None) for t in log], 1)
        assert not result.follows(3)
        assert result.cached_tokens(3) == [0, 0, 0, 1, 0]  # the list's answer: wrong
        assert result.follows(4) and result.cached_tokens(4) == [0, 0, 0, 1, 1]
        assert _at_capacities(prepared(list(log)), SimulateOptions(unit=1), [3, 4, None],
                              1) == [[0, 0, 0, 1, 1]] * 3


class TestIdealReadOffTheSweep:
    def test_an_ideal_replay_is_read_off_a_sweep_made_ahead(self, monkeypatch):
        """Inside `remembered_replays`, once `sweep_ahead` swept the log, the unlimited
        replay (predicted with no capacity, and the ideal) is the sweep's unlimited
        capacity: no replay runs, and the answer is the pool's. Hand trace, block 2:
        [0 1 2 3] cold; [0 1 2 3 4] hits both blocks; [0 1 9] hits block [0 1]."""
        from prefixscope.analyses.simulate import replay as replay_module

        log = prepared([[0, 1, 2, 3], [0, 1, 2, 3, 4], [0, 1, 9]])
        options = SimulateOptions(unit=2)
        with replay_module.remembered_replays():
            replay_module.sweep_ahead(log, options)

            def no_replay(*args, **kwargs):
                raise AssertionError("replayed: the sweep made ahead was not read")

            monkeypatch.setattr(replay_module, "_replay", no_replay)
            got = replay_module._replays(log, [options, replay_module._IDEAL], 1)
        assert got == [[0, 4, 2], [0, 4, 2]]

    def test_without_a_sweep_made_the_ideal_is_an_unlimited_sweep(self, monkeypatch):
        """No full sweep made: the ideal replay is still read off a sweep, of the
        unlimited capacity alone; no replay through an engine runs."""
        from prefixscope.analyses.simulate import replay as replay_module

        made = []
        real = replay_module._sweep

        def sweep(*args, **kwargs):
            made.append(kwargs.get("unlimited"))
            return real(*args, **kwargs)

        def no_replay(*args, **kwargs):
            raise AssertionError("replayed: the ideal was not read off a sweep")

        monkeypatch.setattr(replay_module, "_sweep", sweep)
        monkeypatch.setattr(replay_module, "_replay", no_replay)
        log = prepared([[0, 1, 2, 3], [0, 1, 2, 3, 4], [0, 1, 9]])
        with replay_module.remembered_replays():
            got = replay_module._replays(log, [SimulateOptions(unit=2), replay_module._IDEAL],
                                         1)
        assert got == [[0, 4, 2], [0, 4, 2]]
        assert made == [True]

    def test_an_engine_with_no_sweep_replays_its_ideal(self, monkeypatch):
        from prefixscope.analyses.simulate import replay as replay_module

        def no_sweep(*args, **kwargs):
            raise AssertionError("swept: sglang has no sweep")

        monkeypatch.setattr(replay_module, "_sweep", no_sweep)
        log = prepared([[0, 1, 2, 3], [0, 1, 2, 3, 4], [0, 1, 9]])
        with replay_module.remembered_replays():
            got = replay_module._replays(log, [SimulateOptions(engine="sglang", unit=2),
                                               replay_module._IDEAL], 1)
        assert got[0] == got[1]


class TestNotStackAlgorithms:
    """A stack algorithm's cache at capacity C is contained in its cache at C + 1 at every
    moment, so no request hits less with more room. These two do (hand traces in
    docs/simulate.md): they have no sweep and are replayed capacity by capacity."""

    def test_sglang_whole_leaf_eviction_hits_less_with_more_room(self):
        hits = {}
        for capacity in (3, 4):
            engine = get_engine("sglang", capacity_tokens=capacity)
            hits[capacity] = [engine.step(engine.units(t)).cached_tokens
                              for t in ([1, 0, 2], [2], [1, 2], [2, 1])]
        assert hits == {3: [0, 0, 0, 1], 4: [0, 0, 1, 0]}
        assert ENGINES["sglang"].sweep is None

    def test_lmcache_store_evicting_its_own_hit_hits_less_with_more_room(self):
        hits = {}
        for capacity in (1, 2):
            engine = get_engine("lmcache", chunk_size=1, capacity_blocks=capacity)
            hits[capacity] = [engine.step(engine.units(t)).cached_tokens
                              for t in ([0], [1], [0, 0, 1], [0, 1])]
        assert hits == {1: [0, 0, 0, 1], 2: [0, 0, 1, 0]}
        assert ENGINES["lmcache"].sweep is None


# -- properties -------------------------------------------------------------------------

@settings(max_examples=120, deadline=None)
@given(prompts, st.lists(st.integers(0, 3), min_size=14, max_size=14), st.integers(1, 5),
       st.booleans())
@pytest.mark.slow
def test_the_sweep_is_the_replay_at_every_capacity(reqs, outputs, bs, cache_output):
    """Outputs (`outputs` x 3 tokens of TRUNK after the prompt) extend the sequence when
    `cache_output`; every capacity from 0 to past the log's blocks, and unlimited."""
    engine = VllmEngine(block_size=bs)
    requests = [(engine.units(t), engine.units(t + TRUNK[: outputs[i] * 3])
                 if cache_output and outputs[i] else None) for i, t in enumerate(reqs)]
    result = swept(requests, bs, cache_output)
    blocks = sum(-(-(s or p).n_tokens // bs) for p, s in requests)
    for capacity in (None, *range(blocks + 3)):
        pool = VllmEngine(block_size=bs, capacity_blocks=capacity, cache_output=cache_output)
        replayed = [pool.step(p, sequence=s).cached_tokens for p, s in requests]
        if result.follows(capacity):
            assert result.cached_tokens(capacity) == replayed
        if not cache_output and capacity is not None:
            assert replayed == vllm_reference_replay(
                [(block_keys(t, bs).tolist(), len(t)) for t in reqs], bs, capacity)


@settings(max_examples=60, deadline=None)
@given(prompts, st.lists(st.integers(0, 3), min_size=14, max_size=14), st.integers(1, 5),
       st.integers(1, 40))
def test_the_sweep_cutting_its_depths_into_runs_a_few_requests_at_a_time_is_the_replay(
        reqs, outputs, bs, pending):
    """The depths `_record`ed are cut into runs whenever `pending` of them wait: every
    capacity's hits are still the replay's (outputs cached)."""
    engine = VllmEngine(block_size=bs)
    requests = [(engine.units(t), engine.units(t + TRUNK[: outputs[i] * 3])
                 if outputs[i] else None) for i, t in enumerate(reqs)]
    with patch("prefixscope.engines.sweep._PENDING_DEPTHS", pending):
        result = swept(requests, bs)
    blocks = sum(-(-(s or p).n_tokens // bs) for p, s in requests)
    for capacity in (None, *range(blocks + 3)):
        pool = VllmEngine(block_size=bs, capacity_blocks=capacity)
        replayed = [pool.step(p, sequence=s).cached_tokens for p, s in requests]
        if result.follows(capacity):
            assert result.cached_tokens(capacity) == replayed


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(1, 4), max_size=12), max_size=10), st.integers(1, 30))
def test_recorded_depths_are_each_requests_runs_of_consecutive_values(steps, pending):
    """`_Sweep._record`: each request's increasing depths (built from `steps`, the gaps
    between them) come back as its own runs of consecutive values -- where a run starts
    (index, value) and stops -- however many requests are cut into runs at once (the
    oracle: a loop over each request's depths alone)."""
    from prefixscope.engines.sweep import _Sweep

    sweep = _Sweep()
    sweep.unit = 1
    want_runs, want = [0], []
    with patch("prefixscope.engines.sweep._PENDING_DEPTHS", pending):
        for gaps in steps:
            depth = np.cumsum(gaps, dtype=np.int64)
            sweep._record(depth, 1)
            mine = []
            for i, d in enumerate(depth.tolist()):
                if mine and d == mine[-1][0] + (i - mine[-1][1]):
                    mine[-1][2] = i + 1
                else:
                    mine.append([d, i, i + 1])
            want += [(start_value, start, stop) for start_value, start, stop in mine]
            want_runs.append(want_runs[-1] + len(mine))
        result = sweep.result()
    assert list(zip(result.run_value.tolist(), result.run_index.tolist(),
                    result.run_stop.tolist(), strict=True)) == want
    assert result.runs.tolist() == want_runs
    assert result.depths.tolist() == [len(gaps) for gaps in steps]


@settings(max_examples=120, deadline=None)
@given(prompts, st.lists(st.integers(0, 3), min_size=14, max_size=14), st.integers(1, 5),
       st.booleans(), st.data())
def test_the_unlimited_sweep_is_the_unlimited_engine(reqs, outputs, bs, cache_output, data):
    """`VllmSweep(unlimited=True)`: each request's hit is `VllmUnlimitedEngine`'s, request
    by request (outputs cached or not), with prefix hints taken from any earlier kept
    prompt -- a hint that does not hold (another prompt's keys) is checked and dropped."""
    from prefixscope.engines.vllm import VllmUnlimitedEngine

    engine = VllmUnlimitedEngine(block_size=bs, cache_output=cache_output)
    sweep = VllmSweep(block_size=bs, cache_output=cache_output, unlimited=True)
    kept: list[Units] = []
    expected = []
    for i, t in enumerate(reqs):
        prompt = engine.units(t)
        sequence = engine.units(t + TRUNK[: outputs[i] * 3]) if outputs[i] else None
        expected.append(engine.step(prompt, sequence=sequence).cached_tokens)
        hint = None
        if kept and data.draw(st.booleans()):
            hint = (data.draw(st.sampled_from(kept)), data.draw(st.integers(0, 6)))
        sweep.step(prompt, sequence=sequence, prefix=hint, keep=True)
        kept.append(prompt)
    result = sweep.result()
    assert result.follows(None) and not result.follows(0)
    assert result.cached_tokens(None) == expected


@settings(max_examples=120, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 8), st.lists(st.integers(10, 13), max_size=4),
                          st.integers(0, 3)), min_size=1, max_size=14), st.integers(1, 4))
def test_the_trace_sweep_is_the_block_lru_at_every_capacity(rows, unit):
    """Trace requests: a shared run of ids, a few others (repeats allowed), a partial last
    block of `cut` tokens short."""
    requests = []
    for head, tail, cut in rows:
        ids = list(range(head)) + tail
        if ids:
            requests.append(Units.blocks(ids, max(1, len(ids) * unit - min(cut, unit - 1)),
                                         unit))
    sweep = BlocktraceSweep(block_size=unit)
    for prompt in requests:
        sweep.step(prompt)
    result = sweep.result()
    for capacity in (None, *range(sum(len(r.keys) for r in requests) + 2)):
        engine = BlocktraceEngine(block_size=unit, capacity_blocks=capacity)
        assert result.follows(capacity)
        assert result.cached_tokens(capacity) == [engine.step(r).cached_tokens
                                                  for r in requests]


def plain_block_lru(trace: list[tuple[list[int], int]], capacity: int, block: int) -> list[int]:
    lru: OrderedDict[int, None] = OrderedDict()
    out = []
    for ids, length in trace:
        matched = 0
        while matched < len(ids) and ids[matched] in lru:
            matched += 1
        out.append(min(matched * block, length))
        for h in reversed(ids):
            lru[h] = None
            lru.move_to_end(h)
            if len(lru) > capacity:
                lru.popitem(last=False)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", ["conversation", "synthetic"])
def test_the_mooncake_traces_at_every_curve_capacity(real, name):
    """The real Mooncake traces: the trace sweep against a plain block LRU, and vLLM's
    sweep (block 512) against the transcribed pool, at capacities around the knee."""
    import json

    rows = [json.loads(line) for line in
            (real / "mooncake" / f"{name}_trace.jsonl").read_text().splitlines() if line]
    trace = [(r["hash_ids"], r["input_length"]) for r in rows][:4000]
    sweep = BlocktraceSweep(block_size=512)
    vllm = VllmSweep(block_size=512)
    for ids, length in trace:
        sweep.step(Units.blocks(ids, length, 512))
        vllm.step(Units.blocks(ids, length, 512))
    lru, pool = sweep.result(), vllm.result()
    full = [(list(ids[: length // 512]), length) for ids, length in trace]
    for capacity in (100, 1_000, 3_000, 10_000):
        assert lru.cached_tokens(capacity) == plain_block_lru(trace, capacity, 512)
        if pool.follows(capacity):
            assert pool.cached_tokens(capacity) == vllm_reference_replay(full, 512, capacity)


@pytest.fixture(scope="module")
def agent_prepared(tmp_path_factory):
    """Replay inputs of real agent sessions (each turn extends the last: the sweep is given
    the slots of the shared blocks instead of looking them up)."""
    from conftest import ROOT

    from prefixscope.analyses.simulate import prepare
    from prefixscope.store import Store
    from prefixscope.store.load import ingest_paths

    store = Store.open(tmp_path_factory.mktemp("sweep") / "s.duckdb")
    ingest_paths([str(ROOT / "sample_logs" / "langfuse-claude-code.events_full.jsonl"),
                  str(ROOT / "sample_logs" / "bifrost-mcp-keyorder.jsonl")], store)
    return store, prepare


@pytest.mark.parametrize("unit", [16, 64])
@pytest.mark.parametrize("cache_output", [False, True])
def test_a_sweep_of_extending_prompts_is_their_replay_at_every_capacity(agent_prepared, unit,
                                                                        cache_output):
    """`_sweep` over prepared sessions (prompts that extend their base: the slots of the
    shared blocks handed on) against `VllmEngine` replayed at each capacity (`_replay`)."""
    from prefixscope.analyses.simulate.replay import _replay, _sweep

    store, prepare = agent_prepared
    options = SimulateOptions(engine="vllm", unit=unit, cache_output=cache_output)
    prepared, _ = prepare(store, options)
    assert sum(p.base is not None for p in prepared) > len(prepared) // 2
    swept = _sweep(prepared, options)
    assert swept is not None
    total = sum(p.n_tokens for p in prepared) // unit
    for blocks in (None, 1, 7, total // 50, total // 10, total // 3, total):
        capacity = None if blocks is None else blocks * unit
        cached = swept.cached(capacity)
        if cached is not None:
            want = _replay(prepared, SimulateOptions(engine="vllm", unit=unit,
                                                     capacity_tokens=capacity,
                                                     cache_output=cache_output),
                           unlimited=capacity is None)
            assert cached == want, blocks


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, 700), st.lists(st.integers(0, 10**6),
                                                                max_size=40)),
                      min_size=1, max_size=12),
       data=st.data())
def test_a_live_entrys_depth_is_the_live_entries_from_it_on(steps, data):
    """`_Recency.depths`: the depth of a live entry is how many live entries have its
    timestamp or a later one (the oracle: those counted in a list), whatever blocks of
    256 timestamps the asked ones fall in and in whatever order they are asked."""
    from prefixscope.engines.sweep import _Recency

    recency, live = _Recency(), []
    for pushed, picks in steps:
        start = recency.push(pushed)
        live += range(start, start + pushed)
        if live:
            gone = sorted({live[p % len(live)] for p in picks[: len(picks) // 2]})
            recency.remove(np.array(gone, dtype=np.int64))
            live = [t for t in live if t not in set(gone)]
        if live:
            asked = data.draw(st.lists(st.sampled_from(live), max_size=60))
            want = [sum(1 for t in live if t >= a) for a in asked]
            assert recency.depths(np.array(asked, dtype=np.int64)).tolist() == want


@settings(max_examples=300)
@given(pool=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=8, unique=True),
       picks=st.lists(st.integers(0, 7), max_size=400), piece=st.integers(1, 9))
def test_each_listed_key_is_first_listed_where_a_dict_first_meets_it(pool, picks, piece):
    """`_runs` with `_first_of_runs`, and the ranks `VllmSweep._replay` reads off them
    (`_ranks`, int32) and each listing's first listing (`_gathered`): for keys listed many
    times over (runs long enough that an unstable sort moves equal keys, values up to
    2**64 - 1), where each distinct key, ascending, is listed first, each listing's rank
    among the distinct keys and where its key is listed first, as a dict filled in listing
    order and a sorted list give them (np.unique's ``return_index`` and
    ``return_inverse``). The sorted keys compared, the ranks counted and the first listings
    gathered `piece` listings at a time (`_SLICE`): a run may cross from one slice to the
    next."""
    from prefixscope.engines import sweep
    from prefixscope.engines.sweep import _first_of_runs, _gathered, _ranks, _runs

    keys = [pool[p % len(pool)] for p in picks]
    listed = np.array(keys, dtype=np.uint64)
    first_at: dict[int, int] = {}
    for i, key in enumerate(keys):
        first_at.setdefault(key, i)
    distinct = sorted(first_at)
    with patch.object(sweep, "_SLICE", piece):
        order, new = _runs(listed)
        ranks = _ranks(order, new)
        firsts = _first_of_runs(order, new)
        gathered = _gathered(firsts.astype(np.int32), ranks)
    assert firsts.tolist() == [first_at[k] for k in distinct]
    assert ranks.dtype == np.int32
    assert ranks.tolist() == [distinct.index(k) for k in keys]
    assert gathered.tolist() == [first_at[k] for k in keys]


def test_a_key_listed_again_and_again_is_first_where_it_first_came():
    """Hand-built: 1,000 listings of three keys in a fixed cycle after a lone one; each
    key first at its place in the first cycle (a stable order not assumed)."""
    from prefixscope.engines.sweep import _first_of_runs, _runs

    listed = np.array([2**64 - 1] + [7, 2**63, 7, 0] * 250, dtype=np.uint64)
    order, new = _runs(listed)
    assert _first_of_runs(order, new).tolist() == [4, 1, 2, 0]  # 0, 7, 2**63, 2**64 - 1
    assert int(new.sum()) == 4
