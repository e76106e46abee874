"""Partial rebuilds flagged (issue 35, item 6): coverage compares each call's rendered prompt
with the prompt tokens its log reports; a log that lacks part of the prompt and reports
no count is partial too; no below-minimum or break is sized on a prompt the log could not
rebuild (docs/report.md#the-basis).

Fixtures: tests/fixtures/openhands/v1/README.md -- the real V1 event stream (no
`SystemPromptEvent`: neither the system prompt nor the tools are in the log), without
usage and with per-call `metrics.token_usages`.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from conftest import FIXTURES
from typer.testing import CliRunner

from prefixscope.analyses.diff import Divergence, PairDiff
from prefixscope.analyses.simulate import RequestSim
from prefixscope.cli.main import app
from prefixscope.findings.ledger import ReplayedRequest, build_ledger, hosted_rules
from prefixscope.findings.rebuild import not_rebuilt
from prefixscope.model import UsageRecord

V1 = FIXTURES / "openhands" / "v1"
runner = CliRunner()


def _report(path) -> dict:
    result = runner.invoke(app, ["report", str(path), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _record(rid: str, prompt: int | None) -> UsageRecord:
    return UsageRecord(rid, datetime(2026, 6, 16), "openai-chat", "m", None, None, None,
                       "openhands", "s", prompt, None, True)


def test_the_rule_call_by_call():
    # 899 of 1,000 logged is below 0.9 x 1,000 = 900: not rebuilt; 900 is; without a logged
    # count, a call whose log lacks a part is not rebuilt, one lacking nothing is
    records = [_record("a", 1_000), _record("b", 1_000), _record("c", None),
               _record("d", None), _record("e", 1_000)]
    rendered = {"a": 899, "b": 900, "c": 300, "d": 300}  # e: not rendered (usage only)
    lacking = {"c": ("no SystemPromptEvent: the system prompt and tools are not in the log",)}
    assert not_rebuilt(records, rendered, lacking) == {"a", "c"}


def test_v1_events_without_system_prompt_and_with_logged_usage_are_partial():
    # token_usages: 21,000 and 21,400 prompt tokens logged for the two calls; the events
    # rebuild neither the system prompt nor the tools
    doc = _report(V1 / "sdk_goal_events_usage_output.jsonl")
    replay = doc["summary"]["replay"]
    assert replay["logged_prompt_tokens"] == 21_000 + 21_400 == 42_400
    assert replay["rebuilt_prompt_tokens"] < 0.9 * 42_400
    assert replay["coverage"] == replay["rebuilt_prompt_tokens"] / 42_400
    assert (replay["partial"], replay["not_rebuilt"]) == (True, 2)


def test_v1_events_without_system_prompt_or_usage_are_partial_with_no_coverage():
    # nothing logged to compare: the log itself says it lacks the system prompt and tools
    replay = _report(V1 / "sdk_goal_events_output.jsonl")["summary"]["replay"]
    assert (replay["logged_prompt_tokens"], replay["coverage"]) == (None, None)
    assert (replay["partial"], replay["not_rebuilt"]) == (True, 2)



# ------------------------------------------------------------------ the ledger

T0 = datetime(2026, 6, 16, 5, 39)
OPUS = "claude-opus-4-5"


def _call(rid: str, prompt: int | None, cached: int | None, minute: int,
          prev: str | None = None) -> UsageRecord:
    return UsageRecord(rid, T0 + timedelta(minutes=minute), "openai-chat", OPUS, None, None,
                       None, "openhands", "s", prompt, cached, True, None, "f", None, None,
                       None, prev)


def _pair(token: int, tokens_a: int, tokens_b: int, cause: str = "volatile-value") -> PairDiff:
    div = Divergence(token, 0, 0, "messages[1].content", "", "", 0, 0, None, None)
    return PairDiff("a", "b", "s", tokens_a, tokens_b, div, 64, 0, 0, cause, "")


def _ledger(records, pairs, *, replayed=None, not_rebuilt=frozenset()):
    rules = hosted_rules("anthropic", OPUS)
    return build_ledger(records, pairs, replayed or {}, {r.id: rules for r in records}, {},
                        not_rebuilt=not_rebuilt)


def test_a_break_on_a_prompt_the_log_could_not_rebuild_is_placed_by_the_usage():
    # a 40,000-token turn, then 42,000 of which 30,000 were read a minute later; the
    # rebuild holds 4,000 / 4,200 of them, and its diff diverges at rendered token 3,800.
    records = [_call("a", 40_000, 0, 0), _call("b", 42_000, 30_000, 1, prev="a")]
    pairs = [_pair(3_800, 4_000, 4_200)]
    # sized on the rebuild: D = 3,800 x 42,000 / 4,200 = 38,000, so [30,000, 38,000) =
    # 8,000 a provider miss, [38,000, 40,000) = 2,000 break, [40,000, 42,000) new
    whole = dict(_ledger(records, pairs).entries[1].causes)
    assert whole == {"provider": 8_000, "break": 2_000, "new": 2_000}
    # not rebuilt: the diff cannot place the change in the logged prompt, D = C = 30,000:
    # break [30,000, 40,000) = 10,000, new 2,000 (12,000 = 42,000 - 30,000 missed)
    b = _ledger(records, pairs, not_rebuilt=frozenset({"a", "b"})).entries[1]
    assert dict(b.causes) == {"break": 10_000, "new": 2_000}
    assert b.break_kind == "volatile-prefix-segment"


def _sim(rid: str, prompt: int) -> ReplayedRequest:
    return ReplayedRequest("anthropic API", "anthropic", 1,
                           RequestSim(rid, "s", prompt, None, 0, 0, {}))


def test_no_below_minimum_or_break_on_a_predicted_basis_the_log_could_not_rebuild():
    # no usage: the basis is the replay's over the rebuilt prompts, 300 then 330 tokens,
    # both below Anthropic's minimum; the diff diverges at token 100 of the second
    records = [_call("a", None, None, 0), _call("b", None, None, 1, prev="a")]
    replayed = {"a": _sim("a", 300), "b": _sim("b", 330)}
    pairs = [_pair(100, 300, 330)]
    # whole: below-minimum [0, 100), break [100, 300) = 200, new [300, 330) = 30
    whole = _ledger(records, pairs, replayed=replayed).entries[1]
    assert dict(whole.causes) == {"below-minimum": 100, "break": 200, "new": 30}
    # the log lacks the system prompt and tools: nothing is sized on these prompts but
    # what they add -- 100 + 200 = 300 unexplained, new 30
    lacking = _ledger(records, pairs, replayed=replayed,
                      not_rebuilt=frozenset({"a", "b"})).entries[1]
    assert dict(lacking.causes) == {"unexplained": 300, "new": 30}
    assert lacking.break_kind is None


def test_the_unexplained_finding_says_which_prompts_the_log_could_not_rebuild():
    from test_findings import entry, evidence, ledger_of

    from prefixscope.findings.finders import replay

    ledger = ledger_of(entry("a", {"unexplained": 300, "new": 30}),
                       entry("b", {"unexplained": 64}))
    (f,) = replay.find(evidence(ledger=ledger, not_rebuilt=frozenset({"a"})))
    assert (f.kind, f.lost_tokens, f.evidence["not_rebuilt"]) == ("unexplained-miss", 364, 1)
    assert "(1 of them on prompts the log could not rebuild" in f.title


def test_the_real_v1_events_without_usage_get_no_below_minimum():
    # before: "below-minimum" with "make it longer than the minimum" on a prompt that is
    # missing its system prompt and tools
    doc = _report(V1 / "sdk_goal_events_output.jsonl")
    assert doc["ledger"]["by_cause"]["below-minimum"] == 0
    assert "below-minimum" not in {f["kind"] for f in doc["findings"]}
    (unexplained,) = [f for f in doc["findings"] if f["kind"] == "unexplained-miss"]
    assert unexplained["evidence"]["not_rebuilt"] == 1
