"""OpenTelemetry GenAI spans in OTLP/JSON: one model call per chat span.

Instrumented apps (OpenAI/Anthropic SDK instrumentations, agent frameworks,
OpenLLMetry) export spans; the collector's file exporter writes one
``{"resourceSpans": [...]}`` document per line, and SDK/console exports give one
document. formats.md §4 is the reference for both the envelope and the
``gen_ai.*`` attributes.

What this module guarantees:

* A span is a request when it describes a model call: ``gen_ai.operation.name`` is
  ``chat`` / ``text_completion`` / ``generate_content``, or (no operation name) it
  carries ``gen_ai.usage.*``, ``gen_ai.input.messages``, ``gen_ai.prompt.*`` or
  ``gen_ai.request.model``. Agent, tool and HTTP spans are not requests and are
  not reported as skips; a file without any GenAI model-call span is one skip that
  says so (``--strict`` fails on it).
* Usage follows the spec: ``gen_ai.usage.input_tokens`` INCLUDES cache reads and
  writes (semantics ``otel``). Anthropic instrumentations that copy the API's
  cache-exclusive ``input_tokens`` are recognized when input < cache read, and
  converted (semantics ``otel:anthropic-exclusive``).
* The body is built as OpenAI Chat from the content attributes with the least
  change: ``gen_ai.system_instructions`` -> one system message whose content keeps
  every part; ``gen_ai.input.messages`` parts -> text / reasoning content parts,
  ``tool_calls`` (JSON-string arguments) and ``tool`` messages, by
  `normalize.messages.chat_messages` (the mapping Langfuse's OTel input uses too);
  ``gen_ai.tool.definitions`` -> function tools. OpenLLMetry's flat
  ``gen_ai.prompt.N.*`` / ``llm.request.functions.N.*`` attributes are read the same
  way. OTel content is lossy (formats.md §0 item 2): the body is what the
  instrumentation recorded, not the bytes on the wire; ``metadata["body_from"]``
  names the attributes used.
* Session: ``gen_ai.conversation.id`` › ``session.id`` › ``langfuse.session.id``
  (span attributes, then resource attributes), else a session header the span
  recorded as ``http.request.header.<name>`` (`normalize.sessions.SESSION_HEADERS`:
  LiteLLM, Bifrost, Helicone, Portkey, Claude Code, ...). Recorded request headers
  (credentials removed) are kept in ``metadata["headers"]``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from prefixscope.ingest.normalize.fields import dig, first_present, loads_deep, parse_time, to_int
from prefixscope.ingest.normalize.messages import chat_messages, content_part, tool_call
from prefixscope.ingest.normalize.sessions import (
    header_map,
    loggable_headers,
    session_from_headers,
)
from prefixscope.ingest.readers import BadRecord
from prefixscope.ingest.readers.json import iter_json_records
from prefixscope.ingest.source import Probe, Source
from prefixscope.model import Record, Request, Skip, Usage
from prefixscope.model.hashing import canonical_json

NAME = "otel"
DESCRIPTION = "OpenTelemetry GenAI spans, OTLP/JSON (collector file exporter JSONL or one document)"

MODEL_CALL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
SESSION_ATTRIBUTES = ("gen_ai.conversation.id", "session.id", "langfuse.session.id")
USER_ATTRIBUTES = ("user.id", "enduser.id", "langfuse.user.id")
HEADER_ATTRIBUTE_PREFIX = "http.request.header."  # OTel HTTP semconv: string[] per header

_NOT_SPAN_DOCUMENTS = ("resourceLogs", "resource_logs", "resourceMetrics", "resource_metrics")
_FLAT_PROMPT_RE = re.compile(r"^gen_ai\.prompt\.(\d+)\.(.+)$")
_FLAT_COMPLETION_RE = re.compile(r"^gen_ai\.completion\.(\d+)\.(.+)$")
_FLAT_FUNCTION_RE = re.compile(r"^llm\.request\.functions\.(\d+)\.(.+)$")
_TOOL_CALL_FIELD_RE = re.compile(r"^tool_calls\.(\d+)\.(id|name|arguments)$")


# --------------------------------------------------------------------------- detection

def sniff(probe: Probe) -> bool:
    if probe.kind in ("json", "jsonl"):
        return isinstance(_field(probe.first_dict, "resourceSpans", "resource_spans"), list)
    return False


def _field(obj: Any, *names: str) -> Any:
    """The first of `names` in `obj` (OTLP/JSON is camelCase; proto field names are snake_case)."""
    if not isinstance(obj, dict):
        return None
    for name in names:
        if name in obj:
            return obj[name]
    return None


# --------------------------------------------------------------------------- parsing

def parse(source: Source, probe: Probe) -> Iterator[Record | Skip]:
    found = 0
    spans = [0]
    for item in _parse_documents(source, probe, spans):
        found += 1
        yield item
    if not found:
        yield Skip(None, f"OTLP traces without a GenAI model-call span ({spans[0]} span(s); "
                         "none has gen_ai.operation.name chat / text_completion / "
                         "generate_content or gen_ai.* request attributes)")


def _parse_documents(source: Source, probe: Probe, spans: list[int]) -> Iterator[Record | Skip]:
    # One document: spans are numbered 1.. in file order; JSON lines: the line number.
    by_span_index = probe.kind == "json"
    span_index = 0
    for place, doc in iter_json_records(source, probe):
        if isinstance(doc, BadRecord):
            yield Skip(place, str(doc))
            continue
        if not isinstance(doc, dict):
            yield Skip(place, f"expected an OTLP/JSON object, got {type(doc).__name__}")
            continue
        resource_spans = _field(doc, "resourceSpans", "resource_spans")
        if resource_spans is None:
            if not any(key in doc for key in _NOT_SPAN_DOCUMENTS):
                yield Skip(place, "not an OTLP traces document: no resourceSpans")
            continue
        if not isinstance(resource_spans, list):
            yield Skip(place, "resourceSpans is not a list")
            continue
        for resource_attrs, scope, span in _iter_spans(resource_spans):
            span_index += 1
            spans[0] = span_index
            span_place = span_index if by_span_index else place
            try:
                record = _span_record(span, resource_attrs, scope, span_place, span_index)
            except BadRecord as exc:
                yield Skip(span_place, str(exc))
                continue
            if record is not None:
                yield record


def _iter_spans(resource_spans: list[Any]) -> Iterator[tuple[dict[str, Any], Any, Any]]:
    for rs in resource_spans:
        if not isinstance(rs, dict):
            continue
        resource_attrs = attributes(dig(rs, "resource", "attributes"))
        scopes = _field(rs, "scopeSpans", "scope_spans", "instrumentationLibrarySpans",
                        "instrumentation_library_spans")
        for ss in scopes if isinstance(scopes, list) else []:
            if not isinstance(ss, dict):
                continue
            scope = _field(ss, "scope", "instrumentationLibrary", "instrumentation_library")
            spans = ss.get("spans")
            for span in spans if isinstance(spans, list) else []:
                yield resource_attrs, scope, span


def any_value(value: Any) -> Any:
    """Decode an OTLP/JSON AnyValue (int64 may be a string; bytes stay base64 text)."""
    if not isinstance(value, dict):
        return value
    for name in ("stringValue", "string_value"):
        if name in value:
            return value[name]
    for name in ("intValue", "int_value"):
        if name in value:
            return to_int(value[name])
    for name in ("doubleValue", "double_value"):
        if name in value:
            raw = value[name]
            return float(raw) if isinstance(raw, (int, float, str)) and raw != "" else None
    for name in ("boolValue", "bool_value"):
        if name in value:
            return bool(value[name])
    for name in ("arrayValue", "array_value"):
        if name in value:
            return [any_value(v) for v in _field(value[name], "values") or []]
    for name in ("kvlistValue", "kvlist_value"):
        if name in value:
            return attributes(_field(value[name], "values"))
    for name in ("bytesValue", "bytes_value"):
        if name in value:
            return value[name]
    return None


def attributes(kvs: Any) -> dict[str, Any]:
    """A KeyValue list as a dict; a plain mapping (some exporters) is taken as it is."""
    if isinstance(kvs, dict):
        return dict(kvs)
    out: dict[str, Any] = {}
    for kv in kvs if isinstance(kvs, list) else []:
        if isinstance(kv, dict) and isinstance(kv.get("key"), str):
            out[kv["key"]] = any_value(kv.get("value"))
    return out


def is_model_call(attrs: dict[str, Any]) -> bool:
    operation = attrs.get("gen_ai.operation.name")
    if operation is not None:
        return isinstance(operation, str) and operation in MODEL_CALL_OPERATIONS
    return ("gen_ai.input.messages" in attrs or "gen_ai.request.model" in attrs
            or any(k.startswith(("gen_ai.usage.", "gen_ai.prompt.")) for k in attrs))


def _span_record(span: Any, resource_attrs: dict[str, Any], scope: Any, place: int,
                 span_index: int) -> Record | None:
    if not isinstance(span, dict):
        raise BadRecord(f"span is not an object ({type(span).__name__})")
    attrs = attributes(span.get("attributes"))
    if not is_model_call(attrs):
        return None
    trace_id = _field(span, "traceId", "trace_id")
    span_id = _field(span, "spanId", "span_id")
    body, body_from, body_error = build_body(attrs)
    headers = header_map({k[len(HEADER_ATTRIBUTE_PREFIX):]: v for k, v in attrs.items()
                          if k.startswith(HEADER_ATTRIBUTE_PREFIX)})
    session, session_source = _session(attrs, resource_attrs)
    if session is None:
        session, session_source = session_from_headers(headers) or (None, None)
    metadata = {k: v for k, v in {
        "body_from": body_from,
        "body_error": body_error,
        "trace_id": trace_id,
        "parent_span_id": _field(span, "parentSpanId", "parent_span_id") or None,
        "span_name": span.get("name"),
        "span_index": span_index,
        "operation": attrs.get("gen_ai.operation.name"),
        "response_id": attrs.get("gen_ai.response.id"),
        "response_model": attrs.get("gen_ai.response.model"),
        "scope": dig(scope, "name"),
        "status": _status(span),
        "headers": loggable_headers(headers) or None,
    }.items() if v is not None}
    request = Request(
        id="", source_format="", source_file="", source_line=place,
        timestamp=parse_time(_field(span, "startTimeUnixNano", "start_time_unix_nano")),
        endpoint="openai-chat" if body is not None else "unknown",
        model=first_present(attrs.get("gen_ai.request.model"), attrs.get("gen_ai.response.model")),
        session_key=session, session_key_source=session_source,
        user=_first_attr((attrs, resource_attrs), USER_ATTRIBUTES)[0],
        client=first_present(attrs.get("gen_ai.agent.name"), resource_attrs.get("service.name")),
        channel=_provider(attrs) or None,
        native_id=span_id or None,
        body=body, output=_output(attrs), usage=usage_from_attributes(attrs),
        metadata=metadata,
    )
    key = f"span:{trace_id}:{span_id}" if trace_id and span_id else canonical_json(span)
    return Record(request=request, key=key)


def _status(span: dict[str, Any]) -> str | None:
    code = dig(span, "status", "code")
    if code in (2, "STATUS_CODE_ERROR", "ERROR"):
        return "error"
    return None


def _provider(attrs: dict[str, Any]) -> str:
    value = first_present(attrs.get("gen_ai.provider.name"), attrs.get("gen_ai.system"))
    return value if isinstance(value, str) else ""


def _first_attr(sources: tuple[dict[str, Any], ...],
                names: tuple[str, ...]) -> tuple[Any, str | None]:
    for name in names:
        for attrs in sources:
            value = attrs.get(name)
            if value is not None and value != "":
                return (value if isinstance(value, str) else str(value)), name
    return None, None


def _session(attrs: dict[str, Any],
             resource_attrs: dict[str, Any]) -> tuple[str | None, str | None]:
    return _first_attr((attrs, resource_attrs), SESSION_ATTRIBUTES)


# --------------------------------------------------------------------------- usage

def usage_from_attributes(attrs: dict[str, Any]) -> Usage:
    """OTel usage: input includes the cache, except Anthropic instrumentations breaking the rule."""
    prompt = to_int(first_present(attrs.get("gen_ai.usage.input_tokens"),
                                  attrs.get("gen_ai.usage.prompt_tokens")))
    output = to_int(first_present(attrs.get("gen_ai.usage.output_tokens"),
                                  attrs.get("gen_ai.usage.completion_tokens")))
    read = to_int(first_present(attrs.get("gen_ai.usage.cache_read.input_tokens"),
                                attrs.get("gen_ai.usage.cache_read_input_tokens")))
    write = to_int(first_present(attrs.get("gen_ai.usage.cache_creation.input_tokens"),
                                 attrs.get("gen_ai.usage.cache_creation_input_tokens")))
    if all(v is None for v in (prompt, output, read, write)):
        return Usage()
    semantics = "otel"
    if _provider(attrs).lower() == "anthropic" and prompt is not None and read is not None \
            and prompt < read:
        prompt = prompt + read + (write or 0)
        semantics = "otel:anthropic-exclusive"
    return Usage(prompt_tokens=prompt, cached_tokens=read, cache_write_tokens=write,
                 output_tokens=output, semantics=semantics)


# --------------------------------------------------------------------------- body

def build_body(attrs: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None, str | None]:
    """(openai-chat body, attributes it was built from, why it could not be built)."""
    used = [name for name in ("gen_ai.system_instructions", "gen_ai.input.messages",
                              "gen_ai.tool.definitions") if attrs.get(name) is not None]
    if used:
        try:
            body = _body_from_semconv(attrs)
        except BadRecord as exc:
            return None, None, str(exc)
        return body, "otel:" + "+".join(used), None
    if any(_FLAT_PROMPT_RE.match(k) for k in attrs):
        body = {"messages": _flat_messages(attrs, _FLAT_PROMPT_RE)}
        tools = _flat_functions(attrs)
        if tools:
            body["tools"] = tools
        return _with_model(body, attrs), "otel:gen_ai.prompt", None
    return None, None, None


def _with_model(body: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    model = attrs.get("gen_ai.request.model")
    return {"model": model, **body} if isinstance(model, str) else body


def _json_list(attrs: dict[str, Any], name: str) -> list[Any] | None:
    value = attrs.get(name)
    if value is None:
        return None
    decoded = loads_deep(value)
    if isinstance(decoded, str) and name == "gen_ai.system_instructions":
        return [{"type": "text", "content": decoded}]
    if not isinstance(decoded, list):
        raise BadRecord(f"{name} is not a JSON array")
    return decoded


def _body_from_semconv(attrs: dict[str, Any]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    system = _json_list(attrs, "gen_ai.system_instructions")
    if system:
        messages.append({"role": "system",
                         "content": [content_part(p) for p in system]})
    for message in _json_list(attrs, "gen_ai.input.messages") or []:
        messages.extend(chat_messages(message))
    body: dict[str, Any] = {"messages": messages}
    definitions = _json_list(attrs, "gen_ai.tool.definitions")
    if definitions:
        body["tools"] = [_tool(d) for d in definitions]
    return _with_model(body, attrs)


def _tool(definition: Any) -> Any:
    if not isinstance(definition, dict) or "function" in definition or \
            definition.get("type", "function") != "function" or "name" not in definition:
        return definition  # already OpenAI-shaped, or a non-function tool: kept as logged
    function: dict[str, Any] = {"name": definition["name"]}
    if definition.get("description") is not None:
        function["description"] = definition["description"]
    if definition.get("parameters") is not None:
        function["parameters"] = loads_deep(definition["parameters"])
    return {"type": "function", "function": function}


def _flat_messages(attrs: dict[str, Any], pattern: re.Pattern[str]) -> list[dict[str, Any]]:
    """OpenLLMetry's ``gen_ai.prompt.N.role/content/tool_calls.M.*/tool_call_id`` as messages."""
    fields: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        match = pattern.match(key)
        if match:
            fields.setdefault(int(match[1]), {})[match[2]] = value
    messages = []
    for index in sorted(fields):
        flat = fields[index]
        message: dict[str, Any] = {"role": flat.get("role"),
                                   "content": _flat_content(flat.get("content"))}
        calls: dict[int, dict[str, Any]] = {}
        for name, value in flat.items():
            match = _TOOL_CALL_FIELD_RE.match(name)
            if match:
                calls.setdefault(int(match[1]), {})[match[2]] = value
        if calls:
            message["tool_calls"] = [tool_call(calls[i]) for i in sorted(calls)]
        if flat.get("tool_call_id") is not None:
            message["tool_call_id"] = flat["tool_call_id"]
        messages.append(message)
    return messages


