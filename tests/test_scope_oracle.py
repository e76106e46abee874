"""A scoped run (--since / --until / --project) is the run over only the scope's input.

The oracle is independent of how a scope is applied (today a temporary store of the
in-scope requests, threaded again; issue 38 asks for a filtering query instead): the
same log lines, filtered in Python by the fields the scope reads (a TraceLab row's
provider day and project, a raw capture's timestamp), written as a log of their own and
ingested alone. Every analysis that takes a scope (report, calls, diff, segments,
bucket, simulate) gives the same document for both. The capture's window starts at its
second call, so the scope cuts a session: it begins (cold) inside the window, as the
ingest of the two later lines threads it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import REAL, ROOT

import prefixscope as ps

TRACELAB = REAL / "tracelab"  # 20 Claude calls on 2026-06-01, 18 Codex calls on 2026-03-21
CAPTURE = ROOT / "tests" / "fixtures" / "raw" / "claude_code_capture.jsonl"  # 3 calls


def documents(logs: Path, **scope: str) -> dict[str, Any]:
    """Every scoped analysis's document of `logs` (relative: the same names either way)."""
    runs: dict[str, Callable[[Any], Any]] = {
        "report": lambda st: ps.report(st, **scope),
        "calls": lambda st: ps.calls(st, **scope),
        "diff": lambda st: ps.diff(st, **scope),
        "segments": lambda st: ps.segments(st, **scope),
        "bucket": lambda st: ps.bucket(st, **scope),
        "simulate": lambda st: ps.simulate(st, save=False, **scope),
    }
    with ps.ingest([str(logs)], store=None) as st:
        made = {name: run(st).to_dict() for name, run in runs.items()}
    return json.loads(json.dumps(made, ensure_ascii=False, default=str))


def copy_lines(source: Path, to: Path, keep: Callable[[dict[str, Any]], bool]) -> int:
    """The lines of `source` `keep` keeps, written to `to` (no file when none is: an empty
    file would be a counted skip of its own)."""
    lines = [line for line in source.read_text(encoding="utf-8").splitlines()
             if line.strip() and keep(json.loads(line))]
    if lines:
        to.parent.mkdir(parents=True, exist_ok=True)
        to.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


def scoped_and_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sources: list[Path],
                     root: Path, keep: Callable[[dict[str, Any]], bool], **scope: str
                     ) -> tuple[dict[str, Any], dict[str, Any], int]:
    """(the scoped documents of every line, the documents of the kept lines alone, how many
    lines were kept), each run from its own folder under the same relative names."""
    kept = 0
    for source in sources:
        name = Path("logs") / source.relative_to(root)
        copy_lines(source, tmp_path / "whole" / name, lambda row: True)
        kept += copy_lines(source, tmp_path / "part" / name, keep)
    monkeypatch.chdir(tmp_path / "whole")
    scoped = documents(Path("logs"), **scope)
    monkeypatch.chdir(tmp_path / "part")
    return scoped, documents(Path("logs")), kept


TRACELAB_SCOPES = [
    ({"since": "2026-06-01"}, lambda row: row["provider"] == "claude", 20),
    ({"until": "2026-03-21"}, lambda row: row["provider"] == "codex", 18),
    ({"project": "project_4c7b8a1b"}, lambda row: row.get("project") == "project_4c7b8a1b", 10),
]


@pytest.mark.parametrize(("scope", "keep", "count"), TRACELAB_SCOPES,
                         ids=["since", "until", "project"])
def test_a_scope_of_the_tracelab_rounds_is_the_run_over_its_rows_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scope: dict[str, str],
        keep: Callable[[dict[str, Any]], bool], count: int) -> None:
    sources = sorted(TRACELAB.rglob("round_trace.jsonl"))
    scoped, alone, kept = scoped_and_alone(tmp_path, monkeypatch, sources, TRACELAB, keep,
                                           **scope)
    assert kept == count
    assert alone["report"]["summary"]["requests"] == count
    assert scoped == alone


def test_a_window_that_cuts_a_session_is_the_run_over_the_calls_inside_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    since = "2025-11-03T09:14:05Z"  # after the first call (09:14:02), before the second
    scoped, alone, kept = scoped_and_alone(
        tmp_path, monkeypatch, [CAPTURE], CAPTURE.parent,
        lambda row: row["timestamp"] >= since, since=since)
    assert kept == 2
    assert alone["report"]["summary"]["requests"] == 2
    assert len(alone["diff"]["pairs"]) == 1  # the two calls in the window: one pair
    assert scoped == alone
