"""A pool's worker hands its freed heap back to the system after a task only past what its
next task reuses (`parallel.WORKER_KEEPS_FREED`): handed back after every task, the next
one faulted the same pages in again (system CPU). The oracle: the rule itself on stated
free sizes (glibc's allocator faked), and the tasks' results as in this process."""

from __future__ import annotations

import pytest
from conftest import ROOT

from prefixscope import parallel
from prefixscope.parallel import WORKER_KEEPS_FREED, Pool, release_freed_memory


@pytest.fixture
def trims(monkeypatch):
    """The calls of glibc's malloc_trim, recorded instead of made."""
    calls: list[int] = []
    monkeypatch.setattr(parallel, "_malloc_trim", lambda: calls.append)
    return calls


@pytest.mark.parametrize(("free", "keep", "trimmed"), [
    (10, 0, True),  # nothing kept: always handed back (the parent before a fork)
    (0, 0, True),
    (100, 100, False),  # up to `keep` free: kept for the next task
    (99, 100, False),
    (101, 100, True),  # past it: handed back
    (None, 100, True),  # the heap unreadable (another libc): handed back, as before
])
def test_freed_heap_is_kept_up_to_the_bound(monkeypatch, trims, free, keep, trimmed):
    monkeypatch.setattr(parallel, "_free_heap", lambda: free)
    release_freed_memory(keep=keep)
    assert trims == ([0] if trimmed else [])


def test_nothing_is_trimmed_where_there_is_no_malloc_trim(monkeypatch):
    monkeypatch.setattr(parallel, "_malloc_trim", lambda: None)
    release_freed_memory()  # (no error)
    release_freed_memory(keep=WORKER_KEEPS_FREED)


def test_free_heap_is_a_byte_count_or_unknown():
    free = parallel._free_heap()
    assert free is None or free >= 0


def _square(x: int) -> int:
    return x * x


def test_a_forked_pool_gives_the_results_of_this_process():
    tasks = list(range(40))
    with Pool(2, fork=True) as pool:
        assert pool.map(_square, tasks) == [x * x for x in tasks]


def test_the_parent_hands_duckdbs_free_pages_back_and_a_worker_does_not(monkeypatch, trims):
    purges: list[None] = []
    monkeypatch.setattr(parallel, "_duckdb_purge", lambda: lambda: purges.append(None))
    monkeypatch.setattr(parallel, "_free_heap", lambda: 10 * WORKER_KEEPS_FREED)
    release_freed_memory()  # (the parent, before a fork)
    assert purges == [None] and trims == [0]
    release_freed_memory(keep=WORKER_KEEPS_FREED)  # (a worker, after a task)
    assert purges == [None] and trims == [0, 0]


def test_duckdbs_allocator_is_purged_only_where_duckdb_is_loaded(monkeypatch):
    import sys

    import duckdb

    con = duckdb.connect()
    want = con.execute("SELECT sum(i) FROM range(1000000) t(i)").fetchall()
    purge = parallel._duckdb_purge()
    if sys.platform == "linux":  # (DuckDB links jemalloc on Linux only)
        assert purge is not None
    if purge is not None:
        purge()
        purge()
    assert con.execute("SELECT sum(i) FROM range(1000000) t(i)").fetchall() == want
    monkeypatch.delitem(sys.modules, "_duckdb")
    assert parallel._duckdb_purge() is None


def test_the_report_hands_back_what_it_freed_before_it_waits_out_the_walk(
        monkeypatch, tmp_path):
    # what this process's queries freed while the workers walk (DuckDB's allocator keeps
    # it) goes back before it waits on the walk
    import prefixscope as ps
    from prefixscope.analyses import onepass
    from prefixscope.api.handle import store_of
    from prefixscope.api.scope import reading
    from prefixscope.findings import evidence
    from prefixscope.findings.evidence import ReportOptions, gather

    events: list[str] = []
    real_release, real_result = evidence.release_freed_memory, onepass.PendingPass.result

    def release(keep: int = 0) -> None:
        events.append(f"release {keep}")
        real_release(keep)

    def result(self, store):
        events.append("walk results")
        return real_result(self, store)

    monkeypatch.setattr(evidence, "release_freed_memory", release)
    monkeypatch.setattr(onepass.PendingPass, "result", result)
    ps.ingest(ROOT / "sample_logs", tmp_path / "s.duckdb")
    with store_of(tmp_path / "s.duckdb") as handle, reading(handle, None) as st:
        gather(st, ReportOptions(), workers=2)
    assert events[:2] == ["release 0", "walk results"]
