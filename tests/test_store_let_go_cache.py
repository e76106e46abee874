"""A read-only store lets go of the blocks DuckDB has read (`Store.let_go_cache`: its
connection closed and opened again) and reads the same afterwards, sealed and locked as
`Store.open` left it; a write that got in while no connection held the file is an error,
never a read of the changed file. A child forked while the store is unconnected
(`Store.unconnected`) reads through a database of its own and lets go of it, never of a
copy of its parent's. A store being written does the same between two transactions
(`Store.let_go_written`: an ingest, before its session threading), and writes on.

The oracles: the same reads before letting go (every request by id and in log order, every
part, the usage records), DuckDB's own count of the memory its tables' blocks take
(``duckdb_memory()``), and DuckDB's refusals of what the sealed connection may not do.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import ROOT

from prefixscope.store import Store, StoreError, reader
from prefixscope.store import store as store_module
from prefixscope.store.load import ingest_paths


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cache") / "s.duckdb"
    with Store.open(path) as store:
        ingest_paths([str(ROOT / "sample_logs")], store)
    return path


def _reads(store: Store) -> dict[str, Any]:
    ids = [r.id for r in store.iter_requests()]
    hashes = sorted({h for _, layout in store.iter_layouts() if layout
                     for hs in layout.values() for h in hs})
    return {"by_id": list(store.iter_ids(ids[::-1], batch=5)),
            "in_order": list(store.iter_requests(batch=7)),
            "parts": store.parts_text(hashes), "records": store._read_usage_records()}


def _table_blocks(store: Store) -> int:
    """Bytes of the store's blocks DuckDB holds in memory."""
    return store.run("SELECT memory_usage_bytes FROM duckdb_memory() "
                     "WHERE tag = 'BASE_TABLE'")[0][0]


def test_the_reads_after_letting_go_are_the_reads_before_and_the_blocks_are_gone(stored):
    with Store.open(stored, read_only=True) as store:
        want = _reads(store)
        store.hold_stored()  # its count reads the bodies' and parts' columns whole
        held = _table_blocks(store)
        store.let_go_stored()
        store.let_go_cache()
        assert _table_blocks(store) < held
        assert _reads(store) == want


def test_the_connection_opened_again_is_sealed_and_locked(stored, tmp_path: Path):
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret")
    out = tmp_path / "out"
    out.mkdir()
    with Store.open(stored, read_only=True, writes_into=out) as store:
        store.let_go_cache()
        with pytest.raises(duckdb.PermissionException):
            store.run(f"SELECT content FROM read_text('{secret}')")
        with pytest.raises(duckdb.Error, match="the configuration has been locked"):
            store.run("SET enable_external_access = true")
        store.run(f"COPY (SELECT id FROM requests) TO '{out / 'ids.csv'}'")
        with pytest.raises(duckdb.PermissionException):
            store.run(f"COPY (SELECT id FROM requests) TO '{tmp_path / 'elsewhere.csv'}'")
    assert sorted(p.name for p in out.iterdir()) == ["ids.csv"]


def _a_writer_in_the_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    """DuckDB's `connect` made to let a writer take the file first, in the gap (no process
    holds it), write to it and close, before the connection asked for."""
    connect = duckdb.connect

    def writer_first(database: str, **kwargs: Any) -> duckdb.DuckDBPyConnection:
        con = connect(database)
        con.execute("UPDATE requests SET model = 'changed'")
        con.close()
        return connect(database, **kwargs)

    monkeypatch.setattr(store_module.duckdb, "connect", writer_first)


def _unconnected_a_while(store: Store) -> None:
    with store.unconnected():
        pass


@pytest.mark.parametrize("gap", [Store.let_go_cache, _unconnected_a_while])
def test_a_write_between_the_connections_is_an_error_not_a_read_of_it(
        stored, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gap: Any):
    path = tmp_path / "w.duckdb"
    path.write_bytes(stored.read_bytes())
    store = Store.open(path, read_only=True)
    _a_writer_in_the_gap(monkeypatch)
    with pytest.raises(StoreError, match="was written while it was being read"):
        gap(store)


def test_a_writable_store_keeps_its_connection(stored, tmp_path: Path):
    path = tmp_path / "w.duckdb"
    path.write_bytes(stored.read_bytes())
    with Store.open(path) as store:
        con = store.con
        store.let_go_cache()
        assert store.con is con


def test_a_store_keeps_its_blocks_while_they_take_no_more_than_it_keeps(stored):
    with Store.open(stored, read_only=True) as store:
        want = _reads(store)
        con, held = store.con, _table_blocks(store)
        assert held > 0
        assert store.let_go_cache(keep=held) is False
        assert store.con is con and _table_blocks(store) == held
        assert store.let_go_cache(keep=held - 1) is True
        assert store.con is not con and _table_blocks(store) < held
        assert _reads(store) == want


