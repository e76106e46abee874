"""OpenAI automatic prompt caching: nothing under 1,024 tokens, hits in 128-token steps,
outputs cached, in-memory retention (idle TTL, maximum age) and 24h retention."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from prefixscope.engines.openai import OpenaiEngine


def tokens(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


class TestHits:
    def test_prompts_under_1024_tokens_are_not_cached(self):
        engine = OpenaiEngine()
        prompt = engine.units(tokens(1000))
        engine.step(prompt)
        assert engine.step(prompt).cached_tokens == 0
        assert len(engine) == 0

    def test_a_repeat_hits_in_128_token_steps(self):
        engine = OpenaiEngine()
        prompt = engine.units(tokens(1100))
        assert engine.step(prompt).cached_tokens == 0
        assert engine.step(prompt).cached_tokens == 1024  # (1100 - 1) // 128 = 8 steps

    def test_a_shared_prefix_hits_its_whole_steps(self):
        engine = OpenaiEngine()
        engine.step(engine.units(tokens(1500)))
        # 1300 shared tokens: 10 whole steps = 1280
        assert engine.step(engine.units(tokens(1300) + tokens(200, 10_000))).cached_tokens == 1280

    def test_a_shared_prefix_under_1024_is_no_hit(self):
        engine = OpenaiEngine()
        engine.step(engine.units(tokens(1500)))
        hit = engine.step(engine.units(tokens(1000) + tokens(600, 10_000)))
        assert (hit.cached_tokens, hit.matched_units) == (0, 7)  # 896 shared

    def test_output_tokens_are_cached_but_not_the_last_sampled_one(self):
        prompt, output = tokens(1100), tokens(300, 5000)
        nxt = prompt + output + tokens(100, 9000)
        for cache_output, expected in ((True, 1280), (False, 1024)):
            engine = OpenaiEngine(cache_output=cache_output)
            admission = engine.admit(engine.units(prompt))
            # 1400 tokens, KV for 1399: 10 whole steps
            engine.release(admission, sequence=engine.units(prompt + output))
            assert engine.step(engine.units(nxt)).cached_tokens == expected


class TestRetention:
    def test_in_memory_idle_ttl(self):
        engine = OpenaiEngine()  # idle 600 s
        prompt = engine.units(tokens(2000))
        engine.step(prompt, now=0)
        assert engine.lookup(prompt, now=600).cached_tokens == 1920
        assert engine.lookup(prompt, now=601).cached_tokens == 0

    def test_in_memory_prefix_in_use_has_no_age_limit(self):
        # "5-10 minutes of inactivity, up to 1 hour": the hour bounds an unused prefix's
        # life off-peak, not a prefix read every 500 s (a long Codex session keeps its cache)
        engine = OpenaiEngine()
        prompt = engine.units(tokens(2000))
        engine.step(prompt, now=0)
        for t in range(500, 3 * 3600 + 1, 500):  # used every 500 s for 3 hours
            assert engine.step(prompt, now=t).cached_tokens == 1920
        assert engine.lookup(prompt, now=10_800 + 601).cached_tokens == 0  # then idle

    def test_extended_24h_retention(self):
        engine = OpenaiEngine(retention="24h")
        prompt = engine.units(tokens(2000))
        engine.step(prompt, now=0)
        assert engine.lookup(prompt, now=86_400).cached_tokens == 1920
        assert engine.lookup(prompt, now=86_401).cached_tokens == 0


@given(st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 400)), min_size=1, max_size=8))
def test_hits_are_zero_or_whole_steps_from_1024(requests):
    engine = OpenaiEngine()
    for shared, fresh in requests:
        prompt = tokens(shared) + tokens(fresh, 100_000 + shared)
        if not prompt:
            continue
        hit = engine.step(engine.units(prompt)).cached_tokens
        assert hit == 0 or (hit % 128 == 0 and 1024 <= hit <= len(prompt) - 1)
