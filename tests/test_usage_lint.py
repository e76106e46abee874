"""usage lint: each check on a hand-built store with counts worked out by hand, a clean
control with no issue, and the bundled sample logs and real data against counts read
straight from the files (sqlite3 / json, not prefixscope)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from conftest import ROOT
from factories import make_request

from prefixscope.analyses.usage_lint import KINDS, UsageIssue, UsageLint, lint_usage
from prefixscope.model import Request, Usage
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths

SAMPLES = ROOT / "sample_logs"


def req(rid: str, minute: int, prompt: int | None, cached: int | None, *,
        fmt: str = "raw", semantics: str | None = "openai", endpoint: str = "openai-chat",
        gateway: str | None = None, write: int | None = None) -> Request:
    return make_request(rid, minutes=minute, source_format=fmt, endpoint=endpoint,
                        gateway=gateway,
                        usage=Usage(prompt_tokens=prompt, cached_tokens=cached,
                                    cache_write_tokens=write, semantics=semantics))


def lint(tmp_path: Path, rows: list[Request], block_size: int | None = None,
         duplicates: dict[str, str] | None = None) -> UsageLint:
    tmp_path.mkdir(exist_ok=True)
    with Store.open(tmp_path / "s.duckdb") as st:
        st.add(rows)
        if duplicates:
            st.set_duplicates(duplicates)
        return lint_usage(st, block_size)


def only(result: UsageLint, kind: str) -> list[UsageIssue]:
    return [i for i in result.issues if i.kind == kind]


def kinds(result: UsageLint) -> list[str]:
    return [i.kind for i in result.issues]


# A store whose usage is consistent: OpenAI-convention counts in whole 16-token blocks on
# every request, an Anthropic client talking to Anthropic directly (exact counts), equal
# prompts so the mean and weighted rates agree, no call logged twice.
CLEAN = [
    req("c1", 0, 1000, 0),
    req("c2", 1, 1000, 512),
    req("c3", 2, 1000, 960),
    req("a1", 3, 2000, 1234, fmt="claude-code", semantics="anthropic",
        endpoint="anthropic-messages", write=10),
    req("a2", 4, 2000, 1500, fmt="claude-code", semantics="anthropic",
        endpoint="anthropic-messages"),
]


class TestCleanControl:
    def test_consistent_usage_gives_no_issue(self, tmp_path):
        result = lint(tmp_path, CLEAN, block_size=16)
        assert result == UsageLint(issues=(), checked_requests=5, block_size=16)

    def test_empty_store(self, tmp_path):
        assert lint(tmp_path, []) == UsageLint(issues=(), checked_requests=0, block_size=None)

    def test_a_block_size_must_be_positive(self, tmp_path):
        with pytest.raises(ValueError, match="positive"):
            lint(tmp_path, CLEAN, block_size=0)


class TestCachedExceedsPrompt:
    def test_counts_the_rows_whose_cache_exceeds_their_prompt(self, tmp_path):
        rows = [req("l1", 0, 100, 150, fmt="litellm", semantics="litellm"),
                req("l2", 1, 200, 50, fmt="litellm", semantics="litellm"),
                req("l3", 2, 300, 400, fmt="litellm", semantics="litellm"),
                req("l4", 3, None, 70, fmt="litellm", semantics="litellm"),
                req("l5", 4, 250, 250, fmt="litellm", semantics="litellm"), *CLEAN]
        result = lint(tmp_path, rows)
        # litellm: weighted 850/850 = 100%, mean (1.5 + 0.25 + 4/3 + 1) / 4 = 102.1%: no gap
        # issue; l4 reports no prompt tokens, so it is not compared; l5's cache equals its
        # prompt (a full hit), which is not more.
        assert kinds(result) == ["cached-exceeds-prompt"]
        (issue,) = result.issues
        assert (issue.requests, issue.tokens, issue.examples) == (2, 400, ("l1", "l3"))
        assert issue.evidence == {"source": "litellm", "requests_reporting_both": 4,
                                  "cached_tokens": 550, "prompt_tokens": 400,
                                  "excess_tokens": 150, "semantics": ["litellm"]}
        assert issue.title.startswith("litellm: 2 of 4 requests reporting both show more "
                                      "cached than prompt tokens (550 cached over 400 prompt)")


class TestUnalignedCached:
    ROWS = [req("u1", 0, 1000, 128), req("u2", 1, 1000, 192), req("u3", 2, 1000, 100),
            req("u4", 3, 1000, 640), req("u5", 4, 1000, 0),
            # Anthropic upstream, no conversion: exact counts, never checked
            req("x1", 5, 1000, 777, endpoint="anthropic-messages", semantics="anthropic"),
            # the Claude-native convention through new-api: exact as well
            req("x2", 6, 1000, 555, semantics="new-api:claude")]

    def test_share_of_nonzero_values_off_the_block(self, tmp_path):
        result = lint(tmp_path, self.ROWS, block_size=64)
        assert kinds(result) == ["unaligned-cached"]
        (issue,) = result.issues
        # non-zero, block-engine values: 128, 192, 100, 640; 100 % 64 != 0
        assert (issue.requests, issue.tokens, issue.examples) == (1, 1000, ("u3",))
        assert issue.evidence == {"source": "raw", "block_size": 64, "nonzero_values": 4,
                                  "unaligned": 1, "share": 0.25, "exact_count_requests": 2,
                                  "largest_block_dividing_all": None}
        assert issue.title == ("raw: 1 of 4 non-zero cached values (25.0%) are not whole "
                               "64-token blocks")

    def test_names_the_block_the_values_do_fit(self, tmp_path):
        rows = [req("b1", 0, 1000, 16), req("b2", 1, 1000, 48), req("b3", 2, 1000, 64)]
        (issue,) = lint(tmp_path, rows, block_size=32).issues
        assert issue.evidence["largest_block_dividing_all"] == 16
        assert (issue.requests, issue.examples) == (2, ("b1", "b2"))

    def test_skipped_without_a_block_size(self, tmp_path):
        result = lint(tmp_path, self.ROWS)
        assert result.issues == () and result.block_size is None

    def test_aligned_values_give_no_issue(self, tmp_path):
        assert lint(tmp_path, self.ROWS, block_size=4).issues == ()  # 4 divides 128 ... 640


class TestInputIncludesCacheReads:
    def test_converted_calls_with_cache_reads_each_counted_once(self, tmp_path):
        via = {"fmt": "new-api", "semantics": "new-api:openai",
               "endpoint": "anthropic-messages"}
        rows = [
            req("n1", 0, 10_000, 8_000, gateway="anthropic-to-openai", write=100, **via),
            req("n2", 1, 12_000, 0, gateway="anthropic-to-openai", **via),  # no reads
            req("n3", 2, 15_000, 11_000, gateway="anthropic-to-openai", **via),
            req("n4", 3, 20_000, 16_000, **via),  # older new-api: no request_conversion
            # the tracer's log of n1: the same call, not counted again
            req("f1", 0, 10_000, 8_000, fmt="langfuse", semantics="langfuse",
                endpoint="anthropic-messages", gateway="anthropic-to-openai"),
            # controls: a Claude-native upstream, a direct OpenAI client, Claude Code direct
            req("k1", 4, 9_000, 5_000, fmt="new-api", semantics="new-api:claude",
                endpoint="anthropic-messages"),
            req("k2", 4, 9_000, 5_000, fmt="new-api", semantics="new-api:claude",
                endpoint="anthropic-messages", gateway="anthropic-to-openai"),
            req("o1", 5, 9_000, 3_000, fmt="new-api", semantics="new-api:openai"),
            req("d1", 6, 9_000, 7_000, fmt="claude-code", semantics="anthropic",
                endpoint="anthropic-messages"),
        ]
        result = lint(tmp_path, rows, duplicates={"f1": "n1"})
        (issue,) = only(result, "input-includes-cache-reads")
        # calls n1, n3, n4: prompt 10,000 + 15,000 + 20,000; reads 8,000 + 11,000 + 16,000
        assert (issue.requests, issue.tokens) == (3, 45_000)
        assert issue.evidence == {
            "calls": 3, "prompt_tokens": 45_000, "cache_read_tokens": 35_000,
            "cache_write_tokens": 100,
            "by_gateway": {"anthropic-to-openai": 2, "unknown": 1},
            "by_source": {"new-api": 3}, "semantics": ["new-api:openai"]}
        # f1 sorts before n1 (same time, ids in order), but the call is shown by its kept copy
        assert issue.examples == ("n1", "n3", "n4")
        assert "35,000 cache-read tokens" in issue.title
        assert "anthropic_messages_exclude_cache" in issue.fix

    def test_the_tracer_row_alone_is_enough(self, tmp_path):
        rows = [req("f1", 0, 10_000, 8_000, fmt="langfuse", semantics="langfuse",
                    endpoint="anthropic-messages", gateway="anthropic-to-openai"),
                req("f2", 1, 10_000, 8_000, fmt="langfuse", semantics="langfuse",
                    endpoint="anthropic-messages", gateway="anthropic-to-anthropic")]
        (issue,) = only(lint(tmp_path, rows), "input-includes-cache-reads")
        assert (issue.requests, issue.examples) == (1, ("f1",))


class TestMissingVsZero:
    def test_a_request_without_any_usage_is_not_a_dropped_counter(self, tmp_path):
        # x1, x2 failed before usage arrived (no count at all); y1 reports its prompt but
        # not its cache: only y1 is a missing cache counter
        rows = [req("x0", 0, 1000, 0, fmt="cline"), req("x1", 1, None, None, fmt="cline"),
                req("x2", 2, None, None, fmt="cline"), req("y1", 3, 1200, None, fmt="cline"),
                req("x3", 4, 1300, 1000, fmt="cline"),
                req("f0", 0, 1000, 0, fmt="langfuse"),
                req("f1", 1, None, None, fmt="langfuse"),
                req("f2", 2, 1100, 1000, fmt="langfuse")]
        result = lint(tmp_path, rows)
        (issue,) = only(result, "missing-vs-zero")
        assert issue.evidence["source"] == "cline"
        assert (issue.requests, issue.tokens, issue.examples) == (1, 1200, ("y1",))
        assert (issue.evidence["cached_missing"], issue.evidence["missing_without_prompt"]) \
            == (3, 2)
        assert issue.title.startswith("cline: 1 of 5 requests does not report cached tokens "
                                      "(2 more log no usage at all) while 1 report 0")

    def test_each_variant_per_source(self, tmp_path):
        rows = [
            req("m1", 0, 1000, None, fmt="langfuse"), req("m2", 1, 1000, 0, fmt="langfuse"),
            req("m3", 2, 1000, 500, fmt="langfuse"),
            req("p1", 3, 700, None, fmt="openhands"), req("p2", 4, 800, None, fmt="openhands"),
            req("s1", 5, None, None, fmt="swe-agent", semantics=None),
            req("g1", 6, 1000, None, fmt="bifrost"), req("g2", 7, 1000, 200, fmt="bifrost"),
        ]
        result = lint(tmp_path, rows)
        assert kinds(result) == ["missing-vs-zero"] * 4
        by_source = {i.evidence["source"]: i for i in result.issues}
        assert list(by_source) == ["bifrost", "langfuse", "openhands", "swe-agent"]
        mixed = by_source["langfuse"]
        assert (mixed.requests, mixed.tokens, mixed.examples) == (1, 1000, ("m1",))
        assert mixed.evidence == {"source": "langfuse", "requests": 3, "cached_missing": 1,
                                  "cached_zero": 1, "cached_positive": 1,
                                  "missing_without_prompt": 0, "requests_reporting_both": 2}
        assert mixed.title.startswith("langfuse: 1 of 3 requests does not report cached "
                                      "tokens while 1 report 0")
        none = by_source["openhands"]
        assert (none.requests, none.tokens, none.examples) == (2, 1500, ("p1", "p2"))
        assert none.title == ("openhands: none of its 2 requests reports cached tokens: its "
                              "hit rate cannot be observed")
        bare = by_source["swe-agent"]
        assert (bare.requests, bare.tokens) == (1, 0)
        assert "reports token counts" in bare.title
        positive_only = by_source["bifrost"]
        assert positive_only.evidence["cached_zero"] == 0
        assert "none reports 0 (1 report a positive count)" in positive_only.title


class TestWeightedVsMean:
    def test_short_requests_pull_the_mean_up(self, tmp_path):
        rows = [req("a", 0, 100_000, 0),
                *(req(f"s{i}", i + 1, 1_000, 900) for i in range(4))]
        (issue,) = lint(tmp_path, rows).issues
        assert issue.kind == "weighted-vs-mean"
        # weighted 3,600 / 104,000; mean (0 + 4 * 0.9) / 5 = 0.72
        assert issue.evidence["token_weighted_hit_rate"] == pytest.approx(3_600 / 104_000)
        assert issue.evidence["mean_request_hit_rate"] == pytest.approx(0.72)
        assert issue.evidence["gap_points"] == pytest.approx((0.72 - 3_600 / 104_000) * 100)
        assert (issue.requests, issue.tokens) == (5, 104_000)
        # each short request adds (0.9 - w)(1/5 - 1,000/104,000) ~ 0.165 to the gap, the long
        # one w(104,000 - 20,800)/104,000... ~ 0.026: the short ones first, in time order
        assert issue.examples == ("s0", "s1", "s2", "s3", "a")
        assert issue.title == ("raw: the per-request mean hit rate (72.0%) is 68.5 points "
                               "above the token-weighted one (3.5%) over 5 requests: the "
                               "token-weighted rate is what the cache saved")

    def test_a_short_cold_request_pulls_it_down(self, tmp_path):
        rows = [req("cold", 0, 100, 0), req("warm", 1, 9_900, 9_000)]
        (issue,) = lint(tmp_path, rows).issues
        # weighted 9,000 / 10,000 = 90%; mean (0 + 9,000 / 9,900) / 2 = 45.45%
        assert "below" in issue.title and issue.examples[0] == "cold"
        assert issue.evidence["gap_points"] == pytest.approx((9_000 / 9_900 / 2 - 0.9) * 100)

    def test_a_small_gap_is_no_issue(self, tmp_path):
        # weighted 1,700 / 4,000 = 42.5%, mean (0.5 + 0.4) / 2 = 45%
        assert lint(tmp_path, [req("x", 0, 1000, 500), req("y", 1, 3000, 1200)]).issues == ()

    def test_ten_points_is_the_threshold(self, tmp_path):
        # weighted 1,540 / 4,000 = 38.5%, mean (0.1 + 0.48) / 2 = 29%: 9.5 points
        assert lint(tmp_path, [req("x", 0, 1000, 100), req("y", 1, 3000, 1440)]).issues == ()
        # weighted 1,660 / 4,000 = 41.5%, mean (0.1 + 0.52) / 2 = 31%: 10.5 points
        (issue,) = lint(tmp_path / "b", [req("x", 0, 1000, 100),
                                         req("y", 1, 3000, 1560)]).issues
        assert issue.evidence["gap_points"] == pytest.approx(-10.5)


class TestDoubleCounted:
    def test_copies_and_their_prompt_tokens(self, tmp_path):
        rows = [req("k1", 0, 5_000, 4_000, fmt="langfuse"),
                req("k2", 1, 6_000, 0, fmt="langfuse"),
                req("c1", 0, 5_000, 4_000, fmt="new-api"),
                req("c2", 1, None, None, fmt="new-api"),
                req("c3", 0, 7_000, 4_000, fmt="litellm")]
        result = lint(tmp_path, rows, duplicates={"c1": "k1", "c2": "k2", "c3": "k1"})
        (issue,) = only(result, "double-counted")
        assert (issue.requests, issue.tokens) == (3, 12_000)
        assert issue.evidence == {"copies": 3, "prompt_tokens": 12_000, "cached_tokens": 8_000,
                                  "by_sources": {"litellm -> langfuse": 1,
                                                 "new-api -> langfuse": 2}}
        assert set(issue.examples) == {"c1", "c2", "c3"}
        assert issue.title == ("3 calls logged twice (copy -> copy kept: litellm -> langfuse "
                               "(1), new-api -> langfuse (2)): summing the logs would count "
                               "12,000 prompt tokens twice")


class TestImpossibleCount:
    def test_a_store_written_before_the_bound_has_its_impossible_counts_named(self, tmp_path):
        """An earlier version stored counts up to 2^40 (issue 39: one made a hit rate 0%):
        written here as that version did, past `Usage`, which drops them now."""
        tmp_path.mkdir(exist_ok=True)
        with Store.open(tmp_path / "s.duckdb") as st:
            st.add([req("a", 0, 1_000, 500), req("b", 1, 2_000, 1_000),
                    req("c", 2, 1_200, 600)])
            st.run("UPDATE requests SET prompt_tokens = 1099511627776 WHERE id = 'b'")
            st.run("UPDATE requests SET cache_write_tokens = 10000001 WHERE id = 'c'")
            (issue,) = only(lint_usage(st), "impossible-count")
        assert (issue.requests, issue.tokens) == (2, 1_099_511_627_776 + 1_200)
        assert issue.examples == ("b", "c")  # the largest count first
        assert issue.evidence == {"bound": 10_000_000, "largest": 1_099_511_627_776,
                                  "fields": ["cache_write_tokens", "prompt_tokens"]}
        assert issue.title == (
            "2 requests report more tokens than any context window holds (over 10,000,000 in "
            "cache_write_tokens, prompt_tokens; the largest 1,099,511,627,776): a damaged "
            "counter in every total that sums them")

    def test_ten_million_is_possible(self, tmp_path):
        assert not only(lint(tmp_path, [req("a", 0, 10_000_000, 9_000_000)]),
                        "impossible-count")


def test_every_issue_kind_is_known_and_json_able(tmp_path):
    rows = [req("l1", 0, 100, 150), req("n", 1, 1000, None),
            req("c", 2, 100, 150, fmt="new-api")]
    result = lint(tmp_path, rows, block_size=64, duplicates={"c": "l1"})
    assert {i.kind for i in result.issues} <= set(KINDS)
    for issue in result.issues:
        json.dumps(dict(issue.evidence))
        assert 0 < len(issue.examples) <= 5 and issue.fix


# -- the bundled sample logs and the real data -------------------------------------------

def sample_counts() -> dict[str, int]:
    """From new-api's own database: the /v1/messages calls it converted for Claude Code."""
    con = sqlite3.connect(SAMPLES / "new-api-logs.db")
    rows = [(p, json.loads(o)) for p, o in con.execute(
        "SELECT prompt_tokens, other FROM logs WHERE type = 2")]
    con.close()
    messages = [(p, o) for p, o in rows if o.get("request_path") == "/v1/messages"]
    hits = [(p, o) for p, o in messages if o.get("cache_tokens", 0) > 0]
    return {"messages": len(messages), "messages_prompt": sum(p for p, _ in messages),
            "hits": len(hits), "hits_prompt": sum(p for p, _ in hits),
            "hits_cached": sum(o["cache_tokens"] for _, o in hits)}


