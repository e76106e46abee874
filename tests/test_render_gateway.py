"""Gateway profiles reproduce exactly what the upstream receives (new-api, hoisting, Responses)."""

from __future__ import annotations

import json

import pytest
from _render_helpers import fixture, make_request

from prefixscope.prompt import RenderError, RenderOptions, render
from prefixscope.prompt.gateways import to_upstream
from prefixscope.prompt.gateways.anthropic_to_openai import claude_to_openai
from prefixscope.prompt.marking import mark_body
from prefixscope.prompt.marks import Marker, unmark_value

HEADER = "x-anthropic-billing-header: cc_version=2.1.37.0d9; cc_entrypoint=cli; cch=fa690;"


def upstream(body, profile, endpoint, **kw):
    """The upstream request a profile produces, without marks."""
    m = Marker(enabled=False)
    messages, tools = to_upstream(endpoint, mark_body(endpoint, body, m), profile, m, **kw)
    return unmark_value(messages), unmark_value(tools)


class TestNewApiClaudeToOpenAI:
    def setup_method(self):
        self.messages, self.tools = upstream(fixture("claude_code.json"), "anthropic-to-openai",
                                             "anthropic-messages")

    def test_system_blocks_are_joined_with_no_separator(self):
        assert self.messages[0] == {"role": "system", "content": HEADER +
                                    "You are Claude Code, Anthropic's official CLI for Claude."
                                    "Use the tools <carefully> & report."}

    def test_tool_keys_follow_go_struct_order_and_schema_keys_are_sorted(self):
        tool = self.tools[0]
        assert list(tool) == ["type", "function"]
        assert list(tool["function"]) == ["description", "name", "parameters"]
        assert list(tool["function"]["parameters"]) == ["properties", "required", "type"]
        assert list(tool["function"]["parameters"]["properties"]["timeout"]) == ["maximum", "type"]

    def test_schema_numbers_come_back_as_go_wrote_them(self):
        # 1.5e-07 -> Go "1.5e-7" -> parsed by the upstream as 1.5e-07
        assert self.tools[1]["function"]["parameters"]["properties"]["limit"]["minimum"] == 1.5e-07

    def test_tool_use_becomes_tool_calls_with_go_marshalled_arguments(self):
        assistant = self.messages[2]
        assert assistant["content"] is None  # the text block is dropped when there are calls
        assert assistant["tool_calls"] == [{"id": "toolu_01", "type": "function", "function": {
            "name": "Bash",
            "arguments": '{"command":"ls -la \\u003cdir\\u003e \\u0026\\u0026 echo done",'
                         '"timeout":1000}'}}]

    def test_tool_result_becomes_a_tool_message_before_its_user_message(self):
        assert self.messages[3] == {
            "role": "tool", "content": '[{"type":"text","text":"a.py\\nb.py"}]',
            "name": "Bash", "tool_call_id": "toolu_01"}
        assert self.messages[4] == {"role": "user", "content": [{"type": "text",
                                                                 "text": "now read a.py"}]}

    def test_user_message_with_only_a_tool_result_leaves_no_user_message(self):
        assert [m["role"] for m in self.messages] == [
            "system", "user", "assistant", "tool", "user", "assistant", "tool"]
        assert self.messages[6]["content"] == "print('hi')"

    def test_text_blocks_keep_cache_control_and_stay_a_list(self):
        first_user = self.messages[1]
        assert first_user["content"][0] == {
            "type": "text", "text": "<system-reminder>Today is 2025-10-09.</system-reminder>"}

    def test_images_become_data_urls(self):
        body = {"messages": [{"role": "user", "content": [
            {"type": "image",
             "source": {"type": "base64", "media_type": "image/png", "data": "AAA"}}]}]}
        messages, _ = upstream(body, "anthropic-to-openai", "anthropic-messages")
        # dto.MessageImageUrl: `detail` is omitempty, `MimeType` has no json tag (Go writes it)
        assert messages[0]["content"] == [{"type": "image_url", "image_url": {
            "url": "data:image/png;base64,AAA", "MimeType": ""}}]

    def test_missing_or_odd_tool_result_content_marshals_like_go(self):
        body = {"messages": [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "X"}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t"},
                {"type": "tool_result", "tool_use_id": "t",
                 "content": [{"type": "text", "text": "",
                              "cache_control": {"type": "ephemeral"}}]}]}]}
        messages, _ = upstream(body, "anthropic-to-openai", "anthropic-messages")
        assert messages[0]["tool_calls"][0]["function"]["arguments"] == "null"
        assert messages[1]["content"] == "null"
        assert messages[2]["content"] == \
            '[{"type":"text","text":"","cache_control":{"type":"ephemeral"}}]'

    def test_string_system_is_one_message_and_empty_system_none(self):
        one, _ = upstream({"system": "Be kind.", "messages": []}, "anthropic-to-openai",
                          "anthropic-messages")
        none, _ = upstream({"system": "", "messages": []}, "anthropic-to-openai",
                           "anthropic-messages")
        assert one == [{"role": "system", "content": "Be kind."}] and none == []

    def test_only_anthropic_bodies_can_be_converted(self):
        with pytest.raises(RenderError, match="needs an anthropic-messages body"):
            upstream(fixture("openai_chat.json"), "anthropic-to-openai", "openai-chat")

    def test_claude_to_openai_is_the_profile(self):
        m = Marker(enabled=False)
        body = fixture("claude_code.json")
        direct = claude_to_openai(mark_body("anthropic-messages", body, m), m)
        assert unmark_value(direct[0]) == self.messages


