"""Bifrost (maximhq/bifrost) request logs: the `logs` table of `logs.db`, or its exports.

Bifrost's log store keeps one row per proxied call in a `logs` table (GORM model
`Log`, `framework/logstore/tables.go`; formats.md §8). The default store is a SQLite
file (`logs.db` in the app directory), read here in place; the `/api/logs` JSON
(`{"logs": [...], "pagination": ...}`), JSON lines and CSV copies of the table are
read the same way, columns by name (`object_type` in the table is `object` in JSON).

Guarantees:

* Body: `raw_request` (the provider request, only with `send-back-raw-request`)
  or `passthrough_request_body` when filled and of a known protocol; else the
  normalized `input_history` (OpenAI-like chat messages, system as a message) +
  `tools` (+ `params`) as an OpenAI Chat body; else `responses_input_history` as
  an OpenAI Responses body (`input`). `metadata["body_from"]` names the source.
  A normalized body is Bifrost's view of the request, not the upstream bytes.
* Usage: `token_usage` (`BifrostLLMUsage`, cache-inclusive `prompt_tokens`,
  `prompt_tokens_details.cached_read_tokens` / `cached_tokens`, write
  `cached_write_tokens` / `cache_write_tokens`); without it the denormalized
  `prompt_tokens` / `completion_tokens` / `cached_read_tokens` columns, unless they
  are all zero (their default: nothing was reported). Semantics ``bifrost``.
* Session: `parent_request_id` (header `x-bf-parent-request-id`; the store's
  "session" unit). A row whose `id` other rows name as their parent is the head of
  that session; `parent_key` is set only when the parent row is in the file.
  Otherwise a session id in the row's `metadata` (``x-bf-session-id`` and alike), then
  another session header Bifrost logged there (its `logging_headers` setting writes
  request headers into `metadata`: Helicone, Portkey, Claude Code, ...), then the
  body's session (`normalize.sessions.session_from_body`). The logged headers
  (credentials removed) and ``prompt_cache_key`` are kept in metadata.
* Rows that are not prompts (embeddings, speech, transcription, images, rerank,
  OCR, list-models, ...) are not reported. Failed calls stay requests with
  `metadata["status"]` (their usage is usually empty).
* Backend: the provider (`channel`), and the provider key Bifrost selected for the call
  (`selected_key_name`, else `selected_key_id`: its weighted key selection spreads calls
  over keys, each an account with a cache of its own) as ``metadata.deployment``
  ``"<provider> key <name>"``, the ledger's backend (`Store.usage_records`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prefixscope.ingest.normalize.fields import (
    dig,
    is_empty_json,
    json_text,
    parse_time,
    to_bool,
    to_float,
    to_int,
    to_text,
)
from prefixscope.ingest.normalize.sessions import (
    header_map,
    loggable_headers,
    prompt_cache_key,
    session_from_body,
    session_from_headers,
)
from prefixscope.ingest.normalize.usage import usage_openai_chat
from prefixscope.ingest.readers.sqlite import iter_sqlite_columns
from prefixscope.ingest.readers.tables import iter_table_rows, row_keys, unusable_row
from prefixscope.ingest.source import Probe, Source
from prefixscope.model import Record, Request, Skip, Usage
from prefixscope.model.keys import detect_endpoint

NAME = "bifrost"
DESCRIPTION = "Bifrost request logs: `logs` table of logs.db (SQLite) or its JSON / CSV export"

_ROW_IDENTITY = frozenset({"id", "provider", "model", "status"})
_BIFROST_ONLY = frozenset({"input_history", "responses_input_history", "token_usage",
                           "parent_request_id", "number_of_retries", "fallback_index"})
_NOT_GENERATION = ("embedding", "speech", "transcription", "image", "rerank", "ocr", "video",
                   "list_models", "count_tokens", "file", "batch", "container")
_SESSION_METADATA_KEYS = ("x_bf_session_id", "bf_session_id", "session_id", "sessionid",
                          "x_session_id")


def sniff(probe: Probe) -> bool:
    if probe.kind == "sqlite":
        cols = set(probe.tables.get("logs", ()))
        return {"object_type", "provider"} <= cols and bool(_BIFROST_ONLY & cols)
    keys = row_keys(probe)
    return (_ROW_IDENTITY <= keys and bool({"object", "object_type"} & keys)
            and bool(_BIFROST_ONLY & keys))


def parse(source: Source, probe: Probe) -> Iterator[Record | Skip]:
    ids, parents = _link_ids(source, probe)
    for place, row in _rows(source, probe):
        item = _parse_row(place, row, ids, parents)
        if item is not None:
            yield item


def _rows(source: Source, probe: Probe) -> Iterator[tuple[int, Any]]:
    return iter_table_rows(source, probe, "logs")


def _link_ids(source: Source, probe: Probe) -> tuple[set[str], set[str]]:
    """(every row id, every parent_request_id) of the file: a first, light pass."""
    ids: set[str] = set()
    parents: set[str] = set()
    if probe.kind == "sqlite":
        cols = set(probe.tables.get("logs", ()))
        parent_col = "parent_request_id" if "parent_request_id" in cols else None
        for row_id, parent in iter_sqlite_columns(source, "logs", ["id", parent_col]):
            _add(ids, row_id)
            _add(parents, parent)
        return ids, parents
    for _, row in _rows(source, probe):
        if isinstance(row, dict):
            _add(ids, row.get("id"))
            _add(parents, row.get("parent_request_id"))
    return ids, parents


def _add(into: set[str], value: Any) -> None:
    text = to_text(value)
    if text:
        into.add(text)


def _parse_row(place: int, row: Any, ids: set[str], parents: set[str]) -> Record | Skip | None:
    problem = unusable_row(row, "log row")
    if problem:
        return Skip(place, problem)
    row_id = to_text(row.get("id"))
    if row_id is None:
        return Skip(place, "log row has no `id`")
    object_type = (to_text(row.get("object_type")) or to_text(row.get("object")) or "").lower()
    if any(part in object_type for part in _NOT_GENERATION):
        return None  # embeddings, audio, images, ...: no prompt to cache
    body, endpoint, body_notes = build_body(row)
    row_meta_col = json_text(row.get("metadata"))
    row_meta = row_meta_col if isinstance(row_meta_col, dict) else {}
    headers = _logged_headers(row_meta)
    session_key, session_source, parent_key = _session(row_id, row, row_meta, headers, body,
                                                       ids, parents)
    metadata = {**body_notes, **_row_metadata(row, object_type, row_meta),
                "prompt_cache_key": prompt_cache_key(body),
                "headers": loggable_headers(headers) or None,
                "deployment": _key_of(row)}
    request = Request(
        id="", source_format="", source_file="", source_line=place,
        timestamp=parse_time(row.get("timestamp")) or parse_time(row.get("created_at")),
        endpoint=endpoint,
        model=to_text(row.get("alias")) or to_text(row.get("model")),
        session_key=session_key, session_key_source=session_source, parent_key=parent_key,
        user=to_text(row.get("user_id")) or to_text(row.get("user_name"))
        or to_text(row.get("virtual_key_name")),
        client=to_text(row.get("virtual_key_name")),
        channel=to_text(row.get("provider")),
        native_id=row_id,
        body=body,
        output=_output(row),
        usage=bifrost_usage(row),
        metadata={k: v for k, v in metadata.items() if v is not None},
    )
    return Record(request=request, key=f"id:{row_id}")


def _key_of(row: dict[str, Any]) -> str | None:
    """The provider key that served the call (``"<provider> key <name>"``; None: no key
    logged, a keyless provider)."""
    provider = to_text(row.get("provider"))
    key = to_text(row.get("selected_key_name")) or to_text(row.get("selected_key_id"))
    return f"{provider} key {key}" if provider and key else None


def build_body(row: dict[str, Any]) -> tuple[dict[str, Any] | None, str, dict[str, Any]]:
    """(body, endpoint, notes): the logged raw body when usable, else one built from the history."""
    notes: dict[str, Any] = {}
    for column in ("raw_request", "passthrough_request_body"):
        raw = json_text(row.get(column))
        if isinstance(raw, dict) and raw:
            endpoint = detect_endpoint(raw)
            if endpoint != "unknown":
                return raw, endpoint, {"body_from": column}
            notes[f"{column}_protocol"] = "unknown"
    history = json_text(row.get("input_history"))
    params = json_text(row.get("params"))
    params = params if isinstance(params, dict) else {}
    tools = json_text(row.get("tools"))
    if isinstance(history, list) and history:
        body: dict[str, Any] = {"model": to_text(row.get("model")), "messages": history}
        if isinstance(tools, list) and tools:
            body["tools"] = tools
        body.update((k, v) for k, v in params.items() if k not in body)
        notes["body_from"] = "input_history+tools+params"
        return body, "openai-chat", notes
    items = json_text(row.get("responses_input_history"))
    if isinstance(items, list) and items:
        body = {"model": to_text(row.get("model")), "input": items}
        body.update((k, v) for k, v in params.items() if k not in body)
        if "tools" not in body and isinstance(tools, list) and tools:
            body["tools"] = tools
        notes["body_from"] = "responses_input_history+params"
        return body, "openai-responses", notes
    return None, "unknown", notes


def bifrost_usage(row: dict[str, Any]) -> Usage:
    """Cache-inclusive usage from `token_usage`, else from the denormalized columns."""
    logged = json_text(row.get("token_usage"))
    if isinstance(logged, dict) and ("prompt_tokens" in logged or "completion_tokens" in logged):
        u = usage_openai_chat(logged)
        return Usage(prompt_tokens=u.prompt_tokens, cached_tokens=u.cached_tokens,
                     cache_write_tokens=u.cache_write_tokens, output_tokens=u.output_tokens,
                     semantics="bifrost")
    prompt = to_int(row.get("prompt_tokens"))
    output = to_int(row.get("completion_tokens"))
    read = to_int(row.get("cached_read_tokens"))
    if not any((prompt, output, read, to_int(row.get("total_tokens")))):
        return Usage()  # column defaults: the call reported no usage
    return Usage(prompt_tokens=prompt, cached_tokens=read, output_tokens=output,
                 semantics="bifrost")


def _logged_headers(row_meta: dict[str, Any]) -> dict[str, str]:
    """The request headers Bifrost logged into `metadata` (names with a hyphen)."""
    return {k: v for k, v in header_map(row_meta).items() if "-" in k}


def _session(row_id: str, row: dict[str, Any], row_meta: dict[str, Any],
             headers: dict[str, str], body: dict[str, Any] | None, ids: set[str],
             parents: set[str]) -> tuple[str | None, str | None, str | None]:
    """(session key, its source, parent key)."""
    parent = to_text(row.get("parent_request_id"))
    if parent:
        return parent, "bifrost.parent_request_id", parent if parent in ids else None
    if row_id in parents:
        return row_id, "bifrost.parent_request_id", None
    for key, value in row_meta.items():
        if str(key).lower().replace("-", "_") in _SESSION_METADATA_KEYS and (sid := to_text(value)):
            return sid, f"bifrost.metadata.{key}", None
    found = session_from_headers(headers) or session_from_body(body)
    return (found[0], found[1], None) if found else (None, None, None)


def _row_metadata(row: dict[str, Any], object_type: str,
                  row_meta: dict[str, Any]) -> dict[str, Any]:
    error = json_text(row.get("error_details"))
    offloaded = any(to_bool(row.get(k)) for k in
                    ("has_object", "is_large_payload_request", "is_large_payload_response"))
    return {
        "object_type": object_type or None,
        "status": to_text(row.get("status")),
        "stop_reason": to_text(row.get("stop_reason")),
        "error": to_text(dig(error, "error", "message"))
        or (to_text(error) if isinstance(error, str) else None),
        "resolved_model": to_text(row.get("model")) if to_text(row.get("alias")) else None,
        "latency_ms": to_float(row.get("latency")),
        "cost": to_float(row.get("cost")),
        "stream": to_bool(row.get("stream")),
        "number_of_retries": to_int(row.get("number_of_retries")) or None,
        "fallback_index": to_int(row.get("fallback_index")) or None,
        "selected_key_name": to_text(row.get("selected_key_name")),
        "virtual_key_id": to_text(row.get("virtual_key_id")),
        "team_name": to_text(row.get("team_name")),
        "payload_offloaded": True if offloaded else None,
        "bifrost_metadata": row_meta or None,
    }


def _output(row: dict[str, Any]) -> Any:
    for column in ("output_message", "responses_output"):
        value = json_text(row.get(column))
        if not is_empty_json(value):
            return value
    return None



