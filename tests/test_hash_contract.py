"""Known-answer tests of the hash contract (docs/segments.md, prefixscope/hashing.py).

Contract ``x3``: a value's canonical bytes are its JSON with keys sorted, separators
``,`` and ``:``, UTF-8 without ASCII escaping; `content_hash` is ``"x3:"`` + the
xxh3-128 hex digest of those bytes; the segment census adds an *exact* hash (the same
JSON with the logged key order) and a *folded* one (whitespace runs folded to one
space, ends stripped, then canonical), all without ``cache_control`` markers;
`chain_hashes` chains xxh3-64 seeded with the previous value (0 for the first).

Oracle: every expected value below is computed here by calling ``xxhash`` directly on
bytes spelled out by hand from that contract (never by serializing with the code under
test), and a few are also pinned as literal hex, so that changing the contract -- the
serializer, the key order, the digest, the tag -- fails these tests until the tag and
the constants are changed on purpose.
"""

from __future__ import annotations

import xxhash

from prefixscope.analyses.segments import segment_hashes
from prefixscope.model.hashing import (
    HASH_VERSION,
    canonical_json,
    chain_hashes,
    content_hash,
    exact_hash,
    exact_json,
    strip_cache_control,
    text_hash64,
)

# A value that exercises the contract: keys out of order (with non-ASCII and astral
# keys, whose code-point order differs from UTF-16 order), escapes, non-ASCII text,
# a float, null and booleans, nesting, whitespace runs, and a cache_control marker.
VALUE = {
    "type": "text",
    "text": "caf\u00e9  <b>\n\tdone ",
    "\U0001f600": 1,
    "\uffff": 2,
    "Z": [1.5, None, True, False, {"y": "q\"uote\\", "x": 0}],
    "cache_control": {"type": "ephemeral"},
}

# Canonical bytes of VALUE without cache_control, by hand: keys in code-point (= UTF-8
# byte) order Z < text < type < U+FFFF < U+1F600; "é" as its two UTF-8 bytes; "\n" and
# "\t" as two-character escapes; '"' and '\' escaped; nothing else escaped.
CANONICAL = (
    b'{"Z":[1.5,null,true,false,{"x":0,"y":"q\\"uote\\\\"}],'
    b'"text":"caf\xc3\xa9  <b>\\n\\tdone ",'
    b'"type":"text",'
    b'"\xef\xbf\xbf":2,'
    b'"\xf0\x9f\x98\x80":1}'
)
# The same, with the logged key order (insertion order of VALUE, nested dict too).
EXACT = (
    b'{"type":"text",'
    b'"text":"caf\xc3\xa9  <b>\\n\\tdone ",'
    b'"\xf0\x9f\x98\x80":1,'
    b'"\xef\xbf\xbf":2,'
    b'"Z":[1.5,null,true,false,{"y":"q\\"uote\\\\","x":0}]}'
)
# Folded: every whitespace run in every string becomes one space, ends stripped.
FOLDED = (
    b'{"Z":[1.5,null,true,false,{"x":0,"y":"q\\"uote\\\\"}],'
    b'"text":"caf\xc3\xa9 <b> done",'
    b'"type":"text",'
    b'"\xef\xbf\xbf":2,'
    b'"\xf0\x9f\x98\x80":1}'
)


def x3(data: bytes) -> str:
    return "x3:" + xxhash.xxh3_128_hexdigest(data)


def test_the_tag_is_x3():
    assert HASH_VERSION == "x3"


def test_canonical_bytes_are_the_hand_spelled_ones():
    stripped = strip_cache_control(VALUE)
    assert canonical_json(stripped).encode("utf-8") == CANONICAL
    assert exact_json(stripped).encode("utf-8") == EXACT


def test_content_hash_is_xxh3_128_of_the_canonical_bytes():
    assert content_hash(strip_cache_control(VALUE)) == x3(CANONICAL)
    # key order of the input does not matter, the cache_control marker does (not stripped)
    shuffled = dict(reversed(list(strip_cache_control(VALUE).items())))
    assert content_hash(shuffled) == x3(CANONICAL)
    assert content_hash(VALUE) != x3(CANONICAL)


