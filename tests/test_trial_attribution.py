"""Misattributions a tester found on real public Claude Code sessions, each on a hand-built
transcript shaped as the real lines (usage only; a session file with its sub-agents'
``<session>/subagents/agent-*.jsonl``), every expected value by hand arithmetic on the
ledger's documented rules (docs/report.md#the-ledger) and Claude Opus 4.5's list prices
(input $5 / MTok, 5-minute write $6.25, 1-hour write $10, cache read $0.50)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from prefixscope.cli.main import app

runner = CliRunner()
SESSION = "9e14d594-5f63-4b19-ba8b-624bd0c9869b"


def lines(path: Path, turns: list[tuple[str, int, int, int, int]], *,
          session: str = SESSION, agent: str | None = None, tag: str = "m") -> Path:
    """Claude Code assistant lines, one per (time, input_tokens, cache read, 5-minute write,
    1-hour write), as a main transcript or (with `agent`) a sub-agent file's lines:
    ``isSidechain: true`` with its ``agentId``."""
    out = []
    for n, (at, uncached, read, five, hour) in enumerate(turns):
        line: dict[str, Any] = {
            "parentUuid": f"{tag}u{n - 1}" if n else None, "isSidechain": agent is not None,
            "userType": "external", "cwd": "/home/dev/app", "sessionId": session,
            "version": "2.1.62", "gitBranch": "main", "type": "assistant",
            "uuid": f"{tag}u{n}", "timestamp": at, "requestId": f"req_{tag}{n}",
            "message": {"id": f"msg_{tag}{n}", "type": "message", "role": "assistant",
                        "model": "claude-opus-4-5",
                        "content": [{"type": "text", "text": "ok"}],
                        "stop_reason": "end_turn", "stop_sequence": None,
                        "usage": {"input_tokens": uncached,
                                  "cache_creation_input_tokens": five + hour,
                                  "cache_read_input_tokens": read,
                                  "cache_creation": {"ephemeral_5m_input_tokens": five,
                                                     "ephemeral_1h_input_tokens": hour},
                                  "output_tokens": 60, "service_tier": "standard"}}}
        if agent is not None:
            line["agentId"] = agent
        out.append(json.dumps(line))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out) + "\n")
    return path


def run(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output + result.stderr
    return json.loads(result.stdout)


def calls_of(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {s["session"]: s["calls"] for s in doc["sessions"]}


class TestWhatThePredecessorLeft:
    """A2: the tokens after the predecessor's last breakpoint (its uncached input_tokens)
    were never written, so no provider could serve them: `rounding`, not `provider`."""

    def test_the_unwritten_tail_is_rounding_and_a_shorter_read_is_provider(
            self, tmp_path: Path) -> None:
        # call: input / read / write -> prompt; ledger by hand
        # 1: 3 / 0 / 13,694 -> 13,697: cold 13,697
        # 2: 1,764 / 13,694 / 1,195 -> 16,653: call 1 left 0 + 13,694; X = min(13,697 - 2,
        #    13,694) = 13,694 = C: rounding 13,697 - 13,694 = 3, new 16,653 - 13,697 = 2,956
        # 3: 37 / 14,889 / 3,852 -> 18,778: call 2 left 13,694 + 1,195 = 14,889 = C; its
        #    1,764 input tokens were never written: rounding 16,653 - 14,889 = 1,764,
        #    new 18,778 - 16,653 = 2,125 (was provider 1,762 + rounding 2)
        # 4: 1 / 10,000 / 8,911 -> 18,912: call 3 left 14,889 + 3,852 = 18,741; X =
        #    min(18,776, 18,741) = 18,741: provider 18,741 - 10,000 = 8,741, rounding
        #    18,778 - 18,741 = 37, new 18,912 - 18,778 = 134
        path = lines(tmp_path / f"{SESSION}.jsonl", [
            ("2026-03-01T15:37:06.000Z", 3, 0, 0, 13_694),
            ("2026-03-01T15:37:18.000Z", 1_764, 13_694, 0, 1_195),
            ("2026-03-01T15:37:29.000Z", 37, 14_889, 0, 3_852),
            ("2026-03-01T15:37:32.000Z", 1, 10_000, 0, 8_911)])
        got = [c["causes"] for c in calls_of(run("calls", str(path)))[SESSION]]
        assert got == [{"cold": 13_697}, {"new": 2_956, "rounding": 3},
                       {"new": 2_125, "rounding": 1_764},
                       {"provider": 8_741, "new": 134, "rounding": 37}]
        by = run("report", str(path))["ledger"]["by_cause"]
        assert (by["cold"], by["new"], by["rounding"], by["provider"]) == (
            13_697, 5_215, 1_804, 8_741)


BOUNDARY = {"parentUuid": None, "logicalParentUuid": "mu1", "isSidechain": False,
            "userType": "external", "cwd": "/home/dev/app", "sessionId": SESSION,
            "version": "2.1.62", "gitBranch": "main", "type": "system",
            "subtype": "compact_boundary", "content": "Conversation compacted",
            "isMeta": False, "timestamp": "2026-03-02T02:52:32.051Z", "uuid": "cb1",
            "level": "info", "compactMetadata": {"trigger": "manual", "preTokens": 52777}}


class TestTheSummarizerCallIsTheCompactions:
    """A4: Claude Code writes a compaction's summarizer call to
    ``<session>/subagents/agent-acompact-*.jsonl``; it is the compaction's, not a cold
    start of a session of its own."""

    def _logs(self, tmp_path: Path, read: int, write: int) -> Path:
        main = lines(tmp_path / f"{SESSION}.jsonl", [
            ("2026-03-02T02:50:33.000Z", 3, 0, 0, 52_480),
            ("2026-03-02T02:50:37.000Z", 3, 52_480, 0, 42),
            ("2026-03-02T02:54:23.000Z", 3, 18_055, 0, 23_570)])
        text = main.read_text().splitlines()
        main.write_text("\n".join([*text[:2], json.dumps(BOUNDARY), text[2]]) + "\n")
        lines(tmp_path / SESSION / "subagents" / "agent-acompact-320250.jsonl",
              [("2026-03-02T02:52:31.800Z", 3, read, 0, write)],
              agent="acompact-320250", tag="a")
        return tmp_path

    def test_its_missed_tokens_are_compaction_not_cold(self, tmp_path: Path) -> None:
        # main: 52,483 cold; 52,525 / 52,480: rounding 3 + new 42; after the boundary
        # 41,628 / 18,055: compaction 23,573. The summarizer: 3 + 18,055 + 35,830 = 53,888
        # read 18,055: compaction 35,833 (was its own session's cold 35,833)
        logs = self._logs(tmp_path, 18_055, 35_830)
        calls = calls_of(run("calls", str(logs)))
        assert [c["causes"] for c in calls[f"{SESSION}/agent-acompact-320250"]] == [
            {"compaction": 35_833}]
        doc = run("report", str(logs))
        by = doc["ledger"]["by_cause"]
        assert (by["cold"], by["compaction"], by["new"], by["rounding"]) == (
            52_483, 23_573 + 35_833, 42, 3)
        (found,) = [f for f in doc["findings"] if f["kind"] == "compaction"]
        assert found["lost_tokens"] == 59_406
        assert found["evidence"]["requests"] == 2
        assert found["evidence"]["recorded"] == 2

    def test_one_that_read_the_parents_cache_is_not_cold(self, tmp_path: Path) -> None:
        # the 6d590f7e shape: it read 52,480 of 3 + 52,480 + 1,000 = 53,483: the 1,003 it
        # missed are the compaction's
        logs = self._logs(tmp_path, 52_480, 1_000)
        calls = calls_of(run("calls", str(logs)))
        assert [c["causes"] for c in calls[f"{SESSION}/agent-acompact-320250"]] == [
            {"compaction": 1_003}]


class TestKeepWarmAtTheTtlTheLogShows:
    """A5: a 1-hour session's keep-warm is priced at pings every 59.5 minutes, and says it
    does not pay, with its net, where it does not."""

    def _session(self, tmp_path: Path, later: str) -> Path:
        # 100,000 written with the 1-hour TTL at 10:00; after the pause the prefix expired:
        # 101,000 / 0 read -> X = min(100,000 - 2, 0 + 100,000) = 99,998: ttl 99,998,
        # rounding 2, new 1,000. The expiry cost 99,998 x ($10 - $0.50) / MTok = 0.949981
        return lines(tmp_path / f"{SESSION}.jsonl", [
            ("2026-03-21T10:00:00.000Z", 0, 0, 0, 100_000),
            (later, 0, 0, 0, 101_000)])

    def test_a_pause_it_pays_for(self, tmp_path: Path) -> None:
        # 3 hours = 10,800 s: ceil(10,800 / 3,570) - 1 = 3 pings x 99,998 x $0.50 / MTok =
        # 0.149997; net 0.949981 - 0.149997 = 0.799984
        doc = run("report", str(self._session(tmp_path, "2026-03-21T13:00:00.000Z")))
        assert doc["ledger"]["by_cause"]["ttl"] == 99_998
        (warm,) = [w for w in doc["what_if"] if w["name"] == "keep-warm"]
        assert abs(warm["net_usd"] - 0.799984) < 1e-6
        assert warm["detail"].startswith("pinging every 59.5 minutes through the 1 of 1 pause")

    def test_a_pause_it_does_not_pay_for(self, tmp_path: Path) -> None:
        # 22 hours = 79,200 s: ceil(79,200 / 3,570) - 1 = 22 pings x 0.049999 = 1.099978 to
        # keep 0.949981: net -0.149997 (was "every 4.5 minutes ... net $0.00")
        doc = run("report", str(self._session(tmp_path, "2026-03-22T08:00:00.000Z")))
        (warm,) = [w for w in doc["what_if"] if w["name"] == "keep-warm"]
        assert warm["detail"] == (
            "pinging every 59.5 minutes through the 1 pause would cost $1.10 in cache reads "
            "to keep 99,998 expired tokens ($0.95): it does not pay (net −$0.15)")
        (found,) = [f for f in doc["findings"] if f["kind"] == "ttl-expiry"]
        assert "4.5 minutes" not in found["fix"]


class TestSimulateReadsTheRecordedCompaction:
    """A7: simulate's usage-only miss classes book the tokens after a compaction the log
    records as `compaction`, as report's ledger does (one answer for the same tokens)."""

    def test_simulate_and_report_agree(self, tmp_path: Path) -> None:
        # after the recorded boundary: 3 + 18,055 + 23,570 = 41,628 read 18,055; the replay
        # from usage starts a new chain (the prompt fell below 52,525), so the 23,573 it did
        # not read are beyond what the ideal cache holds: compaction, not new
        logs = TestTheSummarizerCallIsTheCompactions()._logs(tmp_path, 18_055, 35_830)
        main = str(logs / f"{SESSION}.jsonl")
        simulated = run("simulate", main)
        assert simulated["misses"]["compaction"] == 23_573
        assert run("report", main)["ledger"]["by_cause"]["compaction"] == 23_573
        # the summarizer's call, a session of its own, is the compaction's too
        assert run("simulate", str(logs))["misses"]["compaction"] == 23_573 + 35_833
