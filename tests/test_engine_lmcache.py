"""LMCache 0.5.6 local CPU cache: hand-built chunk scenarios with exact hits and the
exact LRU order of its OrderedDict (hits touched head-newest, new chunks appended
head to tail), plus properties against a brute-force longest-common-prefix oracle."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.engines.base import block_keys
from prefixscope.engines.lmcache import LmcacheEngine


def names(engine: LmcacheEngine, **requests: list[int]) -> list[str]:
    """The cache's keys, LRU first, as '<request><chunk index>' (a0, a1, b2, ...)."""
    label = {}
    for name, tokens in requests.items():
        for i, key in enumerate(block_keys(tokens, engine.unit).tolist()):
            label.setdefault(key, f"{name}{i}")
    return [label[k] for k in engine.contents()]


class TestChunks:
    def test_the_partial_last_chunk_is_never_stored(self):
        engine = LmcacheEngine(chunk_size=4)
        prompt = engine.units(list(range(10)))  # [0..3] [4..7] + 2 tokens
        assert engine.step(prompt).cached_tokens == 0
        assert len(engine) == 2
        assert engine.step(prompt).cached_tokens == 8

    def test_a_whole_prompt_hit_gives_back_the_last_token(self):
        engine = LmcacheEngine(chunk_size=4)
        prompt = engine.units(list(range(8)))  # exactly 2 chunks
        engine.step(prompt)
        hit = engine.step(prompt)
        assert (hit.cached_tokens, hit.matched_units) == (7, 2)  # need_to_allocate -= 1

    def test_min_retrieve_tokens_skips_small_loads(self):
        engine = LmcacheEngine(chunk_size=4, min_retrieve_tokens=8)
        engine.step(engine.units(list(range(6))))
        hit = engine.step(engine.units(list(range(6))))
        assert (hit.cached_tokens, hit.matched_units) == (0, 1)

    def test_decode_chunks_only_with_save_decode_cache(self):
        prompt, seq = list(range(6)), list(range(11))  # 11 tokens, KV for 10
        for save, expected in ((False, 4), (True, 8)):
            engine = LmcacheEngine(chunk_size=4, save_decode_cache=save)
            admission = engine.admit(engine.units(prompt))
            engine.release(admission, sequence=engine.units(seq))
            assert engine.lookup(engine.units(list(range(12)) + [50])).cached_tokens == expected


class TestEviction:
    def test_lru_order_of_hits_and_stores(self):
        """Chunk 4, 3 chunks. A stores a0 a1 a2 in order (a2 newest). B hits a0 a1,
        touched in reverse (a0 newest), and its new chunk b2 evicts the front, a2.
        C, unrelated, evicts the front again: a1, a chain's middle, so A and B then
        hit one chunk only. A again hits a0 and its a1 a2 evict b2 and c0."""
        a = list(range(12))
        b = list(range(8)) + [100, 101, 102, 103]
        c = [200, 201, 202, 203]
        engine = LmcacheEngine(chunk_size=4, capacity_blocks=3)
        assert engine.step(engine.units(a)).cached_tokens == 0
        assert names(engine, a=a) == ["a0", "a1", "a2"]
        assert engine.step(engine.units(b)).cached_tokens == 8
        assert names(engine, a=a, b=b) == ["a1", "a0", "b2"]
        assert engine.step(engine.units(c)).cached_tokens == 0
        assert names(engine, a=a, b=b, c=c) == ["a0", "b2", "c0"]
        assert engine.lookup(engine.units(a)).cached_tokens == 4
        assert engine.lookup(engine.units(b)).cached_tokens == 4
        assert engine.step(engine.units(a)).cached_tokens == 4
        assert names(engine, a=a) == ["a0", "a1", "a2"]

    def test_a_request_larger_than_the_cache_stores_its_head(self):
        engine = LmcacheEngine(chunk_size=4, capacity_blocks=2)
        prompt = engine.units(list(range(12)))
        engine.step(prompt)  # a2's allocation fails: nothing left to evict
        assert names(engine, a=list(range(12))) == ["a0", "a1"]
        assert engine.lookup(prompt).cached_tokens == 8


# -- properties -------------------------------------------------------------------------

TRUNK = [7, 3, 3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3,
         8, 3, 2, 7, 9, 5, 0, 2, 8, 8, 4, 1]
prompts = st.lists(
    st.tuples(st.integers(0, len(TRUNK)), st.lists(st.integers(0, 2), max_size=9)).map(
        lambda t: TRUNK[: t[0]] + t[1]).filter(bool),
    min_size=1, max_size=14)


def lcp(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(prompts, st.integers(1, 5), st.integers(0, 12))
def test_bounds_against_the_unlimited_cache(reqs, chunk, capacity):
    engine = LmcacheEngine(chunk_size=chunk, capacity_blocks=capacity)
    ideal = LmcacheEngine(chunk_size=chunk)
    for i, tokens in enumerate(reqs):
        units = engine.units(tokens)
        hit = engine.step(units).cached_tokens
        chunks = max((lcp(tokens, e) // chunk for e in reqs[:i]), default=0)
        reusable = chunks * chunk
        ideal_cached = ideal.step(units).cached_tokens
        assert ideal_cached == (reusable - 1 if reusable and reusable == len(tokens)
                                else reusable)
        assert hit <= len(tokens) - 1
        assert hit % chunk == 0 or (hit == len(tokens) - 1 and len(tokens) % chunk == 0)
        assert hit <= ideal_cached
        assert len(engine) <= capacity


@given(st.lists(st.integers(0, 50), min_size=1, max_size=60), st.integers(1, 8))
def test_repeat_with_unlimited_capacity_hits_every_full_chunk(tokens, chunk):
    engine = LmcacheEngine(chunk_size=chunk)
    engine.step(engine.units(tokens))
    full = len(tokens) // chunk * chunk
    expected = full - 1 if full == len(tokens) else full
    assert engine.step(engine.units(tokens)).cached_tokens == expected
