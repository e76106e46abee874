"""The provider's own verdict on the cache, read from raw captures (issue 35 item 3) into
the per-call field Claude Code's transcripts fill (`metadata.cache_miss_reason`,
`cache_missed_input_tokens`), so the report's reconciliation covers them.

Shapes, from the providers' API references (SDK types): Anthropic's cache diagnosis (beta
``cache-diagnosis-2026-04-07``) answers ``diagnostics.cache_miss_reason: {"type":
"tools_changed", "cache_missed_input_tokens": N}`` on the message (in a stream, on
``message_start.message``), null when nothing diverged; OpenAI Responses answers
``prompt_cache_diagnostics: {"type": "cache_miss", "reason": "input_changed",
"cache_missed_tokens": N, "comparison_reusable_tokens": N}`` or ``{"type": "cache_hit" |
"comparison_response_not_found" | "unavailable"}``.

The fixtures tests/fixtures/raw/verdicts_*.jsonl are hand-built captures of one session
each; their usage is chosen by hand, and the ledger's causes are worked out from it:

Anthropic (token-exact, a warm read ends 2 short of the previous prompt, shortfall < 64 is
rounding, minimum 1,024 for Sonnet 4.5):
  A1 6,904 = 10 + 6,894 written: cold 6,904
  A2 6,948, nothing read, a tool added (verdict tools_changed, 6,894): the predecessor's
     6,904 lost before the divergence in the tools (break tool-set-change, with the few
     tokens before it below the minimum), new 44
  A3 6,958, read 6,946 = 6,948 - 2 (no verdict: reason null): rounding 2, new 10
  A4 6,970 on Opus (verdict model_changed, 6,946): break model-change 6,958, new 12
OpenAI (128-token steps from 1,024, a hit at most floor((P - 1)/128)*128, retention 10 min):
  O1 2,214: cold
  O2 2,232, read 2,176 = 17 x 128 (cache_hit): rounding 38, new 18 -> lost nothing
  O3 2,250, nothing read, the date in the instructions changed (input_changed, 2,176):
     the predecessor's 2,232 lost (break volatile-prefix-segment, the tokens before the
     date below the minimum), new 18
  O4 2,269, nothing read 20 s later, the input extends O3's; reasoning effort low -> high
     (reasoning_effort_changed, 2,176): provider 2,176 = floor(2,250/128)*128, rounding 74,
     new 19 -- the provider names a setting prefixscope does not compare: a disagreement
  O5 2,287, read 2,176 (comparison_response_not_found: not compared): rounding 93, new 18
"""

from __future__ import annotations

import json

from conftest import FIXTURES
from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.ingest import read_requests
from prefixscope.ingest.normalize.streams import anthropic_verdict, openai_verdict

runner = CliRunner()
ANTHROPIC = FIXTURES / "raw" / "verdicts_anthropic.jsonl"
OPENAI = FIXTURES / "raw" / "verdicts_openai_responses.jsonl"
KEYS = ("cache_miss_reason", "cache_missed_input_tokens", "cache_comparison_reusable_tokens",
        "cache_diagnostics")


def _verdicts(path) -> list[tuple]:
    requests, skips = read_requests(path)
    assert skips == []
    return [tuple(r.metadata.get(k) for k in KEYS) for r in requests]


def _ledger(path) -> dict:
    result = runner.invoke(app, ["report", str(path), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["ledger"]


class TestRead:
    def test_anthropic_json_and_stream(self) -> None:
        assert _verdicts(ANTHROPIC) == [
            (None, None, None, None),
            ("tools_changed", 6894, None, "anthropic"),  # JSON response
            (None, None, None, None),  # stream: message_start's reason is null
            ("model_changed", 6946, None, "anthropic"),  # stream: on message_start
        ]

    def test_openai_responses_json_and_stream(self) -> None:
        assert _verdicts(OPENAI) == [
            (None, None, None, None),
            ("cache_hit", None, None, "openai"),
            ("input_changed", 2176, 2214, "openai"),
            ("reasoning_effort_changed", 2176, 2250, "openai"),  # response.completed
            ("comparison_response_not_found", None, None, "openai"),
        ]

    def test_shapes_that_are_no_verdict(self) -> None:
        assert anthropic_verdict(None) is None
        assert anthropic_verdict({"cache_miss_reason": None}) is None  # still comparing
        assert anthropic_verdict({"cache_miss_reason": {"cache_missed_input_tokens": 5}}) is None
        assert anthropic_verdict({"cache_miss_reason": {"type": "unavailable"}}) == {
            "provider": "anthropic", "reason": "unavailable", "missed_tokens": None,
            "reusable_tokens": None}
        assert openai_verdict({"reason": "input_changed"}) is None  # no type
        assert openai_verdict({"type": "cache_miss"}) is None  # a miss without its reason
        assert openai_verdict({"type": "cache_miss", "reason": "tools_changed",
                               "cache_missed_tokens": True}) == {
            "provider": "openai", "reason": "tools_changed", "missed_tokens": None,
            "reusable_tokens": None}


class TestReconciled:
    def test_anthropic_verdicts_agree_with_the_breaks(self) -> None:
        ledger = _ledger(ANTHROPIC)
        assert {k: v for k, v in ledger["provider_verdicts"].items() if k != "per_call"} == {
            "calls": 2, "compared": 2, "agree": 2,
            "provider_missed_tokens": 6894 + 6946,
            "lost_tokens": 6904 + 6958,
            "matrix": {"break:model-change": {"model_changed": 1},
                       "break:tool-set-change": {"tools_changed": 1}}}
        by = ledger["by_cause"]
        assert (by["cold"], by["new"], by["rounding"]) == (6904, 44 + 10 + 12, 2)
        assert by["break"]["by_kind"]["model-change"] == 6958
        assert by["break"]["by_kind"]["tool-set-change"] + by["below-minimum"] == 6904
        assert by["provider"] == by["ttl"] == by["unexplained"] == 0

    def test_openai_verdicts_agree_and_one_disagrees(self) -> None:
        ledger = _ledger(OPENAI)
        assert {k: v for k, v in ledger["provider_verdicts"].items() if k != "per_call"} == {
            "calls": 4, "compared": 3, "agree": 2,
            "provider_missed_tokens": 2176 + 2176,
            "lost_tokens": 2232 + 2176,
            "matrix": {"break:volatile-prefix-segment": {"input_changed": 1},
                       "none": {"cache_hit": 1, "comparison_response_not_found": 1},
                       "provider": {"reasoning_effort_changed": 1}}}
        by = ledger["by_cause"]
        assert (by["cold"], by["new"], by["rounding"], by["provider"]) == (
            2214, 18 + 18 + 19 + 18, 38 + 74 + 93, 2176)
        assert by["break"]["tokens"] + by["below-minimum"] == 2232