def test_segment_hashes_follow_the_contract():
    got = segment_hashes(VALUE)
    assert got.exact == x3(EXACT)
    assert got.canonical == x3(CANONICAL)
    assert got.folded == x3(FOLDED)
    assert exact_hash(EXACT.decode("utf-8")) == x3(EXACT)


def test_strings_hash_as_json_strings():
    # a bare string is hashed as its JSON text, quotes included
    assert content_hash("a\u00e9\n") == x3(b'"a\xc3\xa9\\n"')
    assert content_hash(None) == x3(b"null")
    assert content_hash([]) == x3(b"[]")
    assert content_hash({}) == x3(b"{}")


# Computed once with xxhash (xxh3-128, seed 0) from the hand-spelled bytes and written
# in: a change of digest, serializer, key order or tag fails here.
PINNED_EMPTY = "x3:dc7048f8f8747f561349cde127705c16"  # b'{}'
PINNED_AB = "x3:61291ba4713e810dabca083088397e0c"  # b'{"a":null,"b":[1,"x"]}'
PINNED_VALUE = "x3:66e050b77ee130e6fdce3f7156e69c92"  # CANONICAL


def test_literal_constants_pin_the_contract():
    assert x3(b"{}") == PINNED_EMPTY and content_hash({}) == PINNED_EMPTY
    assert x3(b'{"a":null,"b":[1,"x"]}') == PINNED_AB
    assert content_hash({"b": [1, "x"], "a": None}) == PINNED_AB
    assert x3(CANONICAL) == PINNED_VALUE
    assert segment_hashes(VALUE).canonical == PINNED_VALUE


def test_chain_hashes_are_xxh3_64_seeded_with_the_parent():
    items = [{"role": "system", "content": "S"}, {"content": "hi", "role": "user"}, "tail"]
    b0 = b'{"content":"S","role":"system"}'
    b1 = b'{"content":"hi","role":"user"}'
    b2 = b'"tail"'
    h0 = xxhash.xxh3_64_intdigest(b0, seed=0)
    h1 = xxhash.xxh3_64_intdigest(b1, seed=h0)
    h2 = xxhash.xxh3_64_intdigest(b2, seed=h1)
    assert chain_hashes(items) == [h0, h1, h2]
    # "B extends A" is one comparison: equal prefixes give equal chain values
    assert chain_hashes(items[:2]) == [h0, h1]
    assert chain_hashes([items[1], items[0]])[1] != h1


def test_text_hash64_is_xxh3_64_of_the_utf8_bytes():
    assert text_hash64("caf\u00e9") == xxhash.xxh3_64_intdigest(b"caf\xc3\xa9")
    assert text_hash64(b"raw", seed=7) == xxhash.xxh3_64_intdigest(b"raw", seed=7)


def test_exact_hash_of_the_utf8_bytes_is_the_texts():
    """Ingest hashes a body's UTF-8 as orjson wrote it (issue 37: no decode and encode of
    114 MB); the hash is the text's, xxh3-128 of its UTF-8 bytes."""
    text = '{"b":"caf\u00e9 \U0001f600","a":1}'
    digest = f"x3:{xxhash.xxh3_128_hexdigest(text.encode('utf-8'))}"
    assert exact_hash(text) == exact_hash(text.encode("utf-8")) == digest


def test_whitespace_is_folded_at_every_character_the_contracts_regex_calls_space():
    """The folded hash's "whitespace runs" are re's ``\\s+`` (the contract): the fold,
    made with str.split(), agrees with that regex on every code point, alone and in runs
    between letters."""
    import re
    import sys

    from prefixscope.model.hashing import fold_whitespace

    space = re.compile(r"\s+")
    for code in range(sys.maxunicode + 1):
        c = chr(code)
        text = f"{c}a{c}{c}b {c}"
        assert fold_whitespace(text) == space.sub(" ", text).strip(), hex(code)
