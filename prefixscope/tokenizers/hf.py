"""Tokenizers from a Hugging Face ``tokenizer.json`` (the `tokenizers` library), with the
offsets and added-token semantics prefixscope needs (see `base.Tokenizer`).

What prefixscope derives from the file besides the Rust tokenizer (each token's byte
length and bytes, the added tokens, the normalizer and pre-tokenizer flags, the BPE
merges) is kept in the disk cache (`diskcache`) under the file's content hash: a warm
load parses no JSON in Python and walks no vocabulary.

The Rust tokenizer itself is deserialized on first use (0.25-0.4 s of CPU for DeepSeek's
6 MB file, a fifth of a small report: issue 37). A run whose texts the ASCII path takes
whole (`ascii_bpe`) never needs it: that path's BPE of each new word is `merges.MergeBPE`
(the library's algorithm, from the cached merges) until the library is loaded for
anything else or `_PYTHON_WORDS` words have been done in Python (a large run then loads
it, having paid little more: 7-8 us more a word in Python); and a single token's text,
all a diff decodes, comes from the cached bytes where the library's decode of every id
was checked equal when the cache entry was made. Every id is the library's either way
(the claims in `ascii_bpe` and `merges`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import numpy as np
import xxhash

from prefixscope.tokenizers import ascii_bpe, boundaries, merges, unicode_bpe
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
        raw = tokenizer_json.read_bytes()
        digest = xxhash.xxh3_128_hexdigest(raw)
        # the file's text until the library is loaded from it (`_tok`), then None
        self._json: str | None = raw.decode("utf-8")
        self._rust: Any = None
        self.name = name
        self.chat_template = chat_template
        self.bundled = bundled
        self.template_vars = _template_vars(config)
        self.identity = "hf:" + digest
        derived = _cached_derived(digest)
        cold = derived is None
        if derived is None:
            derived = _derive(self._tok, json.loads(raw))
            _save_derived(digest, derived)
        meta, byte_lengths = derived.meta, derived.byte_lengths
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
        # every id's bytes end to end, and where each starts (`spelled`): derived and
        # cached with the byte lengths
        self._spellings: tuple[np.ndarray, np.ndarray] | None = None
        if derived.spellings is not None and byte_lengths is not None:
            self._spellings = derived.spellings, np.cumsum(byte_lengths) - byte_lengths
        # decode([id]) from those bytes: checked equal to the library's for every id
        self._decode_single = bool(meta.get("decode_single")) and self._spellings is not None
        # ASCII text by one regular expression and a word cache (`ascii_bpe`, the proof
        # there), decided here too; its words' BPE in Python until the library is loaded
        unloaded = _Unloaded(self, meta, derived.merges)
        self._ascii_model = unloaded.model
        self._ascii = ascii_bpe.for_spec(
            meta["pre_tokenization"], unloaded,
            [t.content for t in self.added_tokens]) if byte_lengths is not None else None
        # the rest of its texts while the library is not loaded: made on first use
        self._pre_tokenization = meta["pre_tokenization"]
        self._unicode_bpe: unicode_bpe.UnicodeBPE | None = None
        if cold and self._ascii is not None and unicode_bpe.usable():
            # the class check the Python path needs (`unicode_bpe.classes_agree`, ~1 s
            # once, kept on disk) made on this cold load, so that the next run finds it
            # with the rest of the entry instead of paying it at its first such text
            unicode_bpe.classes_agree()

    def _unicode(self) -> unicode_bpe.UnicodeBPE | None:
        """The Python path for texts the ASCII path refuses (`unicode_bpe`), made at the
        first such text: where the ASCII path's claim holds, Python's Unicode database is
        one the claim reads and the installed `regex` classes its characters as the
        library does (else None: the library tokenizes them)."""
        if self._unicode_bpe is None and self._ascii is not None and unicode_bpe.usable() \
                and unicode_bpe.classes_agree():
            steps = self._pre_tokenization["pre_tokenizer"]["pretokenizers"]
            model = self._ascii_model
            self._unicode_bpe = unicode_bpe.UnicodeBPE(
                [step["pattern"]["Regex"] for step in steps[:-1]],
                {b: c for c, b in _byte_level_decoder().items()},
                [t.content for t in self.added_tokens],
                lambda word: [t.id for t in model.tokenize(word)])
        return self._unicode_bpe

    def warm(self) -> None:
        """Build now what this tokenizer builds at its first texts while the library is not
        loaded: the ASCII path's BPE of a word (`merges.MergeBPE`) and the Python path for
        the texts that path refuses (`_unicode`, `regex` imported with it). A pool forks its
        workers after this (`analyses.pool`): each built both at its first task (~0.04 s of
        CPU, and `regex` imported: a worker's first task 0.08 s); built here, they share
        this process's. Each is what the first use builds, from the same inputs: no id
        changes."""
        if self._ascii is not None and self._rust is None:
            self._ascii_model.warm()
        self._unicode()

    @property
    def _tok(self) -> Any:
        """The library's tokenizer, deserialized from the file on first use."""
        if self._rust is None:
            from tokenizers import Tokenizer as RustTokenizer

            assert self._json is not None
            self._rust = RustTokenizer.from_str(self._json)
            self._json = None
        return self._rust

    def encode(self, text: str) -> Encoded:
        return self.encode_many([text])[0]

    def encode_many(self, texts: Sequence[str]) -> list[Encoded]:
        """Encode several texts; the Rust side spreads a batch over all cores (ASCII texts
        of a DeepSeek-like tokenizer: `ascii_bpe`, here; the rest of its texts while the
        library is not loaded: `unicode_bpe`, here too)."""
        todo = [i for i, t in enumerate(texts) if t]
        out = [EMPTY] * len(texts)
        if self._ascii is not None and self._byte_lengths is not None:
            lengths, left = self._byte_lengths, []
            for i in todo:
                ids = self._ascii.array(texts[i])
                if ids is None:
                    left.append(i)
                    continue
                sizes = lengths[ids]  # ASCII: a byte is a character
                out[i] = Encoded(ids, np.cumsum(sizes) - sizes)
            todo = left
            if todo and self._rust is None and (unicode := self._unicode()) is not None:
                left = []
                for i in todo:
                    found = self._by_lines(texts[i], unicode)
                    starts = None if found is None else char_starts(
                        texts[i].encode("utf-8"), lengths[np.array(found, dtype=np.uint32)])
                    if found is None or starts is None:
                        left.append(i)
                    else:
                        out[i] = Encoded(np.array(found, dtype=np.uint32), starts)
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

    def _by_lines(self, text: str, unicode: unicode_bpe.UnicodeBPE) -> list[int] | None:
        """The library's ids of a text the ASCII path refused, part by part: cut at this
        tokenizer's proven boundaries (`chunk_boundary`, a line start with printable
        ASCII: ``ids(L + R) == ids(L) + ids(R)`` there, the proof in `boundaries`), each
        part's ids the ASCII path's where it takes the part, else `unicode_bpe`'s (a run of
        consecutive parts it refuses in one call: the run is cut at the same boundaries, so
        its ids are its parts' end to end); None where a run neither takes (an added
        token, an unassigned character: the whole text would be refused too). Each part's
        ids are the library's ids of that part (the claims in `ascii_bpe` and
        `unicode_bpe`), so end to end they are the library's ids of the text.

        Why: one arrow in a shell prompt or a terminal's backspaces in a tool's output
        sent the whole text (a piece-cache chunk, kilobytes of ASCII lines) through the
        three `regex` splits, at about four times the ASCII path's cost and without its
        kept lines (the raw bench captures, 0.2 GiB: 74 such texts, 226k characters,
        0.13 -> 0.035 s). The refused lines of a run go together: one `unicode_bpe` call a
        line cost a text of CJK or emoji lines (each starting with ASCII) 25-60% more
        than the whole text in one call."""
        boundary = self.chunk_boundary
        ascii_path = self._ascii
        if boundary is None or ascii_path is None:
            return unicode.ids(text)
        out: list[int] = []
        start = 0
        refused: int | None = None  # where the run of refused parts before `start` begins
        for end in [*(cut.start() for cut in boundary.finditer(text)), len(text)]:
            found = ascii_path.ids(text[start:end])
            if found is None:
                if refused is None:
                    refused = start
            else:
                if refused is not None:
                    run = unicode.ids(text[refused:start])
                    if run is None:
                        return None
                    out += run
                    refused = None
                out += found
            start = end
        if refused is not None:
            run = unicode.ids(text[refused:])
            if run is None:
                return None
            out += run
        return out

    def _slow(self, text: str) -> Encoded:
        enc = _library(self.name, lambda: self._tok.encode(text, add_special_tokens=False))
        ids = np.asarray(enc.ids, dtype=np.uint32)
        return Encoded(ids, np.fromiter((o[0] for o in enc.offsets), dtype=np.int64,
                                        count=len(ids)))

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        if self._decode_single and len(ids) == 1 and self._spellings is not None and \
                0 <= int(ids[0]) < len(self._spellings[1]):
            # the id's bytes, as the library decodes them (checked for every id: `_derive`)
            return self._spelling(int(ids[0])).decode("utf-8", "replace")
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)

    def _spelling(self, token: int) -> bytes:
        assert self._spellings is not None and self._byte_lengths is not None
        flat, starts = self._spellings
        start = int(starts[token])
        return flat[start:start + int(self._byte_lengths[token])].tobytes()

    @property
    def byte_lengths(self) -> np.ndarray | None:
        return self._byte_lengths

    def spelled(self, ids: np.ndarray) -> bytes | None:
        lengths = self._byte_lengths
        if lengths is None:  # not byte-level, or a normalizer: not known
            return None
        # derived (and cached) with the byte lengths: `_derive`
        assert self._spellings is not None
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


