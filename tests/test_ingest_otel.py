"""OTel GenAI spans (OTLP/JSON): which spans are requests, usage, body mapping, sessions."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from prefixscope.ingest import read_requests
from prefixscope.ingest.formats import otel as otel_format
from prefixscope.ingest.normalize.messages import chat_messages
from prefixscope.ingest.probing import probe
from prefixscope.ingest.source import Source
from prefixscope.model import Usage
from tests.conftest import FIXTURES

OTEL = FIXTURES / "otel"
CONVERSATION = "conv_5f2a9c1e7d3b"


def usage_tuple(u: Usage) -> tuple[int | None, int | None, int | None, int | None, str | None]:
    return (u.prompt_tokens, u.cached_tokens, u.cache_write_tokens, u.output_tokens, u.semantics)


def sniffs_otel(path: Path) -> bool:
    return otel_format.sniff(probe(Source.from_path(path)))


def kv(key: str, value: dict) -> dict:
    return {"key": key, "value": value}


def one_span_file(tmp_path: Path, attrs: list[dict], resource: list[dict] | None = None) -> Path:
    doc = {"resourceSpans": [{"resource": {"attributes": resource or []}, "scopeSpans": [
        {"scope": {"name": "t"}, "spans": [{"traceId": "aa", "spanId": "bb", "name": "chat m",
                                            "startTimeUnixNano": "1762164000000000000",
                                            "attributes": attrs}]}]}]}
    path = tmp_path / "span.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(scope="module")
def trace_turns():
    requests, skips = read_requests(OTEL / "genai_trace.json")
    assert skips == []
    return requests


@pytest.fixture(scope="module")
def collector():
    requests, skips = read_requests(OTEL / "collector.jsonl")
    assert skips == []
    return requests


class TestOtelDetection:
    @pytest.mark.parametrize("name", ["genai_trace.json", "collector.jsonl", "openllmetry.json",
                                      "bad.jsonl"])
    def test_fixtures_are_detected_as_otel(self, name: str) -> None:
        requests, _ = read_requests(OTEL / name)
        assert {r.source_format for r in requests} == {"otel"}

    def test_real_proto_example_is_otel_with_no_requests_and_one_file_skip(self,
                                                                         real: Path) -> None:
        # its one span, "I'm a server span", carries no gen_ai.* attribute
        path = real / "otel" / "opentelemetry-proto__examples__trace.json"
        assert sniffs_otel(path)
        requests, skips = read_requests(path)
        assert requests == []
        assert [s.line for s in skips] == [None]
        assert skips[0].reason.startswith("OTLP traces without a GenAI model-call span (1 span")

    @pytest.mark.parametrize("name", ["gen-ai-input-messages.json", "gen-ai-output-messages.json",
                                      "gen-ai-system-instructions.json",
                                      "gen-ai-tool-definitions.json"])
    def test_semconv_json_schemas_are_not_logs(self, real: Path, name: str) -> None:
        assert not sniffs_otel(real / "otel" / name)

    def test_only_the_trace_example_is_claimed_in_real_data(self, real: Path) -> None:
        claimed = [p.name for p in sorted(real.rglob("*")) if p.is_file() and sniffs_otel(p)]
        assert claimed == ["opentelemetry-proto__examples__trace.json"]

    def test_collector_line_longer_than_the_probe_head(self, tmp_path: Path) -> None:
        doc = json.loads((OTEL / "genai_trace.json").read_text())
        spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
        spans[1]["attributes"].append(kv("pad", {"stringValue": "y" * 100_000}))
        path = tmp_path / "big.jsonl"
        path.write_text(json.dumps(doc) + "\n" + json.dumps(doc) + "\n")
        assert probe(Source.from_path(path)).kind == "jsonl"
        requests, skips = read_requests(path)
        assert (len(requests), skips) == (6, [])
        assert [r.source_line for r in requests] == [1, 1, 1, 2, 2, 2]


class TestOtelRequestSelection:
    def test_only_model_call_spans_are_requests(self, trace_turns) -> None:
        # invoke_agent (with aggregated usage), execute_tool and an HTTP span are not requests.
        assert [r.native_id for r in trace_turns] == [
            "b1b1b1b1b1b1b1b1", "b2b2b2b2b2b2b2b2", "b3b3b3b3b3b3b3b3"]

    def test_embeddings_span_is_not_a_request(self, collector) -> None:
        assert "f3f3f3f3f3f3f3f3" not in {r.native_id for r in collector}

    def test_span_without_operation_name_but_with_usage_is_a_request(self, collector) -> None:
        legacy = next(r for r in collector if r.native_id == "f1f1f1f1f1f1f1f1")
        assert (legacy.model, legacy.body, legacy.endpoint) == ("gpt-4o-mini", None, "unknown")

    def test_resource_logs_lines_are_not_requests_nor_skips(self, collector) -> None:
        assert [r.source_line for r in collector] == [1, 1, 2, 4]


class TestOtelUsage:
    def test_input_tokens_are_cache_inclusive(self, trace_turns) -> None:
        assert [usage_tuple(r.usage) for r in trace_turns] == [
            (1210, 0, None, 24, "otel"),
            (1288, 1152, None, 21, "otel"),  # intValue written as a JSON number
            (1401, 1280, None, 32, "otel"),
        ]

    def test_anthropic_exclusive_input_is_converted(self, collector) -> None:
        assert usage_tuple(collector[0].usage) == (
            12 + 14210 + 310, 14210, 310, 95, "otel:anthropic-exclusive")

    def test_anthropic_inclusive_input_is_kept(self, collector) -> None:
        assert usage_tuple(collector[1].usage) == (14532, 14210, 310, 95, "otel")

    def test_old_prompt_and_completion_names(self, collector) -> None:
        assert usage_tuple(collector[2].usage) == (2048, None, None, 12, "otel")

    def test_openllmetry_cache_read_name(self) -> None:
        requests, _ = read_requests(OTEL / "openllmetry.json")
        assert usage_tuple(requests[0].usage) == (1536, 1408, None, 11, "otel")

    def test_span_without_usage_reports_none(self, tmp_path: Path) -> None:
        path = one_span_file(tmp_path, [kv("gen_ai.operation.name", {"stringValue": "chat"})])
        requests, _ = read_requests(path)
        assert requests[0].usage == Usage()


class TestOtelBody:
    def test_system_instructions_keep_part_boundaries(self, trace_turns) -> None:
        system = trace_turns[0].body["messages"][0]
        assert system["role"] == "system"
        assert [p["type"] for p in system["content"]] == ["text", "text"]
        assert system["content"][1]["text"].startswith("Repository layout:")

    def test_tool_calls_and_tool_responses(self, trace_turns) -> None:
        messages = trace_turns[1].body["messages"]
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]
        assert messages[2]["tool_calls"] == [{
            "id": "call_r1", "type": "function",
            "function": {"name": "run_shell",
                         "arguments": '{"cmd":"pytest -q tests/test_calc.py::test_divide"}'}}]
        assert messages[3] == {"role": "tool", "tool_call_id": "call_r1",
                               "content": "E  assert 3 == 3.5\n1 failed in 0.03s"}

    def test_reasoning_part_is_kept(self, trace_turns) -> None:
        assistant = trace_turns[2].body["messages"][4]
        assert assistant["content"] == [{"type": "reasoning", "text": "Floor division probably."}]

    def test_tool_definitions_become_function_tools(self, trace_turns) -> None:
        assert trace_turns[0].body["tools"][1] == {
            "type": "function",
            "function": {"name": "read_file", "description": "Read a text file.",
                         "parameters": {"type": "object",
                                        "properties": {"path": {"type": "string"}},
                                        "required": ["path"]}}}

    def test_body_from_names_the_attributes(self, trace_turns) -> None:
        assert {r.metadata["body_from"] for r in trace_turns} == {
            "otel:gen_ai.system_instructions+gen_ai.input.messages+gen_ai.tool.definitions"}
        assert {r.endpoint for r in trace_turns} == {"openai-chat"}
        assert list(trace_turns[0].body) == ["model", "messages", "tools"]

    def test_messages_grow_and_output_is_the_next_assistant_message(self, trace_turns) -> None:
        assert [len(r.body["messages"]) for r in trace_turns] == [2, 4, 6]
        for earlier, later in zip(trace_turns, trace_turns[1:], strict=False):
            assert later.body["messages"][len(earlier.body["messages"])] == earlier.output

    def test_blob_part_is_kept_as_logged(self, collector) -> None:
        assert collector[0].body["messages"][1]["content"][1] == {
            "type": "blob", "modality": "image", "mime_type": "image/png",
            "content": "iVBORw0KGgo="}

    def test_openllmetry_flat_prompt_attributes(self) -> None:
        requests, _ = read_requests(OTEL / "openllmetry.json")
        body = requests[0].body
        assert requests[0].metadata["body_from"] == "otel:gen_ai.prompt"
        assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool"]
        assert body["messages"][2]["tool_calls"][0]["function"] == {
            "name": "get_weather", "arguments": '{"city": "Paris"}'}
        assert body["messages"][3]["tool_call_id"] == "call_w1"
        assert body["tools"][0]["function"]["parameters"]["required"] == ["city"]
        assert requests[0].output == {"role": "assistant",
                                      "content": "It is 18C and cloudy in Paris."}

    def test_user_message_with_text_and_tool_response_splits_tool_first(self) -> None:
        messages = chat_messages({"role": "user", "parts": [
            {"type": "tool_call_response", "id": "t1", "response": {"ok": True}},
            {"type": "text", "content": "and now?"}]})
        assert messages == [
            {"role": "tool", "tool_call_id": "t1", "content": '{"ok":true}'},
            {"role": "user", "content": [{"type": "text", "text": "and now?"}]}]


    def test_tool_call_without_arguments_sends_an_empty_object(self) -> None:
        [message] = chat_messages({"role": "assistant", "parts": [
            {"type": "tool_call", "id": "c1", "name": "now"}]})
        assert message["tool_calls"][0]["function"] == {"name": "now", "arguments": "{}"}

    def test_empty_text_part_stays_empty_text(self) -> None:
        [message] = chat_messages({"role": "user", "parts": [{"type": "text", "content": ""}]})
        assert message["content"] == [{"type": "text", "text": ""}]


class TestOtelSession:
    def test_conversation_id(self, trace_turns) -> None:
        assert {(r.session_key, r.session_key_source) for r in trace_turns} == {
            (CONVERSATION, "gen_ai.conversation.id")}

    def test_resource_session_id(self, collector) -> None:
        assert (collector[0].session_key, collector[0].session_key_source) == (
            "sess-anthropic-1", "session.id")

    def test_langfuse_session_id_and_user(self, collector) -> None:
        assert (collector[2].session_key, collector[2].session_key_source, collector[2].user) == (
            "lf-session-77", "langfuse.session.id", "alice")

    def test_no_session_attribute(self, collector) -> None:
        assert collector[3].session_key is None


class TestOtelIdentity:
    def test_time_model_client_channel(self, trace_turns) -> None:
        first = trace_turns[0]
        assert first.timestamp == datetime(2025, 11, 3, 10, 0, 0)
        assert (first.model, first.client, first.channel) == ("gpt-4.1", "calc-agent", "openai")
        assert first.metadata["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
        assert first.metadata["parent_span_id"] == "a1a1a1a1a1a1a1a1"

    def test_places_are_span_ordinals_in_one_document(self, trace_turns) -> None:
        assert [r.source_line for r in trace_turns] == [2, 4, 5]

    def test_ids_are_stable(self, trace_turns) -> None:
        again, _ = read_requests(OTEL / "genai_trace.json")
        assert [r.id for r in again] == [r.id for r in trace_turns]


class TestOtelAnyValue:
    @pytest.mark.parametrize(("value", "expected"), [
        ({"stringValue": "x"}, "x"),
        ({"intValue": "51478"}, 51478),
        ({"intValue": 7}, 7),
        ({"doubleValue": 0.5}, 0.5),
        ({"boolValue": True}, True),
        ({"arrayValue": {"values": [{"stringValue": "a"}, {"intValue": "2"}]}}, ["a", 2]),
        ({"kvlistValue": {"values": [{"key": "k", "value": {"boolValue": False}}]}}, {"k": False}),
        ({"bytesValue": "AAE="}, "AAE="),
        ({}, None),
        ({"string_value": "snake"}, "snake"),
    ])
    def test_decoding(self, value: dict, expected: object) -> None:
        assert otel_format.any_value(value) == expected


class TestOtelBadInput:
    def test_skips_with_reasons(self) -> None:
        _, skips = read_requests(OTEL / "bad.jsonl")
        assert [s.line for s in skips] == [2, 3, 5, 6, 7]
        assert skips[0].reason.startswith("invalid JSON")
        assert [s.reason for s in skips[1:]] == [
            "not an OTLP traces document: no resourceSpans",
            "expected an OTLP/JSON object, got list",
            "resourceSpans is not a list",
            "span is not an object (str)",
        ]

    def test_unparseable_messages_keep_usage_and_note_the_error(self) -> None:
        requests, _ = read_requests(OTEL / "bad.jsonl")
        broken = next(r for r in requests if r.native_id == "0b0b0b0b0b0b0b0b")
        assert (broken.body, broken.endpoint) == (None, "unknown")
        assert broken.metadata["body_error"] == "gen_ai.input.messages is not a JSON array"
        assert usage_tuple(broken.usage) == (40, None, None, 3, "otel")
        assert [r.source_line for r in requests] == [1, 4]
