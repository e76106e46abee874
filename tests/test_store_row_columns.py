"""The reads that build `Request`s from the store (`get`, `iter_ids`, `iter_requests`,
`iter_layouts`) select the columns `request_from_row` reads, not every column: each
request comes back exactly as it comes from its whole row.

The oracles: the whole row of ``requests`` (``r.*``, the bodies joined) built by
`request_from_row`, and a row that records every key `request_from_row` asks for.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from factories import anthropic_body, conversation, make_request

from prefixscope.model import Request, Usage
from prefixscope.store import Store, request_from_row
from prefixscope.store import store as store_module
from prefixscope.store.load import ingest_paths


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of sample_logs/ and of requests with every field `Request` has set."""
    path = tmp_path_factory.mktemp("rows") / "s.duckdb"
    store = Store.open(path)
    ingest_paths([str(ROOT / "sample_logs")], store)
    store.add([make_request(
        f"full-{i}", minutes=9e5 + i, body=anthropic_body(conversation(i + 1, "w")),
        source_line=i + 1, session_key="sk", session_key_source="test.session",
        parent_key=f"full-{i - 1}" if i else None, user="u", client="cli", channel="ch",
        gateway="anthropic-to-openai", native_id=f"n{i}", body_truncated=bool(i % 2),
        output={"role": "assistant", "content": f"out {i}"},
        usage=Usage(prompt_tokens=100 + i, cached_tokens=10 * i, cache_write_tokens=7,
                    output_tokens=3, semantics="anthropic", cache_write_1h_tokens=2 + i),
        block_hashes=(11, 22, 33 + i), block_size=16, metadata={"project": "p", "k": i},
        source_position=i) for i in range(3)])
    store.close()
    return path


def _whole_rows(store: Store) -> dict[str, Request]:
    """Every request built from its whole row (every column of ``requests``)."""
    rel = store.con.execute("SELECT r.*, b.body AS body_json, b.layout AS body_layout "
                            "FROM requests r LEFT JOIN bodies b ON b.hash = r.body_hash")
    cols = [d[0] for d in rel.description]
    rows = [dict(zip(cols, values, strict=True)) for values in rel.fetchall()]
    built = {}
    for row in rows:
        parts = store.parts_text(list(store_module.layout_hashes(row["body_layout"])))
        built[row["id"]] = request_from_row(row, parts)
    return built


def test_every_read_request_equals_the_one_built_from_its_whole_row(stored: Path) -> None:
    store = Store.open(stored, read_only=True)
    try:
        whole = _whole_rows(store)
        assert {f"full-{i}" for i in range(3)} <= set(whole)
        assert len(whole) > 10
        ids = sorted(whole)
        assert [store.get(rid) for rid in ids] == [whole[rid] for rid in ids]
        assert list(store.iter_ids(ids[::-1], batch=4)) == [whole[rid] for rid in ids[::-1]]
        in_order = list(store.iter_requests(copies=True, batch=3))
        assert sorted(r.id for r in in_order) == ids
        assert all(r == whole[r.id] for r in in_order)
        for request, _layout in store.iter_layouts(batch=5):
            assert request == replace(whole[request.id], body=request.body)
        # the fixture's own rows carry every optional field, so a column left out shows
        full = whole["full-2"]
        assert full.source_position == 2 and full.usage.cache_write_1h_tokens == 4
        assert full.block_hashes == (11, 22, 35) and full.metadata == {"project": "p", "k": 2}
    finally:
        store.close()


class _Asked(dict[str, Any]):
    """A row that records every key asked of it."""

    def __init__(self, row: dict[str, Any]) -> None:
        super().__init__(row)
        self.asked: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.asked.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.asked.add(key)
        return super().get(key, default)


def test_request_from_row_asks_only_for_the_selected_columns(stored: Path) -> None:
    store = Store.open(stored, read_only=True)
    try:
        rel = store.con.execute("SELECT r.*, b.body AS body_json, b.layout AS body_layout "
                                "FROM requests r LEFT JOIN bodies b ON b.hash = r.body_hash")
        cols = [d[0] for d in rel.description]
        asked: set[str] = set()
        for values in rel.fetchall():
            row = _Asked(dict(zip(cols, values, strict=True)))
            request_from_row(row, store.parts_text(
                list(store_module.layout_hashes(row["body_layout"]))))
            asked |= row.asked
    finally:
        store.close()
    selected = {c.strip().removeprefix("r.")
                for c in store_module._ROW_COLUMNS.split(",")} | {"body_json", "body_layout"}
    assert asked <= selected
    assert "prefix_chain" not in selected
