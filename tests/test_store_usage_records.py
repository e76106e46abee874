"""`Store.usage_records` reads a read-only store once (report asks eight times: 0.66 s of
CPU each at 2 GiB of Claude Code transcripts, docs/scale.md). That rests on the file not
changing while the read-only connection is open: no other process can open it to write,
and the store itself writes nothing. A writable store reads the table every time."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from conftest import ROOT

from prefixscope.store import Store
from prefixscope.store.load import ingest_paths

FOLDER = ROOT / "tests" / "data" / "real" / "claude-code-jsonl"


def _store(tmp_path: Path) -> Path:
    path = tmp_path / "s.duckdb"
    st = Store.open(path)
    ingest_paths([str(FOLDER)], st)
    st.close()
    return path


def test_a_read_only_stores_records_are_the_tables_each_time_in_a_list_of_their_own(
        tmp_path: Path) -> None:
    path = _store(tmp_path)
    writable = Store.open(path)
    fresh = writable.usage_records()  # read from the table (the writable store keeps none)
    writable.close()
    st = Store.open(path, read_only=True)
    first = st.usage_records()
    first.clear()  # a caller's list is its own
    second = st.usage_records()
    assert fresh and second == fresh
    assert st.usage_records() == fresh
    st.close()


def test_no_other_process_can_write_the_file_while_a_read_only_store_is_open(
        tmp_path: Path) -> None:
    path = _store(tmp_path)
    st = Store.open(path, read_only=True)
    try:
        done = subprocess.run([sys.executable, "-c", "import duckdb, sys; "
                               "duckdb.connect(sys.argv[1]).execute('DELETE FROM requests')",
                               str(path)], capture_output=True, text=True, check=False)
        assert done.returncode != 0
        assert "lock" in done.stderr.lower()
    finally:
        st.close()


def test_a_writable_store_reads_its_records_after_each_write(tmp_path: Path) -> None:
    st = Store.open(_store(tmp_path))
    before = st.usage_records()
    request = next(iter(st.get_many([before[0].id]).values()))
    st.add([replace(request, id="another-call", native_id="another-call")])
    after = st.usage_records()
    assert len(after) == len(before) + 1
    assert "another-call" in {r.id for r in after}
    st.close()


def test_a_value_a_column_repeats_is_one_str_however_many_records_hold_it(
        tmp_path: Path) -> None:
    """A Codex call's record held ~530 bytes of strs its neighbours hold too (its model,
    session, file, project...): each distinct value is one object, so memory follows the
    distinct values, not the calls."""
    st = Store.open(_store(tmp_path), read_only=True)
    records = st.usage_records()
    for name in ("endpoint", "model", "client", "user", "channel", "source_format",
                 "session", "source_file", "project", "backend", "usage_semantics"):
        values = [getattr(r, name) for r in records]
        assert len(values) > len(set(values))  # a value held by several records
        assert len({id(v) for v in values}) == len(set(values)), name
    st.close()


def test_the_records_are_the_same_whatever_the_batch_they_are_fetched_in(
        tmp_path: Path, monkeypatch) -> None:
    """Fetched a row at a time, three, or in one batch: the same records, in the same
    order; a predecessor's or a kept copy's id is its own record's str where that record
    came first (one str per id)."""
    from prefixscope.store import store as store_module

    path = _store(tmp_path)
    got = []
    for batch in (1, 3, 1 << 20):
        monkeypatch.setattr(store_module, "_RECORDS_BATCH", batch)
        st = Store.open(path)
        got.append(st.usage_records())
        st.close()
    assert len(got[0]) > 3 and got[0] == got[1] == got[2]
    records = got[0]
    own = {r.id: r.id for r in records}
    linked = [r for r in records if r.prev_id is not None]
    assert linked
    seen: set[str] = set()
    for r in records:
        for other in (r.prev_id, r.duplicate_of):
            if other is not None and other in seen:
                assert other is own[other]
        seen.add(r.id)


def test_a_read_only_stores_links_are_the_tables_in_its_records_own_strs(
        tmp_path: Path) -> None:
    """Once a read-only store holds its records, `session_of` and `session_pairs` give
    what a writable store reads from the tables (the same pairs in the same order), each
    id and session the str object of its request's record."""
    path = _store(tmp_path)
    writable = Store.open(path)
    want_of, want_pairs = writable.session_of(), writable.session_pairs(once=True)
    writable.close()
    st = Store.open(path, read_only=True)
    records = st.usage_records()
    got_of, got_pairs = st.session_of(), st.session_pairs(once=True)
    assert want_pairs and got_pairs == want_pairs and got_of == want_of
    assert list(got_of) == list(want_of)
    own = {r.id: r for r in records}
    for rid, session in got_of.items():
        assert rid is own[rid].id and session is own[rid].session
    for a, b, session, _ in got_pairs:
        assert a is own[a].id and b is own[b].id and session is own[b].session
    st.close()
