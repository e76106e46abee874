"""Gateway profiles: the request the upstream model server received, built from the logged one.

Between the client and the model server sits a gateway that may rewrite the
request. Each profile here reproduces one rewrite exactly and returns the upstream
request in OpenAI Chat shape (``messages``, ``tools``), with every logged string
still wrapped in its marks and every logged object registered under its logged path
(`marks.Marker`), so the segment map survives the rewrite:

* ``passthrough`` -- the upstream got the request as logged. For an Anthropic body
  this means a hosted Claude model: the caller renders it in Anthropic's cache
  order (tools -> system -> messages, `anthropic_proxy_view`) through the chosen
  tokenizer as a proxy and marks the result approximate.
* ``anthropic-to-openai`` -- new-api's ``ClaudeToOpenAIRequest`` (service/convert.go,
  formats.md §2.4), including what its Go types do on the wire: system text blocks
  joined with no separator (``cache_control`` dropped); tools become
  ``{"type": "function", "function": {"description", "name", "parameters"}}`` --
  ``dto.FunctionRequest`` declares Description before Name, ``description`` is
  omitempty, and ``parameters`` is a Go map, so its keys arrive sorted;
  ``tool_use`` -> assistant ``tool_calls`` with ``arguments = json.Marshal(input)``
  (sorted keys, HTML escapes); an assistant message with tool calls loses its text
  blocks (``SetMediaContent`` only runs when there are no tool calls);
  ``tool_result`` -> a ``role: tool`` message emitted *before* the message it came
  from, non-string content marshalled from ``[]ClaudeMediaMessage``; ``image`` -> a
  ``data:`` URL; thinking blocks are dropped; a message left empty is dropped.
* ``hoist-system-messages`` -- system/developer messages after the first non-system
  message are removed from their place and appended, separated by a blank line, to
  the leading system message (created if absent). The separator is this project's
  assumption: gateways that hoist do not agree on one.

Marking happens first (`mark_body`): the logged body is copied, strings that reach
the prompt are wrapped, objects are registered. What-if transforms then edit the
marked copy (`render.whatif`), and the profile converts it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from prefixscope.prompt.jsontext import go_marshal, go_string
from prefixscope.prompt.marks import Marker, unmark
from prefixscope.prompt.values import RenderError

PROFILES = ("passthrough", "anthropic-to-openai", "hoist-system-messages")
_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
SYSTEM_ROLES = ("system", "developer")


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


# ------------------------------------------------------------------ marking


def mark_body(endpoint: str, body: dict[str, Any], marker: Marker) -> dict[str, Any]:
    """A marked, registered copy of the parts of `body` that reach the prompt."""
    if endpoint == "anthropic-messages":
        return _mark_anthropic(body, marker)
    if endpoint == "openai-responses":
        return _mark_responses(body, marker)
    return _mark_openai(body, marker)


def _wrap_at(marker: Marker, text: Any, path: str, kind: str) -> Any:
    return marker.wrap(text, marker.path_id(path, kind)) if isinstance(text, str) else text


def _mark_tools_anthropic(tools: list[Any], m: Marker) -> list[Any]:
    out = m.register([], m.path_id("tools", "tools"))
    for i, tool in enumerate(tools):
        path = f"tools[{i}]"
        if not isinstance(tool, dict):
            out.append(tool)
            continue
        pid = m.path_id(path, "tool")
        copy = m.register({}, pid)
        for k, v in tool.items():
            if k in ("name", "description") and isinstance(v, str):
                copy[k] = m.wrap(v, pid)
            else:
                copy[k] = copy_tree(v, child_path(path, k), "tool", m,
                                    levels=SCHEMA_LEVELS if k == "input_schema" else 1)
        out.append(copy)
    return out


def _mark_tools_openai(tools: list[Any], m: Marker) -> list[Any]:
    out = m.register([], m.path_id("tools", "tools"))
    for i, tool in enumerate(tools):
        path = f"tools[{i}]"
        if not isinstance(tool, dict):
            out.append(tool)
            continue
        copy = m.register({}, m.path_id(path, "tool"))
        for k, v in tool.items():
            if k == "function" and isinstance(v, dict):
                fpath = child_path(path, k)
                fid = m.path_id(fpath, "tool")
                fn = m.register({}, fid)
                for fk, fv in v.items():
                    if fk in ("name", "description") and isinstance(fv, str):
                        fn[fk] = m.wrap(fv, fid)
                    else:
                        fn[fk] = copy_tree(fv, child_path(fpath, fk), "tool", m,
                                           levels=SCHEMA_LEVELS if fk == "parameters" else 1)
                copy[k] = fn
            elif k in ("name", "description") and isinstance(v, str):  # Responses flat tools
                copy[k] = m.wrap(v, m.path_id(path, "tool"))
            else:
                copy[k] = copy_tree(v, child_path(path, k), "tool", m,
                                    levels=SCHEMA_LEVELS if k == "parameters" else 1)
        out.append(copy)
    return out


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
        out["tools"] = _mark_tools_anthropic(body["tools"], m)
    if isinstance(body.get("messages"), list):
        out["messages"] = _mark_messages(body["messages"], m, _mark_anthropic_message)
    return out


def _mark_messages(messages: list[Any], m: Marker, mark_one: Any) -> list[Any]:
    """The message list registered under ``messages``, each message marked by `mark_one`."""
    out = m.register([], m.path_id("messages", "message"))
    for i, message in enumerate(messages):
        out.append(mark_one(message, f"messages[{i}]", m))
    return out


def _mark_anthropic_message(message: Any, path: str, m: Marker) -> Any:
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
        out["tools"] = _mark_tools_openai(body["tools"], m)
    if isinstance(body.get("messages"), list):
        out["messages"] = _mark_messages(body["messages"], m, _mark_openai_message)
    return out


def _mark_openai_message(message: Any, path: str, m: Marker) -> Any:
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
        out["tools"] = _mark_tools_openai(body["tools"], m)
    items = body.get("input")
    if isinstance(items, str):
        out["input"] = _wrap_at(m, items, "input", "message")
    elif isinstance(items, list):
        out["input"] = m.register([], m.path_id("input", "message"))
        for i, item in enumerate(items):
            out["input"].append(_mark_responses_item(item, f"input[{i}]", m))
    return out


def _mark_responses_item(item: Any, path: str, m: Marker) -> Any:
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
    if itype in ("function_call_output", "custom_tool_call_output"):
        pid = m.path_id(path, "tool_result")
        copy = m.register(dict(item), pid)
        if isinstance(item.get("output"), str):
            copy["output"] = m.wrap(item["output"], pid)
        elif isinstance(item.get("output"), list):
            copy["output"] = _mark_parts(item["output"], child_path(path, "output"),
                                         "tool_result", m)
        return copy
    return _mark_openai_message(item, path, m)


# ------------------------------------------------------------------ profiles


def to_upstream(endpoint: str, marked: dict[str, Any], profile: str, marker: Marker, *,
                hoist: bool = True) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The upstream OpenAI Chat request (messages, tools) a gateway profile produces.

    Raises:
        RenderError: the profile does not apply to this endpoint.
    """
    if profile == "anthropic-to-openai":
        if endpoint != "anthropic-messages":
            raise RenderError(f"gateway anthropic-to-openai needs an anthropic-messages body, "
                              f"this request is {endpoint}")
        return claude_to_openai(marked, marker)
    if profile not in PROFILES:
        raise RenderError(f"unknown gateway profile {profile!r} (known: {', '.join(PROFILES)})")
    if endpoint == "anthropic-messages":
        raise RenderError(f"gateway {profile} keeps an anthropic-messages body as is; render it "
                          "with the anthropic proxy view")
    if endpoint == "openai-responses":
        messages, tools = responses_to_chat(marked, marker)
    else:
        messages = [m for m in marked.get("messages") or [] if isinstance(m, dict)]
        tools = marked.get("tools") if isinstance(marked.get("tools"), list) else None
    if profile == "hoist-system-messages" and hoist:
        messages = hoist_system_messages(messages, marker)
    return messages, tools


