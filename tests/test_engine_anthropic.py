"""Anthropic prompt caching: breakpoints, the 20-block lookback, TTL refreshed on read,
the per-model minimum, and the observed "previous input minus 2" of an automatic
breakpoint. Requests are hand-built content blocks with token ends."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prefixscope.engines import Units
from prefixscope.engines.anthropic import TTL_1H, TTL_5M, AnthropicEngine, min_cacheable


def blocks(names: list[str], sizes: list[int], *, tail: int = 0,
           breakpoints: dict[int, float] | None = None) -> Units:
    """Content blocks `names` of `sizes` tokens, `tail` template tokens after them."""
    ends, total = [], 0
    for size in sizes:
        total += size
        ends.append(total)
    return Units.segments(names, ends, n_tokens=total + tail, breakpoints=breakpoints)


class TestBreakpoints:
    def test_nothing_is_cached_without_a_breakpoint(self):
        engine = AnthropicEngine(min_tokens=1)
        prompt = blocks(["tools", "system", "user"], [100, 300, 50])
        engine.step(prompt)
        assert engine.step(prompt).cached_tokens == 0
        assert len(engine) == 0

    def test_a_breakpoint_writes_then_reads_its_prefix(self):
        engine = AnthropicEngine(min_tokens=1)
        first = engine.step(blocks(["tools", "system", "u1"], [100, 300, 50],
                                   breakpoints={1: TTL_5M}))
        assert (first.cached_tokens, first.written_tokens) == (0, 400)
        second = engine.step(blocks(["tools", "system", "u2"], [100, 300, 70],
                                    breakpoints={1: TTL_5M}))
        assert (second.cached_tokens, second.written_tokens) == (400, 0)

    def test_a_change_before_the_breakpoint_misses(self):
        engine = AnthropicEngine(min_tokens=1)
        engine.step(blocks(["tools", "system", "u"], [100, 300, 50], breakpoints={1: TTL_5M}))
        changed = engine.step(blocks(["TOOLS", "system", "u"], [100, 300, 50],
                                     breakpoints={1: TTL_5M}))
        assert (changed.cached_tokens, changed.written_tokens) == (0, 400)

    def test_prefixes_under_the_model_minimum_are_not_cached(self):
        engine = AnthropicEngine(model="claude-sonnet-4-5-20250929")  # 1024
        prompt = blocks(["system", "u"], [1000, 50], breakpoints={0: TTL_5M})
        assert engine.step(prompt).written_tokens == 0
        assert engine.step(prompt).cached_tokens == 0
        long = blocks(["system", "u"], [1024, 50], breakpoints={0: TTL_5M})
        assert engine.step(long).written_tokens == 1024
        assert engine.step(long).cached_tokens == 1024

    def test_the_longest_entry_wins_and_the_write_runs_to_the_last_breakpoint(self):
        engine = AnthropicEngine(min_tokens=1)
        engine.step(blocks(["t", "s", "m1"], [100, 200, 300], breakpoints={1: TTL_1H}))
        hit = engine.step(blocks(["t", "s", "m1", "m2"], [100, 200, 300, 40],
                                 breakpoints={1: TTL_1H, 3: TTL_5M}))
        # entry at block 1 (300 tokens) read; blocks 2..3 written (340 more)
        assert (hit.cached_tokens, hit.written_tokens) == (300, 340)


class TestAutomatic:
    def test_a_warm_turn_reads_the_previous_input_minus_two(self):
        """TraceLab's Claude Code sample: cache_read(next) = input_total(prev) - 2.
        The automatic breakpoint sits on the last block; 2 template tokens follow."""
        engine = AnthropicEngine(min_tokens=1, automatic=True)
        names, sizes = ["tools", "system", "u0"], [5000, 3000, 40]
        previous = None
        for turn in range(1, 6):
            prompt = blocks(names, sizes, tail=2)
            hit = engine.step(prompt)
            if previous is not None:
                assert hit.cached_tokens == previous - 2
            previous = prompt.n_tokens
            names += [f"a{turn}", f"r{turn}"]
            sizes += [300, 1200]

    def test_lookback_reaches_20_blocks_including_the_breakpoint(self):
        for appended, expected in ((19, 500), (20, 0)):
            engine = AnthropicEngine(min_tokens=1, automatic=True)
            first = [f"b{i}" for i in range(5)]  # entry on block 4: 500 tokens
            engine.step(blocks(first, [100] * 5))
            grown = first + [f"n{i}" for i in range(appended)]
            # breakpoint on block 4 + appended; window = that block and the 19 before
            assert engine.step(blocks(grown, [100] * len(grown))).cached_tokens == expected


class TestTtl:
    def test_reads_refresh_the_five_minute_ttl(self):
        engine = AnthropicEngine(min_tokens=1)
        prompt = blocks(["s", "u"], [400, 10], breakpoints={0: TTL_5M})
        engine.step(prompt, now=0)
        assert engine.step(prompt, now=250).cached_tokens == 400  # expires 550 now
        assert engine.step(prompt, now=540).cached_tokens == 400  # (300 without refresh)
        assert engine.step(prompt, now=841).cached_tokens == 0  # 540 + 300 < 841

    def test_one_hour_entries(self):
        engine = AnthropicEngine(min_tokens=1)
        engine.step(blocks(["s", "u"], [400, 10], breakpoints={0: TTL_1H}), now=0)
        later = blocks(["s", "v"], [400, 10], breakpoints={0: TTL_1H})
        assert engine.lookup(later, now=3600).cached_tokens == 400
        assert engine.lookup(later, now=3601).cached_tokens == 0


@pytest.mark.parametrize(("model", "tokens"), [
    ("claude-opus-4-6", 4096),
    ("claude-opus-4-5-20251101", 4096),
    ("claude-haiku-4-5", 4096),
    ("claude-sonnet-4-6", 1024),
    ("claude-sonnet-4-5-20250929", 1024),
    ("claude-opus-4-1-20250805", 1024),
    ("claude-opus-4-20250514", 1024),
    ("claude-sonnet-4-20250514", 1024),
    ("claude-3-7-sonnet-20250219", 1024),
    ("claude-3-5-haiku-20241022", 2048),
    ("claude-3-haiku-20240307", 2048),
    ("some-other-model", 1024),
    (None, 1024),
])
def test_minimum_cacheable_length_by_model(model, tokens):
    assert min_cacheable(model) == tokens


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(1, 300)), min_size=1,
                max_size=30), st.integers(0, 5))
def test_a_hit_ends_on_a_block_boundary_within_the_prompt(parts, tail):
    engine = AnthropicEngine(min_tokens=1, automatic=True)
    names = [p[0] for p in parts]
    sizes = [p[1] for p in parts]
    for cut in range(1, len(parts) + 1):
        prompt = blocks(names[:cut], sizes[:cut], tail=tail)
        hit = engine.step(prompt)
        assert hit.cached_tokens in {0, *(prompt.end(i) for i in range(cut))}
        assert hit.cached_tokens + (hit.written_tokens or 0) == prompt.end(cut - 1)
