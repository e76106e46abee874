"""`report --what-if policy`: the volatile part of the prefix moved after the last breakpoint
(``move-volatile``), priced per kind of request from the ledger and combined with the TTL
options, on a log built with known answers (docs/report.md#the-policy-per-kind-of-request):

* the main agent, raw Anthropic captures of Claude Code (bodies, Claude Opus 4.5): its
  billing header's ``cch=`` changes on two turns, one a minute after the turn before, one
  after a 10-minute pause -- the ledger books 51,000 and 52,000 ``break`` tokens of kind
  ``volatile-prefix-segment``;
* a sub-agent, a Claude Code transcript (which keeps no request body: usage only) whose tool
  answers after 10 minutes -- nothing can say whether a volatile part broke it;
* a second main-agent kind on Claude Sonnet 4.5 (bodies, the header never changes): clean.

Every dollar by hand from Claude Opus 4.5's list prices: 5-minute write $6.25 / MTok, 1-hour
write $10, cache read $0.50."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_policy import _lines, options, part, report
from typer.testing import CliRunner

import prefixscope as ps
from prefixscope.cli.main import app
from prefixscope.tokenizers import load_tokenizer

runner = CliRunner()

W5, W1H, READ = 6.25, 10.0, 0.50  # Opus 4.5, dollars per million tokens
M = 1e-6
CC = {"type": "ephemeral"}
HEADER = "x-anthropic-billing-header: cc_version=2.1.37.0d9; cc_entrypoint=cli; cch={};"


def _body(model: str, header: str, turns: int) -> dict[str, Any]:
    """Claude Code's shape: the billing header first in the system prompt (no breakpoint
    before it), a 49,000-word system prompt and 1,000 words a user turn (a word a token in
    the stand-in tokenizer: the rendered prompts are as long as the usage says)."""
    messages: list[dict[str, Any]] = []
    for i in range(turns):
        if i:
            messages.append({"role": "assistant", "content": f"done step {i}"})
        messages.append({"role": "user", "content": [
            {"type": "text", "text": f"step {i} " + "beta " * 1_000}]})
    messages[-1]["content"][-1]["cache_control"] = CC
    return {"model": model, "max_tokens": 1000, "messages": messages, "system": [
        {"type": "text", "text": HEADER.format(header)},
        {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.",
         "cache_control": CC},
        {"type": "text", "text": "alpha " * (49_000 if "opus" in model else 19_000),
         "cache_control": CC}]}


def _captures(session: str, model: str,
              calls: list[tuple[str, str, int, int]]) -> str:
    """Raw captures: (time, the header's cch, cache read, 5-minute write) a call."""
    return "".join(json.dumps({
        "timestamp": at, "endpoint": "/v1/messages",
        "headers": {"X-Claude-Code-Session-Id": session,
                    "user-agent": "claude-cli/2.1.37 (external, cli)"},
        "request": _body(model, cch, n + 1),
        "response": {"id": f"msg_{session}_{n}", "type": "message", "role": "assistant",
                     "model": model, "content": [{"type": "text", "text": "ok"}],
                     "usage": {"input_tokens": 0, "cache_read_input_tokens": read,
                               "cache_creation_input_tokens": write,
                               "cache_creation": {"ephemeral_5m_input_tokens": write,
                                                  "ephemeral_1h_input_tokens": 0},
                               "output_tokens": 100}}}) + "\n"
        for n, (at, cch, read, write) in enumerate(calls))


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("move")
    # 50,000 written; a minute on, 1,000 more; then cch changes (a minute on: the 51,000
    # the call before sent are written again), changes again after 10 minutes (52,000
    # written again: they had expired too), and stays a minute later
    (root / "main.jsonl").write_text(_captures("main-1", "claude-opus-4-5", [
        ("2026-03-02T10:00:00Z", "aaaaa", 0, 50_000),
        ("2026-03-02T10:01:00Z", "aaaaa", 50_000, 1_000),
        ("2026-03-02T10:02:00Z", "bbbbb", 0, 52_000),
        ("2026-03-02T10:12:00Z", "ccccc", 0, 53_000),
        ("2026-03-02T10:13:00Z", "ccccc", 53_000, 1_000)]))
    (root / "sonnet.jsonl").write_text(_captures("main-2", "claude-sonnet-4-5", [
        ("2026-03-02T12:00:00Z", "ddddd", 0, 20_000),
        ("2026-03-02T12:01:00Z", "ddddd", 20_000, 1_000)]))
    # the sub-agent: 40,000 written at 11:00, its tool answers at 11:10 (39,998 expired)
    side = root / "projects" / "-work-app" / "sess-1" / "subagents"
    side.mkdir(parents=True)
    (side / "agent-s1.jsonl").write_text("\n".join(_lines([
        ("2026-03-02T11:00:00Z", "user", 0, 40_000),
        ("2026-03-02T11:10:00Z", "tool", 0, 41_000)], side=True)) + "\n")
    return root


@pytest.fixture(scope="module")
def doc(log: Path) -> dict[str, Any]:
    out = report(str(log), "--what-if", "policy,strip-billing-header,drop:cch=[0-9a-f]+;")
    assert out["ledger"]["by_cause"]["break"]["by_kind"] == {
        "volatile-prefix-segment": 51_000 + 52_000}
    return out


@pytest.fixture(scope="module")
def policy(doc: dict[str, Any]) -> dict[str, Any]:
    (line,) = [w for w in doc["what_if"] if w["name"] == "policy"]
    return line


def _main(policy: dict[str, Any]) -> dict[str, Any]:
    (found,) = [p for p in policy["policy"]["parts"]
                if p["agent"] == "main" and p["model"] == "claude-opus-4-5"]
    return found


class TestTheMainAgentMovesItsHeader:
    def test_every_option_priced_by_hand(self, policy):
        main = _main(policy)
        # the turn a minute after the last: its 51,000 break tokens read, not re-written
        moved = 51_000 * (W5 - READ) * M  # 0.29325
        # the turn after 10 minutes: moved, its 52,000 would have expired -- kept only by
        # an option that keeps the pause
        expired = 52_000 * (W5 - READ) * M  # 0.299
        # 5-minute writes with the move: 50,000 + 1,000 + (52,000 - 51,000 read) + 53,000
        # + 1,000 = 106,000; the hour keeps the 52,000, a premium on the other 54,000
        hour = expired - 54_000 * (W1H - W5) * M  # 0.0965
        # 2 pings (ceil(600 / 270) - 1) reading the 52,000 the call before left
        warm = expired - 2 * 52_000 * READ * M  # 0.247
        assert options(main) == pytest.approx({
            "as-logged": 0.0,  # nothing expired as logged: no TTL option alone
            "move-volatile": moved,
            "ttl-1h+move-volatile": moved + hour,  # 0.38975
            "keep-warm+move-volatile": moved + warm,  # 0.54025
            "ttl-1h+keep-warm+move-volatile": moved + hour}, abs=1e-6)  # no pause > 1 h
        assert (main["move"], main["volatile_tokens"]) == ("applicable", 103_000)

    def test_it_chooses_the_move_with_pings(self, policy):
        main = _main(policy)
        assert main["choice"] == "keep-warm+move-volatile"
        assert main["net_usd"] == pytest.approx(0.54025, abs=1e-6)
        (chosen,) = [o for o in main["options"] if o["name"] == main["choice"]]
        # no token twice: the move reads 51,000, the pings keep the other 52,000
        assert (chosen["moved_tokens"], chosen["moved_requests"], chosen["kept_tokens"],
                chosen["pings"]) == (51_000, 1, 52_000, 2)
        assert chosen["moved_tokens"] + chosen["kept_tokens"] == main["volatile_tokens"]
        assert chosen["moved_usd"] == pytest.approx(0.29325, abs=1e-6)
        assert chosen["cost_usd"] == pytest.approx(0.052, abs=1e-6)  # the pings alone
        (turn,) = main["turns"]
        assert (turn["turn"], turn["moved_tokens"], turn["kept_tokens"]) == (
            "user turn", 51_000, 52_000)
        assert ("moving the volatile part after the last breakpoint reads 51,000 break tokens "
                "of 1 call ($0.29) instead of paying for them again (moving adds no write)"
                ) in main["detail"]


class TestTheOtherKindsDoNotMove:
    def test_the_sub_agent_keeps_warm_and_its_move_is_not_measurable(self, policy):
        sub = part(policy, "sub-agent")
        assert sub["move"].startswith("not measurable without bodies")
        assert sub["volatile_tokens"] == 0 and "move-volatile" not in str(sub["options"])
        # 39,998 x 5.75 - 2 pings x 39,998 x 0.50; the hour: a premium on 41,002
        assert options(sub) == pytest.approx({
            "as-logged": 0.0,
            "ttl-1h": 39_998 * (W5 - READ) * M - 41_002 * (W1H - W5) * M,  # 0.076231
            "keep-warm": 39_998 * (W5 - READ) * M - 2 * 39_998 * READ * M,  # 0.1899905
            "ttl-1h+keep-warm": 39_998 * (W5 - READ) * M - 41_002 * (W1H - W5) * M},
            abs=1e-6)
        assert sub["choice"] == "keep-warm"
        assert "move-volatile not measurable without bodies" in sub["detail"]

    def test_a_clean_kind_with_bodies_has_nothing_to_move(self, policy):
        (clean,) = [p for p in policy["policy"]["parts"] if p["model"] == "claude-sonnet-4-5"]
        assert clean["move"].startswith("nothing to move")
        assert (clean["choice"], clean["volatile_tokens"]) == ("as-logged", 0)
        assert "not measurable" not in clean["detail"]

    def test_the_kinds_nets_add_up(self, policy):
        assert policy["net_usd"] == pytest.approx(0.54025 + 0.1899905, abs=1e-6)
        assert "main · claude-opus-4-5: keep-warm+move-volatile (net $0.54)" in policy[
            "detail"]


def test_the_render_what_ifs_agree_within_the_stand_in_tokenizer(doc):
    # The render what-ifs re-render every prompt and replay it (retention included), in the
    # stand-in tokenizer's counts; the policy reads the ledger, in the log's. Both read the
    # turn a minute after its predecessor, not the one after 10 minutes. Stripping the
    # header also takes its own tokens out of the prefix read (33 by the tokenizer, + the
    # separator); dropping the cch= value keeps the rest of the header in it.
    got = {w["name"]: w for w in doc["what_if"]}
    header = len(load_tokenizer("deepseek-v4").encode(HEADER.format("bbbbb")).ids)
    assert header == 33
    strip = got["strip-billing-header"]["gain_tokens"]
    drop = got["drop:cch=[0-9a-f]+;"]["gain_tokens"]
    assert 51_000 * 0.995 <= strip <= 51_000 - header
    assert abs(drop - 51_000) <= 51_000 * 0.005
    assert drop - strip >= header


def test_the_terminal_markdown_and_html_say_the_move(log: Path, tmp_path: Path):
    md, page = tmp_path / "r.md", tmp_path / "r.html"
    result = runner.invoke(app, ["report", str(log), "--what-if", "policy", "--md", str(md),
                                 "--html", str(page)])
    assert result.exit_code == 0, result.output
    for text in (result.stdout, md.read_text(), page.read_text()):
        text = " ".join(text.replace("│", " ").split())
        assert ("policy · main · claude-opus-4-5: keep-warm+move-volatile, net $0.54 over 5 "
                "calls") in text
        assert ("moving the volatile part after the last breakpoint reads 51,000 break tokens "
                "of 1 call ($0.29) instead of paying for them again (moving adds no write)"
                ) in text
        assert "move-volatile not measurable without bodies" in text


def test_the_library_table_has_the_move(log: Path, tmp_path: Path):
    with ps.ingest([log], store=tmp_path / "lib.duckdb") as st:
        frame = ps.report(st, what_if="policy").to_polars("policy")
    rows = {(r["agent"], r["model"]): r for r in frame.to_dicts()}
    main = rows["main", "claude-opus-4-5"]
    assert (main["choice"], main["move"], main["volatile_tokens"]) == (
        "keep-warm+move-volatile", "applicable", 103_000)
    assert main["net_move_volatile"] == pytest.approx(0.29325, abs=1e-6)
    assert main["net_keep_warm_move_volatile"] == pytest.approx(0.54025, abs=1e-6)
    assert main["net_ttl_1h"] is None  # nothing expired as logged
    sub = rows["sub-agent", "claude-opus-4-5"]
    assert sub["net_move_volatile"] is None and sub["move"].startswith("not measurable")


def test_a_bundle_prices_the_same_move(log: Path, tmp_path: Path):
    # a bundle keeps no body but its ledger's causes and its diff's pairs: the move is priced
    # as on the log (every kind a main agent's: the sub-agent's calls are the kind of
    # /work/app, still not measurable -- no pair of theirs was diffed -- and the clean kind
    # still has nothing to move)
    store = str(tmp_path / "st.duckdb")
    for args in (["ingest", str(log), "--store", store, "-q"],
                 ["export", "--bundle", str(tmp_path / "b"), "--store", store]):
        result = runner.invoke(app, args, catch_exceptions=False)
        assert result.exit_code == 0, result.output
    (line,) = [w for w in report(str(tmp_path / "b"), "--what-if", "policy")["what_if"]
               if w["name"] == "policy"]
    parts = {(p["project"], p["model"]): p for p in line["policy"]["parts"]}
    main = parts[None, "claude-opus-4-5"]
    assert (main["choice"], main["move"]) == ("keep-warm+move-volatile", "applicable")
    assert main["net_usd"] == pytest.approx(0.54025, abs=1e-6)
    assert parts["/work/app", "claude-opus-4-5"]["move"].startswith("not measurable")
    assert parts[None, "claude-sonnet-4-5"]["move"].startswith("nothing to move")


def test_a_model_without_list_prices_says_the_move_is_not_priced(tmp_path: Path):
    (tmp_path / "main.jsonl").write_text(_captures("main-9", "claude-mystery-1", [
        ("2026-03-02T10:00:00Z", "aaaaa", 0, 20_000),
        ("2026-03-02T10:01:00Z", "bbbbb", 0, 21_000)]))
    out = report(str(tmp_path), "--what-if", "policy")
    assert out["ledger"]["by_cause"]["break"]["by_kind"] == {"volatile-prefix-segment": 20_000}
    (line,) = [w for w in out["what_if"] if w["name"] == "policy"]
    (only,) = line["policy"]["parts"]
    assert only["move"].startswith("not priced") and only["choice"] == "as-logged"


def test_a_self_hosted_kind_reads_every_volatile_break_at_the_users_rate():
    # sample_logs' Langfuse Claude Code calls (model llm-prime, a self-hosted upstream;
    # bodies): the billing header's fresh cch= breaks 54 calls, 91,960 volatile break tokens;
    # a self-hosted cache has no TTL, so moved, every one is read: at --price-per-mtok 1
    # (reads free) 91,960 x $1 / MTok = 0.09196
    out = report(str(Path(__file__).parents[1] / "sample_logs"), "--what-if", "policy",
                 "--price-per-mtok", "1")
    assert out["ledger"]["by_cause"]["break"]["by_kind"]["volatile-prefix-segment"] == 91_960
    (line,) = [w for w in out["what_if"] if w["name"] == "policy"]
    (prime,) = [p for p in line["policy"]["parts"] if p["model"] == "llm-prime"]
    assert (prime["choice"], prime["volatile_tokens"]) == ("move-volatile", 91_960)
    (chosen,) = [o for o in prime["options"] if o["name"] == "move-volatile"]
    assert (chosen["moved_tokens"], chosen["moved_requests"]) == (91_960, 54)
    assert prime["net_usd"] == pytest.approx(0.09196, abs=1e-6)
