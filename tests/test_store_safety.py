"""The store survives what happens to files and processes: an ingest killed mid-file,
a damaged store file, a second process on the same store (docs/security.md; a foreign
DuckDB file, a SQLite file or text as --store: tests/test_bad_input.py).

SIGKILL and file locks are about processes, so those runs are real `python -m prefixscope`
processes; damaged stores go through `main()` in-process (its last-line handler is what
turns DuckDB's read failures into one line).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT

from prefixscope.cli.main import main
from prefixscope.store import Store

# not in the fast loop (`pytest -m "not slow"`): processes killed mid-ingest, stores damaged on disk
pytestmark = pytest.mark.slow

SMALL = FIXTURES / "raw" / "bodies.jsonl"  # 3 request bodies, ingested (committed) first
BIG_LINES = 10_000  # ~6 MB of raw-capture bodies: a few seconds of ingest


def write_big_log(path: Path) -> None:
    """Distinct request bodies, one a line (raw captures), ~640 bytes each."""
    with path.open("w") as fh:
        for i in range(BIG_LINES):
            body = {"model": "gpt-4o", "messages": [
                {"role": "system", "content": "You are a log writer. " + "x" * 300},
                {"role": "user", "content": f"session {i // 10} turn {i % 10}: " + "w " * 80}]}
            fh.write(json.dumps(body) + "\n")


def cli(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "prefixscope", *map(str, args)]


def run_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(cli(*args), capture_output=True, text=True, timeout=120,
                            cwd=os.getcwd(), env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "Traceback" not in result.stderr, result.stderr
    return result


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.splitlines()
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def ids(path: str) -> list[str]:
    with Store.open(path, read_only=True) as store:
        return [r[0] for r in store.run("SELECT id FROM requests ORDER BY id")]


def kill_mid_read(proc: subprocess.Popen[bytes], log: Path, limit: float = 60.0) -> int:
    """SIGKILL `proc` once it has read a third of `log` (its offset in /proc/PID/fdinfo);
    returns that offset. The store's transaction is open while a log is read (batches of
    requests already inserted, uncommitted). Without /proc: a second after the start."""
    if not Path(f"/proc/{proc.pid}/fdinfo").is_dir():
        time.sleep(1.0)
        proc.kill()
        return -1
    target, size = str(log.resolve()), log.stat().st_size
    deadline = time.monotonic() + limit
    while True:
        assert proc.poll() is None, "the ingest ended before it could be killed"
        assert time.monotonic() < deadline, "the ingest never read a third of its log"
        for fd in Path(f"/proc/{proc.pid}/fd").iterdir():
            try:
                if os.readlink(fd) != target:
                    continue
                pos = int(Path(f"/proc/{proc.pid}/fdinfo/{fd.name}").read_text().split()[1])
            except (OSError, ValueError, IndexError):  # closed while looking
                continue
            if pos >= size // 3:
                proc.kill()
                return pos
        time.sleep(0.002)


def test_an_ingest_killed_mid_file_leaves_the_store_as_it_was_and_a_rerun_completes_it():
    """SIGKILL in the middle of one ingest transaction (a third into the log): the store
    opens cleanly with only what was committed before it; re-running the same ingest ends
    with exactly the rows of one clean ingest (same count, same ids, no duplicate)."""
    big = Path("big.jsonl")
    write_big_log(big)
    assert run_cli("ingest", SMALL, "--store", "s.duckdb", "--json").returncode == 0
    committed = ids("s.duckdb")
    assert len(committed) == 3

    proc = subprocess.Popen(cli("ingest", big, "--store", "s.duckdb", "-qq"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        at = kill_mid_read(proc, big)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -9
    assert at < big.stat().st_size, "killed after reading the whole log"

    after_crash = run_cli("sql", "select count(*) n, count(distinct id) d from requests",
                          "--store", "s.duckdb", "--json")
    assert after_crash.returncode == 0, after_crash.stderr
    assert ids("s.duckdb") == committed  # nothing of the killed run, nothing lost

    rerun = run_cli("ingest", big, "--store", "s.duckdb", "--json")
    assert rerun.returncode == 0, rerun.stderr
    assert json.loads(rerun.stdout)["ingested"] == BIG_LINES

    assert run_cli("ingest", SMALL, big, "--store", "clean.duckdb", "--json").returncode == 0
    recovered, clean = ids("s.duckdb"), ids("clean.duckdb")
    assert len(recovered) == len(set(recovered)) == BIG_LINES + 3
    assert recovered == clean
    with Store.open("s.duckdb", read_only=True) as store:
        # no half-written record: every request has its body and its session row
        assert store.run("SELECT count(*) FROM requests r LEFT JOIN bodies b "
                         "ON b.hash = r.body_hash WHERE b.hash IS NULL")[0][0] == 0
        assert store.run("SELECT count(*) FROM requests WHERE id NOT IN "
                         "(SELECT request_id FROM sessions)")[0][0] == 0


def test_a_second_process_on_a_store_in_use_is_told_so_on_one_line():
    """Two processes on one store: while one holds it open for writing (an ingest), a
    second ingest or a read says the store is busy, naming the holder, and writes nothing."""
    assert run_cli("ingest", SMALL, "--store", "s.duckdb", "-qq").returncode == 0
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom prefixscope.store import Store\n"
         "s = Store.open('s.duckdb'); print('ready', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        lines = [one_error_line(run_cli(*command, "--store", "s.duckdb"))
                 for command in (("ingest", FIXTURES / "newapi" / "logs.csv"),
                                 ("sql", "select 1"))]
    finally:
        holder.communicate("", timeout=30)
    for line in lines:
        assert line.startswith("error: store s.duckdb is in use by another process ("), line
        assert line.endswith(f", PID {holder.pid}); retry when it is done"), line
    assert len(ids("s.duckdb")) == 3


@pytest.fixture(scope="module")
def good_store(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The bytes of a valid store holding sample_logs/ (several 256 KiB blocks)."""
    where = tmp_path_factory.mktemp("good")
    result = subprocess.run(cli("ingest", ROOT / "sample_logs", "--store", "s.duckdb", "-qq"),
                            cwd=where, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    data = (where / "s.duckdb").read_bytes()
    assert len(data) > 4 * 262_144
    return data


COMMANDS = [("ingest", str(SMALL)), ("sql", "select count(*) from requests"),
            ("render", "abc"), ("bucket",), ("diff", "--all"), ("segments",)]


def main_in_process(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                    *args: str) -> tuple[int, str]:
    """`prefixscope ARGS` through `main()` (its last-line handler included), in this
    process: (exit code, stderr)."""
    monkeypatch.setattr(sys, "argv", ["prefixscope", *args])
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        main()
        raise SystemExit(0)
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    code = stop.value.code
    return (code if isinstance(code, int) else 0 if code is None else 1), err


@pytest.mark.parametrize("damage", ["random-after-header", "truncated-third",
                                    "truncated-in-header"])
def test_a_damaged_store_is_one_line_not_a_traceback(good_store: bytes, damage: str, capsys,
                                                     monkeypatch):
    """Random bytes after a valid header, a file cut at a third (DuckDB opens it and fails
    on the first missing block: that failure used to be an "internal error" or, in
    ingest, a TransactionException hiding it), a file cut inside its header: every command
    exits 1 with one line."""
    if damage == "random-after-header":
        data = good_store[:12_288] + os.urandom(len(good_store) - 12_288)
    elif damage == "truncated-third":
        data = good_store[:len(good_store) // 3]
    else:
        data = good_store[:5000]
    for command in COMMANDS:
        Path("s.duckdb").write_bytes(data)
        code, err = main_in_process(capsys, monkeypatch, *command, "--store", "s.duckdb")
        if code == 0:  # a read that never touches the missing blocks
            assert command[0] == "sql" and damage == "truncated-third", err
            continue
        lines = err.splitlines()
        assert code == 1 and len(lines) == 1, (command, err)
        assert "internal error" not in lines[0], (command, err)
        assert (lines[0].startswith("error: cannot open store s.duckdb: ")
                or lines[0].startswith("error: the store cannot be read (damaged or "
                                       "truncated file?): ")), (command, err)
