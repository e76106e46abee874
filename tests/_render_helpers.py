"""Helpers shared by the render/tokenize tests: request factory, fixtures, reference renders."""

from __future__ import annotations

import json
from typing import Any

from conftest import FIXTURES
from hypothesis import strategies as st

from prefixscope.model import Request
from prefixscope.model.keys import detect_endpoint
from prefixscope.prompt import RenderOptions, resolve_gateway
from prefixscope.prompt.marks import Marker
from prefixscope.prompt.pipeline import _detect, _template_input
from prefixscope.prompt.whatif import parse_what_ifs
from prefixscope.tokenizers import load_tokenizer


def make_request(body: dict[str, Any] | None, *, endpoint: str | None = None,
                 gateway: str | None = None, id: str = "r1", model: str | None = None
                 ) -> Request:
    if endpoint is None:
        endpoint = detect_endpoint(body) if body is not None else "unknown"
    return Request(id=id, source_format="test", source_file="test", source_line=1,
                   timestamp=None, endpoint=endpoint, gateway=gateway, body=body, model=model)


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / "render" / name).read_text(encoding="utf-8"))


def reference_text(request: Request, options: RenderOptions) -> str:
    """The prompt rendered without marks through transformers' own render_jinja_template."""
    tok = load_tokenizer(options.tokenizer)
    endpoint = request.endpoint
    if endpoint not in ("anthropic-messages", "openai-chat", "openai-responses"):
        endpoint = _detect(request.body or {})
    profile, _, _ = resolve_gateway(request, options, endpoint)
    approximate = endpoint == "anthropic-messages" and profile == "passthrough"
    messages, tools = _template_input(endpoint, request.body or {}, profile, approximate,
                                      parse_what_ifs(options.what_if), tok, Marker(enabled=False))
    return transformers_render(tok.chat_template, messages, tools, tok.template_vars)


def transformers_render(source: str, messages: list[dict[str, Any]],
                        tools: list[dict[str, Any]] | None, template_vars: dict[str, Any]) -> str:
    """transformers' own render_jinja_template: the oracle for every render test."""
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(conversations=[messages], tools=tools,
                                        chat_template=source, add_generation_prompt=True,
                                        **template_vars)
    return rendered[0]


# Text that stresses tokenization boundaries: special tokens of every bundled template
# (whole and cut), whitespace runs, combining marks, CJK, emoji, JSON-ish punctuation.
TRICKY = [
    "<|im_start|>", "<|im_end|>", "<|im_", "im_end|>", "<tool_call>", "</tool_call>",
    "<tool_response>", "</think>", "<think>", "<｜User｜>", "<｜Assistant｜>", "<｜tool▁sep｜>",
    "<｜end▁of▁sentence｜>", "<｜begin▁of▁sentence｜>", "<｜", "｜>", "<|endoftext|>",
    "\n", "\n\n", "  ", "\t", " \n ", "\r\n", "é", "e\u0301", ">\u0338", "你好世界", "🎉",
    "{\"a\": 1}", "</", "x-anthropic-billing-header: cch=abc12;", "123456", "'s", " 's",
]
texts = st.lists(st.one_of(st.sampled_from(TRICKY), st.text(max_size=12)), max_size=8).map(
    "".join)


@st.composite
def conversations(draw: Any) -> dict[str, Any]:
    """An OpenAI Chat body: optional system, user/assistant/tool turns, optional tools."""
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(texts)})
    for turn in range(draw(st.integers(1, 4))):
        messages.append({"role": "user", "content": draw(texts)})
        if draw(st.booleans()):
            call = {"id": f"c{turn}", "type": "function", "function": {
                "name": draw(st.sampled_from(["bash", "read"])),
                "arguments": json.dumps({"cmd": draw(texts)}, ensure_ascii=draw(st.booleans()))}}
            messages.append({"role": "assistant", "content": draw(texts), "tool_calls": [call]})
            messages.append({"role": "tool", "tool_call_id": f"c{turn}", "content": draw(texts)})
        else:
            messages.append({"role": "assistant", "content": draw(texts)})
        if draw(st.integers(0, 5)) == 0:
            messages.append({"role": "system", "content": draw(texts)})
    body: dict[str, Any] = {"messages": messages}
    if draw(st.booleans()):
        body["tools"] = [{"type": "function", "function": {
            "name": "bash", "description": draw(texts),
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string",
                                                                    "description": draw(texts)}},
                           "required": ["cmd"]}}}]
    return body


@st.composite
def anthropic_bodies(draw: Any) -> dict[str, Any]:
    """An Anthropic Messages body with text, tool_use and tool_result blocks."""
    system: Any = [{"type": "text", "text": draw(texts)} for _ in range(draw(st.integers(0, 3)))]
    if draw(st.booleans()) and system:
        system = system[0]["text"]
    messages: list[dict[str, Any]] = []
    for turn in range(draw(st.integers(1, 3))):
        messages.append({"role": "user", "content": [{"type": "text", "text": draw(texts)}]})
        blocks: list[dict[str, Any]] = [{"type": "text", "text": draw(texts)}]
        if draw(st.booleans()):
            blocks.append({"type": "tool_use", "id": f"t{turn}", "name": "Bash",
                           "input": {"command": draw(texts), "n": draw(st.integers(-5, 10**6))}})
            messages.append({"role": "assistant", "content": blocks})
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"t{turn}",
                 "content": draw(st.one_of(
                     texts, st.just([{"type": "text", "text": "ok <b>"}])))}]})
        else:
            messages.append({"role": "assistant", "content": blocks})
    body: dict[str, Any] = {"system": system, "messages": messages}
    if draw(st.booleans()):
        body["tools"] = [{"name": "Bash", "description": draw(texts), "input_schema": {
            "type": "object", "properties": {"command": {"type": "string"}}}}]
    return body
