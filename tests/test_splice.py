"""A session's next request rendered and tokenized from its predecessor's (incremental
render, `prompt.splice`; token reuse, `PieceCache.encode_many(previous=)`; `tokens.Turns`)
is what the whole render and the tokenizer's own tokenization of the whole prompt give.

The oracle is the library itself on the whole prompt: `render` (whose text
tests/test_template_parity.py holds equal to transformers' render_jinja_template) and the
tokenizer's own encode of the whole text (tokenizers / tiktoken)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from _render_helpers import anthropic_bodies, make_request, texts
from conftest import REAL, ROOT
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.prompt import RenderError, RenderOptions, render
from prefixscope.prompt.pipeline import render_turn
from prefixscope.prompt.splice import HEADS, SPLICES
from prefixscope.store import Store
from prefixscope.tokenizers import BUNDLED, load_tokenizer
from prefixscope.tokens.tokenize import PieceCache, common_text_prefix
from prefixscope.tokens.turns import Turns

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
_RENDER = importlib.import_module("prefixscope.prompt.pipeline")
CACHES = {name: PieceCache(load_tokenizer(name)) for name in BUNDLED}
IDS = ["c0", "c1", "c2", "", 7]  # call ids: repeated, empty (falsy), not a string


def whole_ids(name: str, text: str) -> np.ndarray:
    """The tokenizer library's own ids of the whole text (no piece cache)."""
    tok = load_tokenizer(name)
    if name == "deepseek-v4":
        return np.asarray(tok._tok.encode(text, add_special_tokens=False).ids, dtype=np.uint32)
    return tok.encode(text).ids


@st.composite
def messages(draw: Any) -> dict[str, Any]:
    """One OpenAI Chat message of any role the templates treat differently."""
    role = draw(st.sampled_from(["system", "developer", "user", "assistant", "tool", "tool"]))
    message: dict[str, Any] = {"role": role, "content": draw(st.one_of(texts, st.just("")))}
    if role == "assistant":
        if draw(st.booleans()):
            message["reasoning"] = draw(st.one_of(texts, st.just("")))
        calls = []
        for _ in range(draw(st.integers(0, 2))):
            call: dict[str, Any] = {"type": "function", "function": {
                "name": draw(st.sampled_from(["bash", "read"])),
                "arguments": json.dumps({"cmd": draw(texts)})}}
            if draw(st.integers(0, 4)):
                call["id"] = draw(st.sampled_from(IDS))
            calls.append(call)
        if calls:
            message["tool_calls"] = calls
    elif role == "tool":
        if draw(st.integers(0, 4)):
            message["tool_call_id"] = draw(st.sampled_from(IDS))
        if draw(st.booleans()):
            message["name"] = "bash"
    return message


@st.composite
def anthropic_messages(draw: Any) -> dict[str, Any]:
    """One Anthropic message: string content, or blocks of every kind the proxy view
    treats differently (text, tool_use with nested input, tool_result as text or parts,
    thinking, image, a non-dict)."""
    role = draw(st.sampled_from(["user", "assistant"]))
    if draw(st.integers(0, 3)) == 0:
        return {"role": role, "content": draw(texts)}
    blocks: list[Any] = []
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["text", "tool_use", "tool_result", "thinking", "image",
                                     "odd"]))
        if kind == "text":
            blocks.append({"type": "text", "text": draw(texts)})
        elif kind == "tool_use":
            blocks.append({"type": "tool_use", "id": draw(st.sampled_from(["t1", "t2"])),
                           "name": "Bash", "input": {"command": draw(texts),
                                                     "opts": {"n": draw(st.integers(0, 9)),
                                                              "k": [draw(texts)]}}})
        elif kind == "tool_result":
            blocks.append({"type": "tool_result", "tool_use_id": "t1", "content": draw(
                st.one_of(texts, st.just([{"type": "text", "text": "ok"}, {"type": "image"}])))})
        elif kind == "thinking":
            blocks.append({"type": "thinking", "thinking": draw(texts), "signature": "s"})
        elif kind == "image":
            blocks.append({"type": "image", "source": {"type": "base64", "data": "AAAA"}})
        else:
            blocks.append(draw(texts))
    return {"role": role, "content": blocks}


@st.composite
def responses_items(draw: Any) -> Any:
    """One Responses API input item of every kind `responses_to_chat` treats differently."""
    kind = draw(st.sampled_from(["function_call", "custom_tool_call", "local_shell_call",
                                 "function_call_output", "custom_tool_call_output",
                                 "message", "reasoning", "odd"]))
    call_id = draw(st.sampled_from(["c0", "c1", ""]))
    if kind == "function_call":
        return {"type": kind, "call_id": call_id, "name": "shell",
                "arguments": json.dumps({"cmd": draw(texts)})}
    if kind == "custom_tool_call":
        return {"type": kind, "call_id": call_id, "name": "apply_patch", "input": draw(texts)}
    if kind == "local_shell_call":
        return {"type": kind, "call_id": call_id, "action": {"command": [draw(texts)]}}
    if kind.endswith("_output"):
        return {"type": kind, "call_id": call_id, "output": draw(texts)}
    if kind == "message":
        role = draw(st.sampled_from(["user", "assistant", "developer", "system"]))
        return {"type": "message", "role": role, "content": [
            {"type": "input_text" if role != "assistant" else "output_text",
             "text": draw(texts)}]}
    if kind == "reasoning":
        return {"type": "reasoning", "summary": [], "encrypted_content": "gAAA"}
    return draw(texts)


@st.composite
def sessions(draw: Any) -> tuple[dict[str, Any], list[int]]:
    """(the last request's body, the message counts of the session's requests in order):
    each request is the first k messages, k growing."""
    listed = draw(st.lists(messages(), min_size=1, max_size=10))
    body: dict[str, Any] = {"messages": listed}
    if draw(st.booleans()):
        body["tools"] = [{"type": "function", "function": {
            "name": "bash", "description": draw(texts),
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}}]
    cuts = sorted(set(draw(st.lists(st.integers(1, len(listed)), min_size=1, max_size=4))))
    return body, cuts


def _turns_of(bodies: list[dict[str, Any]], options: RenderOptions, endpoint: str) -> None:
    """Render the session turn by turn; each turn must be the whole render, and its tokens
    the tokenizer's own ids of the whole text -- tokenized from the previous turn's ids
    here, and by `Turns` (which also reads how much of the text the splice kept)."""
    turn = None
    name = options.tokenizer
    texts_so_far: list[tuple[str, Any]] = []
    walked = Turns(options)
    for i, body in enumerate(bodies):
        request = make_request(body, endpoint=endpoint, id=f"r{i}")
        try:
            expected = render(request, options)
        except RenderError:
            with pytest.raises(RenderError):
                render_turn(request, options, turn)
            turn = None
            continue
        got, turn = render_turn(request, options, turn)
        assert got == expected
        by_turns = walked.tokens_many([request], [f"r{i - 1}" if i else None])[0]
        assert not isinstance(by_turns, RenderError)
        assert np.array_equal(by_turns.ids, whole_ids(name, got.text))
        cache = CACHES[name]
        previous = None
        if texts_so_far:
            prev_text, prev_enc = texts_so_far[-1]
            previous = [(prev_text, prev_enc, 0)]
        enc = cache.encode_many([got.text], previous)[0]
        assert np.array_equal(enc.ids, whole_ids(name, got.text))
        assert np.array_equal(enc.starts, load_tokenizer(name).encode(got.text).starts)
        texts_so_far.append((got.text, enc))


