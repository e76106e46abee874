"""The model's own tokenizer and chat template, loaded offline (bundled, model directory,
or the local Hugging Face cache). Below `prompt` (which renders with the template) and
`tokens` (which counts with the vocabulary)."""

from prefixscope.tokenizers.loading import (
    BUNDLED,
    DEFAULT_TOKENIZER,
    Tokenizer,
    TokenizerError,
    load_tokenizer,
)

__all__ = ["BUNDLED", "DEFAULT_TOKENIZER", "Tokenizer", "TokenizerError", "load_tokenizer"]
