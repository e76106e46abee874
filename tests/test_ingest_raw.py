"""Raw captures: detection, bodies kept verbatim, usage from JSON and SSE, sessions."""

from __future__ import annotations

import gzip
import json
from datetime import datetime
from pathlib import Path

import pytest

from prefixscope.ingest import read_requests
from prefixscope.ingest.formats import raw as raw_format
from prefixscope.ingest.normalize.streams import decode_response, parse_sse
from prefixscope.ingest.probing import probe
from prefixscope.ingest.source import Source
from prefixscope.model import Usage
from prefixscope.store.load import ingest_paths
from tests.conftest import FIXTURES

RAW = FIXTURES / "raw"
CC_SESSION = "9f3c2a71-4b8e-4d2f-a6c1-3e5b7d9f0a12"
DEVICE = "3f9b2c7e1a4d6085b2e9c7f1a3d5b7e9c1f3a5d7b9e1c3f5a7d9b1e3c5f7a9d1"
ACCOUNT = "5e2d8c41-97ab-4f03-b6e2-1c9d7a3f5b80"


def sniffs_raw(path: Path) -> bool:
    return raw_format.sniff(probe(Source.from_path(path)))


def write_jsonl(path: Path, records: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def usage_tuple(u: Usage) -> tuple[int | None, int | None, int | None, int | None, str | None]:
    return (u.prompt_tokens, u.cached_tokens, u.cache_write_tokens, u.output_tokens, u.semantics)


@pytest.fixture(scope="module")
def cc_turns():
    requests, skips = read_requests(RAW / "claude_code_capture.jsonl")
    assert skips == []
    return requests


@pytest.fixture(scope="module")
def chat_turns():
    requests, skips = read_requests(RAW / "openai_chat_capture.jsonl")
    assert skips == []
    return requests


@pytest.fixture(scope="module")
def responses_turns():
    requests, skips = read_requests(RAW / "openai_responses_capture.json")
    assert skips == []
    return requests


@pytest.fixture(scope="module")
def trace_result():
    return read_requests(RAW / "claude_trace.jsonl")


@pytest.fixture(scope="module")
def bodies():
    requests, skips = read_requests(RAW / "bodies.jsonl")
    assert skips == []
    return requests


@pytest.fixture(scope="module")
def bad_result():
    return read_requests(RAW / "bad.jsonl")


class TestRawDetection:
    @pytest.mark.parametrize("name", [
        "claude_code_capture.jsonl", "openai_chat_capture.jsonl", "openai_responses_capture.json",
        "claude_trace.jsonl", "bodies.jsonl", "bad.jsonl", "pairs/01.request.json",
    ])
    def test_fixtures_are_detected_as_raw(self, name: str) -> None:
        requests, _ = read_requests(RAW / name)
        assert {r.source_format for r in requests} == {"raw"}

    @pytest.mark.parametrize("record", [
        # Claude Code session line, Langfuse observation, LiteLLM payload, Bifrost log,
        # SWE-agent trajectory, mini-swe-agent trajectory, OTLP document, Anthropic response.
        {"type": "user", "sessionId": "s", "message": {"role": "user", "content": "hi"}},
        {"id": "o1", "type": "GENERATION", "model": "gpt-4o", "input": [{"role": "user"}]},
        {"id": "x", "model": "gpt-4o", "messages": [], "response": {}, "call_type": "acompletion"},
        {"model": "gpt-4o", "input_history": [{"role": "user", "content": "hi"}]},
        {"trajectory": [], "history": [{"role": "system", "content": "s"}], "info": {}},
        {"info": {}, "messages": [{"role": "user", "content": "x"}],
         "trajectory_format": "mini-swe-agent-1"},
        {"resourceSpans": []},
        {"model": "gpt-4o", "messages": [], "proxy_server_request": {"body": {}}},
    ])
    def test_other_formats_records_are_not_claimed(self, tmp_path: Path, record: dict) -> None:
        assert not sniffs_raw(write_jsonl(tmp_path / "x.jsonl", [record]))

    def test_no_real_data_file_is_claimed(self, real: Path) -> None:
        claimed = [p for p in sorted(real.rglob("*")) if p.is_file() and sniffs_raw(p)]
        assert claimed == []

    def test_response_document_is_claimed_to_report_it(self) -> None:
        assert sniffs_raw(RAW / "orphan" / "07.response.json")

    def test_capture_line_longer_than_the_probe_head(self, tmp_path: Path) -> None:
        record = json.loads((RAW / "claude_code_capture.jsonl").read_text().splitlines()[0])
        record["request"]["messages"][0]["content"][1]["text"] += " pad" * 40_000
        path = write_jsonl(tmp_path / "big.jsonl", [record, record])
        assert probe(Source.from_path(path)).kind == "jsonl"
        requests, skips = read_requests(path)
        assert (len(requests), skips) == (2, [])
        assert requests[0].usage.prompt_tokens == 14213

    def test_bare_body_longer_than_the_probe_head(self, tmp_path: Path) -> None:
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "x" * 100_000}]}
        requests, skips = read_requests(write_jsonl(tmp_path / "bodies.jsonl", [body]))
        assert (len(requests), skips) == (1, [])
        assert requests[0].body == body


