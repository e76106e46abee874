"""A usage-only log whose cached values sit on a self-hosted engine's blocks: the report
says it could not replay it, and why, instead of naming an engine it replayed with.

Shaped as two real public Cline tasks (Jeehunter/mcp-vscode-server `ui_messages.json` and
`MCP/ui_messages.json`, not copied: the repository has no licence): an older Cline that
writes no `modelInfo`, no `api_conversation_history.json` beside it, and every cache read a
multiple of 64 tokens. On them the report said `replayed with vllm: cached values are
multiples of 64 tokens: a self-hosted engine's blocks` and then `no cache replay: nothing
replayable`: the file was planned for a replay it had no prompts for.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from prefixscope.cli.main import app

runner = CliRunner()
T0 = 1760534080248


def _task(tmp_path: Path) -> Path:
    # (tokensIn, cacheWrites, cacheReads): reads 0, then odd multiples of 64 (175, 263, 267)
    usage = [(0, 11_145, 0), (0, 522, 11_200), (0, 292, 16_832), (0, 410, 17_088)]
    messages = [{"ts": T0 - 5, "type": "say", "say": "text", "text": "build an MCP server"}]
    for i, (tokens_in, writes, reads) in enumerate(usage):
        info = {"request": "<task>...</task>", "tokensIn": tokens_in, "tokensOut": 40,
                "cacheWrites": writes, "cacheReads": reads, "cost": 0.001}
        messages.append({"ts": T0 + i * 4000, "type": "say", "say": "api_req_started",
                         "text": json.dumps(info), "conversationHistoryIndex": 2 * i - 1})
    task = tmp_path / "saoudrizwan.claude-dev" / "tasks" / str(T0)
    task.mkdir(parents=True)
    (task / "ui_messages.json").write_text(json.dumps(messages))
    return task


def test_a_usage_only_log_on_blocks_is_not_said_to_be_replayed(tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", str(_task(tmp_path)), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    notes = doc["notes"]
    assert not [n for n in notes if n.startswith("replayed with")], notes
    (why,) = [n for n in notes if n.startswith("no cache replay")]
    assert "multiples of 64 tokens" in why and "no request bodies to replay" in why
    assert doc["summary"]["replay"] is None
    # what the log says is still read: 4 calls, their prompts and reads as logged
    basis = doc["summary"]["basis"]
    assert (basis["requests"], basis["prompt_tokens"], basis["cached_tokens"]) == (
        4, 11_145 + (522 + 11_200) + (292 + 16_832) + (410 + 17_088), 11_200 + 16_832 + 17_088)
