"""``sql`` and ``export``: the store's tables for a query or for other tools."""

from __future__ import annotations

from collections.abc import Callable
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

from prefixscope.api.handle import Store, store_of
from prefixscope.api.masking import masked
from prefixscope.api.reporting import export_bundle
from prefixscope.model.errors import Error

if TYPE_CHECKING:
    from prefixscope.views.results import SqlResult


def sql(store: Store | str | PathLike[str], query: str) -> SqlResult:
    """Run read-only SQL (DuckDB's dialect) on the store: the rows of the last statement
    (``prefixscope sql``, docs/store.md). Tables: requests, bodies, parts, sessions,
    session_events; view: turns.

    Raises:
        Error: no usable store, or the query cannot run (``usage``: not a read, or a
            syntax error; else the database's one line).
    """
    from prefixscope.store.sqlquery import SqlError, run_readonly
    from prefixscope.views import sqlrows
    from prefixscope.views.results import SqlResult

    with store_of(store) as handle:
        try:
            result = run_readonly(handle._open(), query)
        except SqlError as exc:
            raise Error(str(exc), usage=exc.usage) from None
    # the values asked for (BLOBs as the text every format shows), secrets masked; a
    # column's name is query text and can hold one too (`select 1 as "sk-..."`)
    rows = masked(sqlrows.plain_values(result.rows))
    columns, renamed = sqlrows.unique_columns(masked(list(result.columns)))
    return SqlResult(tuple(columns), tuple(rows), result.statements, tuple(renamed))


def export(store: Store | str | PathLike[str], *, parquet: str | PathLike[str] | None = None,
           bundle: str | PathLike[str] | None = None, gateway: str = "auto",
           tokenizer: str = "auto", workers: int | None = None,
           progress: Callable[[str], None] | None = None) -> tuple[Path, ...]:
    """Write the store for other tools (``prefixscope export``, docs/store.md): with
    `parquet`, its tables (requests, bodies, parts, sessions, session_events) and the
    turns view as ``<table>.parquet`` files in that directory, each whole or not at all;
    with `bundle`, a share-safe bundle there (`export_bundle`, docs/bundle.md).

    Args:
        store: a `Store`, or the path of a store file.
        parquet, bundle: the directory to write into; exactly one of them.
        gateway, tokenizer, workers, progress: the bundle's, as `export_bundle` takes them.

    Returns:
        The files written.

    Raises:
        Error: neither or both directories, a directory that is a file (``usage``), no
            usable store, or as `export_bundle`.
    """
    from prefixscope.findings.bundle import EVIDENCE_FILE, REQUESTS_FILE
    from prefixscope.store import Store as CoreStore
    from prefixscope.store import StoreError
    from prefixscope.store.export import TABLES, export_parquet

    if (parquet is None) == (bundle is None):
        raise Error("give one of --parquet DIR or --bundle DIR", usage=True)
    file = Path(store.path if isinstance(store, Store) else store)
    if bundle is not None:
        if not file.is_file():
            raise Error(f"no store at {file}: run prefixscope ingest first (or --store)")
        written = export_bundle(store, bundle, gateway=gateway, tokenizer=tokenizer,
                                workers=workers, progress=progress)
        return (written / REQUESTS_FILE, written / EVIDENCE_FILE)
    assert parquet is not None
    target = Path(parquet)
    if target.exists() and not target.is_dir():
        raise Error(f"--parquet {target} is a file: give a directory (export writes "
                    f"{', '.join(t + '.parquet' for t in TABLES)} into it)", usage=True)
    if isinstance(store, Store):  # its connection reopens when next read: DuckDB opens a
        store._close_connection()  # file once per process, and this one may write files
    try:
        with CoreStore.open(file, read_only=True, writes_into=target) as st:
            return tuple(export_parquet(st, target))
    except StoreError as exc:
        raise Error(str(exc)) from None
