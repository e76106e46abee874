"""LiteLLM proxy spend logs: `LiteLLM_SpendLogs` rows (table export or `/spend/logs`).

LiteLLM writes one `LiteLLM_SpendLogs` row per proxied call (formats.md §3.1,
`litellm/proxy/spend_tracking/spend_tracking_utils.py` `get_logging_payload`). Users
get them as the `/spend/logs` API's JSON list (or the UI endpoint's `{"data": [...]}`
page), as JSON / JSON lines, or as a CSV / SQLite copy of the Postgres table.

Guarantees:

* The body is `proxy_server_request` (the client's HTTP body, OpenAI or Anthropic
  shape) when it is not empty; it is only stored with `store_prompts_in_spend_logs`.
  Old versions that filled `messages` instead get a minimal OpenAI Chat body built
  from it (`metadata["body_from"] = "messages"`).
* LiteLLM cuts long strings to head + tail with the marker
  ``... (litellm_truncated skipped N chars) ...``; any marker in the body sets
  `body_truncated` and `metadata["truncated_fields"]` (count) and
  `metadata["truncated_chars"]` (sum of N): that text is not what was sent.
* Usage: `prompt_tokens` is cache-inclusive (Anthropic: input + read + write).
  Cache read and write come from `metadata.additional_usage_values` (else
  `metadata.usage_object`). Old versions left cache writes out of `prompt_tokens`;
  when `prompt_tokens` is smaller than read + write the missing part is added and
  the row says so (`metadata["usage_note"]`, semantics ``litellm:corrected``).
* Sessions: LiteLLM fills `session_id` with a fresh uuid4 when the client sent no
  session / trace id, so a `session_id` is taken as explicit only when it is
  *stable*: used by more than one row of the file, or declared in the row's
  metadata (`litellm_trace_id`, `trace_id`, `session_id`, header
  `x-litellm-session-id` / `x-litellm-trace-id`). Otherwise a session header the row
  logged (`metadata.requester_custom_headers`: Helicone, Bifrost, Portkey, Claude
  Code, ...), else the body's session (`normalize.sessions.session_from_body`: Responses
  ``conversation``, ``metadata.session_id``, Claude Code's ``metadata.user_id``).
  Counting needs a first pass over the file (table exports are finite). A Responses
  ``previous_response_id`` is the `parent_key`; ``prompt_cache_key`` and the logged
  headers (credentials removed) are kept in metadata.
* Rows of non-generation call types (embeddings, images, audio, moderation,
  rerank, files, batches, MCP tool calls, ...) are not model prompts and are not
  reported. LiteLLM response-cache hits (`cache_hit` "True", `_cache_hit` id
  suffix) are requests, flagged `metadata["litellm_cache_hit"]`.
* The stored `response` keeps the provider's verdict on the cache where it asked for one
  (an Anthropic message's ``diagnostics``, a Responses object's
  ``prompt_cache_diagnostics``): it is read as a raw capture's is
  (`normalize.streams.verdict_metadata`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

from prefixscope.ingest.normalize.fields import (
    dig,
    first_present,
    is_empty_json,
    json_text,
    parse_time,
    strings,
    to_bool,
    to_float,
    to_int,
    to_text,
)
from prefixscope.ingest.normalize.sessions import (
    header_map,
    loggable_headers,
    previous_response,
    prompt_cache_key,
    session_from_body,
    session_from_headers,
)
from prefixscope.ingest.normalize.streams import decode_response, verdict_metadata
from prefixscope.ingest.readers.tables import iter_table_rows, row_keys, unusable_row
from prefixscope.ingest.source import Probe, Source
from prefixscope.model import Record, Request, Skip, Usage
from prefixscope.model.keys import detect_endpoint

NAME = "litellm"
DESCRIPTION = "LiteLLM proxy LiteLLM_SpendLogs rows: /spend/logs JSON, JSON lines, CSV, SQLite"

REQUIRED_COLUMNS = frozenset({"request_id", "call_type", "spend"})
_ONE_OF_COLUMNS = frozenset({"api_key", "startTime"})

TRUNCATION_MARKER = re.compile(r"\.\.\. \(([\w<>]+) skipped (\d+) chars\) \.\.\.")

# call_type substrings of calls that carry no chat/completions prompt.
_NOT_GENERATION = ("embedding", "image", "moderation", "transcription", "speech", "rerank",
                   "batch", "file", "fine_tuning", "vector_store", "search", "ocr", "video",
                   "mcp", "assistant", "thread", "container", "skill", "count_tokens")
_CALL_TYPE_ENDPOINT = {
    "anthropic_messages": "anthropic-messages",
    "responses": "openai-responses",
    "aresponses": "openai-responses",
    "completion": "openai-chat",
    "acompletion": "openai-chat",
}
_OPENAI_PROVIDERS = frozenset({
    "openai", "azure", "azure_ai", "hosted_vllm", "vllm", "openai_like", "custom_openai",
    "text-completion-openai", "deepseek", "openrouter", "together_ai", "groq", "fireworks_ai",
    "xai", "mistral", "dashscope", "moonshot", "volcengine", "ollama_chat", "lm_studio",
    "nvidia_nim", "sambanova", "cerebras", "litellm_proxy",
})
_SESSION_KEYS = ("litellm_trace_id", "trace_id", "session_id", "litellm_session_id")
_SESSION_HEADERS = ("x-litellm-session-id", "x-litellm-trace-id")


def sniff(probe: Probe) -> bool:
    if probe.kind == "sqlite":
        return spend_table(probe) is not None
    keys = row_keys(probe)
    return REQUIRED_COLUMNS <= keys and bool(_ONE_OF_COLUMNS & keys)


def spend_table(probe: Probe) -> str | None:
    tables = [t for t, cols in probe.tables.items() if REQUIRED_COLUMNS <= set(cols)]
    if not tables:
        return None
    return "LiteLLM_SpendLogs" if "LiteLLM_SpendLogs" in tables else sorted(tables)[0]


def parse(source: Source, probe: Probe) -> Iterator[Record | Skip]:
    session_uses = _count_session_ids(_rows(source, probe))
    for place, row in _rows(source, probe):
        item = _parse_row(place, row, session_uses)
        if item is not None:
            yield item


def _rows(source: Source, probe: Probe) -> Iterator[tuple[int, Any]]:
    table = spend_table(probe) if probe.kind == "sqlite" else "LiteLLM_SpendLogs"
    if table is not None:
        yield from iter_table_rows(source, probe, table)


def _count_session_ids(rows: Iterator[tuple[int, Any]]) -> Counter[str]:
    uses: Counter[str] = Counter()
    for _, row in rows:
        if isinstance(row, dict):
            sid = to_text(row.get("session_id"))
            if sid:
                uses[sid] += 1
    return uses


def _parse_row(place: int, row: Any, session_uses: Counter[str]) -> Record | Skip | None:
    problem = unusable_row(row, "spend log row")
    if problem:
        return Skip(place, problem)
    request_id = to_text(row.get("request_id"))
    if request_id is None:
        return Skip(place, "spend log row has no `request_id`")
    call_type = (to_text(row.get("call_type")) or "").lower()
    if any(part in call_type for part in _NOT_GENERATION):
        return None  # embeddings, images, audio, ...: no prompt to cache
    meta_col = json_text(row.get("metadata"))
    row_meta = meta_col if isinstance(meta_col, dict) else {}
    metadata: dict[str, Any] = {"call_type": call_type or None}
    body, body_from = _body(row)
    if body is not None:
        metadata["body_from"] = body_from
        fields, chars = count_truncation_markers(body)
        if fields:
            metadata["truncated_fields"] = fields
            metadata["truncated_chars"] = chars
    endpoint = _endpoint(call_type, body)
    provider = to_text(row.get("custom_llm_provider"))
    usage, usage_notes = litellm_usage(row, row_meta)
    metadata.update(usage_notes)
    headers = _logged_headers(row_meta)
    session_key, session_source = _session(row, row_meta, headers, body, session_uses)
    metadata.update(_row_metadata(row, row_meta, request_id))
    metadata["prompt_cache_key"] = prompt_cache_key(body)
    metadata["headers"] = loggable_headers(headers) or None
    output = _output(row.get("response"))
    # the provider's verdict, where the stored response kept it (an Anthropic message's
    # ``diagnostics``, a Responses object's ``prompt_cache_diagnostics``)
    metadata.update(verdict_metadata(decode_response(output).verdict
                                     if isinstance(output, dict) else None))
    request = Request(
        id="", source_format="", source_file="", source_line=place,
        timestamp=parse_time(row.get("startTime")),
        endpoint=endpoint,
        model=to_text(row.get("model_group")) or to_text(row.get("model")),
        session_key=session_key, session_key_source=session_source,
        parent_key=previous_response(body),
        user=to_text(row.get("user")) or to_text(row.get("end_user"))
        or to_text(row_meta.get("user_api_key_user_id")),
        client=to_text(row_meta.get("user_api_key_alias")) or to_text(row_meta.get("user_agent")),
        channel=provider,
        gateway=_gateway(endpoint, provider),
        native_id=request_id,
        body=body,
        body_truncated=bool(metadata.get("truncated_fields")),
        output=output,
        usage=usage,
        metadata={k: v for k, v in metadata.items() if v is not None},
    )
    return Record(request=request, key=f"request_id:{request_id}")


def _body(row: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """(the request body, the column it came from)."""
    logged = json_text(row.get("proxy_server_request"))
    if isinstance(logged, dict) and isinstance(logged.get("body"), dict) and (
            "url" in logged or "headers" in logged or "method" in logged):
        logged = logged["body"]  # the whole proxy_server_request wrapper was logged
    if isinstance(logged, dict) and not is_empty_json(logged):
        return logged, "proxy_server_request"
    messages = json_text(row.get("messages"))
    if isinstance(messages, list) and messages:
        model = to_text(row.get("model_group")) or to_text(row.get("model"))
        body: dict[str, Any] = {"model": model}
        body["messages"] = messages
        return body, "messages"
    return None, None


def count_truncation_markers(value: Any) -> tuple[int, int]:
    """(strings cut by LiteLLM's spend-log sanitizer, characters skipped in total)."""
    fields = chars = 0
    for text in strings(value):
        found = TRUNCATION_MARKER.findall(text)
        if found:
            fields += 1
            chars += sum(int(n) for _, n in found)
    return fields, chars


def _endpoint(call_type: str, body: dict[str, Any] | None) -> str:
    hinted = _CALL_TYPE_ENDPOINT.get(call_type)
    if body is None:
        return hinted or "unknown"
    if hinted in ("anthropic-messages", "openai-responses"):
        return hinted
    return detect_endpoint(body)


def litellm_usage(row: dict[str, Any], row_meta: dict[str, Any]) -> tuple[Usage, dict[str, Any]]:
    """(cache-inclusive usage of the row, notes for metadata when the numbers disagree)."""
    prompt = to_int(row.get("prompt_tokens"))
    output = to_int(row.get("completion_tokens"))
    extra = row_meta.get("additional_usage_values")
    full = row_meta.get("usage_object")
    read = to_int(first_present(
        dig(extra, "prompt_tokens_details", "cached_tokens"), dig(extra, "cache_read_input_tokens"),
        dig(full, "prompt_tokens_details", "cached_tokens"), dig(full, "cache_read_input_tokens")))
    write = to_int(first_present(
        dig(extra, "cache_creation_input_tokens"),
        dig(extra, "prompt_tokens_details", "cache_creation_tokens"),
        dig(full, "cache_creation_input_tokens"),
        dig(full, "prompt_tokens_details", "cache_creation_tokens")))
    notes: dict[str, Any] = {}
    semantics = "litellm"
    total = to_int(row.get("total_tokens"))
    if total is not None and prompt is not None and output is not None and total != prompt + output:
        notes["usage_total_mismatch"] = (
            f"total_tokens {total} != prompt {prompt} + completion {output}")
    if prompt is not None and prompt < (read or 0) + (write or 0):
        notes["prompt_tokens_logged"] = prompt
        if prompt >= (read or 0):
            notes["usage_note"] = (
                "prompt_tokens < cache read + write: cache write added (older LiteLLM)")
            prompt += write or 0
        else:
            notes["usage_note"] = "prompt_tokens < cache read: cache read and write added"
            prompt += (read or 0) + (write or 0)
        semantics = "litellm:corrected"
    return Usage(prompt_tokens=prompt, cached_tokens=read, cache_write_tokens=write,
                 output_tokens=output, semantics=semantics), notes


def _session(row: dict[str, Any], row_meta: dict[str, Any], headers: dict[str, str],
             body: dict[str, Any] | None,
             session_uses: Counter[str]) -> tuple[str | None, str | None]:
    sid = to_text(row.get("session_id"))
    if sid and (session_uses[sid] > 1 or sid in declared_session_ids(row_meta)):
        return sid, "litellm.session_id"
    found = session_from_headers(headers) or session_from_body(body)
    return found if found else (None, None)


def _logged_headers(row_meta: dict[str, Any]) -> dict[str, str]:
    """The client's headers as the row's metadata logged them (lower-case names)."""
    headers: dict[str, str] = {}
    for key in ("headers", "requester_custom_headers"):
        headers.update(header_map(row_meta.get(key)))
    return headers


def declared_session_ids(row_meta: dict[str, Any]) -> set[str]:
    """Session / trace ids the client set explicitly, as the row's metadata records them."""
    found: set[str] = set()
    scopes = (row_meta, row_meta.get("spend_logs_metadata"), row_meta.get("requester_metadata"))
    for scope in scopes:
        if isinstance(scope, dict):
            found.update(v for k in _SESSION_KEYS if (v := to_text(scope.get(k))))
    for headers_key in ("requester_custom_headers", "headers"):
        headers = row_meta.get(headers_key)
        if isinstance(headers, dict):
            for name, value in headers.items():
                if str(name).lower() in _SESSION_HEADERS and (v := to_text(value)):
                    found.add(v)
    return found


def _gateway(endpoint: str, provider: str | None) -> str | None:
    """LiteLLM's own protocol translation, when the client protocol differs from the provider's."""
    if provider is None:
        return None
    family = "anthropic" if provider == "anthropic" else (
        "openai" if provider in _OPENAI_PROVIDERS else None)
    if endpoint == "anthropic-messages" and family == "openai":
        return "litellm:anthropic-to-openai"
    if endpoint in ("openai-chat", "openai-responses") and family == "anthropic":
        client = "openai" if endpoint == "openai-chat" else "openai-responses"
        return f"litellm:{client}-to-anthropic"
    return None


def _row_metadata(row: dict[str, Any], row_meta: dict[str, Any], request_id: str) -> dict[str, Any]:
    cache_hit = to_bool(row.get("cache_hit")) is True or "_cache_hit" in request_id
    return {
        "litellm_cache_hit": True if cache_hit else None,
        "litellm_session_id": to_text(row.get("session_id")),
        "status": to_text(row.get("status")) or to_text(row_meta.get("status")),
        "upstream_model": to_text(row.get("model")),
        "model_group": to_text(row.get("model_group")),
        "model_id": to_text(row.get("model_id")),
        "api_base": to_text(row.get("api_base")),
        "end_user": to_text(row.get("end_user")),
        "team_id": to_text(row.get("team_id")),
        "api_key_hash": to_text(row.get("api_key")),
        "spend": to_float(row.get("spend")),
        "end_time": _iso(parse_time(row.get("endTime"))),
        "completion_start_time": _iso(parse_time(row.get("completionStartTime"))),
        "request_duration_ms": to_int(row.get("request_duration_ms")),
        "request_tags": _nonempty(json_text(row.get("request_tags"))),
    }


def _output(value: Any) -> Any:
    parsed = json_text(value)
    return None if is_empty_json(parsed) else parsed






def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def _nonempty(value: Any) -> Any:
    return None if is_empty_json(value) else value

