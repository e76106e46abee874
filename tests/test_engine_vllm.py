"""vLLM 0.33 prefix caching: hand-built token scenarios with exact hits, block ids and
eviction order, in the manner of vLLM's tests/v1/core/test_prefix_caching.py, plus
properties checked against a literal list-based transcription of vLLM's block pool
(`vllm_reference_replay`, also used by test_engine_mooncake.py)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.engines import Units, get_engine
from prefixscope.engines.base import block_keys
from prefixscope.engines.vllm import VllmEngine, VllmUnlimitedEngine


def vllm_reference_replay(requests: Sequence[tuple[list[int], int]], block_size: int,
                          num_blocks: int) -> list[int]:
    """Cached tokens of each request, replayed one at a time through a transcription of
    vLLM's BlockPool kept deliberately plain: the free queue is a Python list.

    `requests` are (chained keys of the full blocks, prompt length).
    """
    free = list(range(1, num_blocks + 1))  # FreeKVCacheBlockQueue, front first
    key_of: dict[int, int] = {}  # block -> hash it holds
    table: dict[int, list[int]] = {}  # hash -> blocks holding it (first = hit)
    ref: dict[int, int] = {}
    out = []
    for keys, n_tokens in requests:
        matched = 0
        while matched < len(keys) and table.get(keys[matched]):
            matched += 1
        hit = min(matched, (n_tokens - 1) // block_size)
        blocks = []
        for key in keys[:hit]:  # touch
            block = table[key][0]
            if ref.get(block, 0) == 0:
                free.remove(block)
            ref[block] = ref.get(block, 0) + 1
            blocks.append(block)
        for _ in range(-(-n_tokens // block_size) - hit):  # get_new_blocks
            if not free:
                break
            block = free.pop(0)
            if block in key_of:  # _maybe_evict_cached_block
                table[key_of[block]].remove(block)
                del key_of[block]
            ref[block] = 1
            blocks.append(block)
        for i in range(hit, min(len(blocks), len(keys))):  # cache_full_blocks
            key_of[blocks[i]] = keys[i]
            table.setdefault(keys[i], []).append(blocks[i])
        front, back = [], []
        for block in reversed(blocks):  # free_blocks(reversed(...))
            ref[block] -= 1
            if ref[block] == 0:
                (back if block in key_of else front).append(block)
        free = front + free + back
        out.append(hit * block_size)
    return out


def ideal_hit(prompt: list[int], earlier: list[list[int]], bs: int) -> int:
    """Infinite cache: the longest full-block common prefix with any earlier prompt,
    capped so the last prompt token is computed."""
    best = 0
    for e in earlier:
        n = 0
        while n < min(len(e), len(prompt)) and e[n] == prompt[n]:
            n += 1
        best = max(best, n // bs)
    return min(best, (len(prompt) - 1) // bs) * bs


class TestPrefill:
    """vLLM's own test_prefill (block size 16, 11 GPU blocks = 10 usable): the block
    ids and the free-queue order asserted there."""

    def test_block_ids_and_free_queue_order(self):
        engine = VllmEngine(block_size=16, capacity_blocks=10)
        common = [i for i in range(3) for _ in range(16)]  # 3 full blocks

        req0 = engine.admit(engine.units(common + [3] * 7))
        assert req0.lookup.cached_tokens == 0
        assert engine.blocks_of(req0) == [1, 2, 3, 4]

        # Hit while req0 still runs: its blocks were cached when allocated.
        req1 = engine.admit(engine.units(common + [3] * 5))
        assert req1.lookup.cached_tokens == 3 * 16
        assert engine.blocks_of(req1) == [1, 2, 3, 5]
        assert len(engine.free_queue()) == 5

        engine.release(req0)
        engine.release(req1)
        # Partial blocks (no hash) prepended, unused blocks by id, hashed ones tail first.
        assert engine.free_queue() == [5, 4, 6, 7, 8, 9, 10, 3, 2, 1]

        req2 = engine.admit(engine.units(common + [3] * 6))
        assert req2.lookup.cached_tokens == 3 * 16
        assert engine.blocks_of(req2) == [1, 2, 3, 5]  # reuses partial block 5
        assert len(engine.free_queue()) == 6
        engine.release(req2)

        # A 10-block miss takes every block, in eviction order.
        req3 = engine.admit(engine.units([99] * 160))
        assert req3.lookup.cached_tokens == 0
        assert engine.blocks_of(req3) == [5, 4, 6, 7, 8, 9, 10, 3, 2, 1]
        assert engine.free_queue() == []


class TestLastTokenRule:
    def test_fully_cached_prompt_recomputes_its_last_block(self):
        engine = VllmEngine(block_size=4)
        prompt = engine.units(list(range(12)))  # 3 full blocks
        engine.step(prompt)
        hit = engine.step(prompt)
        # min(3 matched, (12 - 1) // 4 = 2) * 4
        assert (hit.cached_tokens, hit.matched_units) == (8, 3)

    def test_a_partial_tail_keeps_all_full_blocks(self):
        engine = VllmEngine(block_size=4)
        prompt = engine.units(list(range(13)))  # 3 full blocks + 1 token
        engine.step(prompt)
        assert engine.step(prompt).cached_tokens == 12  # min(3, 12 // 4 = 3) * 4

    def test_shorter_than_a_block_is_never_cached(self):
        engine = VllmEngine(block_size=4)
        prompt = engine.units([1, 2, 3])
        engine.step(prompt)
        assert engine.step(prompt).cached_tokens == 0
        assert len(engine) == 0

    def test_exactly_one_block_is_cached_but_never_hit_alone(self):
        engine = VllmEngine(block_size=4)
        engine.step(engine.units([1, 2, 3, 4]))
        assert engine.lookup(engine.units([1, 2, 3, 4])).cached_tokens == 0  # (4-1)//4 = 0
        assert engine.lookup(engine.units([1, 2, 3, 4, 5])).cached_tokens == 4

    def test_eagle_drops_one_more_block(self):
        engine = VllmEngine(block_size=4, eagle=True)
        prompt = engine.units(list(range(13)))
        engine.step(prompt)
        assert engine.step(prompt).cached_tokens == 8  # 3 blocks hit, one dropped


class TestEviction:
    def test_lru_evicts_chain_tails_first(self):
        """Block size 4, 3 blocks. A = [0..11] fills the pool; B shares A's first 8
        tokens, so its new block evicts A's tail; C, unrelated, evicts the LRU block,
        B's tail; A again touches a0 a1 and evicts C, the newest insert (LRU, not FIFO)."""
        engine = VllmEngine(block_size=4, capacity_blocks=3)
        a = engine.units(list(range(12)))  # a0 a1 a2 -> blocks 1 2 3
        b = engine.units(list(range(8)) + [100, 101, 102, 103])  # a0 a1 b2
        c = engine.units([200, 201, 202, 203])  # c0

        assert engine.step(a).cached_tokens == 0
        assert engine.free_queue() == [3, 2, 1]  # a2 a1 a0: tail in front

        assert engine.step(b).cached_tokens == 8
        assert engine.lookup(a).matched_units == 2  # a2 (block 3) was evicted
        assert engine.free_queue() == [3, 2, 1]  # block 3 now holds b2

        assert engine.step(c).cached_tokens == 0
        assert engine.lookup(b).matched_units == 2  # b2 evicted
        assert engine.free_queue() == [2, 1, 3]  # a1 a0 c0

        assert engine.step(a).cached_tokens == 8
        assert engine.lookup(c).matched_units == 0  # c0 evicted, not a0/a1
        assert engine.free_queue() == [3, 2, 1]  # a2 a1 a0 again

    def test_blocks_of_running_requests_are_never_evicted(self):
        engine = VllmEngine(block_size=4, capacity_blocks=3)
        a = engine.units(list(range(12)))
        running = engine.admit(a)  # pins blocks 1 2 3
        other = engine.admit(engine.units([200, 201, 202, 203, 204]))
        assert engine.blocks_of(other) == []  # nothing free: vLLM would make it wait
        assert engine.overflow_blocks == 2
        engine.release(other)
        engine.release(running)
        assert engine.lookup(a).matched_units == 3

    def test_recomputed_block_keeps_a_duplicate(self):
        """A fully cached 8-token prompt recomputes block 1 into a new physical block;
        vLLM keeps both copies (BlockHashToBlockMap) and the old one stays in place."""
        engine = VllmEngine(block_size=4)
        prompt = engine.units(list(range(8)))
        engine.step(prompt)  # blocks 1 (a0), 2 (a1); free queue [2, 1]
        engine.step(prompt)  # hits block 1, new block 3 holds a1 again
        assert len(engine) == 3
        assert engine.free_queue() == [2, 3, 1]