class TestRawClaudeCodeCapture:
    def test_usage_merges_message_start_and_message_delta(self, cc_turns) -> None:
        assert [usage_tuple(r.usage) for r in cc_turns] == [
            (14213, 0, 14210, 87, "anthropic"),
            (14594, 14210, 380, 61, "anthropic"),
            # message_delta's cumulative counts replace message_start's (cache write 1 -> 212)
            (14808, 14590, 212, 143, "anthropic"),
        ]

    def test_session_from_header_case_insensitive(self, cc_turns) -> None:
        assert {(r.session_key, r.session_key_source) for r in cc_turns} == {
            (CC_SESSION, "header:x-claude-code-session-id")}

    def test_client_user_and_billing_version(self, cc_turns) -> None:
        assert {(r.client, r.user, r.metadata["cc_version"]) for r in cc_turns} == {
            ("claude-code:cli", ACCOUNT, "2.1.37.0d9")}

    def test_body_is_kept_verbatim_with_volatile_billing_header(self, cc_turns) -> None:
        first = json.loads((RAW / "claude_code_capture.jsonl").read_text().splitlines()[0])
        assert cc_turns[0].body == first["request"]
        assert list(cc_turns[0].body) == ["model", "messages", "temperature", "system", "tools",
                                       "metadata", "max_tokens", "stream"]
        assert [r.body["system"][0]["text"][-10:] for r in cc_turns] == [
            "cch=fa690;", "cch=2b7e1;", "cch=c04d9;"]

    def test_messages_grow_and_output_is_the_next_assistant_turn(self, cc_turns) -> None:
        assert [len(r.body["messages"]) for r in cc_turns] == [1, 3, 5]
        for earlier, later in zip(cc_turns, cc_turns[1:], strict=False):
            assert later.body["messages"][len(earlier.body["messages"])] == earlier.output

    def test_tool_use_input_rebuilt_from_partial_json(self, cc_turns) -> None:
        assert cc_turns[2].output["content"][1] == {
            "type": "tool_use", "id": "toolu_01Rs9tU2vW5xY8zA1bC4dE7f", "name": "Edit",
            "input": {"file_path": "/home/dev/calc/calc.py", "old_string": "    return a // b",
                      "new_string": "    return a / b"}}

    def test_identity_time_and_endpoint(self, cc_turns) -> None:
        first = cc_turns[0]
        assert first.endpoint == "anthropic-messages"
        assert first.model == "claude-sonnet-4-5-20250929"
        assert first.native_id == "msg_01XFDUDYJgAACzvnptvVoYEL"
        assert first.timestamp == datetime(2025, 11, 3, 9, 14, 2, 118000)
        assert first.source_line == 1
        assert first.metadata["url_path"] == "/v1/messages"
        assert first.metadata["streamed"] is True

    def test_ids_are_stable_across_reads(self, cc_turns) -> None:
        again, _ = read_requests(RAW / "claude_code_capture.jsonl")
        assert [r.id for r in again] == [r.id for r in cc_turns]
        assert len({r.id for r in cc_turns}) == 3


