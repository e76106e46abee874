"""What the serving engine does to an OpenAI Chat request before the chat template sees it.

The template does not receive the request's JSON: vLLM's OpenAI server first
normalizes it, and that changes the prompt. This module reproduces vLLM's steps
(``vllm/entrypoints/chat_utils.py``: ``_parse_chat_message_content``,
``_parse_chat_message_content_parts``, ``_postprocess_messages``; and
``serving_chat``'s ``tool_dicts = [tool.model_dump() for tool in request.tools]``):

* content is a string for templates that print ``message.content`` ("string"
  content format): text parts (``text``, ``input_text``, ``output_text``,
  ``refusal``, ``thinking``) are joined with ``"\\n"``; a missing content becomes
  ``""``. Templates that loop over ``message.content`` ("openai" format) get a list
  of ``{"type": "text", "text": ...}`` dicts. Image/audio parts are not text: they
  are left out (a multimodal model would splice its own placeholder tokens);
* only ``role``, ``content``, ``tool_calls`` (assistant), ``reasoning`` (assistant;
  copied to ``reasoning_content``), ``tool_call_id`` (tool), ``name`` and
  ``tools`` (developer) survive; other keys (``reasoning_content`` as sent, ids,
  ``cache_control``) are dropped;
* tool-call ``arguments`` strings are parsed with ``json.loads`` (invalid JSON
  becomes ``{}``), except a custom (freeform) tool call's input (``type: "custom"``,
  from a Responses ``custom_tool_call``), which is text; an empty ``tool_calls`` list
  is removed;
* tools are re-built as pydantic dumps: ``{"type", "function": {"name",
  "description", "parameters", <extra keys>}}`` -- so ``description`` is always
  present (``None`` when absent) and the key order is the model's, not the client's;
* transformers then copies ``reasoning`` to ``thinking``/``reasoning_content``
  (``_alias_reasoning_fields``).

Objects created here are registered under the logged paths of the objects they
stand for, and parsed arguments under ``<function path>.arguments`` (or the logged
``tool_use.input`` for Anthropic bodies), so attribution survives.
"""

from __future__ import annotations

import json
import re
from typing import Any

from prefixscope.prompt.marking import ARGUMENT_LEVELS, child_path, copy_tree
from prefixscope.prompt.marks import Marker, unmark

_TEXT_PARTS = {"text": "text", "input_text": "text", "output_text": "text",
               "refusal": "refusal", "thinking": "thinking"}
# vLLM decides "openai" content format when the template loops over message content.
_CONTENT_LOOP_RE = re.compile(
    r"for\s+\w+\s+in\s+\w+(?:\.content|\[\s*['\"]content['\"]\s*\])")
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def content_format(template: str) -> str:
    """``"openai"`` when the template iterates over message content, else ``"string"``."""
    return "openai" if _CONTENT_LOOP_RE.search(template) else "string"


def conversation(messages: list[dict[str, Any]], marker: Marker, fmt: str) -> list[dict[str, Any]]:
    """The messages as vLLM hands them to the template (then transformers' reasoning aliases)."""
    out = [_message(m, marker, fmt) for m in messages]
    for message in out:
        _parse_arguments(message, marker)
    return [_alias_reasoning(m, marker) for m in out]


def _like(new: Any, old: Any, marker: Marker) -> Any:
    return marker.register_like(new, old)


def _texts(content: Any) -> list[str]:
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    texts: list[str] = []
    for part in content if isinstance(content, list) else []:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict):
            key = _TEXT_PARTS.get(part.get("type") or "")
            if key is not None and isinstance(part.get(key), str):
                texts.append(part[key])
    return texts


def _message(message: dict[str, Any], marker: Marker, fmt: str) -> dict[str, Any]:
    role = message.get("role")
    texts = _texts(message.get("content"))
    out: dict[str, Any] = {"role": role}
    if fmt == "openai":
        out["content"] = [{"type": "text", "text": t} for t in texts]
    else:
        out["content"] = "\n".join(texts)
    _like(out, message, marker)
    if role == "assistant":
        calls = message.get("tool_calls")
        if calls is not None:
            out["tool_calls"] = list(calls) if isinstance(calls, list) else calls
        if message.get("reasoning") is not None:
            out["reasoning"] = message["reasoning"]
            out["reasoning_content"] = message["reasoning"]
    elif role == "tool" and "tool_call_id" in message:
        out["tool_call_id"] = message["tool_call_id"]
    if isinstance(message.get("name"), str):
        out["name"] = message["name"]
    if role == "developer":
        out["tools"] = message.get("tools")
    return out


def _parse_arguments(message: dict[str, Any], marker: Marker) -> None:
    calls = message.get("tool_calls")
    if message.get("role") != "assistant" or not isinstance(calls, list):
        return
    if not calls:
        message.pop("tool_calls")
        return
    parsed_calls = []
    for call in calls:
        if not isinstance(call, dict) or not isinstance(call.get("function"), dict) \
                or call.get("type") == "custom":  # a freeform call's input is text, not JSON
            parsed_calls.append(call)
            continue
        fn = call["function"]
        new_fn = _like(dict(fn), fn, marker)
        args = fn.get("arguments")
        if isinstance(args, str):
            try:
                value = json.loads(unmark(args))
            except json.JSONDecodeError:
                value = {}
            new_fn["arguments"] = _register_arguments(value, fn, marker)
        elif not isinstance(args, (dict, list)):
            new_fn["arguments"] = {}
        parsed_calls.append(_like({**call, "function": new_fn}, call, marker))
    message["tool_calls"] = parsed_calls


def _register_arguments(value: Any, fn: dict[str, Any], marker: Marker) -> Any:
    origin = marker.arguments_origin(fn)
    fid = marker.path_of(fn)
    if origin is not None:
        path = marker.paths[origin]
    elif fid is not None:
        path = child_path(marker.paths[fid], "arguments")
    else:
        return value
    return copy_tree(value, path, "tool_call", marker, levels=ARGUMENT_LEVELS, wrap_strings=True)


def _alias_reasoning(message: dict[str, Any], marker: Marker) -> dict[str, Any]:
    reasoning = next((message[k] for k in _REASONING_FIELDS if message.get(k) is not None), None)
    if reasoning is None:
        return message
    return _like({"thinking": reasoning, **message, "reasoning_content": reasoning},
                 message, marker)


def tool_dicts(tools: list[Any] | None, marker: Marker) -> list[dict[str, Any]] | None:
    """Tools as vLLM's ``ChatCompletionToolsParam.model_dump()`` gives them to the template."""
    if tools is None:
        return None
    out = []
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        fn = tool.get("function")
        if not isinstance(fn, dict):
            out.append(tool)
            continue
        dumped_fn = {"name": fn.get("name"), "description": fn.get("description"),
                     "parameters": fn.get("parameters")}
        dumped_fn.update({k: v for k, v in fn.items() if k not in dumped_fn})
        dumped = {"type": tool.get("type", "function"), "function": _like(dumped_fn, fn, marker)}
        dumped.update({k: v for k, v in tool.items() if k not in dumped})
        out.append(_like(dumped, tool, marker))
    return out
