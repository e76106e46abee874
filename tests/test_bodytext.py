"""`model.bodytext.write_body` (a body serialized once, in the pieces the store keeps) gives
what the whole computation gives: the hash and UTF-8 size of the body's whole
`exact_json`, that text itself for a body with nothing to split, and for a split one the
skeleton (`exact_json` of the body with its split lists emptied), the layout (each
element's `exact_hash` of its `exact_json`) and those texts by hash; and it fails (TypeError)
exactly when serializing the whole body does, at orjson's depth limit wherever a piece can
meet it and on an integer beyond 64 bits. The oracle is the definition, computed with
`hashing.exact_json` / `exact_hash` on the whole body and on each element."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from factories import nested
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.ingest import checked
from prefixscope.model import Request, Usage
from prefixscope.model.bodytext import SPLIT_FIELDS, write_body
from prefixscope.model.hashing import MAX_JSON_DEPTH, exact_hash, exact_json, written


def whole_text(body: Any) -> bytes:
    return exact_json(body).encode()


def check(body: Any) -> None:
    """`write_body(body)` against the definition."""
    w = write_body(body)
    text = whole_text(body)
    assert w.hash == exact_hash(text)
    assert w.size == len(text)
    fields = [k for k in SPLIT_FIELDS if isinstance(body, dict) and isinstance(body.get(k), list)]
    if not fields:
        assert (w.whole, w.skeleton, w.layout, w.parts) == (text, None, None, None)
        return
    assert w.whole is None
    assert w.skeleton == exact_json({k: ([] if k in fields else v) for k, v in body.items()})
    # in `SPLIT_FIELDS` order, whatever the body's (the layout is stored as JSON)
    assert w.layout is not None and list(w.layout.items()) == [
        (k, [exact_hash(exact_json(e)) for e in body[k]]) for k in fields]
    assert w.parts is not None
    assert [(h, t.decode()) for h, t in w.parts.items()] == list({
        exact_hash(exact_json(e)): exact_json(e) for k in fields for e in body[k]}.items())


# JSON values: text beyond ASCII and what orjson escapes, floats, nulls, nested containers
TEXT = st.text(alphabet="ab\u00e9\U0001f600\n\"\\\x00/", max_size=4)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1),
                    st.floats(allow_nan=False, allow_infinity=False), TEXT)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)), max_leaves=12)
# keys: the split fields (often), others, in any order; a split field's value a list
# (split) or anything else (kept in the skeleton)
keys = st.one_of(st.sampled_from([*SPLIT_FIELDS, "model", "stream", "metadata"]), TEXT)
member = st.tuples(keys, st.one_of(st.lists(values, max_size=4), values))
bodies = st.lists(member, max_size=8).map(dict)


@settings(max_examples=400, deadline=None)
@given(body=bodies)
def test_a_body_written_in_pieces_is_its_whole_serialization(body):
    check(body)


@settings(max_examples=100, deadline=None)
@given(body=st.one_of(values, st.lists(values)))
def test_a_value_that_is_not_a_dict_is_written_whole(body):
    check(body)


@settings(max_examples=100, deadline=None)
@given(first=bodies, grown=st.lists(values, max_size=3), cut=st.integers(0, 4))
def test_elements_shared_with_the_last_body_give_the_same_pieces(first, grown, cut):
    """The second body reuses the first's objects (an agent log's next call): the pieces
    `write_body` takes from the body it wrote last are those of the definition."""
    check(first)
    second = {k: (v[:cut] + grown if isinstance(v, list) else v) for k, v in first.items()}
    check(second)
    check(first)


# How a body follows the one before it in an agent's log: each split list grown by new
# elements, cut, replaced, or kept (the very objects); other members kept or changed; the
# keys' order kept or reversed, a member added or dropped
step = st.tuples(st.lists(st.tuples(st.sampled_from(["grow", "cut", "new", "keep"]),
                                    st.lists(values, max_size=3), st.integers(0, 3),
                                    values), min_size=8, max_size=8),
                 st.booleans(), st.one_of(st.none(), member), st.integers(0, 7))


def follow(body: dict[Any, Any], how: Any) -> dict[Any, Any]:
    changes, reverse, added, dropped = how
    out: dict[Any, Any] = {}
    for (key, value), (kind, grown, cut, other) in zip(body.items(), changes, strict=False):
        if isinstance(value, list):
            value = {"grow": value + grown, "cut": value[:cut], "new": grown,
                     "keep": value}[kind]
        elif kind == "new":
            value = other
        out[key] = value
    items = list(out.items())
    if items and len(items) > dropped:
        del items[dropped]
    if reverse:
        items.reverse()
    if added is not None:
        items.insert(0, added)
    return dict(items)


@settings(max_examples=300, deadline=None)
@given(first=bodies, steps=st.lists(step, max_size=5))
def test_a_log_of_bodies_each_following_the_last_is_written_as_each_whole(first, steps):
    """Bodies that each take the last one's lists, these very objects, and grow or change
    them (`write_body` then hashes on from the state the last body's text had after the
    elements they share, when everything before them is the same text): each body's hash,
    size and pieces are those of its own whole serialization."""
    body = first
    check(body)
    for how in steps:
        body = follow(body, how)
        check(body)


def test_a_changed_member_before_the_shared_elements_is_hashed_again():
    """The history shared, the instructions before it changed: not the last body's hash."""
    history: list[Any] = [{"type": "message", "content": "a"}]
    check({"instructions": "one", "input": history})
    check({"instructions": "two", "input": [*history, "b"]})
    check({"instructions": "two", "input": [*history, "b"]})
    check({"tools": ["t"], "instructions": "two", "input": [*history, "b"]})
    check({"tools": ["t"], "input": history})
    check({"tools": [], "input": history})  # the list before it emptied: hashed again


