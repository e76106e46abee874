"""The ``anthropic-to-openai`` gateway profile against an independent model of new-api.

The oracle below is written from new-api's Go source, not from prefixscope: it
models what ``encoding/json`` does to new-api's DTOs and transcribes the conversion
statement by statement. It imports nothing from ``prefixscope``. Sources (read at
QuantumNous/new-api ``service/convert.go`` @ 00ff1beee3f9, the commit formats.md §2.4
cites; the DTOs, ``common/json.go`` and ``common/utils.go`` from a current copy whose
``ClaudeToOpenAIRequest`` is identical to that commit's):

* ``service/convert.go`` -- ``ClaudeToOpenAIRequest`` (the conversion; non-OpenRouter
  channel), ``toJSONString`` (``encoding/json.Marshal``, ``"{}"`` on error);
* ``dto/claude.go`` -- ``ClaudeRequest``, ``ClaudeMessage``, ``ClaudeMediaMessage``,
  ``ClaudeMessageSource``, ``Tool``, ``ParseSystem``, ``ParseContent``,
  ``ParseMediaContent``, ``SearchToolNameByToolCallId``;
* ``dto/openai_request.go`` -- ``Message`` (+ ``SetStringContent``,
  ``SetMediaContent``, ``SetToolCalls``, ``ParseContent``), ``MediaContent``,
  ``MessageImageUrl`` (its ``MimeType`` field has no json tag, so Go writes it as
  ``"MimeType"``), ``ToolCallRequest``, ``FunctionRequest``, ``GeneralOpenAIRequest``;
* ``common/json.go`` (``Marshal``/``Unmarshal`` are ``encoding/json``),
  ``common/utils.go`` (``Any2Type``: ``Marshal`` then ``Unmarshal`` into the type,
  the zero value on any error);
* Go's ``encoding/json`` (go 1.25 per go.mod): map keys sorted, HTML escaping on,
  ``\\b``/``\\f`` short escapes, float64 numbers, ``omitempty`` rules, ``RawMessage``
  kept as the bytes it was decoded from (here always ``Marshal`` output: sorted,
  compact), field-name matching exact first, then case-insensitive.

The request body new-api reads is decoded by ``encoding/json`` into
``dto.ClaudeRequest`` (``common.UnmarshalBodyReusable``); the converted
``GeneralOpenAIRequest`` is written with ``common.Marshal``. The golden files hold the
prompt-bearing part of that body -- ``{"messages": [...], "tools": [...]}`` in the
struct's field order -- as the oracle writes it. ``model``, ``max_tokens``, ``stream``
and the other scalar members are left out: prefixscope does not model them. (Some
new-api versions then round-trip the whole body through a Go map in
``RemoveDisabledFields``, sorting every key; newer ones skip that when there is no
field to remove. Either way the upstream parses the same values, and vLLM re-dumps
tools in its own key order, so neither changes the prompt; not modelled.)

prefixscope exposes the conversion as ``gateway.to_upstream(endpoint, mark_body(...),
"anthropic-to-openai", marker)`` -> ``(messages, tools)``, the request as the upstream
parsed it. Its side is written here in its own key order with Go's string and number
encoding, so the byte comparison checks key order, omitted keys and every string
(tool-call ``arguments`` and tool-result ``content`` are JSON text made by the gateway).

Regenerate the goldens from the oracle (never from prefixscope; the import path is
only there because this module imports prefixscope at its top)::

    PYTHONPATH=. python tests/test_oracle_gateway.py --regenerate
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from prefixscope.prompt.gateways import to_upstream
from prefixscope.prompt.marking import mark_body
from prefixscope.prompt.marks import Marker, unmark_value

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "gateway"
LANGFUSE = ROOT / "sample_logs" / "langfuse-claude-code.events_full.jsonl"
CAPTURE = ROOT / "tests" / "fixtures" / "raw" / "claude_code_capture.jsonl"

# ======================================================================================
# The oracle: Go's encoding/json and new-api's DTOs, modelled. It uses nothing from
# prefixscope (the two imports above serve only the "prefixscope's side" section).
# ======================================================================================


class GoError(Exception):
    """json.Unmarshal reported an error (UnmarshalTypeError)."""


class NotModelled(Exception):
    """An input this oracle does not model (kept out of the comparisons)."""


class _Nil:
    """A nil interface, pointer, slice or map (omitted by omitempty where Go omits it)."""

    def __repr__(self) -> str:
        return "nil"


NIL = _Nil()


@dataclass(frozen=True)
class TypedNil:
    """A nil map stored in an ``any`` field: not a nil interface, so written as null."""


@dataclass(frozen=True)
class Raw:
    """A json.RawMessage: JSON text re-emitted as is (Go compacts and HTML-escapes it)."""

    text: str


@dataclass
class Struct:
    """A Go struct value: (json name, kind, value) in declaration order.

    kinds: ``S`` string, ``s`` string omitempty, ``p`` pointer omitempty (NIL = nil),
    ``A`` any, ``a`` any omitempty (NIL = nil interface), ``r`` RawMessage omitempty,
    ``l`` slice omitempty, ``o`` struct (never omitted).
    """

    fields: list[tuple[str, str, Any]]


_SHORT = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b",
          "\f": "\\f", "<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
          "\u2028": "\\u2028", "\u2029": "\\u2029"}


def go_str(text: str) -> str:
    """encoding/json appendString with escapeHTML (json.Marshal)."""
    out = ['"']
    for ch in text:
        if ch in _SHORT:
            out.append(_SHORT[ch])
        elif ord(ch) < 0x20:
            out.append(f"\\u00{ord(ch):02x}")
        elif 0xD800 <= ord(ch) <= 0xDFFF:
            out.append("\ufffd")  # not valid UTF-8: Go writes U+FFFD
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def go_float(f: float) -> str:
    """encoding/json floatEncoder for float64: 'f' or, far from 1, 'e' with e-07 -> e-7."""
    if math.isinf(f) or math.isnan(f):
        raise NotModelled("json: unsupported value")
    if f != 0 and (abs(f) < 1e-6 or abs(f) >= 1e21):
        text = np.format_float_scientific(f, unique=True, trim="-", exp_digits=2)
        mantissa, exp = text.split("e")
        if exp.startswith("-0") and len(exp) == 3:
            exp = "-" + exp[2]
        return f"{mantissa}e{exp}"
    return np.format_float_positional(f, unique=True, trim="-")


def marshal(v: Any) -> str:
    """json.Marshal of a modelled Go value (dicts are Go maps: keys sorted)."""
    if v is NIL or v is None or isinstance(v, TypedNil):
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, (int, float)):
        return go_float(float(v))
    if isinstance(v, str):
        return go_str(v)
    if isinstance(v, Raw):
        return compact(v.text)
    if isinstance(v, list):
        return "[" + ",".join(marshal(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(go_str(k) + ":" + marshal(v[k]) for k in sorted(v)) + "}"
    if isinstance(v, Struct):
        parts = []
        for name, kind, value in v.fields:
            if kind == "s" and value == "":
                continue
            if kind in ("p", "a") and value is NIL:
                continue
            if kind == "r" and (value is NIL or not value.text):
                continue
            if kind == "l" and (value is NIL or not value):
                continue
            parts.append(go_str(name) + ":" + marshal(value))
        return "{" + ",".join(parts) + "}"
    raise NotModelled(f"cannot marshal {type(v).__name__}")


@dataclass(frozen=True)
class _Literal:
    text: str


def compact(text: str) -> str:
    """json.Compact with HTML escaping: same members in the same order, numbers verbatim."""
    def emit(v: Any) -> str:
        if isinstance(v, _Literal):
            return v.text
        if isinstance(v, list) and v and isinstance(v[0], tuple):
            return "{" + ",".join(go_str(k) + ":" + emit(x) for k, x in v) + "}"
        if isinstance(v, list):
            return "[" + ",".join(emit(x) for x in v) + "]"
        if isinstance(v, _Object):
            return "{}"
        return marshal(v)

    class _Object(list):
        pass

    def pairs(items: list[tuple[str, Any]]) -> Any:
        return items if items else _Object()

    return emit(json.loads(text, object_pairs_hook=pairs, parse_int=_Literal,
                           parse_float=_Literal))


def go_decode(text: str) -> Any:
    """json.Unmarshal into ``any``: objects become maps, every number a float64."""
    def bad_constant(name: str) -> Any:
        raise GoError(f"invalid character in {name}")
    return json.loads(text, parse_int=float, parse_float=float, parse_constant=bad_constant)


# ---- json.Unmarshal into new-api's struct types (from a value decoded into ``any``) ----


def _fields(obj: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """JSON members assigned to struct fields: exact name first, else case-insensitive.

    Members are visited in the order Go reads them; in ``Any2Type`` that is the sorted
    order ``Marshal`` wrote them in, so the last of two case variants wins.
    """
    out: dict[str, Any] = {}
    for key in sorted(obj):
        field = key if key in names else next((n for n in names if n.lower() == key.lower()
                                               and key.isascii()), None)
        if field is not None:
            out[field] = obj[key]
    return out


def _string(v: Any) -> str:
    if v is None:
        return ""  # null leaves a string field untouched
    if not isinstance(v, str):
        raise GoError("cannot unmarshal into string")
    return v


def _ptr_string(v: Any) -> Any:
    if v is None:
        return NIL
    if not isinstance(v, str):
        raise GoError("cannot unmarshal into *string")
    return v


def _any(v: Any) -> Any:
    return NIL if v is None else v


@dataclass
class Source:  # dto.ClaudeMessageSource
    type: str
    media_type: str
    data: Any
    url: str


@dataclass
class Media:  # dto.ClaudeMediaMessage (the fields the conversion reads or re-marshals)
    type: str = ""
    text: Any = NIL
    model: str = ""
    source: Any = NIL
    stop_reason: Any = NIL
    partial_json: Any = NIL
    role: str = ""
    thinking: Any = NIL
    signature: str = ""
    delta: str = ""
    cache_control: Any = NIL
    id: str = ""
    name: str = ""
    input: Any = NIL
    content: Any = NIL
    tool_use_id: str = ""

    def go_struct(self) -> Struct:
        src = NIL
        if isinstance(self.source, Source):
            src = Struct([("type", "S", self.source.type), ("media_type", "s",
                          self.source.media_type), ("data", "a", self.source.data),
                          ("url", "s", self.source.url)])
        return Struct([
            ("type", "s", self.type), ("text", "p", self.text), ("model", "s", self.model),
            ("source", "p", src), ("usage", "p", NIL), ("stop_reason", "p", self.stop_reason),
            ("partial_json", "p", self.partial_json), ("role", "s", self.role),
            ("thinking", "p", self.thinking), ("signature", "s", self.signature),
            ("delta", "s", self.delta), ("cache_control", "r", self.cache_control),
            ("id", "s", self.id), ("name", "s", self.name), ("input", "a", self.input),
            ("content", "a", self.content), ("tool_use_id", "s", self.tool_use_id)])


_MEDIA_NAMES = ("type", "text", "model", "source", "usage", "stop_reason", "partial_json",
                "role", "thinking", "signature", "delta", "cache_control", "id", "name",
                "input", "content", "tool_use_id")


def _media(v: Any) -> Media:
    if v is None:
        return Media()
    if not isinstance(v, dict):
        raise GoError("cannot unmarshal into ClaudeMediaMessage")
    f = _fields(v, _MEDIA_NAMES)
    m = Media()
    for name in ("type", "model", "role", "signature", "delta", "id", "name", "tool_use_id"):
        if name in f:
            setattr(m, name, _string(f[name]))
    for name in ("text", "stop_reason", "partial_json", "thinking"):
        if name in f:
            setattr(m, name, _ptr_string(f[name]))
    for name in ("input", "content"):
        if name in f:
            setattr(m, name, _any(f[name]))
    if "cache_control" in f:  # RawMessage: the bytes Marshal wrote for the value
        m.cache_control = Raw(marshal(f["cache_control"]))
    if f.get("usage") is not None:
        raise NotModelled("usage inside a content block")
    if "source" in f and f["source"] is not None:
        s = f["source"]
        if not isinstance(s, dict):
            raise GoError("cannot unmarshal into ClaudeMessageSource")
        sf = _fields(s, ("type", "media_type", "data", "url"))
        m.source = Source(_string(sf.get("type")), _string(sf.get("media_type")),
                          _any(sf.get("data")), _string(sf.get("url")))
    return m


def any2type_media(value: Any) -> list[Media]:
    """``common.Any2Type[[]dto.ClaudeMediaMessage]``: raises GoError like Go's err."""
    if value is NIL or value is None:
        return []  # "null" -> nil slice, no error
    if not isinstance(value, list):
        raise GoError("cannot unmarshal into []ClaudeMediaMessage")
    return [_media(x) for x in value]


