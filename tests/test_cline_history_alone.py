"""A Cline task's ``api_conversation_history.json`` read alone (shared without its
``ui_messages.json``): newer Cline writes each call's usage on its assistant message.

The fixture (tests/fixtures/cline-history/) is hand-built in the shape of a real public
task (mike4567/MRA04242026: `{role, content, ts}` user messages of text blocks; assistant
messages of `tool_use` blocks with `modelInfo {modelId, providerId, mode}` and `metrics
{tokens {prompt, completion, cached}}`), with content and counts of its own. Cline writes
`prompt` = the call's `inputTokens` and `cached` = cache writes + cache reads, so by hand:

  element  model               prompt  cached  -> prompt_tokens  cached  write  output
  2        claude_4_5_opus      9,000       0  ->         9,000       0      0     500
  4        claude_4_5_opus     11,000       0  ->        11,000       0      0     200
  6        claude_4_5_sonnet    1,500  10,500  ->        12,000    None   None     100
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import FIXTURES
from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.ingest import read_requests
from prefixscope.ingest.formats import all_formats
from prefixscope.ingest.probing import probe
from prefixscope.ingest.source import Source

runner = CliRunner()
TASK = FIXTURES / "cline-history" / "tasks" / "1777000000000"
HISTORY = TASK / "api_conversation_history.json"


def test_detected_as_cline() -> None:
    pr = probe(Source.from_path(HISTORY))
    assert [m.NAME for m in all_formats() if m.sniff(pr)] == ["cline"]


def test_one_request_per_assistant_message_with_metrics() -> None:
    requests, skips = read_requests(HISTORY)
    assert skips == []
    assert [(r.source_line, r.model, r.usage.prompt_tokens, r.usage.cached_tokens,
             r.usage.cache_write_tokens, r.usage.output_tokens) for r in requests] == [
        (2, "claude_4_5_opus", 9_000, 0, 0, 500),
        (4, "claude_4_5_opus", 11_000, 0, 0, 200),
        (6, "claude_4_5_sonnet", 12_000, None, None, 100)]
    assert {r.session_key for r in requests} == {"1777000000000"}
    assert [r.usage.semantics for r in requests] == ["cline-history"] * 3
    assert requests[2].metadata["cache_reads_and_writes"] == 10_500
    assert requests[2].metadata["cost"] == 0.012
    assert [r.metadata["mode"] for r in requests] == ["plan", "act", "act"]
    # timestamp: the user message the call answers
    assert requests[1].timestamp.isoformat() == "2026-04-24T03:06:50"
    # body: the history before the call
    assert [len(r.body["messages"]) for r in requests] == [1, 3, 5]
    assert requests[0].output["content"][0]["name"] == "list_files"
    assert [[(e.kind, e.detail, e.source_line) for e in r.events] for r in requests] == [
        [], [], [("model-change", "claude_4_5_opus -> claude_4_5_sonnet", 6)]]


def test_report_counts() -> None:
    result = runner.invoke(app, ["report", str(TASK), "--json"])
    assert result.exit_code == 0, result.output
    basis = json.loads(result.stdout)["ledger"]["basis"]
    # the third call's reads and writes are one sum: outside the cache basis
    assert (basis["requests"], basis["prompt_tokens"], basis["cached_tokens"],
            basis["outside_requests"], basis["outside_prompt_tokens"]) == (
        2, 20_000, 0, 1, 12_000)


def test_history_without_metrics_says_where_the_usage_is(tmp_path: Path) -> None:
    history = json.loads(HISTORY.read_text())
    for message in history:
        message.pop("metrics", None)
        message.pop("modelInfo", None)
    path = tmp_path / "tasks" / "1777000000000" / "api_conversation_history.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(history))
    requests, skips = read_requests(path)
    assert requests == []
    assert len(skips) == 1
    assert "no assistant message carries metrics.tokens" in skips[0].reason
    assert "ui_messages.json" in skips[0].reason


def test_beside_ui_messages_it_stays_a_companion(tmp_path: Path) -> None:
    task = tmp_path / "tasks" / "1777000000000"
    task.mkdir(parents=True)
    (task / "api_conversation_history.json").write_bytes(HISTORY.read_bytes())
    (task / "ui_messages.json").write_text(json.dumps([
        {"ts": 1777000000050, "type": "say", "say": "task", "text": "Add a --verbose flag"},
        {"ts": 1777000000200, "type": "say", "say": "api_req_started",
         "text": json.dumps({"tokensIn": 9000, "tokensOut": 500, "cacheWrites": 0,
                             "cacheReads": 0})}]))
    result = runner.invoke(app, ["report", str(task), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["ledger"]["basis"]["requests"] == 1
