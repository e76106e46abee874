"""SGLang 0.5.10 RadixCache: hand-built token scenarios with exact hits, node splits and
whole-leaf LRU eviction (including evict(n) freeing n tokens, not the shortfall),
plus properties against a brute-force longest-common-prefix oracle."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.engines import get_engine
from prefixscope.engines.sglang import SglangEngine


def lcp(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


class TestMatch:
    def test_token_granular_hit_capped_at_len_minus_one(self):
        engine = SglangEngine()
        a = engine.units([1, 2, 3, 4, 5])
        assert engine.step(a).cached_tokens == 0
        b = engine.units([1, 2, 3, 9, 9])
        assert engine.step(b).cached_tokens == 3  # shares [1, 2, 3]
        hit = engine.step(a)
        assert (hit.cached_tokens, hit.matched_units) == (4, 5)  # 5 - 1

    def test_a_partial_match_splits_the_node(self):
        engine = SglangEngine()
        engine.step(engine.units([1, 2, 3, 4, 5]))
        engine.step(engine.units([1, 2, 3, 9, 9]))
        # Leaves by full prefix: [1,2,3]+[4,5] was split at 3, [9,9] added beside it;
        # the admission of [1,2,3,9,9] touched [4,5] before splitting it, the insert
        # after it made [9,9], so [4,5] is older.
        assert engine.leaves() == [(1, 2, 3, 4, 5), (1, 2, 3, 9, 9)]
        assert len(engine) == 7

    def test_pages(self):
        engine = SglangEngine(page_size=2)
        engine.step(engine.units([1, 2, 3, 4, 5]))  # pages [1,2] [3,4]; 5 is unaligned
        assert engine.lookup(engine.units([1, 2, 3, 4, 5])).cached_tokens == 4  # (5-1)//2 pages
        assert engine.lookup(engine.units([1, 2, 3, 4])).cached_tokens == 2  # (4-1)//2 = 1 page
        assert engine.lookup(engine.units([1, 2, 3, 5, 6])).cached_tokens == 2  # [3,5] != [3,4]
        assert len(engine) == 4

    def test_outputs_are_cached_except_the_last_sampled_token(self):
        engine = SglangEngine()
        admission = engine.admit(engine.units([1, 2, 3]))
        engine.release(admission, sequence=engine.units([1, 2, 3, 4, 5]))
        # kv_committed_len = 5 - 1: [1, 2, 3, 4] inserted
        assert engine.lookup(engine.units([1, 2, 3, 4, 5, 6])).cached_tokens == 4

        engine = SglangEngine(cache_output=False)
        admission = engine.admit(engine.units([1, 2, 3]))
        engine.release(admission, sequence=engine.units([1, 2, 3, 4, 5]))
        assert engine.lookup(engine.units([1, 2, 3, 4, 5, 6])).cached_tokens == 3


class TestEviction:
    def test_evict_frees_whole_lru_leaves_for_the_whole_request(self):
        """Pool of 10 tokens. A = [1..5] (5 tokens), B = [1,2,3,6,7] splits A's node
        and adds leaf [6,7] (tree 7). C = [8,8,8,8] needs 4 slots, 3 are free, so
        SGLang calls evict(4): leaf [4,5] (older, 2 tokens) then leaf [6,7]; 4 tokens
        freed where 1 was missing. [1,2,3] stays (it became a leaf after both)."""
        engine = SglangEngine(capacity_tokens=10)
        a = engine.units([1, 2, 3, 4, 5])
        b = engine.units([1, 2, 3, 6, 7])
        engine.step(a)
        engine.step(b)
        assert len(engine) == 7
        assert engine.step(engine.units([8, 8, 8, 8])).cached_tokens == 0
        assert engine.lookup(a).cached_tokens == 3
        assert engine.lookup(b).cached_tokens == 3  # [6,7] went too, not just [4,5]
        assert engine.leaves() == [(1, 2, 3), (8, 8, 8, 8)]
        assert len(engine) == 7

    def test_lru_order_follows_hits(self):
        """Pool of 9. X = [1,1,1,1] then Y = [2,2,2,2] hold 8; X again hits 3 and needs
        1 slot (free), touching X's leaf. Z = [3,3,3,3] needs 4 with 1 free: evict(4)
        takes the LRU leaf, Y, inserted after X but used before it."""
        engine = SglangEngine(capacity_tokens=9)
        x, y = engine.units([1, 1, 1, 1]), engine.units([2, 2, 2, 2])
        engine.step(x)
        engine.step(y)
        assert engine.step(x).cached_tokens == 3
        engine.step(engine.units([3, 3, 3, 3]))
        assert engine.lookup(x).cached_tokens == 3
        assert engine.lookup(y).cached_tokens == 0
        assert engine.leaves() == [(1, 1, 1, 1), (3, 3, 3, 3)]

    def test_nodes_locked_by_running_requests_survive(self):
        engine = SglangEngine(capacity_tokens=10)
        a = engine.units([1, 2, 3, 4, 5])
        engine.step(a)
        running = engine.admit(engine.units([1, 2, 3, 4, 5, 6]))  # locks [1..5]
        assert running.lookup.cached_tokens == 5
        other = engine.admit(engine.units([7] * 7))  # 4 free, nothing evictable
        engine.release(other)
        engine.release(running)
        assert engine.lookup(a).cached_tokens == 4

    def test_decode_evicts_only_the_shortfall(self):
        """Pool of 10: leaves [1,1] (oldest), [2,2], [3,3] hold 6. A 2-token request
        fits (4 free); its output brings it to 6 tokens, 5 with KV: 3 more slots with
        2 free. Decode evicts the shortfall, 1 token: leaf [1,1] only (evict(3), as
        at admission, would also have taken [2,2])."""
        engine = SglangEngine(capacity_tokens=10)
        for t in (1, 2, 3):
            engine.step(engine.units([t, t]))
        admission = engine.admit(engine.units([5, 5]))
        engine.release(admission, sequence=engine.units([5, 5, 6, 6, 6, 6]))
        assert engine.lookup(engine.units([1, 1, 0])).cached_tokens == 0
        assert engine.lookup(engine.units([2, 2, 0])).cached_tokens == 2
        assert engine.leaves() == [(2, 2), (3, 3), (5, 5, 6, 6, 6)]


# -- properties -------------------------------------------------------------------------

TRUNK = [7, 3, 3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3,
         8, 3, 2, 7, 9, 5, 0, 2, 8, 8, 4, 1]
prompts = st.lists(
    st.tuples(st.integers(0, len(TRUNK)), st.lists(st.integers(0, 2), max_size=9)).map(
        lambda t: TRUNK[: t[0]] + t[1]).filter(bool),
    min_size=1, max_size=14)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(prompts, st.integers(1, 4), st.integers(0, 60))
def test_bounds_against_the_unlimited_tree(reqs, page, capacity):
    engine = SglangEngine(page_size=page, capacity_tokens=capacity)
    ideal = SglangEngine(page_size=page)
    for i, tokens in enumerate(reqs):
        units = engine.units(tokens)
        assert engine.lookup(units) == engine.lookup(units)
        hit = engine.step(units).cached_tokens
        best = max((lcp(tokens, e) // page for e in reqs[:i]), default=0)
        ideal_cached = ideal.step(units).cached_tokens
        assert ideal_cached == min(best, (len(tokens) - 1) // page) * page
        assert hit <= len(tokens) - 1
        assert hit % page == 0
        assert hit <= ideal_cached
        if all(len(t) + page <= capacity for t in reqs):
            assert len(engine) <= capacity


@settings(max_examples=60, deadline=None)
@given(prompts, st.integers(1, 4))
def test_unlimited_tree_agrees_with_vllm_at_the_same_unit(reqs, page):
    tree, blocks = SglangEngine(page_size=page), get_engine("vllm", block_size=page)
    for tokens in reqs:
        assert tree.step(tree.units(tokens)).cached_tokens == \
            blocks.step(blocks.units(tokens)).cached_tokens


@given(st.lists(st.integers(0, 50), min_size=1, max_size=60))
def test_repeat_with_unlimited_capacity_hits_len_minus_one(tokens):
    engine = SglangEngine()
    engine.step(engine.units(tokens))
    assert engine.step(engine.units(tokens)).cached_tokens == len(tokens) - 1
