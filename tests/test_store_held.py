"""A read-only store's bodies and parts read whole once (`Store.hold_stored`) answer the
reads by hash that report's workers make, in this process and in a worker forked while
they are held, with exactly what the store's queries give.

The oracle: the same reads from a store holding nothing (one query a batch, as before);
a spy on `Store.run` shows which reads queried the tables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from factories import anthropic_body, conversation, make_request

from prefixscope.parallel import Pool, forks
from prefixscope.store import Store, reader
from prefixscope.store import store as store_module
from prefixscope.store.load import ingest_paths


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of sample_logs/ (bodies split into parts, and some stored whole)."""
    path = tmp_path_factory.mktemp("held") / "s.duckdb"
    store = Store.open(path)
    ingest_paths([str(ROOT / "sample_logs")], store)
    # and texts of several bytes a character, and a body with no list to split (whole)
    store.add([make_request("held-utf8", minutes=9e5, body=anthropic_body(
                   conversation(2, "h\u00e9ll\u00f8 \u65e5\u672c \U0001f600")), session_key="u"),
               make_request("held-whole", minutes=9e5 + 1, body={"prompt": "caf\u00e9"},
                            endpoint="unknown")])
    store.close()
    return path


def _reads(store: Store) -> dict[str, Any]:
    """What report's reads by hash give: requests by id in a jumbled order (bodies and
    parts by hash), in log order, and parts by hash with an absent one."""
    ids = [r.id for r in store.iter_requests()]
    hashes = sorted({h for _, layout in store.iter_layouts() if layout
                     for hs in layout.values() for h in hs})
    return {"by_id": list(store.iter_ids(ids[::-2] + ids[::2], batch=5)),
            "in_order": list(store.iter_requests(batch=7)),
            "parts": store.parts_text([*hashes[::-1], "x3:absent"]),
            "n_parts": len(hashes)}


def _queried(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SQL of every `Store.run` from now on (in this process and forked children)."""
    seen: list[str] = []
    real = Store.run

    def run(self: Store, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        seen.append(sql)
        return real(self, sql, params)

    monkeypatch.setattr(Store, "run", run)
    return seen


def _by_hash(sql: list[str]) -> list[str]:
    return [q for q in sql if "FROM parts" in q or "FROM bodies" in q]


def test_held_reads_are_the_queries_answers_without_querying(stored, monkeypatch):
    with Store.open(stored, read_only=True) as store:
        want = _reads(store)
        assert want["n_parts"] and want["parts"]  # the log has split bodies
        assert any(not text.isascii() for text in want["parts"].values())
        assert store.get("held-whole").body == {"prompt": "caf\u00e9"}
        assert any(layout is None for _, layout in store.iter_layouts())
        assert store.hold_stored()
        try:
            seen = _queried(monkeypatch)
            got = _reads(store)
        finally:
            store.let_go_stored()
    assert got == want
    assert set(got["parts"]) == set(want["parts"]) and "x3:absent" not in got["parts"]
    assert _by_hash(seen) == []


def test_let_go_reads_query_again(stored, monkeypatch):
    with Store.open(stored, read_only=True) as store:
        assert store.hold_stored()
        store.let_go_stored()
        seen = _queried(monkeypatch)
        store.parts_text(list(_reads(store)["parts"]))
    assert _by_hash(seen)


def test_nothing_is_held_for_a_writer_or_past_the_budget(stored, monkeypatch):
    with Store.open(stored, read_only=True) as store:
        want = _reads(store)
        assert not store.hold_stored(budget=100)  # sample_logs/ holds more than 100 chars
        seen = _queried(monkeypatch)
        assert _reads(store) == want
    assert _by_hash(seen)  # nothing held: the reads are queries
    with Store.open(stored) as writer:
        assert not writer.hold_stored()
        assert store_module._HELD == {}


def test_the_budget_is_the_texts_utf8_bytes_and_each_entrys_cost_counted_before_reading(
        stored):
    # the oracle: every text fetched and encoded in Python, plus the documented entry cost
    with Store.open(stored, read_only=True) as store:
        parts = store.run("SELECT part FROM parts")
        bodies = store.run("SELECT body, layout FROM bodies")
        size = (sum(len(p.encode()) for p, in parts)
                + sum(len(b.encode()) + len((la or "").encode()) for b, la in bodies)
                + store_module._HELD_ENTRY * (len(parts) + len(bodies)))
        assert size > sum(len(p) for p, in parts)  # several bytes a character among them
        executed: list[str] = []
        real_cursor = store.con.cursor

        class Spy:  # the cursor hold_stored reads through, its queries noted
            def __init__(self) -> None:
                self.cursor = real_cursor()

            def execute(self, sql: str, *args: Any) -> Any:
                executed.append(sql)
                return self.cursor.execute(sql, *args)

            def close(self) -> None:
                self.cursor.close()

        store.con = _With(store.con, cursor=Spy)
        assert not store.hold_stored(budget=size - 1)
        assert len(executed) == 1 and "count(*)" in executed[0]  # counted, nothing read
        assert store_module._HELD == {}
        assert store.hold_stored(budget=size)
        assert len(executed) == 4
        store.let_go_stored()


class _With:
    """`obj` with some attributes replaced (a DuckDB connection's are read-only)."""

    def __init__(self, obj: Any, **replaced: Any) -> None:
        self._obj, self._replaced = obj, replaced

    def __getattr__(self, name: str) -> Any:
        return self._replaced[name] if name in self._replaced else getattr(self._obj, name)


def _worker_reads(file: str) -> tuple[list[Any], list[str]]:
    """(the requests `reader(file)` gives in this worker, the tables' queries it ran)."""
    seen: list[str] = []
    real = Store.run

    def run(self: Store, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        seen.append(sql)
        return real(self, sql, params)

    Store.run = run  # type: ignore[method-assign]  # (this worker's own class object)
    try:
        store = reader(file)
        ids = [r.id for r in store.usage_records()]
        return list(store.iter_ids(ids[::-1])), _by_hash(seen)
    finally:
        Store.run = real  # type: ignore[method-assign]


def test_a_worker_forked_while_held_reads_them_from_memory(stored):
    assert forks()  # this suite runs on Linux
    with Store.open(stored, read_only=True) as store:
        file = store.file
        ids = [r.id for r in store.usage_records()]
        want = list(store.iter_ids(ids[::-1]))
        assert store.hold_stored()
        try:
            with Pool(2, fork=True) as pool:
                got = pool.map(_worker_reads, [file, file])
        finally:
            store.let_go_stored()
        with Pool(2, fork=True) as pool:  # forked with nothing held: its reads query
            unheld = pool.map(_worker_reads, [file])
    for requests, queried in got:
        assert requests == want
        assert queried == []
    assert unheld[0][0] == want and unheld[0][1]


def test_closing_the_store_lets_go(stored):
    store = Store.open(stored, read_only=True)
    assert store.hold_stored()
    store.close()
    assert store_module._HELD == {}