def hoist_system_messages(messages: list[dict[str, Any]], marker: Marker) -> list[dict[str, Any]]:
    """Move system/developer messages after the conversation started into the leading one."""
    lead = 0
    while lead < len(messages) and messages[lead].get("role") in SYSTEM_ROLES:
        lead += 1
    late = [m for m in messages[lead:] if m.get("role") in SYSTEM_ROLES]
    if not late:
        return messages
    rest = [m for m in messages[lead:] if m.get("role") not in SYSTEM_ROLES]
    texts = [_flat_text(m.get("content")) for m in late]
    if lead:
        first = dict(messages[0])
        pid = marker.path_of(messages[0])
        if pid is not None:
            marker.register(first, pid)
        first["content"] = "\n\n".join([_flat_text(messages[0].get("content")), *texts])
        return [first, *messages[1:lead], *rest]
    return [{"role": "system", "content": "\n\n".join(texts)}, *rest]


def _flat_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content
                         if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def responses_to_chat(marked: dict[str, Any], marker: Marker
                      ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """Responses API input as Chat messages (instructions first; calls grouped per turn)."""
    messages: list[dict[str, Any]] = []
    if isinstance(marked.get("instructions"), str) and marked["instructions"]:
        messages.append({"role": "system", "content": marked["instructions"]})
    items = marked.get("input")
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
        items = []
    for item in items or []:
        if not isinstance(item, dict):
            continue
        itype = item.get("type")
        if itype == "function_call":
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name", ""),
                                 "arguments": item.get("arguments", "")}}
            pid = marker.path_of(item)
            if pid is not None:
                marker.register(call, pid)
                marker.register(call["function"], pid)
            last = messages[-1] if messages else None
            if last and last.get("role") == "assistant" and last.get("_calls"):
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call],
                                 "_calls": True})
        elif itype == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"),
                             "content": item.get("output", "")})
        elif itype in (None, "message") and "role" in item:
            messages.append(item)
    for message in messages:
        message.pop("_calls", None)
    tools = None
    if isinstance(marked.get("tools"), list):
        tools = []
        for tool in marked["tools"]:
            if isinstance(tool, dict) and tool.get("type") == "function" and "function" not in tool:
                fn = {k: v for k, v in tool.items() if k != "type"}
                wrapper = {"type": "function", "function": fn}
                pid = marker.path_of(tool)
                if pid is not None:
                    marker.register(wrapper, pid)
                    marker.register(fn, pid)
                tools.append(wrapper)
            elif isinstance(tool, dict):
                tools.append(tool)
    return messages, tools


