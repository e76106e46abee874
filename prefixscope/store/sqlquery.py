"""Read-only ad-hoc SQL over a store (the `sql` command): the store and nothing else.

A query is text a person pastes, from a runbook or a colleague; DuckDB's SQL can reach
far beyond the store (``COPY … TO`` and ``EXPORT DATABASE`` write any file,
``read_csv``/``read_text``/``glob`` read any, ``ATTACH`` opens another database,
``INSTALL``/``LOAD`` download code, ``SET`` changes all of that back). DuckDB's own
switches close it: ``enable_external_access = false`` (no file system or network
access but the database already open; extensions cannot load) and then
``lock_configuration = true`` (no statement can change a setting again). `Store.open`
sets them on every store connection, for every command, before anything of the file is
read (a store's own views and macros are refused there too); DuckDB's refusal is the
one-line error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb

from prefixscope.store.store import Store


class SqlError(ValueError):
    """The query cannot run (one line, for a person); `usage` marks a command-line mistake."""

    def __init__(self, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


@dataclass(frozen=True, slots=True)
class QueryResult:
    """Column names and rows of the last statement, and how many statements there were."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    statements: int


def run_readonly(store: Store, query: str) -> QueryResult:
    """Run `query` on a store opened read-only.

    Raises:
        SqlError: empty query, INSTALL/LOAD, or DuckDB's own error (first line):
            reaching outside the store is DuckDB's ``Permission Error``.
    """
    if not query.strip():
        raise SqlError("empty SQL query", usage=True)
    try:
        statements = store.con.extract_statements(query)
        if not statements:
            raise SqlError("the SQL holds no statement (only comments?)", usage=True)
        if any(s.type == duckdb.StatementType.LOAD for s in statements):
            raise SqlError("SQL: INSTALL/LOAD are not allowed: prefixscope works offline "
                           "and DuckDB would download the extension")
        rel = store.con.execute(query)
        columns = [d[0] for d in rel.description] if rel is not None and rel.description else []
        rows = rel.fetchall() if columns else []
    except duckdb.PermissionException as exc:
        raise SqlError(f"SQL: {str(exc).splitlines()[0]} (`sql` reads the store and "
                       "nothing else)") from None
    except duckdb.Error as exc:
        raise SqlError(f"SQL: {str(exc).splitlines()[0]}") from None
    return QueryResult(tuple(columns), tuple(tuple(r) for r in rows), len(statements))
