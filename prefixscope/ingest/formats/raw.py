"""Raw request/response captures: the only logs that hold the exact bytes a client sent.

A proxy, a fetch hook (claude-trace) or a hand-written logger records what went
over the wire: the request body in its provider protocol and the response, JSON or
a ``text/event-stream``. formats.md §0 item 2: only these (and Claude Code's OTel
body event) are byte-exact, so nothing here rewrites the body: `Request.body` is the
logged request object, key order included.

Accepted containers (formats.md §6 for body and usage shapes):

* JSON lines / a JSON array / one object of ``{request, response[, timestamp,
  headers, endpoint|url]}``. ``request`` is the body itself, or an HTTP envelope
  ``{method, url, headers, body}`` (claude-trace's ``RawPair``, whose response is
  ``{status_code, headers, body | body_raw | events}``).
* One request body per line, no wrapper (Anthropic Messages, OpenAI Chat, OpenAI
  Responses).
* A directory of ``NN.request.json`` / ``NN.response.json`` pairs: parsing the
  request file reads its response through `Source` (gzip allowed); `is_companion`
  keeps the directory walk from reading the response file twice.

Usage comes from the response in its own convention (`normalize.streams`):
Anthropic JSON or SSE (``message_start.message.usage`` updated by
``message_delta.usage``), OpenAI Chat JSON or the last stream chunk carrying
``usage``, Responses ``usage`` or ``response.completed``. Sessions are the
wire ids `normalize.sessions` knows (formats.md §5, §9; docs/store.md "Where session
ids come from"): a session header (``X-Claude-Code-Session-Id``, ``x-litellm-session-id``,
``Helicone-Session-Id``, ``x-bf-session-id``, ...), else the body's Responses
``conversation``, ``metadata.session_id`` / ``conversation_id`` or Claude Code's
``metadata.user_id`` (either form). A Responses ``previous_response_id`` is the
request's `parent_key` (a chain of responses is threaded as one session). OpenAI
``prompt_cache_key`` / ``user`` are routing hints, not sessions; ``prompt_cache_key``
is kept in metadata, and so are the request headers (credentials removed), which
``--session-key header:NAME`` reads.

The provider's own verdict on the cache, where the response carries one (Anthropic's
``diagnostics.cache_miss_reason``, OpenAI Responses' ``prompt_cache_diagnostics``:
`normalize.streams`), is kept in metadata as Claude Code's transcripts' is:
``cache_miss_reason`` (the reason; for OpenAI a miss's ``reason``, else the diagnosis'
``type``: ``cache_hit``, ``comparison_response_not_found``, ``unavailable``),
``cache_missed_input_tokens`` (Anthropic's ``cache_missed_input_tokens``, OpenAI's
``cache_missed_tokens``), ``cache_comparison_reusable_tokens`` (OpenAI's
``comparison_reusable_tokens``) and ``cache_diagnostics`` (``anthropic`` / ``openai``).

The backend that served a call, where the response names it (OpenRouter's top-level
``provider``, in a JSON completion or on its stream's chunks: `normalize.streams`), is kept
as ``metadata.provider``: the ledger's backend (`Store.usage_records`), so a session that
OpenRouter spread over providers hops between them, where the capture's host alone
(``openrouter.ai``, the ``channel``) would name one backend.

Records that are by definition not model calls (``count_tokens``, ``GET /v1/models``
in an ``--include-all-requests`` capture) are passed over without a skip.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from prefixscope.ingest.normalize.fields import (
    dig,
    first_present,
    loads_deep,
    parse_time,
    str_or_none,
    to_int,
)
from prefixscope.ingest.normalize.sessions import (
    claude_code_user_id,
    header_map,
    loggable_headers,
    previous_response,
    prompt_cache_key,
    wire_session,
)
from prefixscope.ingest.normalize.streams import Reply, decode_response, verdict_metadata
from prefixscope.ingest.readers import BadRecord
from prefixscope.ingest.readers.json import iter_json_records
from prefixscope.ingest.source import Probe, Source
from prefixscope.model import ENDPOINTS, Record, Request, Skip
from prefixscope.model.hashing import canonical_json
from prefixscope.model.keys import detect_endpoint

NAME = "raw"
DESCRIPTION = ("raw request/response captures: {request, response} JSONL (JSON or SSE responses), "
               "bare request bodies, NN.request.json/NN.response.json pairs")

# Keys that mark another format's record: never claim those as a bare body.
_FOREIGN_KEYS = frozenset({
    "type", "sessionId", "uuid", "parentUuid", "history", "trajectory", "info",
    "proxy_server_request", "input_history", "output_message", "response", "choices",
    "usage", "id", "request_id", "trace_id", "traceId", "observations", "startTime",
    "start_time", "output", "spend", "call_type", "hash_ids", "input_length",
    "resourceSpans", "resourceLogs", "instance_id", "trajectory_format",
})
# Keys that mark another format's record even when a `request` key is present.
_FOREIGN_WRAPPER_KEYS = frozenset({
    "proxy_server_request", "input_history", "sessionId", "observations", "resourceSpans",
    "trajectory", "history",
})

_PAIR_REQUEST_RE = re.compile(r"^(?P<stem>.+)\.request\.json(?P<gz>\.gz)?$")
_PAIR_RESPONSE_RE = re.compile(r"^(?P<stem>.+)\.response\.json(?P<gz>\.gz)?$")

_BILLING_PREFIX = "x-anthropic-billing-header:"
_BILLING_ITEM_RE = re.compile(r"([\w.-]+)=([^;\s]*);")

_SSE_RESPONSE_RE = re.compile(
    r'^(?:event:\s*(?:message_start|response\.created)|data:\s*\{.*"(?:message_start|'
    r'chat\.completion\.chunk|response\.created)")')

_NOT_MODEL_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "DELETE"})


# --------------------------------------------------------------------------- detection

def sniff(probe: Probe) -> bool:
    if probe.kind in ("json", "jsonl"):
        first = probe.first_dict
        if _is_capture(first) or _is_bare_body(first):
            return True
        return probe.kind == "json" and isinstance(probe.document, dict) and \
            _is_response(probe.document)
    if probe.kind == "text":
        return _is_sse_response_text(probe.text)
    return False


def is_companion(path: Path) -> bool:
    """True for ``X.response.json[.gz]`` when ``X.request.json[.gz]`` is next to it."""
    match = _PAIR_RESPONSE_RE.match(path.name)
    if not match:
        return False
    stem = match["stem"]
    return any(path.with_name(f"{stem}.request.json{gz}").exists() for gz in ("", ".gz"))


def _is_capture(rec: dict[str, Any]) -> bool:
    request = rec.get("request")
    if isinstance(request, str):  # some loggers store the body as JSON text
        request = loads_deep(request)
    if not isinstance(request, dict) or _FOREIGN_WRAPPER_KEYS & rec.keys():
        return False
    if _has_prompt(request):
        return True
    if _has_prompt(loads_deep(request.get("body"))):
        return True
    # An HTTP envelope whose first record is not a model call (GET /v1/models).
    return isinstance(request.get("url"), str) and "method" in request and "response" in rec


def _is_bare_body(rec: dict[str, Any]) -> bool:
    if _FOREIGN_KEYS & rec.keys() or not isinstance(rec.get("model"), str):
        return False
    if isinstance(rec.get("messages"), list):
        return True
    return isinstance(rec.get("input"), (list, str)) and "messages" not in rec


def _has_prompt(body: Any) -> bool:
    return isinstance(body, dict) and (
        isinstance(body.get("messages"), list) or isinstance(body.get("input"), (list, str)))


def _is_response(doc: dict[str, Any]) -> bool:
    """A provider response object (Anthropic message, Chat completion, Responses response)."""
    if doc.get("type") == "message" and doc.get("role") == "assistant" and "content" in doc:
        return True
    return doc.get("object") in ("chat.completion", "response") and (
        "choices" in doc or "output" in doc)


def _is_sse_response_text(text: str) -> bool:
    return bool(_SSE_RESPONSE_RE.match(text.lstrip()[:2048]))


# --------------------------------------------------------------------------- parsing

@dataclass
class _Capture:
    """One request as captured, before normalization."""

    body: Any
    response: Any = None  # dict | str (JSON or SSE text) | list of events | None
    headers: dict[str, str] = field(default_factory=dict)  # request headers, lower-case names
    url: str | None = None
    endpoint_hint: str | None = None
    method: str | None = None
    timestamp: Any = None
    status: int | None = None
    form: str = "wrapper"  # wrapper | http | body | pair
    raw: Any = None  # what the record key is derived from
    read_error: str | None = None  # the pair's response file could not be read


def parse(source: Source, probe: Probe) -> Iterator[Record | Skip]:
    if _is_response_only(probe):
        yield Skip(1, _response_only_reason(source))
        return
    pair = probe.kind == "json" and isinstance(probe.document, dict) and _is_pair_request(source)
    response_path = _pair_response_path(source) if pair else None
    # nothing here rewrites a body (the docstring): the reader writes each record's body
    # as its depth test, and ingest stores that text
    for place, rec in iter_json_records(source, probe, bodies=True):
        if isinstance(rec, BadRecord):
            yield Skip(place, str(rec))
            continue
        try:
            capture = _capture(rec, pair, response_path)
            if capture is None:
                continue
            yield _record(capture, place)
        except BadRecord as exc:
            yield Skip(place, str(exc))


def _is_response_only(probe: Probe) -> bool:
    if probe.kind == "json" and isinstance(probe.document, dict):
        return _is_response(probe.document)
    return probe.kind == "text" and _is_sse_response_text(probe.text)


def _response_only_reason(source: Source) -> str:
    match = _PAIR_RESPONSE_RE.match(source.path.name) if source.path else None
    if match and source.path is not None and is_companion(source.path):
        return (f"a response file: it is read with {match['stem']}.request.json; "
                "ingest that file instead")
    return "a response without its request (no NN.request.json beside it): nothing to analyse"


def _is_pair_request(source: Source) -> bool:
    return source.path is not None and bool(_PAIR_REQUEST_RE.match(source.path.name))


def _pair_response_path(source: Source) -> Path | None:
    """The ``X.response.json[.gz]`` next to ``X.request.json[.gz]``, if there is one."""
    match = _PAIR_REQUEST_RE.match(source.path.name) if source.path else None
    if not match:
        return None
    for gz in ("", ".gz"):
        found = source.sibling(f"{match['stem']}.response.json{gz}")
        if found is not None:
            return found
    return None


def _capture(rec: Any, pair: bool, response_path: Path | None) -> _Capture | None:
    if not isinstance(rec, dict):
        raise BadRecord(f"expected a JSON object, got {type(rec).__name__}")
    if "request" in rec:
        capture = _capture_from_wrapper(rec)
    elif _is_bare_body(rec):
        capture = _Capture(body=rec, form="body", raw=rec)
        if pair:
            capture.form = "pair"
            if response_path is not None:
                capture.response, capture.read_error = _read_pair_response(response_path)
            capture.raw = {"request": rec, "response": capture.response}
    elif _is_response(rec):
        raise BadRecord("a response without its request: nothing to analyse")
    else:
        raise BadRecord("not a request capture: no 'request' object and no request body "
                        "(model + messages/input)")
    if capture is None or _is_not_model_call(capture):
        return None
    if not _has_prompt(capture.body):
        raise BadRecord("request body has no 'messages' or 'input' (not a model call we can read)")
    return capture


def _capture_from_wrapper(rec: dict[str, Any]) -> _Capture:
    request = loads_deep(rec["request"])
    capture = _Capture(body=request, response=rec.get("response"), raw=rec,
                       timestamp=first_present(rec.get("timestamp"), rec.get("time"),
                                               rec.get("ts"), rec.get("start_time")))
    if isinstance(request, dict) and not _has_prompt(request) and (
            "body" in request or "url" in request or "method" in request):
        capture.form = "http"
        capture.body = loads_deep(request.get("body"))
        capture.headers.update(header_map(request.get("headers")))
        capture.url = request.get("url") if isinstance(request.get("url"), str) else None
        capture.method = request.get("method") if isinstance(request.get("method"), str) else None
        capture.timestamp = first_present(capture.timestamp, request.get("timestamp"))
    capture.timestamp = first_present(capture.timestamp, rec.get("logged_at"))
    capture.headers.update(header_map(first_present(rec.get("headers"),
                                                    rec.get("request_headers"))))
    endpoint = rec.get("endpoint")
    if isinstance(endpoint, str) and endpoint in ENDPOINTS and endpoint != "unknown":
        capture.endpoint_hint = endpoint
        endpoint = None
    for where in (rec.get("url"), endpoint, rec.get("path")):
        if isinstance(where, str) and where and not capture.url:
            capture.url = where
    capture.response, capture.status = _unwrap_http_response(capture.response)
    capture.status = first_present(to_int(rec.get("status_code")), to_int(rec.get("status")),
                                   capture.status)
    return capture


def _unwrap_http_response(response: Any) -> tuple[Any, int | None]:
    """(response body, HTTP status) from an HTTP envelope, or the response as given."""
    response = loads_deep(response) if isinstance(response, str) and \
        response.lstrip().startswith("{") else response
    if not isinstance(response, dict) or _is_response(response) or "usage" in response:
        return response, None
    if not ({"status_code", "body", "body_raw", "events"} & response.keys()):
        return response, None
    body = first_present(response.get("body"), response.get("body_raw"), response.get("events"))
    return body, to_int(first_present(response.get("status_code"), response.get("status")))


def _read_pair_response(path: Path) -> tuple[str | None, str | None]:
    """(response text, None) or (None, why it could not be read): the request stays usable."""
    try:
        data = Source.from_path(path).read_bytes()
    except (OSError, EOFError) as exc:
        return None, f"cannot read {path.name}: {exc}"
    return data.decode("utf-8", "replace").lstrip("\ufeff"), None


def _url_path(url: str | None) -> str:
    if not url:
        return ""
    return (urlsplit(url).path if "://" in url else url.split("?", 1)[0]).rstrip("/")


def _endpoint_from_path(path: str) -> str | None:
    if path.endswith("/messages"):
        return "anthropic-messages"
    if path.endswith("/chat/completions"):
        return "openai-chat"
    if path.endswith("/responses"):
        return "openai-responses"
    return None


def _is_not_model_call(capture: _Capture) -> bool:
    """Captured traffic that is by definition not a model call (count_tokens, GET /v1/models)."""
    if capture.method and capture.method.upper() in _NOT_MODEL_METHODS:
        return True
    path = _url_path(capture.url)
    if path.endswith("/count_tokens"):
        return True
    return bool(path) and _endpoint_from_path(path) is None and not _has_prompt(capture.body)


# --------------------------------------------------------------------------- normalizing

def _record(capture: _Capture, place: int) -> Record:
    body: dict[str, Any] = capture.body
    reply = decode_response(capture.response)
    # What was captured on the wire says more than the shape of the body.
    endpoint = capture.endpoint_hint or _endpoint_from_path(_url_path(capture.url)) or \
        reply.protocol or detect_endpoint(body)
    session, session_source, meta_user = _session(capture.headers, body)
    billing = _billing_items(body)
    metadata = _metadata(capture, reply, billing)
    request = Request(
        id="", source_format="", source_file="", source_line=place,
        timestamp=parse_time(first_present(capture.timestamp, reply.created)),
        endpoint=endpoint,
        model=body.get("model") if isinstance(body.get("model"), str) else None,
        session_key=session, session_key_source=session_source,
        parent_key=previous_response(body),
        user=first_present(meta_user, capture.headers.get("x-user-id"),
                           str_or_none(body.get("user")),
                           str_or_none(body.get("safety_identifier"))),
        client=_client(billing, capture.headers),
        channel=urlsplit(capture.url).hostname if capture.url and "://" in capture.url else None,
        native_id=reply.native_id,
        body=body, output=reply.output, usage=reply.usage, metadata=metadata,
    )
    key = f"response.id:{reply.native_id}" if reply.native_id else canonical_json(capture.raw)
    return Record(request=request, key=key)


def _session(headers: dict[str, str],
             body: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    """(session id, where it came from, user): the wire ids, and Claude Code's account."""
    cc = claude_code_user_id(dig(body, "metadata", "user_id"))
    session, source = wire_session(headers, body)
    return session, source, cc.account or cc.device


