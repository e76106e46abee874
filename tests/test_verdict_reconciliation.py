"""The provider's verdicts reconciled call by call (issue 35 item 3): each call that carries
one listed beside prefixscope's cause, with the change located where both bodies exist,
and a finding for every disagreement.

tests/fixtures/raw/verdicts_refined.jsonl is a hand-built Anthropic capture of one session
(Sonnet 4.5: a warm read ends 2 tokens short, a shortfall under 64 is rounding; the system
block carries a ``cache_control`` breakpoint; prompt = input + read + write):

  R1 6,904 = 10 + 6,894 written: cold 6,904
  R2 6,948 = 10 + 6,894 read + 44 written, 30 s later; the client rewrote the first user
     message ("the divide test fails" -> "the modulo test fails"); verdict messages_changed,
     54 missed (its 10 + 44 uncached). The read stopped at the system's breakpoint (6,894);
     of R1's 6,904 the 10 after it were sent again after the change: break
     history-rewrite 10 (segment messages), new 6,948 - 6,904 = 44. The diff puts the first
     divergent token in messages[0] (token 6,900 of the rendered prompt: the tools and
     system R1 wrote, then the first message up to "divide"). Agrees.
  R3 6,960 = 10 + 6,950 written, nothing read 30 s later, its body extends R2's (tools,
     system, messages byte-identical); verdict tools_changed, 6,946 missed. prefixscope: the
     live prefix R2 left in the cache is what R2 read plus wrote (6,894 + 44 = 6,938): all
     of it missed within the TTL, provider 6,938; rounding 6,948 - 6,938 = 10; new 12.
     Disagrees: the provider says the tools changed, the bodies show them unchanged.

Totals: missed 13,918 = cold 6,904 + new 56 + rounding 10 + break 10 + provider 6,938.
"""

from __future__ import annotations

import json

from conftest import FIXTURES
from typer.testing import CliRunner

from prefixscope.cli.main import app

runner = CliRunner()
REFINED = FIXTURES / "raw" / "verdicts_refined.jsonl"
CC = FIXTURES / "claude-code" / "recorded_events.jsonl"


def _report(path) -> dict:
    result = runner.invoke(app, ["report", str(path), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _calls(report: dict) -> list[dict]:
    return [{k: v for k, v in c.items() if k not in ("id", "session")}
            for c in report["ledger"]["provider_verdicts"]["per_call"]]


class TestPerCall:
    def test_ledger_by_hand(self) -> None:
        ledger = _report(REFINED)["ledger"]
        by = ledger["by_cause"]
        assert ledger["missed_tokens"] == 13_918
        assert (by["cold"], by["new"], by["rounding"], by["provider"]) == (6904, 56, 10, 6938)
        assert by["break"] == {"tokens": 10, "by_kind": {"history-rewrite": 10},
                               "by_segment": {"messages": 10}}

    def test_messages_changed_refined_to_the_token_and_segment(self) -> None:
        report = _report(REFINED)
        verdicts = report["ledger"]["provider_verdicts"]
        assert {k: verdicts[k] for k in ("calls", "compared", "agree",
                                         "provider_missed_tokens", "lost_tokens")} == {
            "calls": 2, "compared": 2, "agree": 1,
            "provider_missed_tokens": 54 + 6946, "lost_tokens": 10 + 6938}
        assert _calls(report) == [
            {"reason": "messages_changed", "provider_missed_tokens": 54,
             "cause": "break:history-rewrite", "kind": "history-rewrite",
             "segment": "messages", "lost_tokens": 10, "cause_tokens": 10,
             "first_divergence_token": 6900, "divergence_segment": "messages[0]",
             "agrees": True},
            {"reason": "tools_changed", "provider_missed_tokens": 6946,
             "cause": "provider", "kind": None, "segment": None, "lost_tokens": 6938,
             "cause_tokens": 6938, "first_divergence_token": None,
             "divergence_segment": None, "agrees": False},
        ]
        ids = [c["id"] for c in verdicts["per_call"]]
        assert len(set(ids)) == 2 and all(c["session"] == "sess-refined-1"
                                          for c in verdicts["per_call"])

    def test_tools_changed_located_in_the_added_tool(self) -> None:
        # verdicts_anthropic.jsonl's A2 (test_raw_verdicts): a tool added after the first;
        # the rendered tools come first, so the change starts at token 47 (tools[0]'s)
        calls = _calls(_report(FIXTURES / "raw" / "verdicts_anthropic.jsonl"))
        assert [(c["reason"], c["segment"], c["first_divergence_token"],
                 c["divergence_segment"], c["agrees"]) for c in calls] == [
            ("tools_changed", "tools", 47, "tools[1]", True),
            ("model_changed", None, None, None, True),  # another model: no body diff
        ]

    def test_without_bodies_the_verdict_stands_unlocated(self) -> None:
        # Claude Code transcript (test_recorded_events): 6,000 / 1,000 / 998 by the verdicts
        calls = _calls(_report(CC))
        assert [(c["reason"], c["provider_missed_tokens"], c["cause"], c["cause_tokens"],
                 c["first_divergence_token"], c["agrees"]) for c in calls] == [
            ("model_changed", 6000, "break:model-change", 6000, None, True),
            ("tools_changed", 1000, "break:tool-set-change", 1000, None, True),
            ("messages_changed", 998, "provider", 997, None, False),
        ]
