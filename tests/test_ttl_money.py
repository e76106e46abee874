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
        assert ("re-writes after 5-60 minutes: the 1-hour TTL pays when more than 39.5% of "
                "them are") in hour["detail"]
        assert "it pays (net $0.19)" in hour["detail"]

    def test_a_pause_past_the_hour_is_not_kept_and_every_write_pays_the_premium(
            self, tmp_path: Path):
        doc = report(str(paused(tmp_path, "12:00")))  # a 2-hour pause
        hour = what_ifs(doc)["ttl-1h"]
        assert hour["saved_usd"] == 0
        assert hour["cost_usd"] == pytest.approx(202_002 * (W1H - W5) / 1e6, abs=1e-6)
        assert "0.0% of the 5-minute writes" in hour["detail"]


class TestTheFixFollowsThePrices:
    """The ttl-expiry finding's fix is the choice the same report's what-ifs price as
    paying (docs/report.md#money), never one they price as not paying."""

    def test_the_1_hour_ttl_when_it_pays_most(self, tmp_path: Path):
        doc = report(str(paused(tmp_path, "10:50")))  # a 50-minute pause
        got = what_ifs(doc)
        # 1 hour: +0.1924735 as above; keep-warm: ceil(3000 / 270) - 1 = 11 pings reading
        # 99,998 tokens at $0.50: 0.549989 to keep 0.5749885, net 0.0249995
        assert got["ttl-1h"]["net_usd"] == pytest.approx(0.1924735, abs=1e-6)
        assert got["keep-warm"]["net_usd"] == pytest.approx(0.0249995, abs=1e-6)
        fix = ttl_finding(doc)["fix"]
        assert fix.startswith("Mark the stable prefix with the 1-hour TTL")
        assert "it pays (net $0.19; keep-warm pings: net $0.02)" in fix

    def test_keep_warm_when_it_pays_more_than_the_1_hour_ttl(self, tmp_path: Path):
        doc = report(str(paused(tmp_path, "10:10")))  # a 10-minute pause
        # keep-warm: 2 pings x 99,998 x $0.50 = 0.099998 to keep 0.5749885: net 0.4749905
        assert what_ifs(doc)["keep-warm"]["net_usd"] == pytest.approx(0.4749905, abs=1e-6)
        fix = ttl_finding(doc)["fix"]
        assert fix.startswith("Keep the session warm")
        assert "(net $0.47); the 1-hour TTL pays less on this log (net $0.19)" in fix

    def test_no_1_hour_ttl_advice_where_it_does_not_pay(self, tmp_path: Path):
        # shared/reference/ledger.md §1: keep-warm nets 0.0632385 - 2 x 23,998 x 0.5e-6 =
        # 0.0392405; the 1-hour TTL 0.0632385 - 27,004 x 3.75e-6 = -0.0380265
        log = transcript(tmp_path / "s.jsonl", [
            ("2026-03-02T10:00:00Z", 0, 0, 20_000, 0),
            ("2026-03-02T10:01:00Z", 0, 19_998, 4_002, 0),
            ("2026-03-02T10:12:00Z", 0, 13_000, 14_000, 0)])
        fix = ttl_finding(report(str(log)))["fix"]
        assert not fix.startswith("Mark the stable prefix")
        assert fix.startswith("Keep the session warm")
        assert "(net $0.04); the 1-hour TTL does not pay on this log (net −$0.04)" in fix

    def test_neither_pays_keep_turns_close_or_accept(self, tmp_path: Path):
        doc = report(str(paused(tmp_path, "12:00")))  # a 2-hour pause
        got = what_ifs(doc)
        # 1 hour keeps nothing past the hour: net -202,002 x 3.75e-6 = -0.7575075;
        # keep-warm: 26 pings x 99,998 x 0.5e-6 = 1.299974 > 0.5749885: no pause pinged
        assert got["ttl-1h"]["net_usd"] == pytest.approx(-0.7575075, abs=1e-6)
        assert got["keep-warm"]["net_usd"] == 0
        fix = ttl_finding(doc)["fix"]
        assert fix.startswith("Neither the 1-hour TTL (net −$0.76) nor keep-warm pings pay "
                              "on this log: keep a session's turns within 5 minutes of each "
                              "other where you can, or accept these expiries.")

    def test_the_terminal_shows_the_same_advice(self, tmp_path: Path):
        log = paused(tmp_path, "12:00")
        out = runner.invoke(app, ["report", str(log)], terminal_width=400).stdout
        assert "Neither the 1-hour TTL" in out
        assert "Mark the stable prefix" not in out


