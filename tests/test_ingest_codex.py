"""Codex CLI rollouts: one request per model call, usage from token_count (formats/codex.md).

Expected values: ccusage's own assertions on its fixtures (tests/fixtures/codex/README.md
says which test), and hand arithmetic on the handmade rollout, whose per-call usage sums
to its last cumulative `total_token_usage`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import FIXTURES

from prefixscope.ingest import read_requests
from prefixscope.ingest.formats import codex
from prefixscope.ingest.probing import probe
from prefixscope.ingest.source import Source
from prefixscope.model.keys import compaction_marker
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths

CX = FIXTURES / "codex"
CCUSAGE = CX / "ccusage"
HANDMADE = next((CX / "handmade" / "sessions").rglob("rollout-*.jsonl"))
SESSION = "0199a0b1-0000-7000-8000-00000000000a"


def _counts(r) -> tuple:
    u = r.usage
    return (u.prompt_tokens, u.cached_tokens, u.output_tokens)


def _read(path: Path):
    requests, skips = read_requests(path)
    assert skips == []
    return requests


class TestDetection:
    def test_every_fixture_is_codex(self) -> None:
        for path in CX.rglob("*.jsonl"):
            assert codex.sniff(probe(Source.from_path(path))), path
            requests, _ = read_requests(path)
            assert {r.source_format for r in requests} == {"codex"}, path

    def test_other_jsonl_not_claimed(self, tmp_path: Path) -> None:
        other = tmp_path / "x.jsonl"
        other.write_text('{"type": "event_msg", "timestamp": "2026", "payload": "text"}\n')
        assert not codex.sniff(probe(Source.from_path(other)))


class TestCcusageFixtures:
    def test_session_alpha_last_token_usage(self) -> None:
        # apps/ccusage/test/fixtures/codex: last_token_usage per event; the file's own final
        # total_token_usage is input 3500, cached 750, output 425 = 1000+2500, 250+500, 125+300.
        first, second = _read(CCUSAGE / "sessions/project-alpha/session-alpha.jsonl")
        assert _counts(first) == (1000, 250, 125)
        assert _counts(second) == (2500, 500, 300)
        assert sum(r.usage.prompt_tokens for r in (first, second)) == 3500
        assert sum(r.usage.cached_tokens for r in (first, second)) == 750
        assert sum(r.usage.output_tokens for r in (first, second)) == 425
        assert first.usage.semantics == "codex:last"
        # the event's own `info.model` over the turn_context's (ccusage reads it too)
        assert (first.model, second.model) == ("gpt-5.2-codex", "gpt-5.3-codex")
        assert first.session_key == "session-alpha"
        assert first.body is None  # token counts alone: nothing to rebuild

    def test_data_loader_total_diff(self) -> None:
        # data-loader.ts: 2 events; first 1200 input / 200 cached; second (totals only)
        # 800 / 100, model gpt-5.
        first, second = _read(CCUSAGE / "data-loader/project-1.jsonl")
        assert (first.usage.prompt_tokens, first.usage.cached_tokens) == (1200, 200)
        assert (second.usage.prompt_tokens, second.usage.cached_tokens) == (800, 100)
        assert second.usage.output_tokens == 300  # 800 - 500
        assert second.usage.semantics == "codex:total-diff"
        assert first.model == second.model == "gpt-5"

    def test_branch_history_stored_once(self, tmp_path: Path) -> None:
        # loader.rs dedupes_copied_branch_history_across_session_files: 2 events, the parent's
        # 1000/100/200 and the branch's 600/200/250; either reading order.
        for order in ((0, 1), (1, 0)):
            files = sorted((CCUSAGE / "branch").glob("*.jsonl"))
            with Store.open(tmp_path / f"s{order[0]}.duckdb") as store:
                for i in order:
                    ingest_paths([str(files[i])], store)
                rows = store.run("SELECT source_file, prompt_tokens, cached_tokens, "
                                 "output_tokens FROM requests ORDER BY timestamp")
            assert [(Path(f).stem, p, c, o) for f, p, c, o in rows] == [
                ("2026-05-12T08-00-00-parent", 1000, 100, 200),
                ("2026-05-12T08-02-00-branch", 600, 200, 250)]


class TestHandmadeRollout:
    def test_one_request_per_call(self) -> None:
        # 7 token_count events: a null info, a re-emission (same totals) and an all-zero
        # context-window marker are no calls; 3 calls whose usage sums to the last totals
        # (input 11000, cached 5000, output 170).
        calls = _read(HANDMADE)
        assert [_counts(r) for r in calls] == [(5000, 0, 120), (5200, 4992, 30), (800, 8, 20)]
        assert sum(r.usage.prompt_tokens for r in calls) == 11000
        assert sum(r.usage.cached_tokens for r in calls) == 5000
        assert sum(r.usage.output_tokens for r in calls) == 170
        assert [r.usage.semantics for r in calls] == ["codex:last", "codex:last",
                                                      "codex:total-diff"]
        assert [r.source_line for r in calls] == [9, 14, 17]
        assert {r.session_key for r in calls} == {SESSION}
        assert {r.model for r in calls} == {"gpt-5-codex"}
        assert calls[0].client == "codex_cli_rs"
        assert calls[0].metadata["approval_policy"] == "on-request"
        assert calls[0].metadata["cli_version"] == "0.46.0"
        assert calls[0].metadata["reasoning_output_tokens"] == 64

    def test_bodies_rebuilt_before_each_call(self) -> None:
        first, second, third = _read(HANDMADE)
        assert first.endpoint == "openai-responses"
        assert set(first.body) == {"model", "input"}
        assert first.metadata["approximate"] == ["tools", "instructions"]
        texts = [i["content"][0]["text"] for i in first.body["input"]]
        assert texts[-1] == "fix the failing test" and len(texts) == 3
        assert [i["type"] for i in first.output] == ["reasoning", "function_call"]
        # call 2: call 1's history + its output + the tool's output; no ghost snapshot
        assert [i["type"] for i in second.body["input"]] == [
            "message", "message", "message", "reasoning", "function_call",
            "function_call_output"]
        assert second.body["input"][:3] == first.body["input"]
        assert second.output[0]["role"] == "assistant"
        # call 3: after a local compaction, the summary and the new user message
        assert [i["content"][0]["text"][:7] for i in third.body["input"]] == ["Another", "now add"]
        assert third.metadata["compaction"] == {"kind": "local", "line": 15,
                                                "replacement_history": False}
        assert "history-after-compaction" in third.metadata["approximate"]
        assert compaction_marker(third) == "codex"
        assert compaction_marker(second) is None

    def test_remote_compaction_item(self, tmp_path: Path) -> None:
        lines = [
            {"timestamp": "2026-01-01T00:00:00Z", "type": "session_meta",
             "payload": {"id": "s1", "base_instructions": {"text": "You are Codex."}}},
            {"timestamp": "2026-01-01T00:00:01Z", "type": "compacted",
             "payload": {"message": "", "replacement_history": [
                 {"type": "message", "role": "user",
                  "content": [{"type": "input_text", "text": "hi"}]},
                 {"type": "compaction", "encrypted_content": "gAAA"}]}},
            {"timestamp": "2026-01-01T00:00:02Z", "type": "event_msg",
             "payload": {"type": "token_count", "info": {"last_token_usage": {
                 "input_tokens": 10, "cached_input_tokens": 0, "output_tokens": 1}}}},
        ]
        path = tmp_path / "rollout-2026-01-01T00-00-00-x.jsonl"
        path.write_text("".join(json.dumps(x) + "\n" for x in lines))
        (call,) = _read(path)
        assert call.body["instructions"] == "You are Codex."
        # the encrypted compaction item is sent, and its content is not in the log
        assert call.metadata["approximate"] == ["tools", "compaction-item"]
        assert call.metadata["compaction"]["kind"] == "remote"
        assert compaction_marker(call) == "codex"

    def test_the_context_window_marker_codex_writes_is_no_call_and_the_next_call_counts(
            self, tmp_path: Path) -> None:
        # On a context-window error Codex replaces its running totals by the window
        # (`TokenUsageInfo::fill_to_context_window`: total {total_tokens: window}, last
        # {total_tokens: window - the previous total}) and emits that state; every later
        # event (a rate-limit refresh: line 4) emits the state as it then is, so the calls
        # before the marker are never emitted again after it; the next call's totals add its
        # usage to the marker's. 2 calls: (1,000, 0, 10) and (1,500, 1,000, 20).
        def count(total: dict, last: dict) -> dict:
            return {"timestamp": "2026-01-01T00:00:02Z", "type": "event_msg", "payload": {
                "type": "token_count", "info": {"total_token_usage": total,
                                                "last_token_usage": last,
                                                "model_context_window": 272_000}}}

        def usage(inp: int, cached: int, out: int, total: int) -> dict:
            return {"input_tokens": inp, "cached_input_tokens": cached, "output_tokens": out,
                    "reasoning_output_tokens": 0, "total_tokens": total}

        marker = count(usage(0, 0, 0, 272_000), usage(0, 0, 0, 272_000 - 1_010))
        lines = [
            {"timestamp": "2026-01-01T00:00:00Z", "type": "session_meta", "payload": {"id": "s1"}},
            count(usage(1_000, 0, 10, 1_010), usage(1_000, 0, 10, 1_010)),
            marker, marker,
            count(usage(1_500, 1_000, 20, 273_520), usage(1_500, 1_000, 20, 1_520)),
        ]
        path = tmp_path / "rollout-2026-01-01T00-00-00-s1.jsonl"
        path.write_text("".join(json.dumps(x) + "\n" for x in lines))
        calls = _read(path)
        assert [_counts(r) for r in calls] == [(1_000, 0, 10), (1_500, 1_000, 20)]
        assert [r.source_line for r in calls] == [2, 5]

    def test_a_line_of_a_type_it_does_not_read_is_a_skip_naming_the_type(
            self, tmp_path: Path) -> None:
        # Codex 0.146's `world_state` and `inter_agent_communication_metadata` lines are
        # well-formed rollout lines of types this reader does not know; a line without a
        # payload object is not a rollout line at all.
        lines = [
            {"timestamp": "2026-08-03T10:48:56Z", "type": "session_meta", "payload": {"id": "s1"}},
            {"timestamp": "2026-08-03T10:48:56Z", "type": "world_state",
             "payload": {"full": True, "state": {"agents_md": {"text": "be brief"}}}},
            {"timestamp": "2026-08-03T10:48:57Z", "type": "inter_agent_communication_metadata",
             "payload": {}},
            {"timestamp": "2026-08-03T10:48:57Z", "type": "response_item", "payload": "text"},
            {"timestamp": "2026-08-03T10:48:58Z", "type": "event_msg",
             "payload": {"type": "token_count", "info": {"last_token_usage": {
                 "input_tokens": 10, "cached_input_tokens": 0, "output_tokens": 1}}}},
        ]
        path = tmp_path / "rollout-2026-08-03T10-48-56-s1.jsonl"
        path.write_text("".join(json.dumps(x) + "\n" for x in lines))
        (call,), skips = read_requests(path)
        assert _counts(call) == (10, 0, 1)
        assert [(s.line, s.reason) for s in skips] == [
            (2, "a Codex `world_state` line: a line type this reader does not read (a newer "
                "Codex's), passed over"),
            (3, "a Codex `inter_agent_communication_metadata` line: a line type this reader "
                "does not read (a newer Codex's), passed over"),
            (4, "not a Codex rollout line ({timestamp, type, payload})")]

    def test_directory_walk(self, tmp_path: Path) -> None:
        home = tmp_path / ".codex"
        for sub in ("sessions", "archived_sessions"):
            shutil.copytree(CX / "handmade" / "sessions", home / sub)
        with Store.open(tmp_path / "s.duckdb") as store:
            result = ingest_paths([str(home)], store)
            rows = store.run("SELECT count(*), sum(prompt_tokens) FROM requests")
        assert rows == [(3, 11000)]  # the archived copy is the same calls
        assert result.skipped == 0
