"""A real Claude Code session's compaction, as the log records it, is the ledger's cause.

tests/data/real/claude-code-spotter/ holds lines 1180-1300 of a public Claude Code 2.1.39
session (marot/spotter, MIT; tests/data/real/README.md) copied verbatim, with the
compaction's summarizer call Claude Code wrote to the session's
`subagents/agent-acompact-fffbd0.jsonl`. In those lines: 10 calls of claude-opus-4-6
extending each other with 1-hour writes (`cache_creation.ephemeral_1h_input_tokens`), the
summarizer's call (reading 166,758 of its 169,248 prompt tokens from the session's cache),
a `{"type":"system","subtype":"compact_boundary"}` line and the `isCompactSummary` user
message, then 4 calls on the summary.

Every expected number is counted by hand from the raw lines (calls deduplicated by
`message.id`; prompt = input + cache read + cache creation):

  first call (line 8):        162,156 prompt, 161,713 read  -> cold 443 (the excerpt's start)
  summarizer call:            169,248 prompt, 166,758 read  -> compaction 2,490
  first call after the boundary (line 82): 33,960 prompt, 21,460 read (the system prompt
  and tools) -> compaction 12,500
  totals over the 15 calls: prompt 1,797,320 + 169,248, read 1,774,951 + 166,758
"""

from __future__ import annotations

import json

import pytest
from conftest import REAL
from typer.testing import CliRunner

from prefixscope.cli.main import app

runner = CliRunner()
SPOTTER = REAL / "claude-code-spotter"
pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def calls() -> dict:
    result = runner.invoke(app, ["calls", str(SPOTTER), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_every_call_counted_once(calls: dict) -> None:
    assert (calls["requests"], calls["prompt_tokens"], calls["cached_tokens"]) == (
        15, 1_797_320 + 169_248, 1_774_951 + 166_758)
    assert sorted(s["requests"] for s in calls["sessions"]) == [1, 14]


def test_the_recorded_compaction_is_the_cause_and_nothing_is_the_providers(
        calls: dict) -> None:
    by_cause = {c: n for c, n in calls["by_cause"].items() if n}
    missed = (1_797_320 + 169_248) - (1_774_951 + 166_758)
    assert by_cause["cold"] == 162_156 - 161_713
    assert by_cause["compaction"] == (169_248 - 166_758) + (33_960 - 21_460)
    # the rest of what was missed is what each call added (and the few tokens after
    # Anthropic's breakpoint): no provider, TTL or break on a log that records none
    assert set(by_cause) == {"cold", "compaction", "new", "rounding"}
    assert sum(by_cause.values()) == missed
    compacted = sorted((c["prompt_tokens"], c["causes"], [e["kind"] for e in c["events"]])
                       for s in calls["sessions"] for c in s["calls"]
                       if "compaction" in c["causes"])
    assert compacted == [
        (33_960, {"compaction": 33_960 - 21_460}, ["compaction"]),
        (169_248, {"compaction": 169_248 - 166_758}, ["compaction"]),
    ]
