"""`prefixscope calls` / `ps.calls`: the report's ledger one request at a time, a session
at a time.

Oracles: a ledger written by hand (the grouping, the filter, the sums and each call's
cause worked out below), a three-turn capture whose first two turns' ledger lines are
hand arithmetic on the ledger's rules (docs/report.md#the-ledger), the store's own rows
read with `prefixscope sql` (in / read per call), and `report --json`'s ledger for the
totals: the view must be that ledger, not a recount of its own.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import REAL, ROOT
from report_scenarios import at, write_session
from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.findings.calls import NoSuchSession, per_call
from prefixscope.findings.ledger import CAUSES, Basis, Ledger, LedgerEntry
from prefixscope.model import UsageRecord

runner = CliRunner()
T0 = datetime(2026, 3, 1, 9, 0, 0)


def record(rid: str, session: str | None, minute: int, prompt: int, cached: int,
           write: int | None = None) -> UsageRecord:
    return UsageRecord(id=rid, timestamp=T0 + timedelta(minutes=minute), endpoint="openai-chat",
                       model="m-1", client=None, user=None, channel=None, source_format="raw",
                       session=session, prompt_tokens=prompt, cached_tokens=cached,
                       has_body=False, cache_write_tokens=write)


# (id, session, minute, prompt, cached, write, causes): the causes sum to prompt - cached
ROWS: list[tuple[str, str | None, int, int, int, int | None, dict[str, int]]] = [
    ("a1", "s-a", 0, 1000, 0, 1000, {"cold": 1000}),
    ("b1", "s-b", 1, 1000, 0, None, {"cold": 1000}),
    ("a2", "s-a", 2, 1500, 1000, 500, {"new": 500}),
    ("b2", "s-b", 3, 1200, 768, None, {"new": 200, "rounding": 32, "break": 200}),
    ("c1", "s-ab", 4, 400, 0, None, {"cold": 400}),
    ("x1", None, 5, 300, 300, None, {}),
]


def hand_ledger() -> tuple[Ledger, list[UsageRecord]]:
    records = [record(rid, s, m, p, c, w) for rid, s, m, p, c, w, _ in ROWS]
    entries = tuple(
        LedgerEntry(rid, s, p, c, causes,
                    break_kind="tool-order" if "break" in causes else None,
                    break_segment="tools" if "break" in causes else None,
                    gap_seconds=120.0 if rid in ("a2", "b2") else None)
        for rid, s, _, p, c, _, causes in ROWS)
    by_cause = {c: sum(e.causes.get(c, 0) for e in entries) for c in CAUSES}
    missed = 1000 + 1000 + 500 + 432 + 400 + 0
    basis = Basis("observed", 6, 5400, 2068, outside_requests=2)
    return Ledger(basis, missed, by_cause, {"tool-order": 200}, {"tools": 200}, entries), \
        records


class TestPerCall:
    def test_calls_are_grouped_by_session_in_the_order_of_their_first_calls(self) -> None:
        calls = per_call(*hand_ledger())
        assert [s.session for s in calls.sessions] == ["s-a", "s-b", "s-ab", None]
        assert [[c.id for c in s.calls] for s in calls.sessions] == [
            ["a1", "a2"], ["b1", "b2"], ["c1"], ["x1"]]

    def test_each_sessions_sums_are_its_calls(self) -> None:
        a, b, ab, none = per_call(*hand_ledger()).sessions
        # s-a: in 1000 + 1500, read 0 + 1000, write 1000 + 500, missed 1000 + 500
        assert (a.prompt_tokens, a.cached_tokens, a.cache_write_tokens, a.missed_tokens,
                a.hit_rate) == (2500, 1000, 1500, 1500, 0.4)
        # s-b: no call reports writes; its causes: cold 1000, new 200, rounding 32, break 200
        assert (b.prompt_tokens, b.cached_tokens, b.cache_write_tokens, b.missed_tokens) \
            == (2200, 768, None, 1432)
        assert {c: n for c, n in b.by_cause.items() if n} == {
            "cold": 1000, "new": 200, "rounding": 32, "break": 200}
        assert list(b.by_cause) == list(CAUSES)
        assert (none.missed_tokens, none.hit_rate, ab.hit_rate) == (0, 1.0, 0.0)

    def test_a_calls_cause_holds_the_most_of_its_misses_the_ledgers_order_on_a_tie(
            self) -> None:
        calls = {c.id: c for s in per_call(*hand_ledger()).sessions for c in s.calls}
        assert calls["a1"].cause == "cold"
        # new 200 and break 200 tie: new comes first in the ledger's order of causes
        assert calls["b2"].cause == "new"
        assert calls["x1"].cause is None and calls["x1"].missed_tokens == 0
        assert list(calls["b2"].causes) == ["new", "rounding", "break"]  # the ledger's order
        assert (calls["b2"].break_kind, calls["b2"].break_segment) == ("tool-order", "tools")
        assert (calls["a2"].timestamp, calls["a2"].model, calls["a2"].cache_write_tokens) \
            == (T0 + timedelta(minutes=2), "m-1", 500)

    def test_the_totals_are_the_ledgers(self) -> None:
        ledger, records = hand_ledger()
        calls = per_call(ledger, records)
        assert (calls.requests, calls.prompt_tokens, calls.cached_tokens,
                calls.missed_tokens) == (6, 5400, 2068, 3332)
        assert calls.missed_tokens == ledger.missed_tokens
        assert calls.by_cause == dict(ledger.by_cause)
        assert (calls.basis, calls.outside_requests, calls.session) == ("observed", 2, None)

    def test_a_session_id_is_matched_whole_first_else_as_a_prefix(self) -> None:
        ledger, records = hand_ledger()
        assert [s.session for s in per_call(ledger, records, "s-a").sessions] == ["s-a"]
        assert [s.session for s in per_call(ledger, records, "s-").sessions] == [
            "s-a", "s-b", "s-ab"]
        only = per_call(ledger, records, "s-b")
        assert (only.session, only.requests, only.missed_tokens) == ("s-b", 2, 1432)
        with pytest.raises(NoSuchSession, match="no session 'zz' .* among the 3 sessions"):
            per_call(ledger, records, "zz")


PROMPT = [2000, 2300, 2600]
CACHED = [0, 1920, 2176]


def chat_usage(turn: int) -> dict[str, Any]:
    return {"prompt_tokens": PROMPT[turn], "completion_tokens": 7,
            "total_tokens": PROMPT[turn] + 7,
            "prompt_tokens_details": {"cached_tokens": CACHED[turn]}}


@pytest.fixture
def captures(tmp_path: Path) -> Path:
    """One three-turn session, its usage written by hand; its third turn reorders tools."""
    def reorder(request: dict[str, Any]) -> None:
        request["tools"].reverse()

    return write_session(tmp_path / "captures.jsonl", turns=3, session="s-1",
                         usage=chat_usage, change=at(2, reorder))


def run(*args: str) -> Any:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result


def run_json(*args: str) -> Any:
    return json.loads(run(*args, "--json").stdout)


class TestCommand:
    def test_each_call_is_its_logged_usage_and_the_ledgers_causes(self, captures: Path
                                                                  ) -> None:
        out = run_json("calls", str(captures))
        assert [s["session"] for s in out["sessions"]] == ["s-1"]
        lines = out["sessions"][0]["calls"]
        assert [c["prompt_tokens"] for c in lines] == PROMPT
        assert [c["cached_tokens"] for c in lines] == CACHED
        assert [c["missed_tokens"] for c in lines] == [2000, 380, 424]
        assert [c["cache_write_tokens"] for c in lines] == [None] * 3
        # turn 0 is the session's first: cold. Turn 1 appends to turn 0 (2,000 tokens sent
        # before): the cache could serve whole 128-token units of them, 1,920 (what it
        # read); [1920, 2000) is rounding, [2000, 2300) new.
        assert lines[0]["causes"] == {"cold": 2000} and lines[0]["gap_seconds"] is None
        assert lines[1]["causes"] == {"new": 300, "rounding": 80}
        assert lines[1]["cause"] == "new" and lines[1]["gap_seconds"] == 60.0
        # turn 2 reorders the tools, early in the prompt: what it shares with turn 1 (2,300
        # tokens) is a break from there on, but the log read 2,176 of them all the same
        # (reads beyond the divergence cover the intervals after it): break [2176, 2300),
        # new [2300, 2600)
        assert lines[2]["causes"] == {"new": 300, "break": 124}
        assert (lines[2]["cause"], lines[2]["break_segment"]) == ("new", "tools")
        assert lines[0]["time"] == "2026-06-01T10:00:00"  # the capture's 10:00Z, in UTC
        assert (out["requests"], out["missed_tokens"], out["outside_requests"]) == (3, 2804, 0)

    def test_the_terminal_shows_a_session_header_and_a_row_per_call(self, captures: Path
                                                                    ) -> None:
        text = run("calls", str(captures), "--quiet").stdout
        assert "3 calls in 1 session · in 6,900 · read 4,096 = 59.36% · missed 2,804" in text
        assert "times in UTC" in text
        assert "session s-1 · 3 calls · 2026-06-01 10:00:00 → 2026-06-01 10:02:00" in text
        rows = [line for line in text.splitlines() if line.startswith("2026-06-01 ")]
        assert len(rows) == 3
        assert [cell.strip() for cell in rows[1].split("│")] == [
            "2026-06-01 10:01:00", "gpt-4.1", "2,300", "1,920", "-", "380",
            "new 300 · rounding 80"]
        assert rows[2].split("│")[-1].strip() == "new 300 · break 124 at tools (tool-order)"

    def test_an_unknown_session_is_one_line_and_exit_1(self, captures: Path) -> None:
        result = runner.invoke(app, ["calls", str(captures), "--session", "nope"])
        assert result.exit_code == 1
        assert result.stderr.strip().splitlines()[-1].startswith(
            "error: no session 'nope' (nor one starting with it) among the 1 sessions")


    def test_a_missing_path_is_exit_2_unless_skip_missing(self, captures: Path) -> None:
        result = runner.invoke(app, ["calls", str(captures), "typo.jsonl"])
        assert result.exit_code == 2 and result.stdout == ""
        assert "no such file or directory: typo.jsonl" in result.stderr
        skipped = run_json("calls", str(captures), "typo.jsonl", "--skip-missing")
        assert skipped == run_json("calls", str(captures))


def report_ledger(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["report", *args, "--json"])
    assert result.exit_code in (0, 3), result.output
    return json.loads(result.stdout)["ledger"]


def tokens(by_cause: dict[str, Any]) -> dict[str, int]:
    """The report's `by_cause` as plain tokens (its `break` holds its kinds too)."""
    return {c: v["tokens"] if isinstance(v, dict) else v for c, v in by_cause.items()}


