"""The distributed runner (`diff --all --runner ray`): export's pairs.parquet, the pure
per-session stage, the Ray run and its failures. The oracle is always the local runner
(`analyses.diff`) over the same pairs: the distributed path must give its values."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import FIXTURES, ROOT
from factories import anthropic_body, conversation, make_request
from typer.testing import CliRunner

from prefixscope.analyses.diff import (
    BlockSizes,
    PairRef,
    diff_pairs,
    diff_sessions,
    resolve_block_sizes,
)
from prefixscope.cli.main import app
from prefixscope.distributed.stage import DiffSetup, diff_stage, report_from_tables
from prefixscope.model.redaction import Redactor
from prefixscope.prompt import RenderOptions
from prefixscope.store import Store
from prefixscope.store.export import pairs_schema, request_json

# not in the fast loop (`pytest -m "not slow"`): a local Ray instance and whole-store exports
pytestmark = pytest.mark.slow

runner = CliRunner()
SAMPLES = [str(ROOT / "sample_logs" / "langfuse-claude-code.events_full.jsonl"),
           str(ROOT / "sample_logs" / "bifrost-mcp-keyorder.jsonl")]


def _ingest(store: str = "s.duckdb") -> str:
    result = runner.invoke(app, ["ingest", *SAMPLES, "--store", store, "-q"])
    assert result.exit_code == 0, result.output
    return store


def _by_session(table: pa.Table) -> list[pa.Table]:
    sessions = dict.fromkeys(table.column("session").to_pylist())
    return [table.filter(pa.compute.equal(table["session"], s)) for s in sessions]


def test_export_writes_every_diff_all_pair_once_with_its_requests_whole():
    store = _ingest()
    assert runner.invoke(app, ["export", "--parquet", "out", "--store", store]).exit_code == 0
    rows = pq.read_table("out/pairs.parquet").to_pylist()
    with Store.open(Path(store), read_only=True) as st:
        expected = st.session_pairs(None, once=True)
        assert [(r["a_id"], r["b_id"], r["session"], r["compaction"]) for r in rows] == expected
        assert [r["pair"] for r in rows] == list(range(len(expected)))
        # a request travels once per session: A is written only where the chain breaks
        for prev, row in zip([None, *rows], rows, strict=False):
            chained = prev is not None and (prev["session"], prev["b_id"]) == \
                (row["session"], row["a_id"])
            assert (row["a_request"] is None) == chained
            if row["a_request"] is not None:
                assert row["a_request"] == request_json(st.get(row["a_id"]))
            assert row["b_request"] == request_json(st.get(row["b_id"]))
    # 7 sessions; two of them branch once (a turn follows an earlier one than the last)
    assert len(rows) == 99 and len({r["session"] for r in rows}) == 7
    assert sum(r["a_request"] is not None for r in rows) == 9


def test_the_stage_per_session_gives_the_local_runners_report():
    store = _ingest()
    assert runner.invoke(app, ["export", "--parquet", "out", "--store", store]).exit_code == 0
    options = RenderOptions()
    with Store.open(Path(store), read_only=True) as st:
        local = diff_sessions(st, None, options)
        sizes = resolve_block_sizes(None, st)
    setup = DiffSetup(options, sizes, 40, Redactor())
    # sessions in reverse and rows shuffled within each: the order must come from `pair`
    parts = [diff_stage(t.take(list(range(t.num_rows))[::-1]), setup)
             for t in _by_session(pq.read_table("out/pairs.parquet"))][::-1]
    report = report_from_tables(parts, options, sizes)
    assert report == local
    assert (report.totals.pairs, report.totals.lost_tokens) == (99, 103376)


def _pairs_table(sessions: dict[str, list]) -> tuple[pa.Table, list[PairRef]]:
    rows, refs = [], []
    for session, requests in sessions.items():
        for i, (a, b) in enumerate(zip(requests, requests[1:], strict=False)):
            rows.append({"pair": len(rows), "session": session, "a_id": a.id, "b_id": b.id,
                         "compaction": False,
                         "a_request": request_json(a) if i == 0 else None,
                         "b_request": request_json(b)})
            refs.append(PairRef(a, b, session, False))
    return pa.Table.from_pylist(rows, schema=pairs_schema()), refs


def test_skipped_pairs_are_counted_per_reason_in_first_seen_order_across_sessions():
    def chat(rid: str, minutes: int, **kw) -> object:
        return make_request(rid, minutes=minutes, **kw)

    anthropic = [anthropic_body(conversation(n)) for n in (1, 2, 3)]
    openai = {"messages": [{"role": "user", "content": "hi"}]}
    # s1: a body the gateway cannot convert, then a request without a body;
    # s2: the reverse order; the report lists the reasons as s1 met them
    sessions = {
        "s1": [chat("a1", 0, body=anthropic[0]), chat("a2", 1, body=anthropic[1]),
               chat("a3", 2, body=openai, endpoint="openai-chat"), chat("a4", 3, body=None)],
        "s2": [chat("b1", 0, body=anthropic[0]), chat("b2", 1, body=None),
               chat("b3", 2, body=anthropic[2]), chat("b4", 3, body=openai,
                                                      endpoint="openai-chat")],
    }
    table, refs = _pairs_table(sessions)
    options = RenderOptions(gateway="anthropic-to-openai")
    sizes = BlockSizes(16)
    local = diff_pairs(refs, options, block_size=sizes)
    setup = DiffSetup(options, sizes, 40, Redactor())
    report = report_from_tables([diff_stage(t, setup) for t in _by_session(table)][::-1],
                                options, sizes)
    assert report == local
    assert list(report.totals.skipped_reasons) == [
        "cannot render: gateway anthropic-to-openai needs an anthropic-messages body; "
        "a request is openai-chat",
        "a request has no body in the log"]
    assert report.totals.skipped == 5 and report.totals.pairs == 1


def test_ray_runner_prints_the_local_runners_json(monkeypatch):
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    store = _ingest()
    assert runner.invoke(app, ["export", "--parquet", "out", "--store", store]).exit_code == 0
    local = runner.invoke(app, ["diff", "--all", "--store", store, "--json"])
    assert local.exit_code == 0
    import ray

    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1")
    try:
        distributed = runner.invoke(app, ["diff", "--all", "--store", store, "--json",
                                          "--runner", "ray", "--parquet-in", "out",
                                          "--parquet-out", "results"])
    finally:
        ray.shutdown()
    assert distributed.exit_code == 0, distributed.output
    assert distributed.stdout == local.stdout
    assert json.loads(distributed.stdout)["totals"]["pairs"] == 99
    written = pq.read_table("results")
    assert written.num_rows == 99 and sorted(written.column("pair").to_pylist()) == \
        list(range(99))


def test_without_ray_the_runner_says_how_to_install_it_in_one_line(monkeypatch):
    store = _ingest()
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    result = runner.invoke(app, ["diff", "--all", "--store", store, "--runner", "ray"])
    assert result.exit_code == 1
    assert result.stderr == ("error: --runner ray needs Ray Data (ray is not installed): "
                             "pip install 'prefixscope[ray]'\n")


def test_ray_runner_options_need_diff_all_and_a_new_output_directory():
    store = _ingest()
    for args in (["--session", "x", "--runner", "ray"], ["--all", "--parquet-out", "r"],
                 ["--all", "--parquet-in", "out"]):
        result = runner.invoke(app, ["diff", *args, "--store", store])
        assert result.exit_code == 2 and result.stderr.count("\n") == 1, args
    Path("full").mkdir()
    Path("full/old.parquet").write_bytes(b"")
    result = runner.invoke(app, ["diff", "--all", "--store", store, "--runner", "ray",
                                 "--parquet-out", "full"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: --parquet-out ") and "must be a new or empty " \
        "directory" in result.stderr
    result = runner.invoke(app, ["diff", "--all", "--store", store, "--runner", "ray",
                                 "--parquet-in", "nowhere"])
    assert result.exit_code == 1 and "no pairs.parquet in " in result.stderr


def test_a_store_without_pairs_gives_the_local_empty_report_without_starting_ray():
    log = Path("one.jsonl")
    log.write_text((FIXTURES / "raw" / "openai_chat_capture.jsonl").read_text().splitlines()[0])
    assert runner.invoke(app, ["ingest", str(log), "--store", "s.duckdb", "-q"]).exit_code == 0
    local = runner.invoke(app, ["diff", "--all", "--store", "s.duckdb", "--json"])
    distributed = runner.invoke(app, ["diff", "--all", "--store", "s.duckdb", "--json",
                                      "--runner", "ray", "--parquet-out", "results"])
    assert distributed.exit_code == 0 and distributed.stdout == local.stdout
    assert json.loads(local.stdout)["totals"]["pairs"] == 0
    assert pq.read_table("results").num_rows == 0


def test_report_on_ray_prints_the_local_runners_json(monkeypatch):
    """report's per-session stage as Ray tasks (`distributed.report_runner`): the same
    document, byte for byte, as the local walk (one process) and the diff workers."""
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    store = _ingest()
    local = runner.invoke(app, ["report", "--store", store, "--json", "--workers", "1"])
    assert local.exit_code == 0, local.output
    import ray

    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1")
    try:
        distributed = runner.invoke(app, ["report", "--store", store, "--json",
                                          "--runner", "ray"])
    finally:
        ray.shutdown()
    assert distributed.exit_code == 0, distributed.output
    assert distributed.stdout == local.stdout
    assert json.loads(distributed.stdout)["findings"]


def test_report_without_ray_says_how_to_install_it_in_one_line(monkeypatch):
    store = _ingest()
    monkeypatch.setitem(sys.modules, "ray", None)
    result = runner.invoke(app, ["report", "--store", store, "--runner", "ray"])
    assert result.exit_code == 1
    assert result.stderr == ("error: --runner ray needs Ray Data (ray is not installed): "
                             "pip install 'prefixscope[ray]'\n")


def test_what_ray_prints_while_it_runs_goes_to_stderr(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    """A raylet's warning reaches the driver's stdout even with log_to_driver=False (seen
    in CI: "WARNING: 8 PYTHON worker processes have been started…" ahead of the JSON);
    inside a Ray session stdout is stderr, so the command's data stays alone there."""
    from prefixscope.distributed.ray_runner import ray_session

    class NoisyRay:
        running = False

        def is_initialized(self) -> bool:
            return self.running

        def init(self, **_: object) -> None:
            self.running = True
            print("(raylet) WARNING: worker processes started")

        def shutdown(self) -> None:
            print("(raylet) shutting down")
            self.running = False

    ray = NoisyRay()
    with ray_session(ray):
        print("(raylet) WARNING: while the tasks run")
    print("the data")
    out, err = capsys.readouterr()
    assert out == "the data\n"
    assert err.count("(raylet)") == 3 and not ray.running
