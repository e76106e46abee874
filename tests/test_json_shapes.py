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
    "bucket": {"groups", "totals", "by", "block_size", "block_size_source", "notes"},
    "bucket.groups[]": {"key", "requests", "prompt_tokens", "cached_tokens", "hit_rate",
                        "mean_request_hit_rate", "zero_cached", "histogram",
                        "fraction_histogram", "block_size", "spikes", "notes"},
    "bucket.spikes[]": {"cached_tokens", "requests", "share", "blocks", "boundary",
                        "explanation"},
    "bucket.boundary": {"segment_before", "segment_after", "token", "requests", "rendered",
                        "distinct_after"},
    "bucket.totals": {"requests", "prompt_tokens", "cached_tokens", "hit_rate",
                      "without_usage"},
    "segments": {"segments", "totals"},
    "segments.segments[]": {"segment", "kind", "requests", "distinct", "pairs", "change_rate",
                            "unique_per_request", "change_kinds", "token_start_median",
                            "tokens_after_median", "invalidated_tokens", "preview"},
    "segments.totals": {"requests", "pairs", "segments", "without_body", "hash_version"},
}
SAMPLE = str(ROOT / "sample_logs" / "langfuse-claude-code.events_full.jsonl")


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


def test_bucket_shape():
    out = run_json("bucket", SAMPLE, "--by", "endpoint")
    assert set(out) == SHAPES["bucket"]
    assert set(out["totals"]) == SHAPES["bucket.totals"]
    group = out["groups"][0]
    assert set(group) == SHAPES["bucket.groups[]"]
    spike = group["spikes"][0]
    assert set(spike) == SHAPES["bucket.spikes[]"]
    assert set(spike["boundary"]) == SHAPES["bucket.boundary"]
    assert set(group["histogram"][0]) == {"lo", "hi", "requests"}


def test_segments_shape():
    out = run_json("segments", SAMPLE)
    assert set(out) == SHAPES["segments"]
    assert set(out["totals"]) == SHAPES["segments.totals"]
    assert {frozenset(s) for s in out["segments"]} == {frozenset(SHAPES["segments.segments[]"])}
    grouped = run_json("segments", SAMPLE, "--by", "endpoint")
    assert set(grouped) == {"groups", "by", "totals"}
    assert set(grouped["groups"][0]) == {"key", "segments", "totals"}


def test_every_locked_key_is_documented():
    for name, keys in SHAPES.items():
        doc = section(name.split(".", 1)[0])
        for key in keys:
            assert f'"{key}"' in doc or f"`{key}`" in doc, f"{name}.{key} not in docs/json.md"
