"""Builders for gateway databases in their real on-disk shape, for tests.

`make_newapi_db` writes a SQLite database whose `logs` table is what new-api's GORM
AutoMigrate creates for `model/log.go` (struct `Log`, formats.md §2.1), so tests
(ingest, bucket, report) read exactly what a user's `one-api.db` holds.
`make_bifrost_db` does the same for Bifrost's `logs` table
(`framework/logstore/tables.go`, formats.md §8).

Rows are dicts keyed by column name; missing columns take the table defaults and a
dict / list value for a JSON text column (`other`, `input_history`, ...) is
serialized compactly as Go does (new-api's `other` is a map: keys sorted; Bifrost's
columns are structs: key order kept).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

# GORM (gorm.io/driver/sqlite) DDL for new-api's `Log`: int -> integer, int64 -> integer,
# string -> text, bool -> numeric. `channel_name` is `gorm:"->"` (read-only, filled by a
# join) but AutoMigrate still creates the column; it is always empty in the table.
NEWAPI_LOGS_DDL = (
    "CREATE TABLE `{table}` (`id` integer PRIMARY KEY AUTOINCREMENT,`user_id` integer,"
    "`created_at` integer,`type` integer,`content` text,`username` text DEFAULT '',"
    "`token_name` text DEFAULT '',`model_name` text DEFAULT '',`quota` integer DEFAULT 0,"
    "`prompt_tokens` integer DEFAULT 0,`completion_tokens` integer DEFAULT 0,"
    "`use_time` integer DEFAULT 0,`is_stream` numeric,`channel_id` integer,"
    "`channel_name` text,`token_id` integer DEFAULT 0,`group` text,`ip` text DEFAULT '',"
    "`other` text,`request_id` varchar(64))"
)
NEWAPI_INDEXES = (
    "CREATE INDEX `idx_{table}_user_id` ON `{table}`(`user_id`)",
    "CREATE INDEX `idx_created_at_type` ON `{table}`(`created_at`,`type`)",
    "CREATE INDEX `idx_{table}_token_name` ON `{table}`(`token_name`)",
    "CREATE INDEX `idx_{table}_model_name` ON `{table}`(`model_name`)",
    "CREATE INDEX `idx_{table}_channel_id` ON `{table}`(`channel_id`)",
    "CREATE INDEX `idx_{table}_token_id` ON `{table}`(`token_id`)",
    "CREATE INDEX `idx_{table}_group` ON `{table}`(`group`)",
    "CREATE INDEX `idx_logs_request_id` ON `{table}`(`request_id`)",
)

# GORM DDL for the Bifrost `Log` columns prefixscope reads (plus a few it does not).
BIFROST_LOGS_DDL = (
    "CREATE TABLE `logs` (`id` varchar(255),`inc_number` integer,`parent_request_id` varchar(255),"
    "`timestamp` datetime NOT NULL,`object_type` varchar(255) NOT NULL,"
    "`provider` varchar(255) NOT NULL,`model` varchar(255) NOT NULL,`alias` varchar(255),"
    "`number_of_retries` integer DEFAULT 0,`fallback_index` integer DEFAULT 0,"
    "`selected_key_id` varchar(255),`selected_key_name` varchar(255),`attempt_trail` text,"
    "`virtual_key_id` varchar(255),`virtual_key_name` varchar(255),"
    "`user_id` varchar(255),`user_name` varchar(255),`team_id` varchar(255),"
    "`team_name` varchar(255),`input_history` text,`responses_input_history` text,"
    "`output_message` text,`responses_output` text,`params` text,`tools` text,"
    "`tool_calls` text,`cache_debug` text,`latency` real,`token_usage` text,`cost` real,"
    "`status` varchar(50) NOT NULL,`stop_reason` varchar(50),`error_details` text,"
    "`stream` numeric DEFAULT false,`content_summary` text,`raw_request` text,"
    "`raw_response` text,`passthrough_request_body` text,`passthrough_response_body` text,"
    "`routing_engine_logs` text,`plugin_logs` text,`metadata` text,"
    "`is_large_payload_request` numeric DEFAULT false,"
    "`is_large_payload_response` numeric DEFAULT false,`has_object` numeric DEFAULT false,"
    "`prompt_tokens` integer DEFAULT 0,`completion_tokens` integer DEFAULT 0,"
    "`total_tokens` integer DEFAULT 0,`cached_read_tokens` integer DEFAULT 0,"
    "`created_at` datetime NOT NULL,PRIMARY KEY (`id`))"
)


def _cell(value: Any, sort_keys: bool) -> Any:
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys)
    return value


def _insert(con: sqlite3.Connection, table: str, rows: list[dict[str, Any]], *,
            sort_keys: bool) -> None:
    for row in rows:
        cols = list(row)
        sql = (f"INSERT INTO `{table}` ({','.join(f'`{c}`' for c in cols)}) "
               f"VALUES ({','.join('?' for _ in cols)})")
        con.execute(sql, [_cell(row[c], sort_keys) for c in cols])


def make_newapi_db(path: Path | str, rows: list[dict[str, Any]], *, table: str = "logs",
                   with_request_id: bool = True) -> Path:
    """A new-api SQLite database at `path` whose log table holds `rows` (column -> value).

    `with_request_id=False` drops the `request_id` column, as in versions before it existed.
    Calling it again on the same path adds another table (fork daily tables `logs_YYYY_MM_DD`).
    """
    path = Path(path)
    ddl = NEWAPI_LOGS_DDL.format(table=table)
    if not with_request_id:
        ddl = ddl.replace(",`request_id` varchar(64)", "")
    con = sqlite3.connect(path)
    try:
        con.execute(ddl)
        for index in NEWAPI_INDEXES:
            if with_request_id or "request_id" not in index:
                sql = index.format(table=table)
                if table != "logs":  # SQLite index names are per database
                    sql = sql.replace("`idx_created_at_type`", f"`idx_{table}_created_at_type`")
                    sql = sql.replace("`idx_logs_request_id`", f"`idx_{table}_request_id`")
                con.execute(sql)
        _insert(con, table, rows, sort_keys=True)  # Go marshals `other` (a map) key-sorted
        con.commit()
    finally:
        con.close()
    return path


def newapi_consume_row(log_id: int, *, created_at: int = 1760000000, prompt_tokens: int = 100,
                       completion_tokens: int = 20, other: dict[str, Any] | None = None,
                       **columns: Any) -> dict[str, Any]:
    """A consume (type 2) row as new-api writes it; `other` and any column can be overridden."""
    row: dict[str, Any] = {
        "id": log_id, "user_id": 7, "created_at": created_at, "type": 2,
        "content": "模型倍率 1.50，补全倍率 5.00，分组倍率 1.00", "username": "alice",
        "token_name": "claude-code", "model_name": "claude-sonnet-4-5", "quota": 2134,
        "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "use_time": 7,
        "is_stream": 1, "channel_id": 12, "token_id": 44, "group": "default", "ip": "",
        "other": other if other is not None else {
            "cache_tokens": 0, "cache_ratio": 0.1, "frt": 1840, "model_ratio": 1.5,
            "group_ratio": 1, "completion_ratio": 5, "model_price": -1, "user_group_ratio": -1,
            "request_path": "/v1/chat/completions",
        },
        "request_id": f"20251009{log_id:012d}",
    }
    row.update(columns)
    return row


def make_bifrost_db(path: Path | str, rows: list[dict[str, Any]]) -> Path:
    """A Bifrost `logs.db` at `path` whose `logs` table holds `rows` (column -> value)."""
    path = Path(path)
    con = sqlite3.connect(path)
    try:
        con.execute(BIFROST_LOGS_DDL)
        con.execute("CREATE INDEX `idx_logs_parent_request_id` ON `logs`(`parent_request_id`)")
        con.execute("CREATE TABLE `migrations` (`id` varchar(255),PRIMARY KEY (`id`))")
        _insert(con, "logs", rows, sort_keys=False)  # sonic marshals structs in field order
        con.commit()
    finally:
        con.close()
    return path
