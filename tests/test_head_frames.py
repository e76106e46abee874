"""`head_text` renders a head's frame once and fills in its system texts
(`pipeline._framed_head`): every head it gives is the whole render of that head, whatever
heads were framed before it, for each view and each template of `splice.HEADS`."""

from __future__ import annotations

import importlib
from typing import Any

from _render_helpers import make_request, texts
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from prefixscope.prompt import RenderError, RenderOptions, render
from prefixscope.prompt.splice import HEADS

pipeline = importlib.import_module("prefixscope.prompt.pipeline")

HEADER = "x-anthropic-billing-header: cc_version=2.0.14; cc_entrypoint=cli; cch={};"
TOKENIZERS = [None, "qwen2.5", "qwen3.6", "o200k-harmony"]
# a system text: a billing header with any hash, any text, a lone surrogate, or a text
# holding one of the frame's own holes (then the head is rendered whole)
system_texts = st.one_of(
    st.builds(HEADER.format, st.text("0123456789abcdef", min_size=5, max_size=5)),
    texts, st.just("half \ud83d of a pair"), st.just("\U000f00000\U000f0001"),
    st.just(""))


@st.composite
def frames(draw: Any) -> tuple[str, str | None, Any, Any]:
    """(endpoint, gateway, tools, a shape of the system: its texts drawn per head)."""
    view = draw(st.sampled_from(["proxy", "new-api", "chat", "chat-hoist"]))
    tools = draw(st.sampled_from([None, [{"name": "Edit", "description": "edit a file",
                                          "input_schema": {"type": "object",
                                                           "required": ["path"],
                                                           "properties": {
                                                               "path": {"type": "string"},
                                                               "new": {"type": "string"}}}}]]))
    if view in ("proxy", "new-api"):
        shape = draw(st.one_of(st.just("string"), st.lists(st.sampled_from(
            ["text", "other", "textless"]), max_size=3)))
        return ("anthropic-messages", "anthropic-to-openai" if view == "new-api" else None,
                tools, shape)
    chat_tools = None if tools is None else [
        {"type": "function", "function": {"name": t["name"], "description": t["description"],
                                          "parameters": t["input_schema"]}} for t in tools]
    shape = draw(st.lists(st.tuples(st.sampled_from(["system", "developer"]), st.one_of(
        st.just("string"), st.lists(st.sampled_from(["text", "image", "refusal"]),
                                    max_size=3))), max_size=3))
    return ("openai-chat", "hoist-system-messages" if view == "chat-hoist" else None,
            chat_tools, shape)


def _anthropic_system(shape: Any, draw: Any) -> Any:
    if shape == "string":
        return draw(system_texts)
    blocks: list[Any] = []
    for kind in shape:
        if kind == "text":
            blocks.append({"type": "text", "text": draw(system_texts),
                           "cache_control": {"type": "ephemeral"}})
        elif kind == "other":
            blocks.append({"type": "note", "text": draw(system_texts)})
        else:
            blocks.append({"type": "text"})
    return blocks


def _chat_lead(shape: Any, draw: Any) -> list[dict[str, Any]]:
    lead = []
    for role, content in shape:
        if content == "string":
            lead.append({"role": role, "content": draw(system_texts)})
            continue
        parts: list[Any] = []
        for kind in content:
            if kind == "text":
                parts.append({"type": "text", "text": draw(system_texts)})
            elif kind == "image":
                parts.append({"type": "image_url", "image_url": {"url": "data:,"}})
            else:
                parts.append({"type": "refusal", "refusal": draw(system_texts)})
        lead.append({"role": role, "content": parts})
    return lead


def _heads_rendered_whole(request: Any, options: RenderOptions) -> tuple[str, str] | None:
    """The oracle: the whole pipeline's render of the body without its history (the
    messages after the head dropped), its generation prompt cut off."""
    body = dict(request.body)
    if request.endpoint == "anthropic-messages":
        body["messages"] = []
    else:
        body["messages"] = [m for m in body["messages"] if m["role"] in ("system", "developer")]
    try:
        prompt = render(make_request(body, endpoint=request.endpoint, gateway=request.gateway,
                                     model=request.model), options)
    except RenderError:
        return None
    generation = HEADS[prompt.tokenizer].generation
    assert prompt.text.endswith(generation)
    return prompt.text[:-len(generation)], prompt.tokenizer


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(frame=frames(), heads=st.integers(1, 4), data=st.data(),
       tokenizer=st.sampled_from(TOKENIZERS), transform=st.sampled_from(
           [None, "strip-billing-header", "sort-json-keys", "drop:cc_version=[0-9.]+"]))
