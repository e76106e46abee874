"""A real Codex folder nobody here wrote (tests/data/real/codex-desktop/): six rollouts of
the Codex desktop app (0.104, `originator` "Codex Desktop", gpt-5.3-codex), free text
redacted by their publisher with every token count kept, and the totals the publisher's
own tool computed from them (`expected/codex-sessions.json` per session, `manifest.json`
for the UTC day). Those published figures are the oracle: prefixscope must count the same
prompt and cached tokens, and name Codex's own causes and fixes for a desktop-app log (its
originator does not start with ``codex_`` as the CLI's and the IDE extension's do).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prefixscope.cli.main import app

runner = CliRunner()


@pytest.fixture
def folder(real: Path) -> Path:
    return real / "codex-desktop"


def _json(*args: str) -> dict:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_every_session_counts_the_publishers_totals(folder: Path) -> None:
    published = json.loads((folder / "expected" / "codex-sessions.json").read_text())
    want = {s["id"]: (s["tokens"]["input"], s["tokens"]["cache_read"])
            for s in published["sessions"]}
    calls = _json("calls", str(folder / "sessions"))
    got = {s["session"]: (s["prompt_tokens"], s["cached_tokens"]) for s in calls["sessions"]}
    assert got == want
    assert calls["prompt_tokens"] == sum(i for i, _ in want.values())
    assert calls["cached_tokens"] == sum(c for _, c in want.values())
    assert sum(calls["by_cause"].values()) == calls["missed_tokens"] \
        == calls["prompt_tokens"] - calls["cached_tokens"]


def test_the_utc_day_counts_the_publishers_day_totals(folder: Path) -> None:
    totals = json.loads((folder / "manifest.json").read_text())["verification"]["token_totals"]
    calls = _json("calls", str(folder / "sessions"), "--since", "2026-02-23",
                  "--until", "2026-02-23")
    assert (calls["prompt_tokens"], calls["cached_tokens"]) == (totals["input"],
                                                                totals["cache_read"])


def test_a_desktop_app_log_gets_codex_causes_and_fixes(folder: Path) -> None:
    found = {f["kind"]: f for f in _json("report", str(folder / "sessions"))["findings"]}
    # the reasoning a new user turn drops is the API's doing, not a rewrite to undo
    rewrite = found["history-rewrite"]
    assert "dropped the reasoning" in rewrite["title"]
    assert rewrite["fix"].startswith("Nothing in the request to fix")
    assert "model_reasoning_effort" in found["settings-change"]["fix"]
    assert "`/compact`" in found["compaction"]["fix"]
    assert "Codex sends the conversation id" in found["provider-miss"]["fix"]
