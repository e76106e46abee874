"""The store: the only code that speaks SQL. `Store` (open, write, typed queries),
`schema` (versioned migrations), `load` (log files -> store), `lookup` (a request by
reference), `sqlquery` (the read-only `sql` command), `export` (Parquet)."""

from prefixscope.store.parts import Layout
from prefixscope.store.schema import DEFAULT_STORE, SCHEMA_VERSION
from prefixscope.store.store import (
    Store,
    StoreError,
    no_store_message,
    reader,
    request_from_row,
    unreadable_store,
)

__all__ = ["DEFAULT_STORE", "SCHEMA_VERSION", "Layout", "Store", "StoreError",
           "no_store_message", "reader", "request_from_row", "unreadable_store"]
