"""bucket: block-size inference, spikes, histograms, boundary matching, and the 17920 case
end to end on the bundled sample logs (new-api and Langfuse) and the real data."""

from __future__ import annotations

import json
import re
import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from agent_captures import write_agent_captures
from conftest import ROOT
from factories import anthropic_body, conversation, make_request
from typer.testing import CliRunner

from prefixscope.analyses.bucket import (
    Boundary,
    bucket_store,
    describe_boundary,
    explain_spike,
    find_spikes,
    group_block_size,
    histogram,
    infer_block_size,
)
from prefixscope.cli.main import app
from prefixscope.ingest import read_requests
from prefixscope.model import Request, Usage
from prefixscope.prompt import RenderOptions
from prefixscope.store import Store
from prefixscope.tokens.tokenize import tokens

SAMPLES = ROOT / "sample_logs"
LANGFUSE = SAMPLES / "langfuse-claude-code.events_full.jsonl"
NEWAPI = SAMPLES / "new-api-logs.db"
BEHIND_NEWAPI = RenderOptions(gateway="anthropic-to-openai", tokenizer="deepseek-v4")
runner = CliRunner()


def invoke_json(*args: str) -> dict:
    result = runner.invoke(app, [*args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def first_token_of(tok, element: str) -> int:
    """Token index where `element` (e.g. "system[0]") starts in a rendered prompt."""
    spans = tok.segment_token_spans()
    return min(start for seg, (start, end) in zip(tok.prompt.segments, spans, strict=True)
               if seg.path.split(".")[0] == element and end > start)


def common_prefix(a, b) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


class TestInferBlockSize:
    def test_largest_candidate_dividing_every_frequent_value(self):
        values = [17920] * 30 + [192] * 2 + [320] * 2 + [0] * 5
        assert infer_block_size(values) == 64

    def test_incident_values_alone_only_bound_the_block_size(self):
        # 383 x 17920 and 40 x 256: both divisible by 256, so 256 is all the data can say.
        assert infer_block_size([17920] * 383 + [256] * 40 + [0] * 28) == 256

    def test_one_off_values_do_not_decide_when_enough_values_repeat(self):
        values = [128 * 3] * 2 + [128 * 5] * 2 + [128 * 7] * 2 + [1000]
        assert infer_block_size(values) == 128

    def test_ninety_percent_of_values_must_divide(self):
        nine_of_ten = [256 * k for k in (1, 3, 5, 7, 9, 11, 13, 15, 17)] + [64 * 3]
        assert infer_block_size(nine_of_ten * 2) == 256
        eight_of_ten = nine_of_ten[:8] + [64 * 3, 64 * 5]
        assert infer_block_size(eight_of_ten * 2) == 64

    def test_nothing_to_infer(self):
        assert infer_block_size([]) is None
        assert infer_block_size([0, 0, 0]) is None
        assert infer_block_size([100, 300, 500] * 2) is None  # 100 = 4 x 25: no candidate

    def test_group_falls_back_on_overall_when_its_values_cannot_tell(self):
        assert group_block_size([17920] * 10, 64) == 64
        assert group_block_size([17920] * 10, None) == 512
        assert group_block_size([17920] * 10, 1024) == 512  # 1024 does not divide 17920
        assert group_block_size([512, 1024, 1536] * 2, 64) == 512  # three values decide


class TestFindSpikes:
    def test_five_percent_and_five_requests(self):
        values = [2880] * 5 + [640] * 4 + list(range(1000, 1091))  # 100 requests
        assert find_spikes(values, 64) == [(2880, 5, 0.05, 45.0)]

    def test_share_below_five_percent_is_not_a_spike(self):
        values = [2880] * 9 + list(range(1000, 1191))  # 9 of 200 = 4.5%
        assert find_spikes(values, 64) == []

    def test_fewer_than_five_requests_is_not_a_spike(self):
        assert find_spikes([2880] * 4 + [0] * 20, 64) == []

    def test_zero_is_never_a_spike_and_most_common_comes_first(self):
        values = [0] * 50 + [256] * 10 + [17920] * 40
        assert find_spikes(values, 64) == [(17920, 40, 0.4, 280.0), (256, 10, 0.1, 4.0)]

    def test_blocks_unknown_without_block_size(self):
        assert find_spikes([300] * 6, None) == [(300, 6, 1.0, None)]


class TestHistogram:
    def test_block_aligned_bins_put_a_pinned_value_at_a_bin_start(self):
        values = [0] * 4 + [2240] * 4 + [2880] * 54
        bins = histogram(values, 20, step=64)
        # width: smallest multiple of 64 fitting 2880 into 20 bins = 192; 2880 // 192 + 1 bins
        assert len(bins) == 16
        assert {(b.lo, b.hi): b.requests for b in bins if b.requests} == {
            (0, 192): 4, (2112, 2304): 4, (2880, 3072): 54}
        assert sum(b.requests for b in bins) == len(values)

    def test_whole_token_bins(self):
        bins = histogram(list(range(100)), 10, step=1)
        assert [(b.lo, b.hi, b.requests) for b in bins] == [
            (10 * i, 10 * i + 10, 10) for i in range(10)]

    def test_exact_multiple_of_bins_still_fits(self):
        bins = histogram([0, 2880], 20, step=1)  # width 145, not 144: 2880 must fit
        assert len(bins) == 20 and bins[-1].lo <= 2880 < bins[-1].hi

    def test_all_zero(self):
        assert [(b.lo, b.hi, b.requests) for b in histogram([0, 0, 0], 20, step=64)] == [
            (0, 64, 3)]

    def test_fractions_last_bin_closed(self):
        bins = histogram([0.0, 0.55, 1.0], 10, 0.0, 1.0)
        assert [b.requests for b in bins] == [1, 0, 0, 0, 0, 1, 0, 0, 0, 1]

    def test_empty(self):
        assert histogram([], 20) == ()

    def test_fraction_edges_are_exact_tenths_and_an_edge_value_starts_its_bin(self):
        # 3 of 10 tokens cached is exactly 0.3: the bin [0.3, 0.4) holds it (0.3 / 0.1 is
        # 2.9999999999999996 in floating point, which would put it in [0.2, 0.3)).
        bins = histogram([3 / 10, 7 / 10], 10, 0.0, 1.0)
        assert [(b.lo, b.hi) for b in bins] == [(i / 10, (i + 1) / 10) for i in range(10)]
        assert [str(b.lo) for b in bins] == ["0.0", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6",
                                             "0.7", "0.8", "0.9"]
        assert [b.requests for b in bins] == [0, 0, 0, 1, 0, 0, 0, 1, 0, 0]


class TestExplainSpike:
    TOOLS_END = [(2884, "tools", "system[0]"), (2921, "system[0]", "system[1]"),
                 (2934, "system[1]", "system[2]")]

    def test_exact_boundary(self):
        found = explain_spike(2880, 64, [self.TOOLS_END] * 3)
        assert found == Boundary("tools", "system[0]", 2884, 3)

    def test_one_block_tolerance_when_the_next_segment_starts_alike(self):
        # tools end at 2870 (floor 2816) but the header's first tokens are shared: 2880
        found = explain_spike(2880, 64, [[(2870, "tools", "system[0]")]])
        assert found == Boundary("tools", "system[0]", 2870, 1)

    def test_no_match_beyond_the_tolerance(self):
        assert explain_spike(2880, 64, [[(2950, "tools", "system[0]")]]) is None  # floor 2944
        assert explain_spike(2880, 64, [[(2700, "tools", "system[0]")]]) is None  # floor 2688

    def test_exact_match_wins_over_tolerance(self):
        boundaries = [[(2830, "tools", "system[0]"), (2890, "system[0]", "system[1]")]] * 2
        assert explain_spike(2880, 64, boundaries).segment_before == "system[0]"

    def test_majority_of_requests_then_earliest_token(self):
        a = [(2885, "tools", "system[0]")]
        b = [(2890, "system", "messages[0]")]
        assert explain_spike(2880, 64, [a, b, b]).segment_before == "system"
        assert explain_spike(2880, 64, [a, b]).segment_before == "tools"

    def test_sentence(self):
        found = Boundary("tools", "system[0]", 2884, 40, 40, 40)
        assert describe_boundary(found, 2880, 64) == (
            "identical through the end of `tools` (token 2,884 → 45 × 64 = 2,880); the next "
            "segment, `system[0]`, differs in every request (40 distinct of 40 rendered)")


def with_usage(request: Request, prompt: int | None, cached: int | None) -> Request:
    from dataclasses import replace

    return replace(request, usage=Usage(prompt_tokens=prompt, cached_tokens=cached))


class TestBucketStore:
    def test_hit_rate_is_token_weighted_and_the_mean_gap_noted(self, tmp_path):
        rows = [make_request("a", usage=Usage(prompt_tokens=100_000, cached_tokens=0)),
                *(make_request(f"s{i}", minutes=i + 1,
                               usage=Usage(prompt_tokens=1_000, cached_tokens=900))
                  for i in range(4)),
                make_request("n", usage=Usage(prompt_tokens=500))]
        with Store.open(tmp_path / "s.duckdb") as st:
            st.add(rows)
            report = bucket_store(st, explain=False)
        (group,) = report.groups
        assert (group.requests, group.prompt_tokens, group.cached_tokens) == (5, 104_000, 3_600)
        assert group.hit_rate == pytest.approx(3_600 / 104_000)
        assert group.mean_request_hit_rate == pytest.approx(0.72)
        assert "per-request mean" in group.notes[0]
        assert report.totals.without_usage == 1

    def test_billing_header_spike_explained_from_rendered_bodies(self, tmp_path):
        requests = [make_request(f"r{i}", minutes=i, body=anthropic_body(
            conversation(i + 1), cch=f"{i:x}a6f0")) for i in range(6)]
        first = tokens(requests[0], BEHIND_NEWAPI)
        boundary = first_token_of(first, "system[0]")
        value = boundary // 16 * 16
        rows = [with_usage(r, 400 + 20 * i, value) for i, r in enumerate(requests)]
        rows.append(with_usage(make_request("cold", minutes=9, body=anthropic_body(
            conversation(1), cch="77777")), 300, 0))
        with Store.open(tmp_path / "s.duckdb") as st:
            st.add(rows)
            report = bucket_store(st, ("endpoint",), block_size=16, options=BEHIND_NEWAPI)
        (spike,) = report.groups[0].spikes
        assert (spike.cached_tokens, spike.requests, spike.blocks) == (value, 6, value / 16)
        assert spike.boundary == Boundary("tools", "system[0]", boundary, 6, 6, 6)
        assert "differs in every request" in spike.explanation

    def test_no_bodies_declared(self, tmp_path):
        rows = [make_request(f"r{i}", minutes=i, usage=Usage(prompt_tokens=5000 + i,
                                                             cached_tokens=2880))
                for i in range(5)]
        with Store.open(tmp_path / "s.duckdb") as st:
            st.add(rows)
            report = bucket_store(st)
        (spike,) = report.groups[0].spikes
        assert spike.boundary is None
        assert "no body" in spike.explanation
        assert report.block_size == 64 and report.block_size_source == "inferred"
        assert "inferred from 1 distinct" in report.notes[0]

    def test_unknown_dimension(self, tmp_path):
        with Store.open(tmp_path / "s.duckdb") as st, pytest.raises(ValueError, match="colour"):
            bucket_store(st, ("colour",))


# -- the 17920 investigation on the bundled samples ---------------------------------

def langfuse_rows() -> list[dict]:
    return [json.loads(line) for line in LANGFUSE.read_text().splitlines()]


def sample_request(row: dict) -> Request:
    return make_request(row["span_id"], body=json.loads(row["input"]))


@pytest.fixture(scope="module")
def tools_constant() -> int:
    """The spike the upstream must show, computed from the template, not from bucket:
    the rendered prompt is identical through the tool definitions, so the cache holds
    the tools' tokens rounded down to 64-token blocks."""
    rows = [r for r in langfuse_rows() if "agent_role" in r["metadata_names"]
            and r["metadata_values"][r["metadata_names"].index("agent_role")] == "main"]
    a, b = (tokens(sample_request(r), BEHIND_NEWAPI) for r in rows[3:5])
    boundary = first_token_of(a, "system[0]")
    assert first_token_of(b, "system[0]") == boundary
    shared = common_prefix(a.ids, b.ids)
    assert boundary < shared < boundary + 64  # the header's constant start, then the nonce
    assert shared // 64 * 64 == boundary // 64 * 64
    return boundary // 64 * 64


class TestLangfuseSample:
    def test_bucket_finds_the_tools_constant_and_its_boundary(self, tools_constant):
        rows = langfuse_rows()
        cached = Counter(int(r["usage_details"]["input_cached_tokens"]) for r in rows)
        out = invoke_json("bucket", str(LANGFUSE), "--by", "endpoint",
                          "--gateway", "anthropic-to-openai")
        (group,) = out["groups"]
        assert group["key"] == {"endpoint": "anthropic-messages"}
        assert group["block_size"] == 64
        top = group["spikes"][0]
        assert top["cached_tokens"] == tools_constant
        assert top["requests"] == cached[tools_constant]
        assert top["share"] == pytest.approx(cached[tools_constant] / len(rows))
        assert top["blocks"] == tools_constant / 64
        assert top["boundary"]["segment_before"] == "tools"
        assert top["boundary"]["segment_after"] == "system[0]"
        assert top["boundary"]["token"] // 64 * 64 == tools_constant
        assert out["totals"]["requests"] == len(rows)
        assert set(group) >= {"key", "requests", "prompt_tokens", "cached_tokens", "hit_rate",
                              "histogram", "block_size", "spikes"}

    @pytest.mark.slow
    def test_segments_ranks_the_billing_header_first(self, tools_constant):
        out = invoke_json("segments", str(LANGFUSE), "--gateway", "anthropic-to-openai")
        top = out["segments"][0]
        assert top["segment"] == "system[0]"
        assert top["unique_per_request"] is True
        assert top["change_rate"] == 1.0
        assert top["requests"] == len(langfuse_rows())
        assert top["token_start_median"] // 64 * 64 == tools_constant
        assert set(top) >= {"segment", "kind", "requests", "distinct", "change_rate",
                            "unique_per_request", "change_kinds", "token_start_median",
                            "tokens_after_median", "invalidated_tokens", "preview"}
        assert "cch=•••••" in top["preview"]


class TestNewApiSample:
    def test_spike_and_block_size_without_bodies(self):
        con = sqlite3.connect(NEWAPI)
        rows = con.execute("SELECT json_extract(other, '$.cache_tokens') FROM logs "
                           "WHERE type = 2 AND json_extract(other, '$.request_path') = "
                           "'/v1/messages'").fetchall()
        con.close()
        constant, count = Counter(r[0] for r in rows).most_common(1)[0]
        out = invoke_json("bucket", str(NEWAPI), "--by", "endpoint")
        groups = {g["key"]["endpoint"]: g for g in out["groups"]}
        claude = groups["anthropic-messages"]
        assert claude["block_size"] == 64 and out["block_size"] == 64
        spike = claude["spikes"][0]
        assert (spike["cached_tokens"], spike["requests"]) == (constant, count)
        assert spike["boundary"] is None
        assert "no body" in spike["explanation"]
        assert groups["openai-chat"]["hit_rate"] > claude["hit_rate"] + 0.2

    @pytest.mark.slow
    def test_plot(self, tmp_path):
        out = tmp_path / "out.png"
        result = runner.invoke(app, ["bucket", str(NEWAPI), "--by", "endpoint", "--plot",
                                     str(out), "-q"], catch_exceptions=False)
        assert result.exit_code == 0
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    def test_terminal_output(self):
        result = runner.invoke(app, ["bucket", str(NEWAPI), "--by", "endpoint"],
                               catch_exceptions=False)
        assert result.exit_code == 0
        assert re.search(r"spike [\d,]+ = \d+ × 64 · \d+ of \d+ requests", result.stdout)
        assert "◀" in result.stdout and "no body" in result.stdout


def real_requests(folder: Path) -> list[Request]:
    """Every request of a real-data folder, read file by file without bucket's code paths."""
    by_id: dict[str, Request] = {}
    for path in sorted(folder.iterdir()):
        try:
            requests, _ = read_requests(path)
        except ValueError:
            continue  # not a log
        for request in requests:
            by_id.setdefault(request.id, request)
    return list(by_id.values())


def calls_of(requests: list[Request]) -> list[list[Request]]:
    """The requests grouped by call: Claude Code's message id (claude-code-log's fixtures
    log msg_004 in two files) or Langfuse's observation id name one upstream call."""
    calls: dict[str, list[Request]] = {}
    for r in requests:
        calls.setdefault(r.native_id or r.id, []).append(r)
    return list(calls.values())


@pytest.mark.slow
class TestRealData:
    @pytest.mark.parametrize("folder", ["claude-code-jsonl", "langfuse"])
    def test_bucket_counts_every_call_with_usage_once(self, real: Path, folder: str):
        requests = real_requests(real / folder)
        both = [[r for r in call if r.usage.prompt_tokens is not None
                 and r.usage.cached_tokens is not None] for call in calls_of(requests)]
        counted = [copies[0] for copies in both if copies]
        out = invoke_json("bucket", str(real / folder), "--by", "endpoint,model")
        assert out["totals"]["requests"] == len(counted) > 0
        assert out["totals"]["without_usage"] == len(both) - len(counted)
        assert out["totals"]["cached_tokens"] == sum(r.usage.cached_tokens for r in counted)
        for group in out["groups"]:
            assert sum(b["requests"] for b in group["histogram"]) == group["requests"]
        result = runner.invoke(app, ["bucket", str(real / folder)], catch_exceptions=False)
        assert result.exit_code == 0 and "hit rate = cached / prompt tokens" in result.stdout

    @pytest.mark.parametrize("folder", ["claude-code-jsonl", "langfuse"])
    def test_segments_censuses_every_body(self, real: Path, folder: str):
        calls = calls_of(real_requests(real / folder))
        out = invoke_json("segments", str(real / folder))
        with_body = sum(1 for call in calls if any(r.body is not None for r in call))
        assert out["totals"]["requests"] == with_body
        assert out["totals"]["without_body"] == len(calls) - with_body
        result = runner.invoke(app, ["segments", str(real / folder)], catch_exceptions=False)
        assert result.exit_code == 0


class TestReviewFollowUps:
    def test_one_odd_value_does_not_stop_inference(self):
        from prefixscope.analyses.bucket import infer_block_size

        assert infer_block_size([17920] * 383 + [256] * 3 + [1000]) == 256

    def test_more_cached_than_prompt_is_noted(self):
        from prefixscope.analyses.bucket import UsageRow, build_group

        rows = [UsageRow(f"r{i}", (), 100, 150, False) for i in range(3)]
        group = build_group({}, rows, 5, 16, None)
        assert any("more cached than prompt" in n for n in group.notes)


def claude_code_transcript(path: Path, cached: list[int]) -> None:
    """Claude Code session lines (one assistant call each) reporting `cached` cache reads:
    Anthropic counts cached tokens exactly, so they are no multiple of any block size."""
    lines = []
    for n, value in enumerate(cached):
        lines.append(json.dumps({
            "parentUuid": f"u-{n - 1}" if n else None, "isSidechain": False,
            "sessionId": "cc-session-1", "type": "assistant", "uuid": f"u-{n}",
            "timestamp": f"2026-03-02T08:{n:02d}:00.000Z", "requestId": f"req_{n}",
            "message": {"id": f"msg_{n}", "type": "message", "role": "assistant",
                        "model": "claude-sonnet-4-5", "content": [{"type": "text", "text": "ok"}],
                        "usage": {"input_tokens": 3, "cache_creation_input_tokens": 40,
                                  "cache_read_input_tokens": value, "output_tokens": 5}}}))
    path.write_text("\n".join(lines) + "\n")


class TestBlockSizePerGroup:
    """A store holding Claude Code rows (exact cached counts) and an OpenAI agent behind a
    128-token-block engine: each group gets its own block size, in bucket and in diff."""

    # 9 cache reads, each logged twice: none is a multiple of 16
    CLAUDE = [13417, 13417, 14022, 14022, 15009, 15009, 16385, 16385, 17021, 17021, 18433,
              18433, 19301, 19301, 20117, 20117, 21003, 21003]

    @pytest.fixture
    def store(self, tmp_path):
        claude_code_transcript(tmp_path / "cc.jsonl", self.CLAUDE)
        write_agent_captures(tmp_path / "agents.jsonl", cached_block=128)
        assert runner.invoke(app, ["ingest", str(tmp_path), "--store", "mixed.duckdb"]
                             ).exit_code == 0
        return "mixed.duckdb"

    def test_bucket_carries_the_evidence_per_group(self, store):
        out = invoke_json("bucket", "--by", "source", "--store", store, "--no-explain")
        groups = {g["key"]["source"]: g for g in out["groups"]}
        # The agent's cached values are 1,280 1,792 2,432 3,072 3,584 (its previous prompt,
        # 1,300 ... 3,700, floored to 128): gcd 128; 256 divides 4 of 5 (80% < 90%).
        assert groups["raw"]["block_size"] == 128
        assert groups["raw"]["block_size_basis"] == "group"
        assert groups["raw"]["block_size_candidates"] == [16, 32, 64, 128]
        assert groups["claude-code"]["block_size"] is None
        assert groups["claude-code"]["block_size_candidates"] == []
        # store-wide: 14 values seen twice or more, 5 of them multiples of 128: none fits
        assert (out["block_size"], out["block_size_source"]) == (None, "default")
        assert out["block_size_candidates"] == []

    def test_diff_uses_the_block_size_of_each_group(self, store):
        out = invoke_json("diff", "--all", "--store", store, "--tokenizer", "deepseek-v4")
        raw = [p for p in out["pairs"] if p["session"].startswith("t-")]
        assert len(raw) == 40  # 8 sessions x 6 calls, 5 pairs each
        assert {(p["block_size"], p["block_size_source"]) for p in raw} == {(128, "inferred")}
        for p in raw:  # append-only: A's tokens are all reusable, floored to whole blocks
            assert p["reusable_tokens"] == min(p["tokens_a"], p["tokens_b"] - 1) // 128 * 128
        assert out["block_size_source"] == "inferred"


@pytest.mark.parametrize("dims", ["endpoint", "source,model"])
def test_bucket_by_a_dimension_books_each_loss_to_the_cause_report_names(
        tmp_path: Path, dims: str) -> None:
    """bucket's usage-and-dollars table and report's `--by` table are the one ledger: the
    billing header's loss on the sample logs' Anthropic endpoint is `break` in both, not
    `unexplained` in one of them."""
    store = str(tmp_path / "s.duckdb")
    assert runner.invoke(app, ["ingest", str(ROOT / "sample_logs"), "--store",
                               store]).exit_code == 0
    bucketed = invoke_json("bucket", "--store", store, "--by", dims)
    reported = invoke_json("report", "--store", store, "--by", dims)
    assert bucketed["spend"] == reported["by"]
    rows = bucketed["spend"]["rows"]
    assert sum(r["requests"] for r in rows) == reported["summary"]["requests"]
    assert sum(r["missed_tokens"] for r in rows) == reported["ledger"]["missed_tokens"]
    if dims == "endpoint":
        top = {r["key"]["endpoint"]: r["top_cause"] for r in rows}
        assert top["anthropic-messages"] == "break"
