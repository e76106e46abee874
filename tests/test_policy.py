"""`report --what-if policy`: the TTL choice and keep-warm pings priced per kind of request,
on a hand-built Claude Code project (a main agent waiting on its user 10 minutes, a
sub-agent whose tools run 50 and 99 minutes), every figure computed by hand from Claude
Opus 4.5's list prices: 5-minute write $6.25 / MTok, 1-hour write $10, cache read $0.50
(docs/report.md#the-policy-per-kind-of-request)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES
from litellm_rows import spend_log
from test_pin_backend import ALTERNATING, WRITE_LESS_READ
from typer.testing import CliRunner

import prefixscope as ps
from prefixscope.cli.main import app
from prefixscope.findings.policy import last_message_of, request_kinds
from prefixscope.store import Store
from prefixscope.store.kinds import bodies_without_last_message, request_roles

runner = CliRunner()
W5, W1H, READ = 6.25, 10.0, 0.50  # Opus 4.5, dollars per million tokens
M = 1e-6


def _lines(calls: list[tuple[str, str, int, int]], side: bool) -> list[str]:
    """A user line (a human's text, or a tool result) and an assistant line per call:
    (time, what the user line is, cache read, 5-minute write)."""
    out = []
    for n, (at, sent, read, five) in enumerate(calls):
        common = {"sessionId": "sess-1", "cwd": "/work/app", "timestamp": at,
                  **({"isSidechain": True, "agentId": "s1"} if side else {})}
        content: Any = ("please go on" if sent == "user" else
                        [{"type": "tool_result", "tool_use_id": f"t{n}", "content": "ok"}])
        out.append(json.dumps({**common, "type": "user", "uuid": f"q{n}",
                               "message": {"role": "user", "content": content}}))
        out.append(json.dumps({
            **common, "type": "assistant", "uuid": f"a{n}", "requestId": f"req_{side}_{n}",
            "message": {"id": f"msg_{'s' if side else 'm'}{n}", "role": "assistant",
                        "model": "claude-opus-4-5",
                        "content": [{"type": "text", "text": "ok"}],
                        "usage": {"input_tokens": 0, "cache_read_input_tokens": read,
                                  "cache_creation_input_tokens": five,
                                  "cache_creation": {"ephemeral_5m_input_tokens": five,
                                                     "ephemeral_1h_input_tokens": 0},
                                  "output_tokens": 100}}}))
    return out


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Main agent: 100,000 tokens written at 10:00; its user answers at 10:10 (the prefix
    expired: 99,998 re-written with 1,000 new + the 2 the breakpoint left), a tool loop
    call a minute later reads it. Sub-agent: 40,000 at 11:00; a tool result at 11:50
    (39,998 expired) and 11:51; the next at 13:30, 99 minutes on (41,998 expired: the
    41,998 = 40,998 + 1,002 - 2 the call before left)."""
    root = tmp_path_factory.mktemp("policy") / "projects" / "-work-app"
    (root / "sess-1" / "subagents").mkdir(parents=True)
    (root / "sess-1.jsonl").write_text("\n".join(_lines([
        ("2026-03-02T10:00:00Z", "user", 0, 100_000),
        ("2026-03-02T10:10:00Z", "user", 0, 101_000),
        ("2026-03-02T10:11:00Z", "tool", 100_998, 1_002)], side=False)) + "\n")
    (root / "sess-1" / "subagents" / "agent-s1.jsonl").write_text("\n".join(_lines([
        ("2026-03-02T11:00:00Z", "user", 0, 40_000),
        ("2026-03-02T11:50:00Z", "tool", 0, 41_000),
        ("2026-03-02T11:51:00Z", "tool", 40_998, 1_002),
        ("2026-03-02T13:30:00Z", "tool", 0, 43_000)], side=True)) + "\n")
    return root


def report(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["report", *args, "--json"])
    assert result.exit_code == 0, result.output + result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def policy(project: Path) -> dict[str, Any]:
    doc = report(str(project), "--what-if", "policy")
    (line,) = [w for w in doc["what_if"] if w["name"] == "policy"]
    assert doc["ledger"]["by_cause"]["ttl"] == 99_998 + 39_998 + 41_998
    return line


def part(policy: dict[str, Any], agent: str) -> dict[str, Any]:
    (found,) = [p for p in policy["policy"]["parts"] if p["agent"] == agent]
    return found


def options(p: dict[str, Any]) -> dict[str, float]:
    return {o["name"]: o["net_usd"] for o in p["options"]}


class TestTheMainAgentKeepsWarm:
    """W = 100,000 + 101,000 + 1,002 = 202,002 written at 5 minutes; K = 99,998 re-written
    after the 10-minute pause."""

    def test_every_option_priced_by_hand(self, policy):
        main = part(policy, "main")
        kept = 99_998 * (W5 - READ) * M  # 0.5749885
        assert options(main) == pytest.approx({
            "as-logged": 0.0,
            # the hour keeps K; the premium on the other 102,004: 0.382515
            "ttl-1h": kept - 102_004 * (W1H - W5) * M,  # 0.1924735
            # ceil(600 / 270) - 1 = 2 pings reading 99,998 tokens: 0.099998
            "keep-warm": kept - 2 * 99_998 * READ * M,  # 0.4749905
            # no pause past the hour: the same as the hour alone
            "ttl-1h+keep-warm": kept - 102_004 * (W1H - W5) * M}, abs=1e-6)

    def test_it_chooses_the_pings_and_says_when_they_pay(self, policy):
        main = part(policy, "main")
        assert main["choice"] == "keep-warm"
        assert main["net_usd"] == pytest.approx(0.4749905, abs=1e-6)
        (chosen,) = [o for o in main["options"] if o["name"] == "keep-warm"]
        assert (chosen["pings"], chosen["ping_minutes"], chosen["kept_tokens"]) == (
            2, 4.5, 99_998)
        # pings pay while p x 0.50 < 6.25 - 0.50, p <= 11: a pause of 12 x 4.5 minutes
        assert main["payback_pause_minutes"] == pytest.approx(54.0)
        # 99,998 / 202,002 = 49.5% re-writes; (10 - 6.25) / (10 - 0.50) = 39.5% breaks even
        assert main["reused_share"] == pytest.approx(99_998 / 202_002)
        assert main["break_even_share"] == pytest.approx(3.75 / 9.5)

    def test_the_user_turn_holds_the_pause_the_tool_loop_none(self, policy):
        turns = {t["turn"]: t for t in part(policy, "main")["turns"]}
        assert turns["user turn"]["requests"] == 2 and turns["tool loop"]["requests"] == 1
        user = turns["user turn"]
        assert (user["expired_requests"], user["kept_tokens"], user["pings"]) == (
            1, 99_998, 2)
        assert user["saved_usd"] == pytest.approx(0.5749885, abs=1e-6)
        assert user["ping_usd"] == pytest.approx(0.099998, abs=1e-6)
        assert turns["tool loop"]["expired_requests"] == 0


class TestTheSubAgentWritesForTheHour:
    """W = 40,000 + 41,000 + 1,002 + 43,000 = 125,002; the 50-minute pause re-wrote 39,998,
    the 99-minute one 41,998."""

    def test_every_option_priced_by_hand(self, policy):
        sub = part(policy, "sub-agent")
        first, second = 39_998 * (W5 - READ) * M, 41_998 * (W5 - READ) * M
        assert options(sub) == pytest.approx({
            "as-logged": 0.0,
            # the hour keeps the 50-minute pause only: 0.2299885 - 85,004 x 3.75e-6
            "ttl-1h": first - 85_004 * (W1H - W5) * M,  # -0.0887765
            # 11 pings (ceil(3000 / 270) - 1) through the 50 minutes pay (0.219989 <
            # 0.2299885); 21 through the 99 minutes would cost 0.440979 > 0.2414885
            "keep-warm": first - 11 * 39_998 * READ * M,  # 0.0099995
            # the hour, and ceil(5940 / 3570) - 1 = 1 ping through the 99 minutes: both
            # re-writes avoided, the premium on 125,002 - 81,996 = 43,006 tokens
            "ttl-1h+keep-warm": first + second - 43_006 * (W1H - W5) * M
            - 41_998 * READ * M}, abs=1e-6)  # 0.471477 - 0.1612725 - 0.020999 = 0.2892055

    def test_it_chooses_the_hour_with_pings_past_it(self, policy):
        sub = part(policy, "sub-agent")
        assert sub["choice"] == "ttl-1h+keep-warm"
        assert sub["net_usd"] == pytest.approx(0.2892055, abs=1e-6)
        (chosen,) = [o for o in sub["options"] if o["name"] == "ttl-1h+keep-warm"]
        assert (chosen["pings"], chosen["ping_minutes"], chosen["kept_requests"],
                chosen["kept_tokens"]) == (1, 59.5, 2, 81_996)
        assert sub["payback_pause_minutes"] == pytest.approx(12 * 59.5)
        assert sub["reused_share"] == pytest.approx(39_998 / 125_002)
        turns = {t["turn"]: t for t in sub["turns"]}
        assert (turns["tool loop"]["kept_requests"], turns["tool loop"]["pings"]) == (2, 1)


class TestThePolicyIsItsParts:
    def test_the_kinds_nets_add_up_to_the_policy(self, policy):
        assert policy["policy"]["net_usd"] == pytest.approx(0.4749905 + 0.2892055, abs=1e-6)
        assert policy["net_usd"] == pytest.approx(policy["policy"]["net_usd"], abs=1e-6)
        # (each figure rounded to the micro-dollar: two parts' sum within 2 of them)
        assert sum(p["net_usd"] for p in policy["policy"]["parts"]) == pytest.approx(
            policy["net_usd"], abs=2e-6)
        assert policy["saved_usd"] - policy["cost_usd"] == pytest.approx(policy["net_usd"],
                                                                         abs=1e-6)

    def test_no_token_priced_twice(self, policy):
        parts = policy["policy"]["parts"]
        assert sum(p["requests"] for p in parts) == 7
        assert sum(p["ttl_tokens"] for p in parts) == 99_998 + 39_998 + 41_998

    def test_pinning_is_not_applicable_without_backends(self, policy):
        assert policy["policy"]["pinning"].startswith("not applicable: the log names no "
                                                      "backend")
        assert all(p["pin_usd"] is None and not p["pin_backend"]
                   for p in policy["policy"]["parts"])

    def test_the_whole_log_what_ifs_are_the_same_arithmetic(self, project):
        # the log's own ttl-1h (every write at an hour) is the kinds' ttl-1h summed: the
        # same function over all the calls
        doc = report(str(project), "--what-if", "ttl-1h,policy")
        got = {w["name"]: w for w in doc["what_if"]}
        parts = {p["agent"]: options(p) for p in got["policy"]["policy"]["parts"]}
        assert got["ttl-1h"]["net_usd"] == pytest.approx(
            parts["main"]["ttl-1h"] + parts["sub-agent"]["ttl-1h"], abs=1e-6)


def test_the_library_table_is_the_json(project: Path, tmp_path: Path):
    with ps.ingest([project], store=tmp_path / "lib.duckdb") as st:
        frame = ps.report(st, what_if="policy").to_polars("policy")
        assert ps.report(st).to_polars("policy").height == 0  # not asked for
    rows = {r["agent"]: r for r in frame.to_dicts()}
    assert (rows["main"]["choice"], rows["sub-agent"]["choice"]) == ("keep-warm",
                                                                     "ttl-1h+keep-warm")
    assert rows["main"]["net_keep_warm"] == pytest.approx(0.4749905, abs=1e-6)
    assert rows["sub-agent"]["net_ttl_1h"] == pytest.approx(-0.0887765, abs=1e-6)
    assert rows["sub-agent"]["net_usd"] == pytest.approx(0.2892055, abs=1e-6)
    assert rows["main"]["pin_usd"] is None and rows["main"]["pin_backend"] is False


def test_a_bundle_without_the_kinds_is_priced_as_one_kind(project: Path, tmp_path: Path):
    # the bundle keeps no agent nor last message: the seven calls are one kind, whose
    # options are the whole log's -- keep-warm 0.4749905 + 0.0099995 (its pauses decided
    # one by one) beats the hour with pings past it: the premium on 327,004 - 181,994 =
    # 145,010 tokens and one ping, 1.0464655 - 0.5437875 - 0.020999 = 0.481679
    store = str(tmp_path / "st.duckdb")
    for args in (["ingest", str(project), "--store", store, "-q"],
                 ["export", "--bundle", str(tmp_path / "b"), "--store", store]):
        result = runner.invoke(app, args, catch_exceptions=False)
        assert result.exit_code == 0, result.output
    doc = report(str(tmp_path / "b"), "--what-if", "policy")
    (line,) = [w for w in doc["what_if"] if w["name"] == "policy"]
    (only,) = line["policy"]["parts"]
    assert (only["agent"], only["requests"], only["choice"]) == ("main", 7, "keep-warm")
    assert options(only)["ttl-1h+keep-warm"] == pytest.approx(0.481679, abs=1e-6)
    assert line["net_usd"] == pytest.approx(0.48499, abs=1e-6)
    assert "every call is priced as a main agent's" in line["detail"]


def test_a_kind_already_on_the_hour_is_priced_as_logged_or_pinged(tmp_path: Path):
    # 100,000 tokens written for the hour at 10:00, the next call at 12:00 finds them
    # expired and writes 101,000 again for the hour (99,998 ttl tokens, charged $10 less
    # the $0.50 read: 0.949981); no 1-hour option to price, pings every 59.5 minutes:
    # ceil(7200 / 3570) - 1 = 2 of them, 2 x 99,998 x $0.50 = 0.099998
    root = tmp_path / "projects" / "-work-app"
    root.mkdir(parents=True)
    lines = _lines([("2026-03-02T10:00:00Z", "user", 0, 100_000),
                    ("2026-03-02T12:00:00Z", "user", 0, 101_000)], side=False)
    hour = [line.replace('"ephemeral_5m_input_tokens": 100000, "ephemeral_1h_input_tokens": 0',
                         '"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 100000')
            .replace('"ephemeral_5m_input_tokens": 101000, "ephemeral_1h_input_tokens": 0',
                     '"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 101000')
            for line in lines]
    assert hour != lines
    (root / "s.jsonl").write_text("\n".join(hour) + "\n")
    doc = report(str(root), "--what-if", "policy")
    (line,) = [w for w in doc["what_if"] if w["name"] == "policy"]
    (only,) = line["policy"]["parts"]
    assert options(only) == pytest.approx({
        "as-logged": 0.0, "keep-warm": 99_998 * (W1H - READ) * M - 2 * 99_998 * READ * M},
        abs=1e-6)  # 0.849983
    assert only["choice"] == "keep-warm"
    assert (only["reused_share"], only["break_even_share"]) == (None, None)
    # re-written at $10: pings pay while p x 0.50 < 9.50, p <= 18: 19 x 59.5 minutes
    assert only["payback_pause_minutes"] == pytest.approx(19 * 59.5)


def test_the_terminal_and_markdown_name_each_kind(project: Path, tmp_path: Path):
    md, page = tmp_path / "r.md", tmp_path / "r.html"
    result = runner.invoke(app, ["report", str(project), "--what-if", "policy", "--md",
                                 str(md), "--html", str(page)])
    assert result.exit_code == 0, result.output
    for text in (result.stdout, md.read_text(), page.read_text()):
        text = " ".join(text.replace("│", " ").split())
        assert "what-if policy: net $0.76 over 2 kinds of request" in text
        assert "policy · main · /work/app · claude-opus-4-5: keep-warm, net $0.47" in text
        assert ("policy · sub-agent · /work/app · claude-opus-4-5: ttl-1h+keep-warm, net "
                "$0.29") in text


@pytest.mark.parametrize(("body", "sent"), [
    ({"messages": [{"role": "user", "content": "hi"}]}, "user"),
    ({"messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": "42"}]}]}, "tool_result"),
    ({"messages": [{"role": "tool", "tool_call_id": "t", "content": "42"}]}, "tool_result"),
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": "42"}]},
     "tool_result"),
    ({"contents": [{"role": "user", "parts": [{"functionResponse": {"name": "f"}}]}]},
     "tool_result"),
    ({"messages": [{"role": "assistant", "content": "prefill"}]}, None),
    (None, None),
])
def test_a_body_tells_what_it_sent_last(body, sent):
    assert last_message_of(body) == sent


