"""A log where caching was never requested: every call on a hosted Anthropic model read 0
and wrote 0 cache tokens over several calls above the minimum cacheable prompt. The ledger
books what the cache would have served as ``not-requested`` (not the predecessor's unwritten
tail, ``rounding``), and the finding names it, sizes it and gives the client's fix.

The Cline fixture (tests/fixtures/cline-history-nocache/) is hand-built in the shape of a
real public task routed through a non-caching OpenAI-compatible provider (mike4567/MRA04242026:
``modelId claude_4_5_opus``, ``providerId openai``, every ``metrics.tokens.cached`` 0), with
content and counts of its own. By hand (Opus 4.5 list prices: input $5, cache read $0.50,
5-minute write $6.25 per MTok; Anthropic's automatic breakpoint reads 2 tokens short):

  call  gap      prompt  ledger
  1     -         9,000  cold 9,000
  2     11.9 s   11,000  not-requested 9,000 - 2 = 8,998, rounding 2, new 2,000
  3     12 s     14,000  not-requested 10,998, rounding 2, new 3,000
  4     606 s    15,000  not-requested 13,998, rounding 2, new 1,000

  not-requested 33,994; lost 33,994 x (5 - 0.50) / 1e6 = $0.152973.
  Had caching been asked, calls 2 and 3 read 8,998 + 10,998 = 19,996 (call 4 came after a
  pause past the 5-minute TTL: nothing read) and every call wrote the rest of its prompt:
  9,000 + 2,002 + 3,002 + 15,000 = 29,004 at (6.25 - 5) / 1e6 each.
  Saving: 19,996 x 4.5e-6 - 29,004 x 1.25e-6 = 0.089982 - 0.036255 = $0.053727.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.engines.anthropic import min_cacheable
from prefixscope.findings.ledger import build_ledger, hosted_rules, self_hosted_rules
from prefixscope.findings.unrequested import unrequested_sessions
from prefixscope.model import UsageRecord

runner = CliRunner()
TASK = FIXTURES / "cline-history-nocache" / "tasks" / "1777100000000"
T0 = datetime(2026, 3, 2, 10, 0)


def _report() -> dict:
    result = runner.invoke(app, ["report", str(TASK), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


class TestClineTaskThroughANonCachingProvider:
    def test_the_ledger_books_what_the_cache_would_have_served_as_not_requested(self) -> None:
        doc = _report()
        by_cause = {c: v for c, v in doc["ledger"]["by_cause"].items()
                    if c != "break" and v}
        assert by_cause == {"cold": 9_000, "new": 2_000 + 3_000 + 1_000,
                            "rounding": 2 + 2 + 2, "not-requested": 8_998 + 10_998 + 13_998}
        assert doc["ledger"]["missed_tokens"] == 9_000 + 11_000 + 14_000 + 15_000

    def test_one_finding_names_it_sizes_it_and_says_the_clines_fix(self) -> None:
        doc = _report()
        [f] = [f for f in doc["findings"] if f["kind"] == "caching-not-requested"]
        assert f["lost_tokens"] == 33_994
        assert f["lost_usd"] == pytest.approx(0.152973)
        ev = f["evidence"]
        assert (ev["requests"], ev["sessions"], ev["calls"], ev["calls_above_minimum"],
                ev["minimum_tokens"], ev["models"], ev["after_pause_tokens"]) == (
            3, 1, 4, 4, [4_096], ["claude_4_5_opus"], 13_998)
        assert ev["would_save_usd"] == pytest.approx(0.053727)
        assert f["title"].startswith(
            "caching not requested: 0 tokens written in 4 calls above the minimum (4,096 "
            "tokens) on claude_4_5_opus, 0 read; the cache would have served 33,994 prompt "
            "tokens, saving $0.05 net of the write premium")
        assert "API Provider setting" in f["fix"] and "cache_control" in f["fix"]
        # nothing else is read into it: no rounding-only "no findings", no provider miss
        assert {g["kind"] for g in doc["findings"] if g["lost_tokens"]} == {
            "caching-not-requested"}

    def test_the_terminal_says_it(self) -> None:
        result = runner.invoke(app, ["report", str(TASK)], catch_exceptions=False)
        assert "not-requested 33,994" in result.stdout
        assert "caching-not-requested" in result.stdout
        assert "no findings" not in result.stdout


def rec(rid: str, prompt: int | None, cached: int | None, write: int | None, *,
        minute: float = 0, prev: str | None = None, model: str = "claude-opus-4-5",
        session: str | None = "s") -> UsageRecord:
    return UsageRecord(rid, T0 + timedelta(minutes=minute), "anthropic-messages", model, None,
                       None, None, "raw", session, prompt, cached, False, None, "f",
                       write, None, None, prev)


def _session(model: str = "claude-opus-4-5", prompts=(9_000, 11_000, 14_000),
             cached=(0, 0, 0), writes=(0, 0, 0)) -> list[UsageRecord]:
    ids = [f"c{i}" for i in range(len(prompts))]
    return [rec(ids[i], prompts[i], cached[i], writes[i], minute=i,
                prev=ids[i - 1] if i else None, model=model) for i in range(len(prompts))]


def _anthropic_minimums(records: list[UsageRecord]) -> dict[str, int | None]:
    return {r.id: min_cacheable(r.model) for r in records}


class TestWhatIsNeverReadAsNotRequested:
    def test_a_session_that_wrote_once_asked(self) -> None:
        records = _session(writes=(9_000, 0, 0))
        assert unrequested_sessions(records, _anthropic_minimums(records)) == frozenset()

    def test_writes_the_log_does_not_report_are_not_zeros(self) -> None:
        records = _session(writes=(None, None, None))
        assert unrequested_sessions(records, _anthropic_minimums(records)) == frozenset()

    def test_one_call_above_the_minimum_is_not_enough(self) -> None:
        # Opus 4.5 caches from 4,096 tokens: only the last prompt reaches it
        records = _session(prompts=(2_000, 3_000, 5_000))
        assert unrequested_sessions(records, _anthropic_minimums(records)) == frozenset()

    def test_two_calls_above_it_are(self) -> None:
        records = _session(prompts=(2_000, 4_096, 5_000))
        assert unrequested_sessions(records, _anthropic_minimums(records)) == {"s"}

    def test_openai_automatic_caching_with_no_reads_on_short_prompts(self) -> None:
        # OpenAI caches without being asked, from 1,024 tokens: 0 read on 900-token prompts
        # is its minimum (below-minimum), never "not requested"
        records = _session(model="gpt-4o", prompts=(900, 950, 1_000))
        rules = {r.id: hosted_rules("openai", r.model) for r in records}
        ledger = build_ledger(records, (), {}, rules, {})
        assert ledger.by_cause["not-requested"] == 0
        assert ledger.by_cause["below-minimum"] == 900 + 950

    def test_a_self_hosted_engine_named_after_a_claude_model(self) -> None:
        records = _session()
        rules = {r.id: self_hosted_rules("vllm", 16) for r in records}
        ledger = build_ledger(records, (), {}, rules, {})
        assert ledger.by_cause["not-requested"] == 0
        assert ledger.by_cause["unexplained"] == 9_000 // 16 * 16 + 11_000 // 16 * 16

    def test_on_anthropic_rules_the_same_session_is_not_requested(self) -> None:
        records = _session()
        rules = {r.id: hosted_rules("anthropic", r.model) for r in records}
        ledger = build_ledger(records, (), {}, rules, {})
        assert ledger.by_cause["not-requested"] == 8_998 + 10_998
        # without the cause, the predecessor's unwritten tail (read 0 + write 0) was rounding
        assert ledger.by_cause["rounding"] == 2 + 2
