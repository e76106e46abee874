"""Stores, names and temporary stores (issue 39; docs/security.md, "What is promised and
how it is tested"): a new store is made by one process and no loser deletes it; a store
file is opened as data only; a file name is a name (never URI or glob syntax, never a
crash); a temporary store does not outlive SIGTERM, nor a SIGKILL past the next run.

Races and signals are between processes, so those tests run real ``python -c`` processes
with a hook that holds them at the point to interleave (a file the test creates releases
them): the order is forced, never timed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import FIXTURES, ROOT
from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.ingest import NOT_UTF8
from prefixscope.store import Store, StoreError
from prefixscope.store.files import NewStore, owner_token, sweep_temporary

runner = CliRunner()
RAW_BODIES = FIXTURES / "raw" / "bodies.jsonl"  # 3 bare request bodies
CAPTURE = FIXTURES / "raw" / "openai_chat_capture.jsonl"  # another raw log
NEW_API_DB = ROOT / "sample_logs" / "new-api-logs.db"  # a gateway's SQLite log
SAMPLE = ROOT / "sample_logs" / "bifrost-mcp-keyorder.jsonl"  # needs a tokenizer
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def run(*args: str | Path) -> Any:
    result = runner.invoke(app, [str(a) for a in args], catch_exceptions=False)
    assert "Traceback" not in result.output + result.stderr, result.stderr
    return result


def one_error_line(result: Any, code: int = 1) -> str:
    lines = result.stderr.splitlines()
    assert result.exit_code == code, (result.exit_code, result.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def ingest_json(*args: str | Path) -> dict[str, Any]:
    result = run("ingest", *args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def ids(store: str | Path) -> set[str]:
    with Store.open(store, read_only=True) as st:
        return {r[0] for r in st.run("SELECT id FROM requests")}


def wait_for(condition: Any, process: subprocess.Popen[str] | None = None) -> None:
    """Until `condition()` holds (a process that ends first fails the test): an order
    forced by the hook, not a time measured."""
    for _ in range(6000):
        if condition():
            return
        if process is not None and process.poll() is not None:
            raise AssertionError(process.communicate())
        import time

        time.sleep(0.02)
    raise AssertionError("the condition never held")


def hooked(patch: str, argv: list[str], cwd: Path, env: dict[str, str] | None = None
           ) -> subprocess.Popen[str]:
    """`prefixscope ARGV` through `main()` in a new process, `patch` run first."""
    code = (f"import sys\n{patch}\nfrom prefixscope.cli.main import main\n"
            f"sys.argv = ['prefixscope', *{argv!r}]\nmain()\n")
    return subprocess.Popen([sys.executable, "-c", code], cwd=cwd, env=env or ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


# -- a new store: one winner, no loser deletes it ------------------------------------------

# Each process, its store built, waits at the placement until the test creates `go`.
HOLD_AT_PLACE = (
    "import os, time\n"
    "from prefixscope.store import files\n"
    "place = files.NewStore.place\n"
    "def held(self):\n"
    "    while not os.path.exists('go'):\n"
    "        time.sleep(0.01)\n"
    "    place(self)\n"
    "files.NewStore.place = held\n")


@pytest.mark.parametrize("trial", range(3))
def test_two_ingests_creating_one_store_have_one_winner_whose_store_is_whole(
        tmp_path: Path, trial: int) -> None:
    """Both build their store beside the name, then both place it: one links first, the
    other says so and stores nothing. The store holds exactly the winner's requests (its
    log ingested alone is the oracle); the loser deleted nothing (before: its clean-up
    removed the file the winner had filled, and "no store" followed)."""
    logs = [RAW_BODIES, CAPTURE]
    procs = [hooked(HOLD_AT_PLACE, ["ingest", str(log), "--store", "new.duckdb", "-q"],
                    tmp_path) for log in logs]
    try:
        wait_for(lambda: len(list(tmp_path.glob(".new.duckdb.*.building"))) == 2)
        (tmp_path / "go").touch()
        outcomes = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    codes = [p.returncode for p in procs]
    assert sorted(codes) == [0, 1], (codes, outcomes)
    winner, loser = (0, 1) if codes[0] == 0 else (1, 0)
    assert outcomes[loser][1] == (
        "error: new.duckdb was created by another process while this ingest ran; this run "
        "stored nothing (run it again to add its logs to that store)\n")
    assert ingest_json(logs[winner], "--store", "alone.duckdb")["ingested"] > 0
    assert ids(tmp_path / "new.duckdb") == ids(tmp_path / "alone.duckdb")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alone.duckdb", "go", "new.duckdb"]


def test_the_loser_of_a_placement_removes_its_build_and_never_the_store(
        tmp_path: Path) -> None:
    new = NewStore(tmp_path / "s.duckdb")
    Store.open(new.file).close()
    winner = b"the winner's store"
    (tmp_path / "s.duckdb").write_bytes(winner)
    with pytest.raises(StoreError, match="was created by another process"):
        new.place()
    assert (tmp_path / "s.duckdb").read_bytes() == winner
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.duckdb"]


def _build_with_a_log_left(new: NewStore) -> None:
    """A built store whose last write is still in DuckDB's write-ahead log, as a close
    that found no room for the checkpoint leaves it."""
    Store.open(new.file).close()
    con = duckdb.connect(str(new.file))
    con.execute("PRAGMA disable_checkpoint_on_shutdown")
    con.execute("INSERT INTO schema_version (version) VALUES (0)")
    con.close()
    assert Path(f"{new.file}.wal").exists()


def test_a_write_ahead_log_left_by_the_build_is_merged_before_the_store_is_placed(
        tmp_path: Path) -> None:
    new = NewStore(tmp_path / "s.duckdb")
    _build_with_a_log_left(new)
    new.place()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.duckdb"]
    with Store.open(tmp_path / "s.duckdb", read_only=True) as st:
        assert st.run("SELECT count(*) FROM schema_version WHERE version = 0") == [(1,)]


def test_a_log_that_cannot_be_merged_for_lack_of_room_is_the_documented_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    new = NewStore(tmp_path / "s.duckdb")
    _build_with_a_log_left(new)
    run_sql = Store.run

    def full(self: Store, query: str, params: Any = ()) -> Any:
        if query == "CHECKPOINT":
            raise duckdb.IOException(f'IO Error: Could not write file "{new.file}": No space '
                                     "left on device")
        return run_sql(self, query, params)

    monkeypatch.setattr(Store, "run", full)
    with pytest.raises(StoreError) as raised:
        new.place()
    assert re.fullmatch(
        rf"cannot write the store {re.escape(str(tmp_path / 's.duckdb'))}: no space left on "
        r"device on the disk mounted at .+, [\d,]+ bytes free; this run stored nothing "
        r"\(free some space, or give --store a file on another disk\)", str(raised.value))
    assert list(tmp_path.iterdir()) == []


def test_a_new_store_is_absent_until_it_is_whole(tmp_path: Path) -> None:
    """While the ingest runs, the name holds nothing (a reader is told "no store"), the
    build sits beside it under a hidden name; after, the name holds the store alone."""
    proc = hooked(HOLD_AT_PLACE, ["ingest", str(RAW_BODIES), "--store", "s.duckdb", "-q"],
                  tmp_path)
    try:
        wait_for(lambda: any(tmp_path.glob(".s.duckdb.*.building")), proc)
        assert not (tmp_path / "s.duckdb").exists()
        (tmp_path / "go").touch()
        assert proc.wait(timeout=300) == 0, proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["go", "s.duckdb"]
    assert len(ids(tmp_path / "s.duckdb")) == 3


def test_building_files_of_dead_processes_are_removed_and_live_ones_kept(
        tmp_path: Path) -> None:
    dead = tmp_path / ".s.duckdb.4194305-1-0badc0de.building"  # above Linux's PID_MAX_LIMIT
    live = tmp_path / f".s.duckdb.{owner_token()}-0badc0de.building"
    for leftover in (dead, Path(f"{dead}.wal"), live):
        leftover.write_bytes(b"x")
    ingest_json(RAW_BODIES, "--store", "s.duckdb")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, "s.duckdb"])


def test_a_memory_store_is_refused_not_reported_as_saved() -> None:
    result = run("ingest", RAW_BODIES, "--store", ":memory:")
    assert one_error_line(result, 2) == (
        "error: --store :memory: would keep nothing: name a store file, or give the logs to "
        "the command that reads them (`prefixscope report LOGS`)")
    assert list(Path().iterdir()) == []


@pytest.mark.parametrize("name", ["md:s.duckdb", ":memory:", "s?mode=ro.duckdb"])
def test_a_store_named_like_a_duckdb_uri_is_that_file(name: str) -> None:
    ingest_json(RAW_BODIES, "--store", "s.duckdb")
    Path("s.duckdb").rename(name)
    result = run("sql", "select count(*) as n from requests", "--store", name, "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == [{"n": 3}]


# -- a store is data only -----------------------------------------------------------------

SECRET = "TOPSECRET-0f1e2d"
STORE_COMMANDS = [("report", "--top", "1"), ("bucket",), ("segments",), ("calls",),
                  ("sql", "select count(*) from requests"), ("export", "--parquet", "out"),
                  ("ingest", str(RAW_BODIES))]


def _requests_reads_a_file(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("ALTER TABLE requests RENAME TO kept")
    con.execute("CREATE VIEW requests AS SELECT k.* REPLACE (t.content AS model) "
                "FROM kept k, read_text('secret.txt') t")


def _turns_reads_a_file(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("CREATE OR REPLACE VIEW turns AS SELECT r.* EXCLUDE (session), "
                "t.content AS session, 0 AS turn, NULL AS prev_id, 'x' AS link, "
                "false AS compaction FROM requests r, read_text('secret.txt') t")


HOSTILE = {
    "requests is a view reading a file": (
        _requests_reads_a_file, "holds a view 'requests' where prefixscope writes a table"),
    "turns reads a file": (
        _turns_reads_a_file, "defines its view 'turns' otherwise than prefixscope does"),
    **{f"macro {name}": (
        lambda con, name=name: con.execute(f"CREATE MACRO {name}(x) AS 42"),
        f"defines a macro {name!r} (a store holds data, nothing that runs)")
       for name in ("sum", "lower", "md5", "hash")},
    "table macro shadowing the catalog": (
        lambda con: con.execute("CREATE MACRO duckdb_tables() AS TABLE SELECT 1 AS x"),
        "defines a macro 'duckdb_tables'"),
    "an extra view": (
        lambda con: con.execute("CREATE VIEW leak AS SELECT * FROM read_text('secret.txt')"),
        "holds a view 'leak' prefixscope does not write"),
    "a column default": (
        lambda con: con.execute("ALTER TABLE sessions ALTER COLUMN link SET DEFAULT "
                                "'x' || 'y'"),
        "defines its table 'sessions' otherwise than prefixscope does"),
}


class TestAStoreIsDataOnly:
    @pytest.mark.parametrize("attack", list(HOSTILE))
    @pytest.mark.parametrize("command", STORE_COMMANDS, ids=lambda c: c[0])
    def test_a_store_defining_views_or_macros_is_refused_by_every_command(
            self, attack: str, command: tuple[str, ...]) -> None:
        Path("secret.txt").write_text(SECRET + "\n")
        ingest_json(RAW_BODIES, "--store", "h.duckdb")
        change, how = HOSTILE[attack]
        con = duckdb.connect("h.duckdb")
        change(con)
        con.close()
        before = Path("h.duckdb").read_bytes()
        result = run(*command, "--store", "h.duckdb")
        line = one_error_line(result)
        assert line.startswith(f"error: h.duckdb is not a store prefixscope wrote: it {how}")
        assert line.endswith("; not opened")
        assert SECRET not in result.output + result.stderr
        assert Path("h.duckdb").read_bytes() == before
        assert not Path("out").exists()

    @pytest.mark.parametrize("read_only", [True, False])
    def test_a_store_connection_reaches_no_file_and_cannot_be_reopened(
            self, read_only: bool) -> None:
        Path("secret.txt").write_text(SECRET)
        ingest_json(RAW_BODIES, "--store", "s.duckdb")
        with Store.open("s.duckdb", read_only=read_only) as st:
            with pytest.raises(duckdb.PermissionException,
                               match="file system operations are disabled"):
                st.run("SELECT content FROM read_text('secret.txt')")
            with pytest.raises(duckdb.Error, match="the configuration has been locked"):
                st.run("SET enable_external_access = true")
            assert st.run("SELECT count(*) FROM requests") == [(3,)]

    def test_export_writes_into_its_directory_and_nowhere_else(self) -> None:
        ingest_json(RAW_BODIES, "--store", "s.duckdb")
        with Store.open("s.duckdb", read_only=True, writes_into=Path("out")) as st:
            Path("out").mkdir()
            st.run("COPY requests TO 'out/r.parquet' (FORMAT PARQUET)")
            with pytest.raises(duckdb.PermissionException):
                st.run("COPY requests TO 'elsewhere.parquet' (FORMAT PARQUET)")
        assert sorted(p.name for p in Path().iterdir()) == ["out", "s.duckdb"]

    def test_a_store_of_a_newer_prefixscope_is_still_told_apart(self) -> None:
        ingest_json(RAW_BODIES, "--store", "s.duckdb")
        con = duckdb.connect("s.duckdb")
        con.execute("INSERT INTO schema_version (version) VALUES (99)")
        con.execute("CREATE TABLE from_the_future (x INTEGER)")
        con.close()
        line = one_error_line(run("sql", "select 1", "--store", "s.duckdb"))
        assert re.fullmatch(r"error: s\.duckdb has schema v99; this prefixscope knows v\d+: "
                            r"upgrade prefixscope", line), line

    def test_the_latest_catalog_is_no_earlier_versions_so_a_store_is_compared_with_it_first(
            self) -> None:
        """`catalog.version_of` takes a store whose catalog is `catalog.latest` to be at the
        latest version without reading the others' (`catalog.expected`): right only while
        each migration changes the catalog, as the v7 store's refusal also needs."""
        from prefixscope.store import catalog

        versions = catalog.expected()
        assert len(set(versions)) == len(versions) == len(catalog.MIGRATIONS) + 1
        assert catalog.latest() == versions[-1]
        assert [catalog.version_of(found) for found in versions] == list(range(len(versions)))

    def test_a_temporary_store_created_here_is_migrated_without_reading_its_catalog(
            self, monkeypatch: pytest.MonkeyPatch) -> None:
        """issue 37, start-up: the writable open of a temporary store that is not there yet
        (`made_here`) skips reading the new file's catalog, and makes the same store as an
        open that reads it (the oracle: the catalog and schema versions of a plain open)."""
        from prefixscope.store import catalog

        reads: list[object] = []
        real_read = catalog.read
        monkeypatch.setattr(catalog, "read", lambda *a, **k: reads.append(a) or real_read(*a, **k))
        Path("plain").mkdir()
        Path("here").mkdir()
        made: dict[str, tuple[object, ...]] = {}
        for folder, here in (("plain", False), ("here", True)):
            reads.clear()
            with Store.open(Path(folder, "store.duckdb"), made_here=here) as st:
                made[folder] = (catalog.read(st.con), st.run(
                    "SELECT list(version ORDER BY version) FROM schema_version")[0][0])
            assert len(reads) == (1 if here else 2)  # the test's own read above: 1
        assert made["here"] == made["plain"]
        assert made["here"][0] == catalog.expected()[-1]

    def test_a_file_found_where_a_temporary_store_is_made_is_checked_as_any_other(
            self) -> None:
        ingest_json(RAW_BODIES, "--store", "h.duckdb")
        con = duckdb.connect("h.duckdb")
        con.execute("CREATE MACRO lower(x) AS 42")
        con.close()
        with pytest.raises(StoreError, match="defines a macro 'lower'"):
            Store.open("h.duckdb", made_here=True)


