"""The documented JSON shapes (docs/json.md) are what the commands print: keys locked."""

from __future__ import annotations

import json
import re

from conftest import FIXTURES, ROOT
from typer.testing import CliRunner

from prefixscope.cli.main import app

runner = CliRunner()
CAPTURE = str(FIXTURES / "raw" / "claude_code_capture.jsonl")

SHAPES = {
    "ingest": {"ingested", "already_present", "skipped", "by_format", "sessions", "files",
               "errors", "unrecognized", "empty"},
    "render": {"request", "gateway", "tokenizer", "tokens", "approximate", "segments"},
    "render.segments[]": {"segment", "kind", "char_start", "char_end", "token_start",
                          "token_end"},
    "diff": {"pairs", "totals", "gateway", "tokenizer", "what_if", "block_size_source"},
    "diff.pairs[]": {"a", "b", "session", "tokens_a", "tokens_b", "first_divergence",
                     "block_size", "reusable_tokens", "lost_tokens", "cause", "detail",
                     "approximate"},
    "diff.first_divergence": {"token", "char_a", "char_b", "segment", "text_a", "text_b",
                              "token_a", "token_b"},
    "diff.totals": {"pairs", "lost_tokens", "by_cause", "skipped", "skipped_reasons"},
}


def run_json(*args: str) -> dict:
    result = runner.invoke(app, [*args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def section(command: str) -> str:
    text = (ROOT / "docs" / "json.md").read_text()
    match = re.search(rf"## `prefixscope {command} --json`\n(.*?)(?=\n## |\Z)", text, re.S)
    assert match, f"docs/json.md has no section for {command}"
    return match.group(1)


def test_ingest_shape():
    out = run_json("ingest", CAPTURE, "--store", "s.duckdb")
    assert set(out) == SHAPES["ingest"]


def test_render_shape():
    runner.invoke(app, ["ingest", CAPTURE, "--store", "s.duckdb"])
    rid = json.loads(runner.invoke(app, ["sql", "select id from requests limit 1", "--store",
                                         "s.duckdb", "--json"]).stdout)[0]["id"]
    out = run_json("render", rid, "--store", "s.duckdb")
    assert set(out) == SHAPES["render"]
    assert {frozenset(s) for s in out["segments"]} == {frozenset(SHAPES["render.segments[]"])}
    with_text = run_json("render", rid, "--store", "s.duckdb", "--show-text")
    assert set(with_text) == SHAPES["render"] | {"text"}


def test_diff_shape():
    out = run_json("diff", "--all", CAPTURE, "--gateway", "anthropic-to-openai")
    assert set(out) == SHAPES["diff"]
    assert set(out["totals"]) == SHAPES["diff.totals"]
    for pair in out["pairs"]:
        assert set(pair) == SHAPES["diff.pairs[]"]
        assert set(pair["first_divergence"]) == SHAPES["diff.first_divergence"]


def test_every_locked_key_is_documented():
    for name, keys in SHAPES.items():
        doc = section(name.split(".", 1)[0])
        for key in keys:
            assert f'"{key}"' in doc or f"`{key}`" in doc, f"{name}.{key} not in docs/json.md"
