"""A what-if entry read off its base entry (`simulate.prepare._WhatIf`, issue 37): where a
turn's predecessor kept its base prompt, or swapped its head to the same new head, the turn's
what-if entry is taken from its base entry without building either whole prompt
(`_kept_entry`, `_swapped_entry`). Each entry must be the one `prepare` makes rendering
every request under the what-if (the oracle: the whole pipeline, no reuse), on sessions
whose billing header, tool key order and history change the ways agent logs do."""

from __future__ import annotations

import importlib
import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
from factories import assert_same_entries
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from prefixscope.analyses.simulate import SimulateOptions, prepare
from prefixscope.analyses.simulate.prepare import prepare_what_ifs
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths

PREPARE = importlib.import_module("prefixscope.analyses.simulate.prepare")
TRANSFORMS = ("sort-json-keys", "strip-billing-header")
RULES = ("You are an agent that edits code in a repository. Read files before you change "
         "them, run the tests after, and say what you did in one line.\n") * 6


def _tool(name: str, flipped: bool) -> dict[str, Any]:
    properties = {f"{name.lower()}_path": {"type": "string", "description": f"the file to {name}"},
                  f"{name.lower()}_what": {"type": "integer", "description": f"how to {name}"}}
    if flipped:  # the same schema, its keys in another order
        properties = dict(reversed(properties.items()))
    return {"name": name, "description": f"{name} a file",
            "input_schema": {"type": "object", "properties": properties,
                             "required": [f"{name.lower()}_path"]}}


@st.composite
def _sessions(draw: Any) -> list[list[dict[str, Any]]]:
    """Sessions of Anthropic bodies, each turn's messages its predecessor's plus new ones:
    a billing header whose hash changes every turn or none, tool schemas whose key order
    changes or not, and now and then an earlier message rewritten (the prompt diverges
    inside its history) or the history cut short."""
    sessions = []
    for s in range(draw(st.integers(1, 3))):
        billing = draw(st.booleans())
        reorders = draw(st.booleans())
        messages: list[dict[str, Any]] = []
        turns = []
        for t in range(draw(st.integers(2, 6))):
            step = draw(st.sampled_from(["append", "append", "append", "rewrite", "cut"]))
            if step == "rewrite" and len(messages) > 2:
                at = draw(st.integers(0, len(messages) - 2))
                messages[at] = {**messages[at], "content": f"rewritten {s}.{t}"}
            elif step == "cut" and len(messages) > 4:
                messages = messages[:2]
            said = draw(st.text("abcdefgh ", min_size=1, max_size=30))
            if messages:
                messages.append({"role": "assistant", "content": f"done {s}.{t}: {said}"})
            messages.append({"role": "user", "content": f"step {s}.{t}: {said}"})
            system = [{"type": "text", "text": RULES, "cache_control": {"type": "ephemeral"}}]
            if billing:
                system.insert(0, {"type": "text", "text": (
                    "x-anthropic-billing-header: cc_version=2.0.14; cc_entrypoint=cli; "
                    f"cch={draw(st.sampled_from(['a1b2c', 'f00d5', '9e9e1', '0cafe']))};")})
            flipped = reorders and draw(st.booleans())
            turns.append({"model": "claude-sonnet-4-5-20250929", "max_tokens": 1000,
                          "system": system,
                          "tools": [_tool("Write", flipped), _tool("Read", False)],
                          "messages": [dict(m) for m in messages]})
        sessions.append(turns)
    return sessions


def _store(sessions: list[list[dict[str, Any]]], folder: Path) -> Store:
    lines = []
    for s, turns in enumerate(sessions):
        for t, body in enumerate(turns):
            lines.append(json.dumps({
                "timestamp": f"2026-09-01T09:{s:02d}:{t:02d}.000Z",
                "url": "https://api.anthropic.com/v1/messages",
                "headers": {"content-type": "application/json",
                            "x-claude-code-session-id": f"session-{s}"},
                "request": body,
                "response": {"id": f"msg_{s}_{t}", "type": "message", "role": "assistant",
                             "content": [{"type": "text", "text": "ok"}],
                             "usage": {"input_tokens": 10, "output_tokens": 1,
                                       "cache_read_input_tokens": 0,
                                       "cache_creation_input_tokens": 0}}}))
    log = folder / "capture.jsonl"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    store = Store.open(folder / "s.duckdb")
    ingest_paths([str(log)], store)
    return store


def _what_ifs_read_off(sessions: list[list[dict[str, Any]]]) -> Counter[str]:
    """Check every what-if input against `prepare` under the what-if; count the entries
    read off their base entries (kept / swapped) and those made from whole ids."""
    counts: Counter[str] = Counter()
    extended, reused = PREPARE.Preparer.extended, PREPARE.Preparer.reused

    def counted_extended(self: Any, request: Any, entry: Any, compact: Any, head: Any,
                         whole: Any = None) -> None:
        counts["kept" if whole is not None else "swapped"] += 1
        extended(self, request, entry, compact, head, whole)

    def counted_reused(self: Any, *args: Any) -> None:
        counts["whole"] += 1
        reused(self, *args)

    with tempfile.TemporaryDirectory() as folder:
        store = _store(sessions, Path(folder))
        options = SimulateOptions(engine="vllm")
        base, _ = prepare(store, options)
        with mock.patch.object(PREPARE.Preparer, "extended", counted_extended), \
                mock.patch.object(PREPARE.Preparer, "reused", counted_reused):
            made = prepare_what_ifs(store, options, base, TRANSFORMS)
        for transform, entries in zip(TRANSFORMS, made, strict=True):
            assert_same_entries(entries, prepare(store, options.with_what_if(transform))[0])
        store.close()
    return counts


