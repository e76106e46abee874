"""DeepSeek's tokenization of ASCII text, pre-tokenized by one Python regular expression and
BPE-encoded word by word, each distinct word once: the same ids as the `tokenizers`
library gives, five times faster.

Why: the bundled ``deepseek-v4`` tokenizer (the default, and the stand-in for Claude)
tokenizes through the Rust library, and most of its time is Oniguruma running the three
``Split`` patterns of its pre-tokenizer, not BPE: 0.5 µs a character, half of report's
CPU at 1 GB. An agent's prompt text is mostly ASCII (code, JSON, English), where those
patterns reduce to one plain regular expression, and the words repeat (a few thousand
distinct ones in 10 MB of tool output).

**The claim.** For a text ``T`` of ASCII characters holding no added token, with the
tokenizer.json checked by `for_spec` (no normalizer, the pre-tokenizer exactly
`boundaries._DEEPSEEK_SPLITS` then ``ByteLevel`` without a prefix space or regex, a BPE
model without dropout, no truncation or padding), the library's ids of ``T`` are
``BPE(bytelevel(w))`` for the matches ``w`` of `WORDS` in ``T``, in order, whenever those
matches cover ``T`` (else nothing is claimed and the library tokenizes ``T``). Why:

* Added tokens are extracted first; ``T`` holds none (checked: `AsciiBPE.ids`), so ``T``
  is normalized (the identity), pre-tokenized and encoded whole.
* Split 1, ``\\p{N}{1,3}`` (Isolated): the ASCII characters of category N are the digits,
  so ``T`` is cut into runs of one to three digits (leftmost first, greedy) and the
  stretches between them.
* Split 2 matches CJK characters only: no ASCII character is one, it cuts nothing.
* Split 3, the main pattern, runs on each piece alone (Isolated: its unmatched stretches
  stay pieces). On a digit piece no alternative matches (each needs a letter, a
  punctuation or symbol character, or whitespace), so it stays whole. On ASCII its
  classes are: ``\\p{L}`` the letters, ``\\p{M}`` none, ``\\p{P}`` and ``\\p{S}`` together
  the 32 punctuation characters ``!-/ :-@ [-` {-~``, ``\\s`` Unicode White_Space, which in
  ASCII is ``\\t \\n \\v \\f \\r`` and space (not ``\\x1c-\\x1f``, which Python's ``\\s``
  would take: hence explicit classes below).
* `WORDS` is the digit rule as its first alternative, then split 3's alternatives in their
  order with those classes, digits taken out of the one class that held them (the
  optional character before a letter run) and out of ``\\S`` in the one look-ahead,
  ``\\s+(?!\\S)``. At a digit only the first alternative can match (no other alternative's
  first character is a digit) and it matches split 1's run. At any other character the
  alternatives match as split 3 does on the digit-free stretch holding it: none of them
  can take a digit, so no match runs past the stretch, and where the stretch ends at a
  digit the rewritten look-ahead accepts that digit as split 3's accepts the stretch's
  end; inside the stretch both read the same character. Both engines scan leftmost-first
  with ordered alternatives and greedy backtracking; there is no look-behind or anchor.
  When the matches cover ``T``, split 3 left no unmatched stretch, and the pieces are the
  matches.
* ``ByteLevel`` maps each piece's bytes to its alphabet, a character each (the map is read
  from the library: `_byte_level_map`); BPE merges within a piece only, and the model
  itself encodes each mapped piece (``Model.tokenize``, what the library calls on it).

Where the library gives no ids the claim is empty: Oniguruma stops a match attempt after
about ten million backtracking steps, and ``\\s*[\\r\\n]+`` backtracks once per character of
a whitespace run, so the library aborts on a run of ~10M spaces followed by a letter
(``retry-limit-in-match over``); Python's engine has no such limit and this path gives the
ids the patterns define. Offsets are each token's byte start (a byte is a character in
ASCII), as the library's path here reads them (`HFTokenizer.encode_many`).

An independent review (2026-12-03) compared these ids with the library's on every ASCII
string up to three characters, on all strings up to five or six characters over
alphabets of the classes above, on 500k random texts and on the real logs' strings (~15M
strings in all): no difference.

**Lines.** A text is cut after each line break followed by a printable character other
than a space (`LINE_CUTS`), and each part's ids are kept like a word's: tool output and
file contents repeat whole lines across a session's turns and across sessions (the bench's
raw captures, 0.27 GiB: 59% of the characters a report tokenizes are in a part seen
before), and a part found skips the regular expression and the word loop. For an ASCII
text ``T`` and such a place ``p`` (``T[p-1]`` is ``\\r`` or ``\\n``, ``T[p]`` is in
``!-~``), the matches of `WORDS` in ``T`` are its matches in ``T[:p]`` followed by those in
``T[p:]``, so the claim's ids of ``T`` are the two parts' ids end to end, and ``T`` is
covered when both parts are. Why:

* No match holds both ``p - 1`` and ``p``: alternatives 1-3 hold no ``\\r`` or ``\\n``;
  ``" ?[P]+[\\r\\n]*"`` and ``"[\\s]*[\\r\\n]+"`` hold them in their last run only, which
  ``T[p]`` cannot continue; the last two hold whitespace only, and ``T[p]`` is none.
* An attempt starting before ``p`` reads ``T[p]`` the way it reads the end of ``T[:p]``:
  alternatives 1-3 fail at or stop before the line break at ``p - 1`` (none can take
  it, and none can start at it); alternatives 4 and 5 reach ``p`` only in a class test of
  ``[\\r\\n]`` or whitespace, false for ``T[p]`` as for the end; the last two reach ``p``
  only from a start whose stretch up to ``p`` is whitespace ending in the line break, where
  alternative 5 matches first (ordered alternation), so their look-ahead never reads
  ``T[p]``. No alternative matches the empty string. So the scan is the same up to
  ``p``, reaches ``p`` without a match across it, and from there reads ``T[p:]`` alone
  (no look-behind, no anchor).

A part that does not cover is not kept and makes the text's answer None, as the whole
text's would be; added tokens are looked for in the whole text first (one may straddle a
cut).

tests/test_ascii_bpe.py compares these ids with the library's on Hypothesis texts built
from every character class above (digits next to whitespace, line breaks, controls,
added tokens), on texts of repeated lines through one instance's caches, and on every
ASCII string of the bundled and real logs; and the matches at every cut with the whole
text's (the property above).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any, cast

import numpy as np

from prefixscope.tokenizers.boundaries import deepseek_like

_PUNCT = re.escape("""!"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~""")  # \p{P} and \p{S} in ASCII
_SPACE = "\t\n\x0b\x0c\r "  # \s in ASCII (Unicode White_Space)
WORDS = re.compile(
    r"[0-9]{1,3}"  # split 1
    rf"|[{_PUNCT}][A-Za-z]+"
    rf"|[^\r\n0-9A-Za-z{_PUNCT}]?[A-Za-z]+"
    rf"| ?[{_PUNCT}]+[\r\n]*"
    rf"|[{_SPACE}]*[\r\n]+"
    rf"|[{_SPACE}]+(?![^{_SPACE}0-9])"
    rf"|[{_SPACE}]+")

