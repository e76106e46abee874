"""End to end: the whole real-data folder goes through `prefixscope ingest`."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from prefixscope.cli.main import app

# not in the fast loop (`pytest -m "not slow"`): the whole real-data folder
pytestmark = pytest.mark.slow

# Requests per format in tests/data/real/ (counts checked per file in the
# format tests; these are their sums).
EXPECTED = {
    "block-trace": 12031 + 3993,
    "claude-code": 3 + 5 + 1 + 4 + 14 + 1,
    "gemini-cli": 6,
    "aider": 33,
    "codex": 485,  # codex-desktop/: the publisher's manifest counts 485 turn_context lines
    "langfuse": 4 + 1 + 2 + 2 + 2,
    "mini-swe-agent": 10 + 2 + 15,  # mini-swe-agent-deepseek/: 15 calls of 16 made
    "openhands": 23 + 33 + 49 + 2 + 5 + 3 + 4 + 4 + 22,
    "openhands-completions": 6 + 4,  # llm-logs/, nonfncall-llm-logs/
    "swe-agent": 21 + 5 + 5 + 12 + 14 + 11 + 13,
    "tracelab": 19 + 19,
}


def test_whole_real_folder_is_recognized(real):
    runner = CliRunner()
    result = runner.invoke(app, ["ingest", str(real), "--store", "real.duckdb", "--json"],
                           catch_exceptions=False)
    assert result.exit_code == 0
    out = json.loads(result.stdout)
    assert out["by_format"] == EXPECTED
    # the only files read as no log: codex-desktop's published totals (the oracle of
    # tests/test_real_codex_desktop.py), beside its rollouts
    assert sorted(u.rsplit("/", 2)[-2] + "/" + u.rsplit("/", 1)[-1]
                  for u in out["unrecognized"]) == [
        "codex-desktop/manifest.json", "expected/codex-sessions.json",
        "expected/codex-stats.json"]
    # the only skips are the four stray non-record lines of claude-code-log's edge cases,
    # the OTLP example, whose one span ("I'm a server span") is no GenAI model call, and
    # the three files of published totals
    assert out["skipped"] == 4 + 1 + 3
    assert {e["file"].rsplit("/", 1)[-1] for e in out["errors"]} == \
        {"claude-code-log__edge_cases.jsonl", "opentelemetry-proto__examples__trace.json",
         "manifest.json", "codex-sessions.json", "codex-stats.json"}
    assert out["empty"] == [f"{real}/otel/opentelemetry-proto__examples__trace.json (otel)"]
    sql = runner.invoke(app, ["sql", "select source_format, count(*) as n from requests "
                              "group by 1 order by 1", "--store", "real.duckdb", "--json"])
    assert {r["source_format"]: r["n"] for r in json.loads(sql.stdout)} == EXPECTED
    again = runner.invoke(app, ["ingest", str(real), "--store", "real.duckdb", "--json"])
    assert json.loads(again.stdout)["ingested"] == 0


def _rows(store: str, sql: str) -> list[dict]:
    out = CliRunner().invoke(app, ["sql", sql, "--store", store, "--json"],
                             catch_exceptions=False)
    return json.loads(out.stdout)


def test_real_trajectories_thread_one_session_per_run(real):
    runner = CliRunner()
    runner.invoke(app, ["ingest", str(real / "swe-agent"), str(real / "openhands"), "--store",
                        "t.duckdb"], catch_exceptions=False)
    swe = _rows("t.duckdb", "select source_file, count(distinct session) s, count(*) n "
                            "from turns where source_format = 'swe-agent' group by 1")
    assert len(swe) == 7 and all(r["s"] == 1 for r in swe)
    runs = _rows("t.duckdb", "select session, count(*) n, count(*) filter (where link = "
                             "'extends') ext from turns where source_file like "
                             "'%multi_swe_bench%' group by 1 order by n")
    # every call of each CodeAct run continues the one before it
    assert [(r["n"], r["ext"]) for r in runs] == [(23, 22), (33, 32), (49, 48)]
