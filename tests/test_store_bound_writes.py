"""A store write gives DuckDB its rows as parameters or as a Polars frame (`Store._run_on`:
a small write in a process without Polars binds them, issue 37: importing Polars was
~0.09 s of every small `report LOGS`), and session threading reads its rows fetched or
through a frame (`Store.threading_rows`); either way the store holds the same values.

The oracle is the frame, the way every write and read went before: the same rows written
both ways (Hypothesis: every type a write uses, NULLs, the bounds of each integer type,
aware and naive timestamps, text with NULs and astral characters), then a whole ingest of
sample_logs/ both ways, compared table by table; and a small `report` run in a fresh
process imports neither Polars nor pyarrow.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from factories import run_main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefixscope.store import Store
from prefixscope.store import store as store_module
from prefixscope.store.load import ingest_paths
from prefixscope.store.schema import duckdb_type

TYPES = {"text": "Utf8", "big": "Int64", "small": "Int32", "flag": "Boolean",
         "stamp": "Datetime", "chain": "List[UInt64]", "blocks": "List[Int64]"}
INT64 = st.integers(-(2**63), 2**63 - 1)
ZONES = st.sampled_from([None, UTC, timezone(timedelta(hours=5, minutes=30)),
                         timezone(timedelta(hours=-8))])
VALUES = {
    "text": st.text(st.characters(codec="utf-8"), max_size=40),
    "big": INT64,
    "small": st.integers(-(2**31), 2**31 - 1),
    "flag": st.booleans(),
    "stamp": st.builds(lambda at, zone: at.replace(tzinfo=zone),
                    st.datetimes(datetime(1971, 1, 1), datetime(2100, 1, 1)), ZONES),
    "chain": st.lists(st.integers(0, 2**64 - 1), max_size=5),
    "blocks": st.lists(INT64, max_size=5),
}
ROW = st.fixed_dictionaries({name: st.none() | values for name, values in VALUES.items()})


def _table(store: Store, name: str) -> None:
    columns = ", ".join(f"{c} {duckdb_type(t)}" for c, t in TYPES.items())
    store.run(f"CREATE TABLE {name} (n INTEGER, {columns})")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(ROW, max_size=12))
def test_rows_bound_as_parameters_are_stored_as_a_frame_stores_them(
        rows: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("bound") / "s.duckdb"
    columns = {"n": list(range(len(rows)))} | {c: [r[c] for r in rows] for c in TYPES}
    types = {"n": "Int32", **TYPES}
    with Store.open(path) as store:
        _table(store, "framed")
        _table(store, "bound")
        import polars as pl

        from prefixscope.store.schema import polars_type

        frame = pl.DataFrame(columns, schema={c: polars_type(t) for c, t in types.items()})
        store._run_framed("_rows", frame, "INSERT INTO framed SELECT * FROM _rows")
        added = store._run_bound("_rows", columns, types, "INSERT INTO bound SELECT * FROM _rows")
        assert added == [(len(rows),)]
        framed = store.run("SELECT * FROM framed ORDER BY n")
        assert store.run("SELECT * FROM bound ORDER BY n") == framed
    assert len(framed) == len(rows)


# A list column's values as a write may hold them: NULLs, and lists each of which may
# extend the one before it by a tail (an agent's prefix chains) or be another list.
CHAINS = st.lists(st.tuples(st.booleans(), st.none() | st.lists(st.integers(0, 2**64 - 1),
                                                                 max_size=4)), max_size=10)


@settings(max_examples=200)
@given(steps=CHAINS)
def test_a_list_columns_text_is_each_lists_integers_joined(
        steps: list[tuple[bool, list[int] | None]]) -> None:
    """`_list_text` reuses the text of the list before where a list extends it; the text
    is the plain join of each list's decimal integers whatever the lists share."""
    values: list[list[int] | None] = []
    for extends, tail in steps:
        before = values[-1] if values else None
        if extends and tail is not None and before is not None:
            values.append(before + tail)
        else:
            values.append(tail)
    assert store_module._list_text(values) == [
        None if v is None else ",".join(str(i) for i in v) for v in values]