class TestTheTtlTheLogShows:
    """Claude Code logs each write's TTL (``cache_creation.ephemeral_1h_input_tokens``): a
    session of 1-hour writes is read, worded and replayed with 1 hour."""

    def one_hour_session(self, tmp_path: Path) -> Path:
        # 20,000 written (1 h); 20 minutes later read 19,998 and write 4,002 (1 h); 80
        # minutes later nothing read: 27,000 written (1 h)
        return transcript(tmp_path / "h.jsonl", [
            ("2026-03-02T10:00:00Z", 0, 0, 0, 20_000),
            ("2026-03-02T10:20:00Z", 0, 19_998, 0, 4_002),
            ("2026-03-02T11:40:00Z", 0, 0, 0, 27_000)])

    def test_the_ledger_reads_a_20_minute_pause_as_warm_and_80_minutes_as_ttl(
            self, tmp_path: Path):
        doc = report(str(self.one_hour_session(tmp_path)))
        by = doc["ledger"]["by_cause"]
        # turn 2: new 4,000 + rounding 2; turn 3: X = 24,000 - 2 = 23,998 expired,
        # new 3,000, rounding 2
        assert (by["cold"], by["new"], by["rounding"], by["ttl"]) == (20_000, 7_000, 4,
                                                                      23_998)
        f = ttl_finding(doc)
        assert f["lost_tokens"] == 23_998
        # written at the 1-hour price, $10, instead of read at $0.50
        assert f["lost_usd"] == pytest.approx(23_998 * (W1H - READ) / 1e6, abs=1e-6)
        assert "(1 hour: the log's writes use the 1-hour TTL)" in f["title"]
        assert "5 minutes by default" not in f["title"]
        assert f["evidence"]["ttl_seconds"] == [3600]

    def test_no_advice_to_use_the_1_hour_ttl_it_already_uses(self, tmp_path: Path):
        doc = report(str(self.one_hour_session(tmp_path)))
        hour = what_ifs(doc)["ttl-1h"]
        assert "already uses the 1-hour TTL" in hour["detail"]
        assert (hour["saved_usd"], hour["cost_usd"], hour["net_usd"]) == (0, 0, 0)
        # keep-warm pings 30 s inside the hour: ceil(4800 / 3570) - 1 = 1 ping reading
        # 23,998 tokens at $0.50 = 0.011999, to keep 0.227981: net 0.215982
        warm = what_ifs(doc)["keep-warm"]
        assert warm["cost_usd"] == pytest.approx(23_998 * READ / 1e6, abs=1e-6)
        assert warm["net_usd"] == pytest.approx(0.215982, abs=1e-6)
        fix = ttl_finding(doc)["fix"]
        assert "Mark the stable prefix" not in fix
        assert fix.startswith("Keep the session warm")
        assert "every 59.5 minutes" in fix

    def test_the_replay_keeps_a_1_hour_entry_through_a_20_minute_pause(
            self, tmp_path: Path):
        summary = report(str(self.one_hour_session(tmp_path)))["summary"]
        # predicted: turn 2 reads 19,998 (a 5-minute replay would read 0), turn 3 nothing
        assert summary["hit_rate_predicted"] == pytest.approx(19_998 / 71_000)
        assert summary["hit_rate"] == pytest.approx(19_998 / 71_000)

    def test_a_call_that_wrote_nothing_passes_on_the_ttl_of_the_entry_it_read(
            self, tmp_path: Path):
        # turn 2 reads everything and writes nothing; turn 3, 40 minutes later, finds the
        # 1-hour entry turn 2 refreshed: no ttl loss
        log = transcript(tmp_path / "h.jsonl", [
            ("2026-03-02T10:00:00Z", 0, 0, 0, 20_000),
            ("2026-03-02T10:01:00Z", 2, 19_998, 0, 0),
            ("2026-03-02T10:41:00Z", 0, 19_998, 0, 5_002)])
        doc = report(str(log))
        by = doc["ledger"]["by_cause"]
        assert (by["cold"], by["new"], by["rounding"], by["ttl"]) == (20_000, 5_000, 4, 0)
        assert doc["summary"]["hit_rate_predicted"] == pytest.approx(39_996 / 65_000)

    def test_split_5_minute_writes_say_so(self, tmp_path: Path):
        f = ttl_finding(report(str(paused(tmp_path, "10:10"))))
        assert "(5 minutes: the log's writes use the 5-minute TTL)" in f["title"]
        assert f["evidence"]["ttl_seconds"] == [300]

    def test_a_pause_of_exactly_the_ttl_is_kept_one_second_more_is_not(
            self, tmp_path: Path):
        # 5-minute writes; turn 2 exactly 300 s after turn 1, turn 3 301 s after turn 2
        log = transcript(tmp_path / "edge.jsonl", [
            ("2026-03-02T10:00:00Z", 0, 0, 20_000, 0),
            ("2026-03-02T10:05:00Z", 0, 19_998, 4_002, 0),
            ("2026-03-02T10:10:01Z", 0, 0, 27_000, 0)])
        doc = report(str(log))
        by = doc["ledger"]["by_cause"]
        assert (by["cold"], by["new"], by["rounding"], by["ttl"]) == (20_000, 7_000, 4,
                                                                      23_998)
        # the replay agrees: turn 2 reads 19,998, turn 3 nothing
        assert doc["summary"]["hit_rate_predicted"] == pytest.approx(19_998 / 71_000)