def any2type_media_or_nil(value: Any) -> list[Media] | _Nil:
    """The same where the error is dropped: the zero value (a nil slice) on error."""
    if value is NIL or value is None:
        return NIL
    try:
        return any2type_media(value)
    except GoError:
        return NIL


@dataclass
class Tool:  # dto.Tool
    name: str
    description: str
    input_schema: Any  # dict, or TypedNil for a nil map


def any2type_tools(value: Any) -> list[Tool]:
    """``common.Any2Type[[]dto.Tool](claudeRequest.Tools)``, error dropped (nil slice)."""
    if value is NIL or value is None or not isinstance(value, list):
        return []
    tools = []
    for item in value:
        if item is None:
            tools.append(Tool("", "", TypedNil()))
            continue
        if not isinstance(item, dict):
            return []
        f = _fields(item, ("name", "description", "input_schema"))
        try:
            name, description = _string(f.get("name")), _string(f.get("description"))
        except GoError:
            return []
        schema = f.get("input_schema")
        if schema is None:
            schema = TypedNil()
        elif not isinstance(schema, dict):
            return []
        tools.append(Tool(name, description, schema))
    return tools


@dataclass
class ClaudeRequest:  # dto.ClaudeRequest, the members the conversion reads
    system: Any
    messages: list[tuple[str, Any]]  # (role, content)
    tools: Any