# ------------------------------------------------------------------ new-api ClaudeToOpenAIRequest


def claude_to_openai(marked: dict[str, Any], marker: Marker
                     ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """new-api ``ClaudeToOpenAIRequest`` (non-OpenRouter channel), as the upstream parses it."""
    tools = [_claude_tool(t, marker) for t in marked.get("tools") or [] if isinstance(t, dict)]
    messages: list[dict[str, Any]] = []
    system = marked.get("system")
    if isinstance(system, str) and unmark(system):
        messages.append(_registered({"role": "system", "content": system}, marker, system))
    elif isinstance(system, list) and system and all(isinstance(b, dict) for b in system):
        # ParseSystem() then `systemStr += *system.Text` for blocks that have text.
        joined = "".join(b["text"] for b in system if isinstance(b.get("text"), str))
        messages.append(_registered({"role": "system", "content": joined}, marker, system))
    for message in marked.get("messages") or []:
        if isinstance(message, dict):
            messages.extend(_claude_message(message, marked, marker))
    return messages, tools or None  # an empty `tools` is omitted on the wire (omitempty)


def _registered(new: Any, marker: Marker, origin: Any) -> Any:
    return marker.register_like(new, origin)


def _claude_tool(tool: dict[str, Any], marker: Marker) -> dict[str, Any]:
    fn: dict[str, Any] = {}
    description = tool.get("description")
    if isinstance(description, str) and description:
        fn["description"] = description
    fn["name"] = tool.get("name") if isinstance(tool.get("name"), str) else ""
    schema = tool.get("input_schema")
    fn["parameters"] = _go_roundtrip(schema, marker) if isinstance(schema, dict) else None
    _registered(fn, marker, tool)
    return _registered({"type": "function", "function": fn}, marker, tool)


def _go_roundtrip(value: Any, marker: Marker) -> Any:
    """`value` after Go decodes it into ``any`` and the upstream parses Go's JSON back.

    Object keys come back sorted and numbers as Go's float64 text reads; registered
    objects keep their paths (matched by key, as the structure is unchanged).
    """
    import json

    def copy(v: Any, origin: Any) -> Any:
        if isinstance(v, dict):
            out = {k: copy(v[k], origin.get(k) if isinstance(origin, dict) else None)
                   for k in sorted(v, key=lambda s: unmark(str(s)))}
            return _registered(out, marker, origin)
        if isinstance(v, list):
            items = [copy(x, origin[i] if isinstance(origin, list) and i < len(origin) else None)
                     for i, x in enumerate(v)]
            return _registered(items, marker, origin)
        if isinstance(v, bool) or v is None or isinstance(v, str):
            return v
        if isinstance(v, (int, float)):
            return json.loads(go_marshal(v))
        return v

    return copy(value, value)


def _claude_message(message: dict[str, Any], body: dict[str, Any], marker: Marker
                    ) -> list[dict[str, Any]]:
    role = message.get("role")
    content = message.get("content")
    out: dict[str, Any] = _registered({"role": role}, marker, message)
    if isinstance(content, str):
        out["content"] = content
        return [out]
    emitted: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        btype = block.get("type")
        if btype in ("text", "input_text"):
            part: dict[str, Any] = {"type": "text"}
            if isinstance(block.get("text"), str) and block["text"]:
                part["text"] = block["text"]
            if "cache_control" in block:
                # A json.RawMessage decoded from Any2Type's Marshal output: the value as a
                # Go map wrote it (keys sorted), and a JSON null is kept as "null".
                part["cache_control"] = _go_roundtrip(block["cache_control"], marker)
            parts.append(_registered(part, marker, block))
        elif btype == "image":
            source = block.get("source") if isinstance(block.get("source"), dict) else {}
            url = f"data:{source.get('media_type', '')};base64,{_sprint_s(source.get('data'))}"
            # dto.MessageImageUrl: Detail is omitempty, MimeType has no json tag.
            parts.append(_registered({"type": "image_url",
                                      "image_url": {"url": url, "MimeType": ""}},
                                     marker, block))
        elif btype == "tool_use":
            fn = _registered({"name": block.get("name", ""),
                              "arguments": _claude_arguments(block.get("input"))}, marker, block)
            call = {"id": block.get("id")} if block.get("id") else {}
            call.update({"type": "function", "function": fn})
            calls.append(_registered(call, marker, block))
            _remember_input_paths(fn, block, marker)
        elif btype == "tool_result":
            emitted.append(_claude_tool_result(block, body, marker))
    if calls:
        out["content"] = None
        out["tool_calls"] = calls
    elif parts:
        out["content"] = parts
    else:
        return emitted
    return [*emitted, out]


def _sprint_s(value: Any) -> str:
    """Go's ``fmt.Sprintf("%s", v)`` of the decoded ``source.data`` (an ``any``)."""
    if value is None:
        return "%!s(<nil>)"
    return unmark(value) if isinstance(value, str) else str(value)


def _claude_arguments(value: Any) -> str:
    """``toJSONString(input)``: Go's json.Marshal of the decoded input ("null" when absent)."""
    return go_marshal(_unmark_deep(value))


def _unmark_deep(value: Any) -> Any:
    if isinstance(value, str):
        return unmark(value)
    if isinstance(value, dict):
        return {k: _unmark_deep(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unmark_deep(v) for v in value]
    return value


def _remember_input_paths(fn: dict[str, Any], block: dict[str, Any], marker: Marker) -> None:
    # The serving engine parses `arguments` back into objects; `engine.parse_arguments`
    # registers them under this path (the logged tool_use's `input`).
    source = block.get("input")
    pid = marker.path_of(source) if isinstance(source, (dict, list)) else None
    if pid is not None:
        marker.set_arguments_origin(fn, pid)


def _claude_tool_result(block: dict[str, Any], body: dict[str, Any], marker: Marker
                        ) -> dict[str, Any]:
    tool_use_id = block.get("tool_use_id") or ""
    name = block.get("name") if isinstance(block.get("name"), str) and block.get("name") else ""
    if not name:
        name = _tool_name_for(tool_use_id, body)
    content = block.get("content")
    if isinstance(content, str):
        text = content
    else:
        text = _marshal_media(content, marker)
    out = {"role": "tool", "content": text, "name": name, "tool_call_id": tool_use_id}
    return _registered(out, marker, block)


def _tool_name_for(tool_use_id: str, body: dict[str, Any]) -> str:
    """``SearchToolNameByToolCallId``: the first content block anywhere with that id."""
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("id") == tool_use_id:
                name = block.get("name")
                return unmark(name) if isinstance(name, str) else ""
    return ""


# dto.ClaudeMediaMessage field order and how each field is written (omitempty everywhere;
# Text is a *string, so an empty text is still written).
_MEDIA_FIELDS: tuple[tuple[str, str], ...] = (
    ("type", "string"), ("text", "ptr"), ("model", "string"), ("source", "source"),
    ("usage", "any"), ("stop_reason", "ptr"), ("partial_json", "ptr"), ("role", "string"),
    ("thinking", "ptr"), ("signature", "string"), ("delta", "string"),
    ("cache_control", "raw"), ("id", "string"), ("name", "string"), ("input", "any"),
    ("content", "any"), ("tool_use_id", "string"),
)


def _marshal_media(content: Any, marker: Marker) -> str:
    """``common.Marshal(ParseMediaContent())`` of a non-string tool_result content."""
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        return "null"
    pieces = []
    for block in content:
        text = _marshal_media_block(block, marker)
        if text is None:
            return "null"  # Any2Type failed: Go logs nothing and marshals a nil slice
        pieces.append(text)
    pid = marker.path_of(content)
    opened, closed = (marker.open(pid), marker.close()) if pid is not None else ("", "")
    return opened + "[" + ",".join(pieces) + "]" + closed


def _marshal_media_block(block: dict[str, Any], marker: Marker) -> str | None:
    fields: list[str] = []
    for name, how in _MEDIA_FIELDS:
        if name not in block or (block[name] is None and how != "raw"):
            continue  # a null leaves Go's field nil or empty; a RawMessage keeps "null"
        value = block[name]
        if how in ("string", "ptr"):
            if not isinstance(value, str):
                return None
            if how == "string" and not unmark(value):
                continue
            fields.append(f"{go_string(name)}:{go_string(value)}")
        elif how == "source":
            if not isinstance(value, dict):
                return None
            fields.append(f'"source":{_marshal_source(value)}')
        elif how == "raw":
            # The RawMessage holds what Any2Type's Marshal wrote: keys sorted.
            fields.append(f"{go_string(name)}:{go_marshal(_unmark_deep(value))}")
        else:
            fields.append(f"{go_string(name)}:{go_marshal(_unmark_deep(value))}")
    body = "{" + ",".join(fields) + "}"
    pid = marker.path_of(block)
    if pid is None:
        return body
    return marker.open(pid) + body + marker.close()


def _marshal_source(source: dict[str, Any]) -> str:
    parts = [f'"type":{go_string(str(source.get("type", "")))}']
    if source.get("media_type"):
        parts.append(f'"media_type":{go_string(str(source["media_type"]))}')
    if source.get("data") is not None:
        parts.append(f'"data":{go_marshal(_unmark_deep(source["data"]))}')
    if source.get("url"):
        parts.append(f'"url":{go_string(str(source["url"]))}')
    return "{" + ",".join(parts) + "}"


# ------------------------------------------------------------------ hosted Anthropic (proxy)


def anthropic_proxy_view(marked: dict[str, Any], marker: Marker,
                         tool_text: Callable[[Any], str]
                         ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """An Anthropic body laid out in Anthropic's cache order for a proxy chat template.

    The tools (each as JSON, via `tool_text`) then the system blocks form the first
    system turn, so the proxy prompt is ordered tools -> system -> messages like
    Anthropic's cache. Tool calls keep the logged input (no gateway touched it);
    tool results become tool messages in place; thinking blocks are left out (Anthropic
    strips earlier turns' thinking from the prompt).
    """
    head: list[Any] = []
    for tool in marked.get("tools") or []:
        head.append({"type": "text", "text": tool_text(tool)})
    system = marked.get("system")
    if isinstance(system, str):
        head.append({"type": "text", "text": system})
    elif isinstance(system, list):
        for block in system:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                head.append({"type": "text", "text": block["text"]})
    messages: list[dict[str, Any]] = []
    if head:
        messages.append({"role": "system", "content": head})
    for message in marked.get("messages") or []:
        if isinstance(message, dict):
            messages.extend(_proxy_message(message, marker))
    return messages, None


def _proxy_message(message: dict[str, Any], marker: Marker) -> list[dict[str, Any]]:
    role = message.get("role")
    content = message.get("content")
    if isinstance(content, str):
        return [_registered({"role": role, "content": content}, marker, message)]
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []

    def flush() -> None:
        nonlocal parts, calls
        if parts or calls:
            msg: dict[str, Any] = {"role": role, "content": parts or None}
            if calls:
                msg["tool_calls"] = calls
            out.append(_registered(msg, marker, message))
        parts, calls = [], []

    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        btype = block.get("type")
        if btype in ("text", "input_text") and isinstance(block.get("text"), str):
            parts.append({"type": "text", "text": block["text"]})
        elif btype == "tool_use":
            fn = _registered({"name": block.get("name", ""), "arguments": block.get("input")},
                             marker, block)
            calls.append(_registered({"id": block.get("id"), "type": "function", "function": fn},
                                     marker, block))
        elif btype == "tool_result":
            flush()
            result = block.get("content")
            if isinstance(result, list):
                result = [p for p in result if isinstance(p, dict) and p.get("type") == "text"]
            out.append(_registered({"role": "tool", "tool_call_id": block.get("tool_use_id"),
                                    "content": result if result is not None else ""},
                                   marker, block))
    flush()
    return out
