"""The serving-engine step reproduces vLLM's request normalization before templating."""

from __future__ import annotations

from prefixscope.prompt.marks import Marker
from prefixscope.prompt.serving import content_format, conversation, tool_dicts


def conv(messages, fmt="string"):
    return conversation(messages, Marker(enabled=False), fmt)


class TestConversation:
    def test_text_parts_join_with_newlines_and_none_is_empty(self):
        got = conv([{"role": "user", "content": [{"type": "text", "text": "a"},
                                                 {"type": "image_url", "image_url": {"url": "x"}},
                                                 {"type": "input_text", "text": "b"}]},
                    {"role": "assistant", "content": None}])
        assert got == [{"role": "user", "content": "a\nb"}, {"role": "assistant", "content": ""}]

    def test_openai_format_keeps_text_dicts(self):
        got = conv([{"role": "user", "content": "hi"}], fmt="openai")
        assert got == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]

    def test_arguments_are_parsed_and_invalid_json_becomes_empty(self):
        got = conv([{"role": "assistant", "content": "", "tool_calls": [
            {"id": "1", "type": "function",
             "function": {"name": "f", "arguments": '{"b":1,"a":2}'}},
            {"id": "2", "type": "function", "function": {"name": "g", "arguments": "{oops"}}]}])
        calls = got[0]["tool_calls"]
        assert calls[0]["function"]["arguments"] == {"b": 1, "a": 2}
        assert list(calls[0]["function"]["arguments"]) == ["b", "a"]
        assert calls[1]["function"]["arguments"] == {}

    def test_empty_tool_calls_are_dropped_and_unknown_keys_too(self):
        got = conv([{"role": "assistant", "content": "x", "tool_calls": [], "cache_control": {},
                     "reasoning_content": "dropped by vLLM"}])
        assert got == [{"role": "assistant", "content": "x"}]

    def test_reasoning_is_aliased_like_transformers(self):
        got = conv([{"role": "assistant", "content": "x", "reasoning": "r"}])
        assert got == [{"thinking": "r", "role": "assistant", "content": "x", "reasoning": "r",
                        "reasoning_content": "r"}]

    def test_tool_messages_keep_their_call_id(self):
        got = conv([{"role": "tool", "tool_call_id": "c", "name": "bash", "content": "ok"}])
        assert got == [{"role": "tool", "content": "ok", "tool_call_id": "c", "name": "bash"}]


class TestTools:
    def test_tools_are_dumped_in_model_field_order_with_description(self):
        got = tool_dicts([{"function": {"parameters": {"type": "object"}, "name": "f",
                                        "strict": True}, "type": "function"}], Marker())
        assert got == [{"type": "function", "function": {
            "name": "f", "description": None, "parameters": {"type": "object"}, "strict": True}}]
        assert list(got[0]["function"]) == ["name", "description", "parameters", "strict"]

    def test_no_tools_stays_none(self):
        assert tool_dicts(None, Marker()) is None


class TestContentFormat:
    def test_templates_looping_over_content_get_lists(self):
        assert content_format("{% for part in message['content'] %}") == "openai"
        assert content_format("{% for p in m.content %}") == "openai"
        assert content_format("{{ message.content }}") == "string"
