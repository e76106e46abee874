"""Rendered prompts -> token ids with per-segment spans, through a piece cache that
tokenizes each distinct piece of text once."""

from prefixscope.tokens.tokenize import (
    PieceCache,
    Tokens,
    common_prefix_length,
    piece_cache,
    tokens,
    tokens_many,
)

__all__ = ["PieceCache", "Tokens", "common_prefix_length", "piece_cache", "tokens",
           "tokens_many"]