def whole_fails(body: Any) -> bool:
    return bool(written(body)[1])


def places(value: Any) -> list[dict[str, Any]]:
    """`value` at each place in a body a piece of `write_body` can hold it."""
    return [
        {"model": "m", "messages": [value]},  # an element (after none)
        {"messages": ["a", value], "model": "m"},  # an element after another
        {"messages": [], "metadata": value},  # a member after a split field
        {"metadata": value, "system": [{"type": "text"}]},  # a member before one
        {"metadata": value},  # a body with nothing to split
        {"tools": [{"x": value}], "messages": [value]},  # in two fields
    ]


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH - 3, MAX_JSON_DEPTH - 2,
                                   MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH])
def test_pieces_fail_exactly_when_the_whole_body_does_at_the_depth_limit(depth):
    for body in places(nested(depth)):
        if whole_fails(body):
            with pytest.raises(TypeError):
                write_body(body)
        else:
            check(body)


def test_the_depth_limit_is_met_in_each_place():
    """The parametrized test sees both outcomes in every place (its depths straddle it)."""
    for place in range(len(places(1))):
        outcomes = {whole_fails(places(nested(d))[place])
                    for d in (MAX_JSON_DEPTH - 3, MAX_JSON_DEPTH)}
        assert outcomes == {False, True}


def test_an_integer_beyond_64_bits_fails_in_any_place():
    for body in places(2**64):
        assert whole_fails(body)
        with pytest.raises(TypeError):
            write_body(body)


def test_checked_gives_the_whole_bodys_reason_for_a_body_too_deep():
    body = {"model": "m", "messages": [nested(MAX_JSON_DEPTH - 1)]}
    request = Request(id="r", source_format="raw", source_file="f", source_line=1,
                      timestamp=None, endpoint="anthropic-messages", model="m",
                      body=body, usage=Usage())
    assert checked(request) == (written(body)[1], None)
    assert "levels deep" in checked(request)[0]


def test_a_non_serializable_value_is_written_as_its_str_as_exact_json_writes_it():
    class Odd:
        def __str__(self) -> str:
            return "odd \u00e9"

    check({"messages": [{"x": Odd()}], "metadata": Odd(), 3: "int key"})
    assert orjson.loads(write_body({"messages": [Odd()]}).skeleton or "") == {"messages": []}
