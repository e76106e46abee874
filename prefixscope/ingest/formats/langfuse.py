"""Langfuse observations -> requests: every GENERATION is one model call.

Langfuse is where many teams already look at their LLM traffic, so its exports are
often the only request log they have. This module reads every shape those
exports come in (formats.md §1), detected from content:

* UI "Download trace as JSON": ``{trace, observations[, scores]}`` (§1.3), where
  ``input`` / ``output`` / ``metadata`` may be JSON strings, sometimes encoded twice;
* public API pages: v1 ``{data, meta: {page, limit, totalItems, totalPages}}``
  and v2 ``{data, meta: {cursor}}`` (v2 returns ``input`` / ``output`` as raw strings),
  ``GET /traces/{id}`` (a trace with nested ``observations``) and sessions
  ``{id, traces: [...]}`` whose traces carry observations (§1.1, §1.2);
* batch exports (JSON, JSON lines, CSV: camelCase rows, §1.4), blob-storage exports
  and ClickHouse ``observations`` / ``events_full`` rows (snake_case, §1.5), as JSON,
  JSON lines or CSV with a header (``Map`` columns as JSON or ClickHouse literals,
  read by `prefixscope.ingest.readers.clickhouse`).

Guarantees:

* Only ``type == GENERATION`` observations become requests; other observation types
  are not requests and are passed over without a report, and so are repeats of an
  observation id already read from the file (the first row wins). A row that is not
  an observation at all, or a GENERATION without an id, is a `Skip` with a reason.
* The body is built with the minimum change from what Langfuse logged (§1.7) and
  ``metadata["body_from"]`` says from what: an OpenAI-style message list (or
  ``{messages, tools}``) becomes an ``openai-chat`` body; a provider body is kept in
  its protocol (Anthropic ``system`` + ``messages`` -> ``anthropic-messages``); an
  OpenAI Responses item list becomes ``openai-responses`` (with
  ``modelParameters.instructions``). LangChain message dicts, OpenTelemetry
  ``parts`` messages (`normalize.messages.chat_messages`, as for OTel spans) and the
  tool definitions the LangChain callback appends as
  ``{"role": "tool", "content": <tool>}`` are mapped to OpenAI Chat. Tools come from
  ``toolDefinitions`` / ``tool_definitions`` when the input has none, in stored order
  and with the stored schema's key order. Message text is never rewritten, only the
  envelope around it. An input that is none of these gives ``body=None`` and
  ``metadata["body_note"]``; a known truncation marker sets ``body_truncated``.
* Usage follows §1.6 / §10 (see `normalize_usage`): ``prompt_tokens`` includes
  cache reads and writes, counted once, whatever convention wrote the row.
* Session: ``sessionId`` (observation, then trace) else the ``traceId`` (one agent
  turn), with ``session_key_source`` naming which.
* Backend: a generation LiteLLM's Langfuse callback logged names the deployment that
  served it (``metadata.hidden_params.model_id``, and its ``api_base``), kept as
  ``metadata.model_id`` / ``api_base``: the ledger's backend, before the provider name
  (``channel``: ``ls_provider``, ``gen_ai.system``), so a session the router spread over
  deployments hops between them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prefixscope.ingest.normalize.fields import (
    first_present,
    gateway_from_conversion,
    loads_deep,
    parse_time,
    strings,
    to_int,
)
from prefixscope.ingest.normalize.messages import chat_messages
from prefixscope.ingest.readers import BadRecord
from prefixscope.ingest.readers.clickhouse import clickhouse_literal
from prefixscope.ingest.readers.csv import iter_csv_rows
from prefixscope.ingest.readers.json import iter_json_records
from prefixscope.ingest.source import Probe, Source
from prefixscope.model import Record, Request, Skip, Usage
from prefixscope.model.keys import detect_endpoint

NAME = "langfuse"
DESCRIPTION = (
    "Langfuse observations: UI trace download, public API v1/v2 pages, batch and "
    "blob-storage exports (JSON/JSONL/CSV), ClickHouse observations/events_full rows"
)

GENERATION = "GENERATION"
OBSERVATION_TYPES = frozenset({
    "GENERATION", "SPAN", "EVENT", "AGENT", "TOOL", "CHAIN", "RETRIEVER", "EVALUATOR",
    "EMBEDDING", "GUARDRAIL",
})
# Keys only Langfuse observation rows carry (camelCase API/export or snake_case ClickHouse);
# one of them is required before a bare row is claimed.
_LANGFUSE_ROW_KEYS = frozenset({
    "usageDetails", "usage_details", "providedModelName", "provided_model_name",
    "modelParameters", "model_parameters", "parentObservationId", "parent_observation_id",
    "parent_span_id", "projectId", "project_id", "promptName", "prompt_name", "traceName",
    "costDetails", "cost_details",
})

# The Langfuse Python SDK (v2 `task_manager._truncate_item_in_place`) replaces an input
# that makes the event exceed its size limit with this string.
SDK_DROPPED_MARKER = "<truncated due to size exceeding limit>"
# LiteLLM cuts long strings: SpendLogs/StandardLoggingPayload "... (<FIELD> skipped N chars) ..."
# (formats.md §3.1) and its Langfuse logger's per-field cap "...(truncated)".
_LITELLM_SKIPPED_RE = re.compile(r"\.\.\. \([^()]{0,80}skipped \d+ chars\) \.\.\.")
_LITELLM_CAP_SUFFIX = "...(truncated)"

# §1.6 normalization rule: cache read is the first present alias, cache write the sum.
CACHE_READ_KEYS = ("input_cached_tokens", "input_cache_read", "cache_read_input_tokens",
                   "prompt_details.cache_read", "input_cached_text_tokens")
_CACHE_WRITE_EXACT = ("cache_creation_input_tokens", "input_cache_write", "cache_write_tokens",
                      "prompt_details.cache_write")
_OPENINFERENCE_KEYS = ("prompt_details.cache_read", "prompt_details.cache_write")
_CANONICAL_CACHE_KEYS = ("input_cached_tokens", "input_cache_creation")
_LITELLM_USAGE_KEYS = frozenset({"input", "output", "total", "cache_creation_input_tokens",
                                 "cache_read_input_tokens"})

_LANGCHAIN_TYPE_ROLES = {"human": "user", "ai": "assistant", "system": "system",
                         "tool": "tool", "function": "function", "developer": "developer"}
_LANGCHAIN_CLASS_ROLES = {"HumanMessage": "user", "AIMessage": "assistant",
                          "SystemMessage": "system", "ToolMessage": "tool",
                          "FunctionMessage": "function"}
_RESPONSES_ITEM_TYPES = frozenset({
    "message", "function_call", "function_call_output", "reasoning", "computer_call",
    "computer_call_output", "web_search_call", "file_search_call", "custom_tool_call",
    "custom_tool_call_output", "local_shell_call", "local_shell_call_output", "mcp_call",
    "mcp_list_tools", "mcp_approval_request", "mcp_approval_response",
    "image_generation_call", "code_interpreter_call", "item_reference",
})
_RESPONSES_BLOCK_TYPES = frozenset({"input_text", "output_text", "input_image", "input_file"})


# ---------------------------------------------------------------------------- detection


def sniff(probe: Probe) -> bool:
    """True for Langfuse observation containers or rows (JSON, JSON lines, CSV)."""
    if probe.kind == "csv":
        return _is_observation_header(probe.header or [])
    if probe.kind in ("json", "jsonl"):
        record = probe.document if isinstance(probe.document, dict) else probe.first
        return _is_container(record) or _is_observation_row(record, strict=True)
    return False


def _is_observation_header(header: list[str]) -> bool:
    columns = set(header)
    return ("type" in columns and bool(columns & {"traceId", "trace_id"})
            and bool(columns & {"id", "span_id"})
            and bool(columns & {"startTime", "start_time"})
            and bool(columns & _LANGFUSE_ROW_KEYS))


def _is_observation_row(record: Any, *, strict: bool = False) -> bool:
    """An observation dict: Langfuse type, trace id and own id (strict: plus Langfuse keys)."""
    if not isinstance(record, dict):
        return False
    kind = record.get("type")
    if not (isinstance(kind, str) and kind.upper() in OBSERVATION_TYPES):
        return False
    if not (("traceId" in record or "trace_id" in record)
            and ("id" in record or "span_id" in record)):
        return False
    if not strict:
        return True
    return (("startTime" in record or "start_time" in record)
            and any(k in record for k in _LANGFUSE_ROW_KEYS))


def _is_container(record: Any) -> bool:
    if not isinstance(record, dict):
        return False
    if isinstance(record.get("trace"), dict) and isinstance(record.get("observations"), list):
        return True
    data, meta = record.get("data"), record.get("meta")
    if isinstance(data, list) and isinstance(meta, dict) and data:
        head = data[0]
        return _is_observation_row(head) or _holds_observations(head)
    if _holds_observations(record):
        return True
    traces = record.get("traces")
    return isinstance(traces, list) and any(_holds_observations(t) for t in traces[:20])


def _holds_observations(record: Any) -> bool:
    """A trace object (GET /traces/{id}) with nested observation objects."""
    if not isinstance(record, dict) or "id" not in record or "type" in record:
        return False
    observations = record.get("observations")
    return isinstance(observations, list) and any(
        _is_observation_row(o) for o in observations[:20])


# ------------------------------------------------------------------------------ parsing


@dataclass(frozen=True, slots=True)
class _TraceContext:
    """Trace fields an observation inherits when it does not carry them itself."""

    trace_id: str | None = None
    session_id: str | None = None
    user_id: str | None = None
    name: str | None = None
    environment: str | None = None


def parse(source: Source, probe: Probe) -> Iterator[Record | Skip]:
    """Every GENERATION observation of the file as a Record; unusable rows as Skips."""
    seen: set[str] = set()
    if probe.kind == "csv":
        for rowno, row in iter_csv_rows(source):
            if isinstance(row, BadRecord):
                yield Skip(rowno, str(row))
                continue
            yield from _observation(row, rowno, None, seen)
        return
    if probe.kind not in ("json", "jsonl"):
        yield Skip(None, f"not JSON, JSON lines or CSV ({probe.kind})")
        return
    nested_places = probe.kind == "json" and isinstance(probe.document, dict)
    for place, record in iter_json_records(source, probe):
        if isinstance(record, BadRecord):
            yield Skip(place, str(record))
            continue
        for index, item, context in _expand(record):
            here = index if nested_places and index is not None else place
            if isinstance(item, Skip):
                yield Skip(here, item.reason)
            else:
                yield from _observation(item, here, context, seen)


_Expanded = tuple[int | None, dict[str, Any] | Skip, _TraceContext | None]


def _expand(record: Any) -> Iterator[_Expanded]:
    """(index in its list, observation or Skip, trace context) for each observation in a record."""
    if not isinstance(record, dict):
        yield None, Skip(None, f"not a Langfuse observation (a JSON {type(record).__name__})"), None
        return
    if isinstance(record.get("trace"), dict) and isinstance(record.get("observations"), list):
        yield from _nested(record["observations"], _context(record["trace"]))
        return
    if isinstance(record.get("data"), list) and isinstance(record.get("meta"), dict):
        for index, item in enumerate(record["data"], start=1):
            if _holds_observations(item):
                for _, obs, context in _nested(item["observations"], _context(item)):
                    yield index, obs, context
            else:
                yield index, _row_or_skip(item), None
        return
    if isinstance(record.get("observations"), list) and "type" not in record:
        yield from _nested(record["observations"], _context(record))
        return
    if isinstance(record.get("traces"), list) and "type" not in record:
        yield from _session(record)
        return
    yield None, _row_or_skip(record), None


def _nested(observations: list[Any], context: _TraceContext,
            ) -> Iterator[tuple[int, dict[str, Any] | Skip, _TraceContext]]:
    for index, obs in enumerate(observations, start=1):
        yield index, _row_or_skip(obs), context


def _session(record: dict[str, Any]) -> Iterator[tuple[int, dict[str, Any] | Skip, _TraceContext]]:
    session_id = _text(record.get("id"))
    index = 0
    for trace in record["traces"]:
        if not isinstance(trace, dict) or not isinstance(trace.get("observations"), list):
            index += 1
            yield index, Skip(None, "session trace without observations "
                                    "(fetch GET /api/public/traces/{id})"), _TraceContext()
            continue
        context = _context(trace)
        if context.session_id is None:
            context = _TraceContext(context.trace_id, session_id, context.user_id,
                                    context.name, context.environment)
        for obs in trace["observations"]:
            index += 1
            yield index, _row_or_skip(obs), context


def _row_or_skip(item: Any) -> dict[str, Any] | Skip:
    if _is_observation_row(item):
        return item
    if not isinstance(item, dict):
        return Skip(None, "observation is not an object (ids only? fetch GET /api/public/"
                          "traces/{id} or /observations)")
    if "type" in item and _pick(item, "traceId", "trace_id"):
        return item  # unknown observation type: not a request, passed over quietly
    if not item.get("type"):
        return Skip(None, "not a Langfuse observation: no type")
    return Skip(None, "not a Langfuse observation: no traceId/id with a known type")


def _context(trace: dict[str, Any]) -> _TraceContext:
    return _TraceContext(
        trace_id=_text(trace.get("id")),
        session_id=_text(_pick(trace, "sessionId", "session_id")),
        user_id=_text(_pick(trace, "userId", "user_id")),
        name=_text(trace.get("name")),
        environment=_text(trace.get("environment")),
    )


def _observation(row: Mapping[str, Any], place: int, context: _TraceContext | None,
                 seen: set[str]) -> Iterator[Record | Skip]:
    kind = _text(row.get("type"))
    if kind is None:
        yield Skip(place, "not a Langfuse observation: no type")
        return
    if kind.upper() != GENERATION:
        return
    obs_id = _text(_pick(row, "id", "span_id"))
    if obs_id is None:
        yield Skip(place, "GENERATION observation without id")
        return
    if obs_id in seen:
        return  # NOTE: a repeat (unmerged ClickHouse row version, overlapping export): first wins
    seen.add(obs_id)
    try:
        request = _request(row, obs_id, place, context or _TraceContext())
    except Exception as exc:  # noqa: BLE001 - one odd row must not stop the file
        yield Skip(place, f"GENERATION {obs_id}: {type(exc).__name__}: {exc}")
        return
    yield Record(request=request, key=f"obs:{obs_id}")


def _request(row: Mapping[str, Any], obs_id: str, place: int,
             context: _TraceContext) -> Request:
    meta_source = _observation_metadata(row)
    trace_id = _text(_pick(row, "traceId", "trace_id")) or context.trace_id
    session, session_source = _session_key(row, context, trace_id)
    trace_name = _text(_pick(row, "traceName", "trace_name")) or context.name
    output = loads_deep(row.get("output")) if row.get("output") not in (None, "") else None
    model_parameters = loads_deep(_pick(row, "modelParameters", "model_parameters"))
    body = build_body(_pick(row, "input"), _pick(row, "toolDefinitions", "tool_definitions"),
                      model_parameters, responses_api=_is_responses_call(output, model_parameters))
    usage, usage_notes = normalize_usage(row)
    metadata: dict[str, Any] = {
        "name": _text(row.get("name")),
        "traceName": trace_name,
        "environment": _text(row.get("environment")) or context.environment,
        "promptName": _text(_pick(row, "promptName", "prompt_name")),
        "promptVersion": to_int(_pick(row, "promptVersion", "prompt_version")),
        "traceId": trace_id,
        "parentObservationId": _text(_pick(row, "parentObservationId", "parent_observation_id",
                                           "parent_span_id")),
        "sdk": _sdk_name(row, meta_source),
        "threadId": _text(_meta_value(meta_source, "thread_id")),
        # the deployment that served it, where LiteLLM's Langfuse callback logged it (its
        # StandardLoggingPayload's hidden_params, and the call's api_base): the ledger's
        # backend (`Store.usage_records`)
        "model_id": _text(_meta_value(meta_source, "hidden_params", "model_id")),
        "api_base": _text(first_present(_meta_value(meta_source, "hidden_params", "api_base"),
                                        _meta_value(meta_source, "api_base"))),
        "body_from": body.body_from,
        "body_note": body.note,
        "truncation": body.truncation,
        **usage_notes,
    }
    level = _text(row.get("level"))
    if level and level.upper() not in ("DEFAULT", "DEBUG"):
        metadata["level"] = level
        metadata["statusMessage"] = _text(_pick(row, "statusMessage", "status_message"))
    return Request(
        id="", source_format="", source_file="", source_line=place,
        timestamp=parse_time(_pick(row, "startTime", "start_time")),
        endpoint=body.endpoint,
        model=_text(_pick(row, "model", "providedModelName", "provided_model_name")),
        session_key=session,
        session_key_source=session_source,
        user=_text(_pick(row, "userId", "user_id")) or context.user_id,
        client=trace_name,
        channel=_provider(meta_source),
        gateway=gateway_from_conversion(_meta_value(meta_source, "request_conversion")),
        native_id=obs_id,
        body=body.body,
        body_truncated=body.truncation is not None,
        output=output,
        usage=usage,
        metadata={k: v for k, v in metadata.items() if v is not None},
    )


def _is_responses_call(output: Any, model_parameters: Any) -> bool:
    """The call went to the OpenAI Responses API: a Responses object came back, or the
    logged parameters carry Responses-only ``instructions``."""
    if isinstance(output, dict) and output.get("object") == "response":
        return True
    return isinstance(model_parameters, dict) and isinstance(
        model_parameters.get("instructions"), str)


def _session_key(row: Mapping[str, Any], context: _TraceContext,
                 trace_id: str | None) -> tuple[str | None, str | None]:
    for name in ("sessionId", "session_id"):
        value = _text(row.get(name))
        if value is not None:
            return value, f"langfuse.{name}"
    if context.session_id is not None:
        return context.session_id, "langfuse.sessionId"
    if trace_id is not None:
        return trace_id, "langfuse.traceId"
    return None, None


# -------------------------------------------------------------------------------- usage


def normalize_usage(row: Mapping[str, Any]) -> tuple[Usage, dict[str, Any]]:
    """`Usage` of one observation, plus notes on which rule produced it.

    Rule (formats.md §1.6, §10), for ``usageDetails`` / ``usage_details``:

    * cache read = first present of ``input_cached_tokens``, ``input_cache_read``,
      ``cache_read_input_tokens``, ``prompt_details.cache_read``,
      ``input_cached_text_tokens``;
    * cache write = sum of ``input_cache_creation*``, ``cache_creation_input_tokens``,
      ``input_cache_write``, ``cache_write_tokens``, ``prompt_details.cache_write``;
    * Langfuse stores mutually exclusive buckets, so ``input`` is the uncached part and
      prompt = ``input`` + read + write + every other ``input_*`` bucket (audio,
      modality) -- what Langfuse's own ``inputUsage`` / ``promptTokens`` sum.
    * Exceptions, decided by the row's own ``total`` when it has one:
      ``total == input + read + output`` with a cache write means ``input`` already
      holds the write (LiteLLM's logger: ``input = prompt_tokens - cache_read``);
      ``total == input + output`` with cache tokens means ``input`` holds both
      (older LiteLLM ``input = prompt_tokens``; OpenInference ``llm.token_count.*``
      passed through verbatim before Langfuse learned ``prompt_details.*``).
      Without a usable ``total``: ``prompt_details.*`` keys without Langfuse's own
      cache keys mean cache-inclusive, the exact LiteLLM key set means write-inclusive.
    * output = ``output`` + every ``output_*`` bucket (reasoning, audio), as Langfuse
      subtracts them from ``output``.

    Rows without usage details fall back to the deprecated ``promptTokens`` /
    ``usage.input`` / ``inputUsage``: cache-inclusive sums with no cache split.
    """
    details = _map_column(_pick(row, "usageDetails", "usage_details"))
    provided = _map_column(_pick(row, "providedUsageDetails", "provided_usage_details"))
    notes: dict[str, Any] = {}
    if details and provided is not None and not provided:
        notes["usage_inferred_by_langfuse"] = True  # Langfuse tokenized the text itself
    if not details:
        details = provided
    if details:
        usage, rule = _usage_from_details({k: to_int(v) for k, v in details.items()})
        notes["usage_rule"] = rule
        return usage, notes
    return _usage_deprecated(row, notes)


def _usage_from_details(d: dict[str, int | None]) -> tuple[Usage, str]:
    def present(key: str) -> bool:
        return d.get(key) is not None

    read_key = next((k for k in CACHE_READ_KEYS if present(k)), None)
    read = d[read_key] if read_key else None
    write_keys = [k for k in d if present(k) and (
        k.startswith("input_cache_creation") or k in _CACHE_WRITE_EXACT)]
    write = sum(d[k] or 0 for k in write_keys) if write_keys else None
    counted = set(CACHE_READ_KEYS) | set(write_keys) | {"input"}
    other_input = sum(v for k, v in d.items()
                      if v is not None and k.startswith("input_") and k not in counted)
    uncached = d.get("input")
    output_keys = [k for k in d if present(k) and (k == "output" or k.startswith("output_"))]
    output = sum(d[k] or 0 for k in output_keys) if output_keys else None

    rule = _inclusion_rule(d, uncached, other_input, read or 0, write or 0, output)
    if uncached is None:
        prompt = None
    elif rule == "input-includes-cache":
        prompt = uncached + other_input
    elif rule == "input-includes-write":
        prompt = uncached + other_input + (read or 0)
    else:
        prompt = uncached + other_input + (read or 0) + (write or 0)
    return Usage(prompt_tokens=prompt, cached_tokens=read, cache_write_tokens=write,
                 output_tokens=output, semantics="langfuse"), rule


def _inclusion_rule(d: dict[str, int | None], uncached: int | None, other: int,
                    read: int, write: int, output: int | None) -> str:
    total = d.get("total")
    if total is not None and uncached is not None and output is not None:
        base = uncached + other + output
        if total == base + read + write:
            return "exclusive-buckets"
        if write and total == base + read:
            return "input-includes-write"
        if (read or write) and total == base:
            return "input-includes-cache"
    if (read or write) and any(d.get(k) is not None for k in _OPENINFERENCE_KEYS) and not any(
            d.get(k) is not None for k in _CANONICAL_CACHE_KEYS):
        return "input-includes-cache"
    if write and set(d) - {"total"} == _LITELLM_USAGE_KEYS - {"total"}:
        return "input-includes-write"
    return "exclusive-buckets"


def _usage_deprecated(row: Mapping[str, Any],
                      notes: dict[str, Any]) -> tuple[Usage, dict[str, Any]]:
    usage_obj = _map_column(row.get("usage")) or {}
    prompt = to_int(first_present(row.get("promptTokens"), usage_obj.get("input"),
                                  row.get("inputUsage"), row.get("input_usage")))
    output = to_int(first_present(row.get("completionTokens"), usage_obj.get("output"),
                                  row.get("outputUsage"), row.get("output_usage")))
    if prompt is None and output is None:
        return Usage(), notes
    notes["usage_rule"] = "deprecated-sum"
    return Usage(prompt_tokens=prompt, output_tokens=output, semantics="langfuse"), notes


# --------------------------------------------------------------------------------- body


@dataclass(slots=True)
class BodyResult:
    """The request body rebuilt from an observation's input, and how."""

    endpoint: str = "unknown"
    body: dict[str, Any] | None = None
    body_from: str | None = None  # what the body was built from
    note: str | None = None  # why there is no body, or what was odd about the input
    truncation: str | None = None  # which truncation marker was found, if any


def build_body(raw_input: Any, tool_definitions: Any = None, model_parameters: Any = None,
               *, responses_api: bool = False) -> BodyResult:
    """Rebuild the request body from a GENERATION's logged ``input`` (see module docstring).

    Args:
        raw_input: ``input`` as stored: parsed JSON or a (possibly twice-encoded) JSON string.
        tool_definitions: ``toolDefinitions`` / ``tool_definitions`` (name -> definition).
        model_parameters: parsed ``modelParameters`` (source of Responses ``instructions``).
        responses_api: the call is known to be an OpenAI Responses call.

    Returns:
        A BodyResult; ``body`` is None (with ``note``) when the input is unusable.
    """
    if raw_input is None or raw_input == "":
        return BodyResult(note="no input logged")
    if isinstance(raw_input, str) and raw_input.strip() == SDK_DROPPED_MARKER:
        return BodyResult(note="input dropped by the Langfuse SDK (event size limit)",
                          truncation="langfuse-sdk-size-limit")
    value = loads_deep(raw_input)
    if isinstance(value, str):
        if value.lstrip()[:1] in ("[", "{"):
            return BodyResult(note="input is not valid JSON (cut short?)",
                              truncation="invalid-json")
        return BodyResult(note="input is plain text, not a message list")
    tools = _stored_tools(tool_definitions)
    if isinstance(value, dict):
        result = _body_from_dict(value, tools)
    elif isinstance(value, list):
        result = _body_from_list(value, tools, model_parameters, responses_api)
    else:
        result = BodyResult(note=f"input is a JSON {type(value).__name__}")
    if result.body is not None:
        result.truncation = _truncation_marker(result.body)
    return result


def _body_from_dict(value: dict[str, Any], tools: list[_ToolDef]) -> BodyResult:
    if isinstance(value.get("messages"), list):
        messages = _messages(value["messages"])
        if messages is None:
            return BodyResult(note="input.messages holds items that are not messages")
        msgs, changes, hoisted = messages
        body = dict(value)
        body["messages"] = msgs
        endpoint = detect_endpoint(body)
        origin = "langfuse.input (request body)"
        return _finish(body, endpoint, origin, changes, hoisted, tools)
    if isinstance(value.get("input"), list | str) and ("instructions" in value or "model" in value):
        return _finish(dict(value), "openai-responses", "langfuse.input (request body)",
                       [], [], tools)
    message = _message(value)
    if message is not None:
        msgs, change = message
        body = {"messages": msgs}
        return _finish(body, detect_endpoint(body), "langfuse.input (single message)",
                       [change] if change else [], [], tools)
    return BodyResult(note="input is JSON but neither a message list nor a request body")


def _body_from_list(value: list[Any], tools: list[_ToolDef], model_parameters: Any,
                    responses_api: bool) -> BodyResult:
    if not value:
        return BodyResult(note="input is an empty list")
    changes: list[str] = []
    if all(isinstance(v, list) for v in value):
        if len(value) != 1:
            return BodyResult(note=f"input holds {len(value)} message lists (a batch)")
        value = value[0]
        changes.append("batch of one unwrapped")
    if responses_api or _is_responses_items(value):
        body: dict[str, Any] = {}
        instructions = model_parameters.get("instructions") if isinstance(
            model_parameters, dict) else None
        origin = "langfuse.input (responses input items)"
        if isinstance(instructions, str):
            body["instructions"] = instructions
            origin += " + modelParameters.instructions"
        body["input"] = value
        return _finish(body, "openai-responses", origin, changes, [], tools)
    messages = _messages(value)
    if messages is None:
        return BodyResult(note="input list holds items that are not messages")
    msgs, more_changes, hoisted = messages
    body = {"messages": msgs}
    return _finish(body, detect_endpoint(body), "langfuse.input (message list)",
                   changes + more_changes, hoisted, tools)


def _finish(body: dict[str, Any], endpoint: str, origin: str, changes: list[str],
            hoisted: list[Any], stored: list[_ToolDef]) -> BodyResult:
    parts = [origin, *changes]
    if "tools" not in body:
        if hoisted:
            body["tools"] = [_hoisted_tool(endpoint, t) for t in hoisted]
            parts.append("langchain tool messages -> tools")
        elif stored:
            body["tools"] = [_tool_for(endpoint, t) for t in stored]
            parts.append("toolDefinitions -> tools")
    return BodyResult(endpoint=endpoint, body=body, body_from=" + ".join(parts))


def _is_responses_items(items: list[Any]) -> bool:
    for item in items:
        if not isinstance(item, dict):
            continue
        if item.get("type") in _RESPONSES_ITEM_TYPES:
            return True
        content = item.get("content")
        if isinstance(content, list) and any(
                isinstance(b, dict) and b.get("type") in _RESPONSES_BLOCK_TYPES for b in content):
            return True
    return False


def _messages(items: list[Any]) -> tuple[list[dict[str, Any]], list[str], list[Any]] | None:
    """(OpenAI-style messages, what was changed, tool definitions found among them)."""
    messages: list[dict[str, Any]] = []
    changes: list[str] = []
    hoisted: list[Any] = []
    for item in items:
        if not isinstance(item, dict):
            return None
        tool = _appended_tool_definition(item)
        if tool is not None:
            hoisted.append(tool)
            continue
        if "role" not in item and isinstance(item.get("tools"), list):
            hoisted.extend(item["tools"])
            continue
        converted = _message(item)
        if converted is None:
            return None
        converted_messages, change = converted
        messages.extend(converted_messages)
        if change and change not in changes:
            changes.append(change)
    return messages, changes, hoisted


def _appended_tool_definition(item: dict[str, Any]) -> dict[str, Any] | None:
    """The tool of a LangChain-callback ``{"role": "tool", "content": <tool definition>}``."""
    content = item.get("content")
    if item.get("role") == "tool" and "tool_call_id" not in item and isinstance(content, dict) \
            and _looks_like_tool_definition(content):
        return content
    return None


def _looks_like_tool_definition(d: dict[str, Any]) -> bool:
    function = d.get("function")
    if d.get("type") == "function" and isinstance(function, dict) and "name" in function:
        return True
    return isinstance(d.get("name"), str) and (
        "parameters" in d or "input_schema" in d) and "content" not in d


def _message(item: dict[str, Any]) -> tuple[list[dict[str, Any]], str | None] | None:
    """One logged message as OpenAI-style messages (an OTel message with tool responses is
    several), and what was changed; None when it is not a message."""
    if isinstance(item.get("role"), str):
        if "parts" in item and "content" not in item:
            try:
                return chat_messages(item), "otel parts -> content"
            except BadRecord:
                return None  # `parts` is not a list
        if not any(k in item for k in ("content", "tool_calls", "function_call")):
            return None
        message, change = _lift_langchain_tool_calls(item)
        return [message], change
    if item.get("lc") == 1 and isinstance(item.get("id"), list) and isinstance(
            item.get("kwargs"), dict):
        return [_from_langchain(_langchain_class_role(item["id"], item["kwargs"]),
                                item["kwargs"])], "langchain serialized messages -> roles"
    kind = item.get("type")
    if isinstance(kind, str) and (kind in _LANGCHAIN_TYPE_ROLES or kind == "chat"):
        data: dict[str, Any] = item["data"] if isinstance(item.get("data"), dict) else item
        if "content" not in data:
            return None
        role = data.get("role") if kind == "chat" else _LANGCHAIN_TYPE_ROLES[kind]
        if not isinstance(role, str):
            return None
        return [_from_langchain(role, data)], "langchain message types -> roles"
    return None


def _langchain_class_role(path: list[Any], kwargs: dict[str, Any]) -> str:
    name = str(path[-1]) if path else ""
    base = name[:-5] if name.endswith("Chunk") else name
    if base == "ChatMessage":
        return str(kwargs.get("role") or "user")
    return _LANGCHAIN_CLASS_ROLES.get(base, "user")


def _from_langchain(role: str, data: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": role, "content": data.get("content")}
    calls = _openai_tool_calls(data)
    if calls:
        message["tool_calls"] = calls
    if data.get("tool_call_id"):
        message["tool_call_id"] = data["tool_call_id"]
    if data.get("name"):
        message["name"] = data["name"]
    return message


def _openai_tool_calls(data: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Tool calls as OpenAI sent them: raw ``additional_kwargs.tool_calls`` when logged, else
    LangChain ``{name, args, id}`` calls re-serialized as langchain-openai does
    (``json.dumps(args, ensure_ascii=False)``)."""
    extra = data.get("additional_kwargs")
    if isinstance(extra, dict) and isinstance(extra.get("tool_calls"), list):
        return extra["tool_calls"]
    calls = data.get("tool_calls")
    if not isinstance(calls, list) or not calls:
        return None
    out = []
    for call in calls:
        if isinstance(call, dict) and "function" not in call and "args" in call:
            out.append({"id": call.get("id"), "type": "function",
                        "function": {"name": call.get("name"),
                                     "arguments": _python_json_dumps(call.get("args"))}})
        else:
            out.append(call)
    return out


def _lift_langchain_tool_calls(item: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """An OpenAI-style message; LangChain-shaped tool calls mapped to OpenAI's."""
    calls = item.get("tool_calls")
    extra = item.get("additional_kwargs")
    if calls is None and isinstance(extra, dict) and isinstance(extra.get("tool_calls"), list):
        return _with_key_after(item, "content", "tool_calls", extra["tool_calls"]), \
            "langchain additional_kwargs.tool_calls -> tool_calls"
    if isinstance(calls, list) and any(
            isinstance(c, dict) and "args" in c and "function" not in c for c in calls):
        fixed = _openai_tool_calls({"tool_calls": calls, "additional_kwargs": extra})
        message = dict(item)
        message["tool_calls"] = fixed
        return message, "langchain tool_calls -> openai tool_calls"
    return item, None


def _with_key_after(item: dict[str, Any], anchor: str, key: str, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in item.items():
        out[k] = v
        if k == anchor:
            out[key] = value
    if key not in out:
        out[key] = value
    return out


def _python_json_dumps(value: Any) -> str:
    """``json.dumps(value, ensure_ascii=False)`` (Python's default separators)."""
    return json.dumps(value, ensure_ascii=False)


# -------------------------------------------------------------------------------- tools


@dataclass(frozen=True, slots=True)
class _ToolDef:
    name: str
    description: str | None
    parameters: Any  # JSON schema as stored (key order kept), None when not stored


def _stored_tools(value: Any) -> list[_ToolDef]:
    """Tool definitions from ``toolDefinitions`` / ``tool_definitions``.

    ClickHouse stores ``Map(String, String)``: tool name -> JSON ``{description,
    parameters}`` where ``parameters`` is itself a JSON string (Langfuse
    ``convertDefinitionsToMap``); API and exports may hand the map over parsed.
    """
    if value is None or value == "":
        return []
    if isinstance(value, list):
        return [t for t in (_as_tool_def(v) for v in value) if t.name]
    mapping = _map_column(value)
    if not mapping:
        return []
    out = []
    for name, raw in mapping.items():
        definition = loads_deep(raw)
        tool = _as_tool_def(definition if isinstance(definition, dict) else {})
        out.append(_ToolDef(str(name), tool.description, tool.parameters))
    return out


def _as_tool_def(value: Any) -> _ToolDef:
    if not isinstance(value, dict):
        return _ToolDef("", None, None)
    inner: dict[str, Any] = (value["function"] if isinstance(value.get("function"), dict)
                             else value)
    description = inner.get("description", inner.get("desc"))
    parameters = first_present(inner.get("parameters"), inner.get("input_schema"),
                               inner.get("inputSchema"), inner.get("parameters_json_schema"))
    parameters = loads_deep(parameters)
    return _ToolDef(str(inner.get("name") or ""),
                    description if isinstance(description, str) and description else None,
                    parameters if parameters not in (None, "") else None)


def _hoisted_tool(endpoint: str, tool: Any) -> Any:
    """A tool found inside the input: kept verbatim when already in the body's protocol."""
    if endpoint == "openai-chat" and isinstance(tool, dict) and tool.get("type") == "function" \
            and isinstance(tool.get("function"), dict):
        return tool
    if endpoint == "anthropic-messages" and isinstance(tool, dict) and "input_schema" in tool:
        return tool
    return _tool_for(endpoint, _as_tool_def(tool))


def _tool_for(endpoint: str, tool: _ToolDef) -> dict[str, Any]:
    """A tool definition in the body's protocol (description/parameters only when stored)."""
    if endpoint == "anthropic-messages":
        out: dict[str, Any] = {"name": tool.name}
        if tool.description is not None:
            out["description"] = tool.description
        if tool.parameters is not None:
            out["input_schema"] = tool.parameters
        return out
    function: dict[str, Any] = {"name": tool.name}
    if tool.description is not None:
        function["description"] = tool.description
    if tool.parameters is not None:
        function["parameters"] = tool.parameters
    if endpoint == "openai-responses":
        return {"type": "function", **function}
    return {"type": "function", "function": function}


# --------------------------------------------------------------------------- truncation


def _truncation_marker(value: Any) -> str | None:
    """Which known truncation marker occurs in any string of the body, if any."""
    for text in strings(value):
        if text.endswith(_LITELLM_CAP_SUFFIX):
            return "litellm-field-cap"
        if "skipped" in text and _LITELLM_SKIPPED_RE.search(text):
            return "litellm-skipped-chars"
        if text == SDK_DROPPED_MARKER:
            return "langfuse-sdk-size-limit"
    return None


# ------------------------------------------------------------------------------ helpers


def _pick(row: Mapping[str, Any], *names: str) -> Any:
    """The first of `names` present with a value (camelCase / snake_case spellings)."""
    for name in names:
        value = row.get(name)
        if value is not None and value != "":
            return value
    return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else str(value)
    return text if text.strip() and text.strip().lower() not in ("null", "none") else None


def _map_column(value: Any) -> dict[str, Any] | None:
    """A dict from a dict, a JSON object string, or a ClickHouse ``Map`` literal; else None."""
    if value is None or value == "":
        return None
    if isinstance(value, dict):
        return value
    parsed = loads_deep(value)
    if isinstance(parsed, dict):
        return parsed
    if isinstance(parsed, str):
        literal = clickhouse_literal(parsed)
        if isinstance(literal, dict):
            return literal
    return None


def _observation_metadata(row: Mapping[str, Any]) -> dict[str, Any]:
    names, values = row.get("metadata_names"), row.get("metadata_values")
    if names is not None and values is not None:
        names = names if isinstance(names, list) else clickhouse_literal(str(names))
        values = values if isinstance(values, list) else clickhouse_literal(str(values))
        if isinstance(names, list) and isinstance(values, list):
            return dict(zip(names, values, strict=False))
    return _map_column(row.get("metadata")) or {}


def _meta_value(meta: dict[str, Any], *path: str) -> Any:
    value: Any = meta
    for step in path:
        if isinstance(value, str):
            value = loads_deep(value)
        if not isinstance(value, dict):
            return None
        value = value.get(step)
    return value


def _sdk_name(row: Mapping[str, Any], meta: dict[str, Any]) -> str | None:
    return _text(first_present(row.get("scope_name"), _meta_value(meta, "scope", "name"),
                               row.get("ingestion_sdk_name"), row.get("telemetry_sdk_name")))


def _provider(meta: dict[str, Any]) -> str | None:
    return _text(first_present(_meta_value(meta, "ls_provider"),
                               _meta_value(meta, "attributes", "gen_ai.system"),
                               _meta_value(meta, "attributes", "llm.system")))
