"""simulate's compact prepared prompts: each request keeps only the token ids after the
prefix it shares with its session predecessor, and the replay rebuilds the whole prompt
and reuses the predecessor's block keys. Oracles: the tokenizer's own ids for the same
requests (`tokens_many`), a plain Python scan for the shared prefix, `block_keys` over the
whole sequence, and the replay of the same requests given whole."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import REAL, ROOT
from gen_vllm_log import generate
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.analyses.simulate import (
    SimulateOptions,
    _compact,
    _Expander,
    _Prepared,
    _replay,
    _sweep,
    fit_parameters,
    prepare,
    replay_prepared,
    replay_report,
)
from prefixscope.engines import ENGINES, Units, block_keys, get_engine
from prefixscope.engines.base import run_contents
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths
from prefixscope.tokens import tokens_many

SWE_REPLAY = ("swe-agent/replay__marshmallow-code__marshmallow-1867__function_calling_replace"
              "_from_source__marshmallow-code__marshmallow-1867.traj")
OPENHANDS = "openhands/tests__unit__resolver__mock_output__output.jsonl"


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _pair() -> st.SearchStrategy[tuple[list[int], list[int]]]:
    """Two token sequences that share a leading run (possibly empty)."""
    tokens = st.lists(st.integers(0, 3), max_size=60)
    return st.tuples(tokens, tokens, tokens).map(lambda t: (t[0] + t[1], t[0] + t[2]))


class TestIncrementalKeys:
    @settings(max_examples=200, deadline=None)
    @given(_pair(), st.integers(1, 9), st.sampled_from([None, "lora-a"]))
    def test_keys_from_a_shared_prefix_equal_keys_over_the_whole_sequence(self, pair, size,
                                                                         namespace):
        a, b = pair
        shared = _common(a, b)
        known = block_keys(a, size, namespace=namespace)[: shared // size]
        got = block_keys(b, size, namespace=namespace, prefix_keys=known)
        assert got.tolist() == block_keys(b, size, namespace=namespace).tolist()

    @settings(max_examples=100, deadline=None)
    @given(_pair(), st.sampled_from([("vllm", {}), ("vllm", {"block_size": 4}),
                                     ("sglang", {}), ("sglang", {"page_size": 4}),
                                     ("lmcache", {"chunk_size": 8}), ("openai", {}),
                                     ("deepseek", {}), ("anthropic", {})]))
    def test_every_engine_cuts_an_extended_prompt_as_its_units(self, pair, engine_params):
        name, params = engine_params
        engine = get_engine(name, **params)
        a, b = pair
        got = engine.units_extending(b, engine.units(a), _common(a, b))
        want = engine.units(b)
        assert (got.keys.tolist(), got.n_tokens, got.unit, got.chained) == (
            want.keys.tolist(), want.n_tokens, want.unit, want.chained)
        assert (None if got.ends is None else got.ends.tolist()) == (
            None if want.ends is None else want.ends.tolist())

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.integers(0, 3), max_size=80), st.data(), st.integers(1, 6),
           st.sampled_from([None, "lora-a"]), st.sampled_from([None, "lora-b"]))
    def test_keys_with_a_runs_contents_read_off_the_base_equal_keys_over_the_whole(
            self, base, data, size, namespace, base_namespace):
        """A sequence made of a new start, a run of the base's tokens (at any shift, whole
        blocks or not) and a new end: its keys given the run's block contents read off the
        base's keys (`run_contents`) are `block_keys` of the whole sequence hashed."""
        tokens = st.lists(st.integers(0, 3), max_size=20)
        start = data.draw(st.integers(0, len(base)))
        length = data.draw(st.integers(0, len(base) - start))
        head, tail = data.draw(tokens), data.draw(tokens)
        whole = head + base[start: start + length] + tail
        base_units = Units.chain(base, size, namespace=base_namespace)
        contents = run_contents(base_units, size, (len(head), start, length))
        got = block_keys(whole, size, namespace=namespace, contents=contents)
        assert got.tolist() == block_keys(whole, size, namespace=namespace).tolist()
        blocks_in_run = [i for i in range(len(whole) // size)
                         if len(head) <= i * size and (i + 1) * size <= len(head) + length
                         and 1 <= i + (start - len(head)) // size]
        if (start - len(head)) % size == 0 and blocks_in_run:  # read off, not hashed
            assert contents is not None
            assert contents[0] == blocks_in_run[0]
            assert len(contents[1]) == len(blocks_in_run)

    def test_every_registered_engine_is_covered(self):
        assert set(ENGINES) - {"blocktrace"} == {
            "vllm", "sglang", "lmcache", "openai", "deepseek", "anthropic"}


class TestCompaction:
    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.integers(0, 5), max_size=80), st.lists(st.integers(0, 5), max_size=12),
           st.lists(st.integers(0, 5), max_size=12), st.lists(st.integers(0, 5), max_size=300),
           st.lists(st.integers(0, 5), max_size=40), st.sampled_from([np.uint32, np.int64]))
    def test_a_prompt_is_rebuilt_from_its_base_and_its_own_ids(self, head, old, new, body,
                                                               tail, dtype):
        """A base and a prompt that share a head, differ in a short part (a volatile
        header), then share a body and the prompt goes on."""
        base = np.array(head + old + body, dtype=dtype)
        ids = np.array(head + new + body + tail, dtype=dtype)
        shared, resumed, own = _compact(base, ids)
        a = _Prepared("a", "s", None, False, None, None, base, None, None, 0, 0)
        b = _Prepared("b", "s", "a", False, None, None, own, None, None, 0, 0, base="a",
                      shared=shared, resumed=resumed)
        expander = _Expander([a, b], get_engine("vllm"))
        expander.full_ids(a)
        assert expander.full_ids(b)[0].tolist() == ids.tolist()
        assert b.n_tokens == len(ids)
        assert shared == _common(base.tolist(), ids.tolist())
        if len(body) >= 2 * 64 + 16 and len(old) == len(new) and old != new:
            # the body is found again (a probe lands in it), at most the differing part
            # and the tail are the prompt's own
            assert resumed is not None
            assert len(own) <= len(new) + len(tail)

    def test_a_turn_that_appends_keeps_its_new_tokens_whole(self):
        """No run is looked for in the base when the prompt extends all of it, even where
        the new tokens repeat some of it (a tool result read twice)."""
        base = np.arange(300, dtype=np.int64)
        ids = np.concatenate((base, base[100:250], [7, 7]))
        shared, resumed, own = _compact(base, ids)
        assert (shared, resumed) == (300, None)
        assert own.tolist() == list(range(100, 250)) + [7, 7]


