"""OpenAI's retention in the ledger (issue 35): in-memory prefixes last 5-10 minutes idle,
up to an hour off-peak; ``prompt_cache_retention: "24h"`` keeps them up to a day. A raw
capture's body that asks for 24 hours makes the next call's pause judged against a day.

Built from the first two calls of tests/fixtures/raw/verdicts_openai_responses.jsonl (a
2,214-token prompt, then 2,232 extending it), with the second call two hours later and
nothing read. By hand, X = floor(min(2,214, 2,231) / 128) * 128 = 2,176; [2,176, 2,214)
is rounding 38, [2,214, 2,232) new 18, and the shortfall [0, 2,176) is
- in memory: a pause of 7,200 s > 600 s with nothing read (0 < 2,176 / 2): ttl 2,176;
- 24 hours: 7,200 s < 86,400 s: the prefix should have lived: provider 2,176.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from prefixscope.cli.main import app

runner = CliRunner()
SOURCE = FIXTURES / "raw" / "verdicts_openai_responses.jsonl"


def _capture(tmp_path: Path, retention: str | None) -> Path:
    first, second = [json.loads(x) for x in SOURCE.read_text().splitlines()[:2]]
    for line in (first, second):
        line["response"].pop("prompt_cache_diagnostics", None)
        line["request"].pop("prompt_cache_options", None)
        if retention is not None:
            line["request"]["prompt_cache_retention"] = retention
    second["timestamp"] = "2026-06-01T12:00:00.000Z"
    second["response"]["created_at"] = first["response"]["created_at"] + 7200
    second["response"]["usage"]["input_tokens_details"]["cached_tokens"] = 0
    path = tmp_path / "capture.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in (first, second)))
    return path


@pytest.mark.parametrize(("retention", "shortfall"), [
    (None, "ttl"), ("in_memory", "ttl"), ("24h", "provider")])
def test_the_pause_is_judged_by_the_retention_asked_for(
        tmp_path: Path, retention: str | None, shortfall: str) -> None:
    result = runner.invoke(app, ["report", str(_capture(tmp_path, retention)), "--json"])
    assert result.exit_code == 0, result.output
    by = json.loads(result.stdout)["ledger"]["by_cause"]
    losses = {k: v for k, v in by.items() if k not in ("cold", "new", "rounding", "break")}
    assert {k: v for k, v in losses.items() if v} == {shortfall: 2176}
    assert (by["cold"], by["new"], by["rounding"]) == (2214, 18, 38)
