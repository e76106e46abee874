"""The splice's two reduced renders may leave the tools out (`prompt.splice`, "The
tools"): for every bundled template with a splice rule, the tail T(R_B)[|T(R_A)| - |G|:]
is the same whether R_A and R_B are rendered with the conversation's tools or without.

The oracle is the template itself: both renders are `render_plain`, transformers' render
(tests/test_template_parity.py), of the same messages with and without the tools. The
whole-render properties of tests/test_splice.py (sessions with tools) hold the splice
that relies on this equal to the whole render."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_splice import SETTINGS, messages

from prefixscope.prompt.splice import SPLICES
from prefixscope.prompt.template import render_plain
from prefixscope.tokenizers import load_tokenizer

TOOLS = [
    {"type": "function", "function": {"name": "bash", "description": "run a command",
                                      "parameters": {"type": "object", "properties": {
                                          "cmd": {"type": "string"}}, "required": ["cmd"]}}},
    {"type": "function", "function": {"name": "read", "description": "read a file",
                                      "parameters": {"type": "object", "properties": {
                                          "path": {"type": "string"}}}}},
]


def _tail(name: str, base: list[dict[str, Any]], new: list[dict[str, Any]],
          tools: list[dict[str, Any]] | None) -> str | None:
    """T(R_B)[|T(R_A)| - |G|:] with these tools, or None where T(R_A) does not end with G
    or T(R_B) does not continue it (the splice renders such a turn whole)."""
    tok = load_tokenizer(name)
    gen = SPLICES[name].generation
    before = render_plain(tok.chat_template, base, tools, tok.template_vars)
    after = render_plain(tok.chat_template, base + new, tools, tok.template_vars)
    cut = len(before) - len(gen)
    if not (before.endswith(gen) and after.startswith(before[:cut])):
        return None
    return after[cut:]


def _as_parsed(message: dict[str, Any]) -> dict[str, Any]:
    """The message as a rule reads it in the pipeline: vLLM's parse of an assistant
    message copies its ``reasoning`` to ``reasoning_content`` (module `serving`), and the
    qwen3.6 rule reads ``reasoning_content``. Given ``reasoning`` alone, the rule would
    splice a turn whose shown reasoning the template hides (rendered whole in the
    pipeline), and the two tails would differ for a reason no request can reach."""
    if message.get("role") == "assistant" and message.get("reasoning") is not None:
        return {**message, "reasoning_content": message["reasoning"]}
    return message


@pytest.mark.parametrize("name", sorted(SPLICES))
@SETTINGS
@given(conversation=st.lists(messages(), min_size=2, max_size=10), data=st.data())
def test_the_splice_tail_does_not_depend_on_the_tools(name, conversation, data):
    conversation = [_as_parsed(m) for m in conversation]
    n = data.draw(st.integers(1, len(conversation) - 1))
    tools = data.draw(st.sampled_from([TOOLS, TOOLS[:1]]))
    ctx = SPLICES[name].context(conversation, n)
    if ctx is None:  # rendered whole: no reduced renders
        return
    base = [conversation[i] for i in ctx]
    new = conversation[n:]
    with_tools = _tail(name, base, new, tools)
    assert with_tools is not None  # the rule's proof: both renders share the head
    assert _tail(name, base, new, None) == with_tools