@st.composite
def _sessions(draw: st.DrawFn) -> tuple[list[_Prepared], list[np.ndarray]]:
    """Compact entries in log order and the whole prompt each one stands for, built
    independently: a prompt is a new one, or its base's first `shared` tokens, new ones,
    maybe a run of the base found again (at its own place or elsewhere), more new ones --
    an agent's appending turn, a cut history, a volatile header; bases extended once or
    several times (a branch), own ids sometimes of another dtype than the base's."""
    tokens = st.lists(st.integers(0, 9), max_size=30)
    entries: list[_Prepared] = []
    wholes: list[np.ndarray] = []
    for i in range(draw(st.integers(1, 14))):
        parent = draw(st.none() | st.integers(0, i - 1)) if i else None
        dtype = draw(st.sampled_from([np.uint32, np.int64]))
        if parent is None:
            whole = np.array(draw(tokens), dtype=dtype)
            entries.append(_Prepared(f"r{i}", "s", None, False, None, None, whole, None,
                                     None, 0, 0))
            wholes.append(whole)
            continue
        base = wholes[parent]
        appends = draw(st.booleans())
        shared = len(base) if appends else draw(st.integers(0, len(base)))
        first = np.array(draw(tokens), dtype=dtype)
        resumed = None
        if not appends and draw(st.booleans()):
            start = draw(st.integers(0, len(base)))
            length = draw(st.integers(0, len(base) - start))
            if draw(st.booleans()) and shared <= start:  # at its own place
                first = np.array(draw(st.lists(st.integers(0, 9), min_size=start - shared,
                                               max_size=start - shared)), dtype=dtype)
            resumed = (shared + len(first), start, length)
        rest = np.array(draw(tokens), dtype=dtype)
        run = base[resumed[1]: resumed[1] + resumed[2]] if resumed else base[:0]
        whole = np.concatenate((base[:shared], first, run, rest))
        entries.append(_Prepared(f"r{i}", "s", f"r{parent}", False, None, None,
                                 np.concatenate((first, rest)), None, None, 0, 0,
                                 base=f"r{parent}", shared=shared, resumed=resumed))
        wholes.append(whole)
    return entries, wholes