class TestRawOpenAIChatCapture:
    def test_usage_includes_cached_tokens(self, chat_turns) -> None:
        assert [usage_tuple(r.usage) for r in chat_turns] == [
            (1187, 0, None, 18, "openai"),
            (1264, 1152, None, 20, "openai"),
            (1391, 1280, None, 29, "openai"),
        ]

    def test_stream_usage_from_last_chunk_and_message_rebuilt(self, chat_turns) -> None:
        assert chat_turns[2].metadata["streamed"] is True
        assert chat_turns[2].output == {
            "role": "assistant",
            "content": "The test depends on the machine's local time zone: CI runs in UTC, "
                       "your laptop in UTC+1. Pin TZ in the test."}

    def test_prompt_cache_key_and_user_are_not_sessions(self, chat_turns) -> None:
        assert {(r.session_key, r.session_key_source, r.user) for r in chat_turns} == {
            (None, None, "dev-42")}
        assert chat_turns[0].metadata["prompt_cache_key"] == "repo-srv-app"

    def test_endpoint_client_channel_from_the_capture(self, chat_turns) -> None:
        assert {(r.endpoint, r.client, r.channel) for r in chat_turns} == {
            ("openai-chat", "OpenAI/Python 1.109.1", "api.openai.com")}
        assert [r.native_id for r in chat_turns] == [
            "chatcmpl-BZ9kEw1Qk7nUa0dS3fGh5jKl", "chatcmpl-BZ9kMz4Rt8oPb2eT6gHi9kLm",
            "chatcmpl-BZ9kq2Lh3mNw8xYt6cVb1rPq"]


class TestRawResponsesCapture:
    def test_http_envelope_body_and_usage(self, responses_turns) -> None:
        assert [r.endpoint for r in responses_turns] == ["openai-responses"] * 2
        assert [usage_tuple(r.usage) for r in responses_turns] == [
            (212, 0, None, 31, "openai-responses"),
            (281, 128, None, 40, "openai-responses"),
        ]
        assert list(responses_turns[1].body) == ["model", "instructions", "input", "tools", "store",
                                       "stream", "prompt_cache_key"]

    def test_stream_takes_response_completed(self, responses_turns) -> None:
        assert responses_turns[1].metadata["streamed"] is True
        assert responses_turns[1].native_id == "resp_68a1b2c9bb02"
        assert responses_turns[1].output[0]["content"][0]["text"].startswith("## [2.4.0]")

    def test_envelope_time_in_epoch_seconds_and_array_index(self, responses_turns) -> None:
        assert responses_turns[0].timestamp == datetime(2025, 11, 3, 11, 0, 0, 412000)
        assert [r.source_line for r in responses_turns] == [1, 2]
        assert responses_turns[0].metadata["http_status"] == 200


class TestRawClaudeTrace:
    def test_count_tokens_and_get_models_are_not_requests_nor_skips(self, trace_result) -> None:
        requests, skips = trace_result
        assert [r.source_line for r in requests] == [2, 4]
        assert skips == []

    def test_json_string_user_id_with_empty_account_uses_device(self, trace_result) -> None:
        first = trace_result[0][0]
        assert (first.session_key, first.session_key_source) == (
            "0c1d2e3f-4a5b-4c6d-8e7f-9a0b1c2d3e4f", "claude-code.metadata.user_id")
        assert first.user == DEVICE
        assert first.client == "claude-code:sdk-ts"

    def test_orphaned_request_keeps_body_and_reports_no_usage(self, trace_result) -> None:
        orphan = trace_result[0][1]
        assert orphan.usage == Usage()
        assert orphan.metadata["response_missing"] is True
        assert len(orphan.body["messages"]) == 3

    def test_json_response_usage(self, trace_result) -> None:
        assert usage_tuple(trace_result[0][0].usage) == (41, 0, 0, 9, "anthropic")


