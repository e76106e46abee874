"""Content hashing: the one contract every stored or compared hash follows.

Contract (version ``x3``): a JSON-able value is serialized by `canonical_json`
(keys sorted, separators ``,`` and ``:``, UTF-8 without ASCII escaping, floats as
JSON writes them), then hashed with xxh3-128; `content_hash` returns
``"x3:" + 32 hex digits``. Changing any of this changes every hash, so a change
must bump the tag. Chained hashes (`chain_hashes`) use xxh3-64 seeded with the
parent, as vLLM chains block hashes on their parent block, so "B extends A" is a
single comparison of the chain value at A's length.

Depth: orjson writes at most `MAX_JSON_DEPTH` nested containers (254; one more raises
``TypeError: Recursion limit reached``) while it reads up to 1024, so a value read from
a log can be one prefixscope cannot hash or store. `unwritable` says so, with the depth, in
C time for the values that fit: ingest skips such a record (one counted skip with the
reason) before anything serializes it, instead of one record stopping the run.

`strip_cache_control` removes Anthropic/OpenAI-style ``cache_control`` markers,
which change between turns without changing the prompt the model sees.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

import orjson
import xxhash

HASH_VERSION = "x3"
# The most nested containers (objects and arrays) orjson serializes: 255 raise.
MAX_JSON_DEPTH = 254


def _canonical_bytes(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)


def canonical_json(value: Any) -> str:
    """Serialize `value` deterministically (sorted keys, compact, UTF-8)."""
    return _canonical_bytes(value).decode()


def content_hash(value: Any) -> str:
    """Tagged xxh3-128 of the canonical JSON of `value` (strings hashed as JSON strings)."""
    return f"{HASH_VERSION}:{xxhash.xxh3_128_hexdigest(_canonical_bytes(value))}"


def exact_json(value: Any) -> str:
    """Serialize `value` keeping its key order (what was logged, byte for byte in structure)."""
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS, default=str).decode()


def json_depth(value: Any, stop: int | None = None) -> int:
    """Nested containers (dicts, lists, tuples) in `value` (a scalar is 0, ``[]`` is 1,
    ``[[1]]`` is 2), walked without recursion and without copying; with `stop`, the walk
    ends as soon as it passes that depth (and returns ``stop + 1``)."""
    deepest = 0
    stack: list[Iterator[Any]] = [iter((value,))]
    while stack:
        for item in stack[-1]:
            if isinstance(item, dict):
                stack.append(iter(item.values()))
            elif isinstance(item, (list, tuple)):
                stack.append(iter(item))
            else:
                continue
            if len(stack) - 1 > deepest:
                deepest = len(stack) - 1
                if stop is not None and deepest > stop:
                    return deepest
            break
        else:
            stack.pop()
    return deepest


def unwritable(value: Any) -> str:
    """Why `value` cannot be serialized as `exact_json` writes it ("" when it can): nested
    deeper than `MAX_JSON_DEPTH` (the depth said), or an integer beyond 64 bits (which
    Python's json reads and orjson does not write). Serializing is the fast test (C, the
    text dropped at once: a walk in Python is 10x slower on a wide value); only a value
    that fails it is walked."""
    try:
        orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS, default=str)
    except TypeError as exc:
        return _unwritable_reason(value, exc)
    return ""


def written(value: Any) -> tuple[bytes, str]:
    """(`exact_json(value)` as UTF-8, "") when `value` can be serialized, else (b"", why,
    as `unwritable` says it): the test and the text of one serialization, for a caller
    that keeps the text (ingest's body, serialized once for its test, its hash and the
    store; as bytes, hashed without a copy)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS, default=str), ""
    except TypeError as exc:
        return b"", _unwritable_reason(value, exc)


def _unwritable_reason(value: Any, exc: TypeError) -> str:
    if "Recursion limit" in str(exc):
        return (f"JSON nested {json_depth(value):,} levels deep: prefixscope hashes and "
                f"stores at most {MAX_JSON_DEPTH} (orjson's writer limit)")
    return f"a value prefixscope cannot serialize: {exc}"


def exact_hash(text: str | bytes) -> str:
    """Tagged xxh3-128 of already-serialized text (e.g. `exact_json` output; bytes: its
    UTF-8, hashed as they are)."""
    data = text.encode() if isinstance(text, str) else text
    return f"{HASH_VERSION}:{xxhash.xxh3_128_hexdigest(data)}"


def text_hash64(text: str | bytes, seed: int = 0) -> int:
    """xxh3-64 of raw text, as an unsigned int."""
    data = text.encode() if isinstance(text, str) else text
    return xxhash.xxh3_64_intdigest(data, seed=seed)


def chain_hashes(items: Iterable[Any], parent: int = 0) -> list[int]:
    """Prefix-chained xxh3-64 over canonical items: h[i] depends on items[0..i]. `parent`:
    the hash of the items before these (0: none), to continue a chain."""
    out: list[int] = []
    for item in items:
        parent = xxhash.xxh3_64_intdigest(_canonical_bytes(item), seed=parent)
        out.append(parent)
    return out


def strip_cache_control(value: Any) -> Any:
    """Return `value` with every ``cache_control`` key removed (recursively).

    Copy on write: a container holding no ``cache_control`` is returned itself, not
    copied (a prompt of 10^5 content blocks was copied whole for every prefix hash), and
    a changed one is copied with its unchanged children shared. Treat the result as
    read-only, as the input."""
    if isinstance(value, dict):
        out: dict[Any, Any] | None = None
        for i, (k, v) in enumerate(value.items()):
            new = None if k == "cache_control" else strip_cache_control(v)
            if out is None and (k == "cache_control" or new is not v):
                out = dict(islice(value.items(), i))  # the unchanged keys before this one
            if out is not None and k != "cache_control":
                out[k] = new
        return value if out is None else out
    if isinstance(value, list):
        items: list[Any] | None = None
        for i, v in enumerate(value):
            new = strip_cache_control(v)
            if items is None and new is not v:
                items = value[:i]
            if items is not None:
                items.append(new)
        return value if items is None else items
    return value


def fold_whitespace(value: Any) -> Any:
    """`value` with every string's whitespace runs folded to one space and ends stripped.

    Copy on write, as `strip_cache_control`: what folding leaves equal is returned itself
    (a prompt of 10^5 content blocks was copied whole for each segment hash)."""
    if isinstance(value, str):
        # str.split() splits at the characters re's \s matches (both Py_UNICODE_ISSPACE;
        # tests/test_hashing.py checks every code point), ~3x faster than the regex
        folded = " ".join(value.split())
        return value if folded == value else folded
    if isinstance(value, dict):
        out: dict[Any, Any] | None = None
        for i, (k, v) in enumerate(value.items()):
            new = fold_whitespace(v)
            if out is None and new is not v:
                out = dict(islice(value.items(), i))
            if out is not None:
                out[k] = new
        return value if out is None else out
    if isinstance(value, list):
        items: list[Any] | None = None
        for i, v in enumerate(value):
            new = fold_whitespace(v)
            if items is None and new is not v:
                items = value[:i]
            if items is not None:
                items.append(new)
        return value if items is None else items
    return value