class TestHeldPrompts:
    @settings(max_examples=300, deadline=None)
    @given(_sessions())
    def test_every_prompt_is_rebuilt_whole_and_no_array_handed_out_changes(self, made):
        """`_Expander.full_ids` writes an appending turn's ids after its base's in one
        buffer: each array it returns is the prompt, with the dtype `whole_ids`'
        concatenation gives it, still at the end (no later write reached it), and the
        entries' own ids are left as they are."""
        entries, wholes = made
        own = [np.asarray(p.ids).copy() for p in entries]
        expander = _Expander(entries, get_engine("vllm"))
        got = [expander.full_ids(p)[0] for p in entries]
        slow: dict[str, np.ndarray] = {}  # the concatenation, prompt by prompt
        for p in entries:
            slow[p.id] = p.whole_ids(slow[p.base] if p.base is not None else None)
        for p, ids, whole in zip(entries, got, wholes, strict=True):
            assert ids.tolist() == whole.tolist()
            assert ids.dtype == slow[p.id].dtype
        assert all(np.asarray(p.ids).tolist() == mine.tolist()
                   for p, mine in zip(entries, own, strict=True))
        assert expander._held == {}

    def test_a_session_of_appending_turns_shares_one_buffer(self):
        """Three turns, each appending to the last: the second and third write into the
        first's buffer (room for them), and the first's ids are still its own."""
        a = _Prepared("a", "s", None, False, None, None, np.arange(5, dtype=np.uint32),
                      None, None, 0, 0)
        b = _Prepared("b", "s", "a", False, None, None, np.array([7, 8], dtype=np.uint32),
                      None, None, 0, 0, base="a", shared=5)
        c = _Prepared("c", "s", "b", False, None, None, np.array([9], dtype=np.uint32),
                      None, None, 0, 0, base="b", shared=7)
        expander = _Expander([a, b, c], get_engine("vllm"))
        ids = [expander.full_ids(p)[0] for p in (a, b, c)]
        assert [x.tolist() for x in ids] == [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 7, 8],
                                             [0, 1, 2, 3, 4, 7, 8, 9]]
        assert np.shares_memory(ids[0], ids[2]) and not np.shares_memory(ids[0], a.ids)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    real = REAL
    assert real.is_dir(), f"real data missing at {real}"
    path = tmp_path_factory.mktemp("compact") / "s.duckdb"
    st_ = Store.open(path)
    ingest_paths([str(real / SWE_REPLAY), str(real / OPENHANDS)], st_)
    return st_