def test_the_calls_of_the_sample_logs_are_reports_ledger(tmp_path: Path) -> None:
    store = str(tmp_path / "s.duckdb")
    run("ingest", str(ROOT / "sample_logs"), "--store", store, "--quiet")
    ledger = report_ledger("--store", store)
    out = run_json("calls", "--store", store)
    assert out["missed_tokens"] == ledger["missed_tokens"] == sum(
        c["missed_tokens"] for s in out["sessions"] for c in s["calls"])
    assert out["by_cause"] == tokens(ledger["by_cause"])
    assert (out["requests"], out["prompt_tokens"], out["cached_tokens"]) == (
        ledger["basis"]["requests"], ledger["basis"]["prompt_tokens"],
        ledger["basis"]["cached_tokens"])
    for s in out["sessions"]:
        assert all(sum(c["causes"].values()) == c["missed_tokens"] for c in s["calls"])
    # one session by a prefix of its id: its in / read are the store's rows for it
    vllm = [s for s in out["sessions"] if s["calls"][0]["model"] == "qwen3.6-35b-a3b"][0]
    prefix = vllm["session"][:8]
    one = run_json("calls", "--store", store, "--session", prefix)
    assert [s["session"] for s in one["sessions"]] == [vllm["session"]]
    rows = json.loads(run("sql", "select prompt_tokens, least(cached_tokens, prompt_tokens) c "
                          f"from turns where session = '{vllm['session']}' and duplicate_of "
                          "is null order by timestamp", "--store", store, "--json").stdout)
    assert [(c["prompt_tokens"], c["cached_tokens"]) for c in one["sessions"][0]["calls"]] \
        == [(r["prompt_tokens"], r["c"]) for r in rows]
    assert one["missed_tokens"] == vllm["missed_tokens"]


