"""Where a tokenizer's pre-tokenization always splits a text, whatever surrounds the spot:
the start of a line that begins with a printable ASCII character.

The piece cache (`tokens.tokenize`) splits prompts only at added tokens, so a piece is a
whole message, or the whole head of a prompt (tools and system prompt). When one line of
such a piece changes -- a billing header with a new hash every request, a tool schema
with its keys sorted -- the piece is new and tokenizing it whole repeats the BPE of every
line that did not change. Cut at a position where the tokenizer itself always cuts, the
piece tokenizes as its chunks do, and each chunk seen before is not tokenized again.

**The boundary.** A position ``c`` of a text ``W = L + R`` (``L = W[:c]``) where
``W[c-1]`` is ``\\r`` or ``\\n`` and ``W[c]`` is in ``[!-~]`` (printable ASCII, not a
space; for o200k also not ``/``). Claim: ``ids(W) == ids(L) + ids(R)``.

Why, for the pre-tokenizers below (each checked alternative by alternative):

* Every pattern is a regex scanned left to right for its leftmost-first matches (HF's
  ``Split`` with ``Isolated`` behaviour keeps the unmatched stretches as pieces too;
  tiktoken's patterns match every character). No alternative can match a line break
  followed by a non-space character: the letter and number alternatives exclude ``\\r``
  and ``\\n`` from their optional leading character and contain none after it; the
  punctuation alternative (`` ?[^\\s...]+[\\r\\n]*``) ends with its line breaks (o200k's
  ``[\\r\\n/]*`` may go on with ``/``: hence the exception); the remaining alternatives
  are all whitespace. So no match (and no unmatched stretch: a line break always starts
  a match of ``\\s*[\\r\\n]+``) holds both ``W[c-1]`` and ``W[c]``: ``c`` is a piece
  boundary of ``W``.
* The scan of ``L`` alone finds the same matches as the scan of ``W`` inside ``L``:
  ``W[c]`` can only stop a match begun before ``c``, and so does the end of ``L``. The one
  assertion that reads past a match, ``\\s+(?!\\S)``, is never tried on a whitespace run
  reaching ``c``: that run ends with ``W[c-1]``, a line break, so ``\\s*[\\r\\n]+``, an
  earlier alternative, matches it first. The scan of ``R`` alone is the scan of ``W`` from
  ``c`` on: the patterns have no look-behind, no anchors and no empty matches.
* DeepSeek's pre-tokenizer runs three such splits in sequence (digit runs of one to
  three, CJK runs, then the main pattern); ``W[c-1]`` is no digit and no CJK character and
  ``W[c]`` no CJK character, so no digit or CJK run crosses ``c``, a digit run starting at
  ``c`` is cut in threes from ``c`` in both, and the main split cuts at ``c`` as above.
  The byte-level step after it (no prefix space, no regex) maps each piece alone.
* BPE merges inside a pre-token only, so the ids are those of the pieces in order.
* Added tokens are matched before all this. No added token may contain a line break
  followed by a character of the class (checked: then no occurrence spans ``c``), and none
  may strip whitespace on its left (``lstrip``: an occurrence starting at ``c`` would take
  the line break). Qwen's NFC normalization composes nothing across a line break followed
  by ASCII (both are starters that compose with nothing before them); it is applied only
  to text it leaves unchanged (`chunk_safe_text`), where offsets are exact too.

tests/test_tokenize.py holds a chunked tokenization equal to the whole one on
Hypothesis texts full of line breaks, digits, CJK, punctuation and added tokens, and on
the real corpora, for every bundled tokenizer.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

# A line start whose character no alternative can join to the line break before it.
LINE_START = re.compile(r"(?<=[\r\n])[!-~]")
LINE_START_NO_SLASH = re.compile(r"(?<=[\r\n])[!-.0-~]")  # o200k: `[\r\n/]*`

# The pre-tokenization patterns checked above, exactly as the tokenizers spell them.
_DEEPSEEK_SPLITS = (
    r"\p{N}{1,3}",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    # (the file spells its line breaks as the characters themselves, not as escapes)
    (r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|"""
     r""" ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""").replace(r"\r\n", "\r\n"),
)
_QWEN2 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
          r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
_QWEN35 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"""
           r""" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
_O200K = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"""
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"""
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
_PATTERNS = {_QWEN2: LINE_START, _QWEN35: LINE_START, _O200K: LINE_START_NO_SLASH}


def for_pattern(pattern: str, added: Iterable[str]) -> re.Pattern[str] | None:
    """The boundary of a tiktoken tokenizer with this pattern and these added tokens
    (None: not one of the patterns proved above, or an added token spans a boundary)."""
    boundary = _PATTERNS.get(pattern)
    return boundary if boundary is not None and _added_ok(boundary, added) else None


def for_hf(spec: Mapping[str, Any]) -> re.Pattern[str] | None:
    """The boundary of a tokenizer.json (None: its normalizer or pre-tokenizer is not
    one proved above, or an added token could span a boundary)."""
    if not deepseek_like(spec):
        return None
    tokens = spec.get("added_tokens") or []
    if any(t.get("lstrip") for t in tokens):
        return None
    return LINE_START if _added_ok(LINE_START, (str(t.get("content", "")) for t in tokens)) \
        else None


def deepseek_like(spec: Mapping[str, Any]) -> bool:
    """Does a tokenizer.json (its normalizer, pre-tokenizer and model flags) tokenize as
    DeepSeek's: no normalizer, the three splits above then ``ByteLevel`` without a prefix
    space or regex, and a plain BPE model (no dropout, no subword prefix or suffix)?"""
    normalizer = spec.get("normalizer")
    if normalizer is not None and normalizer != {"type": "Sequence", "normalizers": []}:
        return False
    model = spec.get("model") or {}
    if model.get("type") != "BPE" or model.get("dropout") or \
            model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return False
    pre = spec.get("pre_tokenizer")
    steps = pre.get("pretokenizers") if isinstance(pre, dict) and \
        pre.get("type") == "Sequence" else None
    if not isinstance(steps, list) or len(steps) != len(_DEEPSEEK_SPLITS) + 1:
        return False
    for step, pattern in zip(steps, _DEEPSEEK_SPLITS, strict=False):
        if step != {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated",
                    "invert": False}:
            return False
    last = steps[-1]
    return isinstance(last, dict) and last.get("type") == "ByteLevel" and \
        last.get("add_prefix_space") is False and last.get("use_regex") is False


def _added_ok(boundary: re.Pattern[str], added: Iterable[str]) -> bool:
    """No added token holds a boundary (so no occurrence of one spans a cut)."""
    return not any(boundary.search(t) for t in added)


def chunk_safe_text(text: str, nfc: bool) -> bool:
    """May `text` be cut at boundaries? Always, unless the tokenizer NFC-normalizes and
    the text is not in NFC already (offsets into a changed text are only approximate)."""
    return not nfc or unicodedata.is_normalized("NFC", text)
