"""Tokenizers from a Hugging Face ``tokenizer.json`` (the `tokenizers` library), with the
offsets and added-token semantics prefixscope needs (see `base.Tokenizer`).

What prefixscope derives from the file besides the Rust tokenizer (each token's byte
length, the added tokens, the normalizer and pre-tokenizer flags) is kept in the disk
cache (`diskcache`) under the file's content hash: a warm load parses no JSON in Python
and walks no vocabulary, and only the Rust deserialization remains.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import xxhash

from prefixscope.tokenizers import ascii_bpe, boundaries
from prefixscope.tokenizers.base import (
    EMPTY,
    AddedToken,
    Encoded,
    Tokenizer,
    TokenizerError,
    char_starts,
)
from prefixscope.tokenizers.diskcache import load_arrays, save_arrays


class HFTokenizer(Tokenizer):
    """A ``tokenizers`` (Rust) tokenizer loaded from a tokenizer.json."""

    def __init__(self, name: str, tokenizer_json: Path, config: dict[str, Any],
                 chat_template: str, *, bundled: bool) -> None:
        from tokenizers import Tokenizer as RustTokenizer

        raw = tokenizer_json.read_bytes()
        digest = xxhash.xxh3_128_hexdigest(raw)
        self._tok = RustTokenizer.from_str(raw.decode("utf-8"))
        self.name = name
        self.chat_template = chat_template
        self.bundled = bundled
        self.template_vars = _template_vars(config)
        self.identity = "hf:" + digest
        derived = _cached_derived(digest)
        if derived is None:
            derived = _derive(self._tok, json.loads(raw))
            _save_derived(digest, derived)
        meta, byte_lengths = derived
        self.added_tokens = tuple(AddedToken(str(t[0]), int(t[1]), *map(bool, t[2:]))
                                  for t in meta["added_tokens"])
        self.identity_normalizer = bool(meta["identity_normalizer"])
        self.piece_safe = bool(meta["piece_safe"])
        # decided here, not kept in the disk cache: a cached verdict would outlive its proof
        self.chunk_boundary = boundaries.for_hf({
            **meta["pre_tokenization"],
            "added_tokens": [{"content": t.content, "lstrip": t.lstrip}
                             for t in self.added_tokens]})
        self._byte_lengths = byte_lengths
        # ASCII text by one regular expression and a word cache (`ascii_bpe`, the proof
        # there), decided here too
        self._ascii = ascii_bpe.for_spec(meta["pre_tokenization"], self._tok,
                                         [t.content for t in self.added_tokens]
                                         ) if byte_lengths is not None else None
        # every id's bytes end to end, and where each starts: built on first use (`spelled`)
        self._spellings: tuple[np.ndarray, np.ndarray] | None = None

    def encode(self, text: str) -> Encoded:
        return self.encode_many([text])[0]

    def encode_many(self, texts: Sequence[str]) -> list[Encoded]:
        """Encode several texts; the Rust side spreads a batch over all cores (ASCII texts
        of a DeepSeek-like tokenizer: `ascii_bpe`, here)."""
        todo = [i for i, t in enumerate(texts) if t]
        out = [EMPTY] * len(texts)
        if self._ascii is not None and self._byte_lengths is not None:
            lengths, left = self._byte_lengths, []
            for i in todo:
                found = self._ascii.ids(texts[i])
                if found is None:
                    left.append(i)
                    continue
                ids = np.array(found, dtype=np.uint32)
                sizes = lengths[ids]  # ASCII: a byte is a character
                out[i] = Encoded(ids, np.cumsum(sizes) - sizes)
            todo = left
        if not todo:
            return out
        batch_texts = [texts[i] for i in todo]
        if self._byte_lengths is not None and hasattr(self._tok, "encode_batch_fast"):
            # Ids only (no offset objects): offsets follow from the byte lengths.
            encoded = _library(self.name, lambda: self._tok.encode_batch_fast(
                batch_texts, add_special_tokens=False))
            for i, enc in zip(todo, encoded, strict=True):
                ids = np.asarray(enc.ids, dtype=np.uint32)
                starts = char_starts(texts[i].encode("utf-8"), self._byte_lengths[ids])
                out[i] = Encoded(ids, starts) if starts is not None else self._slow(texts[i])
            return out
        for i in todo:
            out[i] = self._slow(texts[i])
        return out

    def _slow(self, text: str) -> Encoded:
        enc = _library(self.name, lambda: self._tok.encode(text, add_special_tokens=False))
        ids = np.asarray(enc.ids, dtype=np.uint32)
        return Encoded(ids, np.fromiter((o[0] for o in enc.offsets), dtype=np.int64,
                                        count=len(ids)))

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)

    @property
    def byte_lengths(self) -> np.ndarray | None:
        return self._byte_lengths

    def spelled(self, ids: np.ndarray) -> bytes | None:
        lengths = self._byte_lengths
        if lengths is None:  # not byte-level, or a normalizer: not known
            return None
        if self._spellings is None:
            flat = _spellings(self._tok, {t.content for t in self.added_tokens})
            self._spellings = flat, np.cumsum(lengths) - lengths
        flat, starts = self._spellings
        sizes = lengths[ids]
        ends = np.cumsum(sizes)
        total = int(ends[-1]) if len(ends) else 0
        return flat[np.repeat(starts[ids] - (ends - sizes), sizes) + np.arange(total)].tobytes()


_T = TypeVar("_T")


def _library(name: str, call: Callable[[], _T]) -> _T:
    """`call()` into the Rust library, its panics a `TokenizerError` (pyo3 raises them as
    ``PanicException``, a `BaseException` no handler for errors would catch): Oniguruma
    gives up on a run of ~10M whitespace characters (``retry-limit-in-match over``)."""
    try:
        return call()
    except BaseException as exc:
        if type(exc).__name__ != "PanicException":
            raise
        first = (str(exc).splitlines() or ["no message"])[0]
        raise TokenizerError(f"tokenizer {name} failed on a prompt: {first}") from None


_Derived = tuple[dict[str, Any], "np.ndarray | None"]  # (flags and added tokens, byte lengths)
_ARRAYS = ("meta", "byte_lengths")


def _derive(tok: Any, spec: dict[str, Any]) -> _Derived:
    """What prefixscope needs from a tokenizer.json besides the Rust tokenizer."""
    meta = {
        "added_tokens": [[t["content"], int(t["id"]), bool(t.get("special")),
                          bool(t.get("normalized")), bool(t.get("lstrip")),
                          bool(t.get("rstrip")), bool(t.get("single_word"))]
                         for t in spec.get("added_tokens") or []],
        "identity_normalizer": _is_identity_normalizer(spec.get("normalizer")),
        "piece_safe": not _has_position_dependent_step(spec),
        # what `boundaries.for_hf` reads besides the added tokens
        "pre_tokenization": {
            "normalizer": spec.get("normalizer"), "pre_tokenizer": spec.get("pre_tokenizer"),
            "model": {k: v for k, v in (spec.get("model") or {}).items()
                      if k not in ("vocab", "merges")}},
    }
    return meta, _byte_level_lengths(tok, spec)


def _cached_derived(digest: str) -> _Derived | None:
    arrays = load_arrays("hf", digest, _ARRAYS)
    if arrays is None:
        return None
    try:
        meta = json.loads(arrays["meta"].tobytes())
        tokens = meta["added_tokens"]
        if not (isinstance(tokens, list) and all(isinstance(t, list) and len(t) == 7
                                                 for t in tokens)):
            return None
        if not isinstance(meta.get("pre_tokenization"), dict):  # an older release's entry
            return None
        lengths = arrays["byte_lengths"]
        return meta, (lengths.astype(np.int64) if meta.get("byte_level") else None)
    except (ValueError, KeyError, TypeError):  # a damaged entry: rebuilt by the caller
        return None


def _save_derived(digest: str, derived: _Derived) -> None:
    meta, lengths = derived
    text = json.dumps({**meta, "byte_level": lengths is not None}).encode("utf-8")
    save_arrays("hf", digest, {
        "meta": np.frombuffer(text, dtype=np.uint8),
        "byte_lengths": lengths if lengths is not None else np.zeros(0, dtype=np.int64)})


def _byte_level_lengths(tok: Any, spec: dict[str, Any]) -> np.ndarray | None:
    """Byte length of every id for byte-level BPE with identity normalization, else None.

    With these two properties the tokens of a text spell exactly its UTF-8 bytes, so
    token offsets follow from the ids alone (much faster than HF's offset objects).
    """
    if not _is_identity_normalizer(spec.get("normalizer")):
        return None
    if (spec.get("decoder") or {}).get("type") != "ByteLevel":
        return None
    alphabet = _byte_level_alphabet()
    vocab = tok.get_vocab(with_added_tokens=True)
    lengths = np.zeros(max(vocab.values()) + 1, dtype=np.int64)
    added = {t.get("content") for t in spec.get("added_tokens") or []}
    for piece, idx in vocab.items():
        if piece in added:
            lengths[idx] = len(piece.encode("utf-8"))
        elif all(c in alphabet for c in piece):
            lengths[idx] = len(piece)
        else:
            return None
    return lengths


def _spellings(tok: Any, added: set[str]) -> np.ndarray:
    """The bytes every id of a byte-level vocabulary spells (an added token: its content),
    end to end in id order: each id's are `_byte_level_lengths`' count of them."""
    to_bytes = {ord(c): b for c, b in _byte_level_decoder().items()}
    vocab = tok.get_vocab(with_added_tokens=True)
    table = [b""] * (max(vocab.values()) + 1)
    for piece, idx in vocab.items():
        table[idx] = (piece.encode("utf-8") if piece in added
                      else piece.translate(to_bytes).encode("latin-1"))
    return np.frombuffer(b"".join(table), dtype=np.uint8)


@cache
def _byte_level_decoder() -> dict[str, int]:
    # GPT-2's byte-to-unicode map, inverted: printable bytes map to themselves, the rest
    # to 256+n.
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    decoder = {chr(b): b for b in keep}
    extra = 0
    for b in range(256):
        if b not in keep:
            decoder[chr(256 + extra)] = b
            extra += 1
    return decoder


@cache
def _byte_level_alphabet() -> frozenset[str]:
    return frozenset(_byte_level_decoder())


def _is_identity_normalizer(normalizer: Any) -> bool:
    if normalizer is None:
        return True
    if isinstance(normalizer, dict) and normalizer.get("type") == "Sequence":
        return all(_is_identity_normalizer(n) for n in normalizer.get("normalizers") or [])
    return False


def _has_position_dependent_step(spec: dict[str, Any]) -> bool:
    """True when a text's tokens depend on whether it starts the input (Metaspace "first")."""
    def walk(node: Any) -> bool:
        if isinstance(node, dict):
            if node.get("type") == "Metaspace" and node.get("prepend_scheme") == "first":
                return True
            return any(walk(v) for v in node.values())
        if isinstance(node, list):
            return any(walk(v) for v in node)
        return False
    return walk(spec.get("pre_tokenizer")) or walk(spec.get("normalizer"))


def _template_vars(config: dict[str, Any]) -> dict[str, Any]:
    """The special-token strings transformers passes to a chat template."""
    out: dict[str, Any] = {}
    for key in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                "mask_token"):
        value = config.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            out[key] = value
    extra = config.get("additional_special_tokens")
    if isinstance(extra, list):
        out["additional_special_tokens"] = [
            t.get("content") if isinstance(t, dict) else t for t in extra]
    return out