def decode_request(raw: str) -> ClaudeRequest:
    """``common.UnmarshalBodyReusable`` into dto.ClaudeRequest (an error rejects it)."""
    body = go_decode(raw)
    if not isinstance(body, dict):
        raise GoError("body is not an object")
    names = ("system", "messages", "tools")
    f = {k: body[k] for k in body if k in names}  # top level: keys as sent, exact names
    messages = []
    raw_messages = f.get("messages")
    if raw_messages is not None:
        if not isinstance(raw_messages, list):
            raise GoError("messages")
        for item in raw_messages:
            if item is None:
                messages.append(("", NIL))
                continue
            if not isinstance(item, dict):
                raise GoError("message")
            mf = _fields(item, ("role", "content"))
            messages.append((_string(mf.get("role")), _any(mf.get("content"))))
    return ClaudeRequest(_any(f.get("system")), messages, _any(f.get("tools")))


def sprintf_s(value: Any) -> str:
    """fmt's %s of an ``any`` (only the cases the oracle models)."""
    if isinstance(value, str):
        return value
    if value is NIL:
        return "%!s(<nil>)"
    raise NotModelled("image data that is not a string")


def message(role: str, content: Any = NIL, *, name: Any = NIL, tool_calls: Any = NIL,
            tool_call_id: str = "") -> Struct:
    """dto.Message (field order and omitempty as declared)."""
    return Struct([("role", "S", role), ("content", "A", content), ("name", "p", name),
                   ("prefix", "p", NIL), ("reasoning_content", "p", NIL),
                   ("reasoning", "p", NIL), ("tool_calls", "r", tool_calls),
                   ("tool_call_id", "s", tool_call_id)])