def test_another_connection_of_the_process_reads_on_and_so_does_the_store(stored):
    with Store.open(stored, read_only=True) as store:
        want = _reads(store)
        other = reader(store.file)
        try:
            con = store.con
            assert store.let_go_cache() is False  # the database stays: nothing to let go
            assert store.con is con
            assert _reads(store) == want
            assert _reads(other) == want
        finally:
            store_module._READERS.pop(store.file).close()


def test_a_forked_childs_copy_keeps_the_parents_connection(stored):
    with Store.open(stored, read_only=True) as store:
        want = _reads(store)
        pid = os.fork()
        if pid == 0:  # the child: its copy shares the parent's database
            code = 0
            try:
                store.let_go_cache()
                code = 0 if _reads(store) == want else 4
            except BaseException:
                code = 3
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        assert _reads(store) == want


def _in_child(check) -> None:
    """`check()` in a forked child, which must return True there."""
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            code = 0 if check() else 4
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


def test_a_child_forked_while_the_store_is_unconnected_lets_go_of_its_own_blocks(stored):
    # no connection of the parent at the fork: the child's reader opens a database of its
    # own, and letting go of its blocks leaves the parent's connection opened again whole
    with Store.open(stored, read_only=True) as store:
        want = _reads(store)

        def child() -> bool:
            mine = reader(store.file)
            if _reads(mine) != want or not _table_blocks(mine):
                return False
            held = _table_blocks(mine)
            if mine.let_go_cache(keep=held):  # (within its keep: kept)
                return False
            return (mine.let_go_cache(keep=held - 1) is True and _table_blocks(mine) < held
                    and _reads(mine) == want)
        with store.unconnected():
            _in_child(child)
        assert _reads(store) == want
        assert store.let_go_cache() is True  # the only connection again


def test_a_child_forked_beside_the_parents_connection_lets_go_of_nothing(stored):
    # the child's reader is a connection to the parent's database, copied: closing it
    # would not let go of its blocks, so it is not closed
    with Store.open(stored, read_only=True) as store:
        want = _reads(store)

        def child() -> bool:
            mine = reader(store.file)
            con = mine.con
            return (mine.let_go_cache() is False and mine.con is con
                    and _reads(mine) == want)
        _in_child(child)
        assert _reads(store) == want


def test_a_store_closed_twice_counts_its_connection_once(stored):
    with Store.open(stored, read_only=True) as store:
        other = Store.open(stored, read_only=True)
        other.close()
        other.close()
        assert store.let_go_cache() is True


def _built_beside(path: Path) -> Store:
    """`path` opened as a new store built beside its final name (`files.NewStore`): a file
    no other process opens."""
    return Store.open(path, label=str(path.with_name("final.duckdb")))


def test_a_store_opened_by_its_own_name_keeps_its_connection(stored, tmp_path: Path):
    # another process may open it in the gap, find the run under way with no writer and
    # undo it as a dead one: the blocks stay instead
    path = tmp_path / "w.duckdb"
    path.write_bytes(stored.read_bytes())
    with Store.open(path) as store:
        _reads(store)
        con, held = store.con, _table_blocks(store)
        store.let_go_written()
        assert store.con is con
        assert _table_blocks(store) == held


def test_a_writer_lets_go_of_its_blocks_and_writes_and_reads_on_sealed(
        stored, tmp_path: Path):
    path = tmp_path / "w.duckdb"
    path.write_bytes(stored.read_bytes())
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret")
    with _built_beside(path) as store:
        want = _reads(store)
        store.run("CHECKPOINT")
        held = _table_blocks(store)
        store.let_go_written()
        assert _table_blocks(store) < held
        assert _reads(store) == want
        with store.transaction():
            store.run("UPDATE requests SET model = 'after'")
        with pytest.raises(duckdb.PermissionException):
            store.run(f"SELECT content FROM read_text('{secret}')")
        with pytest.raises(duckdb.Error, match="the configuration has been locked"):
            store.run("SET enable_external_access = true")
    with Store.open(path, read_only=True) as store:
        assert {r.model for r in store.iter_requests()} == {"after"}


def test_a_writer_keeps_its_connection_while_its_blocks_take_no_more_than_it_keeps(
        stored, tmp_path: Path):
    path = tmp_path / "w.duckdb"
    path.write_bytes(stored.read_bytes())
    with _built_beside(path) as store:
        _reads(store)
        con = store.con
        store.let_go_written(keep=_table_blocks(store))
        assert store.con is con
        store.let_go_written()
        assert store.con is not con


def test_a_write_by_another_process_while_a_writer_let_go_is_an_error(
        stored, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "w.duckdb"
    path.write_bytes(stored.read_bytes())
    store = _built_beside(path)
    _reads(store)
    _a_writer_in_the_gap(monkeypatch)
    with pytest.raises(StoreError, match="was written by another process"):
        store.let_go_written()
