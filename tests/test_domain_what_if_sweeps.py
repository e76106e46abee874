"""A domain's what-ifs are swept once each, after the fit (`findings.domains._replay_steps`):
at the unlimited capacity alone when no capacity is fitted, in full when one is (their
predicted replay at it, and the ideal read off the same pass). Swept ahead at the unlimited
capacity beside the base's sweep, a what-if was swept twice when the fit then found a
capacity (issue 37: the 2 GiB raw captures' fitted capacity paid ~2.5 s of CPU for it).

Oracle: each what-if's replays through the vLLM engine itself (`_replay`, one per capacity,
no sweep, no memo), at the fitted capacity and unlimited; the hit rates are the hand sums of
those cached tokens over the prompt tokens."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any, cast

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.analyses.onepass import PassResult
from prefixscope.analyses.simulate import SimulateOptions, _Prepared, _replay, remembered_replays
from prefixscope.analyses.simulate import replay as replay_module
from prefixscope.findings import domains
from prefixscope.findings.values import ReportOptions
from prefixscope.store import Store

UNIT = 2
STAGED = replay_module._staged


def requests(prompts: list[tuple[str, list[int], int]]) -> list[_Prepared]:
    """Requests given by (session, token ids, observed cached tokens), in log order."""
    return [_Prepared(str(i), session, None, False, None, observed, np.array(ids), None, None,
                      0, 0) for i, (session, ids, observed) in enumerate(prompts)]


# Session a's second prompt extends its first; session b's prompt comes between. The log
# got nothing from the cache: an unlimited cache would have given a's second prompt its 4
# first tokens, a cache of two blocks had evicted them (b's prompt took its place), so the
# fit finds a capacity.
EVICTED = requests([("a", [0, 1, 2, 3], 0), ("b", [10, 11, 12, 13], 0),
                    ("a", [0, 1, 2, 3, 4, 5], 0)])
# The log got what an unlimited cache gives: no fit, no capacity.
KEPT = requests([("a", [0, 1, 2, 3], 0), ("b", [10, 11, 12, 13], 0),
                 ("a", [0, 1, 2, 3, 4, 5], 4)])
# The what-if's input: the same sessions with other tokens (b shares a's first block).
WHAT_IF = requests([("a", [0, 1, 7, 7], 0), ("b", [0, 1, 8, 8], 0),
                    ("a", [0, 1, 7, 7, 9, 9], 0)])


def replay_steps(prepared: list[_Prepared], monkeypatch: Any) -> tuple[Any, Counter[Any]]:
    """The domain's replay with one priced what-if, and how often each input was swept
    (by which input, unlimited or not)."""
    swept: Counter[tuple[str, bool]] = Counter()
    real = replay_module._sweep

    def counted(held: Any, options: SimulateOptions, unlimited: bool = False) -> Any:
        swept[("what-if" if held is WHAT_IF else "log", unlimited)] += 1
        return real(held, options, unlimited)

    monkeypatch.setattr(replay_module, "_sweep", counted)
    with remembered_replays():
        # the store is read for a what-if's input only when none is given
        report = domains._replay_steps(
            cast(Store, None), SimulateOptions(engine="vllm", unit=UNIT), ReportOptions(),
            {"json-key-order": "sort-json-keys"}, [], prepared, {}, 1,
            lambda _changed, _transform: WHAT_IF)
    return report, swept


def test_a_what_if_is_swept_once_in_full_when_the_fit_finds_a_capacity(monkeypatch):
    report, swept = replay_steps(EVICTED, monkeypatch)
    capacity = report.fit.capacity_tokens
    assert capacity is not None  # the scenario's point: a capacity was fitted
    assert swept == {("log", False): 1, ("what-if", False): 1}
    options = SimulateOptions(engine="vllm", unit=UNIT, capacity_tokens=capacity)
    predicted = _replay(WHAT_IF, options)
    ideal = _replay(WHAT_IF, options, unlimited=True)
    prompt = 4 + 4 + 6
    (what_if,) = report.what_if
    assert what_if.transform == "sort-json-keys"
    assert what_if.hit_rate_predicted == sum(predicted) / prompt
    assert what_if.hit_rate_ideal == sum(ideal) / prompt
    # by hand: b's prompt reuses a's block [0 1], a's second prompt its first two blocks
    assert ideal == [0, 2, 4]


def test_a_what_if_is_swept_once_at_the_unlimited_capacity_when_no_capacity_is_fitted(
        monkeypatch):
    report, swept = replay_steps(KEPT, monkeypatch)
    assert report.fit is None
    assert swept == {("log", False): 1, ("what-if", True): 1}
    ideal = _replay(WHAT_IF, SimulateOptions(engine="vllm", unit=UNIT), unlimited=True)
    (what_if,) = report.what_if
    assert what_if.hit_rate_predicted == what_if.hit_rate_ideal == sum(ideal) / (4 + 4 + 6)


# --- the base's sweep made ahead (`domains.swept_bases`: report makes it while its workers
# make the what-ifs' input), then read by the domain's replay


def replay_domain(prepared: list[_Prepared], options: ReportOptions,
                  ahead: bool, monkeypatch: Any) -> tuple[Any, Counter[Any]]:
    """The domain "d" (vLLM, one file) replayed with one priced what-if, its base swept
    ahead by `swept_bases` first or not; and how often each input was swept."""
    swept: Counter[tuple[str, bool]] = Counter()

    def counted(held: Any, sim: SimulateOptions, unlimited: bool = False) -> Any:
        swept[("what-if" if held is WHAT_IF else "log", unlimited)] += 1
        return STAGED(held, sim, unlimited)

    monkeypatch.setattr(replay_module, "_staged", counted)
    planned = ({"d": ("vllm", UNIT, ["f"])}, {}, [])
    passed = PassResult(None, {"d": (prepared, {})}, {})
    made = domains.swept_bases(options, planned, passed)() if ahead else {}
    sim = SimulateOptions(engine="vllm", unit=UNIT, capacity_tokens=options.capacity_tokens,
                          render=options.render, source_files=("f",))
    report = domains._replay_domain(
        cast(Store, None), sim, options, [], {"json-key-order": "sort-json-keys"}, [],
        prepared, {}, 1, lambda _changed, _transform: WHAT_IF, made.get("d"))
    return report, swept


def test_a_base_swept_ahead_is_swept_once_and_the_replay_is_the_same(monkeypatch):
    for log in (EVICTED, KEPT):
        alone, swept_alone = replay_domain(log, ReportOptions(), False, monkeypatch)
        ahead, swept_ahead = replay_domain(log, ReportOptions(), True, monkeypatch)
        assert ahead == alone
        assert swept_ahead == swept_alone  # the log's sweep once: ahead, not again
        assert swept_ahead[("log", False)] == 1
    # by hand (KEPT, unlimited): a's second prompt hits its first two blocks
    assert [r.predicted for r in ahead.per_request] == [0, 0, 4]


def test_no_base_is_swept_ahead_where_its_replay_sweeps_none_ahead():
    """A capacity given (no fit follows) or a hosted engine: the replay sweeps nothing
    ahead, nor does `swept_bases`; a domain the walk could not prepare is left to its
    replay (which says why)."""
    vllm = ({"d": ("vllm", UNIT, ["f"])}, {}, [])
    passed = PassResult(None, {"d": (EVICTED, {})}, {})
    assert domains.swept_bases(ReportOptions(capacity_tokens=4), vllm, passed)() == {}
    assert set(domains.swept_bases(ReportOptions(), vllm, passed)()) == {"d"}
    hosted = ({"d": ("anthropic", None, ["f"])}, {}, [])
    assert domains.swept_bases(ReportOptions(), hosted, passed)() == {}
    assert domains.swept_bases(ReportOptions(), vllm, PassResult(None, {}, {"d": "no"}))() == {}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abc"), st.lists(st.integers(0, 5), min_size=1,
                                                           max_size=9),
                          st.integers(0, 8)), min_size=1, max_size=8))
def test_any_log_swept_ahead_replays_as_the_engine_does(prompts):
    """Whatever the log, its replay read off the sweep made ahead is vLLM's own replay
    (`_replay`, no sweep) request by request: unlimited, and at the fitted capacity."""
    log = requests([(s, ids, observed) for s, ids, observed in prompts])
    options = ReportOptions()
    planned = ({"d": ("vllm", UNIT, ["f"])}, {}, [])
    made = domains.swept_bases(options, planned, PassResult(None, {"d": (log, {})}, {}))()
    sim = SimulateOptions(engine="vllm", unit=UNIT, render=options.render, source_files=("f",))
    report = domains._replay_domain(cast(Store, None), sim, options, [], {}, [], log, {}, 1,
                                    None, made["d"])
    assert report is not None
    capacity = report.fit.capacity_tokens if report.fit is not None else None
    fitted = replace(sim, capacity_tokens=capacity,
                     unit=report.fit.unit if report.fit is not None else UNIT)
    expected = _replay(log, fitted)
    assert [r.predicted for r in report.per_request] == expected
    assert [r.ideal for r in report.per_request] == _replay(log, sim, unlimited=True)


def test_a_base_staged_ahead_is_swept_only_when_made(monkeypatch):
    """`swept_bases` stages the log's sweep (its requests given to vLLM's sweep) and makes
    it (the sweep's replay, `VllmSweep.result`) only when its function is called: report
    calls it once its workers are gone."""
    from prefixscope.engines.sweep import VllmSweep

    made: list[int] = []
    real = VllmSweep.result

    def result(self: VllmSweep) -> Any:
        made.append(1)
        return real(self)

    monkeypatch.setattr(VllmSweep, "result", result)
    planned = ({"d": ("vllm", UNIT, ["f"])}, {}, [])
    later = domains.swept_bases(ReportOptions(), planned, PassResult(None, {"d": (EVICTED, {})},
                                                                     {}))
    assert made == []
    (memo,) = later()["d"].values()
    assert made == [1]
    (swept,) = memo[1].values()
    assert swept.cached(None) == [0, 0, 4]  # by hand: a's second prompt, its first 2 blocks