def test_pinning_joins_the_choice_where_the_log_names_backends(tmp_path: Path):
    # tests/test_pin_backend.py's session alternating between two LiteLLM deployments a
    # minute apart: no pause expires anything (only 5m is priced), pinning recovers its
    # 13,998 routing tokens, written at $3.75 and read at $0.30 instead: 0.0482931
    doc = report(str(spend_log(tmp_path / "alt.jsonl", {"alt": ALTERNATING})), "--what-if",
                 "policy,pin-backend")
    got = {w["name"]: w for w in doc["what_if"]}
    policy = got["policy"]["policy"]
    assert policy["pinning"] == "applicable"
    (only,) = policy["parts"]
    assert [o["name"] for o in only["options"]] == ["as-logged"]
    assert (only["choice"], only["pin_backend"], only["routing_tokens"]) == ("as-logged", True,
                                                                           13_998)
    assert only["pin_usd"] == pytest.approx(13_998 * WRITE_LESS_READ * M, abs=1e-6)
    assert policy["net_usd"] == pytest.approx(only["pin_usd"], abs=1e-6)
    assert got["policy"]["net_usd"] == pytest.approx(got["pin-backend"]["net_usd"], abs=1e-6)
    assert "as-logged + pin-backend" in got["policy"]["detail"]


