"""The JSON-lines reader's depth test for raw captures writes the record's request body as
the store keeps it (`readers.json._written_record`, `bodytext.keep`) and ingest takes that
text: the test's answer is `unwritable(record)`'s (the oracle: the whole record written)
for a bare body, a body one level down, a record without one and what is not an object,
at orjson's depth limit wherever a piece meets it; and the body ingest then gets is what
`write_body` gives that body afresh (the definition: `exact_json` / `exact_hash`)."""

from __future__ import annotations

from typing import Any

import pytest
from factories import nested
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.ingest.readers.json import _written_record
from prefixscope.model import bodytext
from prefixscope.model.bodytext import write_body
from prefixscope.model.hashing import MAX_JSON_DEPTH, exact_hash, exact_json, unwritable

TEXT = st.text(alphabet="ab\u00e9\n\"\\", max_size=3)
values = st.recursive(st.one_of(st.none(), st.integers(-9, 9), TEXT), lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)), max_leaves=10)
bodies = st.fixed_dictionaries({"model": TEXT, "messages": st.lists(values, max_size=4)},
                               optional={"system": values, "tools": st.lists(values, max_size=2),
                                         "stream": st.booleans()})
records = st.one_of(
    bodies,  # a bare body
    st.fixed_dictionaries({"request": bodies}, optional={"response": values, "url": TEXT,
                                                         "headers": values}),
    st.dictionaries(TEXT, values, max_size=3),  # no body in it
    values,
)


def body_of(record: Any) -> Any:
    if isinstance(record, dict) and isinstance(record.get("messages"), list):
        return record
    if isinstance(record, dict) and isinstance(record.get("request"), dict):
        return record["request"]
    return None


def taken_is_the_definition(body: Any) -> None:
    """What ingest's `write_body(body)` takes now equals `write_body` of an equal copy
    written afresh, and the whole text's hash is `exact_hash(exact_json(body))`."""
    taken = write_body(body)
    fresh = write_body(_copy(body))
    assert taken == fresh
    assert taken.hash == exact_hash(exact_json(body))


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


@settings(max_examples=300, deadline=None)
@given(record=records)
def test_the_test_is_the_whole_records_and_the_body_taken_is_written_afresh(record):
    assert _written_record(record) == unwritable(record)
    body = body_of(record)
    if body is not None:
        taken_is_the_definition(body)


def places(value: Any) -> list[dict[str, Any]]:
    """`value` at each place of a record a piece of the test can hold it."""
    return [
        {"model": "m", "messages": [value]},  # an element of a bare body
        {"model": value, "messages": []},  # a member of a bare body
        {"request": {"model": "m", "messages": ["a", value]}},  # an element one level down
        {"request": {"messages": [], "metadata": value}},  # a member one level down
        {"request": {"messages": []}, "response": value},  # beside the body
        {"response": value},  # a record without a body
    ]


@pytest.mark.parametrize("depth", range(MAX_JSON_DEPTH - 4, MAX_JSON_DEPTH + 1))
def test_the_test_fails_exactly_where_the_whole_record_does_at_the_depth_limit(depth):
    for record in places(nested(depth)):
        assert _written_record(record) == unwritable(record)


def test_the_depth_limit_is_met_in_each_place():
    """The parametrized test sees both outcomes in every place (its depths straddle it)."""
    for place in range(len(places(1))):
        assert {bool(unwritable(places(nested(d))[place]))
                for d in (MAX_JSON_DEPTH - 4, MAX_JSON_DEPTH)} == {False, True}


def test_elements_written_shallower_are_tested_again_one_level_down():
    """An element `write_body` wrote last at the body's own depth passes that test; one
    level down in a record it may not: it is not taken from the last body then."""
    element = nested(MAX_JSON_DEPTH - 2)  # fits a body ({"messages": [element]}), not deeper
    body = {"messages": [element]}
    assert not unwritable(body)
    write_body(body)  # remembered as the last body's elements, tested at depth 0
    record = {"request": {"messages": [element, "more"]}}  # the same element object
    assert unwritable(record)
    assert _written_record(record) == unwritable(record)


def test_a_kept_body_is_taken_only_for_that_very_object():
    record = {"request": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}}
    assert _written_record(record) == ""
    kept = write_body(record["request"])
    assert kept is bodytext._KEPT.body[1]
    equal = _copy(record["request"])
    assert write_body(equal) is not kept and write_body(equal) == kept
