"""The TTL decision in dollars and in advice, end to end through `prefixscope report --json`
on hand-built Claude Code transcripts (usage only), every figure computed by hand from
Claude Opus 4.5's list prices: input $5 / MTok, 5-minute write $6.25, 1-hour write $10,
cache read $0.50 (docs/report.md#money)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from prefixscope.cli.main import app

runner = CliRunner()
W5, W1H, READ = 6.25, 10.0, 0.50  # Opus 4.5, dollars per million tokens


def transcript(path: Path, turns: list[tuple[str, int, int, int, int]]) -> Path:
    """Claude Code assistant lines, one per (time, input_tokens, cache read, 5-minute
    write, 1-hour write), the writes split the way Claude Code logs them
    (``cache_creation.ephemeral_5m_input_tokens`` / ``ephemeral_1h_input_tokens``)."""
    lines = []
    for n, (at, uncached, read, five, hour) in enumerate(turns):
        lines.append(json.dumps({
            "type": "assistant", "timestamp": at, "sessionId": "sess-1", "uuid": f"u{n}",
            "parentUuid": f"u{n - 1}" if n else None, "requestId": f"req_{n}",
            "message": {"id": f"msg_{n}", "role": "assistant", "model": "claude-opus-4-5",
                        "content": [{"type": "text", "text": "ok"}],
                        "usage": {"input_tokens": uncached, "cache_read_input_tokens": read,
                                  "cache_creation_input_tokens": five + hour,
                                  "cache_creation": {"ephemeral_5m_input_tokens": five,
                                                     "ephemeral_1h_input_tokens": hour},
                                  "output_tokens": 100}}}))
    path.write_text("\n".join(lines) + "\n")
    return path


def report(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["report", *args, "--json"])
    assert result.exit_code == 0, result.output + result.stderr
    return json.loads(result.stdout)


def what_ifs(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {w["name"]: w for w in doc["what_if"]}


def ttl_finding(doc: dict[str, Any]) -> dict[str, Any]:
    (f,) = [f for f in doc["findings"] if f["kind"] == "ttl-expiry"]
    return f


def paused(tmp_path: Path, pause: str) -> Path:
    """A 100,000-token prefix written at 10:00, the next turn after `pause` (10:MM) finds it
    expired (re-writes 99,998 + 1,000 new + the 2 the breakpoint left), a warm turn 1
    minute later. 5-minute writes only: W = 100,000 + 101,000 + 1,002 = 202,002."""
    hh, mm = pause.split(":")
    later = f"{int(hh):02d}:{int(mm) + 1:02d}" if int(mm) < 59 else f"{int(hh) + 1:02d}:00"
    return transcript(tmp_path / "s.jsonl", [
        ("2026-03-02T10:00:00Z", 0, 0, 100_000, 0),
        (f"2026-03-02T{pause}:00Z", 0, 0, 101_000, 0),
        (f"2026-03-02T{later}:00Z", 0, 100_998, 1_002, 0)])


class TestOneHourMoney:
    def test_the_re_writes_it_avoids_pay_no_premium_and_it_pays(self, tmp_path: Path):
        doc = report(str(paused(tmp_path, "10:10")))  # a 10-minute pause
        assert doc["ledger"]["by_cause"]["ttl"] == 99_998
        hour = what_ifs(doc)["ttl-1h"]
        # saved: 99,998 tokens read at $0.50 instead of written at $6.25
        assert hour["saved_usd"] == pytest.approx(99_998 * (W5 - READ) / 1e6, abs=1e-6)
        # cost: the premium on the writes it still makes, 202,002 - 99,998 = 102,004
        assert hour["cost_usd"] == pytest.approx(102_004 * (W1H - W5) / 1e6, abs=1e-6)
        # net = 0.5749885 - 0.382515 = +0.1924735 (charging the premium on all 202,002
        # writes would have said -0.1825)
        assert hour["net_usd"] == pytest.approx(0.1924735, abs=1e-6)
        # 99,998 / 202,002 = 49.5% of the 5-minute writes were re-writes; break-even
        # (10 - 6.25) / (10 - 0.50) = 39.5%
        assert "49.5% of the 5-minute writes" in hour["detail"]
        assert "39.5% would break even" in hour["detail"]
        assert "it pays (net $0.19)" in hour["detail"]

    def test_a_pause_past_the_hour_is_not_kept_and_every_write_pays_the_premium(
            self, tmp_path: Path):
        doc = report(str(paused(tmp_path, "12:00")))  # a 2-hour pause
        hour = what_ifs(doc)["ttl-1h"]
        assert hour["saved_usd"] == 0
        assert hour["cost_usd"] == pytest.approx(202_002 * (W1H - W5) / 1e6, abs=1e-6)
        assert "0.0% of the 5-minute writes" in hour["detail"]
