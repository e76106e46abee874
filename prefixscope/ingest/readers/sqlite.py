"""SQLite databases, read in place and read-only: gateways keep their logs in one.

new-api (``one-api.db``), LiteLLM copies and Bifrost (``logs.db``) store request logs
in a SQLite file, so the file itself is an input. Every access goes through a
read-only URI connection (the path percent-encoded: a name is a name, never URI
syntax): ingesting a live gateway's database never writes to it.
A gzip-compressed database or stdin is read through `Source.local_path`'s
temporary copy.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from prefixscope.ingest.source import Source

SQLITE_MAGIC = b"SQLite format 3\x00"


def read_only_uri(path: Path) -> str:
    """The URI that opens the file at `path` read-only: every byte of the name
    percent-encoded but the slashes, so ``?``, ``#`` or ``%2e%2e%2f`` in a file name stay
    part of the name (``file:gw?.db?mode=ro`` opened a new, empty ``gw`` read-write)."""
    return "file://" + quote(os.fsencode(os.path.abspath(path)), safe="/") + "?mode=ro"


@contextmanager
def connect(path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection to the SQLite file at `path`, closed on exit."""
    con = sqlite3.connect(read_only_uri(path), uri=True)
    try:
        yield con
    finally:
        con.close()


def read_tables(path: Path) -> dict[str, list[str]]:
    """Table -> columns of a SQLite file.

    Raises:
        sqlite3.Error: the file is damaged, encrypted or locked.
    """
    with connect(path) as con:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {n: [c[1] for c in con.execute(f'PRAGMA table_info("{n}")')] for n in names}


def iter_sqlite_rows(source: Source, table: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (row number, row dict) from one table of a SQLite database file, read-only."""
    with connect(source.local_path()) as con:
        con.row_factory = sqlite3.Row
        for rowno, row in enumerate(con.execute(f'SELECT * FROM "{table}"'), start=1):
            yield rowno, dict(row)


def iter_sqlite_columns(source: Source, table: str,
                        columns: list[str | None]) -> Iterator[tuple[Any, ...]]:
    """The values of a few columns of every row, a light pass over a table whose rows carry
    whole request bodies; a None column (one the table lacks) reads as NULL. Column names
    are the caller's identifiers, left unquoted: SQLite reads an unknown double-quoted
    name as a string literal, and a missing column must be an error."""
    selected = ", ".join("NULL" if c is None else c for c in columns)
    with connect(source.local_path()) as con:
        yield from con.execute(f'SELECT {selected} FROM "{table}"')
