"""Request bodies stored by content: each message, tool and system block once.

Agents resend the whole conversation every turn, so a session of n turns logs O(n²)
bytes of bodies holding O(n) distinct content. Storing whole bodies made the store's
work (serialize, hash, write, checkpoint, re-read) quadratic per session, and made
DuckDB rewrite an ever larger row of text at every checkpoint: ingest's memory grew
with the log (docs/scale.md). So a body is stored as

* a **skeleton**: the body's JSON (`exact_json`, its key order) with each list-valued
  `model.bodytext.SPLIT_FIELDS` entry emptied (``"messages":[]``), and
* a **layout**: for each emptied field, the ordered hashes of its elements, and
* **parts**: each element's `exact_json` text under its `exact_hash`, stored once
  however many bodies hold it.

`join_body` puts them back: the value equals ``orjson.loads(exact_json(body))`` (key
order included), so ``exact_json`` of it is the original text byte for byte (a test
holds this on every fixture body). Pure functions; the SQL is the Store's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from prefixscope.model.bodytext import write_body

Layout = dict[str, list[str]]  # field -> ordered part hashes


def split_body(body: Any) -> tuple[str, Layout, dict[str, str]] | None:
    """(skeleton JSON, layout, part hash -> part JSON) of `body`; None when it has no
    list-valued `SPLIT_FIELDS` entry (it is then stored whole). Ingest hands the store
    its bodies already split (`model.bodytext.write_body`, serialized once); this is the
    same split for a body given alone.

    Raises:
        TypeError: orjson cannot write `body`.
    """
    written = write_body(body)
    if written.layout is None:
        return None
    assert written.skeleton is not None and written.parts is not None
    return written.skeleton, written.layout, {
        digest: text.decode() for digest, text in written.parts.items()}


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
