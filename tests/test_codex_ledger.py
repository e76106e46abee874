"""The ledger of a Codex rollout (issue 35): Codex's recorded events book their kind, a
new user turn's dropped reasoning is a history-rewrite break, and OpenAI's retention is a
range -- a pause past 10 minutes is an expiry only when the read after it shows one.

The fixture and the hand computation of every number are in tests/test_codex_turns.py's
docstring (call 3: break 17,532; call 4: provider 128, rounding 124, new 1,500 after a
40-minute pause the cache outlived; call 5: ttl 22,912 after 67 minutes with nothing read;
call 6: model-change 24,000; call 7: compaction 6,000).
"""

from __future__ import annotations

import json

from test_codex_turns import TURNS
from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.findings.ledger import hosted_rules

runner = CliRunner()


def _report() -> dict:
    result = runner.invoke(app, ["report", str(TURNS), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


class TestLedger:
    def test_report_books_each_loss_by_hand(self) -> None:
        ledger = _report()["ledger"]
        assert ledger["basis"]["prompt_tokens"] == 143_500
        assert ledger["basis"]["cached_tokens"] == 45_184
        by = ledger["by_cause"]
        assert {k: v for k, v in by.items() if k != "break"} == {
            "cold": 20_000, "new": 7_500, "rounding": 244, "compaction": 6_000,
            "not-requested": 0, "routing": 0, "ttl": 22_912, "below-minimum": 0, "eviction": 0,
            "provider": 128, "unexplained": 0}
        assert by["break"]["tokens"] == 41_532
        assert by["break"]["by_kind"] == {"model-change": 24_000, "history-rewrite": 17_532}
        assert ledger["missed_tokens"] == 143_500 - 45_184 == 98_316

    def test_findings_name_codex_causes_and_fixes(self) -> None:
        found = {f["kind"]: f for f in _report()["findings"]}
        assert found["history-rewrite"]["lost_tokens"] == 17_532
        assert "dropped the reasoning" in found["history-rewrite"]["title"]
        assert "Responses API" in found["history-rewrite"]["fix"]
        assert "Codex session" in found["model-change"]["fix"]
        assert found["ttl-expiry"]["lost_tokens"] == 22_912  # one expiry, not three
        assert found["provider-miss"]["lost_tokens"] == 128
        # Codex builds the requests: no prompt_cache_key advice, Codex's own levers
        assert "Codex sends the conversation id" in found["provider-miss"]["fix"]
        assert "`/compact`" in found["compaction"]["fix"]

    def test_a_pause_the_cache_outlived_is_no_expiry(self) -> None:
        openai = hosted_rules("openai", "gpt-5-codex")
        assert openai.ttl == 600 and openai.ttl_range
        # call 4: 40 min 5 s, then 21,248 of X = 21,376 read: the prefix outlived the pause
        assert not openai.expired(2405, 21_248, 21_376)
        # call 5: 67 min 24 s, nothing read: expired
        assert openai.expired(4044, 0, 22_912)
        # under half of X read after the pause: expired (what other traffic kept warm)
        assert openai.expired(2405, 10_687, 21_376)
        assert not openai.expired(2405, 10_688, 21_376)
        # within the documented 5-10 minutes the half rule decides; 5 minutes is kept
        assert openai.expired(600, 0, 22_912) and not openai.expired(300, 0, 22_912)
        # Anthropic's TTL is fixed: past it, any shortfall is an expiry
        assert hosted_rules("anthropic", "claude-sonnet-4-5").expired(301, 20_000, 21_000)


def test_a_recorded_rewrite_is_not_read_as_a_compaction(tmp_path) -> None:
    # The 0.60-shaped rollout of test_codex_turns: call 5's input (10 items) is shorter
    # than call 4's (11): session threading alone would read a compaction. The recorded
    # history-rewrite decides: D = C = 3,072, break [3,072, 4,300) = 1,228.
    # By hand: cold 4,000; call 2 X = floor(4,000/128)*128 = 3,968: rounding 32, new 500;
    # call 3 X = 4,480: rounding 20, new 700; call 4 X = 5,120: rounding 80, new 600.
    from test_codex_turns import _v060

    result = runner.invoke(app, ["report", str(_v060(tmp_path)), "--json"])
    assert result.exit_code == 0, result.output
    by = json.loads(result.stdout)["ledger"]["by_cause"]
    assert {k: v for k, v in by.items() if k != "break" and v} == {
        "cold": 4_000, "new": 1_800, "rounding": 132}
    assert by["break"]["tokens"] == 1_228
    assert by["break"]["by_kind"] == {"history-rewrite": 1_228}


def test_a_reasoning_effort_change_is_a_recorded_settings_change(tmp_path) -> None:
    # The resumed turn (line 22) keeps gpt-5-codex and asks for effort high: call 6 carries
    # the client upgrade (line 21) and the effort change (line 22); the effort decides
    # (OpenAI's prompt header holds it: D = 0): break settings-change [0, 24,000), new 1,000.
    lines = [json.loads(x) for x in TURNS.read_text().splitlines()]
    lines[21]["payload"].update(model="gpt-5-codex", effort="high")
    path = tmp_path / TURNS.name
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    from prefixscope.ingest import read_requests

    requests, _ = read_requests(path)
    assert [(e.kind, e.detail, e.source_line) for e in requests[5].events] == [
        ("client-upgrade", "0.46.0 -> 0.50.0", 21),
        ("settings-change", "reasoning effort medium -> high", 22)]
    result = runner.invoke(app, ["report", str(path), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ledger"]["by_cause"]["break"]["by_kind"] == {
        "settings-change": 24_000, "history-rewrite": 17_532}
    found = {f["kind"]: f for f in report["findings"]}
    assert found["settings-change"]["lost_tokens"] == 24_000
    assert "reasoning effort" in found["settings-change"]["fix"]