class TestOutput:
    def test_output_blocks_are_cached_but_not_the_last_sampled_token(self):
        engine = VllmEngine(block_size=4)
        prompt = list(range(6))
        output = [6, 7, 8, 9, 10]
        admission = engine.admit(engine.units(prompt))
        # 11 tokens, KV for 10: full blocks [0..3] [4..7]
        engine.release(admission, sequence=engine.units(prompt + output))
        assert engine.lookup(engine.units(list(range(11)) + [50])).cached_tokens == 8

        engine = VllmEngine(block_size=4)
        admission = engine.admit(engine.units(prompt))
        engine.release(admission, sequence=engine.units(prompt + [6, 7]))
        # 8 tokens, KV for 7: only [0..3] is full
        assert engine.lookup(engine.units(list(range(8)) + [60, 61])).cached_tokens == 4

    def test_cache_output_off_caches_the_prompt_only(self):
        engine = VllmEngine(block_size=4, cache_output=False)
        prompt = list(range(6))
        admission = engine.admit(engine.units(prompt))
        engine.release(admission, sequence=engine.units(prompt + [6, 7, 8, 9, 10]))
        assert engine.lookup(engine.units(list(range(11)) + [50])).cached_tokens == 4
        # Blocks 2 (the prompt's partial block) and 3 (output) hold no hash: freed
        # tail first and prepended, so block 3 is reused first.
        assert engine.free_queue() == [3, 2, 1]


