"""Langfuse ingest: detection, body reconstruction, usage normalization, sessions, bad input.

Fixtures in tests/fixtures/langfuse/ are shaped as formats.md §1 describes each
export; the real "Download trace as JSON" files are in tests/data/real/langfuse/
(expected values below were read from those files by hand).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES

from prefixscope.ingest import read_requests
from prefixscope.ingest.formats import langfuse as lf
from prefixscope.ingest.formats import otel as otel_format
from prefixscope.ingest.probing import probe
from prefixscope.ingest.readers.clickhouse import clickhouse_literal
from prefixscope.ingest.source import Source
from prefixscope.model import Request, Skip, Usage
from prefixscope.store.load import ingest_paths

LF = FIXTURES / "langfuse"
FIXTURE_FILES = sorted(p for p in LF.iterdir() if p.suffix != ".py")
CLAUDE_CODE = LF / "claude-code-gateway.events_full.jsonl"


def requests_of(path: Path) -> tuple[list[Request], list[Skip]]:
    return read_requests(path, "langfuse")


def by_id(path: Path) -> dict[str, Request]:
    return {r.native_id: r for r in requests_of(path)[0]}


def sniff(path: Path) -> bool:
    return lf.sniff(probe(Source.from_path(path)))


def usage_of(details: dict, **row) -> Usage:
    return lf.normalize_usage({"usageDetails": details, **row})[0]


class TestLangfuseDetection:
    @pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.name)
    def test_claims_every_export_shape(self, path: Path) -> None:
        assert sniff(path)

    @pytest.mark.real
    def test_claims_real_trace_downloads(self, real: Path) -> None:
        files = sorted((real / "langfuse").glob("*.json"))
        assert len(files) == 5
        assert all(sniff(f) for f in files)

    def test_auto_detection_picks_langfuse_whatever_the_file_name(self, tmp_path: Path) -> None:
        copy = tmp_path / "export.txt"
        shutil.copy(LF / "v2-observations-page.json", copy)
        requests, _ = read_requests(copy)
        assert {r.source_format for r in requests} == {"langfuse"}

    @pytest.mark.parametrize("content", [
        '{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "ab", "spanId": "cd"}]}]}]}',
        '{"request_id": "r1", "call_type": "acompletion", "startTime": "2026-01-01", '
        '"model": "gpt-4o", "spend": 0.1, "metadata": {}}\n',
        '{"data": {"items": [{"id": 1, "type": 2, "model_name": "gpt-4o"}]}, "success": true}',
        '{"data": [{"id": "t1", "name": "x", "observations": ["o1", "o2"], "htmlPath": "/t"}], '
        '"meta": {"page": 1, "limit": 50, "totalItems": 1, "totalPages": 1}}',
        '{"data": [{"id": 1}], "meta": {}}',
        '{"id": "o1", "traceId": "t1", "type": "GENERATION"}\n',
        'id,type,trace_id,start_time\n1,GENERATION,t,2026-01-01\n',
    ], ids=["otlp", "litellm-spendlog", "newapi-page", "traces-list", "generic-page",
            "bare-row-without-langfuse-keys", "csv-without-langfuse-columns"])
    def test_does_not_claim_other_formats(self, tmp_path: Path, content: str) -> None:
        path = tmp_path / "log.json"
        path.write_text(content)
        assert not sniff(path)


@pytest.mark.real
class TestLangfuseRealDownloads:
    COUNTS = {  # GENERATION observations per file, counted in the files
        "claude-agent-2025-12-22.trace.json": 4,
        "crewai-2025-07-11.trace.json": 1,
        "langgraph-js-2025-10-30.trace.json": 2,
        "langgraph-python-2025-08-22.trace.json": 2,
        "openai-agents-2025-09-30.trace.json": 2,
    }

    def test_every_generation_is_a_request_and_nothing_is_skipped(self, real: Path) -> None:
        for name, count in self.COUNTS.items():
            requests, skips = requests_of(real / "langfuse" / name)
            assert (name, len(requests), skips) == (name, count, [])
            assert all(r.source_format == "langfuse" for r in requests)

    def test_input_cache_read_usage(self, real: Path) -> None:
        # usageDetails {input 179, output 35, total 278, input_audio 0, input_cache_read 0,
        # output_audio 0, output_reasoning 64}: outputUsage in the file is 99.
        r = by_id(real / "langfuse/langgraph-js-2025-10-30.trace.json")["0856a1825ccee968"]
        assert r.usage == Usage(prompt_tokens=179, cached_tokens=0, cache_write_tokens=None,
                                output_tokens=99, semantics="langfuse")

    def test_prompt_details_cache_read_usage(self, real: Path) -> None:
        # usageDetails {input 190, prompt_details.cache_read 0, prompt_details.audio 0,
        # output 164, completion_details.reasoning 0, ..., total 354}
        r = by_id(real / "langfuse/crewai-2025-07-11.trace.json")["231c43964b7e7e63"]
        assert r.usage == Usage(prompt_tokens=190, cached_tokens=0, cache_write_tokens=None,
                                output_tokens=164, semantics="langfuse")

    def test_plain_input_output_total_usage(self, real: Path) -> None:
        r = by_id(real / "langfuse/claude-agent-2025-12-22.trace.json")["e9aac170e5d48125"]
        assert r.usage == Usage(prompt_tokens=19, cached_tokens=None, cache_write_tokens=None,
                                output_tokens=29, semantics="langfuse")
        r2 = by_id(real / "langfuse/openai-agents-2025-09-30.trace.json")["90d94774e8e3724d"]
        assert (r2.usage.prompt_tokens, r2.usage.cached_tokens, r2.usage.output_tokens) == (
            85, 0, 29)

    def test_json_string_input_is_decoded(self, real: Path) -> None:
        r = by_id(real / "langfuse/crewai-2025-07-11.trace.json")["231c43964b7e7e63"]
        assert r.endpoint == "openai-chat"
        assert [m["role"] for m in r.body["messages"]] == ["system", "user"]
        assert r.body["messages"][0]["content"].startswith(
            "You are Software developer. An expert coder")
        assert r.metadata["body_from"] == "langfuse.input (request body)"

    def test_langchain_tool_messages_become_tools(self, real: Path) -> None:
        r = by_id(real / "langfuse/langgraph-python-2025-08-22.trace.json")["5ba09605e0929d78"]
        assert [m["role"] for m in r.body["messages"]] == ["user", "user", "assistant", "tool"]
        assert r.body["tools"] == [{"type": "function", "function": {
            "name": "Web-Search", "description": "Dummy web search tool.",
            "parameters": {"properties": {"query": {"type": "string"}}, "required": ["query"],
                           "type": "object"}}}]
        assert list(r.body["tools"][0]["function"]["parameters"]) == [
            "properties", "required", "type"]
        assistant = r.body["messages"][2]
        assert list(assistant) == ["role", "content", "tool_calls", "additional_kwargs"]
        assert assistant["tool_calls"][0]["id"] == "call_1oGK863sxQHlPreFhDdEs3yl"
        assert r.metadata["body_from"] == (
            "langfuse.input (message list) + langchain additional_kwargs.tool_calls -> "
            "tool_calls + langchain tool messages -> tools")

    def test_message_list_kept_as_logged(self, real: Path) -> None:
        r = by_id(real / "langfuse/langgraph-js-2025-10-30.trace.json")["0856a1825ccee968"]
        assert r.body["messages"][2] == {"content": "It's always sunny in San Francisco!",
                                         "additional_kwargs": {}, "role": "get_weather"}
        assert "tools" not in r.body

    def test_unusable_input_gives_no_body_but_keeps_usage(self, real: Path) -> None:
        requests = by_id(real / "langfuse/claude-agent-2025-12-22.trace.json")
        broken = requests["371496f71d82baed"]  # input is {"content":"role"}
        assert broken.body is None and broken.endpoint == "unknown"
        assert broken.metadata["body_note"] == (
            "input is JSON but neither a message list nor a request body")
        assert broken.usage.output_tokens == 94
        single = requests["e9aac170e5d48125"]
        assert single.body == {"messages": [
            {"content": "What's the weather like in Berlin and New York?", "role": "user"}]}
        assert single.metadata["body_from"] == "langfuse.input (single message)"

    def test_responses_items_with_instructions(self, real: Path) -> None:
        requests = by_id(real / "langfuse/openai-agents-2025-09-30.trace.json")
        first, second = requests["98870087af69bf06"], requests["90d94774e8e3724d"]
        assert first.endpoint == second.endpoint == "openai-responses"
        assert first.body == {"instructions": "You are a helpful agent.",
                              "input": [{"content": "What's the weather in Tokyo?",
                                         "role": "user"}]}
        assert [i.get("type") for i in second.body["input"]] == [
            None, "function_call", "function_call_output"]

    def test_session_falls_back_to_trace_id(self, real: Path) -> None:
        requests, _ = requests_of(real / "langfuse/langgraph-python-2025-08-22.trace.json")
        assert {(r.session_key, r.session_key_source) for r in requests} == {
            ("e1fde3efec57ce8a69bafd3fb928a7eb", "langfuse.traceId")}
        assert {r.metadata["threadId"] for r in requests} == {"demo-thread-1"}
        assert {r.client for r in requests} == {"LangGraph"}
        assert {r.channel for r in requests} == {"openai"}

    def test_place_time_model_and_key(self, real: Path) -> None:
        r = by_id(real / "langfuse/langgraph-python-2025-08-22.trace.json")["4f6535aaebcda355"]
        assert r.source_line == 2  # index in the observations array
        assert r.timestamp.isoformat() == "2025-08-22T09:38:56.232000"
        assert r.model == "gpt-4o-2024-08-06"
        assert r.metadata["name"] == "ChatOpenAI"
        assert r.metadata["parentObservationId"] == "98d3e02591797c04"

    def test_ids_are_stable_across_reads(self, real: Path) -> None:
        path = real / "langfuse/langgraph-js-2025-10-30.trace.json"
        assert [r.id for r in requests_of(path)[0]] == [r.id for r in requests_of(path)[0]]
        assert len({r.id for r in requests_of(path)[0]}) == 2


class TestLangfuseContainers:
    def test_json_array_batch_export(self, tmp_path: Path) -> None:
        rows = [json.loads(line) for line in (LF / "batch-export.jsonl").read_text().splitlines()
                if line.startswith('{"id":"gen-exp-lc')]
        path = tmp_path / "export.json"
        path.write_text(json.dumps(rows))
        requests, skips = read_requests(path)
        assert [(r.native_id, r.source_line) for r in requests] == [
            ("gen-exp-lc-serialized", 1), ("gen-exp-lc-types", 2)]
        assert skips == []

    def test_v2_rows_saved_as_json_lines(self, tmp_path: Path) -> None:
        page = json.loads((LF / "v2-observations-page.json").read_text())
        path = tmp_path / "observations.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in page["data"]))
        requests, skips = read_requests(path)
        assert [(r.native_id, r.source_line) for r in requests] == [
            ("gen-v2-plain", 1), ("gen-v2-litellm", 2), ("gen-v2-cut", 3),
            ("gen-v2-otel-parts", 4)]
        assert skips == []

    def test_gzip_clickhouse_rows(self, tmp_path: Path) -> None:
        import gzip

        path = tmp_path / "observations.jsonl.gz"
        path.write_bytes(gzip.compress((LF / "clickhouse-observations.jsonl").read_bytes()))
        requests, _ = read_requests(path)
        assert len(requests) == 3


class TestLangfuseUsage:
    def test_cache_read_not_added_twice(self) -> None:
        r = by_id(LF / "v1-observations-page.json")["gen-v1-openai"]
        # usageDetails input 150 + input_cached_tokens 1024; the row's promptTokens is 1174
        assert r.usage == Usage(prompt_tokens=1174, cached_tokens=1024, cache_write_tokens=None,
                                output_tokens=40, semantics="langfuse")

    def test_cache_write_buckets_are_summed(self) -> None:
        r = by_id(LF / "v1-observations-page.json")["gen-v1-anthropic"]
        assert (r.usage.prompt_tokens, r.usage.cached_tokens, r.usage.cache_write_tokens) == (
            3512, 3000, 500)

    def test_litellm_input_already_holds_the_cache_write(self) -> None:
        r = by_id(LF / "v2-observations-page.json")["gen-v2-litellm"]
        assert r.usage == Usage(prompt_tokens=11500, cached_tokens=10000,
                                cache_write_tokens=1000, output_tokens=100,
                                semantics="langfuse")
        assert r.metadata["usage_rule"] == "input-includes-write"

    def test_litellm_shape_without_total(self) -> None:
        u = usage_of({"input": 1500, "output": 100, "cache_creation_input_tokens": 1000,
                      "cache_read_input_tokens": 10000})
        assert u.prompt_tokens == 11500

    def test_older_litellm_input_holds_all_cache(self) -> None:
        u = usage_of({"input": 11500, "output": 100, "total": 11600,
                      "cache_creation_input_tokens": 1000, "cache_read_input_tokens": 10000})
        assert (u.prompt_tokens, u.cached_tokens, u.cache_write_tokens) == (11500, 10000, 1000)

    def test_exclusive_anthropic_keys_are_added(self) -> None:
        u = usage_of({"input": 500, "output": 100, "total": 11600,
                      "cache_creation_input_tokens": 1000, "cache_read_input_tokens": 10000})
        assert u.prompt_tokens == 11500

    def test_openinference_passthrough_is_cache_inclusive(self) -> None:
        rows = by_id(LF / "clickhouse-observations.jsonl")
        with_total = rows["gen-ch-openinference"]
        without_total = rows["gen-ch-openinference-nototal"]
        assert (with_total.usage.prompt_tokens, with_total.usage.cached_tokens) == (5000, 4096)
        assert (without_total.usage.prompt_tokens, without_total.usage.cached_tokens) == (
            5000, 4096)
        assert with_total.metadata["usage_rule"] == "input-includes-cache"

    def test_other_input_buckets_count_once(self) -> None:
        u = usage_of({"input": 100, "input_audio": 20, "input_cached_tokens": 50,
                      "input_cache_read": 50, "output": 5, "output_reasoning_tokens": 7})
        assert (u.prompt_tokens, u.cached_tokens, u.output_tokens) == (170, 50, 12)

    def test_clickhouse_quoted_uint64_values(self) -> None:
        r = by_id(LF / "clickhouse-observations.jsonl")["gen-ch-tools"]
        assert r.usage == Usage(prompt_tokens=4004, cached_tokens=3584, cache_write_tokens=None,
                                output_tokens=51, semantics="langfuse")

    def test_deprecated_sums_are_not_split(self) -> None:
        legacy = by_id(LF / "v1-observations-page.json")["gen-v1-legacy"]
        assert legacy.usage == Usage(prompt_tokens=2048, output_tokens=12, semantics="langfuse")
        assert legacy.metadata["usage_rule"] == "deprecated-sum"
        csv_legacy = by_id(LF / "batch-export.csv")["gen-csv-legacy"]
        assert csv_legacy.usage == Usage(prompt_tokens=880, output_tokens=15,
                                         semantics="langfuse")

    def test_csv_usage_details_json_string(self) -> None:
        r = by_id(LF / "batch-export.csv")["gen-csv-1"]
        assert (r.usage.prompt_tokens, r.usage.cached_tokens, r.usage.output_tokens) == (
            1000, 700, 20)

    def test_not_reported_stays_none(self) -> None:
        usage, notes = lf.normalize_usage({"usageDetails": {}})
        assert usage == Usage() and notes == {}

    def test_usage_langfuse_inferred_is_flagged(self) -> None:
        r = by_id(LF / "batch-export.jsonl")["gen-exp-lc-types"]
        assert r.metadata["usage_inferred_by_langfuse"] is True
        assert "usage_inferred_by_langfuse" not in by_id(
            LF / "batch-export.jsonl")["gen-exp-lc-serialized"].metadata


class TestLangfuseBody:
    def test_message_list(self) -> None:
        r = by_id(LF / "v1-observations-page.json")["gen-v1-openai"]
        assert r.endpoint == "openai-chat"
        assert r.body == {"messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Summarize README.md in one line."}]}
        assert r.output == {"role": "assistant",
                            "content": "A CLI that explains prompt-cache misses."}

    def test_anthropic_body_kept_in_its_protocol(self) -> None:
        r = by_id(LF / "v1-observations-page.json")["gen-v1-anthropic"]
        assert r.endpoint == "anthropic-messages"
        assert list(r.body) == ["model", "max_tokens", "system", "tools", "messages"]
        assert r.body["system"][0]["cache_control"] == {"type": "ephemeral"}

    def test_missing_input(self) -> None:
        r = by_id(LF / "v1-observations-page.json")["gen-v1-noinput"]
        assert (r.body, r.endpoint, r.metadata["body_note"]) == (None, "unknown",
                                                                 "no input logged")
        assert r.usage.prompt_tokens == 10

    def test_v2_raw_string_input(self) -> None:
        r = by_id(LF / "v2-observations-page.json")["gen-v2-plain"]
        assert r.body == {"messages": [{"role": "system", "content": "You are helpful."},
                                       {"role": "user", "content": "hi"}]}
        assert r.model == "gpt-4.1-mini"

    def test_cut_json_is_flagged(self) -> None:
        r = by_id(LF / "v2-observations-page.json")["gen-v2-cut"]
        assert r.body is None and r.body_truncated
        assert r.metadata["truncation"] == "invalid-json"

    def test_litellm_markers_flag_truncation(self) -> None:
        skipped = by_id(LF / "v2-observations-page.json")["gen-v2-litellm"]
        assert skipped.body_truncated and skipped.metadata["truncation"] == "litellm-skipped-chars"
        capped = by_id(LF / "batch-export.jsonl")["gen-exp-capped"]
        assert capped.body_truncated and capped.metadata["truncation"] == "litellm-field-cap"
        assert not by_id(LF / "v2-observations-page.json")["gen-v2-plain"].body_truncated

    def test_sdk_dropped_input(self) -> None:
        r = by_id(LF / "batch-export.jsonl")["gen-exp-sdk-dropped"]
        assert r.body is None and r.body_truncated
        assert r.metadata["body_note"] == "input dropped by the Langfuse SDK (event size limit)"

    def test_otel_parts_mapped_to_openai_chat(self) -> None:
        # The mapping of OTel spans (normalize.messages): one content part per text part,
        # arguments as compact JSON.
        r = by_id(LF / "v2-observations-page.json")["gen-v2-otel-parts"]
        assert r.body == {"messages": [
            {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21C"}]}
        assert r.metadata["body_from"] == "langfuse.input (message list) + otel parts -> content"

    def test_otel_parts_every_tool_response_is_its_own_tool_message(self) -> None:
        user = {"role": "user", "parts": [
            {"type": "tool_call_response", "id": "t1", "response": "one"},
            {"type": "tool_call_response", "id": "t2", "response": {"ok": True}},
            {"type": "text", "content": "go on"}]}
        assert lf.build_body([user]).body == {"messages": [
            {"role": "tool", "tool_call_id": "t1", "content": "one"},
            {"role": "tool", "tool_call_id": "t2", "content": '{"ok":true}'},
            {"role": "user", "content": [{"type": "text", "text": "go on"}]}]}

    def test_otel_parts_read_as_the_otel_format_reads_them(self) -> None:
        messages = [
            {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
            {"role": "assistant", "name": "bot", "parts": [
                {"type": "reasoning", "content": "hm"},
                {"type": "tool_call", "id": "c1", "name": "ls"},
                {"type": "uri", "modality": "image", "uri": "gs://b/x.png"}]},
            {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1",
                                        "response": ["a", "b"]}]}]
        otel_body, _, _ = otel_format.build_body({"gen_ai.input.messages": json.dumps(messages)})
        assert lf.build_body(messages).body["messages"] == otel_body["messages"]

    def test_otel_message_without_a_parts_list_is_not_a_message(self) -> None:
        result = lf.build_body([{"role": "user", "parts": "hi"}])
        assert result.body is None
        assert result.note == "input list holds items that are not messages"

    def test_langchain_serialized_messages(self) -> None:
        r = by_id(LF / "batch-export.jsonl")["gen-exp-lc-serialized"]
        assert r.body == {"messages": [{"role": "system", "content": "You are a SQL expert."},
                                       {"role": "user", "content": "List the tables."}]}
        assert r.metadata["body_from"].endswith("langchain serialized messages -> roles")

    def test_langchain_message_types(self) -> None:
        r = by_id(LF / "batch-export.jsonl")["gen-exp-lc-types"]
        assert [m["role"] for m in r.body["messages"]] == ["system", "user", "assistant", "tool"]
        # langchain-openai re-serializes args with json.dumps defaults
        assert r.body["messages"][2]["tool_calls"] == [{
            "id": "call_9", "type": "function", "function": {
                "name": "run_sql", "arguments": '{"query": "SELECT count(*) FROM users"}'}}]
        assert r.body["messages"][3] == {"role": "tool", "content": "42", "tool_call_id": "call_9"}

    def test_tool_definitions_map_keeps_order_and_schema_key_order(self) -> None:
        r = by_id(LF / "clickhouse-observations.jsonl")["gen-ch-tools"]
        weather, hotels = r.body["tools"]
        assert weather == {"type": "function", "function": {
            "name": "get_weather", "description": "Current weather for a city.",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
                "required": ["city"]}}}
        # stored description "" means "none given": omitted; schema key order as stored
        assert hotels["function"]["name"] == "search_hotels"
        assert "description" not in hotels["function"]
        assert list(hotels["function"]["parameters"]) == ["required", "type", "properties"]
        assert r.metadata["body_from"] == "langfuse.input (message list) + toolDefinitions -> tools"

    def test_clickhouse_csv_map_literals(self) -> None:
        requests, skips = requests_of(LF / "clickhouse-observations.csv")
        assert skips == [] and len(requests) == 1
        r = requests[0]
        assert r.body["messages"] == [{"role": "user", "content": "Run 'ls' for me."}]
        assert r.body["tools"] == [{"type": "function", "function": {
            "name": "Bash", "description": "Run a command", "parameters": {
                "type": "object", "properties": {"command": {"type": "string"}},
                "required": ["command"]}}}]
        assert (r.usage.prompt_tokens, r.usage.cached_tokens) == (1016, 896)
        assert r.channel == "openai"

    def test_clickhouse_literal_parser(self) -> None:
        assert clickhouse_literal("{'a':1,'b':'it\\'s','c':['x','y']}") == {
            "a": 1, "b": "it's", "c": ["x", "y"]}
        assert clickhouse_literal("{'a':1") is None
        assert clickhouse_literal("plain text") == "plain text"

    def test_tools_in_input_win_over_tool_definitions(self) -> None:
        stored = {"Other": json.dumps({"description": "x", "parameters": "{}"})}
        body = {"messages": [{"role": "user", "content": "hi"}],
                "tools": [{"type": "function", "function": {"name": "Mine"}}]}
        result = lf.build_body(json.dumps(body), stored)
        assert result.body == body

    def test_anthropic_body_gets_anthropic_shaped_stored_tools(self) -> None:
        stored = {"Read": json.dumps({"description": "Read a file",
                                      "parameters": json.dumps({"type": "object"})})}
        result = lf.build_body({"system": "s", "messages": [{"role": "user", "content": "x"}]},
                               stored)
        assert result.endpoint == "anthropic-messages"
        assert result.body["tools"] == [{"name": "Read", "description": "Read a file",
                                         "input_schema": {"type": "object"}}]

    def test_batch_of_one_is_unwrapped_and_batches_are_refused(self) -> None:
        one = lf.build_body([[{"role": "user", "content": "a"}]])
        assert one.body == {"messages": [{"role": "user", "content": "a"}]}
        assert one.body_from == "langfuse.input (message list) + batch of one unwrapped"
        two = lf.build_body([[{"role": "user", "content": "a"}],
                             [{"role": "user", "content": "b"}]])
        assert two.body is None and two.note == "input holds 2 message lists (a batch)"

    def test_plain_text_and_scalars_give_no_body(self) -> None:
        assert lf.build_body("Tell me a joke").note == "input is plain text, not a message list"
        assert lf.build_body(42).note == "input is a JSON int"
        assert lf.build_body([1, 2]).note == "input list holds items that are not messages"

    def test_double_encoded_string(self) -> None:
        inner = json.dumps([{"role": "user", "content": "x"}])
        assert lf.build_body(json.dumps(inner)).body == {
            "messages": [{"role": "user", "content": "x"}]}


class TestLangfuseSessions:
    def test_v2_session_and_user(self) -> None:
        requests, _ = requests_of(LF / "v2-observations-page.json")
        assert {(r.session_key, r.session_key_source, r.user) for r in requests} == {
            ("sess-42", "langfuse.sessionId", "u-7")}

    def test_trace_with_full_details_gives_session_user_client(self) -> None:
        requests, skips = requests_of(LF / "trace-full-details.json")
        assert skips == []
        assert [(r.native_id, r.source_line) for r in requests] == [("gen-full-1", 2),
                                                                    ("gen-full-2", 3)]
        assert {(r.session_key, r.session_key_source, r.user, r.client) for r in requests} == {
            ("sess-trace-1", "langfuse.sessionId", "bob", "rag-answer")}
        assert {r.metadata["environment"] for r in requests} == {"staging"}

    def test_session_document_lends_its_id_to_traces_without_one(self) -> None:
        requests, skips = requests_of(LF / "session.json")
        assert [(r.native_id, r.session_key, r.user) for r in requests] == [
            ("gen-s-1", "sess-9", "dana")]
        assert skips == [Skip(2, "session trace without observations "
                                 "(fetch GET /api/public/traces/{id})")]

    def test_events_full_session_id(self) -> None:
        requests, _ = requests_of(CLAUDE_CODE)
        assert {(r.session_key, r.session_key_source) for r in requests} == {
            ("7f3c9a2e-5b1d-4c8e-9f60-2d4b8e1a6c35", "langfuse.session_id")}

    def test_batch_export_falls_back_to_trace_id(self) -> None:
        r = by_id(LF / "batch-export.csv")["gen-csv-1"]
        assert (r.session_key, r.session_key_source, r.user, r.client) == (
            "trace-csv-1", "langfuse.traceId", "alice", "support-bot")
        assert r.metadata["promptName"] == "support-v2"


class TestLangfuseBadInput:
    def test_jsonl_bad_lines_are_skipped_with_reasons(self) -> None:
        requests, skips = requests_of(LF / "batch-export.jsonl")
        assert [r.native_id for r in requests] == [
            "gen-exp-lc-serialized", "gen-exp-lc-types", "gen-exp-sdk-dropped", "gen-exp-capped"]
        assert [(s.line, s.reason.split(":")[0]) for s in skips] == [
            (4, "invalid JSON"), (5, "GENERATION observation without id"),
            (7, "not a Langfuse observation")]

    def test_csv_row_without_type(self) -> None:
        requests, skips = requests_of(LF / "batch-export.csv")
        assert [r.native_id for r in requests] == ["gen-csv-1", "gen-csv-legacy"]
        assert skips == [Skip(4, "not a Langfuse observation: no type")]

    def test_non_generation_observations_are_not_reported(self) -> None:
        requests, skips = requests_of(LF / "v2-observations-page.json")
        assert len(requests) == 4 and skips == []
        assert requests_of(LF / "clickhouse-observations.jsonl")[1] == []

    def test_odd_generations_never_raise(self, tmp_path: Path) -> None:
        rows = [
            {"id": "g1", "traceId": "t", "type": "GENERATION", "startTime": "not a time",
             "input": [["a"], "b"], "usageDetails": "garbage", "metadata": 7},
            {"id": "g2", "traceId": "t", "type": "GENERATION", "input": {"messages": [1, 2]},
             "toolDefinitions": "{'broken", "usageDetails": {"input": "x", "output": None}},
            {"id": "g3", "traceId": "t", "type": "GENERATION", "input": True,
             "usageDetails": {"total": 5}, "modelParameters": "[1]"},
            ["not", "an", "object"],
        ]
        path = tmp_path / "odd.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        requests, skips = requests_of(path)
        assert [r.native_id for r in requests] == ["g1", "g2", "g3"]
        assert [r.timestamp for r in requests] == [None, None, None]
        assert [r.body for r in requests] == [None, None, None]
        assert requests[2].usage == Usage(semantics="langfuse")
        assert [s.line for s in skips] == [4]

    def test_repeated_observation_ids_count_once(self, tmp_path: Path) -> None:
        rows = (LF / "clickhouse-observations.jsonl").read_text().splitlines()
        path = tmp_path / "unmerged.jsonl"
        path.write_text("\n".join(rows + rows[:1]) + "\n")
        requests, skips = requests_of(path)
        assert [r.native_id for r in requests] == [
            "gen-ch-tools", "gen-ch-openinference", "gen-ch-openinference-nototal"]
        assert skips == []

    def test_forced_on_a_foreign_file_reports_instead_of_raising(self, tmp_path: Path) -> None:
        path = tmp_path / "other.jsonl"
        path.write_text('{"hello": "world"}\nnot json\n')
        requests, skips = read_requests(path, "langfuse")
        assert requests == []
        assert [s.line for s in skips] == [1, 2]

    def test_ingest_into_store(self, tmp_path: Path) -> None:
        from prefixscope.store import Store

        with Store.open(tmp_path / "s.duckdb") as store:
            result = ingest_paths([str(LF)], store)
            again = ingest_paths([str(LF)], store)
        assert result.by_format == {"langfuse": 29}
        assert again.ingested == 0 and again.already_present == 29
        assert result.skipped == 5  # 3 in batch-export.jsonl, 1 in the CSV, 1 in session.json


def _load_generator():
    spec = importlib.util.spec_from_file_location(
        "make_claude_code_session", LF / "make_claude_code_session.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TestClaudeCodeGatewaySession:
    HEADER = re.compile(
        r"^x-anthropic-billing-header: cc_version=2\.1\.37\.0d9; cc_entrypoint=cli; "
        r"cch=([0-9a-f]{5});You are Claude Code, Anthropic's official CLI for Claude\.")

    def test_fixture_is_what_the_generator_writes(self, tmp_path: Path) -> None:
        generator = _load_generator()
        generator.OUT = tmp_path / "session.jsonl"
        generator.main()
        assert generator.OUT.read_bytes() == CLAUDE_CODE.read_bytes()

    def test_one_session_of_eight_generations(self) -> None:
        requests, skips = requests_of(CLAUDE_CODE)
        assert len(requests) == 8 and skips == []
        assert {(r.user, r.client, r.model, r.endpoint) for r in requests} == {
            ("dev-alice", "claude-code", "qwen3-coder-480b-a35b-instruct", "openai-chat")}
        assert len({r.metadata["traceId"] for r in requests}) == 2
        times = [r.timestamp for r in requests]
        assert times == sorted(times)

    def test_system_starts_with_a_fresh_billing_header(self) -> None:
        requests, _ = requests_of(CLAUDE_CODE)
        cch = []
        for r in requests:
            system = r.body["messages"][0]
            assert system["role"] == "system"
            match = self.HEADER.match(system["content"])
            assert match, system["content"][:120]
            cch.append(match.group(1))
        assert len(set(cch)) == 8

    def test_conversation_grows_append_only_after_the_system(self) -> None:
        requests, _ = requests_of(CLAUDE_CODE)
        histories = [r.body["messages"][1:] for r in requests]
        assert [len(h) + 1 for h in histories] == [2, 4, 6, 8, 10, 12, 14, 16]
        for earlier, later in zip(histories, histories[1:], strict=False):
            assert later[:len(earlier)] == earlier
        systems = {self.HEADER.sub("", r.body["messages"][0]["content"]) for r in requests}
        assert len(systems) == 1

    def test_tools_come_from_tool_definitions(self) -> None:
        first = requests_of(CLAUDE_CODE)[0][0]
        names = [t["function"]["name"] for t in first.body["tools"]]
        assert names == ["Bash", "Glob", "Grep", "Read", "Edit", "TodoWrite"]
        bash = first.body["tools"][0]["function"]["parameters"]
        assert list(bash) == ["type", "properties", "required", "additionalProperties",
                              "$schema"]

    def test_usage_shows_the_constant_cached_prefix(self) -> None:
        requests, _ = requests_of(CLAUDE_CODE)
        assert [r.usage.cached_tokens for r in requests] == [0] + [32] * 7
        assert all(r.usage.prompt_tokens > 1000 and r.usage.cache_write_tokens is None
                   for r in requests)
        prompts = [r.usage.prompt_tokens for r in requests]
        assert prompts == sorted(prompts)