def bifrost_cached() -> list[int]:
    lines = (SAMPLES / "bifrost-mcp-keyorder.jsonl").read_text().splitlines()
    return [json.loads(line)["response"]["usage"]["prompt_tokens_details"]["cached_tokens"]
            for line in lines if line.strip()]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample logs ingested once."""
    path = tmp_path_factory.mktemp("samples") / "s.duckdb"
    with Store.open(path) as st:
        # the incident the lint is about: the converting gateway, its two logs and the MCP
        # capture (not the eviction sample, whose usage is a plain vLLM's)
        ingest_paths([str(SAMPLES / name) for name in (
            "langfuse-claude-code.events_full.jsonl", "new-api-logs.db",
            "bifrost-mcp-keyorder.jsonl")], st)
    return path


class TestOnSampleLogs:
    def test_the_converting_gateway_and_the_two_logs_are_found(self, store):
        expected = sample_counts()
        with Store.open(store, read_only=True) as st:
            result = lint_usage(st, 16)  # 64-token DeepSeek blocks, 16-token Qwen blocks
        assert kinds(result) == ["input-includes-cache-reads", "double-counted"]
        converted, doubled = result.issues
        assert (converted.requests, converted.tokens,
                converted.evidence["cache_read_tokens"]) == (
            expected["hits"], expected["hits_prompt"], expected["hits_cached"])
        assert converted.evidence["by_gateway"] == {"anthropic-to-openai": expected["hits"]}
        assert (doubled.requests, doubled.tokens) == (expected["messages"],
                                                     expected["messages_prompt"])
        assert doubled.evidence["by_sources"] == {"new-api -> langfuse": expected["messages"]}
        assert result.checked_requests == 62 + 122 + 44

    def test_a_wrong_block_size_shows_on_the_capture(self, store):
        values = [v for v in bifrost_cached() if v > 0]
        off = [v for v in values if v % 64]
        with Store.open(store, read_only=True) as st:
            (issue,) = only(lint_usage(st, 64), "unaligned-cached")
        assert (issue.evidence["source"], issue.evidence["nonzero_values"],
                issue.evidence["unaligned"]) == ("raw", len(values), len(off))
        assert issue.evidence["largest_block_dividing_all"] == 16


class TestOnRealData:
    def test_langfuse_traces_mix_missing_and_zero_cache_reads(self, real, tmp_path):
        generations = [o for f in sorted((real / "langfuse").glob("*.json"))
                       for o in json.loads(f.read_text())["observations"]
                       if o.get("type") == "GENERATION"]
        missing = [o for o in generations
                   if not any("cache_read" in k for k in o.get("usageDetails") or {})]
        zero = [o for o in generations if o not in missing]
        with Store.open(tmp_path / "s.duckdb") as st:
            ingest_paths([str(real / "langfuse")], st)
            result = lint_usage(st)
        (issue,) = only(result, "missing-vs-zero")
        assert (issue.evidence["cached_missing"], issue.evidence["cached_zero"]) == (
            len(missing), len(zero)) == (4, 7)
        assert issue.tokens == sum(o["usageDetails"]["input"] for o in missing)

    def test_tracelab_usage_is_clean(self, real, tmp_path):
        with Store.open(tmp_path / "s.duckdb") as st:
            ingest_paths([str(real / "tracelab")], st)
            result = lint_usage(st)
        assert result.issues == () and result.checked_requests == 38
