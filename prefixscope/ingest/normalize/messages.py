"""OpenTelemetry GenAI ``{role, parts}`` messages -> OpenAI Chat messages, one mapping for all.

The GenAI semantic conventions record prompts as ChatMessages (``role``, ``parts``,
optional ``name``; the JSON schemas ``gen-ai-input-messages.json`` /
``gen-ai-output-messages.json`` / ``gen-ai-system-instructions.json``). They reach
prefixscope in OTel spans (`formats.otel`) and in Langfuse observations whose
``input`` an OTel instrumentation wrote (`formats.langfuse`); the same message must
become the same request whichever way it came, so both call `chat_messages`.

The mapping is the inverse of what the conventions' own OpenAI examples record, with
the least change:

* ``text`` part ``{content}`` -> content part ``{"type": "text", "text"}``, one per part
  (part boundaries kept; a message's content is always the list of its parts);
  ``reasoning`` -> ``{"type": "reasoning", "text"}``;
* ``tool_call`` ``{id, name, arguments}`` -> an entry of ``tool_calls`` with the arguments
  as the JSON string OpenAI sends (a string as logged; an object serialized compactly,
  as the OpenAI API returns it; no arguments ``"{}"``);
* every ``tool_call_response`` ``{id, response}`` -> its own ``{"role": "tool",
  "tool_call_id", "content"}`` message, in part order and before the rest of the
  message: OpenAI Chat needs one tool message per call id, right after the assistant
  message that made the calls (an Anthropic-origin user message carries its
  ``tool_result`` blocks and its text in one message);
* ``blob`` / ``file`` / ``uri`` / server tool parts and unknown part types are kept as
  logged; a bare string part is a text part.
"""

from __future__ import annotations

from typing import Any

import orjson

from prefixscope.ingest.readers import BadRecord


def chat_messages(message: Any) -> list[dict[str, Any]]:
    """One GenAI ChatMessage as OpenAI Chat messages (tool responses become ``tool`` messages).

    A message that is already chat-shaped (``content`` and no ``parts``) is returned as is.

    Raises:
        BadRecord: not an object, or no ``parts`` list.
    """
    if not isinstance(message, dict):
        raise BadRecord(f"gen_ai message is not an object ({type(message).__name__})")
    parts = message.get("parts")
    if parts is None and "content" in message:
        return [dict(message)]
    if not isinstance(parts, list):
        raise BadRecord("gen_ai message has no parts list")
    content: list[dict[str, Any]] = []
    tool_calls: list[dict[str, Any]] = []
    tool_messages: list[dict[str, Any]] = []
    for part in parts:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "tool_call":
            tool_calls.append(tool_call(part))
        elif kind == "tool_call_response":
            tool_messages.append({"role": "tool", "tool_call_id": part.get("id"),
                                  "content": to_json_string(part.get("response"))})
        else:
            content.append(content_part(part))
    if tool_messages and not content and not tool_calls:
        return tool_messages
    chat: dict[str, Any] = {"role": message.get("role")}
    if message.get("name"):
        chat["name"] = message["name"]
    chat["content"] = content or None
    if tool_calls:
        chat["tool_calls"] = tool_calls
    return [*tool_messages, chat]


def content_part(part: Any) -> dict[str, Any]:
    """One non-tool part as an OpenAI content part."""
    if isinstance(part, str):
        return {"type": "text", "text": part}
    if not isinstance(part, dict):
        return {"type": "text", "text": to_json_string(part)}
    kind = part.get("type")
    if kind in ("text", "reasoning"):
        value = part.get("content")
        if value is None:
            value = part.get("text")  # instrumentations that write OpenAI's key
        return {"type": kind, "text": "" if value is None else to_json_string(value)}
    return dict(part)  # blob / file / uri / server tool parts: kept as logged


def tool_call(part: dict[str, Any]) -> dict[str, Any]:
    """A ``tool_call`` part (or OpenLLMetry's flat ``{id, name, arguments}``) as OpenAI sends it."""
    arguments = part.get("arguments")
    return {"id": part.get("id"), "type": "function",
            "function": {"name": part.get("name"),
                         "arguments": "{}" if arguments is None else to_json_string(arguments)}}


def to_json_string(value: Any) -> str:
    """A string as it is; anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()
