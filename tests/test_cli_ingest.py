"""`prefixscope ingest`, `sql` and `export` through Typer's CliRunner."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import orjson
import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from prefixscope.cli.main import app

runner = CliRunner()


def invoke(*args: str, input: str | None = None):
    return runner.invoke(app, list(args), input=input, catch_exceptions=False)


def anthropic_capture(n: int) -> dict:
    msgs = []
    for i in range(n):
        msgs.append({"role": "user", "content": f"q{i}"})
        if i < n - 1:
            msgs.append({"role": "assistant", "content": f"a{i}"})
    return {"request": {"model": "claude-sonnet-4-5", "system": "be brief", "messages": msgs},
            "response": {"id": f"msg_{n}", "usage": {"input_tokens": 10,
                                                     "cache_read_input_tokens": 100 * n,
                                                     "output_tokens": 5}},
            "endpoint": "/v1/messages", "timestamp": f"2026-08-01T12:0{n}:00Z"}


def write_capture(path: Path, turns: int = 3) -> Path:
    path.write_text("".join(orjson.dumps(anthropic_capture(n)).decode() + "\n"
                            for n in range(1, turns + 1)))
    return path


class TestIngestCommand:
    def test_json_shape_and_reingest_adds_nothing(self):
        log = write_capture(Path("cap.jsonl"))
        first = json.loads(invoke("ingest", str(log), "--store", "s.duckdb", "--json").stdout)
        assert set(first) >= {"ingested", "skipped", "by_format", "sessions", "errors"}
        assert first["ingested"] == 3 and first["skipped"] == 0
        assert first["by_format"] == {"raw": 3}
        assert first["sessions"] == 1
        again = json.loads(invoke("ingest", str(log), "--store", "s.duckdb", "--json").stdout)
        assert again["ingested"] == 0 and again["already_present"] == 3

    def test_bad_line_is_skipped_with_place_and_reason(self):
        log = write_capture(Path("cap.jsonl"))
        log.write_text(log.read_text() + "{not json\n")
        out = json.loads(invoke("ingest", str(log), "--store", "s.duckdb", "--json").stdout)
        assert out["ingested"] == 3 and out["skipped"] == 1
        assert out["errors"] == [{"file": str(log), "line": 4,
                                  "reason": out["errors"][0]["reason"]}]
        assert "JSON" in out["errors"][0]["reason"]

    def test_strict_fails_and_stores_nothing(self):
        log = write_capture(Path("cap.jsonl"))
        log.write_text(log.read_text() + "{not json\n")
        result = invoke("ingest", str(log), "--store", "s.duckdb", "--strict")
        assert result.exit_code == 1
        assert not Path("s.duckdb").exists()  # a new store that would hold nothing: none
        invoke("ingest", str(write_capture(Path("other.jsonl"), 2)), "--store", "s.duckdb")
        result = invoke("ingest", str(log), "--store", "s.duckdb", "--strict")
        assert result.exit_code == 1
        count = invoke("sql", "select count(*) as n from requests", "--store", "s.duckdb",
                       "--json")
        assert json.loads(count.stdout) == [{"n": 2}]

    def test_unrecognized_file_gets_one_line_naming_formats(self):
        Path("notes.log").write_text("hello world\n")
        result = invoke("ingest", "notes.log", "--store", "s.duckdb")
        assert result.exit_code == 1
        assert "not a recognized log format (tried: " in result.stderr
        assert "Traceback" not in result.output + result.stderr

    def test_gzip_directory_and_stdin(self):
        Path("logs").mkdir()
        raw = write_capture(Path("logs/a.jsonl")).read_bytes()
        Path("logs/b.jsonl.gz").write_bytes(gzip.compress(raw.replace(b"msg_", b"msg_gz")))
        Path("logs/README.md").write_text("# not a log")
        out = json.loads(invoke("ingest", "logs", "--store", "s.duckdb", "--json").stdout)
        assert out["ingested"] == 6 and out["skipped"] == 0 and out["files"] == 2
        piped = invoke("ingest", "-", "--store", "t.duckdb", "--json",
                       input=raw.decode())
        assert json.loads(piped.stdout)["ingested"] == 3

    def test_unknown_format_name_is_a_usage_error(self):
        result = invoke("ingest", "x", "--format", "nope", "--store", "s.duckdb")
        assert result.exit_code == 2 and "unknown format" in result.stderr


class TestSqlAndExport:
    def test_sql_json_csv_and_table(self):
        invoke("ingest", str(write_capture(Path("cap.jsonl"))), "--store", "s.duckdb")
        q = "select source_format, count(*) as n from requests group by 1"
        assert json.loads(invoke("sql", q, "--store", "s.duckdb", "--json").stdout) == \
            [{"source_format": "raw", "n": 3}]
        assert invoke("sql", q, "--store", "s.duckdb", "--csv").stdout.splitlines() == \
            ["source_format,n", "raw,3"]
        assert "raw" in invoke("sql", q, "--store", "s.duckdb").stdout

    def test_sql_is_read_only_and_errors_are_one_line(self):
        invoke("ingest", str(write_capture(Path("cap.jsonl"))), "--store", "s.duckdb")
        result = invoke("sql", "delete from requests", "--store", "s.duckdb")
        assert result.exit_code == 1 and result.stderr.count("\n") == 1
        result = invoke("sql", "select nope from requests", "--store", "s.duckdb")
        assert result.exit_code == 1 and "SQL:" in result.stderr

    def test_sql_without_store_fails_clearly(self):
        result = invoke("sql", "select 1", "--store", "missing.duckdb")
        assert result.exit_code == 1 and "no store" in result.stderr

    @pytest.mark.slow
    def test_export_parquet(self):
        import polars as pl

        invoke("ingest", str(write_capture(Path("cap.jsonl"))), "--store", "s.duckdb")
        assert invoke("export", "--parquet", "out", "--store", "s.duckdb").exit_code == 0
        turns = pl.read_parquet("out/turns.parquet")
        assert turns.height == 3 and turns["session"].n_unique() == 1
        assert {"requests.parquet", "bodies.parquet", "sessions.parquet",
                "session_events.parquet"} <= {p.name for p in Path("out").iterdir()}

    def test_export_parquet_writes_the_session_events(self):
        import polars as pl

        # the hand-built Claude Code session records a compact_boundary on its line 5, a
        # switch to claude-opus-4-5 on line 9, version 2.1.101 from line 11 and a
        # deferred_tools_delta attachment on line 12
        log = FIXTURES / "claude-code" / "recorded_events.jsonl"
        invoke("ingest", str(log), "--store", "s.duckdb")
        assert invoke("export", "--parquet", "out", "--store", "s.duckdb").exit_code == 0
        events = pl.read_parquet("out/session_events.parquet").sort("source_line")
        assert events.select("kind", "source_line").rows() == [
            ("compaction", 5), ("model-change", 9), ("client-upgrade", 11), ("tool-set", 12)]
        assert events["detail"].to_list()[2] == "2.1.92 -> 2.1.101"
        # each event names the first call after it, one of the exported requests
        requests = pl.read_parquet("out/requests.parquet")
        assert set(events["request_id"]) <= set(requests["id"])


def test_a_strict_rejection_says_nothing_was_stored(tmp_path):
    good = tmp_path / "good.jsonl"
    good.write_text(Path(FIXTURES / "raw" / "openai_chat_capture.jsonl").read_text())
    bad = tmp_path / "bad.jsonl"
    bad.write_text(good.read_text() + "{not json\n")
    store = str(tmp_path / "s.duckdb")
    assert runner.invoke(app, ["ingest", str(good), "--store", store]).exit_code == 0
    result = runner.invoke(app, ["ingest", str(bad), "--store", store, "--strict"])
    assert result.exit_code == 1
    assert "nothing stored" in result.stdout and "already there" not in result.stdout


def test_ingest_counts_the_sessions_report_counts_each_call_once(tmp_path):
    """The sample logs hold one set of calls twice (a Langfuse export and the gateway's
    database of the same calls): ingest's "all, each call once" row and its run line count
    the sessions the kept calls are in, as report does, not each copy's own session too."""
    from conftest import ROOT

    store = str(tmp_path / "s.duckdb")
    ingested = json.loads(invoke("ingest", str(ROOT / "sample_logs"), "--store", store,
                                 "--json").stdout)
    reported = json.loads(invoke("report", "--store", store, "--json").stdout)["summary"]
    assert ingested["totals"]["duplicates"] > 0  # the case: copies in another format
    assert ingested["totals"]["sessions"] == ingested["sessions"] == reported["sessions"]
    assert reported["sessions"] < sum(row["sessions"] for row in ingested["formats"].values())
    screen = invoke("ingest", str(ROOT / "sample_logs"), "--store", store).stdout
    assert f"; {reported['sessions']} session(s);" in screen
