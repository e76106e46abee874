"""The store's tables as Parquet files, for other tools (and the distributed runner)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import orjson

from prefixscope.model import Request, Usage
from prefixscope.model.atomic import atomic_path
from prefixscope.store.store import Store, StoreError

TABLES = ("requests", "bodies", "parts", "sessions", "session_events", "turns")
# Not a table of the store: every consecutive pair `diff --all` diffs, with both requests
# whole (the distributed runner's input, one row per pair; see docs/scale.md).
PAIRS = "pairs"
_PAIRS_PER_QUERY = 64  # pairs whose requests are loaded (and written) together


def export_parquet(store: Store, directory: Path) -> list[Path]:
    """Write <table>.parquet for every table and the turns view; returns the files written.
    Each file is written whole or not at all (`model.atomic`). `store` must be opened
    with ``writes_into=directory``: no other directory is open to its connection.

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
        try:
            with atomic_path(target) as tmp:
                quoted = os.path.abspath(tmp).replace("'", "''")
                store.con.execute(f"COPY (SELECT * FROM {table}) TO '{quoted}' "
                                  "(FORMAT PARQUET, COMPRESSION ZSTD)")
        except OSError as exc:
            raise StoreError(f"export failed: {exc.strerror or exc}") from None
        except duckdb.Error as exc:
            raise StoreError(f"export failed: {str(exc).splitlines()[0]}") from None
        written.append(target)
    written.append(export_pairs(store, directory))
    return written


def pairs_schema() -> Any:
    """The Arrow schema of pairs.parquet (a function: pyarrow is imported only when used)."""
    import pyarrow as pa

    return pa.schema([
        ("pair", pa.int64()),  # the pair's place in `diff --all` order (session, turn)
        ("session", pa.string()),
        ("a_id", pa.string()),
        ("b_id", pa.string()),
        ("compaction", pa.bool_()),
        # request JSON (`request_json`); a_request is null when A is the previous row's
        # B in the same session (a session's chain carries each request once)
        ("a_request", pa.large_string()),
        ("b_request", pa.large_string()),
    ])


def export_pairs(store: Store, directory: Path) -> Path:
    """Write pairs.parquet: every pair `diff --all` diffs (`Store.session_pairs(once=True)`),
    in its order, with both requests whole; memory is bounded by `_PAIRS_PER_QUERY` pairs.

    Raises:
        StoreError: writing failed (one line).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    target = directory / f"{PAIRS}.parquet"
    schema = pairs_schema()
    try:
        with atomic_path(target) as tmp, pq.ParquetWriter(tmp, schema,
                                                          compression="zstd") as writer:
            for rows in _pair_rows(store):
                writer.write_table(pa.Table.from_pylist(rows, schema=schema))
    except OSError as exc:
        raise StoreError(f"export failed: {exc.strerror or exc}") from None
    return target


def _pair_rows(store: Store) -> Iterator[list[dict[str, Any]]]:
    pairs = store.session_pairs(None, once=True)
    previous: tuple[str | None, str | None] = (None, None)  # (session, B id) of the last row
    for start in range(0, len(pairs), _PAIRS_PER_QUERY):
        chunk = pairs[start:start + _PAIRS_PER_QUERY]
        loaded = store.get_many(rid for a, b, _, _ in chunk for rid in (a, b))
        rows = []
        for offset, (a, b, session, compaction) in enumerate(chunk):
            chained = previous == (session, a)
            rows.append({"pair": start + offset, "session": session, "a_id": a, "b_id": b,
                         "compaction": compaction,
                         "a_request": None if chained else request_json(loaded[a]),
                         "b_request": request_json(loaded[b])})
            previous = (session, b)
        yield rows


def request_json(request: Request) -> str:
    """A request as one JSON object: every field of `Request` (`usage` as an object,
    `timestamp` ISO 8601), read back by `request_from_json`."""
    fields: dict[str, Any] = {name: getattr(request, name) for name in Request.__slots__}
    fields["usage"] = {name: getattr(request.usage, name) for name in Usage.__slots__}
    fields["timestamp"] = None if request.timestamp is None else request.timestamp.isoformat()
    try:
        return orjson.dumps(fields).decode()
    except TypeError:  # an integer beyond 64 bits in a body: the standard library writes it
        import json

        return json.dumps(fields, ensure_ascii=False)


def request_from_json(text: str) -> Request:
    """The `Request` `request_json` wrote."""
    try:
        fields = orjson.loads(text)
    except orjson.JSONDecodeError:
        import json

        fields = json.loads(text)
    fields["usage"] = Usage(**fields["usage"])
    if fields["timestamp"] is not None:
        fields["timestamp"] = datetime.fromisoformat(fields["timestamp"])
    if fields["block_hashes"] is not None:
        fields["block_hashes"] = tuple(fields["block_hashes"])
    return Request(**fields)
