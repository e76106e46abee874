"""Gemini CLI's chat compression and model switches, read from the chat recording as session
events (issue 35).

The fixture (tests/fixtures/gemini-cli/compression/) is hand-built in the shape Gemini CLI
writes (google-gemini/gemini-cli: `ChatRecordingService.updateMessagesFromHistory` writes
`{"$set": {"messages": [...]}}` when `GeminiChat.setHistory` replaces the history with the
compressed one -- the `<state_snapshot>` summary, the model's "Got it. Thanks for the
additional context!" and the turns kept -- and `useHistoryManager` records the UI's
``Context compressed from X% to Y%.`` as an ``info`` message). Ledger numbers by hand
(Gemini: prompt = `input`, cache reads included):

  call  model             prompt  cached  ledger
  1     gemini-2.5-pro    20,000       0  cold 20,000
  2     gemini-2.5-pro    20,600  20,000  new 600 (an intact read of call 1's prompt)
  --    compression (line 9 `$set`, line 10 info): history 4 messages -> summary + 2 kept
  3     gemini-2.5-pro     6,000       0  compaction 6,000
  4     gemini-2.5-flash   6,700       0  break (model-change) 6,000 + new 700
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import FIXTURES
from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.ingest import read_requests
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths

runner = CliRunner()
FILE = FIXTURES / "gemini-cli" / "compression" / "session-2026-04-23T13-00-5f1c2a9e.jsonl"
SESSION = "5f1c2a9e-7b3d-4c1e-9a2f-6d8e0b4c3a71"


def _lines() -> list[dict]:
    return [json.loads(x) for x in FILE.read_text().splitlines()]


def _events(path: Path) -> list[list[tuple[str, str, int | None]]]:
    requests, skips = read_requests(path)
    assert skips == []
    return [[(e.kind, e.detail, e.source_line) for e in r.events] for r in requests]


def _write(tmp_path: Path, lines: list[dict]) -> Path:
    path = tmp_path / FILE.name
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_compression_and_model_switch_are_the_next_calls_events() -> None:
    assert _events(FILE) == [
        [], [],
        # the `$set` (line 9) and the info message (line 10): one compaction
        [("compaction", "history replaced: 4 -> 4 messages (2 dropped, 2 new)", 9)],
        [("model-change", "gemini-2.5-pro -> gemini-2.5-flash", 16)],
    ]


def test_the_ledger_books_them() -> None:
    result = runner.invoke(app, ["report", str(FILE), "--json"])
    assert result.exit_code == 0, result.output
    ledger = json.loads(result.stdout)["ledger"]
    assert ledger["basis"]["prompt_tokens"] == 53_300
    assert ledger["basis"]["cached_tokens"] == 20_000
    assert ledger["missed_tokens"] == 33_300
    by = ledger["by_cause"]
    assert by["break"]["by_kind"] == {"model-change": 6_000}
    assert {c: v for c, v in by.items() if c != "break" and v} == {
        "cold": 20_000, "new": 1_300, "compaction": 6_000}


def test_the_info_message_alone_is_a_compaction(tmp_path: Path) -> None:
    # a version that wrote no `$set` history: the UI's info line still records it
    lines = [x for x in _lines() if "messages" not in x.get("$set", {})]
    assert _events(_write(tmp_path, lines))[2] == [
        ("compaction", "Context compressed from 62% to 9%.", 9)]


def test_compress_command_info_is_a_compaction(tmp_path: Path) -> None:
    lines = [x for x in _lines() if "messages" not in x.get("$set", {})]
    for x in lines:
        if x.get("type") == "info":
            x["content"] = "Chat history compressed from 41230 to 5120 tokens."
    assert _events(_write(tmp_path, lines))[2] == [
        ("compaction", "Chat history compressed from 41230 to 5120 tokens.", 9)]


def test_rollback_and_masking_are_no_compaction(tmp_path: Path) -> None:
    lines = [x for x in _lines() if x.get("type") != "info"]
    kept = next(x for x in lines if "messages" in x.get("$set", {}))
    turns = [x for x in lines[:kept_at(lines)] if x.get("type") in ("user", "gemini")]
    assert len(turns) == 4
    # a cancelled request rolled back: turns dropped, none added
    kept["$set"]["messages"] = turns[:2]
    assert _events(_write(tmp_path, lines))[2] == []
    # tool output masked: the same turns, new content
    kept["$set"]["messages"] = [{**turns[0], "content": [{"text": "[masked]"}]}, *turns[1:]]
    assert _events(_write(tmp_path, lines))[2] == []


def kept_at(lines: list[dict]) -> int:
    return next(i for i, x in enumerate(lines) if "messages" in x.get("$set", {}))


def test_session_events_table(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.duckdb") as store:
        ingest_paths([str(FILE)], store)
        ingest_paths([str(FILE)], store)  # kept once
        rows = store.run("SELECT session_key, kind, source_line FROM session_events "
                         "ORDER BY source_line")
    assert rows == [(SESSION, "compaction", 9), (SESSION, "model-change", 16)]
