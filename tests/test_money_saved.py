"""What the cache saved, both ways and labelled: the reads' saving against the input
price, and net of what the writes cost beyond the input price; by hand from Claude Opus
4.5's list prices (input $5 / MTok, 5-minute write $6.25, 1-hour write $10, read $0.50)
on a hand-built Claude Code transcript (usage only)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_ttl_money import report, transcript
from typer.testing import CliRunner

from prefixscope.cli.main import app

INPUT, W5, W1H, READ = 5.0, 6.25, 10.0, 0.50


def session(tmp_path: Path) -> Path:
    # (time, uncached input, read, 5-minute write, 1-hour write); reads on no block
    # multiple, so the log reads as a hosted API's, not a self-hosted engine's
    return transcript(tmp_path / "s.jsonl", [
        ("2026-03-02T10:00:00Z", 3, 0, 20_000, 10_003),
        ("2026-03-02T10:01:00Z", 3, 30_003, 4_001, 0),
        ("2026-03-02T10:02:00Z", 3, 34_004, 0, 1_001)])


def test_saved_is_gross_and_net_of_the_write_premium(tmp_path: Path) -> None:
    money = report(str(session(tmp_path)))["summary"]["money"]
    assert money["priced_requests"] == 3
    reads = 30_003 + 34_004
    gross = reads * (INPUT - READ) / 1e6  # 0.2880315
    premium = (24_001 * (W5 - INPUT) + 11_004 * (W1H - INPUT)) / 1e6  # 0.03000125 + 0.05502
    assert money["saved_usd"] == pytest.approx(gross, abs=1e-6)
    assert money["write_premium_usd"] == pytest.approx(premium, abs=1e-6)
    assert money["net_saved_usd"] == pytest.approx(gross - premium, abs=1e-6)  # 0.2030103


def test_the_terminal_labels_both(tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["report", str(session(tmp_path))]).stdout
    # 0.2880315, 0.2030103 and 0.08502125 to the cent
    assert "the cache reads saved $0.29, $0.20 net of the $0.09 write premium" in out, out