class TestRawBodiesOnly:
    def test_endpoint_detected_per_body(self, bodies) -> None:
        assert [r.endpoint for r in bodies] == [
            "anthropic-messages", "openai-chat", "openai-responses"]

    def test_no_response_means_no_usage(self, bodies) -> None:
        assert {r.usage for r in bodies} == {Usage()}

    def test_json_string_metadata_user_id(self, bodies) -> None:
        assert (bodies[0].session_key, bodies[0].session_key_source, bodies[0].user) == (
            "7a8b9c0d-1e2f-4a3b-8c4d-5e6f7a8b9c0d", "claude-code.metadata.user_id", ACCOUNT)

    def test_openai_user_is_a_user_not_a_session(self, bodies) -> None:
        assert (bodies[1].session_key, bodies[1].user) == (None, "team-infra")


class TestRawLegacyUserId:
    def test_legacy_user_id_without_header(self, tmp_path: Path) -> None:
        body = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}],
                "metadata": {"user_id": f"user_{DEVICE}_account__session_{CC_SESSION}"}}
        requests, _ = read_requests(write_jsonl(tmp_path / "b.jsonl", [body]))
        assert (requests[0].session_key, requests[0].session_key_source, requests[0].user) == (
            CC_SESSION, "claude-code.metadata.user_id", DEVICE)

    def test_header_wins_over_metadata(self, tmp_path: Path) -> None:
        record = {"headers": {"x-claude-code-session-id": "from-header"},
                  "request": {"model": "m", "messages": [],
                              "metadata": {
                                  "user_id": f"user_ab_account_{ACCOUNT}_session_{CC_SESSION}"}}}
        requests, _ = read_requests(write_jsonl(tmp_path / "c.jsonl", [record]))
        assert (requests[0].session_key, requests[0].user) == ("from-header", ACCOUNT)


class TestRawPairs:
    def test_each_request_reads_its_response(self) -> None:
        found = [read_requests(RAW / "pairs" / f"0{n}.request.json") for n in (1, 2, 3)]
        assert [skips for _, skips in found] == [[], [], []]
        assert [usage_tuple(reqs[0].usage) for reqs, _ in found] == [
            (14193, 0, 14190, 52, "anthropic"),
            (14291, 14190, 96, 19, "anthropic"),  # SSE response text in a .json file
            (14334, 14286, 41, 48, "anthropic"),  # gzip-compressed response
        ]
        assert [reqs[0].metadata["capture"] for reqs, _ in found] == ["pair"] * 3

    def test_pair_session_from_json_user_id(self) -> None:
        requests, _ = read_requests(RAW / "pairs" / "02.request.json")
        assert (requests[0].session_key, requests[0].client) == (
            "e4d3c2b1-a098-4765-8432-10fedcba9876", "claude-code:cli")

    def test_is_companion(self) -> None:
        assert raw_format.is_companion(RAW / "pairs" / "01.response.json")
        assert raw_format.is_companion(RAW / "pairs" / "03.response.json.gz")
        assert not raw_format.is_companion(RAW / "pairs" / "01.request.json")
        assert not raw_format.is_companion(RAW / "orphan" / "07.response.json")

    def test_response_only_file_is_a_skip(self) -> None:
        requests, skips = read_requests(RAW / "orphan" / "07.response.json")
        assert requests == []
        assert [(s.line, s.reason) for s in skips] == [
            (1, "a response without its request (no NN.request.json beside it): "
                "nothing to analyse")]

    def test_response_of_a_pair_read_alone_points_at_its_request(self) -> None:
        _, skips = read_requests(RAW / "pairs" / "01.response.json")
        assert [s.reason for s in skips] == [
            "a response file: it is read with 01.request.json; ingest that file instead"]

    def test_missing_response_is_not_an_error(self, tmp_path: Path) -> None:
        (tmp_path / "09.request.json").write_text(
            json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]}))
        requests, skips = read_requests(tmp_path / "09.request.json")
        assert skips == []
        assert requests[0].metadata["response_missing"] is True

    def test_unreadable_response_keeps_the_request(self, tmp_path: Path) -> None:
        (tmp_path / "05.request.json").write_text(
            json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]}))
        whole = gzip.compress(b'{"id": "msg_1", "type": "message"}')
        (tmp_path / "05.response.json.gz").write_bytes(whole[:-6])
        requests, skips = read_requests(tmp_path / "05.request.json")
        assert skips == []
        assert requests[0].usage == Usage()
        assert requests[0].metadata["response_error"].startswith("cannot read 05.response.json.gz")

    def test_directory_walk_reads_each_pair_once(self) -> None:
        from prefixscope.store import Store

        store = Store.open(":memory:")
        result = ingest_paths([str(RAW / "pairs")], store)
        assert (result.ingested, result.skipped, result.by_format) == (3, 0, {"raw": 3})
        assert sorted(Path(p).name for p in result.ignored) == [
            "01.response.json", "02.response.json", "03.response.json.gz"]

    def test_gzip_request_file_and_gzip_response(self, tmp_path: Path) -> None:
        body = json.loads((RAW / "pairs" / "01.request.json").read_text())
        with gzip.open(tmp_path / "01.request.json.gz", "wt") as fh:
            json.dump(body, fh)
        (tmp_path / "01.response.json.gz").write_bytes(
            gzip.compress((RAW / "pairs" / "01.response.json").read_bytes()))
        requests, skips = read_requests(tmp_path / "01.request.json.gz")
        assert skips == []
        assert requests[0].usage.prompt_tokens == 14193
        assert raw_format.is_companion(tmp_path / "01.response.json.gz")


