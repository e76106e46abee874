"""A what-if named twice is replayed twice (review of e6f17a6, issue 37 item 5):
`_what_ifs` made every transform's input up front and handed each out by its name, so a
name given twice (``simulate --what-if sort-json-keys --what-if sort-json-keys``, which no
option check refuses) found its input gone the second time -- an internal KeyError where
d1ccaee answered with two equal rows."""

from __future__ import annotations

import pytest
from conftest import ROOT

from prefixscope.analyses.simulate import SimulateOptions, simulate_store
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths

LOG = str(ROOT / "sample_logs" / "bifrost-mcp-keyorder.jsonl")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    st = Store.open(tmp_path_factory.mktemp("repeat") / "s.duckdb")
    ingest_paths([LOG], st)
    return st


@pytest.mark.parametrize("workers", [1, 2])
def test_a_what_if_named_twice_gives_the_row_it_gives_alone_twice(store: Store,
                                                                   workers: int) -> None:
    options = SimulateOptions()
    once = simulate_store(store, options, what_if=("sort-json-keys",)).what_if
    twice = simulate_store(store, options, what_if=("sort-json-keys", "strip-billing-header",
                                                    "sort-json-keys"),
                           workers=workers).what_if
    alone = simulate_store(store, options, what_if=("strip-billing-header",)).what_if
    assert len(once) == 1 and len(alone) == 1
    assert twice == (once[0], alone[0], once[0])
