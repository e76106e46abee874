"""`bucket.group_count` is how many groups `bucket_store` reports, without building them:
report builds a split by a dimension only when it holds more than one (four one-group
splits were 2.0 s of CPU at 2 GiB of Claude Code transcripts, docs/scale.md). The oracle is
the whole computation, on logs with copies of a call in two sources, calls without usage,
several models and sessions."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import pytest
from conftest import ROOT

from prefixscope.analyses.bucket import bucket_store, group_count
from prefixscope.analyses.dimensions import DIMENSIONS
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths

LOGS = {
    "samples": [str(ROOT / "sample_logs")],
    "claude-code": [str(ROOT / "tests" / "data" / "real" / "claude-code-jsonl")],
    "langfuse": [str(ROOT / "tests" / "data" / "real" / "langfuse")],
    "gemini-cli": [str(ROOT / "tests" / "data" / "real" / "gemini-cli")],
}
GROUPINGS = [(), *((d,) for d in DIMENSIONS), *combinations(("source", "model", "session"), 2)]


@pytest.fixture(scope="module", params=sorted(LOGS))
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Store:
    path: Path = tmp_path_factory.mktemp("group-count") / "s.duckdb"
    st = Store.open(path)
    ingest_paths(LOGS[request.param], st)
    st.close()
    return Store.open(path, read_only=True)


@pytest.mark.parametrize("by", GROUPINGS, ids=lambda by: ",".join(by) or "none")
def test_group_count_is_the_number_of_groups_bucket_reports(store: Store,
                                                            by: tuple[str, ...]) -> None:
    assert group_count(store, by) == len(bucket_store(store, by, explain=False).groups)


def test_an_unknown_dimension_is_refused_as_bucket_refuses_it(store: Store) -> None:
    with pytest.raises(ValueError, match="nope"):
        group_count(store, ("nope",))
