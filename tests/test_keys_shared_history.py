"""`prefix_chain` and `compaction_marker` read only the new items of a history that starts
with the last one's objects (issue 37: an agent log's calls share their history). Whatever
the order of requests -- growing, shared, rebuilt, with ``cache_control`` and compaction
markers anywhere -- each answer equals the one read from scratch: the chained hashes of the
history stripped of ``cache_control`` (`hashing.chain_hashes`, the definition) and the
marker a fresh read finds."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.model import keys
from prefixscope.model.hashing import chain_hashes, strip_cache_control
from tests.factories import make_request

CODEX_SUMMARY = ("Another language model started to solve this problem and produced a "
                 "summary of its thinking process.")


def _item(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from(["plain", "cached", "summary", "compaction"]))
    text = draw(st.text(alphabet="ab", max_size=3))
    if kind == "plain":
        return {"role": "user", "content": text}
    if kind == "cached":
        return {"role": "user", "content": [{"type": "text", "text": text,
                                             "cache_control": {"type": "ephemeral"}}]}
    if kind == "summary":
        return {"role": "user", "content": CODEX_SUMMARY + text}
    return {"type": "compaction", "encrypted_content": text}


@st.composite
def histories(draw: Any) -> list[list[dict[str, Any]]]:
    """Histories in reading order: each grows the last (its objects shared), is a copy of
    it (equal, not the same objects), a prefix of it, or new."""
    out: list[list[dict[str, Any]]] = []
    last: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 12))):
        how = draw(st.sampled_from(["grow", "grow", "grow", "copy", "cut", "new"]))
        if how == "grow":
            last = [*last, *(_item(draw) for _ in range(draw(st.integers(0, 3))))]
        elif how == "copy":
            last = [dict(i) for i in last]
        elif how == "cut":
            last = last[:draw(st.integers(0, len(last)))]
        else:
            last = [_item(draw) for _ in range(draw(st.integers(0, 3)))]
        out.append(last)
    return out


def fresh_marker(history: list[dict[str, Any]]) -> str | None:
    return keys._marker(history)


@settings(max_examples=300, deadline=None)
@given(histories(), st.sampled_from(["openai-responses", "anthropic-messages"]))
def test_answers_equal_a_read_from_scratch(seq: list[list[dict[str, Any]]],
                                          endpoint: str) -> None:
    for n, history in enumerate(seq):
        body = ({"input": history} if endpoint == "openai-responses"
                else {"messages": history})
        request = make_request(f"r{n}", body=body, endpoint=endpoint)
        chain, count = keys.prefix_chain(request)
        assert chain == chain_hashes(strip_cache_control(history))
        assert count == len(history)
        assert keys.compaction_marker(request) == fresh_marker(history)


def test_a_chain_continued_from_a_parent_equals_the_whole_chain() -> None:
    items = [{"a": 1}, {"b": [2, 3]}, "c"]
    whole = chain_hashes(items)
    assert chain_hashes(items[1:], whole[0]) == whole[1:]


def test_a_shared_history_grown_by_a_marker_is_found() -> None:
    first = [{"role": "user", "content": "hi"}]
    grown = [*first, {"type": "compaction", "encrypted_content": "x"}]
    assert keys.compaction_marker(make_request("a", body={"input": first},
                                               endpoint="openai-responses")) is None
    assert keys.compaction_marker(make_request("b", body={"input": grown},
                                               endpoint="openai-responses")) == "codex"
