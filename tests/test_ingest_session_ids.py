"""Session ids from where users have them (issue 13, item 2): gateway and client headers,
body fields, Responses chains, Claude Code's metadata.user_id, and `--session-key`.

Expected values are read off the fixtures by hand and follow the gateways' own documents
(cited in `prefixscope.ingest.normalize.sessions`): LiteLLM ranks x-litellm-trace-id, then
x-litellm-session-id, then any x-<vendor>-session-id; Bifrost's x-bf-session-id wins over
harness headers; Helicone groups by Helicone-Session-Id; Portkey by x-portkey-trace-id.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.ingest import read_requests
from prefixscope.ingest.normalize.sessions import (
    claude_code_user_id,
    parse_session_rule,
    session_from_headers,
)
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths

SESSION_IDS = FIXTURES / "raw" / "session_ids.jsonl"
CC_SESSION = "e96634a3-fa28-4083-b354-55542e2dca01"


@pytest.fixture(scope="module")
def captured():
    requests, skips = read_requests(SESSION_IDS)
    assert skips == []
    return {r.source_line: r for r in requests}


class TestClaudeCodeUserId:
    def test_legacy_form(self) -> None:
        parsed = claude_code_user_id(
            "user_4f1d9c2e7a_account_3c9b1e2a-7d4f-4a6b-9e0c-1f2a3b4c5d6e"
            "_session_0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d")
        assert parsed == ("4f1d9c2e7a", "3c9b1e2a-7d4f-4a6b-9e0c-1f2a3b4c5d6e",
                          "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d")

    def test_legacy_form_without_account(self) -> None:
        assert claude_code_user_id("user_abc123_account__session_s-1") == (
            "abc123", None, "s-1")

    def test_json_form(self) -> None:
        value = json.dumps({"device_id": "9c1f", "account_uuid": "", "session_id": CC_SESSION})
        assert claude_code_user_id(value) == ("9c1f", None, CC_SESSION)

    def test_other_text_gives_nothing(self) -> None:
        assert claude_code_user_id("alice@example.com") == (None, None, None)
        assert claude_code_user_id(None) == (None, None, None)


class TestHeaderPrecedence:
    def test_case_insensitive_names(self) -> None:
        assert session_from_headers({"helicone-session-id": "h"}) == (
            "h", "header:helicone-session-id")

    def test_litellm_ranks_its_trace_id_then_session_id_then_vendor_ids(self) -> None:
        headers = {"x-claude-code-session-id": "cc", "x-litellm-session-id": "s",
                   "x-litellm-trace-id": "t"}
        assert session_from_headers(headers) == ("t", "header:x-litellm-trace-id")
        del headers["x-litellm-trace-id"]
        assert session_from_headers(headers) == ("s", "header:x-litellm-session-id")
        del headers["x-litellm-session-id"]
        assert session_from_headers(headers) == ("cc", "header:x-claude-code-session-id")

    def test_bifrost_session_wins_over_harness_headers(self) -> None:
        headers = {"session_id": "codex", "x-bf-session-id": "bf"}
        assert session_from_headers(headers) == ("bf", "header:x-bf-session-id")

    def test_any_vendor_session_header(self) -> None:
        assert session_from_headers({"x-codex-session-id": "c"}) == (
            "c", "header:x-codex-session-id")

    def test_request_group_and_trace_id_are_not_sessions(self) -> None:
        assert session_from_headers({"x-request-group": "g", "x-trace-id": "t"}) is None


class TestRawCaptures:
    @pytest.mark.parametrize(("line", "session", "source"), [
        (1, "5d2f8a4e-3b1c-4e7a-9f60-2c8b1d4e7a90", "header:helicone-session-id"),
        (2, "5d2f8a4e-3b1c-4e7a-9f60-2c8b1d4e7a90", "header:helicone-session-id"),
        (3, "trace-portkey-42", "header:x-portkey-trace-id"),
        (4, "user-123-session-abc", "header:x-bf-session-id"),
        (5, "agent-run-abc123", "header:x-litellm-session-id"),
        (6, "support-4711", "header:x-conversation-id"),
        (7, "conv_689667905b048191b4740501625afd940c7533ace33a2dab",
         "openai-responses.conversation"),
        (11, "notebook-7", "metadata.session_id"),
    ])
    def test_session_and_where_it_came_from(self, captured, line, session, source) -> None:
        assert (captured[line].session_key, captured[line].session_key_source) == (
            session, source)

    def test_responses_chain_links_each_request_to_its_previous_response(self, captured) -> None:
        chain = [captured[n] for n in (8, 9, 10)]
        assert [r.session_key for r in chain] == [None, None, None]
        assert [r.native_id for r in chain] == ["resp_chain1", "resp_chain2", "resp_chain3"]
        assert [r.parent_key for r in chain] == [None, "resp_chain1", "resp_chain2"]

    def test_prompt_cache_key_is_a_hint_in_metadata_not_a_session(self, captured) -> None:
        assert captured[8].metadata["prompt_cache_key"] == "chain-demo"
        assert captured[8].session_key is None

    def test_unknown_header_gives_no_session(self, captured) -> None:
        assert captured[12].session_key is None
        assert captured[12].metadata["headers"]["x-run-id"] == "nightly-eval-0193"

    def test_credentials_are_never_kept(self, captured) -> None:
        kept = {name for r in captured.values() for name in r.metadata.get("headers", {})}
        assert not kept & {"authorization", "helicone-auth", "x-portkey-api-key", "x-bf-vk",
                           "x-api-key", "cookie"}
        assert "helicone-session-path" in kept

    def test_claude_code_user_is_still_read_from_the_json_user_id(self, captured) -> None:
        assert captured[5].user == "9c1f"


class TestGatewayLogs:
    def test_litellm_header_logged_in_metadata(self, tmp_path: Path) -> None:
        # LiteLLM made its session_id from the vendor header; used by one row, it is not
        # "stable", but the logged header names the same session.
        row = {"request_id": "chatcmpl-hdr", "call_type": "anthropic_messages", "api_key": "h",
               "spend": 0.0, "prompt_tokens": 100, "completion_tokens": 10,
               "startTime": "2026-01-01T12:00:00Z", "model": "claude-sonnet-4-5",
               "session_id": CC_SESSION, "custom_llm_provider": "anthropic",
               "metadata": {"requester_custom_headers": {"X-Claude-Code-Session-Id": CC_SESSION,
                                                         "x-api-key": "sk-REDACTED"}},
               "proxy_server_request": {"model": "claude-sonnet-4-5", "prompt_cache_key": "k",
                                        "messages": [{"role": "user", "content": "hi"}]}}
        path = tmp_path / "spend.jsonl"
        path.write_text(json.dumps(row) + "\n")
        request = read_requests(path)[0][0]
        assert (request.session_key, request.session_key_source) == (
            CC_SESSION, "header:x-claude-code-session-id")
        assert request.metadata["headers"] == {"x-claude-code-session-id": CC_SESSION}
        assert request.metadata["prompt_cache_key"] == "k"

    def test_bifrost_logging_headers(self, tmp_path: Path) -> None:
        row = {"id": "bf-1", "timestamp": "2026-01-01 12:00:00+00:00", "object": "chat.completion",
               "provider": "openai", "model": "gpt-4.1", "status": "success",
               "input_history": json.dumps([{"role": "user", "content": "hi"}]),
               "metadata": json.dumps({"helicone-session-id": "hs-1", "team": "research"})}
        path = tmp_path / "logs.json"
        path.write_text(json.dumps({"logs": [row]}))
        request = read_requests(path)[0][0]
        assert (request.session_key, request.session_key_source) == (
            "hs-1", "header:helicone-session-id")
        assert request.metadata["headers"] == {"helicone-session-id": "hs-1"}

    def test_otel_http_request_header_attribute(self, tmp_path: Path) -> None:
        attrs = [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                 {"key": "gen_ai.request.model", "value": {"stringValue": "gpt-4.1"}},
                 {"key": "http.request.header.x-session-id",
                  "value": {"arrayValue": {"values": [{"stringValue": "run-9"}]}}}]
        doc = {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [
            {"scope": {"name": "t"}, "spans": [{"traceId": "aa", "spanId": "bb", "name": "chat",
                                                "startTimeUnixNano": "1762164000000000000",
                                                "attributes": attrs}]}]}]}
        path = tmp_path / "span.json"
        path.write_text(json.dumps(doc))
        request = read_requests(path)[0][0]
        assert (request.session_key, request.session_key_source) == (
            "run-9", "header:x-session-id")


class TestThreading:
    def test_a_responses_chain_is_one_session(self, tmp_path: Path) -> None:
        with Store.open(tmp_path / "s.duckdb") as store:
            ingest_paths([str(SESSION_IDS)], store)
            rows = store.run("SELECT native_id, session, link FROM turns "
                             "WHERE native_id LIKE 'resp_chain%' ORDER BY native_id")
        assert len({session for _, session, _ in rows}) == 1
        assert [link for _, _, link in rows] == ["start", "parent", "parent"]


runner = CliRunner()


class TestSessionKeyOption:
    def _ingest(self, *rules: str):
        args = ["ingest", str(SESSION_IDS), "--store", "s.duckdb", "--json"]
        for rule in rules:
            args += ["--session-key", rule]
        return runner.invoke(app, args, catch_exceptions=False)

    def _sessions(self) -> dict[int, tuple[str, str]]:
        with Store.open("s.duckdb", read_only=True) as store:
            return {line: (key, source) for line, key, source in store.run(
                "SELECT source_line, session_key, session_key_source FROM requests")}

    def test_header_rule(self) -> None:
        assert self._ingest("header:X-Run-Id").exit_code == 0
        assert self._sessions()[12] == ("nightly-eval-0193", "--session-key header:X-Run-Id")
        assert self._sessions()[1][1] == "header:helicone-session-id"  # rule did not match

    def test_body_and_meta_rules_first_match_wins(self) -> None:
        assert self._ingest("body:metadata.purpose", "meta:prompt_cache_key").exit_code == 0
        sessions = self._sessions()
        assert sessions[11] == ("docs", "--session-key body:metadata.purpose")
        assert sessions[9] == ("chain-demo", "--session-key meta:prompt_cache_key")
        assert sessions[6] == ("support-4711", "header:x-conversation-id")

    @pytest.mark.parametrize("expr", ["x-run-id", "cookie:sid", "body:", "meta:a..b"])
    def test_unknown_expression_is_a_usage_error(self, expr: str) -> None:
        result = self._ingest(expr)
        assert result.exit_code == 2
        assert len(result.stderr.strip().splitlines()) == 1
        assert "--session-key" in result.stderr
        assert not Path("s.duckdb").exists()

    def test_parse_keeps_the_expression(self) -> None:
        rule = parse_session_rule("header:X-Run-Id")
        assert (rule.kind, rule.path, rule.expr) == ("header", ("x-run-id",), "header:X-Run-Id")
