"""What a person reads in the terminal: a table's title is never wrapped mid-phrase, ids
are never cut, and `report` and `bucket --by session` count the same sessions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT
from rich.table import Table
from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.views.terminal import Screen, phrase_lines

runner = CliRunner()


class TestPhraseLines:
    def test_breaks_only_between_phrases(self) -> None:
        title = "119 pairs · 103,376 tokens lost · blocks: 16 (inferred) in 61 pairs"
        assert phrase_lines(title, 40) == ["119 pairs · 103,376 tokens lost",
                                           "blocks: 16 (inferred) in 61 pairs"]

    def test_a_title_that_fits_stays_one_line(self) -> None:
        assert phrase_lines("a · b · c", 9) == ["a · b · c"]

    def test_a_phrase_wider_than_the_line_is_left_whole(self) -> None:
        assert phrase_lines("short · " + "x" * 30, 10) == ["short", "x" * 30]

    def test_markup_does_not_count_toward_the_width(self) -> None:
        assert phrase_lines("[bold]aaaa[/] · bbbb", 11) == ["[bold]aaaa[/] · bbbb"]


class TestScreenTables:
    def test_a_tables_title_and_caption_become_lines_of_their_own(self) -> None:
        screen = Screen(width=30)
        table = Table(title="one phrase · another phrase here", caption="said below")
        table.add_column("x")
        screen.print(table)
        printed = [call[0][0] for call in screen.calls]
        assert printed[0] == "[italic]one phrase[/]"
        assert printed[1] == "[italic]another phrase here[/]"
        assert printed[2] is table and table.title is None and table.caption is None
        assert printed[3] == "[dim]said below[/]"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("layout") / "s.duckdb"
    result = runner.invoke(app, ["ingest", str(ROOT / "sample_logs"), "--store", str(path)])
    assert result.exit_code == 0, result.output
    return str(path)


def sql(query: str, store: str) -> list[dict]:
    result = runner.invoke(app, ["sql", query, "--store", store, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


class TestIdsAreNeverCut:
    def test_diff_lists_the_worst_pairs_by_their_whole_ids(self, store: str) -> None:
        doc = json.loads(runner.invoke(app, ["diff", "--all", "--store", store,
                                             "--json"]).stdout)
        worst = sorted((p for p in doc["pairs"] if p["lost_tokens"]),
                       key=lambda p: -p["lost_tokens"])[:3]
        for width in ("200", "80"):
            out = runner.invoke(app, ["diff", "--all", "--store", store, "--worst", "3"],
                                env={"COLUMNS": width}).stdout
            for pair in worst:
                assert len(pair["a"]) == 32 and pair["a"] in out and pair["b"] in out, width

    def test_simulate_shows_whole_request_and_session_ids(self, store: str) -> None:
        out = runner.invoke(app, ["simulate", "--store", store, "--no-save"]).stdout
        ids = {r["id"]: r["session"] for r in sql(
            "select id, session from turns where session like 'f90bc494-%' and duplicate_of "
            "is null", store)}
        session = next(iter(set(ids.values())))
        assert len(session) == 36 and session in out
        assert any(rid in out for rid in ids)


class TestSessionsCountedTheSameWay:
    def test_report_counts_the_sessions_bucket_by_session_groups(self, store: str) -> None:
        # the oracle: every call once (a second log of a call is in its copy's session)
        expected = sql("select count(distinct session) AS n from turns where duplicate_of "
                       "is null", store)[0]["n"]
        all_sessions = sql("select count(distinct session) AS n from sessions", store)[0]["n"]
        assert (expected, all_sessions) == (15, 22)  # the new-api copies thread on their own
        report = json.loads(runner.invoke(app, ["report", "--store", store, "--json"]).stdout)
        bucket = json.loads(runner.invoke(app, ["bucket", "--store", store, "--by", "session",
                                                "--json", "--no-explain"]).stdout)
        assert report["summary"]["sessions"] == len(bucket["groups"]) == expected
        out = runner.invoke(app, ["report", "--store", store]).stdout
        assert out.startswith(f"190 requests in {expected} sessions · ")


def test_diffs_title_is_whole_on_a_wide_screen(store: str, tmp_path: Path) -> None:
    out = runner.invoke(app, ["diff", "--all", "--store", store], env={"COLUMNS": "200"})
    first = out.stdout.splitlines()[0]
    assert first.startswith("119 pairs · ") and first.endswith(" pairs")
