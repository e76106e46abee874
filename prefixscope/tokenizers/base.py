"""What a tokenizer is to prefixscope: the `Tokenizer` interface every loader returns.

``encode(text)`` -> `Encoded` (uint32 ids, and the char offset where each token starts)
with the semantics of the serving engine: ``add_special_tokens=False``, added tokens in
the text recognized (vLLM tokenizes a rendered chat prompt so); ``decode(ids)``,
``added_tokens``, ``chat_template``, ``template_vars`` (the ``bos_token``/``eos_token``...
a template may reference), ``name``, and ``identity`` (a content hash of everything that
decides the ids, used to key the piece cache).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np


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


EMPTY = Encoded(np.zeros(0, dtype=np.uint32), np.zeros(0, dtype=np.int64))


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
    # Positions where its pre-tokenization provably always splits a text, so the text may
    # be tokenized in chunks cut there (`boundaries`); None: not proved for this one.
    chunk_boundary: re.Pattern[str] | None = None
    nfc: bool = False  # each stretch between added tokens is NFC-normalized first

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
    def byte_lengths(self) -> np.ndarray | None:
        """How many bytes each id spells, where `spelled` knows them (None: not known)."""
        return None

    def spelled(self, ids: np.ndarray) -> bytes | None:
        """The bytes `ids` spell, for a tokenizer whose every token spells the same bytes
        wherever it occurs and whose tokens of a text spell its UTF-8 bytes exactly
        (byte-level BPE with identity normalization); None where that is not known."""
        return None

    @property
    def added_token_ids(self) -> dict[str, int]:
        return {t.content: t.id for t in self.added_tokens}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


def char_starts(text_bytes: bytes, token_byte_lengths: np.ndarray) -> np.ndarray | None:
    """Char offset of each token from its byte length, when the tokens spell `text_bytes`.

    A token starting inside a multi-byte character gets that character's offset
    (as HF tokenizers and tiktoken's ``decode_with_offsets`` report it).
    """
    if int(token_byte_lengths.sum()) != len(text_bytes):
        return None
    if not len(token_byte_lengths):
        return EMPTY.starts
    byte_starts = np.cumsum(token_byte_lengths) - token_byte_lengths
    buf = np.frombuffer(text_bytes, dtype=np.uint8)
    lead_count = np.cumsum((buf & 0xC0) != 0x80)
    return (lead_count[byte_starts] - 1).astype(np.int64)


