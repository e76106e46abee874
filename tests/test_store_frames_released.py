"""A store write inside a transaction keeps none of the frames it handed DuckDB (issue 37:
registering and unregistering a view per statement left each one in the transaction's undo
log until the commit, with the frame it scanned, so a 1 GiB ingest's memory grew with the
log), and a name registered in a transaction that is rolled back is registered again by the
next write."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from factories import anthropic_body, make_request

from prefixscope.store import Store
from prefixscope.store import store as store_module


def _requests(prefix: str, n: int) -> list[Any]:
    return [make_request(f"{prefix}{i}", minutes=i,
                         body=anthropic_body([{"role": "user", "content": f"{prefix} {i}"}]))
            for i in range(n)]


def test_no_frame_a_write_made_is_alive_after_it_inside_the_transaction(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[weakref.ref[pl.DataFrame]] = []
    run_framed = Store._run_framed

    def spy(self: Store, name: str, frame: pl.DataFrame, sql: str) -> list[tuple[Any, ...]]:
        made.append(weakref.ref(frame))
        return run_framed(self, name, frame, sql)

    monkeypatch.setattr(Store, "_run_framed", spy)
    # every write through a frame (a small write may bind its rows instead: store._binds)
    monkeypatch.setattr(store_module, "_binds", lambda *args: False)
    with Store.open(tmp_path / "s.duckdb") as store, store.transaction():
        for batch in range(3):
            store.add(_requests(f"b{batch}-", 4))
            gc.collect()
            assert made and all(ref() is None for ref in made)
        assert store.count() == 12
    assert len(made) == 9  # requests, parts, bodies of each batch


def test_a_write_after_a_rolled_back_transaction_registers_its_names_again(
        tmp_path: Path) -> None:
    with Store.open(tmp_path / "s.duckdb") as store:
        with pytest.raises(RuntimeError), store.transaction():
            store.add(_requests("gone-", 2))
            raise RuntimeError("rolled back")
        assert store.count() == 0
        with store.transaction():
            store.add(_requests("kept-", 3))
        assert store.count() == 3
        assert sorted(r.id for r in store.iter_requests()) == ["kept-0", "kept-1", "kept-2"]

