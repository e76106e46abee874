"""Claude Code session transcripts: one request per API call, usage only (formats.md §5)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from conftest import FIXTURES

from prefixscope.ingest import read_requests
from prefixscope.ingest.formats import claude_code
from prefixscope.ingest.probing import probe
from prefixscope.ingest.source import Source

CC = FIXTURES / "claude-code"
REAL_DIR = "claude-code-jsonl"


def _counts(usage) -> tuple:
    return (usage.prompt_tokens, usage.cached_tokens, usage.cache_write_tokens, usage.output_tokens)


def _probe(path: Path):
    return probe(Source.from_path(path))


@pytest.fixture(scope="module")
def streamed():
    return read_requests(CC / "streamed_session.jsonl")


class TestClaudeCodeDetection:
    def test_fixtures_detected_as_claude_code(self) -> None:
        for name in ("streamed_session.jsonl", "bad_lines.jsonl"):
            assert claude_code.sniff(_probe(CC / name)), name

    def test_summary_first_line_is_enough(self) -> None:
        pr = _probe(CC / "streamed_session.jsonl")
        assert pr.first["type"] == "summary"
        assert claude_code.sniff(pr)

    def test_other_jsonl_not_claimed(self, tmp_path: Path) -> None:
        other = tmp_path / "x.jsonl"
        other.write_text('{"type": "user", "message": {"role": "user"}, "timestamp": "2026"}\n'
                         '{"timestamp": 0, "input_length": 5, "output_length": 1, '
                         '"hash_ids": [1]}\n')
        assert not claude_code.sniff(_probe(other))

    def test_first_line_longer_than_probe_window(self, tmp_path: Path) -> None:
        line = ('{"parentUuid":null,"sessionId":"s-long","type":"user","message":{"role":"user",'
                '"content":"' + "x" * 70000
                + '"},"uuid":"u1","timestamp":"2026-01-01T00:00:00Z"}\n')
        assistant = ('{"parentUuid":"u1","sessionId":"s-long","type":"assistant","uuid":"u2",'
                     '"requestId":"r1","timestamp":"2026-01-01T00:00:01Z","message":{"id":"m1",'
                     '"role":"assistant","model":"claude-sonnet-4-5","content":[],'
                     '"usage":{"input_tokens":2,"output_tokens":1}}}\n')
        path = tmp_path / "long.jsonl"
        path.write_text(line + assistant)
        pr = _probe(path)
        assert pr.kind == "jsonl"
        assert claude_code.sniff(pr)
        requests, skips = read_requests(path)
        assert [r.native_id for r in requests] == ["m1"] and skips == []


class TestClaudeCodeStreamDedupe:
    def test_one_request_per_message_and_request_id(self, streamed) -> None:
        requests, skips = streamed
        assert skips == []
        assert [r.native_id for r in requests] == ["msg_01A", "msg_01B", "msg_01C"]

    def test_streamed_lines_keep_the_largest_output_usage(self, streamed) -> None:
        first = streamed[0][0]
        assert _counts(first.usage) == (3 + 2048 + 17920, 17920, 2048, 412)
        assert first.metadata["streamed_lines"] == 3
        assert first.metadata["stop_reason"] == "tool_use"

    def test_streamed_lines_take_place_and_time_of_the_first_line(self, streamed) -> None:
        first = streamed[0][0]
        assert first.source_line == 3
        assert first.timestamp == datetime(2026, 3, 2, 9, 0, 2, 100000)

    def test_streamed_content_blocks_joined_in_order(self, streamed) -> None:
        blocks = streamed[0][0].output["content"]
        assert [b["type"] for b in blocks] == ["thinking", "tool_use", "tool_use"]
        assert [b.get("id") for b in blocks[1:]] == ["toolu_01", "toolu_02"]

    def test_record_key_is_the_message_id_in_its_session_tree(self) -> None:
        records = list(claude_code.parse(Source.from_path(CC / "streamed_session.jsonl"),
                                         _probe(CC / "streamed_session.jsonl")))
        tree = "5f1c9a2e-1111-4c3b-9d2a-000000000001"
        assert [r.key for r in records] == [f"msg:{tree}:msg_01A", f"msg:{tree}:msg_01B",
                                            f"msg:{tree}:msg_01C"]

    def test_reingest_gives_same_ids(self) -> None:
        a, _ = read_requests(CC / "streamed_session.jsonl")
        b, _ = read_requests(CC / "streamed_session.jsonl")
        assert [r.id for r in a] == [r.id for r in b]
        assert len({r.id for r in a}) == 3


class TestClaudeCodeNotRequests:
    def test_synthetic_and_api_error_lines_are_neither_requests_nor_skips(self, streamed) -> None:
        requests, skips = streamed
        assert all(r.model != "<synthetic>" for r in requests)
        assert not any(r.native_id.startswith("6c1f0b3e") for r in requests)
        assert skips == []

    def test_progress_line_with_nested_usage_is_not_a_request(self, streamed) -> None:
        assert "msg_sub" not in {r.native_id for r in streamed[0]}

    def test_unknown_record_type_is_silently_passed(self) -> None:
        _, skips = read_requests(CC / "bad_lines.jsonl")
        assert 9 not in {s.line for s in skips}


class TestClaudeCodeFields:
    def test_session_client_and_endpoint(self, streamed) -> None:
        r = streamed[0][1]
        assert r.session_key == "5f1c9a2e-1111-4c3b-9d2a-000000000001"
        assert r.session_key_source == "claude-code.sessionId"
        assert (r.client, r.endpoint, r.body, r.parent_key) == ("claude-code", "anthropic-messages",
                                                                None, None)
        assert r.model == "claude-sonnet-4-5-20250929"
        assert _counts(r.usage) == (20573, 19968, 600, 20)
        assert r.usage.semantics == "anthropic"

    def test_transcript_links_kept_in_metadata(self, streamed) -> None:
        r = streamed[0][1]
        assert {k: r.metadata[k] for k in ("version", "cwd", "gitBranch", "uuid", "parentUuid",
                                           "isSidechain", "requestId")} == {
            "version": "2.1.37", "cwd": "/work/repo", "gitBranch": "main", "uuid": "u-0007",
            "parentUuid": "u-0005", "isSidechain": False, "requestId": "req_01B"}

    def test_sidechain_agent_and_unreported_write(self, streamed) -> None:
        r = streamed[0][2]
        assert r.metadata["isSidechain"] is True and r.metadata["agentId"] == "a1b2c3d4"
        assert _counts(r.usage) == (12, 0, None, 7)


    def test_last_message_tells_a_user_turn_from_the_tool_loop(self, streamed) -> None:
        # msg_01A follows "Please refactor parse()" (a streamed line of it after the
        # tool_result does not change what it sent), msg_01B the tool_result; the
        # sidechain's call has no user line of its own conversation before it
        got = {r.native_id: r.metadata.get("last_message") for r in streamed[0]}
        assert got == {"msg_01A": "user", "msg_01B": "tool_result", "msg_01C": None}


class TestClaudeCodeBadInput:
    def test_bad_lines_reported_with_reasons(self) -> None:
        requests, skips = read_requests(CC / "bad_lines.jsonl")
        assert [r.native_id for r in requests] == ["msg_b6"]
        reasons = {s.line: s.reason for s in skips}
        assert sorted(reasons) == [2, 3, 4, 5, 6, 7]
        assert reasons[2] == "assistant message without `usage`"
        assert reasons[3] == "assistant message without `message.id`"
        assert reasons[4] == "assistant line without a `message` object"
        assert reasons[5].startswith("invalid JSON")
        assert reasons[6] == "line is a JSON list, not a transcript record"
        assert reasons[7].startswith("not a Claude Code transcript record")


class TestClaudeCodeRealFiles:
    @pytest.mark.parametrize(("name", "count", "skipped_lines"), [
        ("ccusage__project-alpha__session-alpha__chat.jsonl", 3, []),
        ("claude-code-log__edge_cases.jsonl", 4, [13, 14, 15, 16]),
        ("claude-code-log__representative_messages.jsonl", 5, []),
        ("claude-code-log__session_b.jsonl", 1, []),
    ])
    def test_counts(self, real: Path, name: str, count: int, skipped_lines: list[int]) -> None:
        requests, skips = read_requests(real / REAL_DIR / name)
        assert len(requests) == count
        assert [s.line for s in skips] == skipped_lines
        assert {r.source_format for r in requests} == {"claude-code"}

    def test_ccusage_untyped_lines_sum_cache_into_prompt(self, real: Path) -> None:
        name = "ccusage__project-alpha__session-alpha__chat.jsonl"
        requests, _ = read_requests(real / REAL_DIR / name)
        assert [_counts(r.usage) for r in requests] == [
            (135, 10, 25, 50), (270, 20, 50, 75), (340, 40, 0, 125)]
        assert [r.model for r in requests] == ["claude-sonnet-4-20250514", "claude-opus-4-20250514",
                                               "claude-sonnet-4-20250514"]
        assert {r.session_key for r in requests} == {"session-alpha"}
        assert requests[2].metadata["version"] == "1.1.0"

    def test_edge_cases_second_session_in_same_file(self, real: Path) -> None:
        requests, _ = read_requests(real / REAL_DIR / "claude-code-log__edge_cases.jsonl")
        last = requests[-1]
        assert (last.native_id, last.session_key, last.source_line) == (
            "msg_004", "todowrite_session", 17)
        assert _counts(last.usage) == (168, None, None, 85)

    def test_representative_usage(self, real: Path) -> None:
        name = "claude-code-log__representative_messages.jsonl"
        requests, _ = read_requests(real / REAL_DIR / name)
        assert [r.usage.prompt_tokens for r in requests] == [25, 45, 78, 25, 45]
        assert [r.usage.output_tokens for r in requests] == [120, 85, 95, 35, 110]
        assert [r.source_line for r in requests] == [2, 4, 6, 8, 10]