class TestInterface:
    def test_lookup_changes_nothing(self):
        engine = VllmEngine(block_size=4, capacity_blocks=3)
        a = engine.units(list(range(12)))
        engine.step(a)
        before = engine.free_queue()
        for _ in range(3):
            engine.lookup(engine.units(list(range(8)) + [9, 9, 9, 9]))
        assert engine.free_queue() == before

    def test_released_twice_is_an_error(self):
        engine = VllmEngine(block_size=4)
        admission = engine.admit(engine.units([1, 2, 3, 4, 5]))
        engine.release(admission)
        with pytest.raises(ValueError, match="twice"):
            engine.release(admission)

    def test_trace_blocks_with_a_partial_last_id(self):
        engine = get_engine("vllm", block_size=512)
        first = Units.blocks([1, 2, 3], n_tokens=1100, unit=512)
        engine.step(first)
        # ids 1 2 full, 3 partial (never hashed): a longer request with 1 2 3 hits 1024.
        assert engine.step(Units.blocks([1, 2, 3, 4], 2000, 512)).cached_tokens == 1024


# -- properties -------------------------------------------------------------------------

TRUNK = [7, 3, 3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3,
         8, 3, 2, 7, 9, 5, 0, 2, 8, 8, 4, 1]
prompts = st.lists(
    st.tuples(st.integers(0, len(TRUNK)), st.lists(st.integers(0, 2), max_size=9)).map(
        lambda t: TRUNK[: t[0]] + t[1]).filter(bool),
    min_size=1, max_size=14)


@settings(max_examples=150, deadline=None)
@given(prompts, st.integers(1, 5), st.integers(0, 12))
def test_replay_matches_reference_pool_and_bounds(reqs, bs, capacity):
    engine = VllmEngine(block_size=bs, capacity_blocks=capacity)
    ideal = VllmEngine(block_size=bs)
    expected = vllm_reference_replay(
        [(block_keys(p, bs).tolist(), len(p)) for p in reqs], bs, capacity)
    for i, tokens in enumerate(reqs):
        units = engine.units(tokens)
        before = engine.lookup(units)
        hit = engine.step(units)
        assert hit == before  # lookup is what step gets
        ideal_cached = ideal.step(units).cached_tokens
        assert hit.cached_tokens == expected[i]
        assert hit.cached_tokens <= len(tokens) - 1
        assert hit.cached_tokens % bs == 0
        assert hit.cached_tokens <= ideal_cached == ideal_hit(tokens, reqs[:i], bs)


@given(st.lists(st.integers(0, 50), min_size=1, max_size=60), st.integers(1, 8))
def test_repeat_with_unlimited_capacity_hits_every_full_block_it_may(tokens, bs):
    engine = VllmEngine(block_size=bs)
    engine.step(engine.units(tokens))
    assert engine.step(engine.units(tokens)).cached_tokens == (len(tokens) - 1) // bs * bs


@settings(max_examples=200, deadline=None)
@given(prompts, st.lists(st.integers(0, 3), min_size=14, max_size=14),
       st.lists(st.booleans(), min_size=14, max_size=14), st.integers(1, 5), st.booleans(),
       st.booleans())
def test_the_unlimited_engine_hits_as_the_pool_with_unlimited_capacity(
        reqs, outputs, overlap, bs, eagle, cache_output):
    """Admissions overlap (a request is released after the next one is admitted when
    `overlap` says so) and outputs extend the prompt (`outputs` tokens of it)."""
    pool = VllmEngine(block_size=bs, eagle=eagle, cache_output=cache_output)
    lean = VllmUnlimitedEngine(block_size=bs, eagle=eagle, cache_output=cache_output)
    running: list[tuple[object, object, Units]] = []
    for i, tokens in enumerate(reqs):
        prompt = pool.units(tokens)
        sequence = pool.units(tokens + TRUNK[: outputs[i] * 3])
        assert lean.lookup(prompt) == pool.lookup(prompt)
        a, b = pool.admit(prompt), lean.admit(prompt)
        assert a.lookup == b.lookup
        running.append((a, b, sequence))
        while running and not (overlap[i] and len(running) == 1):
            a, b, done = running.pop(0)
            pool.release(a, sequence=done)
            lean.release(b, sequence=done)
    for tokens in reqs:
        assert lean.lookup(pool.units(tokens)) == pool.lookup(pool.units(tokens))


def test_the_unlimited_engine_keeps_keys_across_merges():
    """More keys than its pending set holds: they move to the sorted array, and
    lookups still find every leading one."""
    lean = VllmUnlimitedEngine(block_size=1)
    lean._keys._MIN_PENDING = 8
    tokens = list(range(100))
    lean.step(lean.units(tokens))
    assert len(lean) == 100 and len(lean._keys._recent) < 100
    assert lean.step(lean.units(tokens)).matched_units == 100
    assert lean.lookup(lean.units([*tokens[:40], 7])).matched_units == 40