def _two_turns(tokenizer: str, system: str, listed: list[Any], cut: int
               ) -> tuple[list[Any], list[Any], list[list[Any]], list[int]]:
    """Two turns of one session (a system message and `listed[:cut]`, then the rest, or a
    user message), each rendered turn by turn and asserted equal to its whole render;
    returns the later messages, the two requests, the message lists the last turn's
    renders were given (`render_marked`) and one entry per whole render (`_whole`)."""
    options = RenderOptions(tokenizer=tokenizer)
    first = [{"role": "system", "content": system}, *listed[:cut]]
    later = listed[cut:] or [{"role": "user", "content": "next"}]
    requests = [make_request({"messages": m}, endpoint="openai-chat", id=f"r{k}")
                for k, m in enumerate([first, [*first, *later]])]
    expected = [render(r, options) for r in requests]
    _RENDER._empty_render(load_tokenizer(tokenizer))  # (made once, here)
    rendered: list[list[Any]] = []
    wholes: list[int] = []
    real, whole = _RENDER.render_marked, _RENDER._whole
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_RENDER, "render_marked", lambda source, messages, *a:
                      rendered.append(messages) or real(source, messages, *a))
        patch.setattr(_RENDER, "_whole", lambda *a: wholes.append(1) or whole(*a))
        turn = None
        for request, want in zip(requests, expected, strict=True):
            rendered.clear()
            got, turn = render_turn(request, options, turn)
            assert got == want
    return later, requests, rendered, wholes


