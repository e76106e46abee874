"""A temporary store is read without checking its catalog again (issue 37 item 2).

`prefixscope report LOGS` (``ps.report(ps.ingest(LOGS, store=None))``) makes its store in a
private temporary directory with this process's own migrations, closes it, and opens it
read-only to read it: comparing that catalog with the one the migrations write (the
catalog queries and the expected catalog built in an in-memory database) cost 0.06 s of
every such report and can only agree. A store named by path is input like a log and is
still checked each time it is opened (tests/test_security_stores.py: what the check
refuses).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REAL

import prefixscope as ps
from prefixscope.store import catalog

REQUESTS = REAL / "claude-code-jsonl" / "claude-code-log__representative_messages.jsonl"


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The database of every catalog read from now on (None: the store file's own)."""
    seen: list[str | None] = []
    read = catalog.read

    def counting(con, database=None, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(database)
        return read(con, database, **kwargs)

    monkeypatch.setattr(catalog, "read", counting)
    catalog.expected.cache_clear()  # built again where a check needs them
    catalog.latest.cache_clear()
    return seen


def test_report_of_logs_never_reads_its_new_stores_catalog(reads: list[str | None]) -> None:
    with ps.ingest([str(REQUESTS)], store=None) as st:
        report = ps.report(st)
    assert report.ledger is not None
    # nor the ingest's look at the new file before migrating it: no file was at the path
    # in the private directory, so its catalog is empty by construction (f36338e)
    assert reads == []


def test_a_store_named_by_path_is_checked_when_opened(reads: list[str | None],
                                                      tmp_path: Path) -> None:
    ps.ingest([str(REQUESTS)], store=tmp_path / "s.duckdb").close()
    reads.clear()
    with ps.open(tmp_path / "s.duckdb") as st:
        ps.report(st)
    # the file's catalog, then the expected one of the latest schema version alone
    # (`catalog.latest`; each version's, `catalog.expected`, only for a store not at it)
    assert reads[0] is None and reads.count(None) == 1
    assert reads[1:] == ["memory"]
