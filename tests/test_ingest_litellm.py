"""LiteLLM SpendLogs ingest: /spend/logs JSON, JSON lines, psql CSV, SQLite (formats.md §3.1)."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime
from pathlib import Path

import pytest
from conftest import FIXTURES

from prefixscope.ingest import read_requests
from prefixscope.ingest.formats import bifrost, litellm, newapi
from prefixscope.ingest.probing import probe
from prefixscope.ingest.source import Source

LITELLM = FIXTURES / "litellm"
CC_SESSION = "5f0c2a0e-8f4e-4d2b-9a51-0d6c3f7b9e21"


def _counts(usage) -> tuple:
    return (usage.prompt_tokens, usage.cached_tokens, usage.cache_write_tokens, usage.output_tokens)


def _by_native(requests):
    return {r.native_id: r for r in requests}


@pytest.fixture(scope="module")
def spend_logs():
    return read_requests(LITELLM / "spend_logs.json")


@pytest.fixture(scope="module")
def truncated():
    return read_requests(LITELLM / "truncated_and_bad.jsonl")


def _spend_row(request_id: str, session_id: str, **extra) -> dict:
    row = {"request_id": request_id, "call_type": "acompletion", "api_key": "hash", "spend": 0.0,
           "total_tokens": 110, "prompt_tokens": 100, "completion_tokens": 10,
           "startTime": "2025-10-09T12:00:00Z", "model": "gpt-4o", "model_group": "gpt-4o",
           "custom_llm_provider": "openai", "metadata": {}, "session_id": session_id,
           "messages": "{}", "response": "{}",
           "proxy_server_request": {"model": "gpt-4o",
                                    "messages": [{"role": "user", "content": "hi"}]}}
    row.update(extra)
    return row


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


class TestLiteLLMSniff:
    @pytest.mark.parametrize("name", [
        "spend_logs.json", "truncated_and_bad.jsonl", "spend_logs.csv"])
    def test_exports_are_recognized_and_not_claimed_by_other_gateways(self, name: str) -> None:
        pr = probe(Source.from_path(LITELLM / name))
        assert litellm.sniff(pr)
        assert not newapi.sniff(pr)
        assert not bifrost.sniff(pr)

    def test_ui_page_wrapper_is_recognized(self, tmp_path: Path) -> None:
        path = tmp_path / "page.json"
        path.write_text(json.dumps({"data": [_spend_row("r1", "s1")], "total": 1, "page": 1}))
        assert litellm.sniff(probe(Source.from_path(path)))
        assert [r.native_id for r in read_requests(path)[0]] == ["r1"]

    def test_sqlite_copy_of_the_table(self, tmp_path: Path) -> None:
        path = tmp_path / "spend.db"
        con = sqlite3.connect(path)
        con.execute('CREATE TABLE "LiteLLM_SpendLogs" (request_id text primary key, '
                    'call_type text, '
                    'api_key text, spend real, prompt_tokens integer, completion_tokens integer, '
                    '"startTime" text, model text, session_id text, metadata text, '
                    'proxy_server_request text)')
        con.execute('INSERT INTO "LiteLLM_SpendLogs" VALUES (?,?,?,?,?,?,?,?,?,?,?)',
                    ("r1", "acompletion", "h", 0.1, 100, 5, "2025-10-09 12:00:00.000", "gpt-4o",
                     "s", json.dumps({"additional_usage_values": {
                         "prompt_tokens_details": {"cached_tokens": 64}}}),
                     json.dumps({"model": "gpt-4o",
                                 "messages": [{"role": "user", "content": "x"}]})))
        con.commit()
        con.close()
        pr = probe(Source.from_path(path))
        assert litellm.sniff(pr) and not newapi.sniff(pr) and not bifrost.sniff(pr)
        requests, skips = read_requests(path)
        assert skips == []
        assert requests[0].usage.cached_tokens == 64
        assert requests[0].endpoint == "openai-chat"

    def test_first_row_longer_than_the_probe_head(self, tmp_path: Path) -> None:
        big = {"model": "gpt-4o", "messages": [{"role": "user", "content": "x" * 200_000}]}
        rows = [_spend_row("r1", "s", proxy_server_request=big), _spend_row("r2", "s")]
        path = _write_jsonl(tmp_path / "big.jsonl", rows)
        assert litellm.sniff(probe(Source.from_path(path)))
        assert [r.native_id for r in read_requests(path)[0]] == ["r1", "r2"]

    def test_rows_without_spend_columns_are_not_claimed(self, tmp_path: Path) -> None:
        path = _write_jsonl(tmp_path / "x.jsonl", [{"request_id": "a", "model": "m"}])
        assert not litellm.sniff(probe(Source.from_path(path)))


class TestLiteLLMBody:
    def test_anthropic_body_from_proxy_server_request(self, spend_logs) -> None:
        requests, skips = spend_logs
        assert skips == []
        first = requests[0]
        assert first.native_id == "msg_01AbCdEf"
        assert first.endpoint == "anthropic-messages"
        assert list(first.body) == ["model", "max_tokens", "stream", "system", "tools", "messages",
                                    "metadata"]
        assert first.body["system"][0]["text"].startswith("x-anthropic-billing-header: ")
        assert first.body_truncated is False
        assert first.metadata["body_from"] == "proxy_server_request"
        assert first.output["content"][0]["type"] == "tool_use"

    def test_openai_body_detected(self, spend_logs) -> None:
        request = _by_native(spend_logs[0])["chatcmpl-3b1"]
        assert request.endpoint == "openai-chat"
        assert request.body["tools"][0]["function"]["name"] == "edit"
        assert request.output is None  # response "{}"

    def test_truncation_marker_flags_body(self, truncated) -> None:
        request = truncated[0][0]
        assert request.native_id == "msg_08Trunc"
        assert request.body_truncated is True
        assert request.metadata["truncated_fields"] == 2
        assert request.metadata["truncated_chars"] == 30953 + 5000
        assert request.endpoint == "anthropic-messages"

    def test_truncation_marker_count(self) -> None:
        body = {"a": "x... (litellm_truncated skipped 10 chars) ...y",
                "b": ["... (litellm_truncated skipped 5 chars) ... and "
                      "... (litellm_truncated skipped 7 chars) ..."],
                "c": "... skipped 3 chars ..."}
        assert litellm.count_truncation_markers(body) == (2, 22)

    def test_empty_proxy_server_request_means_no_body(self, truncated) -> None:
        old = _by_native(truncated[0])["msg_09OldUsage"]
        assert old.body is None
        assert old.endpoint == "anthropic-messages"  # from call_type
        assert "body_from" not in old.metadata

    def test_old_messages_column_builds_a_minimal_body(self, tmp_path: Path) -> None:
        row = _spend_row("r1", "s", proxy_server_request="{}",
                         messages=[{"role": "user", "content": "hello"}])
        request = read_requests(_write_jsonl(tmp_path / "old.jsonl", [row]))[0][0]
        assert request.body == {"model": "gpt-4o",
                                "messages": [{"role": "user", "content": "hello"}]}
        assert request.metadata["body_from"] == "messages"

    def test_wrapped_proxy_server_request_is_unwrapped(self, tmp_path: Path) -> None:
        inner = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
        wrapper = {"url": "http://proxy/v1/chat/completions", "method": "POST", "headers": {},
                   "body": inner}
        row = _spend_row("r1", "s", proxy_server_request=wrapper)
        assert read_requests(_write_jsonl(tmp_path / "w.jsonl", [row]))[0][0].body == inner


class TestLiteLLMUsage:
    def test_cache_inclusive_prompt_with_read_and_write(self, spend_logs) -> None:
        usage = spend_logs[0][0].usage
        assert _counts(usage) == (51478, 48211, 1520, 412)
        assert usage.semantics == "litellm"

    def test_openai_cached_tokens_without_write(self, spend_logs) -> None:
        usage = _by_native(spend_logs[0])["chatcmpl-3b2"].usage
        assert _counts(usage)[:3] == (2300, 2048, None)

    def test_old_version_prompt_without_write_is_corrected(self, truncated) -> None:
        request = _by_native(truncated[0])["msg_09OldUsage"]
        assert request.usage.prompt_tokens == 48300 + 1520
        assert request.usage.semantics == "litellm:corrected"
        assert request.metadata["prompt_tokens_logged"] == 48300
        assert "cache write added" in request.metadata["usage_note"]

    def test_usage_object_in_string_metadata(self, truncated) -> None:
        usage = _by_native(truncated[0])["chatcmpl-10"].usage
        assert (usage.prompt_tokens, usage.cached_tokens) == (800, 768)

    def test_no_cache_details_means_none(self, spend_logs) -> None:
        usage = _by_native(spend_logs[0])["chatcmpl-5a_cache_hit1760011561.2345"].usage
        assert usage.cached_tokens is None
        assert usage.cache_write_tokens is None
        assert usage.prompt_tokens == 1500


class TestLiteLLMSessions:
    def test_random_session_ids_are_not_sessions(self, spend_logs) -> None:
        request = _by_native(spend_logs[0])["chatcmpl-5a_cache_hit1760011561.2345"]
        assert request.session_key is None
        assert request.metadata["litellm_session_id"] == "e7d6c5b4-a392-4180-9f7e-6d5c4b3a2910"

    def test_claude_code_session_from_body_when_litellm_id_is_random(self, spend_logs) -> None:
        first, second = spend_logs[0][:2]
        assert (first.session_key, second.session_key) == (CC_SESSION, CC_SESSION)
        assert first.session_key_source == "claude-code.metadata.user_id"

    def test_session_id_shared_by_rows_is_explicit(self, spend_logs) -> None:
        by_id = _by_native(spend_logs[0])
        for rid in ("chatcmpl-3b1", "chatcmpl-3b2"):
            assert by_id[rid].session_key == "agent-run-42"
            assert by_id[rid].session_key_source == "litellm.session_id"

    def test_session_id_declared_by_header_is_explicit_even_once(self, spend_logs) -> None:
        request = _by_native(spend_logs[0])["chatcmpl-5a"]
        assert request.session_key == "nb-session-7"
        assert request.session_key_source == "litellm.session_id"

    def test_stable_litellm_session_wins_over_claude_code(self) -> None:
        requests, _ = read_requests(LITELLM / "spend_logs.csv")
        assert [r.session_key for r in requests] == ["cc-sess-1", "cc-sess-1", None]
        assert requests[0].session_key_source == "litellm.session_id"

    def test_claude_code_json_user_id(self, tmp_path: Path) -> None:
        body = {"model": "sonnet", "system": "s", "messages": [{"role": "user", "content": "hi"}],
                "metadata": {"user_id": json.dumps({"device_id": "d", "session_id": "cc-json-1"})}}
        row = _spend_row("r1", "rand-1", call_type="anthropic_messages", proxy_server_request=body)
        request = read_requests(_write_jsonl(tmp_path / "cc.jsonl", [row]))[0][0]
        assert request.session_key == "cc-json-1"


class TestLiteLLMRows:
    def test_embeddings_are_not_requests(self, spend_logs) -> None:
        assert "emb-7" not in _by_native(spend_logs[0])
        assert len(spend_logs[0]) == 6

    def test_cache_hit_kept_and_flagged(self, spend_logs) -> None:
        by_id = _by_native(spend_logs[0])
        assert by_id["chatcmpl-5a_cache_hit1760011561.2345"].metadata["litellm_cache_hit"] is True
        assert "litellm_cache_hit" not in by_id["chatcmpl-5a"].metadata

    def test_fields(self, spend_logs) -> None:
        first = spend_logs[0][0]
        assert first.timestamp == datetime(2025, 10, 9, 12, 0)
        assert first.model == "sonnet"
        assert first.metadata["upstream_model"] == "claude-sonnet-4-5-20250929"
        assert first.channel == "anthropic"
        assert first.user == "u_123"
        assert first.client == "cc-laptop"
        assert first.gateway is None
        assert first.metadata["status"] == "success"

    def test_anthropic_body_to_openai_provider_is_a_conversion(self, tmp_path: Path) -> None:
        body = {"model": "qwen", "system": "s", "messages": [{"role": "user", "content": "hi"}]}
        row = _spend_row("r1", "x", call_type="anthropic_messages",
                         custom_llm_provider="hosted_vllm", proxy_server_request=body)
        assert read_requests(_write_jsonl(tmp_path / "g.jsonl", [row]))[0][0].gateway \
            == "litellm:anthropic-to-openai"

    def test_csv_export_times_and_json_text_columns(self) -> None:
        requests, skips = read_requests(LITELLM / "spend_logs.csv")
        assert skips == []
        assert requests[0].timestamp == datetime(2025, 10, 9, 12, 0)
        assert requests[0].usage.cached_tokens == 48211
        assert requests[0].metadata["spend"] == 0.0123
        assert requests[0].body["tools"][0]["name"] == "Bash"


class TestLiteLLMBadInput:
    def test_invalid_line_and_missing_request_id_are_skipped(self, truncated) -> None:
        requests, skips = truncated
        assert [r.native_id for r in requests] == ["msg_08Trunc", "msg_09OldUsage", "chatcmpl-10"]
        assert [s.line for s in skips] == [4, 5]
        assert skips[0].reason.startswith("invalid JSON")
        assert skips[1].reason == "spend log row has no `request_id`"

    def test_non_object_row_is_skipped(self, tmp_path: Path) -> None:
        path = tmp_path / "rows.json"
        path.write_text(json.dumps([_spend_row("r1", "s"), "oops"]))
        requests, skips = read_requests(path)
        assert [r.native_id for r in requests] == ["r1"]
        assert (skips[0].line, skips[0].reason) == (2, "spend log row is a str, not an object")


class TestLiteLLMOnRealData:
    def test_no_real_file_is_claimed(self, real: Path) -> None:
        for path in sorted(p for p in real.rglob("*") if p.is_file() and p.suffix != ".md"):
            assert not litellm.sniff(probe(Source.from_path(path))), path