class TestSpliceEqualsTheWholeRender:
    @pytest.mark.parametrize("name", BUNDLED)
    @SETTINGS
    @given(session=sessions())
    def test_openai_sessions_turn_by_turn(self, name, session):
        body, cuts = session
        bodies = [{**body, "messages": body["messages"][:k]} for k in cuts]
        _turns_of(bodies, RenderOptions(tokenizer=name), "openai-chat")

    @pytest.mark.parametrize("name", BUNDLED)
    @SETTINGS
    @given(body=anthropic_bodies(), data=st.data())
    def test_anthropic_sessions_through_the_proxy_view_and_the_gateway(self, name, body, data):
        cuts = sorted(set(data.draw(st.lists(st.integers(1, len(body["messages"])),
                                             min_size=1, max_size=3))))
        bodies = [{**body, "messages": body["messages"][:k]} for k in cuts]
        gateway = data.draw(st.sampled_from(["auto", "anthropic-to-openai"]))
        what_if = data.draw(st.sampled_from([(), ("strip-billing-header",),
                                             ("sort-json-keys",)]))
        _turns_of(bodies, RenderOptions(tokenizer=name, gateway=gateway, what_if=what_if),
                  "anthropic-messages")

    @pytest.mark.parametrize("name", BUNDLED)
    @SETTINGS
    @given(messages=st.lists(anthropic_messages(), min_size=2, max_size=7), data=st.data())
    def test_an_appended_anthropic_turn_converts_only_its_new_messages(self, name, messages,
                                                                      data):
        """The Anthropic proxy view's template input of an appended turn is the previous
        one's plus its new messages' (`render._appended_input`), for every block kind a
        message may hold, the rest of the body equal or changed (a system prompt that
        differs each turn, tools that come and go or change, their texts kept from the
        turn before where they are equal); each turn still equals its whole render."""
        import importlib

        module = importlib.import_module("prefixscope.prompt.pipeline")
        taken: list[bool] = []
        real = module._appended_input
        body: dict[str, Any] = {"system": [{"type": "text", "text": data.draw(texts)}],
                                "messages": messages}
        if data.draw(st.booleans()):
            body["tools"] = [{"name": "Bash", "description": data.draw(texts), "input_schema": {
                "type": "object", "properties": {"z": {"type": "string"}, "a": {}}}}]
        what_if = data.draw(st.sampled_from([(), ("strip-billing-header",),
                                             ("sort-json-keys",)]))
        bodies = [{**body, "messages": messages[:k]} for k in range(1, len(messages) + 1)]
        if data.draw(st.booleans()):  # the rest changes turn by turn (a volatile header)
            for k, changed in enumerate(bodies):
                changed["system"] = [{"type": "text", "text": "x-anthropic-billing-header: "
                                      f"cc_version=2.1.{k}; cch={k:05x};"},
                                     *body["system"][: k % 2 + 1]]
                if k % 3 == 2:
                    changed.pop("tools", None)
                elif k % 4 == 3 and "tools" in changed:  # the same path, another schema
                    changed["tools"] = [{**changed["tools"][0], "input_schema": {
                        "type": "object", "properties": {"b": {"type": "string"}}}}]
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(module, "_appended_input",
                          lambda *a: taken.append((out := real(*a)) is not None) or out)
            _turns_of(bodies, RenderOptions(tokenizer=name, what_if=what_if),
                      "anthropic-messages")
        # (a text holding the marks' own characters or a lone surrogate renders whole)
        if not any(module._scan_body(b)[0] or module._scan_body(b)[1] for b in bodies):
            assert any(taken)

    @pytest.mark.parametrize("name", BUNDLED)
    @SETTINGS
    @given(listed=st.lists(st.one_of(messages(), messages(), messages(), st.just("odd")),
                           min_size=2, max_size=7), data=st.data())
    def test_an_appended_openai_turn_converts_only_its_new_messages(self, name, listed, data):
        """The OpenAI Chat view of a body as logged (passthrough): the template input of an
        appended turn is its head's (the tools and the leading system/developer messages,
        `render._lead`) plus the previous turn's messages after its head plus its new
        messages' (`render._appended_input`), whatever the new messages are (late system
        messages, tool calls, a non-dict), the head equal each turn or changed (a
        gateway-converted system prompt whose billing header has a new hash each turn,
        tools that come and go), under each what-if; each turn still equals its whole
        render."""
        import importlib

        module = importlib.import_module("prefixscope.prompt.pipeline")
        taken: list[bool] = []
        real = module._appended_input
        head: list[dict[str, Any]] = [
            {"role": data.draw(st.sampled_from(["system", "developer"])),
             "content": data.draw(st.one_of(texts, st.just([{"type": "text", "text": "a"},
                                                            {"type": "text", "text": "b"}])))}
            for _ in range(data.draw(st.integers(0, 2)))]
        body: dict[str, Any] = {"model": "m", "messages": [*head, *listed]}
        if data.draw(st.booleans()):
            body["tools"] = [{"type": "function", "function": {
                "name": "bash", "description": data.draw(texts),
                "parameters": {"type": "object", "properties": {"z": {}, "a": {}}}}}]
        what_if = data.draw(st.sampled_from([(), ("strip-billing-header",),
                                             ("sort-json-keys",), ("drop:cch=\\w+;",)]))
        volatile = data.draw(st.booleans())
        bodies = []
        for k in range(1, len(listed) + 1):
            changed = {**body, "messages": [*head, *listed[:k]]}
            if volatile:  # new-api joins the billing block into the leading system message
                lead = {"role": "system", "content": "x-anthropic-billing-header: "
                        f"cc_version=2.1.{k}; cch={k * 7919:05x};" + "Be brief. " * (k % 2)}
                changed["messages"] = [lead, *changed["messages"][1:]] if head else \
                    [lead, *changed["messages"]]
                if k % 3 == 2:
                    changed.pop("tools", None)
            bodies.append(changed)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(module, "_appended_input",
                          lambda *a: taken.append((out := real(*a)) is not None) or out)
            _turns_of(bodies, RenderOptions(tokenizer=name, what_if=what_if), "openai-chat")
        # (a text holding the marks' own characters or a lone surrogate renders whole, and
        # a turn whose head has more system messages than the last one's is not appended)
        leads = [module._lead(b, "openai-chat", "passthrough") for b in bodies]
        if not any(module._scan_body(b)[0] or module._scan_body(b)[1] for b in bodies) and \
                any(a == b for a, b in zip(leads, leads[1:], strict=False)):
            assert any(taken)

    @pytest.mark.parametrize("name", BUNDLED)
    @SETTINGS
    @given(items=st.lists(responses_items(), min_size=2, max_size=8), data=st.data())
    def test_an_appended_responses_turn_converts_only_its_new_items(self, name, items, data):
        """A Responses API body as logged (a Codex rollout's calls): the Chat view of an
        appended turn is the previous one's plus its new items' (`render._appended_input`),
        unless the new items open with a call that joins the previous last message's
        grouped calls (`protocols.responses_to_chat`; then it is converted whole), for
        every item kind (calls of each type, outputs, messages of each role, reasoning, a
        non-dict), instructions equal or changed each turn, under each what-if; each turn
        equals its whole render."""
        import importlib

        module = importlib.import_module("prefixscope.prompt.pipeline")
        taken: list[bool] = []
        real = module._appended_input
        body: dict[str, Any] = {"model": "gpt-5.1-codex", "input": items}
        if data.draw(st.booleans()):
            body["instructions"] = data.draw(texts)
        if data.draw(st.booleans()):
            body["tools"] = [{"type": "function", "name": "shell", "description": data.draw(
                texts), "parameters": {"type": "object", "properties": {"z": {}, "a": {}}}}]
        what_if = data.draw(st.sampled_from([(), ("strip-billing-header",),
                                             ("sort-json-keys",), ("drop:a",)]))
        volatile = data.draw(st.booleans())
        bodies = []
        for k in range(1, len(items) + 1):
            changed = {**body, "input": items[:k]}
            if volatile:
                changed["instructions"] = f"x-anthropic-billing-header: cch={k:05x};"
            bodies.append(changed)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(module, "_appended_input",
                          lambda *a: taken.append((out := real(*a)) is not None) or out)
            _turns_of(bodies, RenderOptions(tokenizer=name, what_if=what_if),
                      "openai-responses")

    @pytest.mark.parametrize("name", BUNDLED)
    @SETTINGS
    @given(items=st.lists(responses_items(), min_size=2, max_size=9), data=st.data())
    def test_a_responses_turn_that_drops_items_is_spliced_and_equal(self, name, items, data):
        """A Responses API body whose history is the previous one's with items left out
        (a Codex rollout's new user turn: the API drops earlier turns' reasoning), these
        very item objects, then new ones: from the previous turn with the dropped items
        taken out (`render._without_dropped`) when every one left out makes no message
        (reasoning, a non-dict), else whole -- either way each turn equals its whole
        render and tokens, for every item kind, instructions equal or changed, under each
        what-if. Items stay dropped once dropped, as the API does, or come back."""
        body: dict[str, Any] = {"model": "gpt-5.1-codex"}
        if data.draw(st.booleans()):
            body["instructions"] = data.draw(texts)
        if data.draw(st.booleans()):
            body["tools"] = [{"type": "function", "name": "shell", "description": data.draw(
                texts), "parameters": {"type": "object", "properties": {"z": {}, "a": {}}}}]
        what_if = data.draw(st.sampled_from([(), ("strip-billing-header",),
                                             ("sort-json-keys",), ("drop:a",)]))
        volatile = data.draw(st.booleans())
        any_item = data.draw(st.integers(0, 3)) == 0  # also drop items that make messages
        dropped: set[int] = set()
        bodies = []
        for k in range(1, len(items) + 1):
            if data.draw(st.booleans()):
                if data.draw(st.integers(0, 5)) == 0:
                    dropped = set()  # items come back: no drop, no continuation
                droppable = [i for i in range(k) if any_item or not
                             _RENDER._makes_message(items[i])]
                dropped |= set(data.draw(st.lists(st.sampled_from(droppable), max_size=3))
                               if droppable else [])
            changed = {**body, "input": [item for i, item in enumerate(items[:k])
                                         if i not in dropped]}
            if volatile:
                changed["instructions"] = f"x-anthropic-billing-header: cch={k:05x};"
            bodies.append(changed)
        _turns_of(bodies, RenderOptions(tokenizer=name, what_if=what_if), "openai-responses")

    @pytest.mark.parametrize("name", BUNDLED)
    def test_a_new_user_turn_that_drops_reasoning_is_not_rendered_whole(self, name,
                                                                      monkeypatch):
        """A Codex-like session: calls, their outputs and reasoning, then a new user turn
        whose history lacks the earlier reasoning. After the first turn no turn is
        rendered whole, and every turn is its whole render (text and segments, whose
        paths ``input[i]`` moved)."""
        options = RenderOptions(tokenizer=name)
        history: list[Any] = []
        bodies = []
        for k in range(4):
            history = [item for item in history if item.get("type") != "reasoning"]
            history.append({"type": "message", "role": "user",
                            "content": [{"type": "input_text", "text": f"question {k}"}]})
            for j in range(2):
                history += [{"type": "reasoning", "summary": [], "encrypted_content": "gAAA"},
                            {"type": "function_call", "call_id": f"c{k}{j}", "name": "shell",
                             "arguments": json.dumps({"cmd": f"ls {k}{j}"})}]
                bodies.append({"model": "gpt-5.1-codex", "instructions": "Be brief.",
                               "input": list(history)})
                history.append({"type": "function_call_output", "call_id": f"c{k}{j}",
                                "output": f"out {k}{j}"})
        requests = [make_request(b, endpoint="openai-responses", id=f"r{i}")
                    for i, b in enumerate(bodies)]
        expected = [render(r, options) for r in requests]
        calls = []
        real = _RENDER._whole
        monkeypatch.setattr(_RENDER, "_whole", lambda *a, **k: calls.append(1) or real(*a, **k))
        turn = None
        for request, want in zip(requests, expected, strict=True):
            got, turn = render_turn(request, options, turn)
            assert got == want
        assert len(calls) == 1
        assert any(s.path == "input[2]" for s in expected[-1].segments)

    @pytest.mark.parametrize("name", BUNDLED)
    @SETTINGS
    @given(messages=st.lists(anthropic_messages(), min_size=2, max_size=7), data=st.data())
    def test_an_appended_turn_through_new_apis_conversion_is_its_whole_render(self, name,
                                                                             messages,
                                                                             data):
        """An Anthropic body through ``anthropic-to-openai`` (new-api's conversion): the
        template input of an appended turn is its head's (system and tools) plus the
        previous turn's messages plus its new messages' (`render._appended_input`), unless
        a new block's id names a history's nameless tool result (`render._names_kept`: the
        strategy's tool results name ``t1`` before or after a ``t1`` call), for every
        block kind, the system equal or changed each turn (a billing header with a new
        hash), tools that come and go, under each what-if; each turn equals its whole
        render and tokens."""
        body: dict[str, Any] = {"system": [{"type": "text", "text": data.draw(texts)}],
                                "messages": messages}
        if data.draw(st.booleans()):
            body["tools"] = [{"name": "Bash", "description": data.draw(texts), "input_schema": {
                "type": "object", "properties": {"z": {"type": "string"}, "a": {}}}}]
        what_if = data.draw(st.sampled_from([(), ("strip-billing-header",),
                                             ("sort-json-keys",), ("drop:a",)]))
        bodies = [{**body, "messages": messages[:k]} for k in range(1, len(messages) + 1)]
        if data.draw(st.booleans()):
            for k, changed in enumerate(bodies):
                changed["system"] = [{"type": "text", "text": "x-anthropic-billing-header: "
                                      f"cc_version=2.1.{k}; cch={k:05x};"},
                                     *body["system"][: k % 2 + 1]]
                if k % 3 == 2:
                    changed.pop("tools", None)
        _turns_of(bodies, RenderOptions(tokenizer=name, gateway="anthropic-to-openai",
                                        what_if=what_if), "anthropic-messages")

    @pytest.mark.parametrize("name", BUNDLED)
    @SETTINGS
    @given(listed=st.lists(st.one_of(messages(), messages(), st.just("odd")), min_size=2,
                           max_size=7), data=st.data())
    def test_an_appended_turn_with_hoisted_system_messages_is_its_whole_render(self, name,
                                                                              listed, data):
        """``hoist-system-messages`` over an OpenAI Chat body (late system and developer
        messages anywhere, leading ones that change each turn or not) and over a
        Responses body (developer and system items anywhere, instructions equal or
        changed): an appended turn with no new system message is the previous hoisted
        input plus its new messages, a new head is spliced where nothing is hoisted, else
        whole (`render._appended_input`, `render._hoists`), under each what-if (no-hoist
        too); each turn equals its whole render and tokens."""
        what_if = data.draw(st.sampled_from([(), ("strip-billing-header",), ("no-hoist",),
                                             ("sort-json-keys",), ("drop:cch=\\w+;",)]))
        options = RenderOptions(tokenizer=name, gateway="hoist-system-messages",
                                what_if=what_if)
        volatile = data.draw(st.booleans())
        if data.draw(st.booleans()):
            items = data.draw(st.lists(responses_items(), min_size=2, max_size=7))
            bodies = []
            for k in range(1, len(items) + 1):
                changed = {"model": "gpt-5.1-codex", "input": items[:k],
                           "instructions": f"x-anthropic-billing-header: cch={k * volatile:05x};"}
                bodies.append(changed)
            _turns_of(bodies, options, "openai-responses")
            return
        head = [{"role": data.draw(st.sampled_from(["system", "developer"])),
                 "content": data.draw(texts)} for _ in range(data.draw(st.integers(0, 2)))]
        body: dict[str, Any] = {"model": "m"}
        if data.draw(st.booleans()):
            body["tools"] = [{"type": "function", "function": {
                "name": "bash", "description": data.draw(texts),
                "parameters": {"type": "object", "properties": {"z": {}, "a": {}}}}}]
        bodies = []
        for k in range(1, len(listed) + 1):
            lead = [{"role": "system", "content": "x-anthropic-billing-header: "
                     f"cch={k * 7919:05x};" + "Be brief. " * (k % 2)}] if volatile else []
            bodies.append({**body, "messages": [*lead, *head, *listed[:k]]})
        _turns_of(bodies, options, "openai-chat")

    @pytest.mark.parametrize("name", BUNDLED)
    def test_a_new_call_that_names_an_earlier_tool_result_is_its_whole_render(self, name):
        """new-api names a nameless tool result after the first block with its id anywhere
        in the body: a call appended after it renames it (o200k-harmony prints the name of
        a tool message no earlier call answers), so the turn is not spliced onto the
        previous conversion (`render._names_kept`) and equals its whole render."""
        options = RenderOptions(tokenizer=name, gateway="anthropic-to-openai")
        first = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                               "content": "early output"}]}]
        second = [*first, {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}]}]
        turn = None
        for listed in (first, second):
            request = make_request({"system": "be brief", "messages": listed},
                                   endpoint="anthropic-messages")
            got, turn = render_turn(request, options, turn)
            assert got == render(request, options)

    @pytest.mark.parametrize("name", sorted(HEADS))
    @pytest.mark.parametrize("gateway", ["anthropic-to-openai", "hoist-system-messages"])
    def test_a_gateway_profiles_turns_are_spliced_not_rendered_whole(self, name, gateway,
                                                                    monkeypatch):
        """A Claude Code session through new-api's conversion (its system prompt with a new
        billing hash each turn), and an OpenAI Chat session through the hoisting profile
        (its leading system message so, and a late developer message in its history):
        each turn equals its whole render; the first is rendered whole, and then only a
        turn whose head changes while a late system message is hoisted into it."""
        options = RenderOptions(tokenizer=name, gateway=gateway)
        bodies = []
        listed: list[dict[str, Any]] = []
        for k in range(5):
            billing = f"x-anthropic-billing-header: cch={k * 7919:05x};"
            if gateway == "anthropic-to-openai":
                listed = [*listed, {"role": "user", "content": f"question {k}"},
                          {"role": "assistant", "content": [
                              {"type": "text", "text": f"answer {k}"},
                              {"type": "tool_use", "id": f"t{k}", "name": "Bash",
                               "input": {"command": "ls"}}]},
                          {"role": "user", "content": [
                              {"type": "tool_result", "tool_use_id": f"t{k}",
                               "content": f"out {k}"}]}]
                bodies.append({"system": [{"type": "text", "text": billing},
                                          {"type": "text", "text": "Be brief."}],
                               "tools": [{"name": "Bash", "description": "run",
                                          "input_schema": {"type": "object"}}],
                               "messages": listed})
            else:
                listed = [*listed, {"role": "user", "content": f"question {k}"},
                          {"role": "assistant", "content": f"answer {k}"}]
                if k == 3:
                    listed.append({"role": "developer", "content": "mind the tests"})
                bodies.append({"model": "m", "messages": [
                    {"role": "system", "content": billing if k < 2 else "fixed"}, *listed]})
        endpoint = "anthropic-messages" if gateway == "anthropic-to-openai" else "openai-chat"
        requests = [make_request(b, endpoint=endpoint, id=f"r{k}")
                    for k, b in enumerate(bodies)]
        expected = [render(r, options) for r in requests]
        calls = []
        real = _RENDER._whole
        monkeypatch.setattr(_RENDER, "_whole", lambda *a, **k: calls.append(1) or real(*a, **k))
        turn = None
        for request, want in zip(requests, expected, strict=True):
            got, turn = render_turn(request, options, turn)
            assert got == want
        # hoisting: r3 adds the late developer message (hoisted into the head: whole); r4
        # appends to it with the head unchanged (spliced)
        assert len(calls) == (1 if gateway == "anthropic-to-openai" else 2)

    def test_every_bundled_template_has_a_splice_rule(self):
        assert set(SPLICES) == set(BUNDLED)
        assert set(HEADS) == set(BUNDLED)

    @pytest.mark.parametrize("name", BUNDLED)
    def test_appended_turns_are_spliced_not_rendered_whole(self, name, monkeypatch):
        import importlib

        module = importlib.import_module("prefixscope.prompt.pipeline")
        calls = []
        real = module._whole
        monkeypatch.setattr(module, "_whole", lambda *a, **k: calls.append(1) or real(*a, **k))
        listed = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
        turn = None
        options = RenderOptions(tokenizer=name)
        for i in range(4):
            listed = [*listed, {"role": "assistant", "content": f"answer {i}"},
                      {"role": "user", "content": f"question {i}"}]
            request = make_request({"messages": listed}, endpoint="openai-chat")
            got, turn = render_turn(request, options, turn)
            assert got == render(request, options)
        assert len(calls) == 1 + 4  # the first turn whole; then only the plain renders above

    @SETTINGS
    @given(system=texts, listed=st.lists(messages(), min_size=1, max_size=8),
           cut=st.integers(1, 8))
    def test_a_deepseek_splice_renders_none_of_the_previous_messages(self, system, listed,
                                                                   cut):
        """deepseek-v4's splice (`splice._deepseek`: R_A empty) renders the new messages
        alone, never the previous turn's system prompt (in the proxy view: every tool's
        text), and gives the whole render; a turn with a new system message is rendered
        whole."""
        later, requests, rendered, wholes = _two_turns("deepseek-v4", system, listed, cut)
        if any(m["role"] in ("system", "developer") for m in later):
            assert len(wholes) == 2
        elif all(_RENDER._scan_body(r.body) == (False, False) for r in requests):
            # spliced (a body with the marks' characters or lone surrogates never is): the
            # second turn's one render is R_B, the new messages
            assert len(wholes) == 1
            assert len(rendered) == 1
            assert len(rendered[0]) == len(later)
            assert not any(m.get("role") == "system" for m in rendered[0])

    @SETTINGS
    @given(system=texts, listed=st.lists(messages(), min_size=1, max_size=8),
           cut=st.integers(1, 8))
    def test_a_harmony_splice_renders_no_head(self, system, listed, cut):
        """o200k-harmony's splice (`splice._harmony`: R without C's leading system
        message, so neither render has a head) never renders the previous turn's system
        prompt (a Codex session's instructions) where no new message is a system or
        developer one, and gives the whole render."""
        later, requests, rendered, wholes = _two_turns("o200k-harmony", system, listed, cut)
        if not any(m["role"] in ("system", "developer") for m in later) and \
                all(_RENDER._scan_body(r.body) == (False, False) for r in requests):
            # spliced: R_A (when a new tool result asks for an earlier call) and R_B,
            # neither holding a system message
            assert len(wholes) == 1
            assert not any(m.get("role") in ("system", "developer")
                           for messages in rendered for m in messages)

    @pytest.mark.parametrize("name", BUNDLED)
    def test_the_empty_render_is_the_whole_render_of_no_message(self, name):
        """`_empty_render`: the template with no message and no tools, as transformers'
        render gives it (no marks), the same object each time."""
        from prefixscope.prompt.template import render_plain

        tok = load_tokenizer(name)
        empty = _RENDER._empty_render(tok)
        assert empty == render_plain(tok.chat_template, [], None, tok.template_vars)
        assert _RENDER._empty_render(tok) is empty

    @pytest.mark.parametrize("name", sorted(HEADS))
    def test_a_head_that_changes_every_turn_is_spliced_not_rendered_whole(self, name,
                                                                        monkeypatch):
        """A system prompt with a new billing hash each turn (of a new length every other
        turn): the turn is the new head's render, the previous turn's messages and the new
        ones' (`render._splice_head`), never a whole render after the first, and equal to
        the whole render."""
        import importlib

        module = importlib.import_module("prefixscope.prompt.pipeline")
        options = RenderOptions(tokenizer=name)
        listed: list[dict[str, Any]] = []
        bodies = []
        for k in range(5):
            listed = [*listed, {"role": "user", "content": f"question {k}"},
                      {"role": "assistant", "content": [
                          {"type": "text", "text": f"answer {k}"},
                          {"type": "tool_use", "id": f"t{k}", "name": "Bash",
                           "input": {"command": "ls"}}]}]
            bodies.append({"system": [{"type": "text", "text": "x-anthropic-billing-header: "
                                       f"cc_version=2.1.{k}; cch={k * 7919:05x};"},
                                      {"type": "text", "text": "Be brief. " * (k % 2 + 1)}],
                           "tools": [{"name": "Bash", "description": "run a command",
                                      "input_schema": {"type": "object"}}],
                           "messages": listed})
        requests = [make_request(b, endpoint="anthropic-messages", id=f"r{k}")
                    for k, b in enumerate(bodies)]
        expected = [render(r, options) for r in requests]
        heads = [render(make_request({**b, "messages": []}, endpoint="anthropic-messages"),
                        options).text[:-len(HEADS[name].generation)] for b in bodies]
        calls = []
        real = module._whole
        monkeypatch.setattr(module, "_whole", lambda *a, **k: calls.append(1) or real(*a, **k))
        written = []  # the tools' JSON texts: written for the first turn, then kept
        dumps = module.dumps
        monkeypatch.setattr(module, "dumps", lambda *a: written.append(1) or dumps(*a))
        turn = None
        for k, (request, want, head) in enumerate(zip(requests, expected, heads, strict=True)):
            got, turn = render_turn(request, options, turn)
            assert got == want
            assert turn is not None and turn.head_end == len(head)
            assert got.text.startswith(head)
            if k == 0:
                first = len(written)
        assert len(calls) == 1
        assert first and len(written) == first

    @pytest.mark.parametrize("name", sorted(HEADS))
    def test_a_converted_system_message_that_changes_every_turn_is_spliced(self, name,
                                                                          monkeypatch):
        """The gateway-converted shape (issue 37): an OpenAI Chat body whose leading system
        message carries a billing header with a new hash each turn (a new length every
        other turn). Each turn is the new head's render, the previous turn's messages and
        the new ones' (`render._splice_head` over the OpenAI Chat view), never a whole
        render after the first, and equal to the whole render; its head ends where the
        render of the tools and the system message alone ends, less G."""
        import importlib

        module = importlib.import_module("prefixscope.prompt.pipeline")
        options = RenderOptions(tokenizer=name)
        listed: list[dict[str, Any]] = []
        bodies = []
        tools = [{"type": "function", "function": {"description": "run a command",
                                                    "name": "Bash",
                                                    "parameters": {"type": "object"}}}]
        for k in range(5):
            listed = [*listed, {"role": "user", "content": [{"type": "text",
                                                             "text": f"question {k}"}]},
                      {"role": "assistant", "content": None, "tool_calls": [
                          {"id": f"t{k}", "type": "function",
                           "function": {"name": "Bash", "arguments": '{"command":"ls"}'}}]},
                      {"role": "tool", "content": f"out {k}", "name": "",
                       "tool_call_id": f"t{k}"}]
            system = {"role": "system", "content": "x-anthropic-billing-header: cc_version="
                      f"2.1.{k}; cch={k * 7919:05x};" + "Be brief. " * (k % 2 + 1)}
            bodies.append({"model": "claude-sonnet-4-5", "messages": [system, *listed],
                           "tools": tools})
        requests = [make_request(b, endpoint="openai-chat", id=f"r{k}")
                    for k, b in enumerate(bodies)]
        expected = [render(r, options) for r in requests]
        g = len(HEADS[name].generation)
        heads = [render(make_request({**b, "messages": b["messages"][:1]},
                                     endpoint="openai-chat"), options).text[:-g]
                 for b in bodies]
        calls = []
        real = module._whole
        monkeypatch.setattr(module, "_whole", lambda *a, **k: calls.append(1) or real(*a, **k))
        turn = None
        for request, want, head in zip(requests, expected, heads, strict=True):
            got, turn = render_turn(request, options, turn)
            assert got == want
            assert turn is not None and turn.head_end == len(head) and turn.lead == 1
            assert got.text.startswith(head)
        assert len(calls) == 1

    @pytest.mark.parametrize("name", sorted(HEADS))
    @SETTINGS
    @given(heads=st.lists(texts, min_size=2, max_size=4),
           turns=st.lists(st.lists(messages(), min_size=1, max_size=3), min_size=2,
                          max_size=4))
    def test_a_new_head_is_rendered_once_with_its_tools(self, name, heads, turns):
        """A turn whose system message changed (`render._splice_head`) renders the new head
        with its tools and the new messages alone, without them (the tail by the empty
        head, `_empty_render`), never the head twice; every turn is its whole render."""
        options = RenderOptions(tokenizer=name)
        tools = [{"type": "function", "function": {"name": "bash", "description": "run",
                                                    "parameters": {"type": "object"}}}]
        listed: list[dict[str, Any]] = []
        requests = []
        for k, new in enumerate(turns):
            listed = [*listed, *(m for m in new if m["role"] not in ("system", "developer"))]
            system = {"role": "system", "content": heads[k % len(heads)]}
            requests.append(make_request({"messages": [system, *listed], "tools": tools},
                                         endpoint="openai-chat", id=f"r{k}"))
        expected = [render(r, options) for r in requests]
        _RENDER._empty_render(load_tokenizer(name))  # (made once, here)
        rendered: list[tuple[list[Any], Any]] = []
        moved: list[int] = []
        real, splice_head = _RENDER.render_marked, _RENDER._splice_head
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(_RENDER, "render_marked", lambda source, messages, tools, *a:
                          rendered.append((messages, tools)) or
                          real(source, messages, tools, *a))
            patch.setattr(_RENDER, "_splice_head", lambda *a: (
                moved.append(1) if (out := splice_head(*a)) is not None else None) or out)
            turn = None
            for request, want in zip(requests, expected, strict=True):
                rendered.clear()
                moved.clear()
                got, turn = render_turn(request, options, turn)
                assert got == want
                if moved:  # a new head: it with the tools, then the new messages alone
                    assert len(rendered) == 2
                    (head, with_tools), (tail, without) = rendered
                    assert with_tools is not None and without is None
                    assert [m.get("role") for m in head] == ["system"]
                    assert not any(m.get("role") == "system" for m in tail)

    @pytest.mark.parametrize("name", sorted(HEADS))
    def test_head_tokens_are_the_tokenizers_own_ids_of_the_head(self, name):
        """`Turns.head_tokens`: the first h ids of each turn are the library's ids of the
        head text alone (the body without messages, rendered whole, less G), whether the
        turn was rendered whole, spliced or spliced after a new head (for a tokenizer that
        says its ids' byte lengths, and for one that does not: the Qwen ones)."""
        options = RenderOptions(tokenizer=name)
        turns = Turns(options)
        listed: list[dict[str, Any]] = []
        previous = None
        for k in range(4):
            listed = [*listed, {"role": "user", "content": f"question {k} ünïcödé"},
                      {"role": "assistant", "content": f"answer {k}"}]
            body = {"system": [{"type": "text", "text": "x-anthropic-billing-header: "
                                f"cch={k // 2:05x}; é"}],
                    "messages": listed}
            request = make_request(body, endpoint="anthropic-messages", id=f"r{k}")
            tokens = turns.tokens_many([request], [previous])[0]
            head = render(make_request({**body, "messages": []}, endpoint="anthropic-messages"),
                          options).text[:-len(HEADS[name].generation)]
            expected = whole_ids(name, head)
            h = turns.head_tokens(request.id)
            assert h == len(expected)
            assert np.array_equal(tokens.ids[:h], expected)
            previous = request.id

    @pytest.mark.parametrize("name", sorted(HEADS))
    @SETTINGS
    @given(listed=st.lists(st.one_of(messages(), st.just({"role": "tool", "content": "out"}),
                                     st.just({"role": "user", "content": "go on"})),
                           min_size=2, max_size=9), data=st.data())
    def test_a_head_that_changes_over_grouped_tool_results_is_the_whole_render(self, name,
                                                                            listed, data):
        """The head splice where the template groups tool messages by their neighbours'
        roles and shows reasoning after the last user message only (qwen2.5, qwen3.6:
        `HeadRule.cuts`): a leading system message with a new billing hash each turn (or
        not), the history cut into turns anywhere (tool results split across two turns,
        a tool result right after the head, reasoning before a new user message, late
        system messages), tools that come and go, each what-if; every turn equals its
        whole render and its tokens the tokenizer's own."""
        head = [{"role": data.draw(st.sampled_from(["system", "developer"])),
                 "content": data.draw(texts)} for _ in range(data.draw(st.integers(0, 2)))]
        tools = [{"type": "function", "function": {"name": "bash", "description": "run",
                                                    "parameters": {"type": "object"}}}]
        with_tools = data.draw(st.booleans())
        volatile = data.draw(st.booleans())
        cuts = sorted(set(data.draw(st.lists(st.integers(1, len(listed)), min_size=2,
                                             max_size=6))))
        bodies = []
        for k in cuts:
            lead = [{"role": "system", "content": "x-anthropic-billing-header: "
                     f"cch={k * 7919:05x};" + "Be brief. " * (k % 2)}] if volatile else []
            body: dict[str, Any] = {"model": "m", "messages": [*lead, *head, *listed[:k]]}
            if with_tools and k % 3 != 2:
                body["tools"] = tools
            bodies.append(body)
        what_if = data.draw(st.sampled_from([(), ("strip-billing-header",),
                                             ("sort-json-keys",)]))
        _turns_of(bodies, RenderOptions(tokenizer=name, what_if=what_if), "openai-chat")

    @pytest.mark.parametrize("name", ["qwen2.5", "qwen3.6"])
    def test_a_turn_that_continues_a_run_of_tool_results_is_rendered_whole(self, name,
                                                                          monkeypatch):
        """Parallel tool results logged over two requests, under a head that changes each
        turn: the second request's first result shares the first one's user turn (the
        first result loses its ``<|im_end|>``), so that turn is not spliced onto the
        previous text (`HeadRule.cuts` at the old end) and is rendered whole; the other
        turns are spliced (2 whole renders of 4), and every turn equals its whole render."""
        options = RenderOptions(tokenizer=name)
        histories = [
            [{"role": "user", "content": "look"},
             {"role": "assistant", "content": "", "tool_calls": [
                 {"id": "a", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
                 {"id": "b", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
             {"role": "tool", "tool_call_id": "a", "content": "first"}]]
        histories.append([*histories[0], {"role": "tool", "tool_call_id": "b",
                                          "content": "second"}])
        histories.append([*histories[1], {"role": "assistant", "content": "done"}])
        histories.append([*histories[2], {"role": "user", "content": "thanks"}])
        requests = _under_a_changing_head(histories)
        expected = [render(r, options) for r in requests]
        assert "first\n</tool_response>\n<tool_response>\nsecond" in expected[1].text
        assert _whole_renders_turn_by_turn(requests, expected, options, monkeypatch) == 2

    def test_a_tool_result_for_an_earlier_turns_call_is_rendered_whole_under_harmony(
            self, monkeypatch):
        """o200k-harmony names a tool message after the last earlier call with its id: a
        turn whose new tool result answers a call of the previous turn's history cannot
        take its part from the new head and the new messages alone (the call is not
        there), so under a head that changes each turn it is rendered whole
        (`HeadRule.cuts`), and equals its whole render; the turn after it is spliced:
        2 whole renders of 3."""
        options = RenderOptions(tokenizer="o200k-harmony")
        histories = [[{"role": "user", "content": "look"},
                      {"role": "assistant", "content": "", "tool_calls": [
                          {"id": "a", "type": "function",
                           "function": {"name": "ls", "arguments": "{}"}}]}]]
        histories.append([*histories[0], {"role": "tool", "tool_call_id": "a",
                                          "content": "out"}])
        histories.append([*histories[1], {"role": "user", "content": "thanks"}])
        requests = _under_a_changing_head(histories)
        expected = [render(r, options) for r in requests]
        assert "<|start|>functions.ls to=assistant" in expected[1].text
        assert _whole_renders_turn_by_turn(requests, expected, options, monkeypatch) == 2

    def test_a_new_user_turn_after_shown_reasoning_is_rendered_whole_under_qwen36(
            self, monkeypatch):
        """qwen3.6 shows an assistant message's reasoning only after the last user message:
        a turn that adds a user message hides the reasoning the previous text showed, so
        under a head that changes each turn it is not spliced (`HeadRule.cuts`) and
        equals its whole render; the turn after it (no reasoning after the last user) is
        spliced: 2 whole renders of 3."""
        options = RenderOptions(tokenizer="qwen3.6")
        histories = [[{"role": "user", "content": "why"},
                      {"role": "assistant", "content": "because", "reasoning": "hmm"}]]
        histories.append([*histories[0], {"role": "user", "content": "and then"}])
        histories.append([*histories[1], {"role": "assistant", "content": "then this"}])
        requests = _under_a_changing_head(histories)
        expected = [render(r, options) for r in requests]
        assert "<think>\nhmm" in expected[0].text and "hmm" not in expected[1].text
        assert _whole_renders_turn_by_turn(requests, expected, options, monkeypatch) == 2

    @SETTINGS
    @given(messages=st.lists(anthropic_messages(), min_size=0, max_size=6), data=st.data())
    def test_a_history_of_the_previous_objects_is_cut_as_dumping_it_whole(self, messages,
                                                                         data):
        """A body whose history starts with the previous turn's very item objects has its
        JSON parts taken from that turn plus the new items' (`render._raw_parts`): equal
        to orjson's dump of the whole body, cut the same way."""
        import importlib

        module = importlib.import_module("prefixscope.prompt.pipeline")
        k = data.draw(st.integers(0, len(messages)))
        system = [{"type": "text", "text": data.draw(texts)}]
        earlier = make_request({"system": system, "messages": messages[:k]},
                               endpoint="anthropic-messages")
        _, turn = render_turn(earlier, RenderOptions(tokenizer="deepseek-v4"))
        assume(turn is not None)
        assert module._array(turn.items) == orjson.dumps(messages[:k])  # its own history
        body = {"system": system, "messages": list(messages)}
        whole = (orjson.dumps({"system": system}), orjson.dumps(messages))
        rest, runs = module._raw_parts(body, "messages", turn)
        assert (rest, module._array(runs)) == whole
        assert runs[:len(turn.items)] == turn.items  # the turn's runs, then the new items'
        assert all(a is b for a, b in zip(runs, turn.items, strict=False))  # (not copied)
        assert module._extends(turn, (rest, runs))  # its items, then the new ones
        assert module._extends(turn, (whole[0], module._runs(whole[1])))  # (dumped whole)
        if k:  # (any array extends an empty one)
            assert not module._extends(turn, (whole[0], module._runs(b"[" + whole[1])))
        rest, runs = module._raw_parts(body, "messages")
        assert (rest, module._array(runs)) == whole

    def test_a_rewritten_history_is_rendered_whole_and_still_equal(self):
        first = {"messages": [{"role": "user", "content": "a"},
                              {"role": "assistant", "content": "b"}]}
        second = {"messages": [{"role": "user", "content": "A"},
                               {"role": "assistant", "content": "b"},
                               {"role": "user", "content": "c"}]}
        options = RenderOptions(tokenizer="qwen2.5")
        _, turn = render_turn(make_request(first, endpoint="openai-chat"), options)
        request = make_request(second, endpoint="openai-chat")
        assert render_turn(request, options, turn)[0] == render(request, options)

    @pytest.mark.parametrize("name", BUNDLED)
    @settings(max_examples=60, deadline=None)
    @given(prefix=texts, a=texts, b=texts)
    def test_token_reuse_equals_the_whole_tokenization(self, name, prefix, a, b):
        """Any two texts, the second told the first is its predecessor."""
        cache = CACHES[name]
        first, second = prefix + a, prefix + b
        enc_a = cache.encode_many([first])[0]
        for previous in ([(first, enc_a, 0)], None):
            got = cache.encode_many([second], previous)[0]
            assert np.array_equal(got.ids, whole_ids(name, second))
        both = cache.encode_many([first, second], [None, (first, 0, len(prefix))])
        assert np.array_equal(both[1].ids, whole_ids(name, second))
        assert np.array_equal(both[1].starts, load_tokenizer(name).encode(second).starts)


class TestTokenReuseAfterADifference:
    """A text that differs from its predecessor, then runs on as it (a turn whose head
    changed: the rest of its history is the last turn's) takes that run's ids whole."""

    @pytest.mark.parametrize("name", BUNDLED)
    @settings(max_examples=60, deadline=None)
    @given(data=st.data())
    def test_a_run_taken_from_the_previous_text_equals_the_whole_tokenization(self, name,
                                                                              data):
        splitters = PieceCache(load_tokenizer(name)).splitters
        run = "".join(data.draw(st.lists(st.tuples(st.sampled_from(splitters), texts).map(
            "".join), min_size=1, max_size=5)))
        prefix, a, b, c, d = (data.draw(texts) for _ in range(5))
        first, second = prefix + a + run + c, prefix + b + run + d
        cache = PieceCache(load_tokenizer(name), middle_min=1)
        enc_first = cache.encode(first)
        for previous in ((first, enc_first, 0), (first, 0, 0)):
            texts_in = [second] if previous[1] is enc_first else [first, second]
            got = cache.encode_many(texts_in, [previous] if len(texts_in) == 1
                                    else [None, previous])[-1]
            assert np.array_equal(got.ids, whole_ids(name, second))
            assert np.array_equal(got.starts, load_tokenizer(name).encode(second).starts)

    @pytest.mark.parametrize("name", ["deepseek-v4", "qwen3.6"])
    def test_a_new_billing_hash_takes_the_history_from_the_last_turn(self, name):
        cache = PieceCache(load_tokenizer(name))
        opener = cache.splitters[0]
        history = "".join(f"{opener}turn {i}: the quick brown fox {i * 7} jumps\n" * 3
                          for i in range(300))
        first = "tools ... x-anthropic-billing-header: cch=02b5b;\nsystem" + history
        second = "tools ... x-anthropic-billing-header: cch=9f0aa;\nsystem" + history + \
            opener + "a new message"
        enc_first = cache.encode(first)
        assert cache._middle(first, second, common_text_prefix(first, second)) is not None
        pieces = cache.hits + cache.misses
        got = cache.encode_many([second], [(first, enc_first, 0)])[0]
        assert np.array_equal(got.ids, whole_ids(name, second))
        assert cache.hits + cache.misses - pieces < 10  # not the history's 300 pieces again


@settings(max_examples=300, deadline=None)
@given(items=st.lists(st.one_of(st.integers(-9, 99), texts,
                                st.lists(st.integers(0, 9), max_size=2)), max_size=8),
       data=st.data())
def test_a_history_in_runs_grows_as_its_whole_json_continues(items, data):
    """`_grows` of two histories' JSON in runs (`Turn.items`) is `_continues` of their whole
    texts: runs cut anywhere between items, the later history the earlier one's runs (the
    very bytes, or equal ones) then more, or any other history."""
    module = importlib.import_module("prefixscope.prompt.pipeline")

    def runs_of(listed: list[Any]) -> tuple[bytes, ...]:
        cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, len(listed))),
                                             max_size=3))))
        bounds = [0, *[c for c in cuts if c < len(listed)], len(listed)]
        return tuple(orjson.dumps(listed[a:b])[1:-1]
                     for a, b in zip(bounds, bounds[1:], strict=False) if b > a)

    k = data.draw(st.integers(0, len(items)))
    before = runs_of(items[:k])
    assert module._array(before) == orjson.dumps(items[:k])
    other = data.draw(st.lists(st.one_of(st.integers(0, 99), texts), max_size=8))
    for now in (before + runs_of(items[k:]), tuple(bytes(bytearray(r)) for r in before) +
                runs_of(items[k:]), runs_of(items), runs_of(other)):
        assert module._grows(before, k, now) == module._continues(
            module._open(module._array(before)), k, module._array(now))


