"""The ``anthropic-to-openai`` gateway profile: new-api's ``ClaudeToOpenAIRequest``.

``anthropic-to-openai`` -- new-api's ``ClaudeToOpenAIRequest`` (service/convert.go,
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
"""

from __future__ import annotations

from typing import Any

from prefixscope.prompt.gateways.profile import GatewayProfile
from prefixscope.prompt.jsontext import go_marshal, go_string
from prefixscope.prompt.marks import Marker, unmark, unmark_value


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
            messages.extend(claude_message(message, marked, marker))
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


def claude_message(message: dict[str, Any], body: dict[str, Any], marker: Marker
                   ) -> list[dict[str, Any]]:
    """The OpenAI Chat messages new-api makes of one marked Anthropic message. `body`: the
    request whose messages a nameless ``tool_result`` looks its name up in (the marked
    body, or the body as logged: the lookup reads block ids, kept as logged by marking,
    and names without their marks)."""
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
            raw_source = block.get("source")
            source: dict[str, Any] = raw_source if isinstance(raw_source, dict) else {}
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
    return go_marshal(unmark_value(value))


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
            fields.append(f"{go_string(name)}:{go_marshal(unmark_value(value))}")
        else:
            fields.append(f"{go_string(name)}:{go_marshal(unmark_value(value))}")
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
        parts.append(f'"data":{go_marshal(unmark_value(source["data"]))}')
    if source.get("url"):
        parts.append(f'"url":{go_string(str(source["url"]))}')
    return "{" + ",".join(parts) + "}"


def convert(endpoint: str, marked: dict[str, Any], marker: Marker, *, hoist: bool = True
            ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    return claude_to_openai(marked, marker)


PROFILE = GatewayProfile(
    name="anthropic-to-openai",
    summary="new-api's Claude -> OpenAI Chat conversion (service/convert.go)",
    requires_endpoint="anthropic-messages",
    convert=convert,
)
