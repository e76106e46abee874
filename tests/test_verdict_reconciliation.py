"""The provider's verdicts reconciled call by call (issue 35 item 3): each call that carries
one listed beside prefixscope's cause, with the change located where both bodies exist,
and a finding for every disagreement.

tests/fixtures/raw/verdicts_refined.jsonl is a hand-built Anthropic capture of one session
(Sonnet 4.5: a warm read ends 2 tokens short, never past what the predecessor read plus
wrote; a shortfall under 64 is rounding; prompt = input + read + write). The first user
message is a 60-frame traceback; the usage is chosen equal to the rendered prompts' token
counts (8,420 / 8,431 / 8,441, `prefixscope diff --all`), so the diff's positions are the
log's:

  R1 8,420 = 10 + 8,410 written: cold 8,420
  R2 8,431 = 10 + 6,900 read + 1,521 written, 30 s later; the client rewrote the first
     word of the first user message ("the divide test fails" -> "the modulo test fails"):
     the diff's first divergent token is 6,900, in messages[0], and the read stops there.
     Verdict messages_changed, 1,531 missed (8,431 - 6,900). Of R1's 8,420 the 1,520 after
     token 6,900 were sent again after the change: break history-rewrite 1,520 (segment
     messages), new 8,431 - 8,420 = 11. Agrees.
  R3 8,441 = 10 + 8,431 written, nothing read 30 s later, its body extends R2's (tools,
     system, messages byte-identical); verdict tools_changed, 8,421 missed. prefixscope: the
     live prefix R2 left is what it read plus wrote (6,900 + 1,521 = 8,421): all of it
     missed within the TTL, provider 8,421; rounding 8,431 - 8,421 = 10; new 10.
     Disagrees: the provider says the tools changed, the bodies show them unchanged.

Totals: missed 18,392 = cold 8,420 + new 21 + rounding 10 + break 1,520 + provider 8,421.
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
        assert ledger["missed_tokens"] == 18_392
        assert (by["cold"], by["new"], by["rounding"], by["provider"]) == (8420, 21, 10, 8421)
        assert by["break"] == {"tokens": 1520, "by_kind": {"history-rewrite": 1520},
                               "by_segment": {"messages": 1520}}

    def test_messages_changed_refined_to_the_token_and_segment(self) -> None:
        report = _report(REFINED)
        verdicts = report["ledger"]["provider_verdicts"]
        assert {k: verdicts[k] for k in ("calls", "compared", "agree",
                                         "provider_missed_tokens", "lost_tokens")} == {
            "calls": 2, "compared": 2, "agree": 1,
            "provider_missed_tokens": 1531 + 8421, "lost_tokens": 1520 + 8421}
        assert _calls(report) == [
            {"reason": "messages_changed", "provider_missed_tokens": 1531,
             "cause": "break:history-rewrite", "kind": "history-rewrite",
             "segment": "messages", "lost_tokens": 1520, "cause_tokens": 1520,
             "first_divergence_token": 6900, "divergence_segment": "messages[0]",
             "agrees": True, "diffed": True},
            {"reason": "tools_changed", "provider_missed_tokens": 8421,
             "cause": "provider", "kind": None, "segment": None, "lost_tokens": 8421,
             "cause_tokens": 8421, "first_divergence_token": None,
             "divergence_segment": None, "agrees": False, "diffed": True},
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


def _disagreements(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["kind"] == "verdict-disagreement"]


class TestDisagreementFinding:
    def test_bodies_show_the_prefix_intact(self) -> None:
        # R3: tools_changed (8,421) against provider (8,421); R2 agrees: no finding of its own
        report = _report(REFINED)
        [found] = _disagreements(report)
        rid = report["ledger"]["provider_verdicts"]["per_call"][1]["id"]
        # a lens: it shows the provider miss's tokens and claims none; severity by the
        # disputed 8,421 (>= 1,024 a request: above the floor) of 25,292 prompt tokens (33%)
        assert (found["lost_tokens"], found["severity"]) == (0, "high")
        assert found["title"] == (
            "the provider says tools_changed where prefixscope finds provider on 1 request: "
            "its verdicts count 8,421 missed tokens, the ledger 8,421 lost")
        assert found["evidence"] == {
            "requests": 1, "sessions": 1, "provider_reason": "tools_changed",
            "provider_missed_tokens": 8421, "cause": "provider", "kind": None,
            "cause_tokens": 8421, "lost_tokens": 8421, "segments": {}, "diffed": 1,
            "located": 0, "disputed_tokens": 8421, "example_requests": [rid],
            "examples": [{"id": rid, "provider_missed_tokens": 8421, "cause_tokens": 8421,
                          "segment": None, "first_divergence_token": None,
                          "divergence_segment": None, "diffed": True}],
            "attributed_to": ["provider"], "shows_tokens": 8421,
            "shows_tokens_by_cause": {"provider": 8421}}
        assert "rebuilt both bodies and found the prompt extending its predecessor" in \
            found["fix"]
        assert "same cache key" in found["fix"]

    def test_no_bodies_the_verdict_is_the_stronger_and_under_the_floor_low(self) -> None:
        # Claude Code call 7: messages_changed (998) against provider (997): 998 < 1,024
        [found] = _disagreements(_report(CC))
        assert (found["severity"], found["evidence"]["provider_reason"],
                found["evidence"]["cause"], found["evidence"]["disputed_tokens"],
                found["evidence"]["diffed"]) == ("low", "messages_changed", "provider", 998, 0)
        assert "log holds no bodies" in found["fix"]
        assert "Capture the request bodies" in found["fix"]

    def test_a_setting_prefixscope_does_not_compare(self) -> None:
        # OpenAI O4: reasoning_effort_changed (2,176) against provider (2,176): 2,176 of
        # 11,252 prompt tokens (19%), above the floor: high
        report = _report(FIXTURES / "raw" / "verdicts_openai_responses.jsonl")
        [found] = _disagreements(report)
        assert report["summary"]["prompt_tokens"] == 2214 + 2232 + 2250 + 2269 + 2287
        assert (found["severity"], found["evidence"]["provider_reason"],
                found["evidence"]["provider_missed_tokens"],
                found["evidence"]["shows_tokens"]) == (
            "high", "reasoning_effort_changed", 2176, 2176)
        assert found["fix"].startswith("The provider's evidence is the stronger here")

    def test_agreeing_verdicts_make_no_finding(self) -> None:
        assert _disagreements(_report(FIXTURES / "raw" / "verdicts_anthropic.jsonl")) == []

    def test_terminal_shows_the_lens(self) -> None:
        result = runner.invoke(app, ["report", str(REFINED)])
        assert result.exit_code == 0, result.output
        out = " ".join(result.output.split())
        assert ("lens verdict-disagreement · shows 8,421 missed tokens of provider "
                "the provider says tools_changed where prefixscope finds provider on 1 "
                "request") in out


class TestAgreementPrinted:
    def test_every_miss_carries_a_verdict(self, tmp_path) -> None:
        # R2 and R3 are the calls that lost tokens, and both carry a verdict: 1 of 2 agree
        said = ("provider verdicts: 2 calls carry one; prefixscope's cause agrees on 1 of 2 "
                "that name a change; they count 9,952 missed tokens, the ledger 9,941 lost; "
                "agreement 50%, every call that lost tokens carrying one")
        result = runner.invoke(app, ["report", str(REFINED)])
        assert result.exit_code == 0, result.output
        assert said in " ".join(result.output.split())
        md = tmp_path / "report.md"
        result = runner.invoke(app, ["report", str(REFINED), "--md", str(md)])
        assert result.exit_code == 0, result.output
        assert said in md.read_text()
        html = tmp_path / "report.html"
        result = runner.invoke(app, ["report", str(REFINED), "--html", str(html)])
        assert result.exit_code == 0, result.output
        assert "agreement 50%, every call that lost tokens carrying one" in html.read_text()

    def test_verdicts_on_some_misses(self) -> None:
        # the Claude Code transcript: six calls lost tokens (compaction, model change,
        # client upgrade, tool-set delta, provider, the shorter prompt's unexplained); three
        # carry a verdict, two agree
        result = runner.invoke(app, ["report", str(CC)])
        assert result.exit_code == 0, result.output
        assert ("the ledger 7,997 lost; agreement 67%, verdicts on 3 of 6 calls that lost "
                "tokens") in " ".join(result.output.split())
