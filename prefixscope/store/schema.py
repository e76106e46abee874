"""The store's schema: versioned migrations (append-only) and the requests table's columns.

Each entry of `MIGRATIONS` runs once and is recorded in ``schema_version`` (the llm
log-store pattern). Never edit a migration that has shipped; add a new one.
"""

from __future__ import annotations

from typing import Any

DEFAULT_STORE = "prefixscope.duckdb"

V1 = """
CREATE TABLE requests (
    id VARCHAR PRIMARY KEY,
    source_format VARCHAR NOT NULL,
    source_file VARCHAR NOT NULL,
    source_line BIGINT,
    timestamp TIMESTAMP,
    endpoint VARCHAR NOT NULL,
    model VARCHAR,
    session_key VARCHAR,
    session_key_source VARCHAR,
    parent_key VARCHAR,
    user_id VARCHAR,
    client VARCHAR,
    channel VARCHAR,
    gateway VARCHAR,
    native_id VARCHAR,
    prompt_tokens BIGINT,
    cached_tokens BIGINT,
    cache_write_tokens BIGINT,
    output_tokens BIGINT,
    usage_semantics VARCHAR,
    has_body BOOLEAN NOT NULL,
    body_truncated BOOLEAN NOT NULL,
    body_hash VARCHAR,
    message_count INTEGER,
    prefix_chain UBIGINT[],
    fingerprint VARCHAR,
    block_hashes BIGINT[],
    block_size INTEGER,
    output VARCHAR,
    metadata VARCHAR,
    ingested_at TIMESTAMP NOT NULL
);
CREATE TABLE bodies (
    hash VARCHAR PRIMARY KEY,
    body VARCHAR NOT NULL
);
CREATE TABLE sessions (
    request_id VARCHAR PRIMARY KEY,
    session VARCHAR NOT NULL,
    turn INTEGER NOT NULL,
    prev_id VARCHAR,
    link VARCHAR NOT NULL,
    compaction BOOLEAN NOT NULL
);
CREATE VIEW turns AS
    SELECT r.*, s.session, s.turn, s.prev_id, s.link, s.compaction
    FROM requests r LEFT JOIN sessions s ON s.request_id = r.id;
"""

# v2: where a request sits inside its log record, the compaction marker its history holds,
# and the link from a second log of the same upstream call to the first (issue 13).
# `source_position` of stored rows is recovered from `call_index` (the trajectory formats
# and OpenHands keep it in metadata), else 0; `compaction_marker` of stored rows stays NULL
# (re-ingest into a new store to get it).
V2 = """
ALTER TABLE requests ADD COLUMN source_position INTEGER;
ALTER TABLE requests ADD COLUMN compaction_marker VARCHAR;
ALTER TABLE requests ADD COLUMN duplicate_of VARCHAR;
UPDATE requests SET source_position = coalesce(
    TRY_CAST(json_extract_string(metadata, '$.call_index') AS INTEGER), 0);
CREATE OR REPLACE VIEW turns AS
    SELECT r.*, s.session, s.turn, s.prev_id, s.link, s.compaction
    FROM requests r LEFT JOIN sessions s ON s.request_id = r.id;
"""

# simulate's per-request results, one set per (engine, block size, capacity), replaced
# when the same simulation runs again.
V3 = """
CREATE TABLE simulated (
    engine VARCHAR NOT NULL,
    block_size INTEGER NOT NULL,
    capacity_tokens BIGINT,
    request_id VARCHAR NOT NULL,
    session VARCHAR,
    prompt_tokens BIGINT NOT NULL,
    observed BIGINT,
    predicted BIGINT NOT NULL,
    ideal BIGINT NOT NULL,
    shortfall BIGINT,
    misses VARCHAR NOT NULL,
    simulated_at TIMESTAMP NOT NULL
);
"""

# v4: content-addressed bodies (`store.parts`): a body is stored as its skeleton (the
# JSON with its list-valued system / tools / messages / input emptied) plus `layout`,
# the ordered hashes of those lists' elements, each element stored once in `parts`.
# Bodies stored before keep `layout` NULL: their `body` is the whole JSON, read as is.
V4 = """
CREATE TABLE parts (
    hash VARCHAR PRIMARY KEY,
    part VARCHAR NOT NULL
);
ALTER TABLE bodies ADD COLUMN layout VARCHAR;
"""

# v5: of the cache writes, those with the 1-hour TTL (Anthropic prices them at 2x base
# input, 5-minute writes at 1.25x: the report's dollars need them apart). Stored rows keep
# NULL (re-ingest to get it).
V5 = """
ALTER TABLE requests ADD COLUMN cache_write_1h_tokens BIGINT;
CREATE OR REPLACE VIEW turns AS
    SELECT r.*, s.session, s.turn, s.prev_id, s.link, s.compaction
    FROM requests r LEFT JOIN sessions s ON s.request_id = r.id;
"""

