"""The requests table's `session` column (schema v7): the session threading assigns, read
by `prefixscope sql` from `requests` as the library's request frame shows it.

Oracles: captures written by hand with their session ids in a header (two sessions of
known sizes), the `sessions` table the threading writes, and a store built at schema v6 by
hand whose one request's session is known.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from conftest import store_at_schema
from report_scenarios import write_session
from typer.testing import CliRunner

import prefixscope as ps
from prefixscope.cli.main import app
from prefixscope.store import SCHEMA_VERSION, Store

runner = CliRunner()


def sql(query: str, *where: str) -> Any:
    result = runner.invoke(app, ["sql", query, *where, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def captures(tmp_path: Path) -> list[Path]:
    """Session s-1: 3 calls; s-2: 2 calls (ids in the x-session-id header)."""
    return [write_session(tmp_path / "one.jsonl", turns=3, session="s-1"),
            write_session(tmp_path / "two.jsonl", turns=2, session="s-2", extra=" (two)")]


def test_sql_reads_each_requests_session_from_the_requests_table(tmp_path: Path) -> None:
    store = str(tmp_path / "s.duckdb")
    files = [str(p) for p in captures(tmp_path)]
    assert runner.invoke(app, ["ingest", *files, "--store", store]).exit_code == 0
    assert sql("select session, count(*) n from requests group by 1 order by 1",
               "--store", store) == [{"session": "s-1", "n": 3}, {"session": "s-2", "n": 2}]
    # the same session as the threading's own table and as the library's frame, per request
    assert sql("select count(*) n from requests r join sessions s on s.request_id = r.id "
               "where r.session is distinct from s.session", "--store", store) == [{"n": 0}]
    rows = sql("select id, session from requests order by id", "--store", store)
    with ps.open(store) as st:
        frame = dict(st.requests().select("id", "session").rows())
    assert {r["id"]: r["session"] for r in rows} == frame
    # `turns` keeps one `session` column, the threading's (`sql --json` would name a
    # second one `session_1`)
    columns = list(sql("select * from turns limit 1", "--store", store)[0])
    assert "session" in columns and "session_1" not in columns


def test_a_later_ingest_threads_its_requests_and_fills_theirs(tmp_path: Path) -> None:
    store = str(tmp_path / "s.duckdb")
    one, two = captures(tmp_path)
    assert runner.invoke(app, ["ingest", str(one), "--store", store]).exit_code == 0
    assert sql("select session, count(*) n from requests group by 1", "--store", store) == [
        {"session": "s-1", "n": 3}]
    assert runner.invoke(app, ["ingest", str(two), "--store", store]).exit_code == 0
    assert sql("select session, count(*) n from requests group by 1 order by 1",
               "--store", store) == [{"session": "s-1", "n": 3}, {"session": "s-2", "n": 2}]


def test_sql_over_logs_has_the_column_too(tmp_path: Path) -> None:
    files = [str(p) for p in captures(tmp_path)]
    assert sql("select count(distinct session) n, count(*) filter (where session is null) "
               "unthreaded from requests", *files) == [{"n": 2, "unthreaded": 0}]


def test_a_v6_store_gets_the_column_filled_on_its_first_writable_open(tmp_path: Path
                                                                       ) -> None:
    path = tmp_path / "v6.duckdb"
    con = store_at_schema(path, 6)
    for rid in ("old", "loose"):
        con.execute("INSERT INTO requests (id, source_format, source_file, endpoint, has_body, "
                    "body_truncated, ingested_at) VALUES (?, 'raw', 'f.jsonl', 'openai-chat', "
                    "false, false, ?)", [rid, datetime(2026, 1, 1)])
    con.execute("INSERT INTO sessions VALUES ('old', 'sess-9', 0, NULL, 'start', false)")
    con.close()
    with Store.open(path) as store:
        assert store.run("SELECT max(version) FROM schema_version")[0][0] == SCHEMA_VERSION
        assert SCHEMA_VERSION >= 7  # the session column's migration ran
    assert sql("select id, session from requests order by id", "--store", str(path)) == [
        {"id": "loose", "session": None}, {"id": "old", "session": "sess-9"}]
