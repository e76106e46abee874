"""Numbers that add up: each sum in the ingest summary says which requests it is over, and
the hit rate is over the requests reporting both prompt and cached tokens.

Real OpenHands runs report prompt tokens for 116 of 145 calls and cached tokens for 11, so
"1,956,072 prompt, 28,458 cached, 66.60%" did not agree by eye: the rate is over the 11.
The oracle is plain SQL over the stored rows, written here, not the summary's own query.
"""

from __future__ import annotations

import json

from conftest import ROOT
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
