"""--tokenizer auto: the model's family picks the tokenizer; anything else is a stand-in that
says so. The OpenAI vocabulary is checked against the bpe-openai package's own encoder."""

from __future__ import annotations

import json

import bpe_openai
import pytest
from _render_helpers import make_request
from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.prompt import RenderOptions, render
from prefixscope.tokenizers import choose_tokenizer, load_tokenizer

runner = CliRunner()


@pytest.mark.parametrize(("model", "spec"), [
    ("deepseek-v4-flash-0731", "deepseek-v4"),
    ("deepseek-chat", "deepseek-v4"),
    ("qwen3.6-35b-a3b", "qwen3.6"),
    ("Qwen/Qwen3.5-9B", "qwen3.6"),
    ("Qwen/Qwen2.5-Coder-32B-Instruct", "qwen2.5"),
    ("qwen2-72b", "qwen2.5"),
])
def test_a_known_family_gets_its_own_tokenizer(model: str, spec: str) -> None:
    assert choose_tokenizer("auto", model) == (choose_tokenizer(spec, None))
    assert choose_tokenizer("auto", model).spec == spec


@pytest.mark.parametrize(("model", "spec"), [
    ("gpt-5-mini-2025-08-07", "o200k-harmony"),
    ("openai/gpt-4o", "o200k-harmony"),
    ("o3-mini", "o200k-harmony"),
    ("qwen3-coder-480b-a35b-instruct", "qwen2.5"),
    ("claude-sonnet-4-5-20250929", "deepseek-v4"),
    ("gemini-2.5-pro", "deepseek-v4"),
    ("llm-prime", "deepseek-v4"),
    (None, "deepseek-v4"),
])
def test_other_models_get_a_stand_in_with_a_reason(model: str | None, spec: str) -> None:
    choice = choose_tokenizer("auto", model)
    assert choice.spec == spec
    assert choice.stand_in


def test_an_explicit_tokenizer_is_never_a_stand_in() -> None:
    assert choose_tokenizer("qwen2.5", "gpt-5-mini").stand_in is None


@pytest.mark.parametrize("text", [
    "Hello world", "  leading spaces and\ttabs\n\nnew lines", "def f(x):\n    return x**2\n",
    "数字 12345 和 Ünïcödé", "emoji 👩‍👩‍👧 and <|endoftext|> as text", "a" * 3000,
])
def test_the_openai_vocabulary_matches_bpe_openai(text: str) -> None:
    ours = load_tokenizer("o200k-harmony").encode(text)
    oracle = bpe_openai.get_encoding("o200k_base").encode(text, allowed_special="all")
    assert ours.ids.tolist() == list(oracle)
    assert ours.starts[0] == 0 and all(ours.starts[1:] >= ours.starts[:-1])


def test_a_gpt_request_is_counted_with_o200k_and_marked_approximate() -> None:
    body = {"model": "gpt-5-mini", "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Say hi."}]}
    prompt = render(make_request(body, model="gpt-5-mini"), RenderOptions())
    assert prompt.tokenizer == "o200k-harmony" and prompt.approximate
    assert prompt.text == ("<|start|>developer<|message|># Instructions\n\nYou are terse.<|end|>"
                           "<|start|>user<|message|>Say hi.<|end|><|start|>assistant")
    assert any("stand-in" in note for note in prompt.notes)


def test_render_warns_about_a_stand_in_on_stderr(tmp_path) -> None:
    body = tmp_path / "body.json"
    body.write_text(json.dumps({"model": "claude-sonnet-4", "messages": [
        {"role": "user", "content": "hi"}]}))
    result = runner.invoke(app, ["render", str(body), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["approximate"] is True
    explicit = runner.invoke(app, ["render", str(body), "--json", "--gateway", "passthrough",
                                   "--tokenizer", "qwen2.5"])
    assert explicit.exit_code == 0, explicit.output


def test_a_pair_sent_to_two_models_reuses_nothing() -> None:
    from prefixscope.analyses.diff import diff_requests

    body_a = {"messages": [{"role": "user", "content": "what's 1+1?"}]}
    body_b = {"messages": [*body_a["messages"], {"role": "assistant", "content": "2"},
                           {"role": "user", "content": "and 2+2?"}]}
    a = make_request(body_a, id="a", model="deepseek-v4-flash")
    b = make_request(body_b, id="b", model="gpt-4o")
    pair = diff_requests(a, b, RenderOptions(), block_size=16)
    assert (pair.cause, pair.reusable_tokens) == ("model-change", 0)
    assert pair.lost_tokens == pair.tokens_a // 16 * 16  # every full block of A, hand arithmetic