def media_content(type_: str, *, text: str = "", image_url: Any = NIL,
                  cache_control: Any = NIL) -> Struct:
    """dto.MediaContent."""
    return Struct([("type", "S", type_), ("text", "s", text), ("image_url", "a", image_url),
                   ("input_audio", "a", NIL), ("file", "a", NIL), ("video_url", "a", NIL),
                   ("cache_control", "r", cache_control)])


def tool_call_request(id_: str, function: Struct) -> Struct:
    """dto.ToolCallRequest."""
    return Struct([("id", "s", id_), ("type", "S", "function"), ("function", "o", function),
                   ("custom", "r", NIL)])


def function_request(name: str, *, description: str = "", parameters: Any = NIL,
                     arguments: str = "") -> Struct:
    """dto.FunctionRequest."""
    return Struct([("description", "s", description), ("name", "S", name),
                   ("parameters", "a", parameters), ("arguments", "s", arguments)])


def search_tool_name(req: ClaudeRequest, tool_call_id: str) -> str:
    """``ClaudeRequest.SearchToolNameByToolCallId``."""
    for _, content in req.messages:
        parsed = any2type_media_or_nil(content)
        for media in parsed if isinstance(parsed, list) else []:
            if media.id == tool_call_id:
                return media.name
    return ""