def test_the_kinds_a_log_records(tmp_path: Path):
    # a main conversation with a sidechain line, a compaction's summarizer file, and a raw
    # capture whose bodies end in a human's message, then tool results
    root = tmp_path / "projects" / "-work-app"
    (root / "sess-2" / "subagents").mkdir(parents=True)
    main = _lines([("2026-03-02T10:00:00Z", "user", 0, 5_000)], side=False)
    side = _lines([("2026-03-02T10:01:00Z", "tool", 0, 6_000)], side=True)
    (root / "sess-2.jsonl").write_text("\n".join(main + side).replace("sess-1", "sess-2")
                                       + "\n")
    (root / "sess-2" / "subagents" / "agent-acompact-1.jsonl").write_text("\n".join(
        _lines([("2026-03-02T10:05:00Z", "user", 0, 7_000)], side=True)).replace(
        "sess-1", "sess-2").replace("msg_s0", "msg_c0") + "\n")
    store = str(tmp_path / "k.duckdb")
    result = runner.invoke(app, ["ingest", str(root), str(FIXTURES / "raw"
                                                          / "claude_code_capture.jsonl"),
                                 "--store", store, "-q"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    st = Store.open(store, read_only=True)
    try:
        roles = request_roles(st)
        kinds = request_kinds(roles, bodies_without_last_message(st))
        natives = dict(st.run("SELECT id, native_id FROM requests"))
    finally:
        st.close()
    by_native = {natives[rid]: kind for rid, kind in kinds.items()}
    assert by_native["msg_m0"] == ("main", "user turn")
    assert by_native["msg_s0"] == ("sub-agent", "tool loop")
    assert by_native["msg_c0"] == ("compaction", "user turn")
    raw = sorted(kind for native, kind in by_native.items()
                 if native not in ("msg_m0", "msg_s0", "msg_c0"))
    assert raw == [("main", "tool loop"), ("main", "tool loop"), ("main", "user turn")]


def test_a_responses_chain_is_not_a_sub_agent(tmp_path: Path):
    # previous_response_id is a raw capture's parent_key: the call continues a response of
    # the same conversation, it is no sub-agent's (only the agents' own logs say that)
    store = str(tmp_path / "r.duckdb")
    result = runner.invoke(app, ["ingest", str(FIXTURES / "raw" / "session_ids.jsonl"),
                                 "--store", store, "-q"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    st = Store.open(store, read_only=True)
    try:
        chained = {rid for (rid,) in st.run(
            "SELECT id FROM requests WHERE parent_key IS NOT NULL")}
        roles = request_roles(st)
    finally:
        st.close()
    assert len(chained) == 2
    assert {roles[rid][0] for rid in chained} == {"main"}
