"""new-api (QuantumNous/new-api) billing logs: the `logs` table, read in place or exported.

new-api is the gateway in prefixscope's headline case (formats.md §0.3, §2.4): it
converts Claude Messages to OpenAI Chat and joins the system blocks with no
separator. Its `logs` table (`model/log.go`, struct `Log`) holds one row per
billing event, and its default database is SQLite (`one-api.db`), so this module
reads that file directly; CSV / JSON / JSON-lines exports of the same table (and
the admin API's `{"data": {"items": [...]}}` page) are read the same way, columns
by name, extras and fork columns tolerated, `request_id` optional (older versions).
Fork layouts with daily tables `logs_YYYY_MM_DD` are read table by table.

Guarantees:

* Only consume rows (`type == 2`) are requests. Top-ups, management, system,
  error (5) and refund rows are not requests and are not reported; neither are
  the quota re-settlements of async tasks (`RecordReConsumeLog`: `other.task_id`
  + `other.quota_delta`).
* Usage follows formats.md §2.3: when `other.claude` is true the upstream was
  Claude-native and `prompt_tokens` is the *uncached* input, so cache reads
  (`other.cache_tokens`) and writes (`other.cache_creation_tokens`) are added
  (semantics ``new-api:claude``); otherwise `prompt_tokens` already includes the
  cache (``new-api:openai``). An `other` that is not a JSON object leaves the
  convention unknown (``new-api:unknown``, `metadata["other_error"]`).
* No bodies: new-api stores no prompt. `endpoint` is the protocol of the client
  route (`other.request_path`), `gateway` the conversion chain
  (`other.request_conversion`, e.g. ``anthropic-to-openai``). No session id
  exists (§2.5): sessions are threaded heuristically later.
* The backend that served the call: its channel (`channel_id`, the one that finally
  served it after any retry), and on a multi-key channel the key
  (`other.admin_info.is_multi_key` + `multi_key_index`, admin-visible; a direct relay
  logs `other.multi_key_index`): each key is an account of its own upstream, with a
  cache of its own, so ``metadata.deployment`` is ``"<channel> key <index>"``, the
  ledger's backend (`Store.usage_records`) before the channel.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from prefixscope.ingest.normalize.fields import (
    gateway_from_conversion,
    loads_deep,
    parse_time,
    to_bool,
    to_int,
    to_text,
)
from prefixscope.ingest.readers.sqlite import iter_sqlite_rows
from prefixscope.ingest.readers.tables import iter_table_rows, row_keys, unusable_row
from prefixscope.ingest.source import Probe, Source
from prefixscope.model import Record, Request, Skip, Usage

NAME = "new-api"
DESCRIPTION = "new-api `logs` table: its SQLite database (one-api.db) or a CSV / JSON export"

LOG_TYPE_CONSUME = 2
# Columns every new-api `logs` table has and no other supported format has together.
REQUIRED_COLUMNS = frozenset({"type", "model_name", "quota", "prompt_tokens", "other"})
_DAILY_TABLE = re.compile(r"logs_\d{4}_\d{2}_\d{2}")

# `other.request_conversion` names (service/log_info_generate.go) -> protocol family.
# Client route suffix -> protocol of the request the client sent.
_ROUTE_ENDPOINTS = (
    ("/v1/messages", "anthropic-messages"),
    ("/chat/completions", "openai-chat"),
    ("/v1/responses", "openai-responses"),
)


def sniff(probe: Probe) -> bool:
    if probe.kind == "sqlite":
        return bool(log_tables(probe))
    return REQUIRED_COLUMNS <= row_keys(probe)


def log_tables(probe: Probe) -> list[str]:
    """The new-api log tables of a SQLite database: `logs` first, then daily fork tables."""
    names = [t for t, cols in probe.tables.items()
             if (t == "logs" or _DAILY_TABLE.fullmatch(t)) and REQUIRED_COLUMNS <= set(cols)]
    return sorted(names, key=lambda t: (t != "logs", t))


def parse(source: Source, probe: Probe) -> Iterator[Record | Skip]:
    if probe.kind == "sqlite":
        for table in log_tables(probe):
            for place, row in iter_sqlite_rows(source, table):
                item = _parse_row(place, row, table)
                if item is not None:
                    yield item
        return
    for place, row in iter_table_rows(source, probe, "logs"):
        item = _parse_row(place, row, "logs")
        if item is not None:
            yield item


def _parse_row(place: int, row: Any, table: str) -> Record | Skip | None:
    problem = unusable_row(row, "log row")
    if problem:
        return Skip(place, problem)
    log_type = to_int(row.get("type"))
    if log_type is None:
        return Skip(place, f"log row has no numeric `type` (got {row.get('type')!r})")
    if log_type != LOG_TYPE_CONSUME:
        return None  # top-up / manage / system / error / refund: not a request
    other, other_error = _parse_other(row.get("other"))
    if "task_id" in other and "quota_delta" in other:
        return None  # async task quota re-settlement, not a model call
    log_id = to_text(row.get("id"))
    request_id = to_text(row.get("request_id"))
    if log_id is None and request_id is None:
        return Skip(place, "consume row has neither `id` nor `request_id`")
    in_table = "" if table == "logs" else f"{table}:"
    key = f"request_id:{request_id}" if request_id else f"log:{in_table}{log_id}"
    metadata = _metadata(row, other, table)
    channel = to_text(row.get("channel_id") if row.get("channel_id") is not None
                      else row.get("channel"))
    channel_key = _multi_key(channel, other)
    if channel_key is not None:
        metadata["deployment"] = channel_key
    if other_error:
        metadata["other_error"] = other_error
    request = Request(
        id="", source_format="", source_file="", source_line=place,
        timestamp=parse_time(row.get("created_at")),
        endpoint=_endpoint(other.get("request_path")),
        model=to_text(row.get("model_name")),
        user=to_text(row.get("username")) or to_text(row.get("user_id")),
        client=to_text(row.get("token_name")),
        channel=channel,
        gateway=gateway_from_conversion(other.get("request_conversion")),
        native_id=request_id or f"log:{log_id}",
        usage=newapi_usage(row, other, convention_known=other_error is None),
        metadata=metadata,
    )
    return Record(request=request, key=key)


def newapi_usage(row: dict[str, Any], other: dict[str, Any], *,
                 convention_known: bool = True) -> Usage:
    """Usage of a consume row, cache-inclusive whatever the upstream (formats.md §2.3)."""
    logged_prompt = to_int(row.get("prompt_tokens"))
    read = to_int(other.get("cache_tokens"))
    write = to_int(other.get("cache_creation_tokens"))
    short, long = (to_int(other.get(k))
                   for k in ("cache_creation_tokens_5m", "cache_creation_tokens_1h"))
    if write is None and (short is not None or long is not None):
        write = (short or 0) + (long or 0)
    # the 1-hour part of the writes, where the row splits them by TTL (Anthropic's
    # ephemeral_1h_input_tokens, as GenerateClaudeOtherInfo copies it, each part only when
    # present: a split naming only 5-minute writes has none for the hour); a split that
    # does not fit in the writes is not one
    split = short is not None or long is not None
    one_hour = (long or 0) if split and write is not None and (long or 0) <= write else None
    output = to_int(row.get("completion_tokens"))
    if to_bool(other.get("claude")) is True:
        # Claude-native upstream: the row holds the uncached input only.
        prompt = None if logged_prompt is None else logged_prompt + (read or 0) + (write or 0)
        return Usage(prompt_tokens=prompt, cached_tokens=read, cache_write_tokens=write,
                     output_tokens=output, semantics="new-api:claude",
                     cache_write_1h_tokens=one_hour)
    semantics = "new-api:openai" if convention_known else "new-api:unknown"
    return Usage(prompt_tokens=logged_prompt, cached_tokens=read, cache_write_tokens=write,
                 output_tokens=output, semantics=semantics, cache_write_1h_tokens=one_hour)


def _multi_key(channel: str | None, other: dict[str, Any]) -> str | None:
    """The key of a multi-key channel that served the call (``"<channel> key <index>"``;
    None: one key, or not logged)."""
    admin = loads_deep(other.get("admin_info"))
    admin = admin if isinstance(admin, dict) else {}
    index = to_int(admin.get("multi_key_index"))
    if index is None or to_bool(admin.get("is_multi_key")) is not True:
        index = to_int(other.get("multi_key_index"))  # a direct relay's
    return f"{channel} key {index}" if channel is not None and index is not None else None


def _parse_other(value: Any) -> tuple[dict[str, Any], str | None]:
    """(`other` as a dict, a note when it was not a JSON object)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}, "empty `other`"
    parsed = loads_deep(value)
    if isinstance(parsed, dict):
        return parsed, None
    if isinstance(parsed, str):
        return {}, "`other` is not valid JSON"
    return {}, f"`other` is a JSON {type(parsed).__name__}, not an object"


