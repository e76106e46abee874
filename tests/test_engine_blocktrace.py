"""The block-trace convention (Mooncake): hand-built id chains with exact hits and
exact LRU order. The real traces are in test_engine_mooncake.py."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.engines import Units
from prefixscope.engines.blocktrace import BlocktraceEngine


def req(ids: list[int], n_tokens: int) -> Units:
    return Units.blocks(ids, n_tokens, 512)


class TestHits:
    def test_the_readme_example(self):
        # Two requests sharing their first 12 ids share 12 * 512 = 6144 tokens.
        engine = BlocktraceEngine()
        shared = list(range(46, 58))
        engine.step(req(shared + [2353, 2354], 6955))
        assert engine.step(req(shared + [2366], 6472)).cached_tokens == 6144

    def test_a_seen_partial_last_block_counts_and_no_token_is_given_back(self):
        engine = BlocktraceEngine()
        engine.step(req([1, 2, 3], 1100))  # 512 + 512 + 76
        hit = engine.step(req([1, 2, 3], 1100))
        assert (hit.cached_tokens, hit.matched_units) == (1100, 3)

    def test_stops_at_the_first_unseen_id(self):
        engine = BlocktraceEngine()
        engine.step(req([1, 2, 3], 1536))
        assert engine.step(req([1, 9, 3], 1536)).cached_tokens == 512


class TestEviction:
    def test_lru_with_chain_tails_first(self):
        """3 ids. A = [1 2 3] is stored tail first (3 is evicted first); B = [1 2 4]
        touches 1 and 2 and evicts 3; C = [5] evicts B's tail 4; A again evicts C."""
        engine = BlocktraceEngine(capacity_blocks=3)
        engine.step(req([1, 2, 3], 1536))
        assert engine.contents() == [3, 2, 1]
        assert engine.step(req([1, 2, 4], 1536)).cached_tokens == 1024
        assert engine.contents() == [4, 2, 1]
        assert engine.step(req([5], 512)).cached_tokens == 0
        assert engine.contents() == [2, 1, 5]
        assert engine.step(req([1, 2, 3], 1536)).cached_tokens == 1024
        assert engine.contents() == [3, 2, 1]


def plain_lru(requests, capacity):
    """The rule written id by id: hit = leading ids seen, then touch tail first."""
    lru: OrderedDict[int, None] = OrderedDict()
    out = []
    for ids, n_tokens in requests:
        matched = 0
        for h in ids:
            if h not in lru:
                break
            matched += 1
        out.append((min(matched * 512, n_tokens), matched))
        for h in reversed(ids):
            if h in lru:
                lru.move_to_end(h)
            else:
                lru[h] = None
                if capacity is not None and len(lru) > capacity:
                    lru.popitem(last=False)
        out.append(list(lru))
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 12), max_size=8), max_size=25),
       st.one_of(st.none(), st.integers(0, 10)))
@pytest.mark.slow
def test_equals_an_id_by_id_ordered_dict_lru(id_lists, capacity):
    """Hits and the exact LRU order after every request, duplicates and requests
    larger than the cache included, through `step` and through admit/release."""
    requests = [(ids, 512 * len(ids)) for ids in id_lists]
    for use_step in (True, False):
        engine = BlocktraceEngine(capacity_blocks=capacity)
        got = []
        for ids, n_tokens in requests:
            if use_step:
                hit = engine.step(req(ids, n_tokens))
            else:
                admission = engine.admit(req(ids, n_tokens))
                engine.release(admission)
                hit = admission.lookup
            got += [(hit.cached_tokens, hit.matched_units), engine.contents()]
        assert got == plain_lru(requests, capacity)
