"""The block-trace convention (Mooncake): hand-built id chains with exact hits and
exact LRU order. The real traces are in test_engine_mooncake.py."""

from __future__ import annotations

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