# v6: what the log itself records happening in a session (`model.SessionEvent`: a
# compaction boundary, a truncation, another model, a client upgrade, a tool-set delta),
# each with the first call after it (`request_id`), that call's session key and file, and
# the line that records it. Stored rows have none (re-ingest to get them).
V6 = """
CREATE TABLE session_events (
    request_id VARCHAR NOT NULL,
    session_key VARCHAR,
    timestamp TIMESTAMP,
    kind VARCHAR NOT NULL,
    detail VARCHAR NOT NULL,
    source_file VARCHAR NOT NULL,
    source_line BIGINT
);
"""

# v7: each request's session on the requests table itself (the one session threading
# assigns, as `sessions.session`; NULL for a request not threaded), so `select session
# ... from requests` reads what the library's request frame shows. `Store.replace_sessions`
# keeps it equal to `sessions.session`; `turns` keeps its columns (its session is the
# sessions table's, as before).
V7 = """
ALTER TABLE requests ADD COLUMN session VARCHAR;
UPDATE requests SET session = s.session FROM sessions s WHERE s.request_id = requests.id;
CREATE OR REPLACE VIEW turns AS
    SELECT r.* EXCLUDE (session), s.session, s.turn, s.prev_id, s.link, s.compaction
    FROM requests r LEFT JOIN sessions s ON s.request_id = r.id;
"""

# v8: an ingest commits batch by batch (`store.runs`: DuckDB holds a transaction's
# appended rows in memory until its commit), so what a failed or killed run added is
# listed, to be deleted: ``ingest_runs`` holds each run under way (a row left there is a
# run that died), ``ingest_added`` what its batches newly inserted (table, key). Both are
# empty between runs.
V8 = """
CREATE TABLE ingest_runs (
    run VARCHAR PRIMARY KEY,
    started TIMESTAMP NOT NULL,
    pid INTEGER NOT NULL,
    fresh BOOLEAN NOT NULL
);
CREATE TABLE ingest_added (
    run VARCHAR NOT NULL,
    tbl VARCHAR NOT NULL,
    key VARCHAR NOT NULL
);
"""

MIGRATIONS: tuple[str, ...] = (V1, V2, V3, V4, V5, V6, V7, V8)
SCHEMA_VERSION = len(MIGRATIONS)

# The requests table's columns, in order, with their types as Polars names them (a write's
# rows are typed so: `Store.add`; `polars_type` and `duckdb_type` read such a name).
_REQUEST_TYPES: tuple[tuple[str, str], ...] = (
    ("id", "Utf8"), ("source_format", "Utf8"), ("source_file", "Utf8"),
    ("source_line", "Int64"), ("timestamp", "Datetime"), ("endpoint", "Utf8"),
    ("model", "Utf8"), ("session_key", "Utf8"), ("session_key_source", "Utf8"),
    ("parent_key", "Utf8"), ("user_id", "Utf8"), ("client", "Utf8"), ("channel", "Utf8"),
    ("gateway", "Utf8"), ("native_id", "Utf8"), ("prompt_tokens", "Int64"),
    ("cached_tokens", "Int64"), ("cache_write_tokens", "Int64"), ("output_tokens", "Int64"),
    ("usage_semantics", "Utf8"), ("has_body", "Boolean"), ("body_truncated", "Boolean"),
    ("body_hash", "Utf8"), ("message_count", "Int32"), ("prefix_chain", "List[UInt64]"),
    ("fingerprint", "Utf8"), ("block_hashes", "List[Int64]"), ("block_size", "Int32"),
    ("output", "Utf8"), ("metadata", "Utf8"), ("ingested_at", "Datetime"),
    ("source_position", "Int32"), ("compaction_marker", "Utf8"), ("duplicate_of", "Utf8"),
    ("cache_write_1h_tokens", "Int64"),
)
REQUEST_COLUMNS: tuple[str, ...] = tuple(name for name, _ in _REQUEST_TYPES)
REQUEST_TYPES: dict[str, str] = dict(_REQUEST_TYPES)  # column -> its type's name
COLUMNS = ", ".join(REQUEST_COLUMNS)

# The DuckDB type each type name of a write's rows is (a list: ``List[X]``, X's type).
_DUCKDB_TYPES = {"Utf8": "VARCHAR", "Int64": "BIGINT", "Int32": "INTEGER", "UInt64": "UBIGINT",
                 "Boolean": "BOOLEAN", "Datetime": "TIMESTAMP"}


def polars_type(spelled: str) -> Any:
    """The Polars type a type name of a write's rows names (Polars imported here: only a
    write that goes through a frame needs it, `Store._run_on`)."""
    import polars as pl

    if spelled == "Datetime":
        return pl.Datetime("us")
    if spelled.startswith("List["):
        return pl.List(polars_type(spelled[5:-1]))
    return getattr(pl, spelled)


def duckdb_type(spelled: str) -> str:
    """The DuckDB type a type name of a write's rows names, as SQL spells it."""
    if spelled.startswith("List["):
        return duckdb_type(spelled[5:-1]) + "[]"
    return _DUCKDB_TYPES[spelled]


