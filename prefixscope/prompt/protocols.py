"""Protocol views of a marked body that no gateway made: Responses API input as Chat
messages, and a hosted Anthropic body laid out in Anthropic's cache order for a proxy
chat template. Both keep marks and registrations, so segments survive."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prefixscope.prompt.marks import Marker


def responses_to_chat(marked: dict[str, Any], marker: Marker
                      ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """Responses API input as Chat messages (instructions first; calls grouped per turn).

    Every item a client sends back that has text becomes part of a message: function
    and custom (freeform) tool calls, local shell and web search calls (their `action`
    as the call's arguments) are assistant tool calls; their outputs are tool messages.
    A custom call keeps its raw `input` (``type: "custom"``: never parsed as JSON).
    Items whose content the log cannot show -- `reasoning` (encrypted), `compaction`
    (encrypted) -- are left out; the client that logged them says so (e.g. the codex
    format's `metadata.unrebuilt`).
    """
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
        call = _call_of(item, itype, marker)
        if call is not None:
            last = messages[-1] if messages else None
            if last and last.get("role") == "assistant" and last.get("_calls"):
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call],
                                 "_calls": True})
        elif itype in ("function_call_output", "custom_tool_call_output"):
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


_ACTION_CALLS = {"local_shell_call": "local_shell", "web_search_call": "web_search"}


def _call_of(item: dict[str, Any], itype: Any, marker: Marker) -> dict[str, Any] | None:
    """The Chat tool call a Responses call item stands for (None for any other item)."""
    if itype == "function_call":
        call = {"id": item.get("call_id"), "type": "function",
                "function": {"name": item.get("name", ""),
                             "arguments": item.get("arguments", "")}}
    elif itype == "custom_tool_call":
        call = {"id": item.get("call_id"), "type": "custom",
                "function": {"name": item.get("name", ""), "arguments": item.get("input", "")}}
    elif itype in _ACTION_CALLS:
        action = item.get("action")
        call = {"id": item.get("call_id") or item.get("id"), "type": "function",
                "function": {"name": _ACTION_CALLS[itype],
                             "arguments": action if isinstance(action, dict) else {}}}
    else:
        return None
    pid = marker.path_of(item)
    if pid is not None:
        marker.register(call, pid)
        marker.register(call["function"], pid)
    return call


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
            messages.extend(proxy_message(message, marker))
    return messages, None


def proxy_message(message: dict[str, Any], marker: Marker) -> list[dict[str, Any]]:
    role = message.get("role")
    content = message.get("content")
    if isinstance(content, str):
        return [marker.register_like({"role": role, "content": content}, message)]
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []

    def flush() -> None:
        nonlocal parts, calls
        if parts or calls:
            msg: dict[str, Any] = {"role": role, "content": parts or None}
            if calls:
                msg["tool_calls"] = calls
            out.append(marker.register_like(msg, message))
        parts, calls = [], []

    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        btype = block.get("type")
        if btype in ("text", "input_text") and isinstance(block.get("text"), str):
            parts.append({"type": "text", "text": block["text"]})
        elif btype == "tool_use":
            fn = marker.register_like(
                {"name": block.get("name", ""), "arguments": block.get("input")}, block)
            calls.append(marker.register_like(
                {"id": block.get("id"), "type": "function", "function": fn}, block))
        elif btype == "tool_result":
            flush()
            result = block.get("content")
            if isinstance(result, list):
                result = [p for p in result if isinstance(p, dict) and p.get("type") == "text"]
            out.append(marker.register_like(
                {"role": "tool", "tool_call_id": block.get("tool_use_id"),
                 "content": result if result is not None else ""}, block))
    flush()
    return out
