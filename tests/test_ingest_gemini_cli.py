"""Gemini CLI chat recordings: one request per model response, usage from `tokens`.

Expected values: the real session in tests/data/real/gemini-cli/ comes with its source's
own expected totals (Mai0313/VibeCodingTracker tests/fixtures/sessions/gemini.expected.json,
`conversationUsage`: gemini-3-flash-preview input 113397 without cache reads, cache
reads 48951, output 1886, thoughts 1689; gemini-3.1-pro-preview input 40238, output
266, thoughts 452); the handmade files are checked by hand arithmetic on their `tokens`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import FIXTURES

from prefixscope.ingest import read_requests
from prefixscope.ingest.formats import all_formats, gemini_cli
from prefixscope.ingest.probing import probe
from prefixscope.ingest.source import Source
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths

REAL_FILE = "gemini-cli/gemini.jsonl"
LEGACY = next((FIXTURES / "gemini-cli" / "legacy").glob("*.json"))
SESSION = "0ab84937-9fe7-4284-986a-33c832af0b6a"


def _read(path: Path):
    requests, skips = read_requests(path)
    assert skips == []
    return requests


def _write(path: Path, lines: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _sniffers(path: Path) -> list[str]:
    pr = probe(Source.from_path(path))
    return [m.NAME for m in all_formats() if m.sniff(pr)]


class TestRealSession:
    def test_detected_as_gemini_cli_only(self, real: Path) -> None:
        assert _sniffers(real / REAL_FILE) == ["gemini-cli"]
        assert _sniffers(LEGACY) == ["gemini-cli"]

    def test_totals_match_the_sources_expected_usage(self, real: Path) -> None:
        calls = _read(real / REAL_FILE)
        flash = [r for r in calls if r.model == "gemini-3-flash-preview"]
        pro = [r for r in calls if r.model == "gemini-3.1-pro-preview"]
        assert (len(flash), len(pro)) == (5, 1)
        # prompt tokens include cache reads: 113397 + 48951
        assert sum(r.usage.prompt_tokens for r in flash) == 113397 + 48951
        assert sum(r.usage.cached_tokens for r in flash) == 48951
        assert sum(r.usage.output_tokens for r in flash) == 1886 + 1689  # thoughts included
        assert sum(r.metadata["thoughts_tokens"] for r in flash) == 1689
        assert [(r.usage.prompt_tokens, r.usage.cached_tokens, r.usage.output_tokens)
                for r in pro] == [(40238, 0, 266 + 452)]
        assert {r.usage.semantics for r in calls} == {"gemini"}
        assert {r.usage.cache_write_tokens for r in calls} == {None}

    def test_one_request_per_response_not_per_line(self, real: Path) -> None:
        # 11 `gemini` lines, 6 ids: a response is re-appended when its tool calls are added
        calls = _read(real / REAL_FILE)
        assert [r.source_line for r in calls] == [6, 9, 12, 15, 20, 24]
        assert {r.session_key for r in calls} == {SESSION}
        assert {r.session_key_source for r in calls} == {"gemini-cli.sessionId"}
        assert calls[0].native_id == "52e62e67-5d6b-4a2c-b12d-11b87fe3e4a4"
        assert calls[0].metadata["projectHash"].startswith("9da8b3df")

    def test_history_rebuilt_before_each_call(self, real: Path) -> None:
        first, second, *_, last = _read(real / REAL_FILE)
        assert first.endpoint == "openai-chat"
        assert [m["role"] for m in first.body["messages"]] == ["user"]
        assert first.metadata["approximate"] == ["system", "tools", "protocol"]
        # call 1's five tool calls and their five results, before call 2
        roles = [m["role"] for m in second.body["messages"]]
        assert roles == ["user", "assistant", "tool", "tool", "tool", "tool", "tool"]
        assistant = second.body["messages"][1]
        assert [c["function"]["name"] for c in assistant["tool_calls"]] == [
            "update_topic", "read_file", "read_file", "read_file", "read_file"]
        assert second.body["messages"][2]["tool_call_id"] == assistant["tool_calls"][0]["id"]
        # every call's history extends the previous call's
        calls = _read(real / REAL_FILE)
        for a, b in zip(calls, calls[1:], strict=False):
            assert b.body["messages"][:len(a.body["messages"])] == a.body["messages"]
        assert last.body["messages"][-1] == {
            "role": "user",
            "content": "幫我做一個小修改 請幫我將上面確保執行時要透過 uv run 來執行 避免環境有問題"}


class TestLegacyDocument:
    def test_three_calls_by_hand(self) -> None:
        calls = _read(LEGACY)
        assert [(r.usage.prompt_tokens, r.usage.cached_tokens, r.usage.output_tokens)
                for r in calls] == [(7000, 0, 100), (7200, 6000, 12), (8300, 7000, 5)]
        # g3: total 8305 = 1300 + 5 + 7000, so its `input` left the cached tokens out
        assert [r.usage.semantics for r in calls] == [
            "gemini", "gemini", "gemini:input-excludes-cached"]
        assert [r.source_position for r in calls] == [1, 2, 5]
        assert [r.model for r in calls] == ["gemini-2.5-pro", "gemini-2.5-pro",
                                            "gemini-2.5-flash"]
        third = calls[2]
        assert [m["role"] for m in third.body["messages"]] == [
            "user", "assistant", "tool", "assistant", "user"]  # the info message is UI-only
        assert third.body["messages"][-1]["content"] == "thanks"
        assert third.output == {"role": "assistant", "content": "You're welcome."}

    def test_resumed_copy_stored_once(self, tmp_path: Path) -> None:
        # resuming a legacy .json copies its messages into a .jsonl with the same ids
        doc = json.loads(LEGACY.read_text())
        chats = tmp_path / "tmp" / "hash" / "chats"
        chats.mkdir(parents=True)
        shutil.copy(LEGACY, chats / LEGACY.name)
        head = {k: doc[k] for k in ("sessionId", "projectHash", "startTime", "lastUpdated")}
        _write(chats / (LEGACY.stem + ".jsonl"), [head, *doc["messages"]])
        with Store.open(tmp_path / "s.duckdb") as store:
            result = ingest_paths([str(tmp_path / "tmp")], store)
            rows = store.run("SELECT count(*), sum(prompt_tokens), count(DISTINCT session_key) "
                             "FROM requests")
        assert rows == [(3, 22500, 1)]
        assert result.skipped == 0


class TestJsonLines:
    def test_rewind_keeps_calls_and_cuts_history(self, tmp_path: Path) -> None:
        tokens = {"input": 100, "output": 10, "cached": 0, "thoughts": 0, "tool": 0,
                  "total": 110}
        path = _write(tmp_path / "session-2026-01-01T00-00-aaaaaaaa.jsonl", [
            {"sessionId": "s1", "projectHash": "h", "startTime": "2026-01-01T00:00:00Z"},
            {"id": "u1", "timestamp": "2026-01-01T00:00:01Z", "type": "user", "content": "a"},
            {"id": "g1", "timestamp": "2026-01-01T00:00:02Z", "type": "gemini",
             "content": "A", "model": "gemini-2.5-flash"},
            {"id": "g1", "timestamp": "2026-01-01T00:00:02Z", "type": "gemini",
             "content": "A", "model": "gemini-2.5-flash", "tokens": tokens},
            {"$rewindTo": "u1"},
            {"id": "u2", "timestamp": "2026-01-01T00:00:03Z", "type": "user", "content": "b"},
            {"id": "g2", "timestamp": "2026-01-01T00:00:04Z", "type": "gemini",
             "content": "B", "model": "gemini-2.5-flash", "tokens": tokens},
            {"id": "g3", "timestamp": "2026-01-01T00:00:05Z", "type": "gemini",
             "content": "summary", "tokens": None},  # synthetic: no model, no tokens
            {"$set": {"lastUpdated": "2026-01-01T00:00:05Z"}},
        ])
        g1, g2 = _read(path)
        assert (g1.usage.prompt_tokens, g2.usage.prompt_tokens) == (100, 100)
        assert g1.source_line == 3
        assert g2.body["messages"] == [{"role": "user", "content": "b"}]

    def test_message_without_tokens_has_no_usage(self, tmp_path: Path) -> None:
        path = _write(tmp_path / "s.jsonl", [
            {"sessionId": "s1", "projectHash": "h"},
            {"id": "g1", "timestamp": "2026-01-01T00:00:02Z", "type": "gemini",
             "content": "A", "model": "gemini-2.5-flash"}])
        (call,) = _read(path)
        assert call.usage.prompt_tokens is None and call.usage.output_tokens is None
        assert call.body is None

    def test_bad_lines_are_skips(self, tmp_path: Path) -> None:
        path = tmp_path / "s.jsonl"
        path.write_text('{"sessionId": "s1", "projectHash": "h"}\n{broken\n[1]\n{"x": 1}\n')
        requests, skips = read_requests(path)
        assert requests == []
        assert [s.line for s in skips] == [2, 3, 4]

    def test_subagent_under_its_parent(self, tmp_path: Path) -> None:
        path = _write(tmp_path / "chats" / "parent-1" / "child-1.jsonl", [
            {"sessionId": "child-1", "projectHash": "h", "kind": "subagent"},
            {"id": "g1", "timestamp": "2026-01-01T00:00:02Z", "type": "gemini",
             "content": "A", "model": "gemini-2.5-flash",
             "tokens": {"input": 5, "output": 1, "cached": 0, "total": 6}}])
        (call,) = _read(path)
        assert (call.session_key, call.parent_key) == ("child-1", "parent-1")

    def test_directory_walk_bucket_and_simulate(self, real: Path, tmp_path: Path) -> None:
        from prefixscope.analyses.bucket import bucket_store
        from prefixscope.analyses.simulate import SimulateOptions, simulate_store

        chats = tmp_path / ".gemini" / "tmp" / "9da8b3df" / "chats"
        chats.mkdir(parents=True)
        shutil.copy(real / REAL_FILE, chats / "session-2026-04-23T12-52-0ab84937.jsonl")
        with Store.open(tmp_path / "s.duckdb") as store:
            result = ingest_paths([str(tmp_path / ".gemini")], store)
            assert result.skipped == 0
            rows = store.run("SELECT count(*), count(DISTINCT session_key), sum(cached_tokens) "
                             "FROM requests")
            assert rows == [(6, 1, 48951)]
            report = bucket_store(store)
            assert report.totals.requests == 6
            assert report.totals.cached_tokens == 48951
            sim = simulate_store(store, SimulateOptions(engine="openai"))
            assert sim.requests == 6


def test_sniff_refuses_other_jsonl(tmp_path: Path) -> None:
    other = tmp_path / "x.jsonl"
    other.write_text('{"sessionId": "s", "type": "user"}\n')
    assert not gemini_cli.sniff(probe(Source.from_path(other)))
