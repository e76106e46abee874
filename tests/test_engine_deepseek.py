"""DeepSeek prefix units: the documented examples (A+B then A+B+C hits A+B; A+B then
A+C misses but persists A, so A+D hits A), output-end units, fixed intervals, TTL."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from prefixscope.engines.deepseek import DeepseekEngine

A = list(range(100, 140))  # 40 tokens
B = list(range(200, 230))  # 30
C = list(range(300, 320))  # 20
D = list(range(400, 410))  # 10


class TestDocumentedExamples:
    def test_a_later_request_hits_a_whole_earlier_input(self):
        engine = DeepseekEngine()
        engine.step(engine.units(A + B))
        assert engine.step(engine.units(A + B + C)).cached_tokens == 70

    def test_a_common_prefix_is_persisted_after_the_miss(self):
        engine = DeepseekEngine()
        engine.step(engine.units(A + B))
        miss = engine.step(engine.units(A + C))
        assert (miss.cached_tokens, miss.matched_units) == (0, 0)  # A+B is not a prefix
        assert engine.step(engine.units(A + D)).cached_tokens == 40

    def test_partial_overlap_is_not_a_hit(self):
        engine = DeepseekEngine()
        engine.step(engine.units(A + B))
        assert engine.step(engine.units(A + B[:10] + C)).cached_tokens == 0


class TestUnits:
    def test_the_end_of_the_output_is_a_unit(self):
        engine = DeepseekEngine()
        admission = engine.admit(engine.units(A))
        engine.release(admission, sequence=engine.units(A + B))  # B answered
        assert engine.step(engine.units(A + B + C)).cached_tokens == 70

        engine = DeepseekEngine()
        engine.step(engine.units(A))  # no output given: only A's end
        assert engine.step(engine.units(A + B + C)).cached_tokens == 40

    def test_the_whole_prompt_is_not_served_by_its_own_unit(self):
        engine = DeepseekEngine()
        engine.step(engine.units(A + B))
        hit = engine.step(engine.units(A + B))
        assert (hit.cached_tokens, hit.matched_units) == (0, 70)
        engine = DeepseekEngine(last_token=False)
        engine.step(engine.units(A + B))
        assert engine.step(engine.units(A + B)).cached_tokens == 70

    def test_fixed_intervals(self):
        engine = DeepseekEngine(interval=16)
        engine.step(engine.units(A + B))  # units at 16, 32, 48, 64 and 70
        assert engine.step(engine.units(A + B[:20] + C)).cached_tokens == 48

    def test_ttl_counts_from_the_last_use(self):
        engine = DeepseekEngine(ttl=100)
        engine.step(engine.units(A + B), now=0)
        assert engine.step(engine.units(A + B + C), now=90).cached_tokens == 70
        assert engine.lookup(engine.units(A + B + D), now=180).cached_tokens == 70
        assert engine.lookup(engine.units(A + B + D), now=191).cached_tokens == 0


def lcp(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@given(st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=12), min_size=1,
                max_size=10))
def test_a_hit_is_a_whole_earlier_prompt_or_a_shared_prefix(prompts):
    engine = DeepseekEngine()
    for i, prompt in enumerate(prompts):
        hit = engine.step(engine.units(prompt)).cached_tokens
        assert hit <= len(prompt) - 1
        earlier = prompts[:i]
        if hit:
            # a unit: an earlier prompt's length, or a prefix two earlier requests shared
            ends = {len(e) for e in earlier} | {
                lcp(x, y) for j, x in enumerate(prompts[: i + 1]) for y in prompts[:j]}
            assert hit in ends
            assert any(lcp(prompt, e) >= hit for e in earlier)
