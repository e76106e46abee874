"""The census of a store's parts hashes a part's canonical and folded forms only where a
pair compares it with another content (`segments.PartHashes`, `Census._classify`): its
change kinds, and their order, must be those of the whole computation -- every segment
of every whole request hashed all three ways as it is met (`census` over
`iter_requests`), the oracle here -- on sessions whose turns change their segments in
every way a census tells apart."""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import orjson
from factories import SYSTEM, TOOLS, anthropic_body
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from prefixscope.analyses import segments
from prefixscope.analyses.segments import PartHashes, census, segments_store
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths

# How a turn's body is made from the one before it (besides the new user message).
EDITS = ("grow", "billing", "tool-keys", "whitespace", "value", "cut", "mark", "tool-gone")


def _retext(message: dict[str, Any], text: str) -> dict[str, Any]:
    """`message` with `text` as its content's text (a string or one text block)."""
    content = message["content"]
    if isinstance(content, list):
        return {**message, "content": [{**content[0], "text": text}]}
    return {**message, "content": text}


def _text(message: dict[str, Any]) -> str:
    content = message["content"]
    return content[0]["text"] if isinstance(content, list) else content


def _edit(body: dict[str, Any], edit: str, turn: int) -> dict[str, Any]:
    body = copy.deepcopy(body)
    messages = body["messages"]
    if edit == "billing":  # system[0]: a value change every turn
        body["system"][0]["text"] = f"x-anthropic-billing-header: cch={turn:05x};"
    elif edit == "tool-keys" and body["tools"]:  # tools[0]: its keys in another order
        body["tools"][0] = dict(reversed(list(body["tools"][0].items())))
    elif edit == "whitespace" and messages:  # an old message: whitespace only
        messages[0] = _retext(messages[0], "  " + _text(messages[0]) + "\n\n")
    elif edit == "value" and messages:  # an old message: another text
        messages[0] = _retext(messages[0], _text(messages[0]) + " (edited)")
    elif edit == "cut" and len(messages) > 2:  # the history cut from its end
        del messages[-2:]
    elif edit == "mark" and messages:  # a cache_control marker moved: no change
        messages[:] = [{**m, "content": _text(m)} for m in messages]
        last = messages[-1]
        last["content"] = [{"type": "text", "text": last["content"],
                            "cache_control": {"type": "ephemeral"}}]
    elif edit == "tool-gone" and body["tools"]:  # a segment deleted
        body["tools"] = body["tools"][1:]
    messages.append({"role": "assistant", "content": f"answer {turn}"})
    messages.append({"role": "user", "content": f"question {turn}"})
    return body


def _line(session: str, turn: int, seconds: int, body: dict[str, Any]) -> bytes:
    return orjson.dumps({
        "timestamp": f"2026-09-01T09:{seconds // 60:02d}:{seconds % 60:02d}.000Z",
        "url": "https://api.anthropic.com/v1/messages",
        "headers": {"anthropic-version": "2023-06-01", "x-claude-code-session-id": session},
        "request": body,
        "response": {"id": f"msg_{session}_{turn}", "type": "message", "role": "assistant",
                     "model": "claude-sonnet-4-5", "content": [{"type": "text", "text": "ok"}],
                     "stop_reason": "end_turn",
                     "usage": {"input_tokens": 100, "cache_read_input_tokens": 0,
                               "cache_creation_input_tokens": 0, "output_tokens": 2}}})


sessions_st = st.lists(st.lists(st.sampled_from(EDITS), min_size=1, max_size=6),
                       min_size=1, max_size=3)


def _store_of(folder: Path, sessions: list[list[str]]) -> Path:
    lines = []
    for s, edits in enumerate(sessions):
        body = anthropic_body([{"role": "user", "content": f"task {s}\n  in  two lines"}],
                              system=SYSTEM, tools=copy.deepcopy(TOOLS))
        lines.append((s, 0, body))
        for turn, edit in enumerate(edits, start=1):
            body = _edit(body, edit, turn)
            lines.append((s, turn, body))
    # the sessions interleaved in time, as a gateway logs them
    lines.sort(key=lambda x: (x[1], x[0]))
    log = folder / "capture.jsonl"
    log.write_bytes(b"\n".join(_line(f"s{s}", turn, i, body)
                               for i, (s, turn, body) in enumerate(lines)) + b"\n")
    path = folder / "s.duckdb"
    store = Store.open(path)
    ingest_paths([str(log)], store)
    store.close()
    return path


def _whole(store: Store) -> list[segments.SegmentsReport]:
    pairs = [(a, b) for a, b, _, _ in store.session_pairs(once=True)]
    return [census([r for r in store.iter_requests() if r.body is not None], pairs)]