def _metadata(row: dict[str, Any], other: dict[str, Any], table: str) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for out_key, value in (
        ("log_id", to_int(row.get("id"))),
        ("table", None if table == "logs" else table),
        ("user_id", to_int(row.get("user_id"))),
        ("token_id", to_int(row.get("token_id"))),
        ("group", to_text(row.get("group"))),
        ("channel_name", to_text(row.get("channel_name"))),
        ("quota", to_int(row.get("quota"))),
        ("use_time_s", to_int(row.get("use_time"))),
        ("is_stream", to_bool(row.get("is_stream"))),
        ("frt_ms", to_int(other.get("frt"))),
        ("upstream_model_name", to_text(other.get("upstream_model_name"))),
        ("request_path", to_text(other.get("request_path"))),
        ("request_conversion", other.get("request_conversion")),
        ("claude_upstream", to_bool(other.get("claude"))),
        ("cache_ratio", other.get("cache_ratio")),
    ):
        if value is not None:
            meta[out_key] = value
    return meta


def _endpoint(request_path: Any) -> str:
    if not isinstance(request_path, str):
        return "unknown"
    path = request_path.split("?", 1)[0].rstrip("/")
    for suffix, endpoint in _ROUTE_ENDPOINTS:
        if path.endswith(suffix):
            return endpoint
    return "unknown"