def claude_to_openai(raw: str) -> str:
    """The prompt-bearing part of new-api's converted request body, as Go writes it."""
    req = decode_request(raw)
    tools = [tool_call_request("", function_request(t.name, description=t.description,
                                                    parameters=t.input_schema))
             for t in any2type_tools(req.tools)]
    out: list[Struct] = []
    if req.system is not NIL:
        if isinstance(req.system, str) and req.system != "":
            out.append(message("system", req.system))
        else:
            systems = any2type_media_or_nil(req.system)
            if isinstance(systems, list) and systems:
                out.append(message("system", "".join(s.text for s in systems
                                                     if s.text is not NIL)))
    for role, content in req.messages:
        msg_content: Any = NIL
        calls: list[Struct] = []
        if isinstance(content, str):
            msg_content = content
        else:
            media_messages = []
            for media in any2type_media(content):  # ParseContent's error aborts the request
                if media.type in ("text", "input_text"):
                    text = media.text if media.text is not NIL else ""
                    media_messages.append(media_content("text", text=text,
                                                        cache_control=media.cache_control))
                elif media.type == "image":
                    if not isinstance(media.source, Source):
                        raise NotModelled("nil Source: Go panics")
                    url = f"data:{media.source.media_type};base64,{sprintf_s(media.source.data)}"
                    image = Struct([("url", "S", url), ("detail", "s", ""),
                                    ("MimeType", "S", "")])
                    media_messages.append(media_content("image_url", image_url=image))
                elif media.type == "tool_use":
                    calls.append(tool_call_request(media.id, function_request(
                        media.name, arguments=marshal(media.input))))
                elif media.type == "tool_result":
                    name = media.name or search_tool_name(req, media.tool_use_id)
                    if isinstance(media.content, str):
                        text = media.content
                    else:
                        parsed = any2type_media_or_nil(media.content)
                        text = marshal([m.go_struct() for m in parsed]
                                       if isinstance(parsed, list) else NIL)
                    out.append(message("tool", text, name=name,
                                       tool_call_id=media.tool_use_id))
            if calls:
                pass  # SetMediaContent only runs without tool calls
            elif media_messages:
                msg_content = media_messages
        # len(ParseContent()) > 0 || len(ToolCalls) > 0
        if isinstance(msg_content, (str, list)) or calls:
            out.append(message(role, msg_content,
                               tool_calls=Raw(marshal(calls)) if calls else NIL))
    return marshal(Struct([("messages", "l", out), ("tools", "l", tools)]))


def regenerate() -> None:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name, raw in real_requests().items():
        (GOLDEN / f"{name}.json").write_text(claude_to_openai(raw), encoding="utf-8")
        print(f"wrote {GOLDEN / f'{name}.json'}")


