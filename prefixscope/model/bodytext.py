"""A request body serialized once, in the pieces the store keeps: ingest's one pass.

The store keeps a body as a skeleton (its `exact_json` with each list-valued
`SPLIT_FIELDS` entry emptied), a layout (each emptied list's element hashes) and parts
(each element's `exact_json` under its `exact_hash`: `store.parts`), under the hash of the
body's whole `exact_json` text. Ingest used to serialize a body whole (its serialize test,
its hash, its batch's size) and the store then serialized every element again to split it:
a captured request is parsed afresh, so each of its hundreds of KB was written twice
(0.5 s + 0.85 s of CPU per GiB of raw captures, docs/scale.md "Ingest CPU on the capture
shapes"). `write_body` serializes each piece once and gets everything from the pieces:

* the whole text is ``{`` + the top-level members in order, ``,``-joined, + ``}``, and a
  split member's value is ``[`` + its elements' texts ``,``-joined + ``]``: that is how
  orjson writes a dict and a list (compact, no spaces, key order kept), so its hash is
  the hash of that stream of pieces (xxh3 streamed: the same digest as the whole text's)
  and its size their sum; the whole text itself is never made;
* the members between two split fields are written as one dict and its braces left out;
* an agent's next call resends the last call's lists (these very objects, `_shares`):
  their elements' texts are taken from it, and when everything before a shared run of
  elements is the same text as in the last body (`write_body`'s marks), so is the hash
  state after them: the whole hash goes on from the last body's, and a call hashes its
  new elements only, not its whole history again;
* a body orjson cannot write (nested deeper than `MAX_JSON_DEPTH`, an integer beyond 64
  bits) fails in a piece, and one that it can write in none: every value is in one piece,
  and each piece is written at the depth it has in the body (a member's value one level
  down, as in a dict; an element two levels down: it is written inside ``[[ ]]`` and the
  two brackets each side cut off). The caller asks `hashing.written` of the whole body
  for the reason;
* a body read inside a record (a raw capture's ``request``) is written at its depth there
  (`write_body`'s `depth`), so that the reader's depth test of the record is this writing
  (`readers.json`), and held (`keep`) for ingest's `write_body` of that very object.

tests/test_bodytext.py and tests/test_record_body_written.py hold all of this against the
whole computation (Hypothesis bodies and records, the depth limit at each place a piece
can hit it).
"""

from __future__ import annotations

import itertools
import operator
import threading
from dataclasses import dataclass, field
from typing import Any

import orjson
import xxhash

from prefixscope.model.hashing import HASH_VERSION

# Top-level body fields whose list elements are stored as parts (history, tools, system
# blocks: what grows and repeats from turn to turn).
SPLIT_FIELDS = ("system", "tools", "messages", "input")

_OPTIONS = orjson.OPT_NON_STR_KEYS  # `hashing.exact_json`'s, with default=str


@dataclass(frozen=True, slots=True)
class WrittenBody:
    """A body as `exact_json` writes it: the whole text's `exact_hash` and UTF-8 size,
    and what the store keeps of it. Split (`layout` not None): the skeleton's text, the
    layout (field -> its elements' part hashes, in order) and part hash -> element text
    (UTF-8); else the whole text."""

    hash: str
    size: int
    whole: bytes | None  # the whole text, for a body with no list to split
    skeleton: str | None = None
    layout: dict[str, list[str]] | None = None
    parts: dict[str, bytes] | None = None
    # What a batch of bodies holds (`store.load`): `serial` numbers the bodies written in
    # a thread; a body that shares a split field's elements with the body written before
    # it (`_shares`: those very objects, and their texts) names that body (`shares`) and
    # how many of its bytes are not in the shared elements (`fresh`): an agent's call holds
    # only its new elements beside the calls before it, not its whole history again.
    # How the body was written, not what it is: left out of equality.
    serial: int = field(default=0, compare=False)
    shares: int | None = field(default=None, compare=False)
    fresh: int = field(default=0, compare=False)


