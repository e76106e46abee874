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
from datetime import datetime

from conftest import FIXTURES
from typer.testing import CliRunner

from prefixscope.cli.main import app
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

