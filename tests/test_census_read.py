"""The report takes the segments census only where a finding reads it (`census_read`):
the findings, ledger and notes over evidence without it equal those over evidence with it
(the census forced, as a bundle's export takes it), whatever the workers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import prefixscope as ps
from prefixscope.api.handle import store_of
from prefixscope.api.scope import reading
from prefixscope.findings.build import build_report
from prefixscope.findings.evidence import ReportOptions, census_read, gather

ROOT = Path(__file__).resolve().parent.parent
# sample_logs/ blames breaks on segments (the census is read); the handmade Codex rollouts'
# breaks are blamed on none (it is not)
LOGS = {"sample_logs": ROOT / "sample_logs", "codex": ROOT / "tests/fixtures/codex/handmade",
        "aider": ROOT / "tests/data/real/aider"}


def _answers(evidence: Any) -> tuple[Any, ...]:
    result = build_report(evidence)
    return result.findings, result.ledger, result.what_ifs, result.notes, result.summary


@pytest.fixture(scope="module", params=sorted(LOGS))
def gathered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
             ) -> dict[str, Any]:
    """The evidence of one log: the report's (workers 1 and 2) and with the census forced."""
    store = tmp_path_factory.mktemp("census") / "s.duckdb"
    ps.ingest(LOGS[request.param], store)
    with store_of(store) as handle, reading(handle, None) as st:
        return {"name": request.param, "store": store,
                "plain": gather(st, ReportOptions(), workers=1),
                "pooled": gather(st, ReportOptions(), workers=2),
                "forced": gather(st, ReportOptions(), workers=1, with_census=True)}


def test_the_answers_are_those_over_the_whole_census(gathered: dict[str, Any]) -> None:
    assert gathered["forced"].segments  # the oracle holds the census
    assert _answers(gathered["plain"]) == _answers(gathered["forced"])
    assert _answers(gathered["pooled"]) == _answers(gathered["forced"])


def test_the_census_is_kept_exactly_where_read(gathered: dict[str, Any]) -> None:
    read = census_read(gathered["forced"].diff)
    assert read == (gathered["name"] != "codex")  # both cases are exercised
    for ev in (gathered["plain"], gathered["pooled"]):  # the same with or without workers
        assert ev.segments == (gathered["forced"].segments if read else ())


def test_a_segment_change_rate_is_shown_only_where_the_census_is_read(
        gathered: dict[str, Any]) -> None:
    """The finder's one use of the census: a finding's segment_change_rate."""
    rates = [f for f in build_report(gathered["forced"]).findings
             if "segment_change_rate" in f.evidence]
    if not census_read(gathered["forced"].diff):
        assert rates == []


@pytest.mark.parametrize("with_census", [False, True])
def test_walking_workers_take_the_census_once_where_read_and_never_elsewhere(
        gathered: dict[str, Any], with_census: bool, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    from prefixscope.findings import evidence

    # Counted in a file: report may take the census in a process it forks (which
    # inherits this patch), and its walk's workers are forked too.
    taken = tmp_path / "taken"
    taken.touch()
    real = evidence.segments_store

    def counted(*args: Any, **kwargs: Any) -> Any:
        with taken.open("a") as out:
            out.write(f"{os.getpid()}\n")
        return real(*args, **kwargs)

    monkeypatch.setattr(evidence, "segments_store", counted)
    store = gathered["store"]
    with store_of(store) as handle, reading(handle, None) as st:
        ev = gather(st, ReportOptions(), workers=2, with_census=with_census)
    read = with_census or census_read(gathered["forced"].diff)
    assert len(taken.read_text().split()) == (1 if read else 0)
    assert ev.segments == (gathered["forced"].segments if read else ())