@pytest.mark.parametrize(("a", "b", "known"), [("", "", 0), ("abc", "abd", 0), ("abc", "abc", 2),
                                                ("x" * 1000 + "a", "x" * 1000 + "b", 10),
                                                ("short", "shorter", 0)])
def test_common_text_prefix_is_the_first_difference(a, b, known):
    expected = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                    min(len(a), len(b)))
    assert common_text_prefix(a, b, known) == expected


runner = CliRunner()


def _under_a_changing_head(histories: list[list[dict[str, Any]]]) -> list[Any]:
    """OpenAI Chat requests of these histories, each under a system message whose billing
    nonce changes every turn."""
    return [make_request({"model": "m", "messages": [
        {"role": "system", "content": f"x-anthropic-billing-header: cch={k:05x};"},
        *listed]}, endpoint="openai-chat", id=f"r{k}") for k, listed in enumerate(histories)]


def _whole_renders_turn_by_turn(requests: list[Any], expected: list[Any],
                                options: RenderOptions, monkeypatch: Any) -> int:
    """How many whole renders `render_turn` makes over `requests`, each turn held equal
    to its whole render in `expected` (made before, outside the count)."""
    calls: list[int] = []
    real = _RENDER._whole
    monkeypatch.setattr(_RENDER, "_whole", lambda *a, **k: calls.append(1) or real(*a, **k))
    turn = None
    for request, want in zip(requests, expected, strict=True):
        got, turn = render_turn(request, options, turn)
        assert got == want
    return len(calls)


