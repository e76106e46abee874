"""findings: each finder on hand-built analysis results (every expected number is hand
arithmetic over the values built here), the ranking, and the gate with its baseline."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from prefixscope.analyses.bucket import (
    Boundary,
    BucketGroup,
    BucketReport,
    BucketTotals,
    Spike,
)
from prefixscope.analyses.diff import CauseTotal, DiffReport, DiffTotals, Divergence, PairDiff
from prefixscope.analyses.simulate import CurvePoint, RequestSim, SimulateReport, WhatIfResult
from prefixscope.engines.choose import choose_engine, model_family_engine, usage_engine
from prefixscope.findings.build import build_report, reading_order
from prefixscope.findings.evidence import Evidence
from prefixscope.findings.finders import breakage, constants, replay, split
from prefixscope.findings.gate import (
    BaselineError,
    GateOptions,
    baseline_document,
    earliest_divergence,
    evaluate,
    read_baseline,
    scenario_prefixes,
)
from prefixscope.findings.ledger import CAUSES, Basis, Ledger, LedgerEntry
from prefixscope.findings.model import KINDS, Finding, ScenarioPrefix, Summary
from prefixscope.model import UsageRecord
from prefixscope.prompt import RenderOptions
from prefixscope.store.store import UsageSummary

T0 = datetime(2026, 8, 1, 12)


def pair(a: str, b: str, cause: str, *, token: int | None, lost: int, segment: str = "",
         session: str = "s1", tokens_a: int = 1000, detail: str = "") -> PairDiff:
    div = None if token is None else Divergence(token, 0, 0, segment, "", "", 0, 0, None, None)
    return PairDiff(a, b, session, tokens_a, tokens_a + 100, div, 16, 0, lost, cause, detail)


def diff_of(*pairs: PairDiff) -> DiffReport:
    by: dict[str, CauseTotal] = {}
    for p in pairs:
        t = by.get(p.cause, CauseTotal(0, 0))
        by[p.cause] = CauseTotal(t.pairs + 1, t.lost_tokens + p.lost_tokens)
    return DiffReport(pairs, DiffTotals(len(pairs), sum(p.lost_tokens for p in pairs), by),
                      RenderOptions(), 16, "flag")


def record(rid: str, session: str | None, prompt: int | None, cached: int | None, *,
           minutes: int = 0, model: str | None = "m", duplicate_of: str | None = None,
           client: str | None = None, body: bool = True) -> UsageRecord:
    return UsageRecord(rid, T0 + timedelta(minutes=minutes), "openai-chat", model, client,
                       None, None, "raw", session, prompt, cached, body, duplicate_of)


def group(key: dict[str, object], prompt: int, cached: int, *, requests: int = 10,
          spikes: tuple[Spike, ...] = (), block: int | None = 64) -> BucketGroup:
    return BucketGroup(dict(key), requests, prompt, cached, cached / prompt if prompt else None,
                       None, 0, (), (), block, spikes, ())


def bucket_of(*groups: BucketGroup, by: tuple[str, ...] = ("source",)) -> BucketReport:
    prompt = sum(g.prompt_tokens for g in groups)
    cached = sum(g.cached_tokens for g in groups)
    return BucketReport(by, groups, BucketTotals(10, prompt, cached,
                                                 cached / prompt if prompt else None, 0),
                        64, "inferred")


def simulation(misses: dict[str, int], *, per_request: tuple[RequestSim, ...] = (),
               curve: tuple[CurvePoint, ...] = (), capacity: int | None = 10_000,
               engine: str = "vllm", predicted: float = 0.5, ideal: float = 0.8,
               what_if: tuple[WhatIfResult, ...] = ()) -> SimulateReport:
    return SimulateReport(engine, 16, capacity, len(per_request) or 1, 100_000, 0.5, predicted,
                          ideal, 1.0, misses, per_request, what_if, curve)


def entry(rid: str, causes: dict[str, int], *, kind: str | None = None,
          segment: str | None = None, domain: str | None = None, prompt: int = 10_000,
          gap: float | None = None) -> LedgerEntry:
    missed = sum(causes.values())
    return LedgerEntry(rid, "s", prompt, prompt - missed, causes, kind, segment, gap, None,
                       domain)


def ledger_of(*entries: LedgerEntry, prompt: int = 100_000) -> Ledger:
    """A ledger holding `entries` (its totals summed here), over `prompt` basis tokens."""
    by_cause = dict.fromkeys(CAUSES, 0)
    for e in entries:
        for c, n in e.causes.items():
            by_cause[c] += n
    missed = sum(by_cause.values())
    return Ledger(Basis("observed", len(entries), prompt, prompt - missed), missed, by_cause,
                  {}, {}, entries)


def evidence(**kw: object) -> Evidence:
    fields: dict[str, object] = {
        "usage": UsageSummary("all", 10, 1, 10, 0, 100_000, 10, 50_000, 10, 10, 100_000,
                              50_000),
        "records": (), "bucket": bucket_of(), "by_dimension": (), "diff": None,
        "segments": (), "simulate": None, "what_if_of": {}, "scenarios": (),
        "ledger": ledger_of()}
    fields.update(kw)
    return Evidence(**fields)  # type: ignore[arg-type]


class TestBreakage:
    def test_pairs_group_by_kind_and_blamed_element_with_the_ledgers_break_tokens(self):
        d = diff_of(
            pair("a", "b", "volatile-value", token=12, lost=900, segment="system[0]",
                 detail="system[0]: cch=aaaaa → cch=bbbbb"),
            pair("b", "c", "volatile-value", token=12, lost=1000, segment="system[0]",
                 detail="system[0]: cch=bbbbb → cch=ccccc"),
            pair("c", "d", "json-key-order", token=300, lost=200,
                 segment="tools[1].function.parameters.properties.x"),
            pair("d", "e", "json-key-order", token=400, lost=100,
                 segment="tools[3].function.parameters"),
            pair("e", "f", "append-only", token=None, lost=0),
            pair("f", "g", "compaction", token=50, lost=700, segment="messages[1]"),
        )
        ledger = ledger_of(
            entry("b", {"break": 950, "new": 100}, kind="volatile-prefix-segment",
                  segment="system[0]"),
            entry("c", {"break": 1_050}, kind="volatile-prefix-segment", segment="system[0]"),
            entry("d", {"break": 210}, kind="json-key-order", segment="tools"),
            entry("e", {"break": 90, "rounding": 3}, kind="json-key-order", segment="tools"),
            entry("g", {"compaction": 700}))
        found = {(f.kind, f.segment): f for f in breakage.find(evidence(diff=d, ledger=ledger))}
        assert set(found) == {("volatile-prefix-segment", "system[0]"), ("json-key-order", "tools")}
        volatile = found[("volatile-prefix-segment", "system[0]")]
        assert volatile.lost_tokens == 950 + 1_050  # the ledger's, not the diff's 1,900
        assert volatile.evidence["rendered_lost_tokens"] == 1_900
        assert volatile.evidence["pairs"] == 2 and volatile.evidence["pairs_diffed"] == 6
        assert volatile.evidence["example_pairs"] == [["a", "b"], ["b", "c"]]
        assert "billing header" in volatile.title
        assert "strip_anthropic_billing_header" in volatile.fix
        keys = found[("json-key-order", "tools")]
        assert keys.lost_tokens == 210 + 90
        assert keys.evidence["first_divergence_token_min"] == 300
        assert keys.evidence["first_divergence_token_median"] == 350

    def test_a_changed_earlier_message_is_a_history_rewrite_not_a_prefix_segment(self):
        d = diff_of(pair("a", "b", "content-change", token=900, lost=64, segment="messages[3]"))
        ledger = ledger_of(entry("b", {"break": 64}, kind="history-rewrite", segment="messages"))
        (f,) = breakage.find(evidence(diff=d, ledger=ledger))
        assert (f.kind, f.segment, f.lost_tokens) == ("history-rewrite", "messages", 64)

    def test_pairs_outside_the_basis_are_reported_without_tokens(self):
        d = diff_of(pair("a", "b", "content-change", token=900, lost=64, segment="messages[3]"))
        (f,) = breakage.find(evidence(diff=d, ledger=ledger_of()))
        assert f.lost_tokens == 0 and f.evidence["pairs_outside_basis"] == 1
        assert f.severity == "info" and "outside the basis" in f.title

    def test_a_priced_what_if_gives_the_fix_its_hit_rate(self):
        d = diff_of(pair("a", "b", "volatile-value", token=12, lost=900, segment="system[0]",
                         detail="cch=aaaaa → cch=bbbbb"))
        sim = simulation({}, what_if=(WhatIfResult("strip-billing-header", 0.9, 0.85, 4000),))
        ledger = ledger_of(entry("b", {"break": 900}, kind="volatile-prefix-segment",
                                 segment="system[0]"))
        (f,) = breakage.find(evidence(diff=d, simulate=sim, ledger=ledger,
                                      what_if_of={"volatile-value": "strip-billing-header"}))
        assert f.fix_hit_rate == 0.85 and "4,000 cached tokens" in f.fix

    def test_no_diff_no_breakage(self):
        assert list(breakage.find(evidence())) == []


class TestMisses:
    def test_each_loss_cause_beyond_breakage_is_one_finding_with_the_ledgers_tokens(self):
        ledger = ledger_of(entry("r1", {"eviction": 400, "new": 100}),
                           entry("r2", {"ttl": 300, "rounding": 2}, gap=900.0),
                           entry("r3", {"compaction": 50}),
                           entry("r4", {"break": 999}, kind="tool-order", segment="tools"),
                           entry("r5", {"below-minimum": 7, "unexplained": 11}))
        found = {f.kind: f for f in replay.find(evidence(ledger=ledger))}
        assert {k: f.lost_tokens for k, f in found.items()} == {
            "eviction-pressure": 400, "ttl-expiry": 300, "compaction": 50,
            "below-minimum": 7, "unexplained-miss": 11}
        assert found["eviction-pressure"].evidence["example_requests"] == ["r1"]
        assert "15 min" in found["ttl-expiry"].title

    def test_the_capacity_reaching_the_ideal_is_the_eviction_fix(self):
        curve = (CurvePoint(5_000, 0.40), CurvePoint(20_000, 0.796), CurvePoint(40_000, 0.8),
                 CurvePoint(None, 0.8))
        sim = simulation({"eviction": 10}, curve=curve, ideal=0.8,
                         per_request=(RequestSim("r", "s", 10, 0, 0, 10, {"eviction": 10}),))
        ev = evidence(simulate=sim, ledger=ledger_of(entry("r", {"eviction": 10})))
        (f,) = replay.find(ev)
        # 0.796 is within half a point of the 0.8 ideal: the first capacity that is enough.
        assert f.fix_hit_rate == 0.796 and "20,000 tokens" in f.fix

    def test_provider_misses_falling_back_to_one_value_are_named_with_their_tokens(self):
        # three calls that fell back to the 3,072 tokens every session shares, one short by
        # a step: entry(prompt=10,000) caches 10,000 - missed
        ledger = ledger_of(*(entry(f"f{i}", {"provider": 6_928}) for i in range(3)),
                           entry("s", {"provider": 128}))
        (f,) = replay.find(evidence(ledger=ledger))
        assert f.kind == "provider-miss" and f.lost_tokens == 3 * 6_928 + 128
        assert (f.evidence["fallback_cached_tokens"], f.evidence["fallback_requests"],
                f.evidence["fallback_tokens"]) == (3_072, 3, 3 * 6_928)
        assert "fell back to exactly 3,072 cached tokens" in f.title
        assert "usage shows" in f.title  # no diff: nothing proves the prefix intact

    def test_a_fallback_to_the_sessions_own_earlier_prefix_is_not_another_machine(self):
        # a Claude Code session: call a wrote 45,696 (its reads + writes), b read them and
        # wrote on; c, d, e each read exactly 45,696 again instead of what the turn before
        # left: the session's own earlier entry, not other traffic's on another machine
        def call(rid: str, prev: str | None, prompt: int, read: int, write: int,
                 minutes: int) -> UsageRecord:
            return replace(record(rid, "s", prompt, read, minutes=minutes),
                           cache_write_tokens=write, prev_id=prev)
        records = (call("a", None, 45_699, 0, 45_696, 0),
                   call("b", "a", 52_000, 45_696, 6_300, 1),
                   call("c", "b", 58_000, 45_696, 12_300, 2),
                   call("d", "c", 63_000, 45_696, 17_300, 3),
                   call("e", "d", 70_000, 45_696, 24_300, 4))
        # provider = the predecessor's prompt − Anthropic's 2-token read lag − 45,696:
        # c 51,998 − 45,696 = 6,302; d 57,998 − 45,696 = 12,302; e 62,998 − 45,696 = 17,302
        # and each missed = provider + the 2-token lag (rounding) + what it appended (new):
        # c 58,000 − 45,696 = 12,304 = 6,302 + 2 + 6,000, and so on
        lost = {"c": (6_302, 6_000), "d": (12_302, 5_000), "e": (17_302, 7_000)}
        prompts = {"c": 58_000, "d": 63_000, "e": 70_000}
        ledger = ledger_of(*(LedgerEntry(rid, "s", prompts[rid], 45_696,
                                         {"provider": n, "rounding": 2, "new": added},
                                         engine="anthropic")
                             for rid, (n, added) in lost.items()), prompt=300_000)
        assert all(e.missed_tokens == sum(e.causes.values()) for e in ledger.entries)
        (f,) = replay.find(evidence(ledger=ledger, records=records))
        assert f.lost_tokens == 6_302 + 12_302 + 17_302 == 35_906
        assert (f.evidence["fallback_cached_tokens"], f.evidence["fallback_requests"],
                f.evidence["fallback_tokens"], f.evidence["fallback_own_prefix"]) == (
            45_696, 3, 35_906, True)
        assert ("3 of them fell back to exactly 45,696 cached tokens, losing 35,906: the "
                "session's own earlier prefix") in f.title
        assert "another cache machine" not in f.title

    def test_an_unexplained_miss_without_bodies_says_how_to_log_them(self):
        (f,) = replay.find(evidence(ledger=ledger_of(entry("r", {"unexplained": 8}))))
        assert f.kind == "unexplained-miss" and "bodies" in f.fix


class TestConstants:
    def test_a_constant_is_a_lens_on_the_ledger_causes_of_its_requests(self):
        spike = Spike(2880, 2, 0.5, 45.0, Boundary("tools", "system[0]", 2890, 2, 2, 2), "x")
        records = (record("a", "s", 3000, 0), record("b", "s", 3500, 2880, minutes=1),
                   record("c", "s", 4000, 2880, minutes=2),
                   record("d", "t", 5000, 2880, minutes=3),
                   record("e", "s", 4100, 2880, minutes=4, duplicate_of="c"))  # counted once
        ledger = ledger_of(entry("a", {"cold": 3000}),
                           entry("b", {"break": 100, "rounding": 20, "new": 500}),
                           entry("c", {"ttl": 620, "new": 500}), entry("d", {"cold": 2120}))
        ev = evidence(records=records, ledger=ledger,
                      bucket=bucket_of(group({"source": "raw"}, 15_500, 8_640, spikes=(spike,))))
        (f,) = constants.find(ev)
        assert f.lost_tokens == 0  # it claims nothing: the causes' findings do
        assert f.evidence["attributed_to"] == ["ttl", "break"]
        assert f.evidence["shows_tokens"] == 720
        assert f.segment == "system[0]" and "45 × 64" in f.title
        assert f.evidence["requests"] == 3

    def test_the_same_spike_in_two_logs_of_the_same_calls_is_one_finding(self):
        spike = Spike(2880, 5, 0.5, 45.0, None, "x")
        ev = evidence(bucket=bucket_of(group({"source": "langfuse"}, 10, 5, spikes=(spike,)),
                                       group({"source": "new-api"}, 10, 5, spikes=(spike,))))
        (f,) = constants.find(ev)
        assert f.evidence["sources"] == ["langfuse", "new-api"]

    def test_a_usage_only_constant_is_explained_by_the_numbers_not_by_a_render(self):
        spike = Spike(13_356, 5, 0.5, None, None, "x")
        records = tuple(record(f"r{i}", "s", 90_000, 13_356, minutes=10 * i, body=False)
                        for i in range(5))
        ledger = ledger_of(*(entry(f"r{i}", {"ttl": 70_000, "new": 6_644}) for i in range(5)))
        ev = evidence(records=records, ledger=ledger, bucket=bucket_of(
            group({"source": "raw"}, 450_000, 66_780, spikes=(spike,))))
        (f,) = constants.find(ev)
        assert "render" not in f.fix and "other live traffic" in f.fix and "expired" in f.fix

    def test_a_rare_value_is_no_pattern(self):
        spike = Spike(2880, 1, 0.01, 45.0, None, "x")
        ev = evidence(bucket=bucket_of(group({"source": "raw"}, 10, 5, spikes=(spike,))))
        assert list(constants.find(ev)) == []


class TestSplit:
    def test_a_group_far_below_the_rest_is_a_lens_naming_its_causes(self):
        report = bucket_of(group({"client": "a"}, 40_000, 8_000), group({"client": "b"},
                                                                        60_000, 48_000),
                           by=("client",))
        records = (record("x", "s", 40_000, 8_000, client="a"),
                   record("y", "t", 60_000, 48_000, client="b"))
        ledger = ledger_of(entry("x", {"break": 30_000, "new": 2_000}, kind="tool-order",
                                 segment="tools"), entry("y", {"new": 12_000}))
        (f,) = split.find(evidence(by_dimension=(report,), records=records, ledger=ledger))
        assert f.lost_tokens == 0 and f.evidence["value"] == "a"
        assert f.evidence["attributed_to"] == ["break"]
        assert f.evidence["shows_tokens"] == 30_000

    def test_the_same_traffic_under_two_dimensions_is_named_once(self):
        by_client = bucket_of(group({"client": "a"}, 40_000, 8_000),
                              group({"client": "b"}, 60_000, 48_000), by=("client",))
        by_model = bucket_of(group({"model": "x"}, 40_000, 8_000),
                             group({"model": "y"}, 60_000, 48_000), by=("model",))
        (f,) = split.find(evidence(by_dimension=(by_client, by_model)))
        assert f.evidence["also"] == [{"dimension": "model", "value": "x"}]

    def test_a_small_or_close_group_is_not_a_finding(self):
        close = bucket_of(group({"client": "a"}, 40_000, 28_000),
                          group({"client": "b"}, 60_000, 48_000), by=("client",))
        small = bucket_of(group({"client": "a"}, 1_000, 0),
                          group({"client": "b"}, 99_000, 80_000), by=("client",))
        assert list(split.find(evidence(by_dimension=(close, small)))) == []


class TestRanking:
    def test_findings_rank_by_lost_tokens_with_share_and_severity_from_it(self):
        d = diff_of(pair("a", "b", "volatile-value", token=12, lost=6_000, segment="system[0]"),
                    pair("b", "c", "tool-order", token=30, lost=2_000, segment="tools[0]"),
                    pair("c", "d", "tool-set", token=40, lost=500, segment="tools[1]"))
        ledger = ledger_of(
            entry("b", {"break": 6_000}, kind="volatile-prefix-segment", segment="system[0]"),
            entry("c", {"break": 2_000}, kind="tool-order", segment="tools"),
            entry("d", {"break": 500}, kind="tool-set-change", segment="tools"))
        report = build_report(evidence(diff=d, ledger=ledger))
        assert [f.lost_tokens for f in report.findings] == [6_000, 2_000, 500]
        # basis: the ledger's 100,000 prompt tokens
        assert [f.share for f in report.findings] == [0.06, 0.02, 0.005]
        assert [f.severity for f in report.findings] == ["high", "medium", "low"]
        assert {f.kind for f in report.findings} <= set(KINDS)

    def test_one_reading_order_causes_severe_first_then_lenses_then_what_costs_nothing(self):
        def f(kind: str, severity: str, lost: int) -> Finding:
            return Finding(kind, severity, kind, None, lost, 0.0, {}, "")

        found = [f("usage-semantics", "info", 0), f("pinned-constant", "high", 0),
                 f("json-key-order", "low", 4_000), f("l2-write-only", "medium", 0),
                 f("eviction-pressure", "medium", 5_000), f("unexplained-miss", "low", 3_000),
                 f("low-hit-rate-dimension", "medium", 0),
                 f("volatile-prefix-segment", "high", 90_000)]
        assert [x.kind for x in sorted(found, key=reading_order)] == [
            "volatile-prefix-segment",  # high
            "eviction-pressure", "l2-write-only",  # medium: most lost first, a cost of 0 too
            "json-key-order", "unexplained-miss",  # low: above every lens, whatever it shows
            "pinned-constant", "low-hit-rate-dimension",  # the lenses, severe first
            "usage-semantics"]  # info

    def test_a_lens_follows_the_causes_it_shows_and_findings_never_claim_a_token_twice(self):
        spike = Spike(2880, 2, 0.5, 45.0, None, "x")
        records = (record("a", "s", 3000, 0), record("b", "s", 9_000, 2880, minutes=1))
        d = diff_of(pair("a", "b", "volatile-value", token=2_890, lost=100, segment="system[0]"))
        ledger = ledger_of(entry("a", {"cold": 3_000}),
                           entry("b", {"break": 110, "new": 6_000}, kind="volatile-prefix-segment",
                                 segment="system[0]"), prompt=12_000)
        report = build_report(evidence(diff=d, records=records, ledger=ledger,
                                       bucket=bucket_of(group({"source": "raw"}, 12_000, 2_880,
                                                              spikes=(spike,)))))
        assert [f.kind for f in report.findings] == ["volatile-prefix-segment", "pinned-constant"]
        assert sum(f.lost_tokens for f in report.findings) <= ledger.missed_tokens


class TestEngineChoice:
    def test_aligned_cached_values_mean_a_self_hosted_engine(self):
        records = (record("a", "s", 100, 64, model="claude-sonnet-4-5"),)
        assert choose_engine(records, "auto", 64).engine == "vllm"

    def test_otherwise_the_models_family_picks_the_hosted_api(self):
        records = (record("a", "s", 100, 7, model="gpt-4.1"),
                   record("b", "s", 100, 7, model="claude-opus-4"),
                   record("c", "s", 100, 7, model="claude-opus-4"))
        assert model_family_engine(records) == "anthropic"
        assert choose_engine(records, "auto", None).engine == "anthropic"
        assert choose_engine(records[:1], "auto", 128).engine == "openai"
        chosen = choose_engine(records, "sglang", None)
        assert (chosen.engine, chosen.why) == ("sglang", "as asked")

    def test_a_gateways_alias_of_an_openai_model_is_still_openais(self):
        # a real Codex CLI 0.39 rollout (Mai0313/VibeCodingTracker) logs `aide-gpt-5`, a
        # company gateway's name for GPT-5: its prompts are in the log, so before the alias
        # was read it fell to the self-hosted default and got eviction advice
        for model in ("aide-gpt-5", "azure-gpt-4o", "corp_gpt-4.1"):
            records = (record("a", "s", 100, 7, model=model),)
            assert model_family_engine(records) == "openai", model
        assert model_family_engine((record("a", "s", 100, 7, model="mygpt-5"),)) is None

    def test_a_hosted_family_without_a_cache_model_is_not_replayed_unless_asked(self):
        records = (record("a", "s", 100, 7, model="gemini-3-flash"),)
        chosen = choose_engine(records, "auto", None)
        assert chosen.engine is None and "gemini" in chosen.why
        assert choose_engine(records, "openai", None).engine == "openai"
        gemma = (record("a", "s", 100, 64, model="gemma-3-27b"),)  # open weights, self-hosted
        assert choose_engine(gemma, "auto", 64).engine == "vllm"

    def test_deepseeks_own_usage_fields_mean_its_api_whatever_step_the_reads_move_in(self):
        # DeepSeek's API reads in 64- or 128-token steps (real mini-swe-agent runs,
        # tests/test_real_mini_swe_agent_deepseek.py); only it writes `prompt_cache_hit_tokens`
        api = [replace(record(r, "s", 2_000, 1_920, model="deepseek/deepseek-chat"),
                       usage_semantics="deepseek") for r in "abc"]
        chosen = choose_engine(api, "auto", None)
        assert (chosen.engine, chosen.why) == (
            "deepseek", "the usage has DeepSeek's API's own cache fields")
        assert usage_engine(api) == "deepseek"
        # the same model served by a server of open weights reports OpenAI's fields: its blocks
        served = [record(r, "s", 2_000, 1_920, model="deepseek-ai/DeepSeek-V3") for r in "abc"]
        assert usage_engine(served) is None
        assert choose_engine(served, "auto", None).engine == "vllm"
        # half is not most; a block size given keeps the self-hosted reading; asked wins
        assert usage_engine(api[:1] + served[:1]) is None
        assert choose_engine(api, "auto", 64).why == "--block-size given"
        assert choose_engine(api, "vllm", None).engine == "vllm"


class TestGate:
    summary = Summary(10, 2, 1000, 700, 0.7, 0.65, 0.9)

    def test_fail_under_uses_the_observed_rate_else_the_predicted(self):
        gate = evaluate(GateOptions(fail_under=0.75), self.summary, None, ())
        assert not gate.passed and gate.checks[0].value == 0.7
        assert evaluate(GateOptions(fail_under=0.7), self.summary, None, ()).passed
        unobserved = Summary(10, 2, 0, 0, None, 0.65, 0.9)
        check = evaluate(GateOptions(fail_under=0.6), unobserved, None, ()).checks[0]
        assert check.passed and check.value == 0.65 and "predicted" in check.detail

    def test_volatile_before_is_the_earliest_breaking_divergence(self):
        d = diff_of(pair("a", "b", "volatile-value", token=120, lost=1, segment="system[0]"),
                    pair("b", "c", "compaction", token=5, lost=1, segment="messages[0]"),
                    pair("c", "d", "append-only", token=None, lost=0))
        assert earliest_divergence(d) == 120  # a compaction is not a volatile segment
        assert evaluate(GateOptions(max_volatile_before=120), self.summary, d, ()).passed
        assert not evaluate(GateOptions(max_volatile_before=121), self.summary, d, ()).passed
        assert not evaluate(GateOptions(max_volatile_before=0), self.summary, None, ()).passed

    def test_scenario_prefixes_are_the_fewest_shared_tokens_named_stably(self):
        d = diff_of(pair("a", "b", "append-only", token=None, lost=0, session="t-1",
                         tokens_a=500),
                    pair("b", "c", "volatile-value", token=40, lost=9, session="t-1"),
                    pair("x", "y", "append-only", token=None, lost=0, session="t-2",
                         tokens_a=300),
                    pair("p", "q", "append-only", token=None, lost=0, session="sess-A",
                         tokens_a=800),
                    pair("q", "r", "compaction", token=3, lost=9, session="sess-A"))
        origins = (("t-1", False, "logs/run.jsonl", 3), ("sess-A", True, "cc/a.jsonl", 3),
                   ("t-2", False, "logs/run.jsonl", 2))
        assert scenario_prefixes(d, origins) == (
            ScenarioPrefix("run.jsonl#1", 3, 40), ScenarioPrefix("run.jsonl#2", 2, 300),
            ScenarioPrefix("sess-A", 3, 800))

    def test_a_baseline_fails_when_a_scenario_shrinks_or_disappears(self):
        now = (ScenarioPrefix("a", 3, 500), ScenarioPrefix("b", 3, 90))
        saved = read_baseline(__import__("json").dumps(
            baseline_document((ScenarioPrefix("a", 3, 400), ScenarioPrefix("b", 3, 100),
                               ScenarioPrefix("c", 2, 10)), {"tokenizer": "auto"})), "f")
        assert saved == {"a": 400, "b": 100, "c": 10}
        gate = evaluate(GateOptions(baseline=saved), self.summary, None, now)
        assert [(c.name, c.passed) for c in gate.checks] == [
            ("baseline:a", True), ("baseline:b", False), ("baseline:c", False)]
        assert "shrank by 10" in gate.checks[1].detail

    @pytest.mark.parametrize("text", ["not json", "[]", '{"prefixscope_baseline": 2}',
                                      '{"prefixscope_baseline": 1, "scenarios": {"a": -1}}',
                                      '{"prefixscope_baseline": 1, "scenarios": {"a": true}}'])
    def test_a_bad_baseline_file_is_one_line(self, text: str):
        with pytest.raises(BaselineError) as err:
            read_baseline(text, "base.json")
        assert "\n" not in str(err.value) and str(err.value).startswith("base.json")

    def test_no_gate_options_pass_with_no_checks(self):
        gate = evaluate(GateOptions(), self.summary, None, ())
        assert gate.passed and gate.checks == ()


class TestMergedReplays:
    def test_domains_add_up_token_weighted(self):
        from prefixscope.analyses.simulate import merge_replays

        a = SimulateReport("vllm", 16, 1000, 2, 1000, None, 0.5, 0.6, None,
                           {"eviction": 100, "new": 400},
                           (RequestSim("a1", "s", 400, None, 200, 240, {"new": 200}),
                            RequestSim("a2", "s", 600, None, 300, 360,
                                       {"eviction": 100, "new": 200})),
                           (WhatIfResult("sort-json-keys", 0.7, 0.65, 150),))
        b = SimulateReport("vllm", 16, 5000, 1, 3000, None, 0.9, 0.9, None, {"new": 300},
                           (RequestSim("b1", "t", 3000, None, 2700, 2700, {"new": 300}),),
                           (WhatIfResult("sort-json-keys", 0.95, 0.92, 60),))
        m = merge_replays([a, b])
        assert (m.requests, m.prompt_tokens) == (3, 4000)
        assert m.hit_rate_predicted == (200 + 300 + 2700) / 4000
        assert m.hit_rate_ideal == (240 + 360 + 2700) / 4000
        assert m.misses["eviction"] == 100 and m.misses["new"] == 700
        (w,) = m.what_if
        assert w.gain_tokens == 210
        assert w.hit_rate_predicted == (3200 + 210) / 4000
        assert w.hit_rate_ideal == (0.7 * 1000 + 0.95 * 3000) / 4000

    def test_each_domains_eviction_is_named_by_its_file(self):
        sims = (simulation({"eviction": 10}, per_request=(
            RequestSim("r", "s", 10, 0, 0, 10, {"eviction": 10}),)),
                simulation({"eviction": 5}, capacity=None, per_request=(
                    RequestSim("q", "s", 10, 0, 0, 10, {"eviction": 5}),)))
        from prefixscope.findings.evidence import Replay

        ledger = ledger_of(entry("r", {"eviction": 10}, domain="logs/a.jsonl"),
                           entry("q", {"eviction": 5}, domain="logs/b.jsonl"))
        ev = evidence(replays=(Replay("logs/a.jsonl", sims[0]), Replay("logs/b.jsonl", sims[1])),
                      ledger=ledger)
        f, _ = replay.find(ev)
        assert f.kind == "eviction-pressure" and f.title.startswith("a.jsonl: ")
        assert f.evidence["domain"] == "logs/a.jsonl"


def test_replay_domains_are_named_by_their_shortest_unique_path():
    from prefixscope.findings.names import short_names

    assert short_names(["a/x/ui.json", "a/y/ui.json", "b/z.jsonl", "c/x/ui.json"]) == {
        "a/x/ui.json": "a/x/ui.json", "a/y/ui.json": "y/ui.json", "b/z.jsonl": "z.jsonl",
        "c/x/ui.json": "c/x/ui.json"}


class TestSignificanceFloor:
    """docs/report.md#severity: below the floor a cause stays in the ledger and is not a
    medium finding."""

    def test_a_few_hundred_provider_tokens_a_request_are_low_whatever_their_share(self):
        # the real misread: provider-miss of 1,664 tokens over 4 requests (each < 1,000)
        # at severity medium; 1,664 / 100,000 = 1.664% (medium by share), but
        # 1,664 < 1,024 × 4 = 4,096 and < 10,240: under the floor
        ledger = ledger_of(entry("p1", {"provider": 300}), entry("p2", {"provider": 400}),
                           entry("p3", {"provider": 464}), entry("p4", {"provider": 500}))
        report = build_report(evidence(ledger=ledger))
        (f,) = report.findings
        assert (f.kind, f.lost_tokens, f.share, f.severity) == (
            "provider-miss", 1_664, 0.01664, "low")
        assert report.ledger is not None and report.ledger.by_cause["provider"] == 1_664

    def test_a_loss_of_more_than_a_cacheable_prefix_a_request_keeps_its_share_severity(self):
        # 4 × 1,100 = 4,400: 1,100 a request ≥ 1,024, so 4.4% of 100,000 is medium
        ledger = ledger_of(*(entry(f"p{i}", {"provider": 1_100}) for i in range(4)))
        (f,) = build_report(evidence(ledger=ledger)).findings
        assert (f.lost_tokens, f.severity) == (4_400, "medium")

    def test_many_small_losses_adding_up_past_the_floor_keep_their_share_severity(self):
        # 20 × 600 = 12,000 ≥ 10,240 in all, although 600 a request: 12% is high
        ledger = ledger_of(*(entry(f"p{i}", {"provider": 600}) for i in range(20)))
        (f,) = build_report(evidence(ledger=ledger)).findings
        assert (f.lost_tokens, f.severity) == (12_000, "high")
