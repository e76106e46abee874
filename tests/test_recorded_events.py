"""What the agent's own log records between two calls decides the ledger's cause (issue 35):
Claude Code's compaction boundary, a model switch, a client upgrade, a tool-set delta; Cline's
truncation of the history; and the provider's own verdict kept beside prefixscope's cause.

The fixtures are hand-built in the shape of the real lines (Claude Code transcript lines
with `compact_boundary`, `isCompactSummary`, a `deferred_tools_delta` attachment and
`message.diagnostics.cache_miss_reason`; Cline UI messages stamped with
`conversationHistoryDeletedRange`), and every expected number below is worked out by hand
from the usage in them (Anthropic: prompt = input + cache read + cache creation; Cline:
tokensIn + cacheReads + cacheWrites; an intact warm read ends 2 tokens short of the
previous prompt; a shortfall under 64 tokens is rounding).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT
from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.ingest import read_requests
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths

runner = CliRunner()
CC = FIXTURES / "claude-code" / "recorded_events.jsonl"
CLINE = (FIXTURES / "cline-truncation" / "Code" / "User" / "globalStorage"
         / "saoudrizwan.claude-dev" / "tasks" / "1770000000000")
REAL_CC = ROOT / "tests" / "data" / "real" / "claude-code-jsonl"


def _report(path: Path) -> dict:
    result = runner.invoke(app, ["report", str(path), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# ------------------------------------------------------------------ ingest


class TestClaudeCodeEvents:
    def test_each_call_carries_what_was_recorded_before_it(self) -> None:
        requests, skips = read_requests(CC)
        assert skips == []
        events = {r.native_id: [(e.kind, e.detail, e.source_line) for e in r.events]
                  for r in requests}
        assert events == {
            "msg_01RE01": [], "msg_01RE02": [],
            # the boundary (line 5) and the summary (line 6): one compaction
            "msg_01RE03": [("compaction", "compact_boundary (trigger auto, preTokens 24050)",
                            5)],
            "msg_01RE04": [("model-change",
                            "claude-sonnet-4-5-20250929 -> claude-opus-4-5-20251101", 9)],
            "msg_01RE05": [("client-upgrade", "2.1.92 -> 2.1.101", 11)],
            "msg_01RE06": [("tool-set", "deferred_tools_delta: +mcp__github__search_issues",
                            12)],
            "msg_01RE07": [], "msg_01RE08": [],
        }

    def test_summary_alone_is_a_compaction(self, tmp_path: Path) -> None:
        lines = [json.loads(x) for x in CC.read_text().splitlines()]
        kept = [x for x in lines if x.get("subtype") != "compact_boundary"]
        path = tmp_path / "s.jsonl"
        path.write_text("".join(json.dumps(x) + "\n" for x in kept))
        requests, _ = read_requests(path)
        third = next(r for r in requests if r.native_id == "msg_01RE03")
        assert [(e.kind, e.detail) for e in third.events] == [
            ("compaction", "isCompactSummary user message")]

    def test_an_empty_delta_is_no_change(self, tmp_path: Path) -> None:
        lines = CC.read_text().replace('"addedNames":["mcp__github__search_issues"]',
                                       '"addedNames":[]')
        path = tmp_path / "s.jsonl"
        path.write_text(lines)
        requests, _ = read_requests(path)
        sixth = next(r for r in requests if r.native_id == "msg_01RE06")
        assert sixth.events == ()

    def test_provider_verdict_kept_per_call(self) -> None:
        requests, _ = read_requests(CC)
        verdicts = {r.native_id: (r.metadata.get("cache_miss_reason"),
                                  r.metadata.get("cache_missed_input_tokens"))
                    for r in requests if "cache_miss_reason" in r.metadata}
        assert verdicts == {"msg_01RE04": ("model_changed", 6000),
                            "msg_01RE06": ("tools_changed", 1000),
                            "msg_01RE07": ("messages_changed", 998)}

    def test_sidechain_events_stay_in_their_session(self) -> None:
        # streamed_session.jsonl: a compact_boundary of the main session, then only a
        # sidechain call: no main call follows it, so no call carries it
        requests, _ = read_requests(FIXTURES / "claude-code" / "streamed_session.jsonl")
        assert all(r.events == () for r in requests)


class TestClineEvents:
    def test_truncation_belongs_to_the_request_set_up_when_the_range_changed(self) -> None:
        requests, skips = read_requests(CLINE / "ui_messages.json")
        assert skips == []
        assert [[(e.kind, e.detail, e.source_line) for e in r.events] for r in requests] == [
            [], [],
            # the range first shows on element 7, after the third api_req_started (6)
            [("truncation", "conversationHistoryDeletedRange none -> [1, 4]", 7)],
            [("model-change", "claude-opus-4-5-20251101 -> claude-sonnet-4-5-20250929", 8)],
            [],
        ]


    def test_client_version_per_call_from_the_task_metadata(self, tmp_path: Path) -> None:
        task = tmp_path / "tasks" / "1770000000000"
        task.mkdir(parents=True)
        (task / "ui_messages.json").write_bytes((CLINE / "ui_messages.json").read_bytes())
        # the task started on 3.51.0 and was resumed on 3.52.1 before the fifth request
        (task / "task_metadata.json").write_text(json.dumps({"environment_history": [
            {"ts": 1770000000005, "os_name": "linux", "cline_version": "3.51.0"},
            {"ts": 1770000048000, "os_name": "linux", "cline_version": "3.52.1"}]}))
        requests, _ = read_requests(task / "ui_messages.json")
        assert [r.metadata["version"] for r in requests] == ["3.51.0"] * 4 + ["3.52.1"]
        assert [(e.kind, e.detail) for e in requests[4].events] == [
            ("client-upgrade", "3.51.0 -> 3.52.1")]


class TestStore:
    def test_one_table_of_session_events_kept_once(self, tmp_path: Path) -> None:
        with Store.open(tmp_path / "s.duckdb") as store:
            ingest_paths([str(CC)], store)
            ingest_paths([str(CC)], store)  # re-ingest adds nothing
            rows = store.run("SELECT session_key, kind, source_line, "
                             "strftime(timestamp, '%H:%M:%S') FROM session_events "
                             "ORDER BY source_line")
            by_request = store.session_events()
            verdicts = store.provider_verdicts()
        session = "7d3e2a10-5c4b-4e8f-9a61-2b7c0d9e4f35"
        assert rows == [(session, "compaction", 5, "09:02:00"),
                        (session, "model-change", 9, "09:03:30"),
                        (session, "client-upgrade", 11, "09:04:30"),
                        (session, "tool-set", 12, "09:05:29")]
        assert sorted(len(v) for v in by_request.values()) == [1, 1, 1, 1]
        assert sorted(v for v in verdicts.values()) == [
            ("messages_changed", 998), ("model_changed", 6000), ("tools_changed", 1000)]


    def test_a_fuller_copy_of_a_call_brings_its_own_events(self, tmp_path: Path) -> None:
        # two copies of the transcript; in the first, call 4's stream was cut short (fewer
        # output tokens), so the second copy's call 4 replaces it: its events come from the
        # second file, once
        short = tmp_path / "a.jsonl"
        full = tmp_path / "b.jsonl"
        text = CC.read_text()
        line = next(x for x in text.splitlines() if '"msg_01RE04"' in x)
        short.write_text(text.replace(line, line.replace('"output_tokens":50',
                                                         '"output_tokens":10')))
        full.write_text(text)
        with Store.open(tmp_path / "s.duckdb") as store:
            ingest_paths([str(short)], store)
            ingest_paths([str(full)], store)
            rows = store.run("SELECT e.kind, e.source_file = r.source_file, "
                             "e.source_file LIKE '%b.jsonl' FROM session_events e "
                             "JOIN requests r ON r.id = e.request_id "
                             "WHERE r.native_id = 'msg_01RE04'")
        assert rows == [("model-change", True, True)]


# ------------------------------------------------------------------ the ledger


@pytest.fixture(scope="module")
def report() -> dict:
    return _report(CC)


class TestClaudeCodeLedger:
    def test_missed_tokens_by_the_recorded_cause(self, report: dict) -> None:
        # call: prompt / cached -> ledger (by hand)
        # 1: 20,000 / 0          -> cold 20,000
        # 2: 24,000 / 19,998     -> rounding 2 (read lag), new 4,000
        # 3:  6,000 / 4,000      -> compaction 2,000 (recorded boundary; was `provider`)
        # 4:  7,000 / 0          -> model change: break 6,000 (all the predecessor sent),
        #                           new 1,000
        # 5:  9,000 / 2,500      -> client upgrade: break 7,000 - 2,500 = 4,500, new 2,000
        # 6: 10,000 / 8,000      -> tool-set delta: break 9,000 - 8,000 = 1,000, new 1,000
        # 7: 11,000 / 9,000      -> nothing recorded, extends: call 6 read 8,000 and
        #                           wrote 1,997 (its last 3 input tokens never written),
        #                           so X = min(10,000 - 2, 9,997) = 9,997: provider 997,
        #                           rounding 3, new 1,000
        # 8: 10,500 / 9,000      -> nothing recorded, shrank: unexplained 1,500 (a shorter
        #                           prompt is no intact prefix)
        ledger = report["ledger"]
        assert ledger["basis"]["prompt_tokens"] == 97_500
        assert ledger["basis"]["cached_tokens"] == 52_498
        assert ledger["missed_tokens"] == 45_002
        by = ledger["by_cause"]
        assert by["break"] == {"tokens": 11_500,
                               "by_kind": {"model-change": 6_000, "client-upgrade": 4_500,
                                           "tool-set-change": 1_000},
                               "by_segment": {"(not located)": 10_500, "tools": 1_000}}
        assert {c: v for c, v in by.items() if c != "break"} == {
            "cold": 20_000, "new": 9_000, "rounding": 5, "compaction": 2_000,
            "not-requested": 0, "routing": 0, "ttl": 0,
            "below-minimum": 0, "eviction": 0, "provider": 997, "unexplained": 1_500}

    def test_findings_carry_fixes_a_claude_code_user_can_apply(self, report: dict) -> None:
        found = {f["kind"]: f for f in report["findings"]}
        assert {k: found[k]["lost_tokens"] for k in (
            "model-change", "client-upgrade", "tool-set-change", "compaction",
            "provider-miss", "unexplained-miss")} == {
            "model-change": 6_000, "client-upgrade": 4_500, "tool-set-change": 1_000,
            "compaction": 2_000, "provider-miss": 997, "unexplained-miss": 1_500}
        assert "/model" in found["model-change"]["fix"]
        assert ".mcp.json" in found["tool-set-change"]["fix"]
        assert "between sessions" in found["client-upgrade"]["fix"]
        assert "/compact" in found["compaction"]["fix"]
        assert found["compaction"]["evidence"]["recorded"] == 1
        # the provider's verdict beside each finding whose requests carry one
        assert {k: found[k]["evidence"].get("provider_verdicts") for k in (
            "model-change", "tool-set-change", "provider-miss", "compaction")} == {
            "model-change": {"model_changed": 1}, "tool-set-change": {"tools_changed": 1},
            "provider-miss": {"messages_changed": 1}, "compaction": None}
        for f in report["findings"]:
            assert "cache_control" not in f["fix"], f["kind"]
        assert "2.1.92 -> 2.1.101" in found["client-upgrade"]["title"]
        # call 8's prompt is shorter than call 7's: said, not read as an intact prefix
        assert found["unexplained-miss"]["evidence"]["shorter_than_predecessor"] == 1
        assert "shorter prompt than the turn before" in found["unexplained-miss"]["title"]
        assert "capture the requests" in found["unexplained-miss"]["fix"]

    def test_provider_verdicts_beside_the_cause(self, report: dict) -> None:
        # call 4: break:model-change / model_changed (agree); call 6: break:tool-set-change /
        # tools_changed (agree); call 7: provider / messages_changed (disagree)
        # tokens: the verdicts say 6,000 + 1,000 + 998 missed; the ledger lost break 6,000 +
        # break 1,000 + provider 997 on the same calls (call 6 left 9,997 in the cache)
        assert {k: v for k, v in report["ledger"]["provider_verdicts"].items()
                if k != "per_call"} == {
            "calls": 3, "compared": 3, "agree": 2,
            "provider_missed_tokens": 7_998, "lost_tokens": 7_997,
            "matrix": {"break:model-change": {"model_changed": 1},
                       "break:tool-set-change": {"tools_changed": 1},
                       "provider": {"messages_changed": 1}}}

    def test_terminal_says_the_verdicts(self) -> None:
        result = runner.invoke(app, ["report", str(CC)])
        assert result.exit_code == 0, result.output
        assert ("provider verdicts: 3 calls carry one; prefixscope's cause agrees on 2 of 3 "
                "that name a change; they count 7,998 missed tokens, the ledger 7,997 lost") \
            in " ".join(result.output.split())


class TestClineLedger:
    def test_truncation_and_model_change(self) -> None:
        # call: prompt / cached -> ledger (by hand)
        # 1: 10,004 / 0       -> cold 10,004
        # 2: 15,006 / 10,002  -> rounding 2, new 5,002
        # 3: 10,000 / 8,096   -> truncation recorded: break 10,000 - 8,096 = 1,904 (the
        #                        prompt shrank to the cached system prompt; was `provider`)
        # 4: 11,004 / 0       -> model change: break 10,000, new 1,004
        # 5: 12,002 / 11,002  -> rounding 2, new 998
        report = _report(CLINE.parents[4])
        ledger = report["ledger"]
        assert (ledger["basis"]["prompt_tokens"], ledger["basis"]["cached_tokens"],
                ledger["missed_tokens"]) == (58_016, 29_100, 28_916)
        by = ledger["by_cause"]
        assert by["break"]["by_kind"] == {"model-change": 10_000, "truncation": 1_904}
        assert {c: v for c, v in by.items() if c != "break"} == {
            "cold": 10_004, "new": 7_004, "rounding": 4, "compaction": 0,
            "not-requested": 0, "routing": 0, "ttl": 0,
            "below-minimum": 0, "eviction": 0, "provider": 0, "unexplained": 0}
        found = {f["kind"]: f for f in report["findings"]}
        assert "context window" in found["truncation"]["fix"]
        assert "Plan and Act" in found["model-change"]["fix"]
        assert report["ledger"]["provider_verdicts"] == {
            "calls": 0, "compared": 0, "agree": 0, "provider_missed_tokens": 0,
            "lost_tokens": 0, "matrix": {}, "per_call": []}


def test_real_claude_code_files_change_only_where_they_record_events() -> None:
    """Of the real transcripts only ccusage's records a change (sonnet -> opus -> sonnet,
    and version 1.0.0 -> 1.1.0 on the third call); nothing else carries an event."""
    recorded = {}
    for path in sorted(REAL_CC.glob("*.jsonl")):
        requests, _ = read_requests(path)
        recorded[path.name] = [(r.native_id, e.kind) for r in requests for e in r.events]
    assert recorded == {
        "ccusage__project-alpha__session-alpha__chat.jsonl": [
            ("msg-alpha-2", "model-change"), ("msg-alpha-3", "model-change"),
            ("msg-alpha-3", "client-upgrade")],
        "claude-code-log__edge_cases.jsonl": [],
        "claude-code-log__representative_messages.jsonl": [],
        "claude-code-log__session_b.jsonl": [],
    }


def test_real_ccusage_transcript_model_switches_are_breaks() -> None:
    """ccusage's transcript (real, tests/data/real): three calls, sonnet -> opus -> sonnet.
    By hand (prompt = input + cache creation + cache read): 135 / read 10, 270 / 20,
    340 / 40. Call 1 is cold (125); call 2 is another model: break 135 - 20 = 115, new
    135; call 3 another model again (and version 1.0.0 -> 1.1.0: the model decides):
    break 270 - 40 = 230, new 70."""
    report = _report(REAL_CC / "ccusage__project-alpha__session-alpha__chat.jsonl")
    by = report["ledger"]["by_cause"]
    assert by["break"]["by_kind"] == {"model-change": 345}
    assert {c: v for c, v in by.items() if c != "break" and v} == {"cold": 125, "new": 205}


def test_microcompaction_is_a_recorded_history_rewrite(tmp_path: Path) -> None:
    """A `microcompact_boundary` record (Claude Code cleared old tool results) before call 7
    of the fixture: call 7 (prompt 11,000, cached 9,000, predecessor 10,000) is no longer a
    provider miss but a break of kind history-rewrite: 10,000 - 9,000 = 1,000, new 1,000;
    its verdict (messages_changed) now agrees."""
    lines = CC.read_text().splitlines(keepends=True)
    at = next(i for i, x in enumerate(lines) if '"msg_01RE07"' in x)
    boundary = {"parentUuid": "u15", "isSidechain": False, "userType": "external",
                "cwd": "/home/dev/shop", "sessionId": "7d3e2a10-5c4b-4e8f-9a61-2b7c0d9e4f35",
                "version": "2.1.101", "type": "system", "subtype": "microcompact_boundary",
                "content": "Context microcompacted", "isMeta": False, "level": "info",
                "timestamp": "2026-03-02T09:06:30.200Z", "uuid": "mc1",
                "microcompactMetadata": {"trigger": "auto", "preTokens": 10050,
                                         "tokensSaved": 3100,
                                         "compactedToolIds": ["toolu_01", "toolu_02"],
                                         "clearedAttachmentUUIDs": []}}
    path = tmp_path / "micro.jsonl"
    path.write_text("".join(lines[:at]) + json.dumps(boundary) + "\n" + "".join(lines[at:]))
    requests, _ = read_requests(path)
    seventh = next(r for r in requests if r.native_id == "msg_01RE07")
    assert [(e.kind, e.detail) for e in seventh.events] == [
        ("history-rewrite",
         "microcompact_boundary (trigger auto, tokensSaved 3100, 2 tool results cleared)")]
    ledger = _report(path)["ledger"]
    assert ledger["by_cause"]["break"]["by_kind"] == {
        "model-change": 6_000, "client-upgrade": 4_500, "tool-set-change": 1_000,
        "history-rewrite": 1_000}
    assert (ledger["by_cause"]["provider"], ledger["by_cause"]["rounding"],
            ledger["by_cause"]["new"]) == (0, 2, 9_000)
    assert ledger["provider_verdicts"]["agree"] == 3


def _roo_task(tmp_path: Path, manual: bool) -> Path:
    """A Roo Code task whose history is condensed before its third request: automatically
    (the condense_context message right after that request's api_req_started) or on demand
    (after the second request's answer, before the third begins)."""
    task = tmp_path / "Code" / "User" / "globalStorage" / "rooveterinaryinc.roo-cline" \
        / "tasks" / "roo-task"
    task.mkdir(parents=True)
    model = {"providerId": "anthropic", "modelId": "claude-sonnet-4-5-20250929", "mode": "code"}

    def started(ts: int, tokens_in: int, writes: int, reads: int) -> dict:
        return {"ts": ts, "type": "say", "say": "api_req_started", "modelInfo": model,
                "text": json.dumps({"request": "...", "apiProtocol": "anthropic",
                                    "tokensIn": tokens_in, "tokensOut": 100,
                                    "cacheWrites": writes, "cacheReads": reads,
                                    "cost": 0.01})}

    def text(ts: int, said: str) -> dict:
        return {"ts": ts, "type": "say", "say": "text", "text": said, "partial": False}

    condense = {"ts": 0, "type": "say", "say": "condense_context", "partial": False,
                "contextCondense": {"cost": 0.02, "prevContextTokens": 14000,
                                    "newContextTokens": 5000, "summary": "..."}}
    t0 = 1770000000000
    messages = [text(t0, "task"), started(t0 + 1000, 10_000, 9_996, 0), text(t0 + 2000, "a1"),
                started(t0 + 3000, 14_000, 4_000, 9_998), text(t0 + 4000, "a2")]
    if manual:
        messages.append({**condense, "ts": t0 + 5000})
    messages.append(started(t0 + 6000, 5_000, 1_998, 3_000))
    if not manual:
        messages.append({**condense, "ts": t0 + 6500})
    messages.append(text(t0 + 7000, "a3"))
    (task / "ui_messages.json").write_text(json.dumps(messages))
    return task


@pytest.mark.parametrize("manual", [False, True])
def test_roo_condensation_is_the_condensed_requests_compaction(tmp_path: Path,
                                                               manual: bool) -> None:
    # call: prompt (Roo's tokensIn, cache included) / cached -> ledger (by hand)
    # 1: 10,000 / 0      -> cold 10,000
    # 2: 14,000 / 9,998  -> rounding 2, new 4,000
    # 3:  5,000 / 3,000  -> condensed before it was sent: compaction 2,000
    task = _roo_task(tmp_path, manual)
    requests, skips = read_requests(task / "ui_messages.json")
    assert skips == []
    assert [[(e.kind, e.detail) for e in r.events] for r in requests] == [[], [], [
        ("compaction", "condense_context (prevContextTokens 14000, newContextTokens 5000)")]]
    by = _report(tmp_path / "Code")["ledger"]["by_cause"]
    assert {c: v for c, v in by.items() if c != "break" and v} == {
        "cold": 10_000, "new": 4_000, "rounding": 2, "compaction": 2_000}
