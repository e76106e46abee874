"""Provider responses -> usage, output and id: one JSON response, or an event stream assembled.

A captured response is the only place that says what the call cost and what came
back, and it comes in every protocol's own shape: an Anthropic message, an OpenAI
Chat completion or Responses object, or the ``text/event-stream`` of any of them
(logged as SSE text or as a list of events). The stream rules are the providers':
Anthropic usage is ``message_start``'s updated by each ``message_delta``, content
rebuilt from the block deltas; OpenAI Chat usage is the last chunk carrying
``usage``, the message rebuilt from choice 0's deltas (tool-call fragments joined
by index); Responses usage and output are the final ``response.completed`` /
``incomplete`` / ``failed`` object's. Usage is read with `normalize.usage`, in the
convention of the protocol the response is written in.

The provider's own verdict on the cache, where the response carries one (`Reply.verdict`,
`{"reason", "missed_tokens", "reusable_tokens", "provider"}`):

* Anthropic's cache diagnosis (beta header ``cache-diagnosis-2026-04-07``, the request's
  ``diagnostics.previous_message_id``): the message's ``diagnostics.cache_miss_reason``,
  ``{"type": "model_changed" | "system_changed" | "tools_changed" | "messages_changed" |
  "previous_message_not_found" | "unavailable", "cache_missed_input_tokens": N}``; in a
  stream on ``message_start.message`` (or a later event's ``diagnostics``). A null reason
  (no divergence, or the comparison still running) is no verdict.
* OpenAI Responses (``prompt_cache_options.comparison_response_id``): the response's
  ``prompt_cache_diagnostics``, ``{"type": "cache_miss", "reason": "model_changed" |
  "prompt_cache_key_changed" | "tools_changed" | "text_format_changed" |
  "reasoning_effort_changed" | "verbosity_changed" | "context_compacted" |
  "input_changed" | "service_tier_changed", "cache_missed_tokens": N,
  "comparison_reusable_tokens": N}``; the other types (``cache_hit``,
  ``comparison_response_not_found``, ``unavailable``) are the reason themselves.

The backend that served the call, where the response names one (`Reply.provider`):
OpenRouter's Chat completion (and each chunk of its stream) carries a top-level
``provider``, the upstream provider it routed the call to (``"Anthropic"``, ``"Amazon
Bedrock"``, ``"Google"``); each keeps a cache of its own (docs/report.md, sessions that hop
between backends).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from prefixscope.ingest.normalize.fields import as_object, dig, loads_deep, str_or_none, to_int
from prefixscope.ingest.normalize.usage import (
    usage_anthropic,
    usage_auto,
    usage_openai_chat,
    usage_openai_responses,
)
from prefixscope.model import Usage


@dataclass
class Reply:
    """What the response tells about the request."""

    usage: Usage = field(default_factory=Usage)
    output: Any = None
    native_id: str | None = None
    created: Any = None
    error: str | None = None
    streamed: bool = False
    bad_events: int = 0
    protocol: str | None = None  # the endpoint protocol the response is written in
    verdict: dict[str, Any] | None = None  # the provider's cache diagnosis (module docstring)
    provider: str | None = None  # the backend that served it (OpenRouter's ``provider``)


def decode_response(response: Any) -> Reply:
    """What a logged response says: a JSON object, its text, SSE text, or a list of logged
    events (claude-trace's ``{event, data}``); `Reply.error` says why when nothing fits."""
    if response is None:
        return Reply()
    if isinstance(response, (bytes, str)):
        text = response.decode("utf-8", "replace") if isinstance(response, bytes) else response
        stripped = text.strip()
        if stripped[:1] in ("{", "["):
            try:
                return decode_response(orjson.loads(stripped))
            except orjson.JSONDecodeError:
                pass
        events, bad = parse_sse(text)
        if not events:
            return Reply(error="response is neither JSON nor an event stream")
        reply = _reply_from_events(events)
        reply.bad_events = bad
        return reply
    if isinstance(response, list):
        return _reply_from_events([_event_data(e) for e in response if isinstance(e, dict)])
    if isinstance(response, dict):
        return _reply_from_json(response)
    return Reply(error=f"unexpected response type {type(response).__name__}")


def _event_data(event: dict[str, Any]) -> dict[str, Any]:
    """The payload of a logged event: claude-trace keeps ``{event, data, timestamp}``."""
    data = event.get("data")
    if "event" in event and isinstance(data, (dict, str)):
        data = loads_deep(data)
        return data if isinstance(data, dict) else {}
    return event


def _reply_from_json(resp: dict[str, Any]) -> Reply:
    if resp.get("type") == "error" or ("error" in resp and resp.get("error")):
        error = resp.get("error")
        kind = dig(error, "type") or dig(error, "code") or dig(error, "message") or "error"
        # Anthropic errors are {"type": "error", "error": {...}}; OpenAI's have no "type".
        return Reply(error=str(kind),
                      protocol="anthropic-messages" if resp.get("type") == "error" else None)
    native_id = str_or_none(resp.get("id"))
    if resp.get("type") == "message" or (
            isinstance(resp.get("content"), list) and "choices" not in resp):
        return Reply(usage=usage_anthropic(resp.get("usage")), native_id=native_id,
                      output={"role": resp.get("role") or "assistant",
                              "content": resp.get("content")},
                      protocol="anthropic-messages",
                      verdict=anthropic_verdict(resp.get("diagnostics")))
    if "choices" in resp:
        return Reply(usage=usage_openai_chat(resp.get("usage")), native_id=native_id,
                      output=dig(resp, "choices", 0, "message"), created=resp.get("created"),
                      protocol="openai-chat", provider=_provider(resp))
    if resp.get("object") == "response" or isinstance(resp.get("output"), list):
        return Reply(usage=usage_openai_responses(resp.get("usage")), native_id=native_id,
                      output=resp.get("output"), created=resp.get("created_at"),
                      protocol="openai-responses",
                      verdict=openai_verdict(resp.get("prompt_cache_diagnostics")))
    return Reply(usage=usage_auto(resp.get("usage")), native_id=native_id)


def parse_sse(text: str) -> tuple[list[dict[str, Any]], int]:
    """(event payloads, number of undecodable events) of a ``text/event-stream`` body.

    The payload's own ``type`` is kept; an ``event:`` name fills it when absent.
    ``data: [DONE]`` ends nothing: later events are still read.
    """
    events: list[dict[str, Any]] = []
    bad = 0
    name: str | None = None
    data: list[str] = []

    def dispatch() -> None:
        nonlocal bad, name
        if data:
            payload = "\n".join(data)
            if payload.strip() != "[DONE]":
                try:
                    parsed = orjson.loads(payload)
                except orjson.JSONDecodeError:
                    bad += 1
                else:
                    if isinstance(parsed, dict):
                        if name and "type" not in parsed and "object" not in parsed:
                            parsed = {"type": name, **parsed}
                        events.append(parsed)
                    else:
                        bad += 1
        data.clear()
        name = None

    for line in text.splitlines():
        if not line.strip():
            dispatch()
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
        # comments (":") and id:/retry: lines carry nothing we need
    dispatch()
    return events, bad


def _reply_from_events(events: list[dict[str, Any]]) -> Reply:
    types = {e.get("type") for e in events}
    if "message_start" in types:
        return _anthropic_stream(events)
    if any(e.get("object") == "chat.completion.chunk" or "choices" in e for e in events):
        return _chat_stream(events)
    if any(isinstance(t, str) and t.startswith("response.") for t in types):
        return _responses_stream(events)
    return Reply(streamed=True, error="event stream of an unknown protocol")


def _anthropic_stream(events: list[dict[str, Any]]) -> Reply:
    """Usage: message_start's, updated by each message_delta's; content rebuilt from deltas."""
    usage: dict[str, Any] = {}
    message: dict[str, Any] = {}
    blocks: dict[int, dict[str, Any]] = {}
    partial_json: dict[int, str] = {}
    error = None
    verdict = None
    for event in events:
        kind = event.get("type")
        verdict = anthropic_verdict(event.get("diagnostics")) or verdict
        if kind == "message_start" and isinstance(event.get("message"), dict):
            message = event["message"]
            usage.update(_present(message.get("usage")))
            verdict = anthropic_verdict(message.get("diagnostics")) or verdict
        elif kind == "message_delta":
            usage.update(_present(event.get("usage")))
        elif kind == "content_block_start" and isinstance(event.get("content_block"), dict):
            blocks[to_int(event.get("index")) or 0] = dict(event["content_block"])
        elif kind == "content_block_delta":
            _apply_anthropic_delta(blocks, partial_json, to_int(event.get("index")) or 0,
                                   event.get("delta"))
        elif kind == "error":
            error = str(dig(event, "error", "type") or "error")
    for index, text in partial_json.items():
        if index in blocks:
            blocks[index]["input"] = loads_deep(text) if text.strip() else {}
    content = [blocks[i] for i in sorted(blocks)]
    return Reply(usage=usage_anthropic(usage) if usage else Usage(), streamed=True,
                  native_id=str_or_none(message.get("id")), error=error,
                  output={"role": message.get("role") or "assistant", "content": content},
                  protocol="anthropic-messages", verdict=verdict)


def verdict_metadata(verdict: dict[str, Any] | None) -> dict[str, Any]:
    """A request's metadata keys for the provider's verdict (as Claude Code's transcripts are
    read): ``cache_miss_reason``, ``cache_missed_input_tokens``,
    ``cache_comparison_reusable_tokens``, ``cache_diagnostics`` (the provider); only those
    present."""
    if not verdict:
        return {}
    candidates = {"cache_miss_reason": verdict.get("reason"),
                  "cache_missed_input_tokens": verdict.get("missed_tokens"),
                  "cache_comparison_reusable_tokens": verdict.get("reusable_tokens"),
                  "cache_diagnostics": verdict.get("provider")}
    return {k: v for k, v in candidates.items() if v is not None}


def anthropic_verdict(diagnostics: Any) -> dict[str, Any] | None:
    """Anthropic's ``diagnostics.cache_miss_reason`` as a verdict, else None."""
    reason = diagnostics.get("cache_miss_reason") if isinstance(diagnostics, dict) else None
    if not isinstance(reason, dict) or not isinstance(reason.get("type"), str):
        return None
    return {"provider": "anthropic", "reason": reason["type"],
            "missed_tokens": _count(reason.get("cache_missed_input_tokens")),
            "reusable_tokens": None}


def openai_verdict(diagnostics: Any) -> dict[str, Any] | None:
    """OpenAI's ``prompt_cache_diagnostics`` as a verdict (a miss's ``reason``, else its
    ``type``), else None."""
    if not isinstance(diagnostics, dict) or not isinstance(diagnostics.get("type"), str):
        return None
    kind = diagnostics["type"]
    reason = diagnostics.get("reason") if kind == "cache_miss" else kind
    if not isinstance(reason, str) or not reason:
        return None
    return {"provider": "openai", "reason": reason,
            "missed_tokens": _count(diagnostics.get("cache_missed_tokens")),
            "reusable_tokens": _count(diagnostics.get("comparison_reusable_tokens"))}


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


def _present(value: Any) -> dict[str, Any]:
    return {k: v for k, v in value.items() if v is not None} if isinstance(value, dict) else {}


def _apply_anthropic_delta(blocks: dict[int, dict[str, Any]], partial_json: dict[int, str],
                           index: int, delta: Any) -> None:
    if not isinstance(delta, dict):
        return
    block = blocks.setdefault(index, {})
    kind = delta.get("type")
    if kind == "text_delta":
        block["text"] = block.get("text", "") + (delta.get("text") or "")
    elif kind == "input_json_delta":
        partial_json[index] = partial_json.get(index, "") + (delta.get("partial_json") or "")
    elif kind == "thinking_delta":
        block["thinking"] = block.get("thinking", "") + (delta.get("thinking") or "")
    elif kind == "signature_delta":
        block["signature"] = block.get("signature", "") + (delta.get("signature") or "")


def _chat_stream(events: list[dict[str, Any]]) -> Reply:
    """Usage = the last chunk carrying ``usage``; the message is rebuilt from choice 0's deltas."""
    usage = None
    native_id = created = provider = None
    text: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    for chunk in events:
        native_id = native_id or str_or_none(chunk.get("id"))
        created = created or chunk.get("created")
        provider = provider or _provider(chunk)
        if isinstance(chunk.get("usage"), dict):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or to_int(choice.get("index")) not in (0, None):
                continue
            delta = as_object(choice.get("delta"))
            if isinstance(delta.get("content"), str):
                text.append(delta["content"])
            if isinstance(delta.get("reasoning_content"), str):
                reasoning.append(delta["reasoning_content"])
            for call in delta.get("tool_calls") or []:
                _apply_tool_call_delta(calls, call)
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) if text else None}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return Reply(usage=usage_openai_chat(usage) if usage else Usage(), native_id=native_id,
                  created=created, output=message, streamed=True, protocol="openai-chat",
                  provider=provider)