@example(frame=("anthropic-messages", None, None, ["text", "text"]), heads=3,
         data=None, tokenizer=None, transform="sort-json-keys")
def test_each_head_is_its_whole_render_whatever_was_framed_before(
        frame: tuple[str, str | None, Any, Any], heads: int, data: Any,
        tokenizer: str | None, transform: str | None) -> None:
    """Heads of one frame (the same tools and shape of system, their texts drawn anew:
    a billing hash that changes, texts that print nothing, a lone surrogate, a text
    holding a hole), `head_text` of each in turn with the frames kept: each is the whole
    render of its head (the oracle), or None where `head_text` proves no head."""
    endpoint, gateway, tools, shape = frame
    options = RenderOptions(tokenizer=tokenizer, gateway=gateway or "auto",
                            what_if=(transform,) if transform else ())
    pipeline._HEAD_FRAMES.clear()
    for n in range(heads):
        if data is None:  # the example: two billing headers, the second block's text kept
            system: Any = [{"type": "text", "text": HEADER.format(f"{n:05d}")},
                           {"type": "text", "text": "Be kind."}]
        else:
            system = None
        history = [{"role": "user", "content": "hi"}]
        if endpoint == "anthropic-messages":
            if system is None:
                system = _anthropic_system(shape, data.draw)
            body: dict[str, Any] = {"system": system, "messages": history}
            if tools is not None:
                body["tools"] = tools
            model = "llm-prime" if gateway else "claude-sonnet-4-5"
        else:
            body = {"messages": [*_chat_lead(shape, data.draw), *history]}
            if tools is not None:
                body["tools"] = tools
            model = "claude-sonnet-4-5"
        request = make_request(body, endpoint=endpoint, gateway=gateway, model=model)
        try:
            got = pipeline.head_text(request, options)
        except RenderError:
            got = None
        if got is not None:
            assert got == _heads_rendered_whole(request, options)
        if data is None:
            assert got is not None and len(pipeline._HEAD_FRAMES) == 1  # one frame for all


def test_a_head_whose_frame_holds_a_hole_is_rendered_whole() -> None:
    """A tool whose description holds the frame's first hole: the hole is found twice in
    the frame's text, so the head is rendered whole (and its frame remembered as such);
    the same head with another description is filled in."""
    options = RenderOptions(what_if=("sort-json-keys",))

    def body(description: str, cch: str) -> dict[str, Any]:
        return {"system": [{"type": "text", "text": HEADER.format(cch)},
                           {"type": "text", "text": "Be kind."}],
                "tools": [{"name": "Edit", "description": description,
                           "input_schema": {"type": "object", "properties": {}}}],
                "messages": [{"role": "user", "content": "hi"}]}

    pipeline._HEAD_FRAMES.clear()
    for cch in ("00000", "00001"):
        odd = make_request(body(f"see {pipeline._hole(0)}", cch),
                           endpoint="anthropic-messages", model="claude-sonnet-4-5")
        got = pipeline.head_text(odd, options)
        assert got is not None and got == _heads_rendered_whole(odd, options)
        assert f"cch={cch}" in got[0]
    assert list(pipeline._HEAD_FRAMES.values()) == [pipeline._UNFRAMED]
    plain = make_request(body("edit a file", "00002"), endpoint="anthropic-messages",
                         model="claude-sonnet-4-5")
    filled = pipeline.head_text(plain, options)
    assert filled is not None and filled == _heads_rendered_whole(plain, options)
    assert len(pipeline._HEAD_FRAMES) == 2 and \
        list(pipeline._HEAD_FRAMES.values())[1] != pipeline._UNFRAMED