class TestRawEndpointDetection:
    @pytest.mark.parametrize(("where", "expected"), [
        ({"endpoint": "/v1/messages"}, "anthropic-messages"),
        ({"url": "https://x.openai.azure.com/openai/deployments/gpt/chat/completions?api-version=1"},
         "openai-chat"),
        ({"path": "/v1/responses"}, "openai-responses"),
        ({"endpoint": "anthropic-messages"}, "anthropic-messages"),
    ])
    def test_endpoint_from_capture_beats_body_shape(self, tmp_path: Path, where: dict,
                                                    expected: str) -> None:
        # The body alone looks like OpenAI Chat (no system, no Anthropic blocks).
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
        record = {**where, "request": body}
        requests, _ = read_requests(write_jsonl(tmp_path / "e.jsonl", [record]))
        assert requests[0].endpoint == expected

    def test_response_protocol_when_no_url(self, tmp_path: Path) -> None:
        record = {"request": {"model": "m", "messages": [{"role": "user", "content": "x"}]},
                  "response": {"id": "msg_1", "type": "message", "role": "assistant",
                               "content": [], "usage": {"input_tokens": 3, "output_tokens": 1}}}
        requests, _ = read_requests(write_jsonl(tmp_path / "r.jsonl", [record]))
        assert requests[0].endpoint == "anthropic-messages"
        assert usage_tuple(requests[0].usage) == (3, None, None, 1, "anthropic")


class TestRawBadInput:
    def test_each_bad_record_is_a_skip_with_a_reason(self, bad_result) -> None:
        _, skips = bad_result
        assert [s.line for s in skips] == [2, 3, 4, 5]
        assert skips[0].reason.startswith("invalid JSON")
        assert skips[1].reason == \
            "request body has no 'messages' or 'input' (not a model call we can read)"
        assert skips[2].reason == "expected a JSON object, got list"
        assert skips[3].reason == ("not a request capture: no 'request' object and no request "
                                   "body (model + messages/input)")

    def test_undecodable_sse_event_keeps_the_request(self, bad_result) -> None:
        requests, _ = bad_result
        line6 = next(r for r in requests if r.source_line == 6)
        assert usage_tuple(line6.usage) == (5, 0, None, 1, "anthropic")
        assert line6.metadata["sse_bad_events"] == 1

    def test_error_response_is_kept_without_usage(self, bad_result) -> None:
        requests, _ = bad_result
        line7 = next(r for r in requests if r.source_line == 7)
        assert line7.usage == Usage()
        assert (line7.metadata["http_status"], line7.metadata["response_error"]) == (
            529, "overloaded_error")
        assert line7.endpoint == "anthropic-messages"

    def test_good_records_survive(self, bad_result) -> None:
        requests, _ = bad_result
        assert [r.source_line for r in requests] == [1, 6, 7]


