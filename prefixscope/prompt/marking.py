"""Marking: a copy of the logged body whose prompt-bound strings carry their path's marks.

Every string that reaches the prompt is wrapped in the marks of its logged path, and
every object is registered under its path (`marks.Marker`), so that after the gateway
conversion, the serving engine's normalization and the chat template, each character
of the rendered prompt can be traced back to where it was in the log.
"""

from __future__ import annotations

import re
from typing import Any

from prefixscope.prompt.jsontext import go_string
from prefixscope.prompt.marks import Marker
from prefixscope.prompt.values import SYSTEM_ROLES

_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def child_path(path: str, key: str | int) -> str:
    """JSON path of `key` under `path`: ``a.b``, ``a[3]``, ``a["odd key"]``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _IDENT_RE.match(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{go_string(key)}]"


SCHEMA_LEVELS = 3  # parameters -> properties -> each property (deeper inherits)
ARGUMENT_LEVELS = 2  # input/arguments -> each member


def copy_tree(value: Any, path: str, kind: str, marker: Marker, *, levels: int = 1,
              wrap_strings: bool = False) -> Any:
    """Copy of a JSON value whose objects, `levels` deep, are registered under their paths.

    Objects at the last level are registered as leaves and shared, not copied (their
    insides inherit their path); they must never be mutated. With `wrap_strings`,
    strings held directly by a registered (non-leaf) object are wrapped in its marks.
    """
    if not isinstance(value, (dict, list)):
        return value
    pid = marker.path_id(path, kind)
    if levels <= 1:
        return marker.register(value, pid, leaf=True)
    if isinstance(value, dict):
        out: Any = marker.register({}, pid)
        for k, v in value.items():
            if isinstance(v, str) and wrap_strings:
                out[k] = marker.wrap(v, pid)
            else:
                out[k] = copy_tree(v, child_path(path, k), kind, marker, levels=levels - 1,
                                   wrap_strings=wrap_strings)
        return out
    out = marker.register([], pid)
    for i, v in enumerate(value):
        if isinstance(v, str) and wrap_strings:
            out.append(marker.wrap(v, pid))
        else:
            out.append(copy_tree(v, child_path(path, i), kind, marker, levels=levels - 1,
                                 wrap_strings=wrap_strings))
    return out


def mark_body(endpoint: str, body: dict[str, Any], marker: Marker) -> dict[str, Any]:
    """A marked, registered copy of the parts of `body` that reach the prompt."""
    if endpoint == "anthropic-messages":
        return _mark_anthropic(body, marker)
    if endpoint == "openai-responses":
        return _mark_responses(body, marker)
    return _mark_openai(body, marker)


def _wrap_at(marker: Marker, text: Any, path: str, kind: str) -> Any:
    return marker.wrap(text, marker.path_id(path, kind)) if isinstance(text, str) else text


def _mark_tools(tools: list[Any], m: Marker) -> list[Any]:
    """Tool definitions of any protocol: Anthropic ``{name, description, input_schema}``,
    OpenAI Chat ``{type, function: {name, description, parameters}}``, Responses' flat
    ``{type, name, description, parameters}``."""
    out = m.register([], m.path_id("tools", "tools"))
    for i, tool in enumerate(tools):
        out.append(_mark_tool(tool, f"tools[{i}]", m) if isinstance(tool, dict) else tool)
    return out


def _mark_tool(tool: dict[str, Any], path: str, m: Marker) -> dict[str, Any]:
    pid = m.path_id(path, "tool")
    copy: dict[str, Any] = m.register({}, pid)
    for k, v in tool.items():
        if k == "function" and isinstance(v, dict):
            copy[k] = _mark_tool(v, child_path(path, k), m)
        elif k in ("name", "description") and isinstance(v, str):
            copy[k] = m.wrap(v, pid)
        else:
            schema = k in ("input_schema", "parameters")
            copy[k] = copy_tree(v, child_path(path, k), "tool", m,
                                levels=SCHEMA_LEVELS if schema else 1)
    return copy


def _block_kind(block: Any, default: str) -> str:
    kind = block.get("type") if isinstance(block, dict) else None
    return {"tool_use": "tool_call", "tool_result": "tool_result", "thinking": "reasoning",
            "redacted_thinking": "reasoning", "image": "image", "document": "document",
            "server_tool_use": "tool_call", "web_search_tool_result": "tool_result"}.get(
                kind or "", default)


def _mark_anthropic(body: dict[str, Any], m: Marker) -> dict[str, Any]:
    out = dict(body)
    system = body.get("system")
    if isinstance(system, str):
        out["system"] = _wrap_at(m, system, "system", "system")
    elif isinstance(system, list):
        blocks = m.register([], m.path_id("system", "system"))
        for i, block in enumerate(system):
            path = f"system[{i}]"
            pid = m.path_id(path, "system")
            if isinstance(block, dict):
                copy = m.register(dict(block), pid)
                if isinstance(block.get("text"), str):
                    copy["text"] = m.wrap(block["text"], pid)
                blocks.append(copy)
            else:
                blocks.append(_wrap_at(m, block, path, "system"))
        out["system"] = blocks
    if isinstance(body.get("tools"), list):
        out["tools"] = _mark_tools(body["tools"], m)
    if isinstance(body.get("messages"), list):
        out["messages"] = _mark_messages(body["messages"], m, mark_anthropic_message)
    return out


def _mark_messages(messages: list[Any], m: Marker, mark_one: Any) -> list[Any]:
    """The message list registered under ``messages``, each message marked by `mark_one`."""
    out = m.register([], m.path_id("messages", "message"))
    for i, message in enumerate(messages):
        out.append(mark_one(message, f"messages[{i}]", m))
    return out


def mark_anthropic_message(message: Any, path: str, m: Marker) -> Any:
    if not isinstance(message, dict):
        return message
    pid = m.path_id(path, "message")
    copy = m.register(dict(message), pid)
    content = message.get("content")
    if isinstance(content, str):
        copy["content"] = m.wrap(content, pid)
    elif isinstance(content, list):
        cpath = child_path(path, "content")
        blocks = m.register([], m.path_id(cpath, "message"))
        for j, block in enumerate(content):
            blocks.append(_mark_anthropic_block(block, child_path(cpath, j), m))
        copy["content"] = blocks
    return copy


def _mark_anthropic_block(block: Any, path: str, m: Marker) -> Any:
    if not isinstance(block, dict):
        return _wrap_at(m, block, path, "message")
    kind = _block_kind(block, "message")
    pid = m.path_id(path, kind)
    copy = m.register({}, pid)
    btype = block.get("type")
    for k, v in block.items():
        if isinstance(v, str) and (
                (k == "text" and btype in ("text", "input_text", None))
                or (k == "thinking" and btype == "thinking")
                or (k == "name" and btype in ("tool_use", "server_tool_use"))
                or (k == "content" and btype == "tool_result")):
            copy[k] = m.wrap(v, pid)
        elif k == "content" and btype == "tool_result" and isinstance(v, list):
            cpath = child_path(path, "content")
            inner = m.register([], m.path_id(cpath, kind))
            for n, item in enumerate(v):
                ipath = child_path(cpath, n)
                if isinstance(item, dict):
                    iid = m.path_id(ipath, kind)
                    icopy = m.register(dict(item), iid)
                    if isinstance(item.get("text"), str):
                        icopy["text"] = m.wrap(item["text"], iid)
                    inner.append(icopy)
                else:
                    inner.append(_wrap_at(m, item, ipath, kind))
            copy[k] = inner
        else:
            is_input = k == "input" and btype == "tool_use"
            copy[k] = copy_tree(v, child_path(path, k), kind, m,
                                levels=ARGUMENT_LEVELS if is_input else 1, wrap_strings=is_input)
    return copy


def _openai_kind(message: dict[str, Any]) -> str:
    role = message.get("role")
    if role in SYSTEM_ROLES:
        return "system"
    if role == "tool":
        return "tool_result"
    return "message"


def _mark_openai(body: dict[str, Any], m: Marker) -> dict[str, Any]:
    out = dict(body)
    if isinstance(body.get("tools"), list):
        out["tools"] = _mark_tools(body["tools"], m)
    if isinstance(body.get("messages"), list):
        out["messages"] = _mark_messages(body["messages"], m, mark_openai_message)
    return out


def mark_openai_message(message: Any, path: str, m: Marker) -> Any:
    if not isinstance(message, dict):
        return message
    kind = _openai_kind(message)
    pid = m.path_id(path, kind)
    copy = m.register(dict(message), pid)
    content = message.get("content")
    if isinstance(content, str):
        copy["content"] = m.wrap(content, pid)
    elif isinstance(content, list):
        copy["content"] = _mark_parts(content, child_path(path, "content"), kind, m)
    for key in ("reasoning", "reasoning_content", "thinking"):
        if isinstance(message.get(key), str):
            copy[key] = m.wrap(message[key], pid)
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        cpath = child_path(path, "tool_calls")
        out_calls = m.register([], m.path_id(cpath, "tool_call"))
        for k, call in enumerate(calls):
            out_calls.append(_mark_tool_call(call, child_path(cpath, k), m))
        copy["tool_calls"] = out_calls
    return copy


def _mark_parts(parts: list[Any], path: str, kind: str, m: Marker) -> list[Any]:
    out = m.register([], m.path_id(path, kind))
    for k, part in enumerate(parts):
        ppath = child_path(path, k)
        if isinstance(part, dict):
            pkind = "image" if part.get("type") in ("image_url", "input_image", "image") else kind
            pid = m.path_id(ppath, pkind)
            copy = m.register(dict(part), pid)
            for key in ("text", "refusal", "thinking"):
                if isinstance(part.get(key), str):
                    copy[key] = m.wrap(part[key], pid)
            out.append(copy)
        else:
            out.append(_wrap_at(m, part, ppath, kind))
    return out


def _mark_tool_call(call: Any, path: str, m: Marker) -> Any:
    if not isinstance(call, dict):
        return call
    copy = m.register(dict(call), m.path_id(path, "tool_call"))
    fn = call.get("function")
    if isinstance(fn, dict):
        fpath = child_path(path, "function")
        fid = m.path_id(fpath, "tool_call")
        fcopy = m.register(dict(fn), fid)
        if isinstance(fn.get("name"), str):
            fcopy["name"] = m.wrap(fn["name"], fid)
        args = fn.get("arguments")
        if isinstance(args, str):
            fcopy["arguments"] = m.wrap(args, fid)
        elif isinstance(args, (dict, list)):
            fcopy["arguments"] = copy_tree(args, child_path(fpath, "arguments"), "tool_call", m,
                                           levels=ARGUMENT_LEVELS, wrap_strings=True)
        copy["function"] = fcopy
    return copy


def _mark_responses(body: dict[str, Any], m: Marker) -> dict[str, Any]:
    out = dict(body)
    if isinstance(body.get("instructions"), str):
        out["instructions"] = _wrap_at(m, body["instructions"], "instructions", "system")
    if isinstance(body.get("tools"), list):
        out["tools"] = _mark_tools(body["tools"], m)
    items = body.get("input")
    if isinstance(items, str):
        out["input"] = _wrap_at(m, items, "input", "message")
    elif isinstance(items, list):
        out["input"] = m.register([], m.path_id("input", "message"))
        for i, item in enumerate(items):
            out["input"].append(mark_responses_item(item, f"input[{i}]", m))
    return out


def mark_responses_item(item: Any, path: str, m: Marker) -> Any:
    if not isinstance(item, dict):
        return item
    itype = item.get("type")
    if itype in ("function_call", "custom_tool_call"):
        pid = m.path_id(path, "tool_call")
        copy = m.register(dict(item), pid)
        for key in ("name", "arguments", "input"):
            if isinstance(item.get(key), str):
                copy[key] = m.wrap(item[key], pid)
        return copy
    if itype in ("local_shell_call", "web_search_call"):
        pid = m.path_id(path, "tool_call")
        copy = m.register(dict(item), pid)
        if isinstance(item.get("action"), dict):
            copy["action"] = copy_tree(item["action"], child_path(path, "action"), "tool_call",
                                       m, levels=ARGUMENT_LEVELS, wrap_strings=True)
        return copy
    if itype in ("function_call_output", "custom_tool_call_output"):
        pid = m.path_id(path, "tool_result")
        copy = m.register(dict(item), pid)
        if isinstance(item.get("output"), str):
            copy["output"] = m.wrap(item["output"], pid)
        elif isinstance(item.get("output"), list):
            copy["output"] = _mark_parts(item["output"], child_path(path, "output"),
                                         "tool_result", m)
        return copy
    return mark_openai_message(item, path, m)


