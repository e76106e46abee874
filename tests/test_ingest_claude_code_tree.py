"""Claude Code session trees (issue 13, item 3): sub-agent and compaction transcripts, `/btw`
replays, copies of one call in several files, transcripts that grow, detection past
non-call records.

The oracle is ccusage's own tests (tests/fixtures/claude-code/ccusage/README.md names each
test and what it asserts); the totals below are those assertions.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES

from prefixscope.ingest import read_requests
from prefixscope.ingest.formats import claude_code
from prefixscope.ingest.probing import probe
from prefixscope.ingest.source import Source
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths

CCUSAGE = FIXTURES / "claude-code" / "ccusage"
CC = FIXTURES / "claude-code"


def _ingest(store_path: Path, *paths: Path) -> list[dict]:
    """Ingest `paths` one run each, in order; the stored calls, oldest first."""
    with Store.open(store_path) as store:
        for path in paths:
            ingest_paths([str(path)], store)
        rel = store.con.execute(
            "SELECT native_id, session, turn, session_key, parent_key, prompt_tokens, "
            "cached_tokens, output_tokens, model, metadata FROM turns "
            "ORDER BY timestamp, source_file, source_line")
        cols = [d[0] for d in rel.description]
        return [dict(zip(cols, row, strict=True)) for row in rel.fetchall()]


class TestBtwReplays:
    """ccusage `keeps_parent_usage_when_sidechain_replays_message_with_new_request_id`:
    2 entries, the parent's 20 cache-read tokens, the answer's 700."""

    def test_one_call_per_message_id_in_the_session_tree(self, tmp_path: Path) -> None:
        calls = _ingest(tmp_path / "s.duckdb", CCUSAGE / "btw")
        assert sorted((c["native_id"], c["cached_tokens"]) for c in calls) == [
            ("msg-parent", 20), ("msg-sidechain-answer", 700)]
        assert sum(c["cached_tokens"] for c in calls) == 720  # was 50,720 (70x)

    @pytest.mark.parametrize("order", ["aside first", "parent first"])
    def test_the_parents_record_wins_whatever_the_file_order(self, tmp_path: Path,
                                                             order: str) -> None:
        root = CCUSAGE / "btw" / "projects" / "project-a"
        parent = root / "session-a.jsonl"
        aside = root / "session-a" / "subagents" / "agent-aside_question-1.jsonl"
        files = (aside, parent) if order == "aside first" else (parent, aside)
        calls = {c["native_id"]: c for c in _ingest(tmp_path / "s.duckdb", *files)}
        assert set(calls) == {"msg-parent", "msg-sidechain-answer"}
        assert calls["msg-parent"]["cached_tokens"] == 20
        assert calls["msg-parent"]["session"] == "session-a"
        assert calls["msg-parent"]["parent_key"] is None

    def test_replay_read_first_then_parent_twice(self, tmp_path: Path) -> None:
        # ccusage `refreshes_dedupe_indexes_when_parent_replaces_sidechain_replay`
        root = CCUSAGE / "btw-replay-first" / "projects" / "project-a"
        calls = _ingest(tmp_path / "s.duckdb",
                        root / "session-a" / "subagents" / "agent-aside_question-1.jsonl",
                        root / "session-a.jsonl")
        assert [(c["native_id"], c["cached_tokens"]) for c in calls] == [("msg-parent", 20)]

    def test_the_aside_is_a_session_of_its_own_under_the_main_one(self, tmp_path: Path) -> None:
        calls = {c["native_id"]: c for c in _ingest(tmp_path / "s.duckdb", CCUSAGE / "btw")}
        answer = calls["msg-sidechain-answer"]
        assert answer["session"] == "session-a/agent-aside_question-1"
        assert answer["parent_key"] == "session-a"


class TestCopiesOfOneCall:
    @pytest.mark.parametrize("names", [("newer.jsonl", "older.jsonl"),
                                       ("older.jsonl", "newer.jsonl")])
    def test_the_most_complete_copy_wins_across_files(self, tmp_path: Path, names) -> None:
        # ccusage `keeps the duplicate with more usage tokens across files`: 200 in / 100 out
        root = CCUSAGE / "across-files" / "projects"
        calls = _ingest(tmp_path / "s.duckdb", *(root / n for n in names))
        assert [(c["native_id"], c["prompt_tokens"], c["output_tokens"]) for c in calls] == [
            ("msg_123", 200, 100)]

    @pytest.mark.parametrize("names", [("newer.jsonl", "older.jsonl"),
                                       ("older.jsonl", "newer.jsonl")])
    def test_the_most_complete_copy_wins_within_one_ingest(self, tmp_path: Path,
                                                          names) -> None:
        root = CCUSAGE / "across-files" / "projects"
        with Store.open(tmp_path / "s.duckdb") as store:
            ingest_paths([str(root / n) for n in names], store)
            rows = store.run("SELECT native_id, prompt_tokens, output_tokens, timestamp "
                             "FROM requests WHERE duplicate_of IS NULL")
        assert [(i, p, o, t.date().isoformat()) for i, p, o, t in rows] == [
            ("msg_123", 200, 100, "2025-01-15")]

    @pytest.mark.parametrize("fuller_name", ["a.jsonl", "b.jsonl"])
    @pytest.mark.parametrize("read", ["fuller first", "fuller last"])
    @pytest.mark.parametrize("runs", ["one ingest", "two ingests"])
    def test_the_fuller_copy_in_another_sessions_transcript_is_kept(
            self, tmp_path: Path, fuller_name: str, read: str, runs: str) -> None:
        # ccusage's two copies of msg_123 (`keeps the duplicate with more usage tokens
        # across files`), each line given the sessionId of the transcript holding it, as
        # when a call is copied into a resumed session's file: two session trees, so two
        # stored rows, linked as one call. The fuller copy (200/100, dated later) is the
        # one kept whichever file name sorts first and whichever is read first.
        src = CCUSAGE / "across-files" / "projects"
        other = "b.jsonl" if fuller_name == "a.jsonl" else "a.jsonl"
        fuller, partial = tmp_path / fuller_name, tmp_path / other
        for path, origin, session in ((fuller, "newer.jsonl", "sess-resumed"),
                                      (partial, "older.jsonl", "sess-first")):
            line = json.loads((src / origin).read_text())
            path.write_text(json.dumps({**line, "sessionId": session}) + "\n")
        files = [fuller, partial] if read == "fuller first" else [partial, fuller]
        with Store.open(tmp_path / "s.duckdb") as store:
            if runs == "one ingest":
                ingest_paths([str(f) for f in files], store)
            else:
                for f in files:
                    ingest_paths([str(f)], store)
            rows = store.run("SELECT native_id, prompt_tokens, output_tokens, "
                             "duplicate_of IS NULL FROM requests ORDER BY timestamp")
            totals = store.run("SELECT sum(prompt_tokens), sum(output_tokens) FROM requests "
                               "WHERE duplicate_of IS NULL")
        assert rows == [("msg_123", 100, 50, False), ("msg_123", 200, 100, True)]
        assert totals == [(200, 100)]

    def test_one_call_in_two_sessions_transcripts_is_one_call_in_every_count(self) -> None:
        # the fixture (across-sessions/README.md): msg_123 + req_456 at 100 / 50 in
        # sess-first, at 200 / 100 in sess-resumed: one call, the fuller copy kept -- in
        # the store, in the per-format summary (was 2 calls, 300 prompt tokens) and in
        # the usage lint (was "none of its 2 requests reports cached tokens")
        from prefixscope.analyses.usage_lint import lint_usage

        root = CC / "across-sessions"
        store = Store.open(":memory:")
        result = ingest_paths([str(root / "sess-first.jsonl"),
                               str(root / "sess-resumed.jsonl")], store)
        kept = store.run("SELECT native_id, prompt_tokens, output_tokens FROM requests "
                         "WHERE duplicate_of IS NULL")
        assert kept == [("msg_123", 200, 100)]
        (fmt,) = result.summary
        assert (fmt.format, fmt.requests, fmt.sessions, fmt.duplicates, fmt.prompt_tokens) == (
            "claude-code", 1, 1, 0, 200)
        assert result.totals is not None
        assert (result.totals.requests, result.totals.prompt_tokens) == (1, 200)
        (missing,) = [i for i in lint_usage(store).issues
                      if i.evidence.get("cached_missing") is not None]
        assert (missing.evidence["requests"], missing.evidence["cached_missing"]) == (1, 1)

    def test_streamed_lines_keep_the_final_count(self) -> None:
        # ccusage `keeps_most_complete_duplicate_usage_entry`: input 100, output 250
        requests, skips = read_requests(
            CCUSAGE / "most-complete" / "projects" / "project1" / "session1" / "chat.jsonl")
        assert skips == []
        assert [(r.usage.output_tokens, r.usage.prompt_tokens) for r in requests] == [
            (250, 100 + 10 + 5)]
        assert requests[0].metadata["costUSD"] == 0.001  # the first line's place and fields

    def test_lines_without_request_id_are_one_call(self) -> None:
        # ccusage `dedupes_usage_entries_by_message_id_without_request_id`: output 250
        requests, _ = read_requests(
            CCUSAGE / "no-request-id" / "projects" / "project1" / "session1" / "chat.jsonl")
        assert [r.usage.output_tokens for r in requests] == [250]

    def test_reingesting_a_grown_transcript_updates_the_call(self, tmp_path: Path) -> None:
        full = CCUSAGE / "most-complete" / "projects" / "project1" / "session1" / "chat.jsonl"
        growing = tmp_path / "projects" / "project1" / "session1" / "chat.jsonl"
        growing.parent.mkdir(parents=True)
        growing.write_text(full.read_text().splitlines(keepends=True)[0])
        first = _ingest(tmp_path / "s.duckdb", growing)
        assert [c["output_tokens"] for c in first] == [25]
        shutil.copy(full, growing)
        again = _ingest(tmp_path / "s.duckdb", growing)
        assert [c["output_tokens"] for c in again] == [250]

    def test_reingesting_the_same_file_changes_nothing(self, tmp_path: Path) -> None:
        first = _ingest(tmp_path / "s.duckdb", CCUSAGE / "btw")
        again = _ingest(tmp_path / "s.duckdb", CCUSAGE / "btw")
        assert again == first


class TestSubagentSessions:
    def test_ccusage_subagent_layout(self, tmp_path: Path) -> None:
        # ccusage `keeps_nested_agent_progress_in_daily_model_order`: 3 calls, haiku once,
        # total cost 0.18
        calls = _ingest(tmp_path / "s.duckdb", CCUSAGE / "subagent")
        assert [c["model"] for c in calls] == [
            "claude-opus-4-6", "claude-haiku-4-5-20251001", "claude-opus-4-6"]
        assert round(sum(json.loads(c["metadata"])["costUSD"] for c in calls), 2) == 0.18
        by_id = {c["native_id"]: c for c in calls}
        assert [(by_id[i]["session"], by_id[i]["turn"]) for i in ("msg_fast", "msg_opus")] == [
            ("session-a", 0), ("session-a", 1)]
        assert (by_id["msg_haiku"]["session"], by_id["msg_haiku"]["parent_key"]) == (
            "session-a/agent-a", "session-a")

    def test_sidechain_lines_of_the_main_file(self) -> None:
        requests, _ = read_requests(CC / "streamed_session.jsonl")
        main = "5f1c9a2e-1111-4c3b-9d2a-000000000001"
        assert [(r.native_id, r.session_key, r.parent_key) for r in requests] == [
            ("msg_01A", main, None), ("msg_01B", main, None),
            ("msg_01C", f"{main}/agent-a1b2c3d4", main)]
        assert requests[2].session_key_source == "claude-code.isSidechain"

    def test_compaction_transcript_is_a_subagent_session(self, tmp_path: Path) -> None:
        main = "7d0c6a1e-2222-4b5c-8d9e-000000000002"
        line = json.dumps({
            "parentUuid": None, "isSidechain": True, "sessionId": main,
            "agentId": "acompact-3f9a1c", "type": "assistant", "uuid": "c1",
            "timestamp": "2026-03-02T10:00:00.000Z", "requestId": "req_c1",
            "message": {"id": "msg_c1", "role": "assistant",
                        "model": "claude-sonnet-4-5-20250929",
                        "content": [{"type": "text", "text": "Summary"}],
                        "usage": {"input_tokens": 9, "cache_read_input_tokens": 41000,
                                  "cache_creation_input_tokens": 0, "output_tokens": 1800}}})
        line += "\n"
        path = tmp_path / main / "subagents" / "agent-acompact-3f9a1c.jsonl"
        path.parent.mkdir(parents=True)
        path.write_text(line)
        request = read_requests(path)[0][0]
        assert (request.session_key, request.parent_key, request.session_key_source) == (
            f"{main}/agent-acompact-3f9a1c", main, "claude-code.subagent-file")


class TestDetection:
    def test_permission_mode_first_line(self) -> None:
        path = CC / "permission_mode_first.jsonl"
        assert claude_code.sniff(probe(Source.from_path(path)))
        requests, skips = read_requests(path)
        assert skips == []
        assert [(r.native_id, r.usage.cached_tokens) for r in requests] == [
            ("msg_01PM", 18432)]

    def test_untyped_ccusage_lines_without_session_id(self) -> None:
        path = CCUSAGE / "across-files" / "projects" / "newer.jsonl"
        assert claude_code.sniff(probe(Source.from_path(path)))
        request = read_requests(path)[0][0]
        assert (request.session_key, request.session_key_source) == ("newer", "claude-code.file")

    def test_only_non_call_records_without_a_transcript_marker_are_not_claimed(
            self, tmp_path: Path) -> None:
        path = tmp_path / "x.jsonl"
        path.write_text('{"type":"mode","mode":"default"}\n{"type":"tag","tag":"x"}\n')
        assert not claude_code.sniff(probe(Source.from_path(path)))


def test_a_subagents_meta_json_sidecar_is_ignored_not_an_unreadable_record() -> None:
    # ccusage's subagent tree (3 calls, the sub-agent's counted once) with Claude Code's
    # `subagents/agent-a.meta.json` beside the sub-agent's transcript
    tree = CC / "subagent-meta"
    store = Store.open(":memory:")
    result = ingest_paths([str(tree / "projects")], store)
    assert (result.ingested, result.skipped, result.unrecognized, result.errors) == (
        3, 0, (), ())
    assert [Path(p).name for p in result.ignored] == ["agent-a.meta.json"]
    assert claude_code.is_companion(
        tree / "projects/project-a/session-a/subagents/agent-a.meta.json")
    assert not claude_code.is_companion(
        tree / "projects/project-a/session-a/subagents/agent-a.jsonl")