# ======================================================================================
# Inputs: real Claude Code request bodies (read as raw JSON text, no prefixscope).
# ======================================================================================

LANGFUSE_ROWS = {"langfuse-first-turn": 0, "langfuse-tool-history": 7,
                 "langfuse-subagent": 4, "langfuse-long-session": 15}


def real_requests() -> dict[str, str]:
    """name -> the Anthropic request body as logged (JSON text)."""
    out: dict[str, str] = {}
    rows = LANGFUSE.read_text(encoding="utf-8").splitlines()
    for name, index in LANGFUSE_ROWS.items():
        out[name] = json.loads(rows[index])["input"]
    for i, line in enumerate(CAPTURE.read_text(encoding="utf-8").splitlines()):
        request = json.loads(line)["request"]
        out[f"capture-{i}"] = json.dumps(request, ensure_ascii=False)
    return out


# ======================================================================================
# prefixscope's side
# ======================================================================================

def wire(v: Any) -> str:
    """A parsed value written back in its own key order with Go's string/number encoding."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return go_float(v)
    if isinstance(v, str):
        return go_str(v)
    if isinstance(v, list):
        return "[" + ",".join(wire(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(go_str(k) + ":" + wire(x) for k, x in v.items()) + "}"
    raise TypeError(type(v).__name__)


def project_upstream(raw: str) -> tuple[Any, Any]:
    """prefixscope's (messages, tools) for the logged body, marks off."""
    marker = Marker(enabled=False)
    marked = mark_body("anthropic-messages", json.loads(raw), marker)
    messages, tools = to_upstream("anthropic-messages", marked, "anthropic-to-openai", marker)
    return unmark_value(messages), unmark_value(tools)


def project_body(raw: str) -> str:
    """prefixscope's upstream request written as {"messages", "tools"} (omitempty)."""
    messages, tools = project_upstream(raw)
    members = []
    if messages:
        members.append('"messages":' + wire(messages))
    if tools:
        members.append('"tools":' + wire(tools))
    return "{" + ",".join(members) + "}"


# ======================================================================================
# Tests
# ======================================================================================


def test_oracle_on_a_hand_computed_example():
    # Checks the oracle itself against a body worked out by hand from the Go source.
    raw = json.dumps({
        "system": [{"type": "text", "text": "A<"}, {"type": "text", "text": "B",
                                                    "cache_control": {"type": "ephemeral"}}],
        "tools": [{"name": "t", "description": "", "input_schema": {"type": "object",
                                                                     "a": 1.5e-7}}],
        "messages": [
            {"role": "assistant", "content": [{"type": "text", "text": "x"},
                                              {"type": "tool_use", "id": "c", "name": "t",
                                               "input": {"z": "&", "a": 1000}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c",
                                          "content": [{"type": "text", "text": ""}]}]}]})
    assert claude_to_openai(raw) == (
        '{"messages":['
        '{"role":"system","content":"A\\u003cB"},'
        '{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function",'
        '"function":{"name":"t","arguments":"{\\"a\\":1000,\\"z\\":\\"\\\\u0026\\"}"}}]},'
        '{"role":"tool","content":"[{\\"type\\":\\"text\\",\\"text\\":\\"\\"}]","name":"t",'
        '"tool_call_id":"c"}],'
        '"tools":[{"type":"function","function":{"name":"t",'
        '"parameters":{"a":1.5e-7,"type":"object"}}}]}')


def test_go_float_formatting():
    assert [go_float(x) for x in (1000.0, 1.5e-7, 1e21, 1e20, 0.1, -0.0, 123456789012345678e2,
                                  1e-6, 2.5e-10)] == \
        ["1000", "1.5e-7", "1e+21", "100000000000000000000", "0.1", "-0",
         "12345678901234567000", "0.000001", "2.5e-10"]


