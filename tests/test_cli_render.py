"""`prefixscope render` from the CLI: store ids, body files, logs, profiles, errors."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES
from factories import anthropic_body, conversation
from typer.testing import CliRunner

from prefixscope.cli.main import app

runner = CliRunner()


def render_json(*args: str) -> dict:
    result = runner.invoke(app, ["render", *args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


OPENAI_WITH_NOTE = {"model": "m", "messages": [
    {"role": "system", "content": "You are an agent."},
    {"role": "user", "content": "start"},
    {"role": "assistant", "content": "ok"},
    {"role": "system", "content": "Note: 3 steps left."},
    {"role": "user", "content": "go on"}]}


@pytest.mark.parametrize("tokenizer", ["deepseek-v4", "qwen3.6", "qwen2.5"])
@pytest.mark.parametrize("gateway,body,approximate", [
    ("anthropic-to-openai", anthropic_body(conversation(2)), False),
    ("passthrough", anthropic_body(conversation(2)), True),
    ("hoist-system-messages", OPENAI_WITH_NOTE, False),
    ("passthrough", OPENAI_WITH_NOTE, False),
])
def test_body_file_under_every_profile_and_tokenizer(tmp_path, gateway, body, approximate,
                                                     tokenizer):
    path = tmp_path / "body.json"
    path.write_text(json.dumps(body))
    out = render_json(str(path), "--gateway", gateway, "--tokenizer", tokenizer)
    assert out["gateway"] == gateway and out["tokenizer"] == tokenizer
    assert out["tokens"] > 0
    spans = [(s["char_start"], s["char_end"]) for s in out["segments"]]
    assert spans[0][0] == 0 and all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
    # passthrough of an Anthropic body renders through a proxy: counts are approximate
    assert out["approximate"] == approximate


def test_billing_header_joined_into_system_zero():
    body = FIXTURES / "raw" / "pairs" / "01.request.json"
    out = render_json(str(body), "--gateway", "anthropic-to-openai", "--show-text")
    system0 = [s for s in out["segments"] if s["segment"] == "system[0]"]
    assert len(system0) == 1
    text = out["text"][system0[0]["char_start"]:system0[0]["char_end"]]
    assert text.startswith("x-anthropic-billing-header:")
    stripped = render_json(str(body), "--gateway", "anthropic-to-openai",
                           "--what-if", "strip-billing-header", "--show-text")
    assert "x-anthropic-billing-header" not in stripped["text"]
    assert stripped["tokens"] < out["tokens"]


@pytest.mark.slow
def test_request_from_logs_and_from_store():
    capture = str(FIXTURES / "raw" / "openai_chat_capture.jsonl")
    runner.invoke(app, ["ingest", capture, "--store", "s.duckdb"], catch_exceptions=False)
    rid = json.loads(runner.invoke(app, ["sql", "select id from requests order by source_line "
                                         "limit 1", "--store", "s.duckdb", "--json"]
                                   ).stdout)[0]["id"]
    from_store = render_json(rid[:10], "--store", "s.duckdb")
    from_logs = render_json(rid, capture)
    assert from_store["tokens"] == from_logs["tokens"] and from_store["request"] == rid
    human = runner.invoke(app, ["render", rid, "--store", "s.duckdb"])
    assert human.exit_code == 0 and "tokens" in human.stdout and "template" in human.stdout


def test_errors_are_one_line():
    result = runner.invoke(app, ["render", "nope", "--store", "missing.duckdb"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    result = runner.invoke(app, ["render", str(FIXTURES / "raw" / "pairs" / "01.request.json"),
                                 "--gateway", "bogus"])
    assert result.exit_code == 2 and "bogus" in result.stderr  # a bad option: usage error
    result = runner.invoke(app, ["render", str(FIXTURES / "raw" / "pairs" / "01.request.json"),
                                 "--tokenizer", "/nonexistent/model"])
    assert result.exit_code == 1 and result.stderr.count("\n") == 1


class TestExactText:
    """Piped, --show-text is the prompt byte for byte; on a terminal, log control
    sequences are shown, not obeyed."""

    def test_piped_show_text_is_the_prompt_exactly(self, tmp_path):
        body = {"model": "deepseek-chat", "messages": [
            {"role": "system", "content": "cols:\ta\tb\n" + "x" * 500},
            {"role": "user", "content": "line one\n\tindented " + "y " * 300}]}
        path = tmp_path / "body.json"
        path.write_text(json.dumps(body))
        piped = runner.invoke(app, ["render", str(path), "--show-text"])
        assert piped.exit_code == 0, piped.output
        as_json = runner.invoke(app, ["render", str(path), "--show-text", "--json"])
        text = json.loads(as_json.stdout)["text"]
        assert piped.stdout == text  # no tab expansion, no wrapping, nothing added
        assert "\t" in piped.stdout and max(map(len, text.splitlines())) > 200

    def test_the_terminal_view_neutralises_control_sequences(self):
        from prefixscope.analyses.prompt_spans import RenderResult, SegmentRow
        from prefixscope.views.terminal import Screen
        from prefixscope.views.terminal.render import render_screen

        text = "ok \x1b[2J\x1b]0;pwned\x07 done"
        result = RenderResult("r", "passthrough", "default", "deepseek-v4", 3, False,
                              (SegmentRow("messages[0].content", "message", 0, len(text), 0, 3),),
                              text, (), "exact", "r1", ())
        screen = render_screen(result, True, Screen())
        shown = "".join(str(obj) for objects, _ in screen.calls for obj in objects)
        assert "\x1b" not in shown and "\x07" not in shown
        assert "\\x1b[2J" in shown
