"""An ingest commits batch by batch (`store.runs`), yet a run that fails leaves the store as
it was: a ``--strict`` rejection, Ctrl-C, a full disk (undone by the run), a process killed
outright (removed by the next open, before anything reads); a run again after a kill stores
what a clean run stores.

The oracle is every table of the file as plain DuckDB reads it (`contents`), compared with
the same file before the run, or with a store built by runs that did not fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import duckdb
import pytest
from conftest import FIXTURES, ROOT, store_at_schema

from prefixscope.store import Store
from prefixscope.store.load import ingest_paths
from prefixscope.store.schema import SCHEMA_VERSION

CC = FIXTURES / "claude-code"
ACROSS = CC / "ccusage" / "across-files" / "projects"  # msg_123: older.jsonl < newer.jsonl
CODEX = FIXTURES / "codex" / "handmade"
RAW = FIXTURES / "raw" / "bodies.jsonl"
# the first run: calls with session events and parts the second run's logs share
FIRST = (CC / "streamed_session.jsonl", CODEX / "sessions", ACROSS / "older.jsonl")
# the second: session events, a codex folder holding the first run's rollout again, the
# fuller copy of a call the first run stored (it replaces that row), raw bodies
SECOND = (CC / "recorded_events.jsonl", CODEX, ACROSS / "newer.jsonl", RAW)


def contents(path: Path | str, *, timeless: bool = False) -> dict[str, list[str]]:
    """Every table's rows, sorted, read by plain DuckDB (no prefixscope code); `timeless`:
    without the columns that hold when a row was written."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        out = {}
        for (table,) in con.execute("SELECT table_name FROM duckdb_tables() "
                                    "ORDER BY 1").fetchall():
            columns = [c for (c,) in con.execute(
                "SELECT column_name FROM duckdb_columns() WHERE table_name = ?",
                [table]).fetchall()
                if not (timeless and c in ("ingested_at", "applied_at"))]
            query = f"SELECT {', '.join(columns)} FROM {table}"
            out[table] = sorted(repr(row) for row in con.execute(query).fetchall())
        return out
    finally:
        con.close()


def ingest(store: Path, *paths: Path, **options: object):
    with Store.open(store) as st:
        return ingest_paths([str(p) for p in paths], st, **options)


@pytest.fixture
def first(tmp_path: Path) -> Path:
    """A store holding the first run, and its contents."""
    store = tmp_path / "s.duckdb"
    result = ingest(store, *FIRST)
    assert result.ingested > 0 and result.skipped == 0
    return store


def test_a_strict_rejection_after_committed_batches_leaves_every_table_as_it_was(
        first: Path, tmp_path: Path) -> None:
    before = contents(first)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not a log\n")
    seen: list[tuple[int, int]] = []
    with Store.open(first) as st:
        def progress(*_: object) -> None:  # what the batches committed so far listed
            seen.append(st.run("SELECT (SELECT count(*) FROM ingest_runs), "
                               "(SELECT count(*) FROM ingest_added)")[0])
        result = ingest_paths([str(p) for p in (*SECOND, bad)], st, strict=True,
                              batch_size=1, progress=progress)
    assert result.failed and result.ingested == 0
    assert max(n for _, n in seen) > 20 and {r for r, _ in seen if _} == {1}
    assert contents(first) == before


def test_ctrl_c_after_committed_batches_leaves_every_table_as_it_was(first: Path) -> None:
    before = contents(first)
    calls = []

    def progress(*_: object) -> None:
        calls.append(1)
        if len(calls) == 6:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt), Store.open(first) as st:
        ingest_paths([str(p) for p in SECOND], st, batch_size=1, progress=progress)
    assert contents(first) == before


def test_a_second_run_stores_what_one_run_of_every_log_stores(first: Path,
                                                              tmp_path: Path) -> None:
    """Batches committed one by one, the first run's call replaced by its fuller copy at
    the run's end: the same rows as one ingest of both runs' logs into a new store."""
    assert ingest(first, *SECOND, batch_size=1).ingested > 0
    one = tmp_path / "one.duckdb"
    ingest(one, *FIRST, *SECOND)
    assert contents(first, timeless=True) == contents(one, timeless=True)
    with Store.open(first, read_only=True) as st:  # the fuller copy replaced the first's
        assert st.run("SELECT prompt_tokens FROM requests WHERE native_id = 'msg_123'") == [
            (200,)]
        assert st.run("SELECT count(*) FROM ingest_runs")[0][0] == 0


# -- a process that dies: nothing of its run is read, a rerun stores what a clean run does