HAND_BUILT: dict[str, dict[str, Any]] = {
    "multi-block system": {
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cch=fa690;"},
            {"type": "text", "text": "You are Claude Code.",
             "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": ""},
            {"type": "text"},
            {"type": "text", "text": "Use <tools> & report.\n", "cache_control":
                {"type": "ephemeral", "ttl": "1h"}}],
        "messages": [{"role": "user", "content": "hi"}]},
    "string and empty systems": {
        "system": "Be kind <3 & brief.", "messages": [{"role": "user", "content": ""}]},
    "empty string system": {"system": "", "messages": [{"role": "user", "content": "x"}]},
    "empty system list": {"system": [], "messages": [{"role": "user", "content": "x"}]},
    "tool use and results": {
        "tools": [{"name": "Bash", "description": "Run <cmd> & wait.", "input_schema": {
            "type": "object", "required": ["command"], "properties": {
                "timeout": {"type": "number", "maximum": 600000, "minimum": 1.5e-07},
                "command": {"type": "string", "description": "the \"command\""}},
            "additionalProperties": False, "$schema": "http://json-schema.org/draft-07/schema#"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "list & count"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "text", "text": "I'll run it."},
                {"type": "tool_use", "id": "toolu_01", "name": "Bash",
                 "input": {"timeout": 1000, "command": "ls <dir> && echo \u2028done"}},
                {"type": "tool_use", "id": "toolu_02", "name": "Bash", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": "a.py\nb.py"},
                {"type": "tool_result", "tool_use_id": "toolu_02", "is_error": True,
                 "content": [{"type": "text", "text": "err <b>", "citations": None},
                             {"type": "text", "text": "two"}]},
                {"type": "text", "text": "go on", "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_03",
                                               "name": "Read"}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_03"},
                {"type": "tool_result", "tool_use_id": "toolu_03", "content": []},
                {"type": "tool_result", "tool_use_id": "toolu_03", "content": [
                    {"type": "text", "text": "", "cache_control": {"type": "ephemeral"}}]},
                {"type": "tool_result", "tool_use_id": "unknown", "content": "?"}]}]},
    "images": {
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "iVBORw0KGgo="}}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "s1",
                                               "name": "Screenshot", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "s1", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg",
                                             "data": "/9j/4AAQ"}},
                {"type": "text", "text": "shot"}]}]}]},
    "url image": {
        "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}}]}]},
    "cache_control with several keys": {
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "a", "cache_control": {"type": "ephemeral", "ttl": "5m"}}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "X",
                                               "input": {"q": 1}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [
                {"type": "text", "text": "r", "cache_control": {"type": "ephemeral",
                                                                "ttl": "1h"}}]}]}]},
    "cache_control null": {
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "a", "cache_control": None}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "X",
                                               "input": None}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [
                {"type": "text", "text": "r", "cache_control": None}]}]}]},
    "nested schemas with unsorted keys": {
        "tools": [
            {"name": "Edit", "input_schema": {
                "type": "object", "properties": {
                    "edits": {"type": "array", "items": {
                        "type": "object", "required": ["old", "new"], "properties": {
                            "old": {"type": "string"}, "new": {"type": "string"},
                            "count": {"type": "integer", "default": 1, "maximum": 1e21,
                                      "minimum": -2.5, "big": 12345678901234567890}}}},
                    "path": {"enum": ["b", "a", "<c>"], "type": "string"},
                    "Zeta": {"const": None, "flag": True}}}},
            {"name": "NoSchema", "description": "no input_schema"},
            {"name": "Empty", "description": "", "input_schema": {}}],
        "messages": [{"role": "user", "content": "go"}]},
    "unicode": {
        "system": [{"type": "text", "text": "\u4f60\u597d\uff0c\u4e16\u754c \U0001f468\u200d"
                                           "\U0001f469\u200d\U0001f467 e\u0301 \u212b"}],
        "tools": [{"name": "\u30c4\u30fc\u30eb", "description": "\u8bf4\u660e \U0001f389",
                   "input_schema": {"type": "object", "properties": {
                       "\u00e9": {"type": "string"}, "z": {"type": "string"},
                       "\U0001f600": {"type": "string"}, "\uffff": {"type": "string"}}}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "\u0000\b\f\x01\x7f\t"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "u", "name": "\u30c4",
                                               "input": {"\u00e9": "\u00e9\U0001f600\u2029",
                                                         "a": [1.0, 2.5, None, True]}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "u",
                                          "content": "\u7ed3\u679c \U0001f389"}]}]},
    "dropped messages": {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "a"}]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "t",
                                               "signature": "s"},
                                              {"type": "redacted_thinking", "data": "x"}]},
            {"role": "assistant", "content": []},
            {"role": "assistant", "content": None},
            {"role": "user", "content": [{"type": "text", "text": ""}]}]},
}