# Two sessions of four appended turns: one whose billing hash changes every turn (its
# base prompts diverge in the head, `resumed` runs), one whose tool keys flip (diverge in
# the tools); both what-ifs swap every head, the billing one's new heads equal under
# strip-billing-header, the flipped one's under sort-json-keys
_EXAMPLE = [[{"model": "claude-sonnet-4-5-20250929", "max_tokens": 1000,
              "system": [{"type": "text", "text": "x-anthropic-billing-header: "
                          f"cc_version=2.0.14; cc_entrypoint=cli; cch={cch};"},
                         {"type": "text", "text": RULES}],
              "tools": [_tool("Write", False), _tool("Read", False)],
              "messages": [{"role": "user" if i % 2 == 0 else "assistant",
                            "content": f"message {i}"} for i in range(2 * t + 1)]}
             for t, cch in enumerate(["a1b2c", "f00d5", "9e9e1", "0cafe"])],
            [{"model": "claude-sonnet-4-5-20250929", "max_tokens": 1000,
              "system": [{"type": "text", "text": RULES}],
              "tools": [_tool("Write", t % 2 == 1), _tool("Read", False)],
              "messages": [{"role": "user" if i % 2 == 0 else "assistant",
                            "content": f"message {i}"} for i in range(2 * t + 1)]}
             for t in range(4)]]


def test_every_way_a_what_if_entry_is_read_off_its_base_is_taken_on_appended_turns() -> None:
    """On the example the shortcuts are what makes the entries: after each session's
    first turn every what-if entry is read off its base entry."""
    counts = _what_ifs_read_off(_EXAMPLE)
    # sort-json-keys: the flipped session's 3 later turns swapped to one sorted head (the
    # billing session's heads differ: whole); strip-billing-header: the billing session's
    # 3 swapped to one stripped head, the other session's 3 kept
    assert counts == Counter({"whole": 2 + 3 + 2, "swapped": 3 + 3, "kept": 3})


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sessions=_sessions())
@example(sessions=_EXAMPLE)
def test_a_what_if_entry_read_off_its_base_entry_is_the_whole_renders(
        sessions: list[list[dict[str, Any]]]) -> None:
    _what_ifs_read_off(sessions)


# -- the shortcut's arithmetic against `_compact` itself, on token arrays -----------------

def _array(values: list[int]) -> np.ndarray:
    return np.asarray(values, dtype=np.int32)


@st.composite
def _prompt_pairs(draw: Any) -> tuple[list[int], int, list[int], int]:
    """(P, p, B, h): a predecessor's base ids P whose first p spell its head, and the
    request's B whose first h spell its own: the head edited (a hash of another length),
    the history after it appended to, rewritten or cut, over an alphabet small enough,
    or a history periodic enough, that `_compact` finds runs at other offsets too."""
    top = draw(st.sampled_from([2, 7, 5000]))
    tokens = st.integers(0, top)
    head = draw(st.lists(tokens, max_size=90))
    if draw(st.booleans()):
        period = draw(st.lists(tokens, min_size=1, max_size=9))
        history = (period * 400)[: draw(st.integers(0, 400))]
    else:
        history = draw(st.lists(tokens, max_size=400))
    at = draw(st.integers(0, len(head)))
    new_head = head[:at] + draw(st.lists(tokens, max_size=6)) + head[
        at + draw(st.integers(0, 6)):]
    later = list(history)
    step = draw(st.sampled_from(["append", "rewrite", "cut", "same"]))
    if step == "rewrite" and later:
        i = draw(st.integers(0, len(later) - 1))
        later[i: i + 3] = draw(st.lists(tokens, max_size=5))
    elif step == "cut":
        later = later[: draw(st.integers(0, len(later)))]
    later += draw(st.lists(tokens, max_size=80)) if step != "same" else []
    return head + history, len(head), new_head + later, len(new_head)


@settings(max_examples=400, deadline=None)
@given(pair=_prompt_pairs(), n=st.integers(0, 40))
@example(pair=(list(range(300)), 100, [7, *range(1, 300), *range(1000, 1040)], 100), n=30)
def test_a_swapped_entry_is_the_compaction_of_the_two_swapped_prompts(
        pair: tuple[list[int], int, list[int], int], n: int) -> None:
    """Where `_swapped_entry` answers, the entry the caller makes of it -- the
    predecessor's whole what-if prompt shared, no run, those ids -- is `_compact` of the
    two what-if prompts N + P[p:] and N + B[h:] (the oracle: the compaction itself, on
    the arrays built whole); on the example (a hash token changed, turns appended) it
    answers."""
    from prefixscope.analyses.simulate.model import _Prepared

    before_ids, p, ids, h = pair
    shared, resumed, own = PREPARE._compact(_array(before_ids), _array(ids))
    mine = _Prepared("b", None, "a", False, None, None, own, None, None, 0, 0,
                     base="a", shared=shared, resumed=resumed, head=h)
    new_head = list(range(9000, 9000 + n))
    tail = PREPARE._swapped_entry(mine, h, PREPARE._Swap(("N", "t"), n, p, len(before_ids)))
    if pair[0] == list(range(300)):
        assert tail is not None
    if tail is None:
        return
    want = PREPARE._compact(_array(new_head + before_ids[p:]), _array(new_head + ids[h:]))
    assert (want[0], want[1], want[2].tolist()) == (n + len(before_ids) - p, None,
                                                   tail.tolist())
