"""The edges around the logs' contents (issue 24, docs/security.md): `sql` reaches the store
and nothing else, a log folder cannot hang or flood ingest, names from the file system
reach the terminal neutralised, and outputs are written whole or not at all.

The expected errors are DuckDB's own documented refusals (``enable_external_access =
false``: "file system operations are disabled by configuration"; ``lock_configuration``:
"the configuration has been locked"), the skips the walk's documented reasons, and
counts by hand. A case that could hang (a FIFO, ``/dev/zero``) runs in a subprocess with
a timeout that fails its test, not the suite.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from prefixscope.cli.main import app

runner = CliRunner()

RAW_BODIES = FIXTURES / "raw" / "bodies.jsonl"  # 3 bare request bodies, one a line
PERMISSION = "file system operations are disabled by configuration"
ONLY_THE_STORE = "(`sql` reads the store and nothing else)"


def run(*args: str | Path) -> Any:
    result = runner.invoke(app, [str(a) for a in args], catch_exceptions=False)
    assert "Traceback" not in result.output + result.stderr, result.stderr
    return result


def one_error_line(result: Any) -> str:
    lines = result.stderr.splitlines()
    assert result.exit_code == 1, (result.exit_code, result.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def make_store(*logs: Path | str, store: str = "s.duckdb") -> str:
    result = run("ingest", *logs, "--store", store, "--json")
    assert result.exit_code == 0, result.stderr
    return store


def sql(query: str, *args: str) -> Any:
    return run("sql", query, "--store", "s.duckdb", *args)


# -- sql: the store and nothing else ------------------------------------------------------


class TestSqlReachesOnlyTheStore:
    @pytest.fixture(autouse=True)
    def _store(self) -> None:
        make_store(RAW_BODIES)
        Path("private.txt").write_text("root:x:0:0:PLANTED-LOCAL-LINE\n")
        Path("private.json").write_text('{"planted": "PLANTED-LOCAL-JSON"}\n')
        Path("private.csv").write_text("planted\nPLANTED-LOCAL-CSV\n")

    @pytest.mark.parametrize(("query", "named"), [
        ("COPY (select 'x') TO 'written.csv'", "written.csv"),
        ("COPY requests TO 'written.parquet' (FORMAT PARQUET)", "written.parquet"),
        ("ATTACH 'other.duckdb' AS other", "other.duckdb"),
    ], ids=["copy-to", "copy-table-to", "attach"])
    def test_writing_or_opening_another_file_is_refused_and_nothing_is_created(
            self, query: str, named: str) -> None:
        before = sorted(os.listdir("."))
        line = one_error_line(sql(query))
        # ATTACH names the file by its absolute path, COPY as written
        assert line in (f'error: SQL: Permission Error: Cannot access file "{where}" - '
                        f"{PERMISSION} {ONLY_THE_STORE}"
                        for where in (named, Path(named).absolute()))
        assert sorted(os.listdir(".")) == before

    def test_export_database_is_refused_and_writes_no_table(self) -> None:
        line = one_error_line(sql("EXPORT DATABASE 'dump'"))
        assert line.startswith('error: SQL: Permission Error: Cannot access file "dump/')
        assert line.endswith(f" - {PERMISSION} {ONLY_THE_STORE}")
        assert not Path("dump").exists() or list(Path("dump").iterdir()) == []

    @pytest.mark.parametrize(("query", "named"), [
        ("select * from read_csv('private.txt')", "private.txt"),
        ("select * from read_text('private.txt')", "private.txt"),
        ("select * from read_blob('private.txt')", "private.txt"),
        ("select * from read_json_auto('private.json')", "private.json"),
        ("select * from glob('*')", "*"),
        ("select * from 'private.csv'", "private.csv"),  # a replacement scan
    ], ids=["read_csv", "read_text", "read_blob", "read_json_auto", "glob", "replacement-scan"])
    def test_reading_a_local_file_is_refused(self, query: str, named: str) -> None:
        result = sql(query, "--json")
        assert one_error_line(result) == (
            f'error: SQL: Permission Error: Cannot access file "{named}" - {PERMISSION} '
            f"{ONLY_THE_STORE}")
        assert result.stdout == ""
        assert "PLANTED" not in result.output + result.stderr

    @pytest.mark.parametrize(("query", "option"), [
        ("SET enable_external_access = true", "enable_external_access"),
        ("RESET enable_external_access", "enable_external_access"),
        ("SET lock_configuration = false", "lock_configuration"),
        ("SET profiling_output = 'profile.json'", "profiling_output"),
    ])
    def test_no_setting_can_open_it_again(self, query: str, option: str) -> None:
        assert one_error_line(sql(query)) == (
            f'error: SQL: Invalid Input Error: Cannot change configuration option "{option}" '
            "- the configuration has been locked")

    def test_the_store_itself_is_still_read(self) -> None:
        result = sql("select count(*) as n from requests", "--json")
        assert result.exit_code == 0 and json.loads(result.stdout) == [{"n": 3}]


class TestSqlOutputs:
    @pytest.fixture(autouse=True)
    def _store(self) -> None:
        make_store(RAW_BODIES)

    def test_csv_cells_a_spreadsheet_would_evaluate_are_quoted_as_text(self) -> None:
        # OWASP CSV injection: a cell starting with = + - @ (or tab / carriage return)
        # gets a leading '; numbers stay numbers, other text stays as it is.
        result = sql("select '=1+2' as a, '+cmd' as b, '-2+3' as c, '@SUM(A1)' as d, "
                     "-5 as n, 2.5 as f, 'plain' as e, chr(9) || '=x' as t, "
                     "1 as \"=HEADER\"", "--csv")
        assert result.exit_code == 0, result.stderr
        assert result.stdout.splitlines() == [
            "a,b,c,d,n,f,e,t,'=HEADER",
            "'=1+2,'+cmd,'-2+3,'@SUM(A1),-5,2.5,plain,'\t=x,1"]

    def test_secrets_are_masked_in_every_format_even_in_a_blob_cut_to_the_table_width(
            self) -> None:
        key = "sk-" + "ant-" + "api03-" + "Zq7" * 12  # a fake in Anthropic's shape
        gh = "gh" + "p_" + "a1B2c3" * 6
        query = f"select 'key {key}' as t, '{key}'::blob as b, 1 as \"{gh}\""
        # 30 columns cut the blob 16 characters into the key's body: too short to be
        # recognized after the cut, so it must be masked before
        for fmt in (("--max-width", "30"), ("--json",), ("--csv",)):
            result = sql(query, *fmt)
            assert result.exit_code == 0, result.stderr
            for secret in (key[13:], gh[4:]):
                assert not any(secret[i:i + 6] in result.stdout
                               for i in range(len(secret) - 5)), (fmt, result.stdout)
            assert result.stdout.count("sk-ant-•••") == 2 and "ghp_•••" in result.stdout

    def test_a_table_cell_shows_control_and_bidi_characters_escaped(self) -> None:
        result = sql("select chr(27) || ']52;c;cHduZWQ=' || chr(7) || chr(27) || '[2J' "
                     "|| 'abc' || chr(8238) || 'fed' || chr(8203) as x")
        assert result.exit_code == 0, result.stderr
        assert "\\x1b]52;c;cHduZWQ=\\x07\\x1b[2Jabc\\u202efed\\u200b" in result.stdout
        assert not any(c in result.stdout for c in "\x1b\x07\u202e\u200b")


# -- names and text from the file system ------------------------------------------------

OSC52 = "\x1b]52;c;cHduZWQ=\x07"  # write "pwned" to the clipboard
OSC0 = "\x1b]0;title\x07"  # set the window title
CLEAR = "\x1b[2J"  # clear the screen
# The name a hostile folder gives a file: every terminal trick, and a newline followed by
# what looks like prefixscope's own error line.
HOSTILE_NAME = f"a{OSC52}{OSC0}{CLEAR}\u202etxt.\nerror: forged"


class TestNamesFromTheFileSystem:
    @pytest.mark.parametrize(("text", "shown"), [
        ("tool\u202ename", "tool\\u202ename"),  # RIGHT-TO-LEFT OVERRIDE (Trojan Source)
        ("\u202a\u202b\u202c\u202d", "\\u202a\\u202b\\u202c\\u202d"),  # embeddings, PDF
        ("\u2066\u2067\u2068\u2069", "\\u2066\\u2067\\u2068\\u2069"),  # isolates
        ("\u200e\u200f\u061c", "\\u200e\\u200f\\u061c"),  # LRM, RLM, ARABIC LETTER MARK
        ("zero\u200bwidth\u200c\u200d\u2060\ufeff", "zero\\u200bwidth\\u200c\\u200d\\u2060\\ufeff"),
        ("line\u2028para\u2029", "line\\u2028para\\u2029"),
        ("\x1b[2J\x07\x9b", "\\x1b[2J\\x07\\x9b"),  # C0 and C1 controls, as before
        ("two\nlines\ttab", "two\nlines\ttab"),  # text keeps its lines and tabs
    ])
    def test_invisible_and_reordering_characters_are_shown_escaped(self, text: str,
                                                                    shown: str) -> None:
        from prefixscope.views.terminal import visible

        assert visible(text) == shown

    def test_a_one_line_message_shows_a_newline_escaped(self) -> None:
        from prefixscope.views.terminal import one_line

        assert one_line("a\nb\u202ec") == "a\\x0ab\\u202ec"

    def test_a_hostile_file_name_in_a_skip_warning_is_one_neutralised_line(self) -> None:
        Path("logs").mkdir()
        (Path("logs") / HOSTILE_NAME).write_text("not a log\n")
        (Path("logs") / "good.jsonl").write_text(RAW_BODIES.read_text())
        result = run("ingest", "logs", "--store", "s.duckdb")
        assert result.exit_code == 0, result.stderr
        assert not any(c in result.stderr for c in "\x1b\x07\u202e")
        assert [line for line in result.stderr.splitlines() if line.startswith("error")] == []
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            "warning: skipped logs/a\\x1b]52;c;cHduZWQ=\\x07\\x1b]0;title\\x07\\x1b[2J\\u202etxt."
            "\\x0aerror: forged: not a recognized log format (tried: ")

    def test_the_progress_bar_shows_a_hostile_file_name_neutralised(
            self, monkeypatch: pytest.MonkeyPatch) -> None:
        import io

        from rich.console import Console

        from prefixscope.cli import console

        screen = io.StringIO()
        monkeypatch.setattr(console, "err", Console(file=screen, force_terminal=True,
                                                    width=200))
        with console.byte_progress(True, "ingest") as update:
            update("[bold]x" + OSC52 + "\nforged", 10, 100, 3)
        drawn = screen.getvalue()
        assert OSC52 not in drawn and "\x07" not in drawn and "\nforged" not in drawn
        assert "[bold]x\\x1b]52;c;cHduZWQ=\\x07\\x0aforged · 3 requests" in drawn

    def test_a_hostile_file_name_in_a_sql_table_is_neutralised(self) -> None:
        name = f"x{OSC52}{CLEAR}\u202e.jsonl"
        Path(name).write_text(RAW_BODIES.read_text())
        make_store(name)
        result = sql("select distinct source_file from requests")
        assert result.exit_code == 0, result.stderr
        assert "x\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J\\u202e.jsonl" in result.stdout
        assert not any(c in result.stdout for c in "\x1b\x07\u202e")

    def test_a_tool_name_with_a_bidi_override_is_shown_escaped_by_segments(self) -> None:
        capture = FIXTURES / "raw" / "openai_chat_capture.jsonl"
        Path("c.jsonl").write_text(capture.read_text().replace('"run_shell"',
                                                               '"run\\u202ehs.exe"'))
        make_store("c.jsonl")
        result = run("segments", "--store", "s.duckdb")
        assert result.exit_code == 0, result.stderr
        assert "run\\u202ehs.exe" in result.stdout and "\u202e" not in result.stdout


# -- log folders -------------------------------------------------------------------------

# Runs `prefixscope ARGS` in a fresh process, writing its peak RSS (KiB) to rss.txt.
_MEASURED = """
import resource, runpy, sys
sys.argv = ["prefixscope", *sys.argv[1:]]
try:
    runpy.run_module("prefixscope", run_name="__main__")