@pytest.mark.parametrize("name", list(HAND_BUILT))
def test_hand_built_requests_match_the_oracle(name):
    raw = json.dumps(HAND_BUILT[name], ensure_ascii=False)
    assert project_body(raw) == claude_to_openai(raw)


def test_where_cache_control_goes():
    # new-api drops it with the joined system blocks and with the tool_result block itself;
    # text parts keep theirs (MediaContent.CacheControl), as do blocks inside a marshalled
    # tool_result content (ClaudeMediaMessage.CacheControl).
    raw = json.dumps(HAND_BUILT["cache_control with several keys"])
    body = json.loads(claude_to_openai(raw))
    assert body["messages"][0]["content"][0]["cache_control"] == {"ttl": "5m",
                                                                  "type": "ephemeral"}
    assert '"cache_control":{"ttl":"1h","type":"ephemeral"}' in body["messages"][2]["content"]
    system = json.loads(claude_to_openai(json.dumps(HAND_BUILT["multi-block system"])))
    assert system["messages"][0] == {"role": "system", "content": (
        "x-anthropic-billing-header: cch=fa690;You are Claude Code.Use <tools> & report.\n")}


def test_negative_zero_reaches_the_upstream_as_zero():
    # Go writes a float64 -0 as "-0", which Python (the upstream) parses as the int 0:
    # prefixscope returns parsed values, so this one is compared as values, not bytes.
    raw = json.dumps({"tools": [{"name": "t", "input_schema": {"minimum": -0.0}}],
                      "messages": [{"role": "user", "content": "x"}]})
    golden = claude_to_openai(raw)
    assert '"parameters":{"minimum":-0}' in golden
    messages, tools = project_upstream(raw)
    assert {"messages": messages, "tools": tools} == json.loads(golden)


def test_html_escaping_reaches_the_upstream_twice_for_arguments():
    # arguments are json.Marshal'd (< -> \u003c) and then the body is marshalled again
    raw = json.dumps(HAND_BUILT["tool use and results"])
    body = claude_to_openai(raw)
    assert '\\"command\\":\\"ls \\\\u003cdir\\\\u003e \\\\u0026\\\\u0026 echo' in body
    assert '"description":"Run \\u003ccmd\\u003e \\u0026 wait."' in body


@pytest.mark.parametrize("name", sorted(real_requests()))
def test_real_claude_code_requests_match_the_golden_bytes(name):
    raw = real_requests()[name]
    golden = (GOLDEN / f"{name}.json").read_text(encoding="utf-8")
    assert claude_to_openai(raw) == golden, "oracle drifted from its goldens: regenerate?"
    assert project_body(raw) == golden


def test_goldens_cover_the_real_shapes():
    names = sorted(p.stem for p in GOLDEN.glob("*.json"))
    assert names == sorted(real_requests())
    joined = "".join((GOLDEN / f"{n}.json").read_text(encoding="utf-8") for n in names)
    for needle in ('"role":"tool"', '"tool_calls":[', '"cache_control":{"type":"ephemeral"}',
                   "x-anthropic-billing-header", '"parameters":{'):
        assert needle in joined


if __name__ == "__main__":
    if sys.argv[1:] == ["--regenerate"]:
        regenerate()
    else:
        print(__doc__)
    sys.exit(0)
