"""Request bodies stored by content: each message, tool and system block once.

Agents resend the whole conversation every turn, so a session of n turns logs O(n²)
bytes of bodies holding O(n) distinct content. Storing whole bodies made the store's
work (serialize, hash, write, checkpoint, re-read) quadratic per session, and made
DuckDB rewrite an ever larger row of text at every checkpoint: ingest's memory grew
with the log (docs/scale.md). So a body is stored as

* a **skeleton**: the body's JSON (`exact_json`, its key order) with each list-valued
  `SPLIT_FIELDS` entry emptied (``"messages":[]``), and
* a **layout**: for each emptied field, the ordered hashes of its elements, and
* **parts**: each element's `exact_json` text under its `exact_hash`, stored once
  however many bodies hold it.

`join_body` puts them back: the value equals ``orjson.loads(exact_json(body))`` (key
order included), so ``exact_json`` of it is the original text byte for byte (a test
holds this on every fixture body). Pure functions; the SQL is the Store's.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Mapping
from typing import Any

import orjson
import xxhash

from prefixscope.model.hashing import HASH_VERSION, exact_json

# Top-level body fields whose list elements are stored as parts (history, tools, system
# blocks: what grows and repeats from turn to turn).
SPLIT_FIELDS = ("system", "tools", "messages", "input")

Layout = dict[str, list[str]]  # field -> ordered part hashes


def split_body(body: Any) -> tuple[str, Layout, dict[str, str]] | None:
    """(skeleton JSON, layout, part hash -> part JSON) of `body`; None when it has no
    list-valued `SPLIT_FIELDS` entry (it is then stored whole)."""
    if not isinstance(body, dict):
        return None
    fields = [k for k in SPLIT_FIELDS if isinstance(body.get(k), list)]
    if not fields:
        return None
    skeleton = dict(body)
    layout: Layout = {}
    parts: dict[str, str] = {}
    last = getattr(_LAST, "fields", None) or {}
    seen: dict[str, tuple[list[Any], tuple[str, ...], tuple[str, ...]]] = {}
    for name in fields:
        elements = body[name]
        hashes: list[str] = []
        texts: list[str] = []
        known = last.get(name)
        if known is not None and _shares(elements, known[0]):
            hashes.extend(known[1])
            texts.extend(known[2])
        for element in elements[len(hashes):]:
            # exact_json and exact_hash of it, inlined: an agent's log has tens of thousands
            # of elements, and the hash is of the bytes the text decodes from (orjson writes
            # UTF-8 only), so the text need not be encoded again
            data = orjson.dumps(element, option=orjson.OPT_NON_STR_KEYS, default=str)
            hashes.append(f"{HASH_VERSION}:{xxhash.xxh3_128_hexdigest(data)}")
            texts.append(data.decode())
        for digest, text in zip(hashes, texts, strict=True):
            parts.setdefault(digest, text)
        seen[name] = (elements, tuple(hashes), tuple(texts))
        layout[name] = hashes
        skeleton[name] = []
    _LAST.fields = seen
    return exact_json(skeleton), layout, parts


# Per thread, the lists `split_body` split last, with their parts' hashes and texts: an
# agent's log gives each call the previous call's history objects and new ones (a Codex
# rollout's 351 calls held 125,000 items), so only the new elements are serialized.
_LAST = threading.local()


def _shares(elements: list[Any], known: list[Any]) -> bool:
    """Does `elements` start with `known`'s elements, these very objects? Bodies are never
    written, so the same objects have the same JSON (and `known`, held here, keeps them
    alive: no id is reused)."""
    return len(elements) >= len(known) and all(map(operator.is_, elements, known))


def layout_json(layout: Layout) -> str:
    return orjson.dumps(layout).decode()


def layout_hashes(layout_text: str | None) -> list[str]:
    """Every part hash a stored layout names (none for a body stored whole)."""
    if layout_text is None:
        return []
    return [h for hashes in orjson.loads(layout_text).values() for h in hashes]


def join_body(stored: str, layout_text: str | None, parts: Mapping[str, str],
              values: dict[str, Any] | None = None) -> Any:
    """The body from its stored skeleton (or whole JSON, `layout_text` None) and parts.

    `values`: parsed parts by hash, shared by the bodies built with it -- a part is parsed
    the first time a body names it and the same value goes into every later body that
    holds it (a session's turns resend the same history). Bodies are read, never written
    to (tests/test_store.py checks a whole report leaves every shared part as parsed).

    Raises:
        KeyError: a part the layout names is not in `parts` nor `values` (a damaged store).
    """
    body = orjson.loads(stored)
    if layout_text is None:
        return body
    for name, hashes in orjson.loads(layout_text).items():
        if values is None:
            body[name] = [orjson.loads(parts[h]) for h in hashes]
            continue
        elements = []
        for h in hashes:
            value = values.get(h, _ABSENT)
            if value is _ABSENT:
                value = values[h] = orjson.loads(parts[h])
            elements.append(value)
        body[name] = elements
    return body


_ABSENT = object()