def _kinds(reports: list[segments.SegmentsReport]) -> dict[str, list[tuple[str, int]]]:
    """Each changed segment's change kinds in their order (a report's JSON keeps it)."""
    return {s.segment: list(s.change_kinds.items()) for r in reports for s in r.segments
            if s.change_kinds}


def _kinds_of_pairs(store: Store) -> dict[str, list[tuple[str, int]]]:
    """The oracle of `_kinds`, pair by pair: each consecutive pair in the order its later
    request comes, each segment of both whole requests hashed all three ways
    (`segment_hashes`, `change_kind`), history appended or cut at the end not counted
    (the census's rule, module `segments`)."""
    requests = {r.id: r for r in store.iter_requests() if r.body is not None}
    place = {rid: i for i, rid in enumerate(requests)}
    pairs = sorted(((a, b) for a, b, _, _ in store.session_pairs(once=True)),
                   key=lambda p: place[p[1]])
    kinds: dict[str, dict[str, int]] = {}
    for a, b in pairs:
        sides = [{seg.path: seg for seg in segments.raw_segments(requests[rid])}
                 for rid in (a, b)]
        lengths = [{fam: sum(seg.family == fam for seg in side.values())
                    for fam in ("messages", "input")} for side in sides]
        for path in sides[0].keys() | sides[1].keys():
            seg = sides[0].get(path) or sides[1][path]
            missing = [i for i in (0, 1) if path not in sides[i]]
            if missing and seg.family in ("messages", "input") and \
                    seg.index >= lengths[missing[0]][seg.family]:
                continue  # growth, or a cut at the end
            ha, hb = (segments.segment_hashes(side[path].value) if path in side else None
                      for side in sides)
            kind = segments.change_kind(ha, hb)
            if kind:
                counts = kinds.setdefault(path, {})
                counts[kind] = counts.get(kind, 0) + 1
    return {path: list(counts.items()) for path, counts in kinds.items()}


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sessions_st)
@example([["whitespace", "value", "billing", "tool-keys", "cut", "mark", "tool-gone", "grow"]])
@example([["value", "billing"], ["whitespace", "mark", "value"]])  # (two ways, two orders)
def test_stored_census_is_the_whole_census_kinds_in_order(sessions):
    with tempfile.TemporaryDirectory() as folder:
        path = _store_of(Path(folder), sessions)
        with Store.open(path, read_only=True) as store:
            segments._DERIVED.clear()  # (no derived hash from an earlier example)
            got = segments_store(store, (), with_tokens=False)
            want = _whole(store)
            kinds = _kinds_of_pairs(store)
    assert got == want
    assert _kinds(got) == kinds


def test_parts_compared_alone_are_hashed_whole(monkeypatch):
    """A part's canonical and folded hashes are made only for the parts a pair compares
    with another exact content: here the billing blocks (system[0]) and the reordered
    tool, never the unchanged history."""
    made: list[str] = []
    real = segments.segment_hashes

    def counted(value):
        made.append(orjson.dumps(value).decode())
        return real(value)

    monkeypatch.setattr(segments, "segment_hashes", counted)
    with tempfile.TemporaryDirectory() as folder:
        path = _store_of(Path(folder), [["billing", "tool-keys", "billing"]])
        with Store.open(path, read_only=True) as store:
            parts = segments.PartCensus(store)
            for _ in segments._censused(store, parts, False):
                pass
            assert all(isinstance(h, PartHashes) for h, _ in parts.known.values())
            assert made == []  # reading the parts hashed them exactly, nothing more
            segments._DERIVED.clear()
            (report,) = segments_store(store, (), with_tokens=False)
    by_path = {s.segment: s for s in report.segments}
    # 4 turns: system[0] another billing block in turns 1 and 3, tools[0] reordered in 2
    assert by_path["system[0]"].change_kinds == {"value": 2}
    assert by_path["tools[0]"].change_kinds == {"key-order": 1}
    # hashed whole: the 3 billing blocks, the 2 orders of tools[0]; no message, no system[1]
    assert len(made) == 3 + 2
    assert not any('"role"' in m for m in made)


def test_same_census_with_one_part_read_back_at_a_time(monkeypatch):
    """`Census._classify` reads the compared parts back in batches: one at a time, the
    same census."""
    with tempfile.TemporaryDirectory() as folder:
        path = _store_of(Path(folder), [["billing", "whitespace", "value", "tool-keys"],
                                        ["tool-gone", "billing"]])
        with Store.open(path, read_only=True) as store:
            want = segments_store(store, (), with_tokens=False)
            monkeypatch.setattr(segments, "_CLASSIFY_BATCH", 1)
            segments._DERIVED.clear()
            got = segments_store(store, (), with_tokens=False)
    assert got == want
    assert _kinds(got) == _kinds(want) and len(_kinds(got)) == 4
