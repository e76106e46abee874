"""--tokenizer auto: the model's family picks the tokenizer; anything else is a stand-in that
says so. The OpenAI vocabulary is checked against the bpe-openai package's own encoder."""

from __future__ import annotations

import json

import bpe_openai
import pytest
from _render_helpers import make_request
from conftest import FIXTURES
from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.prompt import RenderOptions, render
from prefixscope.tokenizers import TokenizerChoice, choose_tokenizer, load_tokenizer

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


# Every OpenAI model name found in real logs (the real data, the fixtures and the sample
# logs of this repo, and the Codex CLI rollouts of several versions); the oracle is
# tiktoken's own model table (offline: a table in the package, no download).
REAL_OPENAI_NAMES = [
    "gpt-5.1-codex-max", "gpt-5-codex", "gpt-5.2-codex", "gpt-5.3-codex", "gpt-5.4",
    "gpt-5.2", "gpt-5", "gpt-5-mini", "gpt-5-mini-2025-08-07", "openai/gpt-5-mini",
    "gpt-4o", "gpt-4o-mini", "gpt-4o-2024-08-06", "gpt-4.1", "gpt-4.1-mini",
    "gpt-4.1-2025-04-14", "o3", "o4-mini", "o1-preview", "chatgpt-4o-latest",
    "gpt-oss-120b", "gpt-3.5-turbo", "gpt-4-turbo", "gpt-4-0613",
    "aide-gpt-5",  # a gateway's alias (a real Codex CLI 0.39 rollout)
]


@pytest.mark.parametrize("model", REAL_OPENAI_NAMES)
def test_an_openai_model_is_counted_with_its_own_vocabulary_as_tiktoken_maps_it(
        model: str) -> None:
    import tiktoken.model

    name = model.split("/")[-1].removeprefix("aide-")  # tiktoken knows the model, not the alias
    own = tiktoken.model.encoding_name_for_model(name).startswith("o200k")
    choice = choose_tokenizer("auto", model)
    assert choice.spec == "o200k-harmony"
    assert (choice.stand_in is None) == own, (model, choice)


def test_codex_mini_is_o4_minis_vocabulary() -> None:
    # tiktoken's table has no entry; OpenAI describes codex-mini-latest as a fine-tuned
    # o4-mini, which the table maps to o200k_base
    import tiktoken.model

    assert tiktoken.model.encoding_name_for_model("o4-mini") == "o200k_base"
    assert choose_tokenizer("auto", "codex-mini-latest") == TokenizerChoice("o200k-harmony")


@pytest.mark.parametrize("alias", ["sonnet", "opus", "haiku", "opus[1m]"])
def test_claude_codes_model_aliases_are_claude(alias: str) -> None:
    assert choose_tokenizer("auto", alias).stand_in == "Claude's tokenizer is not public"


def test_a_codex_rollout_of_gpt_5_1_codex_max_is_not_approximate(tmp_path) -> None:
    rollout = next((FIXTURES / "codex" / "handmade").rglob("rollout-*.jsonl"))
    text = rollout.read_text()
    assert '"model":"gpt-5-codex"' in text
    log = tmp_path / rollout.name
    log.write_text(text.replace('"model":"gpt-5-codex"', '"model":"gpt-5.1-codex-max"'))
    result = runner.invoke(app, ["report", str(log)])
    assert result.exit_code == 0, result.stderr
    assert "approximate" not in result.stdout + result.stderr
    simulated = json.loads(runner.invoke(app, ["simulate", str(log), "--json"]).stdout)
    assert simulated["requests"] == 3 and simulated["approximate_requests"] == 0
    diffed = json.loads(runner.invoke(app, ["diff", "--all", str(log), "--json"]).stdout)
    assert diffed["pairs"] and not any(p["approximate"] for p in diffed["pairs"])


@pytest.mark.parametrize(("model", "spec"), [
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


def test_a_gpt_5_request_is_counted_with_its_own_vocabulary_in_harmonys_wrapper() -> None:
    body = {"model": "gpt-5-mini", "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Say hi."}]}
    prompt = render(make_request(body, model="gpt-5-mini"), RenderOptions())
    assert prompt.tokenizer == "o200k-harmony" and not prompt.approximate
    assert prompt.text == ("<|start|>developer<|message|># Instructions\n\nYou are terse.<|end|>"
                           "<|start|>user<|message|>Say hi.<|end|><|start|>assistant")
    assert not any("stand-in" in note for note in prompt.notes)


def test_a_gpt_4_request_is_a_stand_in_saying_its_vocabulary() -> None:
    body = {"model": "gpt-4-turbo", "messages": [{"role": "user", "content": "Say hi."}]}
    prompt = render(make_request(body, model="gpt-4-turbo"), RenderOptions())
    assert prompt.approximate
    assert any("cl100k_base" in note for note in prompt.notes)


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
