"""Tokenizers from a local model directory (``tokenizer.json`` + ``tokenizer_config.json``
and/or ``chat_template.jinja``, as vLLM users have on disk), or from a Hugging Face id
whose files are already in the local HF cache. Nothing is ever downloaded."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import xxhash

from prefixscope.tokenizers.base import Tokenizer, TokenizerError
from prefixscope.tokenizers.diskcache import cache_dir
from prefixscope.tokenizers.files import first_line
from prefixscope.tokenizers.hf import HFTokenizer

_MODEL_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                "chat_template.json")


def load_directory(spec: str, folder: Path) -> Tokenizer:
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
                             f"{first_line(exc)}") from None


def _read_json(spec: str, file: Path) -> Any:
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TokenizerError(f"{spec}: {file.name} is not readable JSON: "
                             f"{first_line(exc)}") from None
    except RecursionError:  # the decoder recurses once per level
        raise TokenizerError(f"{spec}: {file.name} is not readable JSON: nested deeper than "
                             "Python's JSON decoder goes (a config is a few levels)") from None


def _check_template(spec: str, template: str) -> None:
    """Compile the chat template now, so a syntax error is one error, not one per request."""
    from jinja2 import TemplateError

    from prefixscope.tokenizers.jinja_env import compile_chat_template, name

    name(template, spec)  # a budget it runs past is named by the directory
    try:
        compile_chat_template(template)
    except TemplateError as exc:
        raise TokenizerError(f"{spec}: the chat template does not compile: "
                             f"{first_line(exc)}") from None


def _directory_template(spec: str, folder: Path, config: dict[str, Any]) -> str | None:
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        try:
            return jinja.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TokenizerError(f"{spec}: cannot read chat_template.jinja: "
                                 f"{first_line(exc)}") from None
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
        detail = first_line(exc).rstrip(": ")
        raise TokenizerError(f"{spec}: no tokenizer.json, and transformers could not build "
                             f"one from the directory's other files ({detail})") from None
    if backend is None:
        raise TokenizerError(f"{spec}: no tokenizer.json and no fast tokenizer to convert")
    folder_dir = cache_dir() / "tokenizers"
    folder_dir.mkdir(parents=True, exist_ok=True)
    out = folder_dir / f"{xxhash.xxh3_64_hexdigest(str(folder.resolve()).encode())}.json"
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    backend.save(str(tmp))
    os.replace(tmp, out)  # atomic: a concurrent run never reads half a file
    return out


def hf_cache_dir(repo_id: str) -> Path | None:
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