def _flat_content(value: Any) -> Any:
    """Content as logged; a JSON list of typed parts (how OpenLLMetry writes lists) is decoded."""
    if isinstance(value, str) and value.lstrip().startswith("[{"):
        decoded = loads_deep(value)
        if isinstance(decoded, list) and all(isinstance(p, dict) and "type" in p for p in decoded):
            return decoded
    return value


def _flat_functions(attrs: dict[str, Any]) -> list[dict[str, Any]]:
    fields: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        match = _FLAT_FUNCTION_RE.match(key)
        if match:
            fields.setdefault(int(match[1]), {})[match[2]] = value
    return [_tool({"type": "function", **fields[i]}) for i in sorted(fields)
            if fields[i].get("name") is not None]


def _output(attrs: dict[str, Any]) -> Any:
    """The response message(s): ``gen_ai.output.messages`` or flat ``gen_ai.completion.N.*``."""
    messages: list[dict[str, Any]] = []
    try:
        for message in _json_list(attrs, "gen_ai.output.messages") or []:
            messages.extend(chat_messages(message))
    except BadRecord:
        return None
    if not messages and any(_FLAT_COMPLETION_RE.match(k) for k in attrs):
        messages = _flat_messages(attrs, _FLAT_COMPLETION_RE)
    if not messages:
        return None
    return messages[0] if len(messages) == 1 else messages