class TestHoistSystemMessages:
    def test_late_system_messages_join_the_leading_one(self):
        messages, _ = upstream(fixture("openai_chat.json"), "hoist-system-messages", "openai-chat")
        assert messages[0] == {"role": "system",
                               "content": "You are a coding agent.\n\nNote: 3 steps left."}
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "user"]

    def test_no_hoist_keeps_them_in_place(self):
        messages, _ = upstream(fixture("openai_chat.json"), "hoist-system-messages", "openai-chat",
                               hoist=False)
        assert [m["role"] for m in messages][4] == "system"

    def test_without_a_leading_system_one_is_created(self):
        body = {"messages": [{"role": "user", "content": "hi"}, {"role": "system", "content": "S"}]}
        messages, _ = upstream(body, "hoist-system-messages", "openai-chat")
        assert messages == [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}]


class TestResponses:
    def test_instructions_calls_and_outputs_become_chat_messages(self):
        messages, tools = upstream(fixture("responses.json"), "passthrough", "openai-responses")
        assert messages == [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": [{"type": "input_text", "text": "What is in the repo?"}]},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "fc_1", "type": "function",
             "function": {"name": "ls", "arguments": '{"path": "."}'}}]},
            {"role": "tool", "tool_call_id": "fc_1", "content": "README.md"}]
        assert tools == [{"type": "function", "function": {
            "name": "ls", "description": "List files.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]


class TestSegmentsThroughTheGateway:
    def test_joined_system_blocks_keep_their_own_segments(self):
        prompt = render(make_request(fixture("claude_code.json")),
                        RenderOptions(gateway="anthropic-to-openai"))
        by_path = {}
        for seg in prompt.segments:
            by_path.setdefault(seg.path, []).append(prompt.text[seg.char_start:seg.char_end])
        assert by_path["system[0]"] == [HEADER]
        assert by_path["system[1]"] == ["You are Claude Code, Anthropic's official CLI for Claude."]
        assert by_path["system[2]"] == ["Use the tools <carefully> & report."]
        header_end = prompt.text.index(HEADER) + len(HEADER)
        assert prompt.segments[prompt.segment_at(header_end)].path == "system[1]"

    def test_converted_tool_schema_keeps_its_logged_path(self):
        prompt = render(make_request(fixture("claude_code.json")),
                        RenderOptions(gateway="anthropic-to-openai", tokenizer="qwen3.6"))
        paths = [s.path for s in prompt.segments]
        assert "tools[0].input_schema.properties.command" in paths
        seg = next(s for s in prompt.segments
                   if s.path == "tools[0].input_schema.properties.command")
        assert prompt.text[seg.char_start:seg.char_end] == \
            '"command": {"description": "The command", "type": "string"}'

    def test_arguments_parsed_by_the_engine_keep_the_tool_use_input_path(self):
        prompt = render(make_request(fixture("claude_code.json")),
                        RenderOptions(gateway="anthropic-to-openai", tokenizer="qwen3.6"))
        seg = next(s for s in prompt.segments if s.path == "messages[1].content[2].input")
        assert json.loads(prompt.text[seg.char_start:seg.char_end]) == \
            {"command": "ls -la <dir> && echo done", "timeout": 1000}
