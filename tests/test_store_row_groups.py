"""A writer's checkpoints keep the row groups they write (issue 37, the Codex rollout
shape): an ingest commits batch by batch, and DuckDB's checkpoints merged the row groups
of those batches again and again, rewriting the `parts` and `bodies` tables whole each
time and holding what they merged in memory (ingest's peak at 2 GiB). The rows, and the
order a scan gives them in, are those written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from factories import anthropic_body, make_request

from prefixscope.store import Store


def _requests(prefix: str, n: int) -> list[Any]:
    return [make_request(f"{prefix}{i}", minutes=i,
                         body=anthropic_body([{"role": "user", "content": f"{prefix} {i}"}]))
            for i in range(n)]


def _row_groups(store: Store, table: str) -> list[int]:
    """The rows of each row group of `table`, in order."""
    return [int(n) for (n,) in store.run(
        "SELECT sum(count) FROM pragma_storage_info(?) WHERE column_id = 0 AND "
        "segment_type <> 'VALIDITY' GROUP BY row_group_id ORDER BY row_group_id", [table])]


def test_each_checkpoint_of_a_writer_adds_its_own_row_group_and_merges_none(
        tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    written: list[list[str]] = []
    with Store.open(path) as store:
        for batch in range(6):
            requests = _requests(f"b{batch}-", 5)
            with store.transaction():
                store.add(requests)
            store.run("CHECKPOINT")
            written.append(sorted(r.id for r in requests))
        # DuckDB's default merges these into one row group at the third checkpoint
        assert _row_groups(store, "requests") == [5] * 6
        assert _row_groups(store, "bodies") == [5] * 6
    with Store.open(path, read_only=True) as store:
        # a batch's rows in the order its insert gave them (its QUALIFY window's), each
        # batch after the one before
        scanned = [rid for (rid,) in store.run("SELECT id FROM requests")]
        assert [sorted(scanned[i:i + 5]) for i in range(0, 30, 5)] == written
        assert _row_groups(store, "requests") == [5] * 6
