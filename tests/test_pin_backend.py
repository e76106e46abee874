"""``--what-if pin-backend`` (issue 40 item 2): every hopping session's calls replayed on one
backend, so the call after a hop reads what its predecessor left; the tokens it recovers,
their dollars at list prices and the hit rate before and after.

The logs are LiteLLM spend logs (usage only), the deployment in ``model_id``. Claude Sonnet
4.5 list prices: input $3, cache read $0.30, 5-minute write $3.75 per MTok. Anthropic's
automatic breakpoint reads 2 tokens short, and a cache holds at most what its writer read
plus wrote.

Session "alt" alternates between dep-a and dep-b, one minute apart, routing its only loss:

  call  backend  prompt  read    write   what each backend holds
  1     dep-a    10,000       0   9,998  dep-a: 9,998
  2     dep-b    12,000       0  11,998  dep-b: 11,998 (dep-b held nothing)
  3     dep-a    14,000   9,998   4,000  dep-a: 13,998 (dep-a held call 1's 9,998)
  4     dep-b    16,000  11,998   4,000  (dep-b held call 2's 11,998)

Pinned to one backend, each call reads what its predecessor read + wrote, 2 short of its
prompt at most: call 2 reads 9,998 (call 1: 0 + 9,998), call 3 min(11,998, 9,998 +
2,000) = 11,998 (pinned, call 2 writes only 12,000 - 9,998 - 2 = 2,000), call 4 13,998.
Recovered: 9,998 + (11,998 - 9,998) + (13,998 - 11,998) = 13,998 tokens -- each of them
written at $3.75 on the other backend (every call wrote more than it recovers), read at
$0.30: 13,998 x 3.45 / 1e6 dollars. Reads 21,996 of 52,000 prompt tokens as logged,
21,996 + 13,998 = 35,994 pinned.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from litellm_rows import MODEL, T0, spend_log
from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.findings.ledger import build_ledger, hosted_rules
from prefixscope.findings.pinning import pin_backend
from prefixscope.model import UsageRecord

runner = CliRunner()
WRITE_LESS_READ = 3.75 - 0.30  # dollars per MTok a read saves on a 5-minute-written token

ALTERNATING = (  # (backend, prompt, read, write)
    ("dep-a", 10_000, 0, 9_998),
    ("dep-b", 12_000, 0, 11_998),
    ("dep-a", 14_000, 9_998, 4_000),
    ("dep-b", 16_000, 11_998, 4_000),
)
# tests/test_routing.py's session "hop" (its docstring has the arithmetic): routing
# 23,996 + 3,002, each recovered token written at $3.75 on the other deployment
TWO_DEPLOYMENTS = (
    ("dep-a", 20_000, 0, 19_998),
    ("dep-a", 24_000, 19_998, 3_998),
    ("dep-b", 26_000, 0, 25_998),
    ("dep-b", 27_000, 25_998, 1_000),
    ("dep-a", 28_000, 23_996, 4_002),
)
ONE_BACKEND = (
    ("dep-a", 20_000, 0, 19_998),
    ("dep-a", 24_000, 10_001, 13_997),
)


def _report(*args: str) -> dict:
    result = runner.invoke(app, ["report", *args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _pin(doc: dict) -> dict:
    [line] = [w for w in doc["what_if"] if w["name"] == "pin-backend"]
    return line


@pytest.fixture(scope="module")
def alternating(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return _report(str(spend_log(tmp_path_factory.mktemp("pin") / "alt.jsonl",
                                 {"alt": ALTERNATING})))


class TestTwoBackendsAlternating:
    def test_routing_is_the_only_loss(self, alternating) -> None:
        by_cause = {c: v for c, v in alternating["ledger"]["by_cause"].items()
                    if c != "break" and v}
        assert alternating["ledger"]["by_cause"]["break"]["tokens"] == 0
        assert by_cause == {"cold": 10_000, "routing": 9_998 + 2_000 + 2_000,
                            "rounding": 2 + 2 + 2, "new": 2_000 * 3}

    def test_pinning_recovers_the_routing_tokens(self, alternating) -> None:
        pin = _pin(alternating)
        assert pin["gain_tokens"] == 13_998 == alternating["ledger"]["by_cause"]["routing"]

    def test_its_dollars_are_the_recovered_writes_read_instead(self, alternating) -> None:
        pin = _pin(alternating)
        assert pin["saved_usd"] == pytest.approx(13_998 * WRITE_LESS_READ / 1e6, abs=1e-6)
        assert pin["cost_usd"] == 0.0
        assert pin["net_usd"] == pin["saved_usd"]

    def test_the_hit_rate_before_and_after(self, alternating) -> None:
        pin = _pin(alternating)
        assert alternating["summary"]["hit_rate"] == pytest.approx(21_996 / 52_000)
        assert pin["hit_rate_predicted"] == pytest.approx(35_994 / 52_000)
        assert "hit rate 42.3% → 69.2%" in pin["detail"]

    def test_the_usage_replay_of_one_cache_predicts_the_same_rate(self, alternating) -> None:
        # an independent model: the hosted replay of the log's usage keeps one cache per
        # session whatever backend the log names -- the pinned session
        assert alternating["summary"]["hit_rate_predicted"] == pytest.approx(
            _pin(alternating)["hit_rate_predicted"])

    def test_the_detail_says_which_backend_and_how_many_calls_move(self, alternating) -> None:
        # two calls each: the tie goes to the first, dep-a; dep-b's two calls move
        assert _pin(alternating)["detail"].startswith(
            "pinning 1 session to the backend that served most of its calls (2 calls moved) "
            "lets 3 calls after a hop read what their predecessor left: 13,998 tokens")

    def test_the_backend_hop_finding_prices_it_in_its_fix(self, alternating) -> None:
        [f] = [f for f in alternating["findings"] if f["kind"] == "backend-hop"]
        assert "Priced on this log (`--what-if pin-backend`): pinning 1 session" in f["fix"]
        assert f["evidence"]["what_if"] == {
            "pin-backend": pytest.approx(13_998 * WRITE_LESS_READ / 1e6, abs=1e-6)}


def test_the_two_deployment_log_recovers_its_routing(tmp_path: Path) -> None:
    doc = _report(str(spend_log(tmp_path / "spend.jsonl",
                                {"hop": TWO_DEPLOYMENTS, "one": ONE_BACKEND})),
                  "--what-if", "pin-backend")
    pin = _pin(doc)
    assert pin["gain_tokens"] == 26_998 == doc["ledger"]["by_cause"]["routing"]
    assert pin["saved_usd"] == pytest.approx((23_996 + 3_002) * WRITE_LESS_READ / 1e6,
                                             abs=1e-6)
    # the one-backend session's provider miss stays: 79,993 read of 169,000, 106,991 pinned
    assert pin["hit_rate_predicted"] == pytest.approx((79_993 + 26_998) / 169_000)
    assert [w["name"] for w in doc["what_if"]] == ["pin-backend"]


def test_a_log_without_hops_has_nothing_to_price(tmp_path: Path) -> None:
    log = str(spend_log(tmp_path / "one.jsonl", {"one": ONE_BACKEND}))
    assert _report(log)["what_if"] == []  # not listed unless asked
    pin = _pin(_report(log, "--what-if", "pin-backend"))
    assert (pin["gain_tokens"], pin["net_usd"]) == (None, None)
    assert pin["detail"].startswith("no session hopped between backends")


def _records(calls, gaps=None) -> list[UsageRecord]:
    out, at = [], T0
    for i, (backend, prompt, read, write) in enumerate(calls):
        at += timedelta(seconds=(gaps or {}).get(i, 60) if i else 0)
        out.append(UsageRecord(
            f"r{i}", at, "anthropic-messages", MODEL, None, None, None, "litellm", "s",
            prompt, read, False, cache_write_tokens=write,
            prev_id=f"r{i - 1}" if i else None, backend=backend))
    return out


def _pinned(records):
    ledger = build_ledger(records, (), {}, {r.id: hosted_rules("anthropic", r.model)
                                            for r in records}, {})
    return ledger, pin_backend(ledger, records)


class TestTheReplayRules:
    def test_a_hop_after_a_pause_past_the_ttl_is_not_recovered(self) -> None:
        # call 2 comes 30 minutes after call 1: the ledger books its 9,998 routing (no
        # backend held the prefix), but pinned, the 5-minute entry had expired anyway
        records = _records(ALTERNATING, gaps={1: 1_800})
        ledger, pin = _pinned(records)
        assert ledger.by_cause["routing"] == 13_998
        assert (pin.tokens, pin.requests) == (2_000 + 2_000, 2)
        assert (pin.expired_tokens, pin.expired_requests) == (9_998, 1)

    def test_a_hop_within_the_ttl_is_recovered(self) -> None:
        _, pin = _pinned(_records(ALTERNATING, gaps={1: 299}))
        assert (pin.tokens, pin.expired_requests) == (13_998, 0)

    @pytest.mark.parametrize(("pause", "recovered"), [(480, 3_968), (1_200, 0)])
    def test_openai_is_held_to_the_top_of_its_retention(self, pause, recovered) -> None:
        # OpenAI's 128-token steps: X = floor(4,000 / 128) * 128 = 3,968, read 0 on the
        # other backend. Its in-memory retention is "5-10 minutes": pinned, a prefix
        # outlives an 8-minute pause (as its replay keeps it, 10 minutes) and not 20
        records = [UsageRecord(f"o{i}", T0 + timedelta(seconds=pause * i), "openai-chat",
                               "gpt-5", None, None, None, "litellm", "s", prompt, 0, False,
                               prev_id="o0" if i else None, backend=backend)
                   for i, (backend, prompt) in enumerate((("azure", 4_000),
                                                          ("openai", 4_500)))]
        ledger = build_ledger(records, (), {}, {r.id: hosted_rules("openai", r.model)
                                                for r in records}, {})
        pin = pin_backend(ledger, records)
        assert ledger.by_cause["routing"] == 3_968
        assert (pin.tokens, pin.expired_tokens) == (recovered, 3_968 - recovered)

    def test_the_session_is_pinned_to_the_backend_that_served_most_of_it(self) -> None:
        calls = (ALTERNATING[0], ALTERNATING[1], ("dep-b", 14_000, 11_998, 2_000))
        _, pin = _pinned(_records(calls))
        [s] = pin.sessions
        assert (s.session, s.backend, s.calls, s.served) == ("s", "dep-b", 3, 2)

    def test_no_prices_no_dollars(self) -> None:
        _, pin = _pinned(_records(ALTERNATING))
        assert pin.tokens == 13_998
        assert (pin.saved_usd, pin.net_usd) == (None, None)


def test_a_bundle_prices_it_too(tmp_path: Path) -> None:
    # the bundle keeps each call's backend: pin-backend needs no prompt, only the ledger
    log = spend_log(tmp_path / "alt.jsonl", {"alt": ALTERNATING})
    store = str(tmp_path / "st.duckdb")
    for args in (["ingest", str(log), "--store", store],
                 ["export", "--bundle", str(tmp_path / "b"), "--store", store]):
        result = runner.invoke(app, args, catch_exceptions=False)
        assert result.exit_code == 0, result.output
    pin = _pin(_report(str(tmp_path / "b"), "--what-if", "pin-backend"))
    assert pin["gain_tokens"] == 13_998


def test_a_shortfall_on_the_predecessors_backend_is_not_pinnings_to_recover() -> None:
    # call 4 on dep-a after call 3 on dep-a reads 11,998 of the 13,998 dep-a holds: the
    # provider's miss, not a hop -- pinning leaves it
    records = _records(ALTERNATING)
    records[3] = replace(records[3], backend="dep-a")
    ledger, pin = _pinned(records)
    assert (ledger.by_cause["routing"], ledger.by_cause["provider"]) == (9_998 + 2_000, 2_000)
    assert pin.tokens == 9_998 + 2_000
    [s] = pin.sessions
    assert (s.backend, s.served) == ("dep-a", 3)


class TestSimulateSaysWhereItIsPriced:
    """simulate replays render transforms; the ledger's what-ifs are report's. Before,
    simulate took any name and printed an empty line for it ("what-if pin-backend: ideal
    -, predicted -, -241,296 cached tokens" on sample_logs/)."""

    def _simulate(self, tmp_path: Path, what_if: str):
        log = spend_log(tmp_path / "alt.jsonl", {"alt": ALTERNATING})
        return runner.invoke(app, ["simulate", str(log), "--what-if", what_if])

    def test_pin_backend_points_to_report(self, tmp_path: Path) -> None:
        result = self._simulate(tmp_path, "pin-backend")
        assert result.exit_code == 2
        assert ("--what-if pin-backend is priced by report from the ledger (each call's "
                "usage, pause and backend), not replayed by simulate: prefixscope report "
                "LOGS --what-if pin-backend") in result.output

    def test_an_unknown_what_if_is_a_usage_error(self, tmp_path: Path) -> None:
        result = self._simulate(tmp_path, "pin-everything")
        assert result.exit_code == 2
        assert "unknown what-if 'pin-everything'" in result.output
