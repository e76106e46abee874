"""The store's tables as Parquet files, for other tools (and the distributed runner)."""

from __future__ import annotations

from pathlib import Path

import duckdb

from prefixscope.store.store import Store, StoreError

TABLES = ("requests", "bodies", "parts", "sessions", "turns")


def export_parquet(store: Store, directory: Path) -> list[Path]:
    """Write <table>.parquet for every table and the turns view; returns the files written.

    Raises:
        StoreError: the directory cannot be created, or writing failed (one line).
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create directory {directory}: {exc.strerror or exc}") from None
    written = []
    for table in TABLES:
        target = directory / f"{table}.parquet"
        quoted = str(target).replace("'", "''")
        try:
            store.con.execute(f"COPY (SELECT * FROM {table}) TO '{quoted}' "
                              "(FORMAT PARQUET, COMPRESSION ZSTD)")
        except OSError as exc:
            raise StoreError(f"export failed: {exc.strerror or exc}") from None
        except duckdb.Error as exc:
            raise StoreError(f"export failed: {str(exc).splitlines()[0]}") from None
        written.append(target)
    return written