def _billing_items(body: dict[str, Any]) -> dict[str, str]:
    """``key=value`` items of Claude Code's billing header at the start of the system prompt."""
    system = body.get("system")
    text = dig(system, 0, "text") if isinstance(system, list) else system
    if not isinstance(text, str) or not text.lstrip().startswith(_BILLING_PREFIX):
        return {}
    header = text.lstrip()[len(_BILLING_PREFIX):].split("\n", 1)[0]
    return dict(_BILLING_ITEM_RE.findall(header))


def _client(billing: dict[str, str], headers: dict[str, str]) -> str | None:
    if billing.get("cc_entrypoint"):
        return f"claude-code:{billing['cc_entrypoint']}"
    return headers.get("user-agent") or None


def _retention(body: Any) -> str | None:
    """OpenAI's ``prompt_cache_retention`` (``in_memory`` / ``24h``) when the body sets it."""
    value = body.get("prompt_cache_retention") if isinstance(body, dict) else None
    return value if isinstance(value, str) and value else None


def _metadata(capture: _Capture, reply: Reply, billing: dict[str, str]) -> dict[str, Any]:
    body = capture.body
    candidates: dict[str, Any] = {
        "capture": capture.form,
        "url_path": _url_path(capture.url) or None,
        "http_status": capture.status,
        "streamed": reply.streamed or None,
        "response_error": first_present(capture.read_error, reply.error),
        "response_missing": True if capture.response is None else None,
        "sse_bad_events": reply.bad_events or None,
        "cc_version": billing.get("cc_version"),
        "agent_id": capture.headers.get("x-claude-code-agent-id"),
        "anthropic_beta": capture.headers.get("anthropic-beta"),
        "prompt_cache_key": prompt_cache_key(body),
        "prompt_cache_retention": _retention(body),
        "headers": loggable_headers(capture.headers) or None,
        "provider": reply.provider,  # the backend that served it: OpenRouter's provider
    }
    candidates.update(verdict_metadata(reply.verdict))  # the provider's own verdict
    return {k: v for k, v in candidates.items() if v is not None}
