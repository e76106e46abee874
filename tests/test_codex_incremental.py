"""The Codex reader builds each call's input incrementally (issue 37: the 351 calls of a
2 MB rollout walked 125,000 items). The input of every call must equal the whole build --
`paired_outputs` of the items `current_turn_reasoning` keeps -- whatever the history: user
turns dropping earlier reasoning, calls answered late or never, outputs before their call,
compaction items, a compaction replacing the list."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.ingest.formats.codex import (
    _SentInput,
    current_turn_reasoning,
    paired_outputs,
)

CALL_IDS = ("a", "b", "c")


def whole(items: list[Any], end: int) -> list[Any]:
    kept = current_turn_reasoning(items[:end])
    return paired_outputs([items[i] for i in kept])


def _item(draw: Any) -> Any:
    kind = draw(st.sampled_from(["user", "context", "assistant", "reasoning", "call",
                                 "custom", "output", "custom_output", "compaction",
                                 "shell"]))
    cid = draw(st.sampled_from(CALL_IDS))
    text = draw(st.text(alphabet="xy", max_size=2))
    if kind == "user":
        return {"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": f"ask {text}"}]}
    if kind == "context":
        return {"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "<environment_context>"}]}
    if kind == "assistant":
        return {"type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": text}]}
    if kind == "reasoning":
        return {"type": "reasoning", "encrypted_content": text}
    if kind == "call":
        return {"type": "function_call", "name": "shell", "call_id": cid, "arguments": text}
    if kind == "custom":
        return {"type": "custom_tool_call", "name": "apply_patch", "call_id": cid,
                "input": text}
    if kind == "shell":
        return {"type": "local_shell_call", "call_id": cid}
    if kind == "output":
        return {"type": "function_call_output", "call_id": cid, "output": text}
    if kind == "custom_output":
        return {"type": "custom_tool_call_output", "call_id": cid, "output": text}
    return {"type": "compaction", "encrypted_content": text}


@st.composite
def histories(draw: Any) -> list[tuple[str, Any]]:
    """Steps: ("item", item) appends, ("call", k) sends items[:len - k] (k pending outputs
    left out), ("replace", n) replaces the history with its last n items (a compaction)."""
    steps: list[tuple[str, Any]] = []
    for _ in range(draw(st.integers(1, 40))):
        what = draw(st.sampled_from(["item"] * 6 + ["call"] * 3 + ["replace"]))
        if what == "item":
            steps.append(("item", _item(draw)))
        elif what == "call":
            steps.append(("call", draw(st.integers(0, 2))))
        else:
            steps.append(("replace", draw(st.integers(0, 3))))
    return steps


@settings(max_examples=400, deadline=None)
@given(histories())
def test_every_call_input_equals_the_whole_build(steps: list[tuple[str, Any]]) -> None:
    sent = _SentInput()
    items: list[Any] = []
    last_end = 0
    inputs: list[tuple[list[Any], list[Any]]] = []
    for what, value in steps:
        if what == "item":
            items.append(value)
        elif what == "replace":
            items = items[len(items) - value:] if value else []
            last_end = 0
        else:
            end = max(len(items) - value, last_end)  # a call never sends less than the last
            last_end = end
            got = sent.upto(items, end)
            want = whole(items, end)
            assert got == want
            assert sent.reasoning == {i for i in current_turn_reasoning(items[:end])
                                      if items[i].get("type") == "reasoning"}
            assert bool(sent.compactions) == any(i.get("type") == "compaction" for i in want)
            inputs.append((got, list(got)))
    for got, copy in inputs:  # a later call never changes an earlier call's input
        assert got == copy


def test_an_aborted_call_answered_later_is_no_longer_aborted() -> None:
    call = {"type": "function_call", "name": "shell", "call_id": "a", "arguments": ""}
    out = {"type": "function_call_output", "call_id": "a", "output": "ok"}
    user = {"type": "message", "role": "user", "content": [{"type": "input_text",
                                                             "text": "go"}]}
    sent = _SentInput()
    items: list[Any] = [user, call]
    first = sent.upto(items, 2)
    assert first == [user, call, {"type": "function_call_output", "call_id": "a",
                                  "output": "aborted"}]
    items.append(out)
    assert sent.upto(items, 3) == [user, call, out]
    assert first[2]["output"] == "aborted"


def test_a_new_user_turn_drops_the_reasoning_sent_before() -> None:
    user = {"type": "message", "role": "user", "content": [{"type": "input_text",
                                                             "text": "go"}]}
    reason = {"type": "reasoning", "encrypted_content": "r"}
    answer = {"type": "message", "role": "assistant", "content": [{"type": "output_text",
                                                                    "text": "a"}]}
    again = {"type": "message", "role": "user", "content": [{"type": "input_text",
                                                              "text": "more"}]}
    sent = _SentInput()
    items: list[Any] = [user, reason, answer]
    assert sent.upto(items, 3) == [user, reason, answer]
    assert sent.reasoning == {1}
    items += [again, reason]
    assert sent.upto(items, 5) == [user, answer, again, reason]
    assert sent.reasoning == {4}
