"""Bifrost `logs` ingest: logs.db read in place, /api/logs JSON, CSV copy (formats.md §8)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from builders import make_bifrost_db
from conftest import FIXTURES

from prefixscope.ingest import read_requests
from prefixscope.ingest.formats import bifrost, litellm, newapi
from prefixscope.ingest.probing import probe
from prefixscope.ingest.source import Source

BIFROST = FIXTURES / "bifrost"
SYSTEM = {"role": "system", "content": "You are a coding agent."}


def _row(row_id: str, **columns) -> dict:
    """A `logs` table row as Bifrost stores it (JSON text columns, denormalized token ints)."""
    row = {"id": row_id, "timestamp": "2025-10-09 12:00:00.5+00:00",
           "object_type": "chat.completion", "provider": "openai", "model": "gpt-4.1",
           "status": "success", "stream": 1,
           "input_history": [SYSTEM, {"role": "user", "content": "hi"}], "raw_request": "",
           "created_at": "2025-10-09 12:00:01+00:00"}
    row.update(columns)
    return row


def _counts(usage) -> tuple:
    return (usage.prompt_tokens, usage.cached_tokens, usage.cache_write_tokens, usage.output_tokens)


def _db(tmp_path: Path, rows: list[dict]) -> Path:
    return make_bifrost_db(tmp_path / "logs.db", rows)


@pytest.fixture(scope="module")
def api_logs():
    return read_requests(BIFROST / "api_logs.json")


class TestBifrostSniff:
    def test_sqlite_logs_db(self, tmp_path: Path) -> None:
        pr = probe(Source.from_path(_db(tmp_path, [_row("a")])))
        assert bifrost.sniff(pr)
        assert not newapi.sniff(pr)
        assert not litellm.sniff(pr)

    @pytest.mark.parametrize("name", ["api_logs.json", "logs.csv"])
    def test_exports(self, name: str) -> None:
        pr = probe(Source.from_path(BIFROST / name))
        assert bifrost.sniff(pr)
        assert not newapi.sniff(pr)
        assert not litellm.sniff(pr)

    def test_newapi_db_is_not_claimed(self, tmp_path: Path) -> None:
        from builders import make_newapi_db, newapi_consume_row
        path = make_newapi_db(tmp_path / "one-api.db", [newapi_consume_row(1)])
        assert not bifrost.sniff(probe(Source.from_path(path)))

    def test_plain_chat_rows_are_not_claimed(self, tmp_path: Path) -> None:
        path = tmp_path / "x.json"
        path.write_text(json.dumps([{"id": "1", "model": "m", "provider": "p", "status": "ok"}]))
        assert not bifrost.sniff(probe(Source.from_path(path)))


class TestBifrostBody:
    def test_history_and_tools_make_an_openai_chat_body(self, api_logs) -> None:
        requests, skips = api_logs
        assert skips == []
        first = requests[0]
        assert first.endpoint == "openai-chat"
        assert list(first.body) == ["model", "messages", "tools", "max_tokens", "temperature"]
        assert first.body["messages"][0] == {"role": "system",
                                             "content": "You are a coding agent. Be terse."}
        assert first.body["tools"][0]["function"]["name"] == "Bash"
        assert first.metadata["body_from"] == "input_history+tools+params"
        assert first.output["tool_calls"][0]["id"] == "call_1"

    def test_raw_request_is_the_body_when_filled(self, api_logs) -> None:
        request = api_logs[0][3]
        assert request.native_id == "b7e0a1c2-0004"
        assert request.endpoint == "anthropic-messages"
        assert request.metadata["body_from"] == "raw_request"
        assert list(request.body) == ["model", "max_tokens", "system", "messages", "tools"]

    def test_raw_request_of_unknown_protocol_falls_back_to_history(self, tmp_path: Path) -> None:
        gemini = json.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
        row = _row("g", provider="gemini", raw_request=gemini)
        request = read_requests(_db(tmp_path, [row]))[0][0]
        assert request.endpoint == "openai-chat"
        assert request.metadata["raw_request_protocol"] == "unknown"
        assert request.metadata["body_from"] == "input_history+tools+params"

    def test_responses_history_makes_a_responses_body(self, api_logs) -> None:
        request = api_logs[0][4]
        assert request.endpoint == "openai-responses"
        assert request.body["input"][0]["content"][0]["text"] == "summarize"
        assert request.body["instructions"] == "Be brief."
        assert request.output[0]["type"] == "message"

    def test_no_history_no_body(self, tmp_path: Path) -> None:
        request = read_requests(_db(tmp_path, [_row("n", input_history="")]))[0][0]
        assert request.body is None
        assert request.endpoint == "unknown"


class TestBifrostUsage:
    def test_token_usage_is_cache_inclusive_with_write(self, api_logs) -> None:
        usage = api_logs[0][3].usage
        assert _counts(usage) == (5120, 4096, 1000, 3)
        assert usage.semantics == "bifrost"

    def test_openai_style_cached_tokens_key(self, api_logs) -> None:
        usage = api_logs[0][4].usage
        assert _counts(usage)[:3] == (1300, 1152, 0)

    def test_denormalized_columns_without_token_usage(self, tmp_path: Path) -> None:
        row = _row("d", prompt_tokens=900, completion_tokens=12, total_tokens=912,
                   cached_read_tokens=768)
        usage = read_requests(_db(tmp_path, [row]))[0][0].usage
        assert _counts(usage) == (900, 768, None, 12)

    def test_error_row_without_usage_reports_nothing(self, api_logs) -> None:
        request = api_logs[0][2]
        assert request.metadata["status"] == "error"
        assert request.metadata["error"] == "Rate limit reached for gpt-4.1"
        assert request.usage.reported is False

    def test_all_zero_columns_are_not_reported(self, tmp_path: Path) -> None:
        usage = read_requests(_db(tmp_path, [_row("z", status="error")]))[0][0].usage
        assert usage.prompt_tokens is None
        assert usage.reported is False


class TestBifrostSessions:
    def test_parent_request_id_is_the_session(self, api_logs) -> None:
        head, child, failed = api_logs[0][:3]
        assert [r.session_key for r in (head, child, failed)] == ["b7e0a1c2-0001"] * 3
        assert head.session_key_source == "bifrost.parent_request_id"
        assert head.parent_key is None
        assert child.parent_key == "b7e0a1c2-0001"
        assert head.native_id == "b7e0a1c2-0001"

    def test_parent_not_in_file_is_a_session_but_not_a_parent(self, api_logs) -> None:
        request = api_logs[0][3]
        assert request.session_key == "conv-7f3a"
        assert request.parent_key is None

    def test_metadata_session_id(self, api_logs) -> None:
        request = api_logs[0][4]
        assert request.session_key == "sess-99"
        assert request.session_key_source == "bifrost.metadata.x-bf-session-id"

    def test_sqlite_sessions_and_parent_links(self, tmp_path: Path) -> None:
        rows = [_row("p"), _row("c1", parent_request_id="p"), _row("solo")]
        requests, _ = read_requests(_db(tmp_path, rows))
        assert [(r.session_key, r.parent_key) for r in requests] \
            == [("p", None), ("p", "p"), (None, None)]


class TestBifrostRows:
    def test_embedding_rows_are_not_requests(self, api_logs) -> None:
        assert [r.native_id for r in api_logs[0]] == [f"b7e0a1c2-000{i}" for i in range(1, 6)]

    def test_fields(self, api_logs) -> None:
        first = api_logs[0][0]
        assert first.timestamp == datetime(2025, 10, 9, 12, 0, 0, 123000)
        assert first.channel == "openai"
        assert first.model == "gpt-4.1"
        assert first.user == "cc-team"
        assert first.client == "cc-team"
        assert first.metadata["latency_ms"] == 812.5
        assert first.metadata["stream"] is True

    def test_alias_is_the_model_the_caller_asked_for(self, tmp_path: Path) -> None:
        row = _row("a", alias="fast", model="gpt-4.1-mini")
        request = read_requests(_db(tmp_path, [row]))[0][0]
        assert request.model == "fast"
        assert request.metadata["resolved_model"] == "gpt-4.1-mini"

    def test_sqlite_time_and_user(self, tmp_path: Path) -> None:
        row = _row("t", user_id="u-7", virtual_key_name="vk")
        request = read_requests(_db(tmp_path, [row]))[0][0]
        assert request.timestamp == datetime(2025, 10, 9, 12, 0, 0, 500000)
        assert (request.user, request.client) == ("u-7", "vk")

    def test_csv_copy_matches_api_json(self, api_logs) -> None:
        csv_requests, skips = read_requests(BIFROST / "logs.csv")
        assert skips == []
        for from_csv, from_json in zip(csv_requests, api_logs[0][:3], strict=True):
            assert from_csv.body == from_json.body
            assert from_csv.usage == from_json.usage
            assert from_csv.session_key == from_json.session_key
            assert from_csv.timestamp == from_json.timestamp


class TestBifrostBadInput:
    def test_row_without_id_and_bad_line(self, tmp_path: Path) -> None:
        good = {"id": "g", "parent_request_id": None, "object": "chat.completion",
                "provider": "openai", "model": "gpt-4.1", "status": "success",
                "timestamp": "2025-10-09T12:00:00Z",
                "input_history": [{"role": "user", "content": "hi"}]}
        no_id = {k: v for k, v in good.items() if k != "id"}
        path = tmp_path / "logs.jsonl"
        path.write_text(json.dumps(good) + "\n{not json\n" + json.dumps(no_id) + "\n[1]\n")
        requests, skips = read_requests(path)
        assert [r.native_id for r in requests] == ["g"]
        assert [s.line for s in skips] == [2, 3, 4]
        assert skips[0].reason.startswith("invalid JSON")
        assert skips[1].reason == "log row has no `id`"
        assert skips[2].reason == "log row is a list, not an object"

    def test_unparseable_history_gives_no_body(self, tmp_path: Path) -> None:
        request = read_requests(_db(tmp_path, [_row("u", input_history="[{broken")]))[0][0]
        assert request.body is None


class TestBifrostOnRealData:
    def test_no_real_file_is_claimed(self, real: Path) -> None:
        for path in sorted(p for p in real.rglob("*") if p.is_file() and p.suffix != ".md"):
            assert not bifrost.sniff(probe(Source.from_path(path))), path