def write_body(body: Any, depth: int = 0) -> WrittenBody:
    """`body` serialized once (see the module's docstring). `depth`: containers around
    `body` in the value it was read in (a capture's body is one level down in its record):
    each piece is written that much deeper, so that writing fails exactly when writing
    that value would (the text is the body's own).

    A body a reader wrote for its record's test (`keep`) is taken as it is.

    Raises:
        TypeError: orjson cannot write `body` `depth` levels down (`hashing.written` of
            the value says why).
    """
    held = getattr(_KEPT, "body", None)
    if held is not None and held[0] is body:
        return held[1]
    fields = ([k for k in SPLIT_FIELDS if isinstance(body.get(k), list)]
              if isinstance(body, dict) else [])
    serial = next(_SERIALS)
    if not fields:
        whole = _written(body, depth, 0)
        return WrittenBody(_tagged(xxhash.xxh3_128_hexdigest(whole)), len(whole), whole,
                           serial=serial, fresh=len(whole))
    # the elements written last are taken only when they were tested as deep as these
    last = (getattr(_LAST, "fields", None) or {}) if getattr(_LAST, "depth", 0) >= depth else {}
    before: list[bytes] = getattr(_LAST, "marks", [])  # the last body's marks (below)
    seen: dict[str, _Field] = {}
    whole_hash = xxhash.xxh3_128()
    size = 0
    members: list[bytes] = []  # the skeleton's members, written
    run: dict[Any, Any] = {}  # members between two split fields, not yet written
    layout: dict[str, list[str]] = {}
    parts: dict[str, bytes] = {}
    # What the whole text is made of besides the split fields' elements and the commas
    # between them, in order: braces, runs of members, a split field's ``"key":[`` and
    # its ``]``. `same`: so far this body's text is the last body's (every mark equal to
    # the last body's at that place, every split field before it the very elements it
    # had), so the hash state after a split field's elements shared with the last body is
    # the state the last body had there (xxh3 streamed over the same bytes).
    marks: list[bytes] = []
    same = True
    reused = 0  # bytes of elements taken from the last body (those very objects' texts)

    def emit(piece: bytes) -> None:
        nonlocal size
        whole_hash.update(piece)
        size += len(piece)

    def mark(piece: bytes) -> None:
        nonlocal same
        same = same and len(marks) < len(before) and before[len(marks)] == piece
        marks.append(piece)
        emit(piece)

    def flush() -> None:
        if run:
            # {"a":1,"b":2} -> "a":1,"b":2 (a member's value one level down, as in `body`)
            text = _written(run, depth, 1)
            mark(b"," if members else b"{")
            mark(text)
            members.append(text)
            run.clear()

    for key, value in body.items():
        if not (isinstance(key, str) and key in fields):
            run[key] = value
            continue
        flush()
        head = orjson.dumps(key) + b":"
        mark((b"," if members else b"{") + head + b"[")
        members.append(head + b"[]")
        known = last.get(key)
        hashes, texts, shared = _elements(value, known, depth)
        reused += sum(map(len, texts[:shared]))
        start = 0
        if same and shared and known is not None:
            # the text so far is the last body's up to its first `shared` elements here:
            # hashed on from the state it had after them (they were all its elements)
            whole_hash, size = known.after[0].copy(), known.after[1]
            start = shared
        for i in range(start, len(texts)):
            if i:
                emit(b",")
            emit(texts[i])
        # the very elements the last body had here, no more, no fewer
        same = same and known is not None and len(known.texts) == shared == len(texts)
        seen[key] = _Field(value, hashes, texts, (whole_hash.copy(), size))
        mark(b"]")
    flush()
    emit(b"}")
    last_serial = getattr(_LAST, "serial", None)
    _LAST.fields, _LAST.depth, _LAST.marks, _LAST.serial = seen, depth, marks, serial
    # the layout (stored as JSON) and the parts in `SPLIT_FIELDS` order, not the body's
    for name in fields:
        done = seen[name]
        layout[name] = list(done.hashes)
        for digest, text in zip(done.hashes, done.texts, strict=True):
            parts.setdefault(digest, text)
    skeleton = b"{" + b",".join(members) + b"}"
    return WrittenBody(_tagged(whole_hash.hexdigest()), size, None, skeleton.decode(),
                       layout, parts, serial=serial,
                       shares=last_serial if reused else None, fresh=size - reused)


@dataclass(frozen=True, slots=True)
class _Field:
    """A split field as `write_body` wrote it last (`_LAST`): the list, its elements' part
    hashes and texts, and the whole text's hash state and size after its elements."""

    elements: list[Any]
    hashes: tuple[str, ...]
    texts: tuple[bytes, ...]
    after: tuple[Any, int]  # (an xxh3_128 state, never updated: copied to go on; size)


def _elements(elements: list[Any], known: _Field | None, depth: int
              ) -> tuple[tuple[str, ...], tuple[bytes, ...], int]:
    """(part hashes, texts, how many were the last body's) of a split field's elements;
    those it shares with the same field of the body written last (`_LAST`: all of that
    field's elements, these very objects) are not written again."""
    hashes: list[str] = []
    texts: list[bytes] = []
    if known is not None and _shares(elements, known.elements):
        hashes.extend(known.hashes)
        texts.extend(known.texts)
    shared = len(hashes)
    for element in elements[shared:]:
        # written inside [[ ]] (and `depth` more), the depth it has in the body
        # ({"messages": [element]}), so that it fails here exactly when the whole body
        # would; the brackets cut off
        # by a copy of the rest (orjson's own result holds at least 4 KiB however short:
        # the views a batch held into them took the RSS of 0.27 GiB of captures from
        # 328 to 587 MB)
        text = _written(element, depth + 2, 0)
        hashes.append(_tagged(xxhash.xxh3_128_hexdigest(text)))
        texts.append(text)
    return tuple(hashes), tuple(texts), shared


def _written(value: Any, levels: int, cut: int) -> bytes:
    """`value` written inside `levels` lists (so that orjson meets its depth limit where it
    would in the value read), those brackets and `cut` more bytes each side cut off."""
    for _ in range(levels):
        value = [value]
    text = orjson.dumps(value, option=_OPTIONS, default=str)
    return text[levels + cut:len(text) - levels - cut] if levels + cut else text


def keep(body: Any, written: WrittenBody) -> None:
    """Hold `written`, `write_body` of `body` (as a reader wrote it for its record's depth
    test, `readers.json`), for the next `write_body` of this very object (ingest's, of the
    request read from that record) to take instead of writing it again: bodies are never
    written to, so the same object has the same text. One is held (per thread): the last."""
    _KEPT.body = (body, written)


def _tagged(hexdigest: str) -> str:
    return f"{HASH_VERSION}:{hexdigest}"


# Per thread, the lists `write_body` split last, with their parts' hashes and texts: an
# agent's log gives each call the previous call's history objects and new ones (a Codex
# rollout's 351 calls held 125,000 items), so only the new elements are serialized.
_LAST = threading.local()
_SERIALS = itertools.count(1)  # `WrittenBody.serial` (next() is atomic under the GIL)
_KEPT = threading.local()  # (body, its WrittenBody) a reader wrote last (`keep`)


def _shares(elements: list[Any], known: list[Any]) -> bool:
    """Does `elements` start with `known`'s elements, these very objects? Bodies are never
    written, so the same objects have the same JSON (and `known`, held here, keeps them
    alive: no id is reused)."""
    return len(elements) >= len(known) and all(map(operator.is_, elements, known))