@pytest.mark.slow  # a report of the whole real folder twice: ~50 s
@pytest.mark.real
def test_the_calls_of_the_real_logs_are_reports_ledger(tmp_path: Path) -> None:
    store = str(tmp_path / "r.duckdb")
    run("ingest", str(REAL), "--store", store, "--quiet")
    ledger = report_ledger("--store", store)
    out = run_json("calls", "--store", store)
    assert out["missed_tokens"] == ledger["missed_tokens"] == sum(
        c["missed_tokens"] for s in out["sessions"] for c in s["calls"])
    assert out["by_cause"] == tokens(ledger["by_cause"])
    assert out["requests"] == ledger["basis"]["requests"]
    assert out["outside_requests"] == ledger["basis"]["outside_requests"]


class TestWhatTheLogSaysOfEachCall:
    """Each call carries the session events recorded before it and the provider's verdict
    on its miss, read from the lines of tests/fixtures/claude-code/recorded_events.jsonl
    (a hand-built Claude Code session: its line 5 is a compact_boundary, line 9 the first
    call on claude-opus-4-5 with a ``model_changed`` verdict of 6,000 tokens, line 11 the
    first on version 2.1.101, line 12 a deferred_tools_delta attachment, lines 14 and 16
    verdicts ``tools_changed`` 1,000 and ``messages_changed`` 998)."""

    LOG = ROOT / "tests" / "fixtures" / "claude-code" / "recorded_events.jsonl"

    def test_the_json_lists_each_calls_events_and_verdict(self) -> None:
        out = run_json("calls", str(self.LOG))
        [session] = out["sessions"]
        said = [([(e["kind"], e["line"]) for e in c["events"]], c["recorded"], c["verdict"])
                for c in session["calls"]]
        assert said == [
            ([], None, None),
            ([], None, None),
            ([("compaction", 5)], "compaction", None),
            ([("model-change", 9)], "model-change",
             {"reason": "model_changed", "missed_tokens": 6_000}),
            ([("client-upgrade", 11)], "client-upgrade", None),
            ([("tool-set", 12)], "tool-set", {"reason": "tools_changed", "missed_tokens": 1_000}),
            ([], None, {"reason": "messages_changed", "missed_tokens": 998}),
            ([], None, None)]
        model = session["calls"][3]["events"][0]
        assert model["detail"] == "claude-sonnet-4-5-20250929 -> claude-opus-4-5-20251101"

    def test_the_library_frame_has_them_as_columns(self) -> None:
        import prefixscope as ps

        frame = ps.calls(ps.ingest(str(self.LOG), store=None)).to_polars("calls")
        assert frame["recorded"].to_list()[2:6] == [
            "compaction", "model-change", "client-upgrade", "tool-set"]
        assert frame["verdict"].to_list() == [
            None, None, None, "model_changed", None, "tools_changed", "messages_changed", None]
        assert frame["verdict_missed_tokens"].to_list()[3] == 6_000
        assert frame["events"].to_list()[4] == "client-upgrade: 2.1.92 -> 2.1.101"

    def test_the_terminal_says_them_beside_the_cause(self) -> None:
        result = runner.invoke(app, ["calls", str(self.LOG)], terminal_width=250)
        assert result.exit_code == 0, result.output
        assert "the log says" in result.stdout
        assert "client-upgrade (decided): 2.1.92 -> 2.1.101" in result.stdout
        assert "provider: messages_changed, 998 missed" in result.stdout

    def test_a_log_that_records_nothing_keeps_the_usual_table(self, captures: Path) -> None:
        result = runner.invoke(app, ["calls", str(captures)], terminal_width=250)
        assert result.exit_code == 0, result.output
        assert "the log says" not in result.stdout