@pytest.mark.real
class TestCompactPrompts:
    def test_rebuilt_prompts_are_the_tokenizers_ids_and_the_shared_prefix_is_exact(self, store):
        options = SimulateOptions()
        prepared, skipped = prepare(store, options)
        assert skipped == {}
        requests = list(store.iter_requests())
        want = {r.id: t.ids.tolist() for r, t in
                zip(requests, tokens_many(requests, options.render), strict=True)}
        assert [p.id for p in prepared] == [r.id for r in requests]
        expander = _Expander(prepared, get_engine("vllm"))
        whole: dict[str, list[int]] = {}
        for p in prepared:
            ids = expander.full_ids(p)[0].tolist()
            assert ids == want[p.id]
            whole[p.id] = ids
            if p.base is not None:
                assert p.base == p.prev
                assert p.shared == _common(whole[p.base], ids)
        extended = [p for p in prepared if p.base is not None]
        # 12 SWE-agent pairs and 3 + 21 OpenHands pairs, every one extends its predecessor
        assert len(extended) == 36
        # the SWE-agent replay elides old observations from call 6 on: a shorter shared run
        assert any(p.shared < len(whole[p.base]) for p in extended)
        # ... and some of it is found again after the elided part
        assert any(p.resumed is not None for p in extended)
        for p in extended:
            if p.resumed is not None:
                at, start, length = p.resumed
                assert whole[p.id][at: at + length] == whole[p.base][start: start + length]
        held = sum(len(p.ids) for p in prepared if p.ids is not None)
        assert held == sum(len(ids) for ids in whole.values()) - sum(
            p.shared + (p.resumed[2] if p.resumed else 0) for p in extended)

    def test_a_replay_holds_only_prompts_a_later_request_still_extends(self, store):
        prepared, _ = prepare(store, SimulateOptions())
        later = {p.base for p in prepared if p.base is not None}
        expander = _Expander(prepared, get_engine("vllm"))
        for i, p in enumerate(prepared):
            expander.units(p, False)
            pending = {q.base for q in prepared[i + 1:] if q.base is not None}
            assert set(expander._held) == {q.id for q in prepared[: i + 1]
                                           if q.id in later and q.id in pending}
        assert expander._held == {}

    @pytest.mark.parametrize("options", [
        SimulateOptions(), SimulateOptions(unit=4, capacity_tokens=6000),
        SimulateOptions(engine="sglang", capacity_tokens=20000),
        SimulateOptions(engine="lmcache", unit=64), SimulateOptions(engine="deepseek"),
        SimulateOptions(engine="openai"),
        SimulateOptions(capacity_tokens=9000, cache_output=True),
    ], ids=["vllm", "vllm-4-capacity", "sglang", "lmcache", "deepseek", "openai",
            "cache-output"])
    def test_a_compact_log_replays_as_the_same_prompts_given_whole(self, store, options):
        prepared, skipped = prepare(store, options)
        expander = _Expander(prepared, get_engine("vllm"))
        whole = []
        for p in prepared:
            ids = expander.full_ids(p)[0]
            whole.append(replace(p, ids=ids, base=None, shared=0, resumed=None))
        assert replay_report(prepared, options, skipped) == replay_report(whole, options,
                                                                          skipped)


@pytest.mark.real
@pytest.mark.parametrize("block", [4, 16, 64])
def test_the_sweep_is_the_replay_at_every_curve_capacity_on_real_prompts(store, block):
    """SWE-agent's and OpenHands' real prompts (the bundled tokenizer's ids): the one-pass
    sweep against a replay through vLLM's pool at the fit's grid of capacities."""
    options = SimulateOptions(unit=block)
    prepared, _ = prepare(store, options)
    swept = _sweep(prepared, options)
    assert swept is not None
    total = sum(p.n_tokens for p in prepared)
    followed = 0
    for capacity in (None, *sorted({max(block, total >> k) for k in range(14)})):
        cached = swept.cached(capacity)
        if cached is not None:
            followed += 1
            assert cached == _replay(prepared, replace(options, capacity_tokens=capacity))
    assert followed >= 10


def test_a_request_extending_one_not_replayed_before_it_is_refused():
    a = _Prepared("a", "s", None, False, None, None, np.arange(8), None, None, 0, 0)
    b = _Prepared("b", "s", "a", False, None, None, np.arange(4), None, None, 0, 0,
                  base="a", shared=8)
    with pytest.raises(ValueError, match="extends a"):
        replay_report([b, a], SimulateOptions(unit=4), {})


@pytest.mark.slow
def test_replays_in_worker_processes_give_the_same_report(tmp_path: Path) -> None:
    """Predicted and ideal, the fit's candidates, the capacity curve and a what-if replay
    in two processes: every number is the one replay after replay gives."""
    log = tmp_path / "vllm.jsonl"
    generate(log, block_size=32, capacity_blocks=150)
    store = Store.open(tmp_path / "s.duckdb")
    ingest_paths([str(log), str(ROOT / "sample_logs" / "langfuse-claude-code.events_full.jsonl")],
                 store)
    options = SimulateOptions(engine="vllm", unit=32, capacity_tokens=151 * 32)
    prepared, skipped = prepare(store, options)
    kwargs = {"fit": True, "fit_units": (16, 32), "capacity_curve": (1000, 10000, None),
              "what_if": ("strip-billing-header",)}
    one = replay_prepared(store, prepared, skipped, options, **kwargs)
    two = replay_prepared(store, prepared, skipped, options, workers=2, **kwargs)
    assert one.fit is not None and one.fit.capacity_tokens is not None
    assert len(one.capacity_curve) == 3 and len(one.what_if) == 1
    assert two == one
    assert fit_parameters(prepared, options, workers=3) == fit_parameters(prepared, options)
