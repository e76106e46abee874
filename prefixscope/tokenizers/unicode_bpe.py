"""DeepSeek's tokenization of a text the ASCII path (`ascii_bpe`) does not take (a
character outside ASCII, a control character no alternative of its expression matches),
in Python: the library's own three ``Split`` patterns run by the `regex` module, then
ByteLevel and the word's BPE (`merges`), so that a few such texts in a run (an arrow
in a shell prompt, a terminal's backspaces) need not deserialize the `tokenizers`
library (0.25-0.4 s of CPU; issue 37's fixed costs).

**The claim.** For a tokenizer.json that `boundaries.deepseek_like` accepts (no
normalizer, the pre-tokenizer exactly the three ``Split`` steps (Isolated) then
``ByteLevel`` without a prefix space or regex, a plain BPE model) and a text ``T`` that
holds no added token and whose every character is assigned in Python's Unicode database
(`unicodedata`, 14.0 on Python 3.11), the library's ids of ``T`` are `UnicodeBPE.ids`.
Why:

* Added tokens are extracted first; ``T`` holds none (checked), so it is normalized (the
  identity), pre-tokenized and encoded whole.
* Each ``Split`` step with ``Isolated`` behaviour cuts every piece into its pattern's
  matches and the stretches between them, each a piece, in order (no pattern matches
  the empty string). `_isolated` does this with the same pattern compiled by `regex`.
* The patterns read characters through the classes ``\\p{L} \\p{M} \\p{N} \\p{P} \\p{S}
  \\s`` (and their complements) and literal ranges. On every character assigned in
  Unicode 14.0 these classes hold the same characters in `regex` as in the library's
  Oniguruma: checked on every such code point against the library itself, by
  tests/test_tokenizer_unicode.py and at run time (`classes_agree`, once for each pair of
  installed `regex` and `tokenizers` versions, kept in the disk cache: Unicode does not
  freeze a character's category, and a later release of either package may move one;
  where they disagree the library tokenizes these texts); newer characters are refused
  (`_known`), since the library and `regex` may know different Unicode versions (this
  `regex` knows 17.0, the library 16.0), and the path is off where Python's database is
  newer than 14.0 (the library's Oniguruma is 6.9.8 or later, Unicode 14.0 or later,
  from tokenizers 0.19 on).
* Both engines backtrack, try alternatives in order and quantifiers greedily, and take
  the leftmost match; the patterns use no feature the two spell differently (no
  look-behind, no anchor, no flag, one negative look-ahead).
* ByteLevel maps each piece's UTF-8 bytes to its alphabet, a character a byte (the map:
  `hf._byte_level_decoder`, GPT-2's, the one the library uses), and the BPE model
  encodes each mapped piece alone (the claim in `merges` for the word).

tests/test_tokenizer_unicode.py compares the ids with the library's on Hypothesis texts
of every class (letters and marks of many scripts, digits of other scripts, CJK and kana,
symbols, Unicode spaces, controls, emoji, unassigned characters), and the classes
exhaustively as said.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import cache
from typing import Any

# The newest Unicode database whose characters this path reads (see the claim).
UNICODE_READ = (14, 0, 0)
# Distinct words whose ids are kept (as `ascii_bpe`'s).
_WORDS_KEPT = 1 << 16


def usable() -> bool:
    """Is Python's Unicode database one whose assigned characters the claim covers?"""
    return tuple(int(p) for p in unicodedata.unidata_version.split(".")) <= UNICODE_READ


# The classes the Split patterns read characters through (the claim's third point).
CLASSES = (r"\p{L}", r"\p{M}", r"\p{N}", r"\p{P}", r"\p{S}", r"\s")


@cache
def classes_agree() -> bool:
    """Whether the installed `regex` puts every character Python's Unicode database
    assigns in the same `CLASSES` as the installed library's Oniguruma: decided once for
    each pair of versions (and Unicode database), then read from the disk cache."""
    from importlib.metadata import version

    import numpy as np
    import xxhash

    from prefixscope.tokenizers.diskcache import load_arrays, save_arrays

    key = xxhash.xxh3_64_hexdigest(" ".join((
        version("regex"), version("tokenizers"), unicodedata.unidata_version, *CLASSES
    )).encode())
    kept = load_arrays("unicode-classes", key, ("agree",))
    if kept is not None:
        return bool(kept["agree"][0])
    agree = _classes_agree_now()
    save_arrays("unicode-classes", key, {"agree": np.array([agree], dtype=np.uint8)})
    return agree


