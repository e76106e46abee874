"""Ctrl-C prints one line saying what was written and exits 130; an ingest that stores
nothing (interrupted, or no log in its files) leaves no new store file behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import ROOT
from typer.testing import CliRunner

from prefixscope.cli.main import app

SAMPLE = ROOT / "sample_logs" / "bifrost-mcp-keyorder.jsonl"


def run_interrupted(patch: str, argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`prefixscope ARGV` in a fresh process where `patch` makes something raise
    KeyboardInterrupt, as Ctrl-C would."""
    code = (
        "import sys\n"
        f"{patch}\n"
        "from prefixscope.cli.main import main\n"
        f"sys.argv = ['prefixscope', *{argv!r}]\n"
        "main()\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=cwd)


def test_an_interrupted_ingest_says_nothing_was_written_and_leaves_no_store(tmp_path):
    patch = ("import prefixscope.store.load as load\n"
             "def stop(*a, **k):\n"
             "    raise KeyboardInterrupt\n"
             "load._ingest_one = stop")
    out = run_interrupted(patch, ["ingest", str(SAMPLE), "--store", "new.duckdb"], tmp_path)
    assert out.returncode == 130
    assert out.stderr == "interrupted: nothing written\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_an_interrupted_ingest_keeps_an_existing_store_as_it_was(tmp_path):
    assert CliRunner().invoke(app, ["ingest", str(SAMPLE), "--store",
                                    str(tmp_path / "s.duckdb")]).exit_code == 0
    before = (tmp_path / "s.duckdb").read_bytes()
    patch = ("import prefixscope.store.load as load\n"
             "def stop(*a, **k):\n"
             "    raise KeyboardInterrupt\n"
             "load._ingest_one = stop")
    out = run_interrupted(patch, ["ingest", str(SAMPLE), "--store", "s.duckdb"], tmp_path)
    assert out.returncode == 130 and out.stderr == "interrupted: nothing written\n"
    assert (tmp_path / "s.duckdb").read_bytes() == before


def test_an_interrupt_after_a_file_was_written_names_it(tmp_path):
    patch = ("import prefixscope.cli.console as console\n"
             "def stop(*a, **k):\n"
             "    raise KeyboardInterrupt\n"
             "console.show = stop")
    out = run_interrupted(patch, ["report", str(SAMPLE), "--html", "r.html", "-q"], tmp_path)
    assert out.returncode == 130
    assert out.stderr == "interrupted: wrote only r.html\n"
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")


def test_an_ingest_of_a_file_holding_no_log_leaves_no_new_store(tmp_path):
    (tmp_path / "notes.json").write_text('{"a": 1}\n')
    result = CliRunner().invoke(app, ["ingest", str(tmp_path / "notes.json"), "--store",
                                      str(tmp_path / "new.duckdb")])
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == (
        f"error: no request read: 1 record(s)/file(s) skipped; no store written at "
        f"{tmp_path / 'new.duckdb'}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.json"]


def test_a_strict_rejection_leaves_no_new_store(tmp_path):
    log = tmp_path / "cap.jsonl"
    log.write_text(SAMPLE.read_text() + "{not json\n")
    result = CliRunner().invoke(app, ["ingest", str(log), "--strict", "--store",
                                      str(tmp_path / "new.duckdb")])
    assert result.exit_code == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cap.jsonl"]
