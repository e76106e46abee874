"""The store as Polars frames: the public API's `Store.requests()` and `Store.sessions()`.

A notebook wants the store as a table, not as SQL; these are the two tables a person asks
for first, with columns documented in docs/api.md (`REQUEST_FRAME_COLUMNS`,
`SESSION_FRAME_COLUMNS`, held together by a test). Internal keys (`prefix_chain`,
`fingerprint`, block hashes, body hashes, raw metadata) stay out: `prefixscope sql` reads
them. Rows come in the order every command lists requests (`store.time_order`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prefixscope.store.store import Store, time_order

if TYPE_CHECKING:
    import polars as pl

# One row per model call (a call two sources logged is two rows: `duplicate_of` links the
# second to the copy kept), with its session.
REQUEST_FRAME_COLUMNS: tuple[str, ...] = (
    "id", "timestamp", "source_format", "source_file", "source_line", "source_position",
    "endpoint", "model", "session", "turn", "prev_id", "link", "compaction", "user_id",
    "client", "channel", "gateway", "native_id", "project", "prompt_tokens",
    "cached_tokens", "cache_write_tokens", "cache_write_1h_tokens", "output_tokens",
    "usage_semantics", "has_body", "body_truncated", "message_count", "block_size",
    "duplicate_of",
)
# One row per threaded session, in the order of their first turns.
SESSION_FRAME_COLUMNS: tuple[str, ...] = (
    "session", "requests", "first_request", "started", "ended", "source_file",
    "id_from_log", "compactions", "usage_requests", "prompt_tokens", "cached_tokens",
    "hit_rate",
)

_PROJECT = ("coalesce(json_extract_string(metadata, '$.cwd'), "
            "json_extract_string(metadata, '$.project'))")


def requests_frame(store: Store) -> pl.DataFrame:
    """Every request of `store`, one row each (`REQUEST_FRAME_COLUMNS`)."""
    import polars as pl

    columns = ", ".join(_PROJECT + " AS project" if c == "project" else c
                        for c in REQUEST_FRAME_COLUMNS)
    # Through the Arrow C stream: `.pl()` would import pyarrow to convert.
    return pl.DataFrame(store.con.sql(f"SELECT {columns} FROM turns ORDER BY {time_order()}"))


def sessions_frame(store: Store) -> pl.DataFrame:
    """Every session of `store`, one row each (`SESSION_FRAME_COLUMNS`): its requests, its
    first request and first and last times, the log file of its first turn, whether its
    id came from the log, its compactions, and its token-weighted hit rate over the
    requests reporting both prompt and cached tokens (`usage_requests`: the basis)."""
    import polars as pl

    both = "prompt_tokens IS NOT NULL AND cached_tokens IS NOT NULL"
    return pl.DataFrame(store.con.sql(
        "SELECT session, count(*) AS requests, arg_min(id, turn) AS first_request, "
        "min(timestamp) AS started, max(timestamp) AS ended, "
        "arg_min(source_file, turn) AS source_file, "
        "bool_or(session_key IS NOT NULL AND session_key = session) AS id_from_log, "
        "count(*) FILTER (WHERE compaction) AS compactions, "
        f"count(*) FILTER (WHERE {both}) AS usage_requests, "
        f"CAST(coalesce(sum(prompt_tokens) FILTER (WHERE {both}), 0) AS BIGINT) AS prompt_tokens, "
        f"CAST(coalesce(sum(cached_tokens) FILTER (WHERE {both}), 0) AS BIGINT) "
        "AS cached_tokens, "
        f"sum(cached_tokens) FILTER (WHERE {both}) / "
        f"nullif(sum(prompt_tokens) FILTER (WHERE {both}), 0) AS hit_rate "
        "FROM turns WHERE session IS NOT NULL GROUP BY session "
        "ORDER BY min(timestamp) NULLS LAST, min(source_file), min(source_line), session"))