def _classes_agree_now() -> bool:
    """The check itself: for each class, the characters the library's `Split` removes
    are those `regex` matches, among every assigned one (~1 s of CPU)."""
    import regex
    from tokenizers import Regex, pre_tokenizers

    assigned = "".join(chr(c) for c in range(0x110000)
                       if unicodedata.category(chr(c)) not in ("Cn", "Cs"))
    for cls in CLASSES:
        theirs = bytearray(b"\x01") * len(assigned)  # 1: removed (matched) by the library
        split = pre_tokenizers.Split(Regex(cls), behavior="removed")
        for _, (start, end) in split.pre_tokenize_str(assigned):  # what it keeps
            theirs[start:end] = bytes(end - start)
        ours = bytearray(len(assigned))
        for match in regex.finditer(cls, assigned):
            ours[match.start():match.end()] = b"\x01" * (match.end() - match.start())
        if theirs != ours:
            return False
    return True


class UnicodeBPE:
    """`ids(text)`: the library's ids of a text, by the claim above, or None."""

    def __init__(self, splits: Sequence[str], byte_chars: dict[int, str],
                 added: Iterable[str], word_ids: Callable[[str], list[int] | None]) -> None:
        """`splits`: the tokenizer.json's three ``Split`` patterns in order;
        `byte_chars`: ByteLevel's character for each byte; `word_ids`: the BPE of a
        mapped word (None: not known without the library)."""
        import regex

        self._splits = [regex.compile(p) for p in splits]
        self._map = {b: byte_chars[b] for b in range(256)}
        self._added = _Literals(added)
        self._word_ids = word_ids
        self._words: dict[str, list[int]] = {}

    def ids(self, text: str) -> list[int] | None:
        """The ids of `text`; None where the claim does not hold (an added token in it, a
        character Unicode 14.0 does not assign, a lone surrogate)."""
        if not _known(text) or self._added.any_in(text):
            return None
        pieces = [text]
        for pattern in self._splits:
            pieces = [part for piece in pieces for part in _isolated(pattern, piece)]
        words = self._words
        if len(words) > _WORDS_KEPT:
            words.clear()
        out: list[int] = []
        for piece in pieces:
            found = words.get(piece)
            if found is None:
                mapped = "".join(self._map[b] for b in piece.encode("utf-8"))
                found = self._word_ids(mapped)
                if found is None:
                    return None
                words[piece] = found
            out += found
        return out


class _Literals:
    """`any_in(text)`: does `text` hold one of these strings? Each is looked for only
    where the text holds its first two characters (DeepSeek's 1,283 added tokens have 6
    such heads, ``<｜`` and ``<|`` for all but 5; compiling them into one pattern took
    0.03 s, more than the few texts this path sees)."""

    def __init__(self, words: Iterable[str]) -> None:
        self._by_head: dict[str, list[str]] = {}
        for word in sorted({w for w in words if w}):
            self._by_head.setdefault(word[:2], []).append(word)

    def any_in(self, text: str) -> bool:
        # a word in the text puts its head in the text too
        return any(head in text and any(word in text for word in words)
                   for head, words in self._by_head.items())


def _known(text: str) -> bool:
    """Every character outside ASCII assigned (not Cn) and no surrogate (Cs): the ones
    the claim reads the classes of."""
    return all(unicodedata.category(c) not in ("Cn", "Cs")
               for c in set(text) if not c.isascii())


def _isolated(pattern: Any, text: str) -> Iterator[str]:
    """``Split`` with ``Isolated`` behaviour: the matches of `pattern` and the stretches
    between them, in order (no empty piece; the patterns match no empty string)."""
    pos = 0
    for match in pattern.finditer(text):
        start, end = match.span()
        if start > pos:
            yield text[pos:start]
        yield text[start:end]
        pos = end
    if pos < len(text):
        yield text[pos:]