def _killed_after_batches(store: Path, logs: tuple[Path, ...], batches: int) -> None:
    """Ingest `logs` into `store` one request a batch in another process that SIGKILLs
    itself after `batches` committed batches (no handler, no undo, no close)."""
    code = (
        "import os, signal, sys\n"
        "from prefixscope.store import Store\n"
        "from prefixscope.store.load import ingest_paths\n"
        "done = []\n"
        "def progress(*a):\n"
        "    done.append(1)\n"
        f"    if len(done) == {batches}:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "st = Store.open(sys.argv[1])\n"
        "ingest_paths(sys.argv[2:], st, batch_size=1, progress=progress)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(store), *map(str, logs)],
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120,
                          capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr


def _left(store: Path) -> tuple[int, int]:
    """(runs recorded as under way, rows listed) in the file, read without prefixscope."""
    con = duckdb.connect(str(store), read_only=True)
    try:
        return con.execute("SELECT (SELECT count(*) FROM ingest_runs), "
                           "(SELECT count(*) FROM ingest_added)").fetchall()[0]
    finally:
        con.close()


def test_a_killed_run_is_not_read_and_a_rerun_stores_what_a_clean_run_stores(
        first: Path, tmp_path: Path) -> None:
    before = contents(first)
    _killed_after_batches(first, SECOND, 8)
    runs, listed = _left(first)
    assert runs == 1 and listed > 8  # batches of the dead run are in the file
    with Store.open(first, read_only=True) as st:  # a reader opens it first
        assert st.run("SELECT count(*) FROM ingest_runs")[0][0] == 0
    assert contents(first) == before
    ingest(first, *SECOND)
    clean = tmp_path / "clean.duckdb"
    ingest(clean, *FIRST)
    ingest(clean, *SECOND)
    assert contents(first, timeless=True) == contents(clean, timeless=True)


def test_a_killed_run_into_an_empty_store_leaves_it_empty(tmp_path: Path) -> None:
    """A run that began on a store holding nothing lists nothing: what the file holds is
    its, and the next (writable) open removes all of it."""
    store = tmp_path / "s.duckdb"
    Store.open(store).close()
    before = contents(store)
    _killed_after_batches(store, FIRST, 4)
    assert _left(store) == (1, 0)
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT count(*) FROM requests").fetchall()[0][0] >= 2
    con.close()
    Store.open(store).close()
    assert contents(store) == before


# -- a full disk ---------------------------------------------------------------------------


def _file_size_limit(limit: int):
    def apply() -> None:
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_a_disk_filling_up_mid_run_leaves_every_table_as_it_was(first: Path,
                                                                tmp_path: Path) -> None:
    """The store's files cannot grow 1 MB past their size (RLIMIT_FSIZE: EFBIG, as a full
    disk): the run fails on one line after committing batches; the store is as before once
    opened again (the run's undo, or the open's, if the undo found no room either)."""
    from test_store_safety import write_big_log

    big = tmp_path / "big.jsonl"
    write_big_log(big)  # ~6 MB of distinct bodies: batches of 2,000 past the limit
    before = contents(first)
    proc = subprocess.run(
        [sys.executable, "-m", "prefixscope", "ingest", str(big), "--store", str(first), "-q"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        preexec_fn=_file_size_limit(first.stat().st_size + (1 << 20)),
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    lines = proc.stderr.splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: cannot write the store {first}: file too large"), lines
    with Store.open(first, read_only=True):
        pass
    assert contents(first) == before


# -- the schema ----------------------------------------------------------------------------


def test_a_v7_store_migrates_to_the_run_tables_with_its_rows_unchanged(tmp_path: Path
                                                                      ) -> None:
    path = tmp_path / "v7.duckdb"
    con = store_at_schema(path, 7)
    con.execute("INSERT INTO requests (id, source_format, source_file, endpoint, has_body, "
                "body_truncated, ingested_at) VALUES ('old', 'raw', 'f.jsonl', 'openai-chat', "
                "false, false, ?)", [datetime(2026, 1, 1)])
    con.close()
    before = contents(path)
    with pytest.raises(Exception, match="has schema v7; open it once without read-only"):
        Store.open(path, read_only=True)
    with Store.open(path) as st:
        assert st.run("SELECT max(version) FROM schema_version")[0][0] == SCHEMA_VERSION == 8
    after = contents(path)
    assert after.pop("ingest_runs") == after.pop("ingest_added") == []
    assert {t: rows for t, rows in after.items() if t != "schema_version"} == {
        t: rows for t, rows in before.items() if t != "schema_version"}
    # and it takes a run as a new store does
    assert ingest(path, RAW).ingested == 3
    assert json.loads(json.dumps(_left(path))) == [0, 0]


def test_a_reader_that_cannot_remove_a_dead_run_says_so_and_reads_nothing(tmp_path: Path
                                                                          ) -> None:
    """The open for writing that removes a dead run fails (another process reads the
    file): the reader is refused with one line, the dead run still in the file."""
    from prefixscope.store import StoreError

    store = tmp_path / "s.duckdb"
    Store.open(store).close()
    _killed_after_batches(store, FIRST, 4)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, duckdb\n"
         "con = duckdb.connect(sys.argv[1], read_only=True)\n"
         "print('ready', flush=True)\nsys.stdin.read()", str(store)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "ready\n"
        with pytest.raises(StoreError) as refused:
            Store.open(store, read_only=True)
    finally:
        holder.communicate("", timeout=60)
    message = str(refused.value)
    assert message.startswith(f"{store} holds an ingest that did not finish (killed?), which "
                              "an open for writing removes, and that failed: "), message
    assert "\n" not in message
    assert _left(store) == (1, 0)
