"""Numbers that add up: each sum in the ingest summary says which requests it is over, and
the hit rate is over the requests reporting both prompt and cached tokens.

Real OpenHands runs report prompt tokens for 116 of 145 calls and cached tokens for 11, so
"1,956,072 prompt, 28,458 cached, 66.60%" did not agree by eye: the rate is over the 11.
The oracle is plain SQL over the stored rows, written here, not the summary's own query.
"""

from __future__ import annotations

import json

from agent_captures import write_agent_captures
from conftest import ROOT
from litellm_rows import spend_row
from typer.testing import CliRunner

from prefixscope.cli.main import app

runner = CliRunner()


def sql(query: str, store: str) -> list[dict]:
    out = runner.invoke(app, ["sql", query, "--store", store, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


class TestRealOpenHands:
    def test_each_sum_with_its_basis(self, real):
        out = runner.invoke(app, ["ingest", str(real / "openhands"), "--store", "oh.duckdb",
                                  "--json"])
        summary = json.loads(out.stdout)["formats"]["openhands"]
        rows = sql("select prompt_tokens p, cached_tokens c from requests", "oh.duckdb")
        both = [r for r in rows if r["p"] is not None and r["c"] is not None]
        assert (summary["requests"], summary["prompt_requests"], summary["cached_requests"]) \
            == (len(rows), sum(r["p"] is not None for r in rows),
                sum(r["c"] is not None for r in rows)) == (145, 116, 11)
        assert (summary["prompt_tokens"], summary["cached_tokens"]) == (1_956_072, 28_458)
        assert (summary["rate_requests"], summary["rate_prompt_tokens"],
                summary["rate_cached_tokens"]) == (len(both), sum(r["p"] for r in both),
                                                   sum(r["c"] for r in both)) == (11, 42_730,
                                                                                  28_458)
        assert summary["hit_rate"] == 28_458 / 42_730

    def test_the_table_shows_the_basis_beside_the_rate(self, real):
        out = runner.invoke(app, ["ingest", str(real / "openhands"), "--store", "oh.duckdb"],
                            terminal_width=160)
        row = next(line for line in out.stdout.splitlines() if line.startswith("openhands"))
        cells = [c.strip() for c in row.split("│")]
        # format, requests, sessions, with body, prompt, cached, hit rate, over requests,
        # over prompt: 28,458 / 42,730 = 66.60% by eye
        assert cells[4:9] == ["1,956,072", "28,458", "66.60%", "11", "42,730"]


class TestEveryCallOnce:
    def test_sample_totals(self):
        out = json.loads(runner.invoke(app, ["ingest", str(ROOT / "sample_logs"), "--store",
                                             "s.duckdb", "--json"]).stdout)
        # the calls: every request but the new-api rows linked to a Langfuse row
        once = sql("select count(*) n, sum(prompt_tokens) p, sum(cached_tokens) c from requests "
                   "where not (source_format = 'new-api' and json_extract_string(metadata, "
                   "'$.request_path') = '/v1/messages')", "s.duckdb")[0]
        t = out["totals"]
        assert (t["requests"], t["prompt_tokens"], t["cached_tokens"], t["duplicates"]) == (
            once["n"], once["p"], once["c"], 62)
        assert t["hit_rate"] == once["c"] / once["p"]
        assert sum(f["requests"] for f in out["formats"].values()) == once["n"] + 62

    def test_a_figure_the_kept_copy_lacks_counts_from_the_copy_reporting_it(self, tmp_path):
        # three calls captured with their bodies (prompt 1300, 1900, 2500; no cached
        # count), the first two logged again by LiteLLM (no body; cached 100, 200): each
        # call counts once, its prompt from the capture, its cached tokens from the copy
        capture = tmp_path / "capture.jsonl"
        write_agent_captures(capture, sessions=1, turns=3)
        lines = [json.loads(line) for line in capture.read_text().splitlines()]
        spend = tmp_path / "spend.jsonl"
        spend.write_text("".join(json.dumps({
            **spend_row("", 0, "deployment-1", ln["response"]["usage"]["prompt_tokens"],
                        100 * (n + 1), 0, model=ln["request"]["model"]),
            "request_id": ln["response"]["id"], "startTime": ln["timestamp"],
            "endTime": ln["timestamp"], "session_id": None,
            "custom_llm_provider": "openai"}) + "\n" for n, ln in enumerate(lines[:2])))
        out = runner.invoke(app, ["ingest", str(capture), str(spend), "--store",
                                  str(tmp_path / "s.duckdb"), "--json"])
        t = json.loads(out.stdout)["totals"]
        assert (t["requests"], t["duplicates"], t["with_body"]) == (3, 2, 3)
        assert (t["prompt_tokens"], t["prompt_requests"]) == (1300 + 1900 + 2500, 3)
        assert (t["cached_tokens"], t["cached_requests"]) == (100 + 200, 2)
        # both figures from one copy: the LiteLLM rows of the first two calls
        assert (t["rate_requests"], t["rate_prompt_tokens"], t["rate_cached_tokens"]) == (
            2, 1300 + 1900, 300)