def _tables(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    with Store.open(path, read_only=True) as store:
        return {table: store.run(f"SELECT * {exclude} FROM {table} ORDER BY ALL")
                for table, exclude in (
                    ("requests", "EXCLUDE (ingested_at)"), ("bodies", ""), ("parts", ""),
                    ("sessions", ""), ("session_events", ""))}


def test_an_ingest_without_polars_stores_what_one_through_frames_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without Polars loaded, every write of sample_logs/ binds its rows (all of them are
    under `BOUND_TEXT`) and threading fetches its rows; with it, frames both."""
    made, ways = {}, []
    run_bound, run_framed = Store._run_bound, Store._run_framed
    monkeypatch.setattr(Store, "_run_bound", lambda *a: ways.append("bound") or run_bound(*a))
    monkeypatch.setattr(Store, "_run_framed", lambda *a: ways.append("framed") or run_framed(*a))
    for how, loaded in (("framed", True), ("bound", False)):
        monkeypatch.setattr(store_module, "_polars_loaded", lambda loaded=loaded: loaded)
        ways.clear()
        with Store.open(Path(f"{how}.duckdb")) as store:
            ingest_paths([str(ROOT / "sample_logs")], store)
        assert set(ways) == {how}
        made[how] = _tables(Path(f"{how}.duckdb"))
    assert made["bound"] == made["framed"]
    assert all(made["bound"][t] for t in ("requests", "bodies", "parts", "sessions"))


def test_a_write_binds_while_polars_is_not_loaded_and_its_text_is_small() -> None:
    code = (
        "import sys\n"
        "from prefixscope.store.store import BOUND_TEXT, _binds\n"
        "small, large = {'t': ['x' * 10, None]}, {'t': ['x' * BOUND_TEXT, 'x']}\n"
        "print(_binds(small, {'t': 'Utf8'}), _binds(large, {'t': 'Utf8'}))\n"
        "print(_binds(small, {'t': 'Utf8'}, BOUND_TEXT - 10),"
        " _binds(small, {'t': 'Utf8'}, BOUND_TEXT - 9))\n"
        "import polars\n"
        "print(_binds(small, {'t': 'Utf8'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["True", "False", "True", "False", "False"]


def test_a_stores_writes_bind_until_their_text_adds_up_past_the_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound is on the text a store's writes bound in all, not on each write's: of
    three writes of 40% of `BOUND_TEXT` each the first two bind, the third is a frame (an
    ingest of many small batches binds no more than one large write would); the table
    holds every row either way."""
    monkeypatch.setattr(store_module, "_polars_loaded", lambda: False)
    ways: list[str] = []
    run_bound, run_framed = Store._run_bound, Store._run_framed
    monkeypatch.setattr(Store, "_run_bound", lambda *a: ways.append("bound") or run_bound(*a))
    monkeypatch.setattr(Store, "_run_framed", lambda *a: ways.append("framed") or run_framed(*a))
    text = "x" * (store_module.BOUND_TEXT * 2 // 5)
    with Store.open(Path("s.duckdb")) as store:
        store.run("CREATE TABLE t (n INTEGER, text VARCHAR)")
        for n in range(3):
            store._run_on("_rows", {"n": [n], "text": [text]}, {"n": "Int32", "text": "Utf8"},
                          "INSERT INTO t SELECT * FROM _rows")
        assert store.run("SELECT n, length(text) FROM t ORDER BY n") == [
            (n, len(text)) for n in range(3)]
    assert ways == ["bound", "bound", "framed"]


def test_a_report_on_a_small_log_imports_neither_polars_nor_pyarrow(tmp_path: Path) -> None:
    """issue 37, start-up: `report LOGS` ingests into a temporary store and reports; on
    sample_logs/ nothing in it needs a frame."""
    loaded, stdout = run_main(["report", str(ROOT / "sample_logs"), "--json"], tmp_path,
                              ("polars", "pyarrow"))
    assert stdout.lstrip().startswith("{")  # the report was made
    assert loaded == set()


def test_threading_reads_a_store_past_the_bound_off_a_frame_the_same_rows(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without Polars loaded, a store of more than `_FETCHED_ROWS` requests (a scoped copy
    of a large store) is read for threading through a frame, the same rows as fetched."""
    monkeypatch.setattr(store_module, "_polars_loaded", lambda: False)
    with Store.open(Path("s.duckdb")) as store:
        ingest_paths([str(ROOT / "sample_logs")], store)
        fetched = list(store.threading_rows())
        monkeypatch.setattr(store_module, "_FETCHED_ROWS", len(fetched) - 1)
        import polars as pl

        frames: list[object] = []
        real_frame = pl.DataFrame
        monkeypatch.setattr(pl, "DataFrame",
                            lambda *a, **k: frames.append(a) or real_frame(*a, **k))
        framed = list(store.threading_rows())
    assert len(frames) == 1
    assert framed == fetched and len(fetched) > 100
