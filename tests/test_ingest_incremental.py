"""A small ingest into a large store links and threads only what its requests can reach
(`store.load.relink`'s `added`), and the store it leaves is the store one ingest of every
log at once makes: the oracle is that store, built from a fresh file (whose ingest links
and threads every request), compared table by table as plain DuckDB reads them, and the
`report --json` of both.

The logs are hand-built: raw captures of interleaved agent sessions (`agent_captures`),
with and without a session header, split into files by session, by time, out of time
order; copies of calls in a second log (by response id, by body); a compaction and a
rewritten history (a fork) whose predecessor an earlier ingest stored; a Codex rollout
resumed in a second file (the same session id, a compaction after the resume)."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import duckdb
from agent_captures import write_agent_captures
from conftest import FIXTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from litellm_rows import spend_row
from test_store_runs import contents
from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths

runner = CliRunner()
TURNS = FIXTURES / "codex" / "handmade" / "turns"


def captured(tmp_path: Path, **options: Any) -> list[dict[str, Any]]:
    """The lines of `write_agent_captures`, parsed (time order)."""
    path = tmp_path / "all.jsonl"
    write_agent_captures(path, **options)
    return [json.loads(line) for line in path.read_text().splitlines()]


def write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def ingest(store: Path, *paths: Path) -> None:
    with Store.open(store) as st:
        result = ingest_paths([str(p) for p in paths], st)
    assert not result.failed


def report(store: Path) -> str:
    out = runner.invoke(app, ["report", "--store", str(store), "--json"])
    assert out.exit_code == 0, out.output
    return out.output


def assert_runs_make_one_ingest(tmp_path: Path, runs: list[list[Path]], *,
                                with_report: bool = False) -> dict[str, list[str]]:
    """Ingest `runs` one after another into one store, and every file of them at once into
    another: the same tables (and the same report); returns the tables."""
    inc, once = tmp_path / "inc" / "s.duckdb", tmp_path / "once" / "s.duckdb"
    inc.parent.mkdir(parents=True)
    once.parent.mkdir(parents=True)
    for paths in runs:
        ingest(inc, *paths)
    ingest(once, *(p for paths in runs for p in paths))
    tables = contents(once, timeless=True)
    assert contents(inc, timeless=True) == tables
    if with_report:
        assert report(inc) == report(once)
    return tables


def sessions_of(tables: dict[str, list[str]]) -> set[str]:
    return {ast.literal_eval(row)[1] for row in tables["sessions"]}


def test_a_new_session_in_a_later_ingest(tmp_path: Path) -> None:
    lines = captured(tmp_path, sessions=4, turns=4)
    last = [ln for ln in lines if "s3t" in ln["response"]["id"]]
    first = [ln for ln in lines if ln not in last]
    tables = assert_runs_make_one_ingest(tmp_path, [[write(tmp_path / "a.jsonl", first)],
                                                    [write(tmp_path / "b.jsonl", last)]],
                                         with_report=True)
    assert len(sessions_of(tables)) == 4


def test_the_next_turns_of_stored_sessions_continue_their_threads(tmp_path: Path) -> None:
    for with_ids in (False, True):
        lines = captured(tmp_path, sessions=3, turns=6, with_ids=with_ids)
        half = len(lines) // 2
        tables = assert_runs_make_one_ingest(
            tmp_path / str(with_ids),
            [[write(tmp_path / f"a{with_ids}.jsonl", lines[:half])],
             [write(tmp_path / f"b{with_ids}.jsonl", lines[half:])]])
        assert len(sessions_of(tables)) == 3  # the later file's turns joined them


def test_files_ingested_against_time_order(tmp_path: Path) -> None:
    lines = captured(tmp_path, sessions=3, turns=6)
    third = len(lines) // 3
    a, b, c = (write(tmp_path / f"{n}.jsonl", part) for n, part in
               (("a", lines[:third]), ("b", lines[third:2 * third]), ("c", lines[2 * third:])))
    tables = assert_runs_make_one_ingest(tmp_path, [[c], [a], [b]], with_report=True)
    assert len(sessions_of(tables)) == 3


def test_a_call_stored_by_an_earlier_ingest_logged_again(tmp_path: Path) -> None:
    lines = captured(tmp_path, sessions=2, turns=4)
    # LiteLLM's spend log of three of the calls: their response ids, no body
    by_id = write(tmp_path / "spend.jsonl", [
        {**spend_row("", 0, "deployment-1", ln["response"]["usage"]["prompt_tokens"], 0, 0,
                     model=ln["request"]["model"]),
         "request_id": ln["response"]["id"], "startTime": ln["timestamp"],
         "endTime": ln["timestamp"], "session_id": None, "custom_llm_provider": "openai"}
        for ln in lines[2:5]])
    stripped = [{**ln, "response": {k: v for k, v in ln["response"].items() if k != "id"}}
                for ln in lines[5:7]]
    by_body = write(tmp_path / "tap.jsonl", stripped)  # no response id: the same bodies
    assert_runs_make_one_ingest(
        tmp_path, [[write(tmp_path / "gw.jsonl", lines)], [by_id], [by_body]],
        with_report=True)
    with Store.open(tmp_path / "inc" / "s.duckdb", read_only=True) as st:
        assert st.duplicate_count() == 5  # each copy linked (the kept copy: gw.jsonl's)


def test_a_later_copy_kept_relinks_the_copies_only_a_stored_response_id_reaches(
        tmp_path: Path) -> None:
    # gw.jsonl logs every call with its response id; a spend log holds three of them under
    # that id (its usage is not theirs: the id alone joins them); a later capture of the
    # same three bodies without response ids, a.jsonl (first by name), joins gw's copies by
    # body and, of equal copies the first file's, is kept: every copy of those calls points
    # at it -- the spend rows too, which only gw's response ids reach (two keys away)
    lines = captured(tmp_path, sessions=2, turns=4)
    spend = write(tmp_path / "spend.jsonl", [
        {**spend_row("", 0, "deployment-1", ln["response"]["usage"]["prompt_tokens"] + 7, 0,
                     0, model=ln["request"]["model"]),
         "request_id": ln["response"]["id"], "startTime": ln["timestamp"],
         "endTime": ln["timestamp"], "session_id": None, "custom_llm_provider": "openai"}
        for ln in lines[2:5]])
    stripped = [{**ln, "response": {k: v for k, v in ln["response"].items() if k != "id"}}
                for ln in lines[2:5]]
    assert_runs_make_one_ingest(
        tmp_path, [[write(tmp_path / "gw.jsonl", lines)], [spend],
                   [write(tmp_path / "a.jsonl", stripped)]], with_report=True)
    con = duckdb.connect(str(tmp_path / "inc" / "s.duckdb"), read_only=True)
    links = con.execute(
        "SELECT r.source_file, r.source_line, k.source_file, k.source_line FROM requests r "
        "JOIN requests k ON k.id = r.duplicate_of ORDER BY 1, 2").fetchall()
    con.close()
    a, gw, sp = (str(tmp_path / n) for n in ("a.jsonl", "gw.jsonl", "spend.jsonl"))
    # gw's lines 3-5 and the spend log's 1-3 are the calls of a.jsonl's lines 1-3
    assert links == [(gw, 3 + n, a, 1 + n) for n in range(3)] + [
        (sp, 1 + n, a, 1 + n) for n in range(3)]


def test_a_copy_matched_by_a_usage_without_cache_fields(tmp_path: Path) -> None:
    # a capture without response ids, then LiteLLM's spend row of its second call (s0t1)
    # from a proxy that kept no usage object: its own request id, and cache fields unknown
    # as the capture's are, so the usage alone (prompt, output; cached and written None in
    # both) pairs it with the call, the nearest such one in time
    lines = captured(tmp_path, sessions=2, turns=4)
    stripped = [{**ln, "response": {k: v for k, v in ln["response"].items() if k != "id"}}
                for ln in lines]
    call = lines[1]
    usage = call["response"]["usage"]
    spend = write(tmp_path / "spend.jsonl", [
        {**spend_row("", 0, "deployment-1", usage["prompt_tokens"], 0, 0,
                     model=call["request"]["model"]),
         "request_id": "spend-1", "completion_tokens": usage["completion_tokens"],
         "total_tokens": usage["total_tokens"], "metadata": {}, "startTime": call["timestamp"],
         "endTime": call["timestamp"], "session_id": None, "custom_llm_provider": "openai"}])
    assert_runs_make_one_ingest(tmp_path, [[write(tmp_path / "gw.jsonl", stripped)], [spend]],
                                with_report=True)
    con = duckdb.connect(str(tmp_path / "inc" / "s.duckdb"), read_only=True)
    links = con.execute(
        "SELECT r.source_file, r.source_line, r.cached_tokens, k.source_file, k.source_line, "
        "k.cached_tokens FROM requests r JOIN requests k ON k.id = r.duplicate_of").fetchall()
    con.close()
    assert links == [(str(tmp_path / "spend.jsonl"), 1, None, str(tmp_path / "gw.jsonl"), 2,
                      None)]


def test_a_compaction_whose_predecessor_an_earlier_ingest_stored(tmp_path: Path) -> None:
    for with_ids in (False, True):
        lines = captured(tmp_path, sessions=3, turns=6, with_ids=with_ids,
                         compact_after={0: 3, 1: 4})
        cut = next(n for n, ln in enumerate(lines) if "s0t3" in ln["response"]["id"])
        assert_runs_make_one_ingest(tmp_path / str(with_ids),
                                    [[write(tmp_path / f"a{with_ids}.jsonl", lines[:cut])],
                                     [write(tmp_path / f"b{with_ids}.jsonl", lines[cut:])]])


def test_a_history_rewritten_after_the_stored_turns_forks_the_thread(tmp_path: Path) -> None:
    lines = captured(tmp_path, sessions=2, turns=5)
    fork = json.loads(json.dumps(lines[-1]))
    fork["request"]["messages"][-1]["content"] = "a retried tool result"
    fork["response"]["id"] = "chatcmpl-fork"
    fork["timestamp"] = "2026-03-02T10:00:00Z"
    tables = assert_runs_make_one_ingest(
        tmp_path, [[write(tmp_path / "a.jsonl", lines)], [write(tmp_path / "b.jsonl", [fork])]],
        with_report=True)
    assert any("'shared-prefix'" in row for row in tables["sessions"])


def test_a_codex_rollout_resumed_in_a_second_file(tmp_path: Path) -> None:
    rollout = next(TURNS.glob("rollout-*.jsonl")).read_text().splitlines(keepends=True)
    resume = next(n for n, line in enumerate(rollout) if n and '"session_meta"' in line)
    first, second = tmp_path / "rollout-a.jsonl", tmp_path / "rollout-b.jsonl"
    first.write_text("".join(rollout[:resume]))
    second.write_text("".join(rollout[resume:]))
    tables = assert_runs_make_one_ingest(tmp_path, [[first], [second]], with_report=True)
    assert sessions_of(tables) == {"0199b2c3-0000-7000-8000-00000000000b"}
    assert any("'compaction'" in row for row in tables["sessions"])


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(with_ids=st.booleans(), compact=st.booleans(), seed=st.integers(0, 1000),
       files=st.lists(st.integers(0, 3), min_size=24, max_size=24),
       copies=st.lists(st.integers(0, 23), max_size=4),
       order=st.permutations(range(5)))
def test_any_split_into_files_and_runs_stores_what_one_ingest_stores(
        tmp_path_factory: Any, with_ids: bool, compact: bool, seed: int, files: list[int],
        copies: list[int], order: list[int]) -> None:
    """24 calls of four sessions, each put in one of four files, some logged again in a
    fifth (a second log of the call); the five files ingested one run each, in any order."""
    tmp_path = tmp_path_factory.mktemp("split")
    lines = captured(tmp_path, sessions=4, turns=6, with_ids=with_ids, seed=seed,
                     compact_after={1: 3} if compact else None)
    parts: list[list[dict[str, Any]]] = [[] for _ in range(5)]
    for line, f in zip(lines, files, strict=True):
        parts[f].append(line)
    parts[4] = [lines[n] for n in sorted(set(copies))]
    paths = [write(tmp_path / f"{n}.jsonl", part) for n, part in enumerate(parts) if part]
    assert_runs_make_one_ingest(tmp_path, [[paths[n]] for n in order if n < len(paths)])


def test_a_response_chain_continued_from_a_session_an_earlier_ingest_stored(
        tmp_path: Path) -> None:
    # the chain's first call carries a session header (an explicit session); the next two
    # name their predecessor only (`previous_response_id`: threading's rule 2), and come in
    # a later log: they join the header's session
    lines = [json.loads(line) for line in
             (FIXTURES / "raw" / "session_ids.jsonl").read_text().splitlines()]
    lines[7]["request"]["headers"]["x-session-id"] = "trip"
    tables = assert_runs_make_one_ingest(
        tmp_path, [[write(tmp_path / "a.jsonl", lines[:8])],
                   [write(tmp_path / "b.jsonl", lines[8:10])]], with_report=True)
    assert sum("'trip'" in row for row in tables["sessions"]) == 3


def test_a_session_key_spelling_a_threaded_sessions_name(tmp_path: Path) -> None:
    # a log's session header names the session threading gives another log's calls (``t-``
    # + the first call's id): one session, its turns numbered together, also when a later
    # ingest adds a turn to the threaded calls only
    lines = captured(tmp_path, sessions=2, turns=3)
    threaded = [ln for ln in lines if "s0t" in ln["response"]["id"]]
    probe = tmp_path / "probe.duckdb"
    ingest(probe, write(tmp_path / "probe.jsonl", threaded[:1]))
    with Store.open(probe, read_only=True) as st:
        (name,) = set(st.session_of().values())
    keyed = [{**ln, "headers": {"x-session-id": name}} for ln in lines if ln not in threaded]
    tables = assert_runs_make_one_ingest(
        tmp_path, [[write(tmp_path / "a.jsonl", threaded[:2]),
                    write(tmp_path / "k.jsonl", keyed)],
                   [write(tmp_path / "b.jsonl", threaded[2:])]], with_report=True)
    assert sessions_of(tables) == {name}
    assert sorted(ast.literal_eval(row)[2] for row in tables["sessions"]) == list(range(6))