def _provider(resp: dict[str, Any]) -> str | None:
    """The upstream provider a router names at the top of its response (OpenRouter's)."""
    value = resp.get("provider")
    return value.strip() or None if isinstance(value, str) else None


def _apply_tool_call_delta(calls: dict[int, dict[str, Any]], delta: Any) -> None:
    if not isinstance(delta, dict):
        return
    call = calls.setdefault(to_int(delta.get("index")) or 0,
                            {"id": None, "type": "function",
                             "function": {"name": "", "arguments": ""}})
    if delta.get("id"):
        call["id"] = delta["id"]
    function = as_object(delta.get("function"))
    call["function"]["name"] += function.get("name") or ""
    call["function"]["arguments"] += function.get("arguments") or ""


def _responses_stream(events: list[dict[str, Any]]) -> Reply:
    """The final ``response.completed`` (or incomplete/failed) response carries usage and output."""
    final = None
    for event in events:
        if isinstance(event.get("response"), dict) and event.get("type") in (
                "response.completed", "response.incomplete", "response.failed",
                "response.created"):
            if final is None or event.get("type") != "response.created":
                final = event["response"]
    if final is None:
        return Reply(streamed=True, error="event stream has no response object",
                      protocol="openai-responses")
    reply = _reply_from_json(final)
    reply.streamed = True
    return reply
