"""`store.parts.split_body` serializes only the new elements of a list that starts with the
objects of the list it split last (issue 37: an agent log's calls share their history).
Whatever the order of bodies -- growing, shared, copied, cut, new, several split fields --
its answer equals the definition read from scratch: the skeleton is the body's
`exact_json` with each split list emptied, the layout each element's `exact_hash` of its
`exact_json`, the parts those texts by hash."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.model.hashing import exact_hash, exact_json
from prefixscope.store.parts import split_body


def definition(body: dict[str, Any]) -> tuple[str, dict[str, list[str]], dict[str, str]]:
    fields = [k for k in ("system", "tools", "messages", "input")
              if isinstance(body.get(k), list)]
    skeleton = {k: ([] if k in fields else v) for k, v in body.items()}
    layout = {k: [exact_hash(exact_json(e)) for e in body[k]] for k in fields}
    parts = {exact_hash(exact_json(e)): exact_json(e) for k in fields for e in body[k]}
    return exact_json(skeleton), layout, parts


# text beyond ASCII too: a part's hash is of its UTF-8 bytes
TEXT = "ab\u00e9\U0001f600\n\""
element = st.one_of(st.text(alphabet=TEXT, max_size=2),
                    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]),
                                           "content": st.text(alphabet=TEXT, max_size=2)}))


@st.composite
def bodies(draw: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    lists: dict[str, list[Any]] = {"input": [], "tools": []}
    for _ in range(draw(st.integers(1, 10))):
        for name in lists:
            how = draw(st.sampled_from(["grow", "grow", "same", "copy", "cut", "new"]))
            last = lists[name]
            if how == "grow":
                last = [*last, *draw(st.lists(element, max_size=3))]
            elif how == "copy":
                last = [dict(e) if isinstance(e, dict) else e for e in last]
            elif how == "cut":
                last = last[:draw(st.integers(0, len(last)))]
            elif how == "new":
                last = draw(st.lists(element, max_size=3))
            lists[name] = last
        body: dict[str, Any] = {"model": "m", "input": lists["input"]}
        if draw(st.booleans()):
            body["tools"] = lists["tools"]
        out.append(body)
    return out


@settings(max_examples=300, deadline=None)
@given(bodies())
def test_every_split_equals_the_definition(seq: list[dict[str, Any]]) -> None:
    for body in seq:
        skeleton, layout, parts = split_body(body)  # type: ignore[misc]
        want = definition(body)
        assert (skeleton, layout, parts) == want
        assert list(parts) == list(want[2])  # the parts in the order the body holds them