class TestParseSSE:
    def test_event_name_fills_missing_type_and_done_is_ignored(self) -> None:
        text = ("event: ping\ndata: {}\n\n: keep-alive comment\n\n"
                "data: {\"object\":\"chat.completion.chunk\",\"choices\":[]}\n\ndata: [DONE]\n\n")
        events, bad = parse_sse(text)
        assert events == [{"type": "ping"}, {"object": "chat.completion.chunk", "choices": []}]
        assert bad == 0

    def test_multi_line_data_is_joined(self) -> None:
        events, bad = parse_sse('data: {"a":\ndata: 1}\n\ndata: {broken\n\n')
        assert (events, bad) == ([{"a": 1}], 1)

    def test_crlf_line_endings(self) -> None:
        events, _ = parse_sse("event: x\r\ndata: {\"type\":\"message_stop\"}\r\n\r\n")
        assert events == [{"type": "message_stop"}]


class TestRawStreamRebuild:
    def test_chat_tool_call_arguments_are_concatenated(self) -> None:
        def chunk(delta: dict | None, usage: dict | None = None) -> str:
            choices = [] if delta is None else [{"index": 0, "delta": delta}]
            return "data: " + json.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk",
                                          "choices": choices, "usage": usage}) + "\n\n"
        text = (chunk({"role": "assistant", "content": None, "tool_calls": [
                    {"index": 0, "id": "call_1", "type": "function",
                     "function": {"name": "run", "arguments": ""}}]})
                + chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":'}}]})
                + chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]})
                + chunk(None, {"prompt_tokens": 10, "completion_tokens": 2}))
        reply = decode_response(text)
        assert reply.output == {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "run", "arguments": '{"a":1}'}}]}
        assert usage_tuple(reply.usage) == (10, None, None, 2, "openai")

    def test_anthropic_thinking_block_and_empty_tool_input(self) -> None:
        events = [
            {"type": "message_start", "message": {"id": "msg_1", "role": "assistant",
                                                  "content": [], "usage": {
                                                      "input_tokens": 1,
                                                      "cache_read_input_tokens": 10,
                                                      "output_tokens": 1}}},
            {"type": "content_block_start", "index": 0,
             "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
            {"type": "content_block_delta", "index": 0,
             "delta": {"type": "thinking_delta", "thinking": "abc"}},
            {"type": "content_block_delta", "index": 0,
             "delta": {"type": "signature_delta", "signature": "sig"}},
            {"type": "content_block_start", "index": 1,
             "content_block": {"type": "tool_use", "id": "t", "name": "X", "input": {}}},
            {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 7}},
        ]
        text = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
        reply = decode_response(text)
        assert reply.output["content"] == [
            {"type": "thinking", "thinking": "abc", "signature": "sig"},
            {"type": "tool_use", "id": "t", "name": "X", "input": {}}]
        assert usage_tuple(reply.usage) == (11, 10, None, 7, "anthropic")

    def test_request_and_response_logged_as_json_strings(self, tmp_path: Path) -> None:
        record = {"request": json.dumps({"model": "m", "messages": [{"role": "user",
                                                                     "content": "x"}]}),
                  "response": json.dumps({"id": "chatcmpl-2", "object": "chat.completion",
                                          "choices": [{"message": {"role": "assistant",
                                                                   "content": "y"}}],
                                          "usage": {"prompt_tokens": 3, "completion_tokens": 1}})}
        requests, skips = read_requests(write_jsonl(tmp_path / "s.jsonl", [record]))
        assert skips == []
        assert (requests[0].native_id, requests[0].usage.prompt_tokens) == ("chatcmpl-2", 3)
