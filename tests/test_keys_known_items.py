"""`prefix_chain` and `compaction_marker` given the history's part hashes (as `Store.add`
gives them, from `store.parts.split_body`'s layout) look up what they found of an item seen
before instead of reading it again (issue 37: a capture's lines are parsed afresh, so the
next call of a conversation holds equal items, not the same objects). Whatever the order of
requests -- grown, copied, cut, new, interleaved conversations, ``cache_control`` and
compaction markers anywhere, leading system messages, a memo that forgets -- each answer
equals the one read from scratch: the chained hashes of the history stripped of
``cache_control`` (`hashing.chain_hashes`, the definition) and `_marker` of the whole
history."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.model import keys
from prefixscope.model.hashing import chain_hashes, strip_cache_control
from prefixscope.store.parts import split_body
from tests.factories import make_request

CODEX_SUMMARY = ("Another language model started to solve this problem and produced a "
                 "summary of its thinking process.")
CLAUDE_SUMMARY = "This session is being continued from a previous conversation"


def _item(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from(["plain", "plain", "cached", "summary", "claude", "compaction",
                                 "system"]))
    text = draw(st.text(alphabet="ab", max_size=2))
    if kind == "plain":
        return {"role": draw(st.sampled_from(["user", "assistant"])), "content": text}
    if kind == "cached":  # equal to a plain item once stripped, not by its exact JSON
        return {"role": "user", "content": [{"type": "text", "text": text,
                                             "cache_control": {"type": "ephemeral"}}]}
    if kind == "summary":
        return {"role": "user", "content": CODEX_SUMMARY + text}
    if kind == "claude":
        return {"role": "user", "content": [{"type": "text", "text": CLAUDE_SUMMARY + text}]}
    if kind == "system":  # leading ones are the system part of an OpenAI Chat body
        return {"role": "system", "content": text}
    return {"type": "compaction", "encrypted_content": text}


@st.composite
def conversations(draw: Any) -> list[list[dict[str, Any]]]:
    """Lists of items in reading order, two conversations interleaved: each grows its
    last list (as a capture's next line: equal items, parsed afresh, or the same objects,
    as an agent log gives them), is a copy of it, a prefix of it, or new."""
    out: list[list[dict[str, Any]]] = []
    last: list[list[dict[str, Any]]] = [[], []]
    for _ in range(draw(st.integers(1, 14))):
        which = draw(st.integers(0, 1))
        items = last[which]
        how = draw(st.sampled_from(["grow", "grow", "grow", "shared", "copy", "cut", "new"]))
        if how in ("grow", "shared"):
            items = [*items, *(_item(draw) for _ in range(draw(st.integers(0, 3))))]
            if how == "grow":
                items = orjson.loads(orjson.dumps(items))
        elif how == "copy":
            items = orjson.loads(orjson.dumps(items))
        elif how == "cut":
            items = items[:draw(st.integers(0, len(items)))]
        else:
            items = [_item(draw) for _ in range(draw(st.integers(0, 3)))]
        last[which] = items
        out.append(items)
    return out


def _body(items: list[dict[str, Any]], endpoint: str, system_key: bool) -> dict[str, Any]:
    if endpoint == "openai-responses":
        return {"model": "m", "input": items}
    body: dict[str, Any] = {"model": "m", "messages": items}
    if system_key:
        body["system"] = "s"
    return body


def _check(seq: list[list[dict[str, Any]]], endpoint: str, system_key: bool) -> None:
    for n, items in enumerate(seq):
        body = _body(items, endpoint, system_key)
        split = split_body(body)
        assert split is not None
        hashes = keys.history_hashes(endpoint, body, split[1])
        assert hashes is not None
        request = make_request(f"r{n}", body=body, endpoint=endpoint)
        _, _, history = keys.split_body(endpoint, body)  # the oracle's own history
        assert len(hashes) == len(history)
        chain, count = keys.prefix_chain(request, hashes)
        assert chain == chain_hashes(strip_cache_control(history))
        assert count == len(history)
        assert keys.compaction_marker(request, hashes) == keys._marker(history)


@settings(max_examples=400, deadline=None)
@given(conversations(), st.sampled_from(["openai-responses", "anthropic-messages",
                                          "openai-chat"]), st.booleans())
def test_answers_with_part_hashes_equal_a_read_from_scratch(
        seq: list[list[dict[str, Any]]], endpoint: str, system_key: bool) -> None:
    _check(seq, endpoint, system_key)


@settings(max_examples=200, deadline=None)
@given(conversations(), st.sampled_from(["openai-responses", "openai-chat"]))
def test_answers_equal_a_read_from_scratch_when_the_memo_forgets(
        seq: list[list[dict[str, Any]]], endpoint: str) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(keys, "KNOWN_LIMIT", 2)
        _check(seq, endpoint, False)


def test_the_hashes_of_an_openai_chat_history_leave_out_its_leading_system_messages() -> None:
    body = {"messages": [{"role": "system", "content": "s"},
                         {"role": "developer", "content": "d"},
                         {"role": "user", "content": "u"}]}
    split = split_body(body)
    assert split is not None
    layout = split[1]
    assert keys.history_hashes("openai-chat", body, layout) == layout["messages"][2:]
    # with a "system" key (or as Anthropic's) the messages are the whole history
    assert keys.history_hashes("anthropic-messages", body, layout) == layout["messages"]


def test_a_history_that_is_no_list_of_the_body_has_no_hashes() -> None:
    body = {"input": "one string", "instructions": "i"}
    assert keys.history_hashes("openai-responses", body, {"tools": []}) is None
    assert keys.history_hashes("openai-chat", {"messages": []}, None) is None


def test_an_item_seen_under_another_parent_is_linked_to_that_parent() -> None:
    """The same item after a different history gets a different link: the lookup is by
    (parent link, item), not by item alone."""
    a, b, c = ({"role": "user", "content": t} for t in "abc")
    for items in ([a, c], [b, c], [a, c]):
        body = {"messages": orjson.loads(orjson.dumps(items))}
        split = split_body(body)
        assert split is not None
        hashes = keys.history_hashes("anthropic-messages", body, split[1])
        chain, _ = keys.prefix_chain(make_request("r", body=body), hashes)
        assert chain == chain_hashes(items)
