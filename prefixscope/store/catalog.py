"""What a store file may hold: the tables and the view prefixscope's migrations write, and
nothing that runs.

A store file is input like a log: anyone can hand over a DuckDB file with a
``schema_version`` table. Whatever else its catalog defines runs inside prefixscope's
own queries: a ``requests`` that is a view over ``read_text('/some/file')`` puts that file
into a report, a macro named ``sum``, ``lower`` or ``md5`` in the file's schema shadows
DuckDB's built-in of that name. So a store is opened as data only: its catalog must be,
object for object, what `schema.MIGRATIONS` create at some version (tables with their
columns, defaults and constraints; the ``turns`` view), with no macro, index, sequence,
type or schema of its own; and the connection has no file access beyond the store
(`store.Store.open`). The expected catalog is not written down here: it is what the
migrations produce in an in-memory database of the same DuckDB, version by version, so
it cannot drift from them. The file's catalog is read through DuckDB's own
``system.main`` functions, which a macro of the file cannot shadow.
"""

from __future__ import annotations

from functools import cache

import duckdb

from prefixscope.store.schema import MIGRATIONS

# (kind, query) listing every object of one database (its name is the parameter): the
# catalog functions named with their catalog, so the file's own macros cannot stand in.
_OBJECTS: tuple[tuple[str, str], ...] = (
    ("table", "SELECT schema_name, table_name, sql FROM system.main.duckdb_tables() "
              "WHERE database_name = ?"),
    ("view", "SELECT schema_name, view_name, sql FROM system.main.duckdb_views() "
             "WHERE NOT internal AND database_name = ?"),
    ("macro", "SELECT schema_name, function_name, function_type "
              "FROM system.main.duckdb_functions() WHERE NOT internal AND database_name = ?"),
    ("index", "SELECT schema_name, index_name, sql FROM system.main.duckdb_indexes() "
              "WHERE database_name = ?"),
    ("sequence", "SELECT schema_name, sequence_name, '' FROM system.main.duckdb_sequences() "
                 "WHERE database_name = ?"),
    ("type", "SELECT schema_name, type_name, '' FROM system.main.duckdb_types() "
             "WHERE NOT internal AND database_name = ?"),
    ("schema", "SELECT schema_name, schema_name, '' FROM system.main.duckdb_schemas() "
               "WHERE NOT internal AND database_name = ?"),
)
# What a prefixscope store may hold besides tables and views: nothing.
_CODE = frozenset(kind for kind, _ in _OBJECTS) - {"table", "view"}

Catalog = frozenset[tuple[str, str, str, str]]  # (kind, schema, name, definition)


class CatalogError(Exception):
    """The file's catalog is not one prefixscope writes: `str` says how (one line, after
    the file's name)."""


def read(con: duckdb.DuckDBPyConnection, database: str | None = None, *,
         kinds: frozenset[str] | None = None) -> Catalog:
    """Every object of `database` (default: the one database file `con` has open), or
    those of `kinds`."""
    if database is None:
        database = str(con.execute("SELECT database_name FROM system.main.duckdb_databases() "
                                   "WHERE NOT internal").fetchall()[0][0])
    return frozenset((kind, str(schema), str(name), str(definition or ""))
                     for kind, query in _OBJECTS if kinds is None or kind in kinds
                     for schema, name, definition in con.execute(query, [database]).fetchall())


@cache
def expected() -> tuple[Catalog, ...]:
    """The catalog a store has at each schema version (index 0: ``schema_version`` alone,
    as `Store._migrate` creates it before the first migration). Only tables and views are
    read: the migrations create nothing else (listing the functions costs ~0.1 s)."""
    return _made(each=True)


@cache
def latest() -> Catalog:
    """`expected()[-1]`, the catalog of this prefixscope's schema, read once after every
    migration ran (the store a command opens is at it; nine reads: ~0.01 s of each open)."""
    return _made(each=False)[-1]


def _made(*, each: bool) -> tuple[Catalog, ...]:
    """The catalogs the migrations make in an in-memory database: after each of them
    (`each`), else after the last alone."""
    con = duckdb.connect(":memory:")
    kinds = frozenset({"table", "view"})
    try:
        con.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER, "
                    "applied_at TIMESTAMP DEFAULT current_timestamp)")
        out = [read(con, "memory", kinds=kinds)] if each else []
        for sql in MIGRATIONS:
            con.execute(sql)
            if each:
                out.append(read(con, "memory", kinds=kinds))
        return tuple(out) if each else (read(con, "memory", kinds=kinds),)
    finally:
        con.close()


def version_of(found: Catalog) -> int | None:
    """The schema version whose catalog `found` is exactly; 0 for an empty file; None when
    it is none of them. (Each migration changes the catalog: the latest version's is no
    earlier one's, so a store at it is found without the others.)"""
    if not found:
        return 0
    if found == latest():
        return len(MIGRATIONS)
    versions = expected()
    return next((v for v, catalog in enumerate(versions) if catalog == found), None)


def holds_code(found: Catalog) -> bool:
    """The file defines something that runs or changes how names resolve."""
    return any(kind in _CODE for kind, *_ in found)


def has_version_table(found: Catalog) -> bool:
    """The file's ``schema_version`` is the table prefixscope writes (safe to read)."""
    ours = next(item for item in expected()[0] if item[2] == "schema_version")
    return ours in found


def difference(found: Catalog) -> str:
    """How `found` differs from the catalog of this prefixscope's schema: the first
    difference, as words to put after "it"."""
    ours = {(schema, name): kind for kind, schema, name, _ in latest()}
    extra = sorted(found - latest(), key=lambda item: (
        item[0] not in _CODE, (item[1], item[2]) not in ours, item))
    for kind, schema, name, _ in extra:
        if kind in _CODE:
            return f"defines a {kind} {name!r} (a store holds data, nothing that runs)"
        if (schema, name) in ours and ours[schema, name] != kind:
            return (f"holds a {kind} {name!r} where prefixscope writes a "
                    f"{ours[schema, name]}")
        if (schema, name) in ours:
            return f"defines its {kind} {name!r} otherwise than prefixscope does"
        return f"holds a {kind} {name!r} prefixscope does not write"
    missing = sorted(latest() - found)
    return f"lacks the {missing[0][0]} {missing[0][2]!r}" if missing else "differs"