class _Derived(NamedTuple):
    """What prefixscope keeps of a tokenizer.json besides the Rust tokenizer."""

    meta: dict[str, Any]  # flags, added tokens, the BPE's single characters
    byte_lengths: np.ndarray | None  # each id's byte length (byte-level vocabularies)
    spellings: np.ndarray | None  # each id's bytes end to end (`_spellings`)
    merges: np.ndarray | None  # (left, right, new) id rows (`merges.merges_of`)


_ARRAYS = ("meta", "byte_lengths", "spellings", "merges")


def _derive(tok: Any, spec: dict[str, Any]) -> _Derived:
    """What prefixscope needs from a tokenizer.json besides the Rust tokenizer."""
    model = spec.get("model") or {}
    vocab = model.get("vocab")
    added = [[t["content"], int(t["id"]), bool(t.get("special")), bool(t.get("normalized")),
              bool(t.get("lstrip")), bool(t.get("rstrip")), bool(t.get("single_word"))]
             for t in spec.get("added_tokens") or []]
    meta = {
        "added_tokens": added,
        "identity_normalizer": _is_identity_normalizer(spec.get("normalizer")),
        "piece_safe": not _has_position_dependent_step(spec),
        # what `boundaries.for_hf` reads besides the added tokens
        "pre_tokenization": {
            "normalizer": spec.get("normalizer"), "pre_tokenizer": spec.get("pre_tokenizer"),
            "model": {k: v for k, v in model.items() if k not in ("vocab", "merges")}},
        # what `ascii_bpe.for_spec` reads of the library's tokenizer: as the file sets them
        "truncation": spec.get("truncation"), "padding": spec.get("padding"),
        # the model's one-character pieces: where `merges.MergeBPE` starts a word from
        "bpe_chars": {piece: idx for piece, idx in vocab.items() if len(piece) == 1}
        if isinstance(vocab, dict) else {},
    }
    lengths = _byte_level_lengths(tok, spec)
    spellings = None
    if lengths is not None:
        spellings = _spellings(tok, {t[0] for t in added})
        starts = np.cumsum(lengths) - lengths
        # decode([id]) may read these bytes only if that is the library's answer for
        # every id (its decoder's rules for added tokens, unknown ids, invalid UTF-8)
        meta["decode_single"] = all(
            flat.decode("utf-8", "replace") == text for flat, text in zip(
                (spellings[a:a + n].tobytes() for a, n in zip(starts.tolist(),
                                                              lengths.tolist(), strict=True)),
                tok.decode_batch([[i] for i in range(len(lengths))],
                                 skip_special_tokens=False), strict=True))
    return _Derived(meta, lengths, spellings, merges.merges_of(model))


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
        if not isinstance(meta.get("bpe_chars"), dict):  # an older release's entry
            return None
        lengths = arrays["byte_lengths"].astype(np.int64) if meta.get("byte_level") else None
        spellings, rows = arrays["spellings"], arrays["merges"]
        if meta.get("byte_level") and (
                spellings.dtype != np.uint8 or lengths is None
                or len(spellings) != int(lengths.sum())):
            return None
        if rows.dtype != np.int64 or rows.ndim != 2 or rows.shape[1] != 3:
            return None
        return _Derived(meta, lengths, spellings if meta.get("byte_level") else None,
                        rows if len(rows) else None)
    except (ValueError, KeyError, TypeError):  # a damaged entry: rebuilt by the caller
        return None