# -- names are names ------------------------------------------------------------------------


class TestNamesAreNames:
    @pytest.mark.parametrize("name", ["gw?.db", "%2e%2e%2fX?.db", "a#b.db", "c%3F.db"])
    def test_a_sqlite_log_named_with_uri_syntax_is_read_and_nothing_is_created(
            self, tmp_path: Path, name: str) -> None:
        alone = ingest_json(NEW_API_DB, "--store", "alone.duckdb")["ingested"]
        logs = tmp_path / "a" / "b"
        logs.mkdir(parents=True)
        (logs / name).write_bytes(NEW_API_DB.read_bytes())
        before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
        result = ingest_json(logs / name, "--store", "s.duckdb")
        assert (result["ingested"], result["skipped"]) == (alone, 0)
        after = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
        assert after == sorted([*before, "s.duckdb"])

    def test_a_file_name_that_is_not_utf8_is_one_counted_skip_and_the_rest_is_read(
            self, tmp_path: Path) -> None:
        folder = tmp_path / "logs"
        folder.mkdir()
        (folder / "good.jsonl").write_bytes(RAW_BODIES.read_bytes())
        bad = os.fsdecode(os.fsencode(str(folder)) + b"/bad\xff.jsonl")
        Path(bad).write_bytes(CAPTURE.read_bytes())
        result = ingest_json(folder, "--store", "s.duckdb")
        assert (result["ingested"], result["skipped"]) == (3, 1)
        assert result["errors"] == [{"file": f"{folder}/bad\\xff.jsonl", "line": None,
                                     "reason": NOT_UTF8}]

    def test_a_file_named_like_a_glob_is_that_file_and_a_glob_still_expands(self) -> None:
        Path("[abc].jsonl").write_bytes(RAW_BODIES.read_bytes())
        Path("a.jsonl").write_bytes(CAPTURE.read_bytes())  # what the glob would match
        ingest_json(RAW_BODIES, "--store", "bodies.duckdb")
        ingest_json(CAPTURE, "--store", "capture.duckdb")
        ingest_json("[abc].jsonl", "--store", "s.duckdb")
        assert ids("s.duckdb") == ids("bodies.duckdb")
        ingest_json("[a].jsonl", "--store", "g.duckdb")  # no such file: a pattern
        assert ids("g.duckdb") == ids("capture.duckdb")


