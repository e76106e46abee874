"""OpenAI automatic prompt caching: nothing under 1,024 tokens, hits in 128-token steps,
outputs cached, in-memory retention (idle TTL, maximum age) and 24h retention."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from prefixscope.engines.base import Units
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


def _row_of(engine: OpenaiEngine, key: int) -> int:
    return int(engine._rows(np.array([key], dtype=np.uint64))[0])


class _Reference:
    """The engine's rules one key at a time over a dict (key -> (last used, written)), as
    the engine was written before its rows became arrays: the oracle of the array form."""

    def __init__(self, engine: OpenaiEngine) -> None:
        self.e = engine
        self.entries: dict[int, tuple[float, float]] = {}

    def alive(self, key: int, now: float | None) -> bool:
        entry = self.entries.get(key)
        if entry is None:
            return False
        return now is None or (now - entry[0] <= self.e.idle_ttl and (
            self.e.max_age is None or now - entry[1] <= self.e.max_age))

    def admit(self, keys: list[int], n_tokens: int, now: float | None) -> tuple[int, int]:
        matched = 0
        for key in keys:
            if not self.alive(key, now):
                break
            matched += 1
        cached = min(matched, max(n_tokens - 1, 0) // self.e.unit) * self.e.unit
        cached = cached if cached >= self.e.min_tokens else 0
        if now is not None:
            for key in keys[: cached // self.e.unit]:
                self.entries[key] = (now, self.entries[key][1])
        return cached, matched

    def release(self, keys: list[int], n_tokens: int, now: float | None) -> None:
        if n_tokens < self.e.min_tokens:
            return
        t = 0.0 if now is None else now
        for key in keys:
            old = self.entries.get(key)
            self.entries[key] = (t, old[1] if old is not None and self.alive(key, now) else t)


def _step_both(engine: OpenaiEngine, ref: _Reference, prompt: Units, keys: list[int], n: int,
               sequence: Units | None, when: float | None, prefix: object) -> None:
    """`engine.step` of the prompt (with its output `sequence`, when given) and the
    reference's admit and release of the same keys: the hit equals the reference's."""
    hit = engine.step(prompt, sequence=sequence, now=when,
                      prefix=prefix)  # type: ignore[arg-type]
    assert (hit.cached_tokens, hit.matched_units) == ref.admit(keys, n, when)
    if sequence is not None and sequence.n_tokens > prompt.n_tokens:
        ref.release(sequence.keys[: (sequence.n_tokens - 1) // 4].tolist(), n, when)
    else:
        ref.release(keys, n, when)


_session = st.integers(0, 3)
_op = st.tuples(st.sampled_from(["step", "admit", "release"]), _session,
                st.integers(0, 120), st.integers(0, 30), st.integers(-20, 50),
                st.sampled_from(["own", "other", "none"]))


@given(ops=st.lists(_op, max_size=40), idle=st.sampled_from([0.0, 5.0, 20.0, 600.0, -1.0]),
       age=st.sampled_from([None, 10.0, 40.0]), clock=st.booleans(),
       output=st.booleans(), repeat_key=st.booleans())
def test_the_array_rows_decide_as_the_dict_one_key_at_a_time(ops, idle, age, clock, output,
                                                             repeat_key):
    """Sessions growing and shrinking their prompts (4-token steps), steps and concurrent
    admissions released later, with and without a clock (which may step back, as a log's
    times out of order do), an age limit and outputs: every
    lookup and the entries left equal the reference's, key by key. A step names as its
    `prefix` its session's last prompt (its rows reused), another session's (a wrong
    hint: keys differ, so it must be looked up), or none; `repeat_key`: a prompt whose
    chain repeats a key (the collision case; with a negative idle TTL, one key at a time)."""
    engine = OpenaiEngine(step=4, min_tokens=8, idle_ttl=idle, max_age=age,
                          cache_output=output)
    ref = _Reference(engine)
    running: list[tuple[object, list[int], int]] = []
    last: dict[int, object] = {}  # session -> its last prompt's units
    now = 0.0
    for kind, session, length, out, dt, hint in ops:
        now += dt
        when = now if clock else None
        if kind == "release":
            if running:
                admission, keys, n = running.pop(session % len(running))
                engine.release(admission, now=when)  # type: ignore[arg-type]
                ref.release(keys, n, when)
            continue
        ids = tokens(length, 1000 * session)
        prompt = engine.units(ids)
        keys = prompt.full_keys()
        if repeat_key and len(keys) > 2:
            keys = [*keys[:-1], keys[0]]
            prompt = type(prompt)(np.array(keys, dtype=np.uint64), prompt.n_tokens, 4)
        if kind == "admit":
            admission = engine.admit(prompt, now=when)
            assert (admission.lookup.cached_tokens, admission.lookup.matched_units) == \
                ref.admit(keys, len(ids), when)
            running.append((admission, keys, len(ids)))
            continue
        named = last.get(session if hint == "own" else session + 1) if hint != "none" else None
        prefix = (named, 1 + length // 4) if named is not None else None
        sequence = engine.units(ids + tokens(out, 50_000)) if output and not repeat_key \
            else None
        _step_both(engine, ref, prompt, keys, len(ids), sequence, when, prefix)
        last[session] = prompt
    assert len(engine) == len(ref.entries)
    for key, (used, written) in ref.entries.items():
        row = _row_of(engine, key)
        assert (engine._last[row], engine._written[row]) == (used, written)


def test_a_key_listed_twice_under_a_negative_idle_ttl_is_done_one_copy_at_a_time():
    """idle_ttl -1 and the clock stepping back, a prompt too short to hit (so its admission
    uses no key): the first copy of a cached key finds it alive (used at 10, now 5) and
    keeps its written time, the second finds that update dead (used at 5, now 5) and
    writes it anew -- the reference's order, not both copies read from the state before
    them (which would keep written 10)."""
    engine = OpenaiEngine(step=4, min_tokens=16, idle_ttl=-1.0)
    ref = _Reference(engine)
    first = engine.units(tokens(16))
    engine.step(first, now=10.0)
    ref.release(first.full_keys(), 16, 10.0)
    keys = first.full_keys()
    twice = [*keys[:3], keys[0]]
    engine.step(type(first)(np.array(twice, dtype=np.uint64), 16, 4), now=5.0)
    assert ref.admit(twice, 16, 5.0) == (0, 4)
    ref.release(twice, 16, 5.0)
    row = _row_of(engine, keys[0])
    assert (engine._last[row], engine._written[row]) == ref.entries[keys[0]] == (5.0, 5.0)


class _Forgetful(OpenaiEngine):
    """The engine with its index merged and its entries looked at every few keys, so that
    small scenarios cross both."""

    _MERGE_FROM = 3
    _EXPIRE_FROM = 2


class TestForgetting:
    def test_a_prefix_idle_past_its_ttl_at_the_horizon_is_forgotten_and_missed_as_before(self):
        engine = _Forgetful()  # idle 600 s
        old, new = engine.units(tokens(2000)), engine.units(tokens(1500, 50_000))
        engine.step(old, now=0)
        engine.expire(601)  # every later request at 601 or after: old is dead for all
        engine.step(new, now=601)
        assert len(engine) == 11  # new's 11 keys; old's 15 forgotten
        assert engine.lookup(old, now=601).cached_tokens == 0
        assert engine.lookup(new, now=601).cached_tokens == 1408  # (1500 - 1) // 128 steps

    def test_a_time_that_goes_back_keeps_what_it_can_find(self):
        engine, keeper = _Forgetful(), OpenaiEngine()
        old, new = engine.units(tokens(2000)), engine.units(tokens(1500, 50_000))
        for e in (engine, keeper):
            e.step(old, now=0)
        engine.expire(500)  # the requests to come: at 1000, then back at 500
        for e in (engine, keeper):
            e.step(new, now=1000)
        assert len(engine) == len(keeper) == 26  # old used at 0 is alive at 500
        assert engine.step(old, now=500).cached_tokens == keeper.step(old, now=500) \
            .cached_tokens == 1920

    def test_the_rows_a_prompt_lends_its_successor_follow_the_renumbering(self):
        engine = _Forgetful(step=4, min_tokens=8, idle_ttl=10.0)
        gone, kept = engine.units(tokens(40, 9000)), engine.units(tokens(40))
        engine.step(gone, now=0)
        engine.step(kept, now=20)
        engine.expire(25)  # gone (used at 0) is dead, kept is alive: its rows move down
        longer = engine.units(tokens(60))
        hit = engine.step(longer, now=25, prefix=(kept, 10))
        assert (hit.cached_tokens, hit.matched_units) == (40, 10)  # kept's 10 blocks
        assert len(engine) == 15  # longer's 15 keys, 10 of them kept's

    def test_a_prompt_whose_rows_were_forgotten_lends_none_to_its_successor(self):
        # A's keys are forgotten at 20; B, the same tokens, caches them again under new
        # rows; C extends A and names A as its prefix: the rows A held are gone, so C must
        # look its keys up (finding B's), not read A's stale rows. By hand: B's 10 blocks
        # written at 20 are alive at 25 (idle 10), C's hit is min(10, (60 - 1) // 4) * 4.
        engine = _Forgetful(step=4, min_tokens=8, idle_ttl=10.0)
        first = engine.units(tokens(40))
        engine.step(first, now=0)
        engine.expire(20)
        again = engine.units(tokens(40))
        assert engine.step(again, now=20).cached_tokens == 0  # A's entries dead, forgotten
        longer = engine.units(tokens(60))
        hit = engine.step(longer, now=25, prefix=(first, 10))
        assert (hit.cached_tokens, hit.matched_units) == (40, 10)


_time = st.one_of(st.none(), st.just(float("nan")), st.sampled_from([0.0, 5.0, 30.0]),
                  st.floats(-50, 200, allow_nan=False))


@given(steps=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 120), st.integers(0, 30),
                                _time, st.booleans()), max_size=40),
       idle=st.sampled_from([0.0, 5.0, 20.0, 600.0, -1.0]),
       age=st.sampled_from([None, 10.0, 40.0]), output=st.booleans(),
       eager=st.booleans())
def test_forgetting_at_the_horizon_answers_as_the_engine_that_keeps_everything(
        steps, idle, age, output, eager):
    """Sessions' steps at times in any order (equal, going back, None, NaN), each after
    `expire` at the least time still to come (None anywhere later: not called); `eager`:
    every entry looked at before each step (`_forget`), else when due (tiny thresholds).
    Every hit equals the dict reference's, which never drops, and every entry left is
    the reference's, key by key."""
    engine = _Forgetful(step=4, min_tokens=8, idle_ttl=idle, max_age=age,
                        cache_output=output)
    ref = _Reference(engine)
    last: dict[int, object] = {}  # session -> its last prompt's units
    for i, (session, length, out, when, hint) in enumerate(steps):
        later = [t for _, _, _, t, _ in steps[i:]]
        if None not in later:
            horizon = min((t for t in later if t == t), default=float("inf"))
            (engine._forget if eager else engine.expire)(horizon)
        ids = tokens(length, 1000 * session)
        prompt = engine.units(ids)
        keys = prompt.full_keys()
        named = last.get(session) if hint else None
        prefix = (named, 1 + length // 4) if named is not None else None
        sequence = engine.units(ids + tokens(out, 50_000)) if output else None
        _step_both(engine, ref, prompt, keys, len(ids), sequence, when, prefix)
        last[session] = prompt
    held = 0
    for key, (used, written) in ref.entries.items():
        row = _row_of(engine, key)
        if row >= 0:
            held += 1
            assert np.array_equal([engine._last[row], engine._written[row]], [used, written],
                                  equal_nan=True)
    assert held == len(engine)
