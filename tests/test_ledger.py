"""The missed-token ledger on hand-built sessions whose every number is hand arithmetic
(shared/reference/ledger.md's worked examples, then each cause and the precedence between
them), a Hypothesis property that the causes always partition the misses, and the dollars
against Anthropic's and OpenAI's published list prices."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.analyses.diff import Divergence, PairDiff
from prefixscope.analyses.prices import Pricer
from prefixscope.analyses.simulate import RequestSim
from prefixscope.findings.ledger import (
    CAUSES,
    ReplayedRequest,
    Rules,
    build_ledger,
    hosted_rules,
    self_hosted_rules,
)
from prefixscope.model import UsageRecord

T0 = datetime(2026, 3, 2, 10, 0)
OPUS = "claude-opus-4-5"  # list prices: $5 input, $0.50 cache read, $6.25 5m write, $10 1h


def rec(rid: str, prompt: int | None, cached: int | None, *, minute: float = 0,
        prev: str | None = None, session: str | None = "s", model: str | None = OPUS,
        write: int | None = None, write_1h: int | None = None, output: int | None = None,
        compaction: bool = False, body: bool = False) -> UsageRecord:
    return UsageRecord(rid, T0 + timedelta(minutes=minute), "anthropic-messages", model, None,
                       None, None, "claude-code", session, prompt, cached, body, None, "f",
                       write, write_1h, output, prev, compaction)


def pair(a: str, b: str, token: int | None, cause: str, *, tokens_a: int, tokens_b: int,
         segment: str = "system[0].text") -> PairDiff:
    div = None if token is None else Divergence(token, 0, 0, segment, "", "", 0, 0, None, None)
    return PairDiff(a, b, "s", tokens_a, tokens_b, div, 64, 0, 0, cause, "")


def ledger_of(records, rules: Rules | dict, *, pairs=(), replayed=None, priced=False):
    rules_of = rules if isinstance(rules, dict) else {r.id: rules for r in records}
    pricer = Pricer()
    prices = {r.id: p for r in records if (p := pricer.price(r)) is not None} if priced else {}
    return build_ledger(records, pairs, replayed or {}, rules_of, prices,
                        "list prices" if priced else "")


def causes(ledger) -> dict[str, int]:
    return {c: n for c, n in ledger.by_cause.items() if n}


class TestWorkedExamples:
    def test_a_hosted_session_paused_past_the_ttl_loses_all_but_what_other_traffic_kept_warm(
            self):
        # ledger.md §1: 20,000 cold; +4,000 new, read 2 short; 11 minutes later 13,000 cached.
        records = [rec("t1", 20_000, 0, write=20_000),
                   rec("t2", 24_000, 19_998, minute=1, prev="t1", write=4_002),
                   rec("t3", 27_000, 13_000, minute=12, prev="t2", write=14_000)]
        ledger = ledger_of(records, hosted_rules("anthropic", OPUS), priced=True)
        assert ledger.missed_tokens == 20_000 + 4_002 + 14_000
        assert causes(ledger) == {"cold": 20_000, "new": 4_000 + 3_000, "rounding": 2 + 2,
                                  "ttl": 23_998 - 13_000}
        t3 = ledger.entries[2]
        assert t3.causes == {"new": 3_000, "rounding": 2, "ttl": 10_998}
        assert t3.expected_tokens == 23_998 and t3.gap_seconds == 660
        # 10,998 tokens written at $6.25 / MTok instead of read at $0.50.
        assert ledger.money.lost_usd_by_cause == {"ttl": pytest.approx(10_998 * 5.75e-6)}

    def test_a_volatile_value_in_system_0_behind_a_64_token_block_engine(self):
        # ledger.md §2: previous turn 30,000; this 31,500; first divergence 2,884; cached
        # 2,880 = 45 x 64.
        records = [rec("a", 30_000, 0, body=True),
                   rec("b", 31_500, 2_880, minute=1, prev="a", body=True)]
        p = pair("a", "b", 2_884, "volatile-value", tokens_a=30_000, tokens_b=31_500)
        ledger = ledger_of(records, self_hosted_rules("vllm", 64), pairs=[p])
        b = ledger.entries[1]
        assert b.causes == {"break": 30_000 - 2_884, "rounding": 2_884 - 2_880,
                            "new": 31_500 - 30_000}
        assert (b.break_kind, b.break_segment) == ("volatile-prefix-segment", "system[0]")
        assert ledger.break_by_kind == {"volatile-prefix-segment": 27_116}
        assert ledger.break_by_segment == {"system[0]": 27_116}


class TestPrecedence:
    def test_a_break_before_a_pause_is_a_break_beyond_the_divergence(self):
        # 30 minutes after a 20,000-token turn, the prompt diverges at 5,000: nothing after
        # 5,000 could have hit whatever the pause; the pause costs only [cached, 5,000).
        records = [rec("a", 20_000, 0, body=True),
                   rec("b", 21_000, 4_000, minute=30, prev="a", body=True)]
        p = pair("a", "b", 5_000, "volatile-value", tokens_a=20_000, tokens_b=21_000)
        (_, b) = ledger_of(records, hosted_rules("anthropic", OPUS), pairs=[p]).entries
        assert b.causes == {"ttl": 5_000 - 4_000, "break": 20_000 - 5_000,
                            "new": 21_000 - 20_000}

    def test_a_compaction_link_is_compaction_whatever_else(self):
        records = [rec("a", 50_000, 0), rec("b", 8_000, 3_000, minute=30, prev="a",
                                            compaction=True)]
        (_, b) = ledger_of(records, hosted_rules("anthropic", OPUS)).entries
        assert b.causes == {"compaction": 5_000}

    def test_a_prefix_shorter_than_the_minimum_is_below_minimum_not_rounding(self):
        # OpenAI caches from 1,024 tokens: a 900-token predecessor leaves nothing to read.
        records = [rec("a", 900, 0, model="gpt-4.1"),
                   rec("b", 1_500, 0, minute=1, prev="a", model="gpt-4.1")]
        (_, b) = ledger_of(records, hosted_rules("openai", "gpt-4.1")).entries
        assert b.causes == {"below-minimum": 900, "new": 600}

    def test_a_provider_miss_is_at_least_one_unit_and_less_is_rounding(self):
        # OpenAI: 128-token steps from 1,024; within the retention.
        records = [rec("a", 5_000, 0, model="gpt-4.1"),
                   rec("b", 5_200, 4_864, minute=1, prev="a", model="gpt-4.1"),
                   rec("c", 5_400, 5_120 - 128 * 8, minute=2, prev="b", model="gpt-4.1")]
        (_, b, c) = ledger_of(records, hosted_rules("openai", "gpt-4.1")).entries
        # b: X = floor(5,000 / 128) * 128 = 4,992; cached 4,864: one step short -> provider.
        assert b.causes == {"provider": 128, "rounding": 8, "new": 200}
        # c: X = floor(5,200 / 128) * 128 = 5,120; cached 4,096: eight steps short.
        assert c.causes == {"provider": 1_024, "rounding": 80, "new": 200}
        anthropic = [rec("a", 5_000, 0), rec("b", 5_200, 4_995, minute=1, prev="a")]
        (_, b) = ledger_of(anthropic, hosted_rules("anthropic", OPUS)).entries
        # X = 5,000 - 2 = 4,998; 3 tokens short of it is below Anthropic's 64-token unit.
        assert b.causes == {"rounding": 3 + 2, "new": 200}

    def test_a_one_hour_write_keeps_the_prefix_past_five_minutes(self):
        records = [rec("a", 20_000, 0, write=20_000, write_1h=20_000),
                   rec("b", 21_000, 0, minute=30, prev="a")]
        rules = {"a": hosted_rules("anthropic", OPUS),
                 "b": hosted_rules("anthropic", OPUS, ttl_1h=True)}
        (_, b) = ledger_of(records, rules).entries
        assert b.causes == {"provider": 19_998, "rounding": 2, "new": 1_000}

    def test_eviction_is_what_the_replay_lost_at_the_fitted_capacity_and_the_rest_unexplained(
            self):
        records = [rec("a", 1_000, 0, model="qwen"),
                   rec("b", 1_200, 320, minute=1, prev="a", model="qwen")]
        sim = RequestSim("b", "s", 1_200, 320, 320, 992, {"eviction": 500, "new": 208})
        replayed = {"b": ReplayedRequest("f", "vllm", 16, sim)}
        (_, b) = ledger_of(records, self_hosted_rules("vllm", 16), replayed=replayed).entries
        # X = floor(1,000 / 16) * 16 = 992; shortfall 672: 500 evicted, 172 unexplained.
        assert b.causes == {"eviction": 500, "unexplained": 172, "rounding": 8, "new": 200}

    def test_cache_beyond_the_predecessor_covers_the_new_tokens_in_prompt_order(self):
        # The engine cached the previous output too: 1,100 of 1,200 with 1,000 sent before.
        records = [rec("a", 1_000, 0, model="qwen"),
                   rec("b", 1_200, 1_100, minute=1, prev="a", model="qwen")]
        (_, b) = ledger_of(records, self_hosted_rules("vllm", 16)).entries
        assert b.causes == {"new": 100}

    def test_a_first_request_is_cold_even_when_other_traffic_kept_its_system_prompt(self):
        (a,) = ledger_of([rec("a", 30_000, 13_000)], hosted_rules("anthropic", OPUS)).entries
        assert a.causes == {"cold": 17_000}


class TestDeepSeeksReadSteps:
    def test_only_whole_64_token_steps_of_the_predecessor_are_the_providers(self):
        # DeepSeek's API reads in 64-token steps (every cache hit of the real runs in
        # tests/data/real and of H4's 2,498-call batch is a multiple of 64), so the tail of a
        # predecessor past its last whole step is never read, whatever the call read.
        # a: 1,000 cold. b: 1,500 after a's 1,000, read 0: 15 x 64 = 960 readable (provider),
        # 40 past them (rounding), 500 new. c: 2,100 after b's 1,500, read 1,408 = 22 x 64:
        # b's steps end at 23 x 64 = 1,472 (provider 64), 28 past them, 600 new. d: 2,500
        # after c's 2,100, read 2,048 = 32 x 64, all of c's steps: 52 rounding, 400 new.
        ds = "deepseek-chat"
        records = [rec("a", 1_000, 0, model=ds),
                   rec("b", 1_500, 0, minute=1, prev="a", model=ds),
                   rec("c", 2_100, 1_408, minute=2, prev="b", model=ds),
                   rec("d", 2_500, 2_048, minute=3, prev="c", model=ds)]
        ledger = ledger_of(records, hosted_rules("deepseek", ds))
        assert [e.causes for e in ledger.entries] == [
            {"cold": 1_000},
            {"provider": 960, "rounding": 40, "new": 500},
            {"provider": 64, "rounding": 28, "new": 600},
            {"rounding": 52, "new": 400}]
        assert [e.expected_tokens for e in ledger.entries[1:]] == [960, 1_472, 2_048]

    def test_v4_reads_in_128_token_steps(self):
        # every cache hit of a real 64-call deepseek-v4-flash run is a multiple of 128 (V3's:
        # of 64). a: 1,000 cold. b: 1,500 after a's 1,000, read 896 = 7 x 128, all of a's
        # steps (8 x 128 = 1,024 > 1,000): 104 rounding, 500 new (at 64-token steps: 15 x 64
        # = 960 readable, 64 of them the provider's). c: 2,100 after b's 1,500, read 1,280 =
        # 10 x 128: b's steps end at 11 x 128 = 1,408 (provider 128), 92 past them, 600 new.
        v4 = "deepseek-v4-flash"
        records = [rec("a", 1_000, 0, model=v4),
                   rec("b", 1_500, 896, minute=1, prev="a", model=v4),
                   rec("c", 2_100, 1_280, minute=2, prev="b", model=v4)]
        ledger = ledger_of(records, hosted_rules("deepseek", v4))
        assert [e.causes for e in ledger.entries] == [
            {"cold": 1_000},
            {"rounding": 104, "new": 500},
            {"provider": 128, "rounding": 92, "new": 600}]
        assert [e.expected_tokens for e in ledger.entries[1:]] == [896, 1_408]

    @pytest.mark.parametrize(("model", "step"), [
        ("deepseek-v4-flash", 128), ("deepseek-v4-pro", 128), ("DeepSeek-V4-Flash-0731", 128),
        ("litellm_proxy/deepseek-v4-flash", 128), ("deepseek/deepseek-v4-pro", 128),
        ("deepseek-chat", 64), ("deepseek-reasoner", 64), ("deepseek-v3.2", 64), (None, 64)])
    def test_the_step_is_the_models(self, model, step):
        assert hosted_rules("deepseek", model).unit == step


class TestBasis:
    def test_requests_without_a_cache_field_are_outside_the_basis_and_counted(self):
        sonnet = "claude-sonnet-4-5"  # caches from 1,024 tokens
        records = [rec("a", 1_000, 0, model=sonnet), rec("b", 2_000, None, prev="a",
                                                         model=sonnet),
                   rec("c", 3_000, 1_998, prev="b", model=sonnet)]
        ledger = ledger_of(records, hosted_rules("anthropic", sonnet))
        b = ledger.basis
        assert (b.source, b.requests, b.prompt_tokens, b.cached_tokens) == ("observed", 2,
                                                                            4_000, 1_998)
        assert (b.outside_requests, b.outside_prompt_tokens) == (1, 2_000)
        # c's predecessor b is outside the basis but its prompt is still what c extends.
        assert ledger.entries[1].causes == {"new": 1_000, "rounding": 2}

    def test_a_log_without_cache_fields_is_read_on_the_replay_prediction(self):
        records = [rec("a", None, None, model=None), rec("b", None, None, prev="a", model=None)]
        replayed = {
            "a": ReplayedRequest("f", "vllm", 16, RequestSim("a", "s", 1_000, None, 0, 0,
                                                             {"cold": 1_000})),
            "b": ReplayedRequest("f", "vllm", 16, RequestSim("b", "s", 1_500, None, 992, 992,
                                                             {"new": 508})),
        }
        ledger = ledger_of(records, self_hosted_rules("vllm", 16), replayed=replayed)
        assert (ledger.basis.source, ledger.basis.prompt_tokens) == ("predicted", 2_500)
        assert causes(ledger) == {"cold": 1_000, "rounding": 8, "new": 500}

    def test_a_second_log_of_a_call_is_counted_once(self):
        copy = UsageRecord("a2", T0, "anthropic-messages", OPUS, None, None, None, "other",
                           "s2", 1_000, 0, False, "a")
        ledger = ledger_of([rec("a", 1_000, 0), copy], hosted_rules("anthropic", OPUS))
        assert ledger.basis.requests == 1 and ledger.missed_tokens == 1_000


class TestMoney:
    def test_a_calls_spend_is_its_parts_at_list_prices(self):
        # Claude Opus 4.5: $5 input, $0.50 read, $6.25 5-minute write, $10 1-hour write,
        # $25 output per million tokens.
        r = rec("a", 100_000, 60_000, write=30_000, write_1h=10_000, output=2_000)
        price = Pricer().price(r)
        assert price.input_usd == pytest.approx(10_000 * 5e-6)
        assert price.cache_read_usd == pytest.approx(60_000 * 0.5e-6)
        assert price.cache_write_usd == pytest.approx(20_000 * 6.25e-6 + 10_000 * 10e-6)
        assert price.output_usd == pytest.approx(2_000 * 25e-6)
        # a missed token was charged (10,000 * 5 + 20,000 * 6.25 + 10,000 * 10) / 40,000 $/MTok
        assert price.missed_rate == pytest.approx((0.05 + 0.125 + 0.1) / 40_000)

    def test_openai_has_no_write_price_and_a_tier_applies_above_its_start(self):
        r = rec("a", 10_000, 4_000, model="gpt-4o", output=100)
        price = Pricer().price(r)
        # GPT-4o: $2.50 input, $1.25 cached input, $10 output per million tokens.
        assert price.spend_usd == pytest.approx(6_000 * 2.5e-6 + 4_000 * 1.25e-6 + 100 * 10e-6)
        # Claude Sonnet 4.5 above 200k input tokens: $6 input instead of $3.
        long = rec("b", 250_000, 0, model="claude-sonnet-4-5")
        assert Pricer().price(long).input_usd == pytest.approx(250_000 * 6e-6)

    def test_an_unknown_model_is_unpriced_and_named_never_guessed(self):
        pricer = Pricer()
        assert pricer.price(rec("a", 1_000, 0, model="my-finetune-7b")) is None
        assert pricer.unknown == {"my-finetune-7b"}

    def test_a_self_hosted_rate_prices_uncached_tokens_and_reads_are_free(self):
        pricer = Pricer(price_per_mtok=0.4)
        price = pricer.price(rec("a", 1_000_000, 250_000, model="qwen"), self_hosted=True)
        assert price.spend_usd == pytest.approx(0.75 * 0.4) and price.read_rate == 0
        # a self-hosted call without a rate is unpriced, even named after a hosted model
        assert Pricer().price(rec("b", 1_000, 0, model=OPUS), self_hosted=True) is None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 200_000), st.integers(0, 200_000),
                          st.integers(0, 120), st.one_of(st.none(), st.integers(0, 200_000)),
                          st.booleans()), min_size=1, max_size=8),
       st.sampled_from(["anthropic", "openai", "deepseek", "vllm16", "vllm64", "exact"]))
def test_the_causes_partition_every_requests_missed_tokens(turns, engine):
    records, pairs = [], []
    minute = 0.0
    for n, (prompt, cached, gap, divergence, compacted) in enumerate(turns):
        minute += gap
        prev = f"r{n - 1}" if n else None
        records.append(rec(f"r{n}", prompt, cached, minute=minute, prev=prev,
                           compaction=compacted and n > 0, model="gpt-4.1"))
        if prev is not None and divergence is not None:
            pairs.append(pair(prev, f"r{n}", divergence, "volatile-value",
                              tokens_a=turns[n - 1][0], tokens_b=prompt))
    rules = (hosted_rules(engine, "gpt-4.1") if engine in ("anthropic", "openai", "deepseek")
             else self_hosted_rules("vllm", {"vllm16": 16, "vllm64": 64}.get(engine, 1)))
    ledger = ledger_of(records, rules, pairs=pairs)
    for e in ledger.entries:
        assert all(n > 0 for n in e.causes.values()) and set(e.causes) <= set(CAUSES)
        assert sum(e.causes.values()) == e.prompt_tokens - e.cached_tokens
    assert sum(ledger.by_cause.values()) == ledger.missed_tokens
    assert ledger.basis.prompt_tokens - ledger.basis.cached_tokens == ledger.missed_tokens


def test_a_compacted_continuation_of_an_unknown_session_is_compaction_not_cold():
    # sessions.compaction true with no predecessor: ambiguous, so not paired (docs/store.md)
    (e,) = ledger_of([rec("c", 9_000, 3_000, compaction=True)],
                     hosted_rules("anthropic", OPUS)).entries
    assert e.causes == {"compaction": 6_000}
