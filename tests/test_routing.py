"""A session whose calls a gateway spread over two backends (issue 40 item 2): each backend
keeps a cache of its own, so the call after a hop cannot read what its predecessor left on
the other one. The ledger books that shortfall as ``routing`` and the `backend-hop` finding
names the hops, their tokens and dollars, and the gateway's knob.

The log is a LiteLLM spend log (usage only, no bodies), the deployment that served each call
in ``model_id``, built so that every number is known by hand. Claude Sonnet 4.5 list prices:
input $3, cache read $0.30, 5-minute write $3.75 per MTok. Anthropic's automatic breakpoint
reads 2 tokens short, and the cache holds at most the predecessor's read + write.

Session "hop" (one minute apart, one model):

  call  backend  prompt  read    write   ledger
  1     dep-a    20,000       0  19,998  cold 20,000
  2     dep-a    24,000  19,998   3,998  rounding 2 (20,000 - 19,998), new 4,000
  3     dep-b    26,000       0  25,998  X = min(24,000 - 2, 19,998 + 3,998) = 23,996:
                                         routing 23,996, rounding 4, new 2,000
  4     dep-b    27,000  25,998   1,000  rounding 2, new 1,000
  5     dep-a    28,000  23,996   4,002  X = min(26,998, 25,998 + 1,000) = 26,998; dep-a
                                         still held call 2's 23,996: routing 3,002,
                                         rounding 2, new 1,000

  routing 23,996 + 3,002 = 26,998.
  Dollars: call 3's missed tokens were charged (25,998 x 3.75 + 2 x 3) / 26,000 per MTok,
  call 5's (4,002 x 3.75 + 2 x 3) / 4,004; each less the read price $0.30.

Session "one" (one backend, dep-a, one minute apart): prompts 20,000 / 24,000, the second
read 10,001 (write 13,997): its shortfall 19,998 - 10,001 = 9,997 is ``provider``, never
``routing`` (10,001: a read of a multiple of 16 alone would be taken for a self-hosted
engine's blocks).
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
from prefixscope.findings.finders.routing import fix
from prefixscope.findings.ledger import build_ledger, hop, hosted_rules
from prefixscope.model import UsageRecord

runner = CliRunner()
INPUT, READ, WRITE = 3.0, 0.30, 3.75

HOP_SESSION = (  # (backend, prompt, read, write)
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


def _lost(tokens: int, missed: int, written: int) -> float:
    """Dollars of `tokens` missed tokens of a call whose `missed` uncached tokens were
    `written` at the write price and the rest at the input price."""
    charged = (written * WRITE + (missed - written) * INPUT) / missed
    return tokens * (charged - READ) / 1e6


ROUTING_USD = _lost(23_996, 26_000, 25_998) + _lost(3_002, 4_004, 4_002)


def _report(log: Path) -> dict:
    result = runner.invoke(app, ["report", str(log), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def hop_doc(tmp_path_factory: pytest.TempPathFactory) -> dict:
    log = spend_log(tmp_path_factory.mktemp("routing") / "spend.jsonl",
                    {"hop": HOP_SESSION, "one": ONE_BACKEND})
    return _report(log)


class TestASessionSpreadOverTwoDeployments:
    def test_the_ledger_books_the_shortfall_after_each_hop_as_routing(self, hop_doc) -> None:
        by_cause = {c: v for c, v in hop_doc["ledger"]["by_cause"].items()
                    if c != "break" and v}
        assert by_cause == {
            "cold": 20_000 + 20_000,
            "new": 4_000 + 2_000 + 1_000 + 1_000 + 4_000,
            "rounding": 2 + 4 + 2 + 2 + 2,
            "routing": 23_996 + 3_002,
            "provider": 9_997,
        }
        assert hop_doc["ledger"]["missed_tokens"] == (
            20_000 + 4_002 + 26_000 + 1_002 + 4_004 + 20_000 + 13_999)

    def test_routing_is_priced_as_the_other_causes(self, hop_doc) -> None:
        assert hop_doc["ledger"]["lost_usd"]["routing"] == pytest.approx(ROUTING_USD,
                                                                         abs=5e-7)

    def test_one_finding_names_the_hops_their_tokens_and_the_gateways_knob(self,
                                                                          hop_doc) -> None:
        [f] = [f for f in hop_doc["findings"] if f["kind"] == "backend-hop"]
        assert f["lost_tokens"] == 26_998
        assert f["lost_usd"] == pytest.approx(ROUTING_USD, abs=5e-7)
        ev = f["evidence"]
        assert ev["hops"] == {"dep-a -> dep-b": {"requests": 1, "tokens": 23_996},
                              "dep-b -> dep-a": {"requests": 1, "tokens": 3_002}}
        assert (ev["requests"], ev["sessions"], ev["backends"], ev["gateway"]) == (
            2, 1, ["dep-a", "dep-b"], "litellm")
        assert "optional_pre_call_checks" in f["fix"]
        assert "26,998 tokens" in f["title"]

    def test_the_one_backend_session_loses_nothing_to_routing(self, tmp_path: Path) -> None:
        doc = _report(spend_log(tmp_path / "one.jsonl", {"one": ONE_BACKEND}))
        assert doc["ledger"]["by_cause"]["routing"] == 0
        assert doc["ledger"]["by_cause"]["provider"] == 9_997
        assert not [f for f in doc["findings"] if f["kind"] == "backend-hop"]


def _records(calls, models=None, backends=True) -> list[UsageRecord]:
    out = []
    for i, (backend, prompt, read, write) in enumerate(calls):
        out.append(UsageRecord(
            f"r{i}", T0 + timedelta(minutes=i), "anthropic-messages",
            (models or [MODEL] * len(calls))[i], None, None, None, "litellm", "s", prompt,
            read, False, cache_write_tokens=write, prev_id=f"r{i - 1}" if i else None,
            backend=backend if backends else None))
    return out


def _ledger(records, events=None):
    rules = {r.id: hosted_rules("anthropic", r.model) for r in records}
    return build_ledger(records, (), {}, rules, {}, events=events)


class TestWhatIsNotRouting:
    def test_a_log_without_backends_reads_the_same_shortfall_as_before(self) -> None:
        ledger = _ledger(_records(HOP_SESSION, backends=False))
        # the hops unseen: each shortfall within the TTL is the provider's
        assert ledger.by_cause["routing"] == 0
        assert ledger.by_cause["provider"] == 23_996 + 3_002

    def test_a_backend_change_with_a_recorded_model_change_stays_model_change(self) -> None:
        calls = HOP_SESSION[:3]
        records = _records(calls, models=[MODEL, MODEL, "claude-opus-4-5-20251101"])
        ledger = _ledger(records, events={"r2": ("model-change",)})
        assert ledger.by_cause["routing"] == 0
        # another model has its own cache: D = 0, all 24,000 it shared are break
        assert ledger.break_by_kind == {"model-change": 24_000}

    def test_another_model_on_another_backend_is_no_hop(self) -> None:
        a, b = _records(HOP_SESSION[1:3], models=[MODEL, "claude-opus-4-5-20251101"])
        assert hop(a, b) is None
        a, b = _records(HOP_SESSION[1:3])
        assert hop(a, b) == ("dep-a", "dep-b")

    def test_a_hop_after_a_pause_past_the_ttl_is_routing_not_ttl(self) -> None:
        records = _records(HOP_SESSION[:3])
        late = records[2]
        assert late.timestamp is not None
        records[2] = replace(late, timestamp=late.timestamp + timedelta(minutes=30))
        ledger = _ledger(records)
        assert (ledger.by_cause["routing"], ledger.by_cause["ttl"]) == (23_996, 0)


class TestTheFixNamesTheGatewaysKnob:
    @pytest.mark.parametrize(("gateway", "knob"), [
        ("openrouter", "allow_fallbacks: false"),
        ("litellm", "optional_pre_call_checks"),
        ("litellm", '["session_affinity"]'),
        ("bifrost", "x-bf-session-id"),
        ("new-api", "channel_affinity_setting"),
        ("new-api", 'multi_key_mode: "affinity"'),
        (None, "consistent hash"),
    ])
    def test_each_gateway(self, gateway: str | None, knob: str) -> None:
        assert knob in fix(gateway)


class TestEveryViewKnowsTheCause:
    def test_the_html_report_draws_routing(self, tmp_path: Path) -> None:
        log = spend_log(tmp_path / "spend.jsonl", {"hop": HOP_SESSION})
        out = tmp_path / "report.html"
        result = runner.invoke(app, ["report", str(log), "--html", str(out)],
                               catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert 'title="routing 26,998"' in out.read_text()

    def test_every_loss_cause_has_a_color_and_words(self) -> None:
        from prefixscope.findings.finders.constants import _CAUSE_WORDS
        from prefixscope.findings.ledger import CAUSES, LOSSES
        from prefixscope.views.html import _CAUSE_COLORS

        assert set(CAUSES) <= set(_CAUSE_COLORS)
        assert set(LOSSES) <= set(_CAUSE_WORDS)


def test_a_share_safe_bundle_replays_the_same_routing(tmp_path: Path, hop_doc) -> None:
    # the bundle keeps each call's backend (findings.bundle.backend: LiteLLM's model_id),
    # read back as the channel: the same hops, the same ledger
    log = spend_log(tmp_path / "spend.jsonl", {"hop": HOP_SESSION, "one": ONE_BACKEND})
    store = str(tmp_path / "st.duckdb")
    for args in (["ingest", str(log), "--store", store],
                 ["export", "--bundle", str(tmp_path / "b"), "--store", store]):
        result = runner.invoke(app, args, catch_exceptions=False)
        assert result.exit_code == 0, result.output
    doc = _report(tmp_path / "b")
    assert doc["ledger"]["by_cause"] == hop_doc["ledger"]["by_cause"]
    [f] = [f for f in doc["findings"] if f["kind"] == "backend-hop"]
    assert f["evidence"]["hops"] == {"dep-a -> dep-b": {"requests": 1, "tokens": 23_996},
                                     "dep-b -> dep-a": {"requests": 1, "tokens": 3_002}}
