"""Rendered prompts -> token ids with per-segment spans, through a piece cache that
tokenizes each distinct piece of text once; `Turns` renders and tokenizes a session's
requests each from its predecessor's."""

from prefixscope.tokens.tokenize import (
    PieceCache,
    Tokens,
    common_prefix_length,
    piece_cache,
    tokens,
    tokens_many,
)
from prefixscope.tokens.turns import Turns

__all__ = ["PieceCache", "Tokens", "Turns", "common_prefix_length", "piece_cache", "tokens",
           "tokens_many"]
