"""`--workers N` (issue 11): per-session work in worker processes gives what one process
gives, byte for byte, and a request a worker cannot render is the same counted skip.

The oracle is the command itself with `--workers 1` (the code path that existed before
the pool, unchanged); every comparison also checks that a pool really ran (a
`ProcessPoolExecutor` was started), so a fallback to one process cannot pass unseen.
No timing is asserted.
"""

from __future__ import annotations

import json
import operator
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from prefixscope import parallel
from prefixscope.analyses.diff import diff_sessions
from prefixscope.analyses.segments import segments_store
from prefixscope.cli.main import app
from prefixscope.parallel import Pool, WorkerError, effective_workers, runs
from prefixscope.prompt import RenderOptions
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths
from prefixscope.views.diffed import diff_json
from prefixscope.views.json import segments_json

# not in the fast loop (`pytest -m "not slow"`): every command twice, with one process and two
pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
REAL = HERE / "data" / "real"
# real logs with bodies and threaded sessions: five formats, three tokenizer families
# (OpenHands, the largest, is left out to keep the suite quick; Mooncake has no bodies)
REAL_LOGS = [REAL / d for d in ("swe-agent", "aider", "gemini-cli", "langfuse",
                                "mini-swe-agent")]
SAMPLE_LOGS = HERE.parent / "sample_logs"
runner = CliRunner()