# Distinct words whose ids are kept, ~200 bytes each: ~13 MB a process. Prose and code
# repeat a few thousand words (10 MB of tool output: 5,336); a log of random ids fills it
# and starts it again, costing misses, not memory.
_WORDS_KEPT = 1 << 16

# Where a text is cut into the parts whose ids are kept ("Lines" above): after a line
# break followed by a printable character other than a space (the look-ahead keeps that
# character in the next part; a class first, so the engine scans for it quickly).
_BREAK, _BEFORE_PRINTABLE = r"[\r\n]", r"(?=[!-~])"
LINE_CUTS = re.compile(_BREAK + _BEFORE_PRINTABLE)
_LINE_SPLIT = re.compile(f"({_BREAK}){_BEFORE_PRINTABLE}")  # the same, the break kept apart
# Parts up to this long are kept, up to this many characters in all (their ids, a uint32
# array each, about 1.2 bytes a character more: ~5 MB a process); past that the kept parts
# start again.
_LINE_MAX = 1 << 14
_LINES_KEPT = 1 << 21


class AsciiBPE:
    """`ids(text)`: the library's ids of an ASCII text, by the claim above."""

    def __init__(self, model: Any, byte_level: Mapping[str, str],
                 added: Iterable[str]) -> None:
        self._model = model
        self._map = str.maketrans(dict(byte_level))
        ascii_added = sorted({a for a in added if a.isascii() and a}, key=len, reverse=True)
        self._added = re.compile("|".join(map(re.escape, ascii_added))) if ascii_added else None
        self._words: dict[str, list[int]] = {}
        self._lines: dict[str, np.ndarray] = {}  # read-only arrays
        self._lines_size = 0  # characters of the kept parts

    def ids(self, text: str) -> list[int] | None:
        """The ids of `text`; None where the claim does not hold (a character outside
        ASCII, an added token, a character no alternative matches)."""
        found = self.array(text)
        return None if found is None else found.tolist()

    def array(self, text: str) -> np.ndarray | None:
        """`ids(text)` as a uint32 array (what `hf` keeps): the kept parts' arrays end to
        end, no list of every id made."""
        if not text.isascii() or (self._added is not None and self._added.search(text)):
            return None
        # the parts end to end ("Lines"): each one's ids kept, or made and kept
        cut = _LINE_SPLIT.split(text)  # part, its line break, part, ..., the last part
        parts = [*map(operator.add, cut[0:-1:2], cut[1::2]), cut[-1]]
        lines = self._lines
        found = list(map(lines.get, parts))
        for i in [i for i, ids in enumerate(found) if ids is None]:
            line = parts[i]
            ids = lines.get(line)  # the same new line earlier in this text
            if ids is None:
                ids = self._part_ids(line)
                if ids is None:
                    return None
                if len(line) <= _LINE_MAX:
                    if self._lines_size + len(line) > _LINES_KEPT:
                        lines.clear()
                        self._lines_size = 0
                    lines[line] = ids
                    self._lines_size += len(line)
            found[i] = ids
        ready = cast("list[np.ndarray]", found)  # every part's ids now
        return ready[0].copy() if len(ready) == 1 else np.concatenate(ready)

    def _part_ids(self, text: str) -> np.ndarray | None:
        """The claim's ids of an ASCII text holding no added token, word by word; None
        where its matches do not cover it. (Read-only: it is kept.)"""
        words = WORDS.findall(text)
        if sum(map(len, words)) != len(text):
            return None
        known = self._words
        if len(known) > _WORDS_KEPT:
            known.clear()
        ids: list[int] = []
        for word in words:
            found = known.get(word)
            if found is None:
                found = known[word] = [t.id for t in
                                       self._model.tokenize(word.translate(self._map))]
            ids += found
        out = np.array(ids, dtype=np.uint32)
        out.flags.writeable = False  # kept: `array` hands out copies only
        return out


def for_spec(spec: Mapping[str, Any], tokenizer: Any, added: Iterable[str]
             ) -> AsciiBPE | None:
    """The fast path of a loaded `tokenizers.Tokenizer` whose tokenizer.json `spec` (its
    normalizer, pre-tokenizer and model flags) is the one the claim is about; else None."""
    if not deepseek_like(spec) or tokenizer.truncation is not None or \
            tokenizer.padding is not None:
        return None
    return AsciiBPE(tokenizer.model, _byte_level_map(), added)


@cache
def _byte_level_map() -> dict[str, str]:
    """Each ASCII character -> the character the library's ``ByteLevel`` maps it to."""
    from tokenizers import pre_tokenizers

    level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    out = {}
    for code in range(128):
        pieces = level.pre_tokenize_str(chr(code))
        (mapped, _), = pieces
        out[chr(code)] = mapped
    return out