def _save_derived(digest: str, derived: _Derived) -> None:
    meta, lengths, spellings, rows = derived
    text = json.dumps({**meta, "byte_level": lengths is not None}).encode("utf-8")
    save_arrays("hf", digest, {
        "meta": np.frombuffer(text, dtype=np.uint8),
        "byte_lengths": lengths if lengths is not None else np.zeros(0, dtype=np.int64),
        "spellings": spellings if spellings is not None else np.zeros(0, dtype=np.uint8),
        "merges": rows if rows is not None else np.zeros((0, 3), dtype=np.int64)})


class _Unloaded:
    """What `ascii_bpe.for_spec` reads of a library tokenizer (its truncation, padding
    and model), before the library is loaded: the values the file sets, and a model
    whose BPE of a word is `merges.MergeBPE`'s while the library is not loaded (the
    same ids: the claim in `merges`), the library's after."""

    def __init__(self, owner: HFTokenizer, meta: dict[str, Any],
                 rows: np.ndarray | None) -> None:
        self.truncation = meta.get("truncation")
        self.padding = meta.get("padding")
        self.model = _WordModel(owner, rows, meta["bpe_chars"])


# Words whose BPE is done in Python before the library is loaded instead: ~7.7 us more
# a word than the library's (10.6 against 2.9 on DeepSeek's vocabulary). The small logs
# measured need 1.5-5.4k (sample_logs/, the 6 x 40 sessions of `diff --all`); a large run
# past 16k has paid ~0.12 s more than loading the library at once (the load: 0.25-0.4 s).
_PYTHON_WORDS = 1 << 14


class _WordModel:
    """``tokenize(word)``: a word's BPE as the library's model gives it (`_Unloaded`)."""

    def __init__(self, owner: HFTokenizer, rows: np.ndarray | None,
                 chars: dict[str, int]) -> None:
        self._owner = owner
        self._rows = rows
        self._chars = chars
        self._bpe: merges.MergeBPE | None = None
        self._left = _PYTHON_WORDS if rows is not None else 0
        self._library: Any = None

    def warm(self) -> None:
        """Build the Python BPE `tokenize` builds at its first word, while it would."""
        if self._left > 0:
            self._python_bpe()

    def _python_bpe(self) -> merges.MergeBPE:
        """The Python BPE of a word, built at its first use (`_left` > 0: `_rows` given)."""
        if self._bpe is None:
            assert self._rows is not None
            self._bpe = merges.MergeBPE(self._rows, self._chars)
        return self._bpe

    def tokenize(self, word: str) -> Any:
        if self._left > 0 and self._owner._rust is None:
            found = self._python_bpe().tokenize(word)
            if found is not None:
                self._left -= 1
                return found
        if self._library is None:
            self._library = self._owner._tok.model
        return self._library.tokenize(word)


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