finally:
    with open("rss.txt", "w") as fh:
        fh.write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))
"""


def _limits() -> None:
    """A ceiling for a child that a regression would let read forever (/dev/zero)."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def ingest_in_a_process(*args: str | Path, timeout: float = 90) -> tuple[Any, dict[str, Any]]:
    """`ingest ARGS --store s.duckdb --json` in a subprocess: a run that hangs fails this
    test (the child is killed), not the suite."""
    import subprocess
    import sys

    import prefixscope

    root = Path(prefixscope.__file__).parent.parent  # the package under test, in the child
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _MEASURED, "ingest", *map(str, args), "--store", "s.duckdb",
             "--json"], capture_output=True, text=True, timeout=timeout, preexec_fn=_limits,
            env={**os.environ, "PYTHONPATH": str(root)})
    except subprocess.TimeoutExpired:
        pytest.fail(f"ingest {' '.join(map(str, args))} did not end in {timeout} s")
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc, json.loads(proc.stdout)


def peak_rss_mb() -> float:
    return int(Path("rss.txt").read_text()) / 1024


def _socket(path: Path) -> None:
    import socket

    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()


class TestLogFolders:
    @pytest.fixture(autouse=True)
    def _folder(self) -> None:
        Path("logs").mkdir()
        (Path("logs") / "good.jsonl").write_text(RAW_BODIES.read_text())

    @pytest.mark.parametrize("make", [
        lambda p: os.mkfifo(p),
        lambda p: p.symlink_to("/dev/zero"),
        lambda p: p.symlink_to("/dev/urandom"),
        _socket,
    ], ids=["fifo", "link-to-dev-zero", "link-to-dev-urandom", "socket"])
    def test_what_is_not_a_regular_file_is_one_counted_skip_and_the_good_file_ingests(
            self, make: Any) -> None:
        make(Path("logs") / "trap.jsonl")
        proc, out = ingest_in_a_process("logs", timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert out["ingested"] == 3 and out["skipped"] == 1
        assert out["errors"] == [{"file": "logs/trap.jsonl", "line": None,
                                  "reason": "not a regular file (a device, socket or pipe)"}]

    def test_a_symlink_loop_is_one_counted_skip_and_the_good_file_ingests(self) -> None:
        (Path("logs") / "loop.jsonl").symlink_to("loop.jsonl")
        (Path("logs") / "a").symlink_to("b")
        (Path("logs") / "b").symlink_to("a")
        result = run("ingest", "logs", "--store", "s.duckdb", "--json")
        assert result.exit_code == 0, result.stderr
        out = json.loads(result.stdout)
        assert out["ingested"] == 3 and out["skipped"] == 3
        assert out["errors"] == [{"file": f"logs/{n}", "line": None,
                                  "reason": "symbolic link loop"} for n in ("a", "b", "loop.jsonl")]

    def test_a_link_to_a_directory_is_a_counted_skip_not_a_silent_one(self) -> None:
        Path("elsewhere").mkdir()
        (Path("elsewhere") / "more.jsonl").write_text(RAW_BODIES.read_text())
        (Path("logs") / "linked").symlink_to(Path("elsewhere").absolute())
        result = run("ingest", "logs", "--store", "s.duckdb", "--json")
        out = json.loads(result.stdout)
        assert out["ingested"] == 3
        assert out["errors"] == [{"file": "logs/linked", "line": None, "reason":
                                  "a symbolic link to a directory: not followed in a walk "
                                  "(name it to read it)"}]

    def test_many_one_record_files_are_written_in_batches_not_one_write_each(
            self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Each store write scans what the store holds (ids, bodies, parts): one write per
        file made 20,000 one-call files quadratic (over 300 s; the same records in one file:
        2 s). 2,000 files of one request each are one batch (`ingest.BATCH`), one write."""
        from prefixscope.ingest import BATCH
        from prefixscope.store import Store

        files = 2000
        assert files <= BATCH
        for i in range(files):
            body = {"model": "m", "messages": [{"role": "user", "content": f"question {i}"}]}
            (Path("logs") / f"f{i:05d}.jsonl").write_text(json.dumps(body) + "\n")
        (Path("logs") / "good.jsonl").unlink()
        writes: list[int] = []
        add = Store.add

        def counted(self: Store, requests: Any, *args: Any, **kwargs: Any) -> int:
            writes.append(len(requests))
            return add(self, requests, *args, **kwargs)

        monkeypatch.setattr(Store, "add", counted)
        result = run("ingest", "logs", "--store", "s.duckdb", "--json")
        assert json.loads(result.stdout)["ingested"] == files
        assert writes == [files]


def _gzip_lines(path: Path, lines: list[bytes | tuple[bytes, int]]) -> None:
    """A gzip of `lines`; (chunk, n) is `chunk` repeated n times as one line (a bomb,
    compressed as it is written: never held whole)."""
    import gzip

    with gzip.open(path, "wb", compresslevel=1) as fh:
        for line in lines:
            if isinstance(line, tuple):
                chunk, n = line
                for _ in range(n):
                    fh.write(chunk)
            else:
                fh.write(line)
            fh.write(b"\n")


class TestDecompressionBombs:
    BOMB_MB = 256  # inflates to this; the limit below is 1 MiB
    LIMIT = 1 << 20

    def _records(self) -> list[bytes]:
        return [line.encode() for line in RAW_BODIES.read_text().splitlines()]

    def test_a_line_over_max_line_bytes_is_one_skip_read_in_bounded_memory(self) -> None:
        first, second, third = self._records()
        _gzip_lines(Path("calm.jsonl.gz"), [first, second, third])
        _gzip_lines(Path("bomb.jsonl.gz"), [first, second, (b"0" * (1 << 20), self.BOMB_MB),
                                            third])
        assert Path("bomb.jsonl.gz").stat().st_size < 2 << 20
        proc, out = ingest_in_a_process("calm.jsonl.gz", "--max-line-bytes", str(self.LIMIT))
        assert proc.returncode == 0 and out["ingested"] == 3, proc.stderr
        calm = peak_rss_mb()
        Path("s.duckdb").unlink()
        proc, out = ingest_in_a_process("bomb.jsonl.gz", "--max-line-bytes", str(self.LIMIT))
        assert proc.returncode == 0, proc.stderr
        assert out["ingested"] == 3 and out["skipped"] == 1
        assert out["errors"] == [{"file": "bomb.jsonl.gz", "line": 3, "reason":
                                  "line longer than --max-line-bytes (1,048,576 bytes)"}]
        # holding the 256 MB line (as bytes, then decoded) would add hundreds of MB
        assert peak_rss_mb() - calm < 64, (peak_rss_mb(), calm)

    @pytest.mark.parametrize("byte", [b"\x00", b"0"], ids=["NULs", "zeros"])
    def test_a_bomb_that_is_one_endless_line_is_one_skip_read_in_bounded_memory(
            self, byte: bytes) -> None:
        first = self._records()[0]
        _gzip_lines(Path("calm.jsonl.gz"), [first])
        proc, out = ingest_in_a_process("calm.jsonl.gz", "--max-line-bytes", str(self.LIMIT))
        calm = peak_rss_mb()
        Path("s.duckdb").unlink()
        _gzip_lines(Path("bomb.gz"), [(byte * (1 << 20), self.BOMB_MB)])
        proc, out = ingest_in_a_process("bomb.gz", "--max-line-bytes", str(self.LIMIT))
        assert proc.returncode == 1 and out["ingested"] == 0
        assert out["errors"] == [{"file": "bomb.gz", "line": None, "reason":
                                  "its first line is longer than --max-line-bytes "
                                  "(1,048,576 bytes)"}]
        assert peak_rss_mb() - calm < 64, (peak_rss_mb(), calm)


# -- the disk full -----------------------------------------------------------------------


def _mount_point(folder: Path) -> str:
    """The mount point of `folder`, as df(1) reports it (the oracle for "naming the disk")."""
    import subprocess

    out = subprocess.run(["df", "--output=target", str(folder)], capture_output=True,
                         text=True, check=True).stdout
    return out.splitlines()[-1].strip()


class TestDiskFull:
    def test_a_commit_the_disk_has_no_room_for_is_one_line_naming_the_disk(
            self, monkeypatch: pytest.MonkeyPatch) -> None:
        """DuckDB's own failure, as a full disk gives it at the commit (the text of a run on a
        3 MB tmpfs), raised through the store."""
        import re

        import duckdb

        from prefixscope.store import Store

        make_store(RAW_BODIES)
        store = Path("s.duckdb").absolute()
        run_sql = Store.run

        def full(self: Store, query: str, params: Any = ()) -> Any:
            if query == "COMMIT":
                raise duckdb.TransactionException(
                    f'TransactionContext Error: Failed to commit: Could not write file '
                    f'"{store}.wal": No space left on device')
            return run_sql(self, query, params)

        capture = FIXTURES / "raw" / "openai_chat_capture.jsonl"
        with monkeypatch.context() as patched:
            patched.setattr(Store, "run", full)
            line = one_error_line(run("ingest", capture, "--store", "s.duckdb"))
        mount = re.escape(_mount_point(store.parent))
        assert re.fullmatch(
            rf"error: cannot write the store {re.escape(str(store))}: no space left on "
            rf"device on the disk mounted at {mount}, [\d,]+ bytes free; this run stored "
            r"nothing \(free some space, or give --store a file on another disk\)", line), line
        count = sql("select count(*) as n from requests", "--json")
        assert json.loads(count.stdout) == [{"n": 3}], count.stderr

    def test_a_real_full_disk_is_the_same_one_line(self, tmp_path: Path) -> None:
        """A 3 MB tmpfs in a user namespace (no root needed; skipped where the kernel does
        not allow unprivileged user namespaces)."""
        import shutil
        import subprocess
        import sys

        from test_store_safety import write_big_log

        import prefixscope

        unshare = shutil.which("unshare")
        if unshare is None or subprocess.run([unshare, "-rm", "true"],
                                             capture_output=True).returncode != 0:
            pytest.skip("no unprivileged user namespace to mount a tmpfs in")
        write_big_log(tmp_path / "big.jsonl")  # ~6 MB of distinct bodies
        disk = tmp_path / "disk"
        disk.mkdir()
        script = (f'mount -t tmpfs -o size=3m tmpfs "{disk}" && exec "{sys.executable}" -m '
                  f'prefixscope ingest "{tmp_path / "big.jsonl"}" --store "{disk}/s.duckdb" -q')
        proc = subprocess.run([unshare, "-rm", "sh", "-c", script], capture_output=True,
                              text=True, timeout=300, env={
                                  **os.environ,
                                  "PYTHONPATH": str(Path(prefixscope.__file__).parent.parent)})
        assert "Traceback" not in proc.stderr and proc.returncode == 1, proc.stderr
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            f"error: cannot write the store {disk}/s.duckdb: no space left on device on the "
            f"disk mounted at {disk}, "), proc.stderr


# -- two calls are two calls ---------------------------------------------------------------


def _capture(path: Path, session: str, response_id: str | None) -> None:
    """One raw capture: the same body at the same second in every file; its own session
    header and upstream response id (none: None)."""
    response: dict[str, Any] = {
        "object": "chat.completion", "model": "gpt-4o",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105}}
    if response_id is not None:
        response["id"] = response_id
    path.write_text(json.dumps({
        "timestamp": "2025-11-03T10:02:11Z", "url": "https://api.openai.com/v1/chat/completions",
        "headers": {"x-litellm-session-id": session},
        "request": {"model": "gpt-4o", "messages": [{"role": "user", "content": "same"}]},
        "response": response}) + "\n")


class TestTwoCallsAreTwoCalls:
    FILES = 50

    def _ingest(self) -> dict[str, Any]:
        result = run("ingest", "calls", "--store", "s.duckdb", "--json")
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout)

    def test_different_response_ids_are_different_calls_whatever_the_body_and_time(
            self) -> None:
        Path("calls").mkdir()
        for i in range(self.FILES):
            _capture(Path("calls") / f"{i:03d}.jsonl", f"session-{i}", f"chatcmpl-{i:04d}")
        out = self._ingest()
        assert (out["ingested"], out["duplicates"], out["sessions"]) == (50, 0, 50)
        assert (out["totals"]["requests"], out["totals"]["sessions"]) == (50, 50)

    def test_without_response_ids_the_same_body_and_time_in_two_files_is_one_call(self) -> None:
        Path("calls").mkdir()
        for i in range(self.FILES):
            _capture(Path("calls") / f"{i:03d}.jsonl", f"session-{i}", None)
        out = self._ingest()
        assert (out["ingested"], out["duplicates"], out["totals"]["requests"]) == (50, 49, 1)

    def test_the_same_response_id_in_two_files_is_one_call(self) -> None:
        Path("calls").mkdir()
        _capture(Path("calls") / "a.jsonl", "session-a", "chatcmpl-same")
        _capture(Path("calls") / "b.jsonl", "session-b", "chatcmpl-same")
        _capture(Path("calls") / "c.jsonl", "session-c", "chatcmpl-other")
        out = self._ingest()
        # a raw capture's id is its response id: the second copy is the stored request
        assert (out["ingested"], out["already_present"], out["totals"]["requests"]) == (2, 1, 2)


# -- outputs whole or not at all -------------------------------------------------------------

OLD = b"the previous file\n"


def _file_size_limit(limit: int) -> Any:
    """A child whose files cannot grow past `limit` bytes (RLIMIT_FSIZE: a write beyond it
    fails with EFBIG, "File too large"), as a disk filling up mid-file does."""
    def apply() -> None:
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def run_limited(args: list[str], limit: int | None) -> Any:
    import subprocess
    import sys

    import prefixscope

    return subprocess.run(
        [sys.executable, "-m", "prefixscope", *args], capture_output=True, text=True,
        timeout=300, preexec_fn=None if limit is None else _file_size_limit(limit),
        env={**os.environ, "PYTHONPATH": str(Path(prefixscope.__file__).parent.parent)})


class TestOutputsAreWholeOrAbsent:
    @pytest.fixture(autouse=True)
    def _store(self) -> None:
        make_store(FIXTURES / "raw" / "claude_code_capture.jsonl")

    @pytest.mark.parametrize(("args", "name", "why"), [
        (["report", "--html", "out.html"], "out.html", os.strerror(errno.EFBIG)),
        (["report", "--md", "out.md"], "out.md", os.strerror(errno.EFBIG)),
        (["report", "--json-file", "out.json"], "out.json", os.strerror(errno.EFBIG)),
        (["report", "--junit", "out.xml"], "out.xml", os.strerror(errno.EFBIG)),
        # bucket says the OSError as Python prints it
        (["bucket", "--plot", "out.png"], "out.png",
         f"[Errno {errno.EFBIG}] {os.strerror(errno.EFBIG)}"),
    ], ids=["html", "md", "json-file", "junit", "plot"])
    def test_a_write_cut_short_leaves_the_previous_file_and_no_temporary_one(
            self, args: list[str], name: str, why: str) -> None:
        whole = run_limited([*args, "--store", "s.duckdb"], None)
        assert whole.returncode in (0, 3), whole.stderr  # 3: report's gate
        size = Path(name).stat().st_size
        Path(name).write_bytes(OLD)
        before = sorted(os.listdir("."))
        cut = run_limited([*args, "--store", "s.duckdb"], size // 2)
        assert cut.returncode == 1 and "Traceback" not in cut.stderr, cut.stderr
        assert cut.stderr.splitlines()[-1] == f"error: cannot write {name}: {why}"
        assert Path(name).read_bytes() == OLD
        assert sorted(os.listdir(".")) == before  # the temporary file is gone

    def test_a_new_file_written_whole_has_the_umask_permissions(self) -> None:
        result = run("report", "--store", "s.duckdb", "--md", "new.md")
        assert result.exit_code in (0, 3), result.stderr
        mask = os.umask(0)
        os.umask(mask)
        assert Path("new.md").stat().st_mode & 0o777 == 0o666 & ~mask

    def test_an_export_cut_short_leaves_each_table_previous_or_whole(self) -> None:
        """One session of 40 growing turns: pairs.parquet (each pair's requests whole) is
        the largest file, so a size limit between it and the others cuts only it."""
        import random

        rng = random.Random(7)
        messages: list[dict[str, str]] = []
        with Path("grow.jsonl").open("w") as fh:
            for turn in range(40):
                messages.append({"role": "user" if turn % 2 == 0 else "assistant",
                                 "content": "".join(rng.choices("abcdefgh ", k=3000))})
                fh.write(json.dumps({
                    "timestamp": f"2025-11-03T10:{turn:02d}:00Z",
                    "url": "https://api.openai.com/v1/chat/completions",
                    "headers": {"x-litellm-session-id": "s1"},
                    "request": {"model": "gpt-4o", "messages": messages}}) + "\n")
        make_store("grow.jsonl", store="g.duckdb")
        whole = run_limited(["export", "--parquet", "whole", "--store", "g.duckdb"], None)
        assert whole.returncode == 0, whole.stderr
        sizes = {p.stem: p.stat().st_size for p in Path("whole").iterdir()}
        largest_table = max(size for name, size in sizes.items() if name != "pairs")
        assert sizes["pairs"] > largest_table
        Path("out").mkdir()
        for name in sizes:
            (Path("out") / f"{name}.parquet").write_bytes(OLD)
        cut = run_limited(["export", "--parquet", "out", "--store", "g.duckdb"],
                          (largest_table + sizes["pairs"]) // 2)
        assert cut.returncode == 1 and "Traceback" not in cut.stderr, cut.stderr
        error = cut.stderr.splitlines()[-1]  # pyarrow's words: "Error writing bytes ..."
        assert error.startswith("error: export failed: ") and error.endswith(
            os.strerror(errno.EFBIG)), error
        assert sorted(os.listdir("out")) == sorted(f"{name}.parquet" for name in sizes)
        for name in sizes:
            data = (Path("out") / f"{name}.parquet").read_bytes()
            assert data == (OLD if name == "pairs" else (Path("whole") / f"{name}.parquet")
                            .read_bytes()), name

    def test_a_link_stays_a_link_and_a_fifo_is_written_in_place(self) -> None:
        import stat

        from prefixscope.model.atomic import atomic_path, write_atomic

        Path("real.md").write_bytes(OLD)
        Path("link.md").symlink_to("real.md")
        write_atomic(Path("link.md"), "new\n")
        assert Path("link.md").is_symlink() and Path("real.md").read_text() == "new\n"
        os.mkfifo("pipe")
        with atomic_path(Path("pipe")) as target:
            assert target == Path("pipe")  # nothing to rename onto a pipe or a device
        assert stat.S_ISFIFO(os.stat("pipe").st_mode)
        assert sorted(os.listdir(".")) == ["link.md", "pipe", "real.md", "s.duckdb"]