def spy_pools(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[int]:
    """The worker counts of every process pool `module` starts while the test runs."""
    started: list[int] = []
    real_executor = module.ProcessPoolExecutor

    def spy(workers: int, **kwargs: object) -> Any:
        started.append(workers)
        return real_executor(workers, **kwargs)

    monkeypatch.setattr(module, "ProcessPoolExecutor", spy)
    return started


@pytest.fixture
def pools(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The worker counts of every process pool started while the test runs."""
    return spy_pools(monkeypatch, parallel)


def cli_json(*args: str | Path) -> str:
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


def ingested(tmp: pytest.TempPathFactory, name: str, logs: list[Path]) -> Path:
    path = tmp.mktemp("workers") / f"{name}.duckdb"
    with Store.open(path) as store:
        result = ingest_paths([str(p) for p in logs], store)
    assert result.ingested > 0
    return path


@pytest.fixture(scope="module")
def real_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ingested(tmp_path_factory, "real", REAL_LOGS)


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ingested(tmp_path_factory, "sample", [SAMPLE_LOGS])


# -- the pool itself -------------------------------------------------------------------


def test_runs_cut_whole_units_into_about_equal_work():
    # hand arithmetic: total 8, two parts of ~4: [5] reaches 4 first, the rest is one run
    assert runs([5, 1, 1, 1], 2) == [range(0, 1), range(1, 4)]
    assert runs([1, 1, 1, 1], 2) == [range(0, 2), range(2, 4)]
    assert runs([2, 2, 2], 5) == [range(0, 1), range(1, 2), range(2, 3)]
    assert runs([3], 4) == [range(0, 1)]
    assert runs([], 3) == []


@given(st.lists(st.integers(0, 50), max_size=40), st.integers(1, 12))
def test_runs_cover_every_unit_once_in_order(weights: list[int], parts: int):
    cut = runs(weights, parts)
    assert [i for r in cut for i in r] == list(range(len(weights)))
    assert all(len(r) for r in cut) and len(cut) <= max(parts, 1)


def test_default_workers_stay_in_process_below_the_minimum(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(parallel, "cores", lambda: 8)
    assert effective_workers(None, 99, auto_minimum=100) == 1
    assert effective_workers(None, 100, auto_minimum=100) == 8
    assert effective_workers(None, 3, auto_minimum=1) == 3  # never more than the partitions
    assert effective_workers(4, 2, auto_minimum=100) == 2  # asked for: used whatever the size
    assert effective_workers(1, 500, auto_minimum=100) == 1


def test_pool_results_come_back_in_task_order(pools: list[int]):
    done: list[int] = []
    with Pool(2) as pool:
        assert pool.map(operator.neg, [3, -1, 7, 0, 5], weights=[1, 2, 3, 4, 5],
                        progress=done.append) == [-3, 1, -7, 0, -5]
    assert pools == [2] and done[-1] == 15 and len(done) == 5


def test_one_worker_runs_in_process_without_a_pool(pools: list[int]):
    with Pool(1) as pool:
        assert pool.map(operator.neg, [1, 2]) == [-1, -2]
    assert pools == []


def test_a_task_error_is_raised_in_the_parent(pools: list[int]):
    with Pool(2) as pool, pytest.raises(ValueError, match="invalid literal"):
        pool.map(int, ["1", "x"])


# -- the commands: same bytes with one process or two ----------------------------------


@pytest.mark.parametrize("command", [["diff", "--all"], ["segments"], ["report"]])
def test_sample_logs_json_is_the_same_with_two_workers(command: list[str], sample_store: Path,
                                                       pools: list[int]):
    one = cli_json(*command, "--store", sample_store, "--json", "--workers", "1")
    assert pools == []
    two = cli_json(*command, "--store", sample_store, "--json", "--workers", "2")
    # report: the diff's pool, then its replays' (the same pool, forked: parallel.Pool)
    assert pools[:1] == [2] and set(pools) == {2}
    assert one == two


def test_real_diff_and_segments_are_the_same_with_two_workers(real_store: Path,
                                                              pools: list[int]):
    options = RenderOptions()
    seen: list[tuple[int, int]] = []
    with Store.open(real_store, read_only=True) as store:
        diffs = [json.dumps(diff_json(diff_sessions(
            store, None, options, workers=w,
            progress=(lambda done, total: seen.append((done, total))) if w == 2 else None)))
            for w in (1, 2)]
        census = [json.dumps(segments_json(segments_store(store, (), options=options,
                                                          workers=w), ()))
                  for w in (1, 2)]
        threaded = len(store.session_pairs(once=True))
    assert pools == [2, 2]
    # the parent's progress bar moves as the workers' runs finish, up to every pair
    assert seen[-1] == (threaded, threaded) and seen == sorted(seen)
    totals = json.loads(diffs[0])["totals"]
    assert totals["pairs"] > 0 and totals["pairs"] + totals["skipped"] == threaded
    assert diffs[0] == diffs[1]
    assert census[0] == census[1]


def test_the_census_taken_in_a_forked_process_is_this_ones(real_store: Path):
    """report's census beside the base sweeps (`evidence._census_aside`: a forked process
    opening the same file, reading the bodies held here) is the census taken here, held
    bodies or not."""
    from prefixscope.findings.evidence import _census, _census_aside
    from prefixscope.findings.values import ReportOptions

    options = ReportOptions()
    with Store.open(real_store, read_only=True) as store:
        here = json.dumps(segments_json(list(_census(store, options)), ()))
        for hold in (False, True):
            if hold:
                assert store.hold_stored()
            aside = _census_aside(store, options)
            assert aside is not None
            assert json.dumps(segments_json(list(aside()), ())) == here
        store.let_go_stored()


def test_real_report_is_the_same_with_two_workers(real_store: Path, pools: list[int]):
    one = cli_json("report", "--store", real_store, "--json", "--workers", "1")
    assert pools == []
    two = cli_json("report", "--store", real_store, "--json", "--workers", "2")
    assert pools[:1] == [2] and set(pools) == {2}  # the diff's pool, then the replays'
    assert one == two


def test_unrenderable_requests_are_the_same_counted_skips_in_a_worker(pools: list[int]):
    logs = [FIXTURES / "raw" / "claude_code_capture.jsonl",
            FIXTURES / "raw" / "openai_chat_capture.jsonl"]
    args = ["diff", "--all", *logs, "--gateway", "anthropic-to-openai", "--json"]
    one = cli_json(*args, "--workers", "1")
    two = cli_json(*args, "--workers", "2")
    assert pools == [2]
    assert one == two
    totals = json.loads(two)["totals"]
    # hand count: each capture is one session of three requests (two pairs); the
    # openai-chat capture's cannot take an anthropic-to-openai gateway, Claude Code's can
    assert totals["skipped_reasons"] == {
        "cannot render: gateway anthropic-to-openai needs an anthropic-messages body; a "
        "request is openai-chat": 2}
    assert totals["pairs"] == 2


def test_a_worker_that_dies_is_one_error_not_a_hang(pools: list[int]):
    with Pool(2) as pool, pytest.raises(WorkerError, match="a worker process died"):
        pool.map(os._exit, [3])


def test_simulate_replays_in_forked_processes_give_the_one_process_json(
        sample_store: Path, monkeypatch: pytest.MonkeyPatch):
    started = spy_pools(monkeypatch, parallel)  # simulate's replays use parallel's pool
    eviction = str(SAMPLE_LOGS / "vllm-agents-eviction.jsonl.gz")
    args = ["simulate", eviction, "--fit", "--capacity-curve", "1000,4000,16000", "--json",
            "--per-request"]
    one = cli_json(*args, "--workers", "1")
    assert started == []
    two = cli_json(*args, "--workers", "2")
    assert started and set(started) == {2}
    assert one == two
    assert json.loads(one)["fit"]["capacity_tokens"] is not None