# -- temporary stores -------------------------------------------------------------------------

# The command blocks inside its ingest, after announcing it in `started`.
BLOCK_IN_INGEST = (
    "import time, pathlib, faulthandler, signal\n"
    "faulthandler.register(signal.SIGUSR1, all_threads=True)\n"
    "import prefixscope.store.load as load\n"
    "def blocked(*a, **k):\n"
    "    pathlib.Path('started').touch()\n"
    "    time.sleep(3600)\n"
    "load._ingest_one = blocked\n")


def _temporary(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("prefixscope-"))


def _communicate_or_stacks(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """`proc.communicate()`; a process still running after 120 s fails the test with its
    threads' stacks (the hook's `faulthandler` on SIGUSR1): a CI run once saw no exit
    within 300 s of SIGTERM and no line on stderr, never reproduced, so a repeat says where."""
    try:
        return proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        import time

        time.sleep(2)
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"no exit 120 s after SIGTERM; its stacks:\n{err}") from None


class TestTemporaryStores:
    def test_sigterm_removes_the_temporary_store_and_exits_143(self, tmp_path: Path) -> None:
        temp = tmp_path / "temp"
        temp.mkdir()
        proc = hooked(BLOCK_IN_INGEST, ["report", str(RAW_BODIES)], tmp_path,
                      {**ENV, "TMPDIR": str(temp)})
        try:
            wait_for(lambda: (tmp_path / "started").exists(), proc)
            assert len(_temporary(temp)) == 1
            proc.send_signal(signal.SIGTERM)
            out, err = _communicate_or_stacks(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 143, err
        assert err == "interrupted: nothing written\n"
        assert _temporary(temp) == []

    @pytest.mark.parametrize(("sent", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
    def test_a_signal_inside_a_duckdb_query_still_exits_as_that_signal(
            self, tmp_path: Path, sent: signal.Signals, code: int) -> None:
        # DuckDB turns the KeyboardInterrupt a signal raises inside a query into its own
        # RuntimeError("Query interrupted"); the hook raises what it raises (seen when a
        # report was killed 5 s in, and on Ctrl-C mid-ingest: "internal error", exit 1)
        temp = tmp_path / "temp"
        temp.mkdir()
        hook = BLOCK_IN_INGEST.replace(
            "    time.sleep(3600)\n",
            "    try:\n"
            "        time.sleep(3600)\n"
            "    except KeyboardInterrupt:\n"
            "        raise RuntimeError('Query interrupted') from None\n")
        assert hook != BLOCK_IN_INGEST
        proc = hooked(hook, ["report", str(RAW_BODIES)], tmp_path, {**ENV, "TMPDIR": str(temp)})
        try:
            wait_for(lambda: (tmp_path / "started").exists(), proc)
            proc.send_signal(sent)
            out, err = _communicate_or_stacks(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert (proc.returncode, err) == (code, "interrupted: nothing written\n")
        assert _temporary(temp) == []

    def test_ctrl_c_ignored_when_started_stays_ignored(self, tmp_path: Path) -> None:
        # a command started with SIGINT ignored (`nohup`, a script's `cmd &`) runs on past
        # a Ctrl-C; only the SIGTERM after it stops it (had SIGINT stopped it: exit 130)
        import time

        temp = tmp_path / "temp"
        temp.mkdir()
        hook = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n" + BLOCK_IN_INGEST
        proc = hooked(hook, ["report", str(RAW_BODIES)], tmp_path, {**ENV, "TMPDIR": str(temp)})
        try:
            wait_for(lambda: (tmp_path / "started").exists(), proc)
            proc.send_signal(signal.SIGINT)
            time.sleep(1)
            proc.send_signal(signal.SIGTERM)
            out, err = _communicate_or_stacks(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert (proc.returncode, err) == (143, "interrupted: nothing written\n")
        assert _temporary(temp) == []

    def test_after_sigkill_the_next_run_removes_the_dead_owners_folder_only(
            self, tmp_path: Path) -> None:
        temp = tmp_path / "temp"
        temp.mkdir()
        env = {**ENV, "TMPDIR": str(temp)}
        proc = hooked(BLOCK_IN_INGEST, ["report", str(RAW_BODIES)], tmp_path, env)
        try:
            wait_for(lambda: (tmp_path / "started").exists(), proc)
        finally:
            proc.kill()
            proc.communicate(timeout=300)
        (killed,) = _temporary(temp)
        assert (temp / killed / "owner.pid").read_text() == f"{proc.pid}-" + (
            (temp / killed / "owner.pid").read_text().split("-", 1)[1])
        (temp / "prefixscope-alive").mkdir()
        (temp / "prefixscope-alive" / "owner.pid").write_text(owner_token() + "\n")
        (temp / "prefixscope-unowned").mkdir()
        after = subprocess.run([sys.executable, "-m", "prefixscope", "report", str(RAW_BODIES),
                                "-q"], cwd=tmp_path, env=env, capture_output=True, text=True,
                               timeout=300)
        assert after.returncode == 0, after.stderr
        assert _temporary(temp) == ["prefixscope-alive", "prefixscope-unowned"]

    def test_a_pid_reused_by_a_later_process_counts_as_dead(self, tmp_path: Path) -> None:
        me = owner_token()
        pid, started = me.split("-")
        (tmp_path / "prefixscope-reused").mkdir()
        (tmp_path / "prefixscope-reused" / "owner.pid").write_text(
            f"{pid}-{int(started) + 1}\n")
        (tmp_path / "prefixscope-mine").mkdir()
        (tmp_path / "prefixscope-mine" / "owner.pid").write_text(me + "\n")
        assert sweep_temporary(tmp_path) == [tmp_path / "prefixscope-reused"]
        assert _temporary(tmp_path) == ["prefixscope-mine"]


# -- one line, not DuckDB's or Python's -------------------------------------------------------


def test_a_cache_dir_naming_no_home_is_one_line(tmp_path: Path) -> None:
    # a process of its own: a worker that already loaded the tokenizer never reads the
    # cache directory again (CI ran this test after such a test: exit 0)
    env = {**os.environ, "PREFIXSCOPE_CACHE_DIR": "~no-such-user-prefixscope/cache"}
    done = subprocess.run([sys.executable, "-m", "prefixscope.cli.main", "report", str(SAMPLE),
                           "--top", "1"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300, check=False)
    lines = done.stderr.splitlines()
    assert done.returncode == 1 and len(lines) == 1, (done.returncode, done.stderr)
    line = lines[0]
    assert line == (
        "error: the cache directory cannot be found: PREFIXSCOPE_CACHE_DIR="
        "'~no-such-user-prefixscope/cache': could not determine home directory (set "
        "PREFIXSCOPE_CACHE_DIR to a folder, e.g. PREFIXSCOPE_CACHE_DIR=/tmp/prefixscope-cache)")


def test_a_store_the_disk_has_no_room_to_create_is_the_documented_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """DuckDB's failure as a full disk gives it when creating the file (the text of a run
    on an 8 KB tmpfs), raised by the connect."""
    import prefixscope.store.store as store_module

    def full(path: str, **kwargs: Any) -> Any:
        raise duckdb.IOException(f'IO Error: Could not write file "{path}": No space left '
                                 "on device")

    monkeypatch.setattr(store_module.duckdb, "connect", full)
    line = one_error_line(run("ingest", RAW_BODIES, "--store", "s.duckdb"))
    store = re.escape(str(Path("s.duckdb").absolute()))
    assert re.fullmatch(rf"error: cannot write the store {store}: no space left on device on "
                        r"the disk mounted at .+, [\d,]+ bytes free; this run stored nothing "
                        r"\(free some space, or give --store a file on another disk\)",
                        line), line
    assert list(Path().iterdir()) == []
