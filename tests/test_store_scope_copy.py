"""A scope (--since / --until / --project) is the copy's query (issue 38 item 3).

`Store.copy_into(other, scope)` reads only the requests within the scope, the bodies they
hold and their session events; before, the whole store was copied into the temporary one
and what lay outside the scope deleted there. The oracle: the store's own rows, filtered in
Python by each request's time and project.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import REAL

import prefixscope as ps
from prefixscope.store import Store
from prefixscope.store.scope import Scope

TRACELAB = REAL / "tracelab"  # 20 Claude calls on 2026-06-01, 18 Codex calls on 2026-03-21


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("scope") / "t.duckdb"
    ps.ingest(TRACELAB, path).close()
    return path


def rows(store: Store) -> dict[str, set[tuple[object, ...]]]:
    return {
        "requests": set(store.run("SELECT id, timestamp, body_hash FROM requests")),
        "bodies": {h for (h,) in store.run("SELECT hash FROM bodies")},
        "events": set(store.run("SELECT request_id, kind FROM session_events")),
        "parts": {h for (h,) in store.run("SELECT count(*) FROM parts")},
    }


def copied(source: Path, scope: Scope | None, tmp_path: Path) -> dict[str, set]:
    with Store.open(source, read_only=True) as st, Store.open(tmp_path / "c.duckdb") as out:
        st.copy_into(out, scope)
        return rows(out)


def test_a_copy_without_scope_is_the_whole_store(store: Path, tmp_path: Path) -> None:
    with Store.open(store, read_only=True) as st:
        whole = rows(st)
    assert copied(store, None, tmp_path) == whole
    assert len(whole["requests"]) == 38


@pytest.mark.parametrize(("scope", "count"), [
    (Scope(since=datetime(2026, 6, 1, tzinfo=UTC)), 20),
    (Scope(until=datetime(2026, 3, 22, tzinfo=UTC)), 18),
])
def test_a_scoped_copy_holds_the_requests_in_the_window_and_their_bodies(
        store: Path, tmp_path: Path, scope: Scope, count: int) -> None:
    with Store.open(store, read_only=True) as st:
        whole = rows(st)
    inside = {r for r in whole["requests"]
              if (scope.since is None or r[1] >= scope.since.replace(tzinfo=None))
              and (scope.until is None or r[1] < scope.until.replace(tzinfo=None))}
    got = copied(store, scope, tmp_path)
    assert len(inside) == count
    assert got["requests"] == inside
    assert got["bodies"] == {r[2] for r in inside if r[2] is not None}
    assert got["events"] == {e for e in whole["events"] if e[0] in {r[0] for r in inside}}
    assert got["parts"] == whole["parts"]  # parts are shared by content: all are kept