def _store(folder: Path) -> str:
    result = runner.invoke(app, ["ingest", str(folder), "--store", "s.duckdb", "-q"])
    assert result.exit_code == 0, result.output
    return "s.duckdb"


@pytest.mark.real
@pytest.mark.parametrize("folder", [ROOT / "sample_logs", REAL], ids=["samples", "real"])
def test_every_request_of_the_corpora_turn_by_turn_is_its_whole_render_and_tokens(folder):
    """Every request with a body, in log order, from its session predecessor's state."""
    from prefixscope.tokens import tokens_many

    with Store.open(Path(_store(folder)), read_only=True) as st_:
        prev_of = {b: a for a, b, _, _ in st_.session_pairs()}
        requests = [r for r in st_.iter_requests() if r.body is not None]
    options = RenderOptions()
    turns = Turns(options)
    spliced = 0
    for start in range(0, len(requests), 16):
        chunk = requests[start:start + 16]
        got = turns.tokens_many(chunk, [prev_of.get(r.id) for r in chunk])
        for request, result in zip(chunk, got, strict=True):
            try:
                expected = tokens_many([request], options)[0]
            except RenderError as exc:
                assert isinstance(result, RenderError) and str(result) == str(exc)
                continue
            assert not isinstance(result, RenderError)
            assert result.prompt == expected.prompt
            assert np.array_equal(result.ids, expected.ids)
            assert np.array_equal(result.char_starts, expected.char_starts)
            assert np.array_equal(result.segment_index, expected.segment_index)
            assert result.logged_prompt_tokens == expected.logged_prompt_tokens
            held = turns.held.get(prev_of.get(request.id) or "")
            spliced += held is not None and held.turn is not None
    assert spliced > len(requests) // 3  # most turns extend their predecessor
