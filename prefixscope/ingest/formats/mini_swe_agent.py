"""mini-swe-agent trajectories (`*.traj.json`): one request per assistant message.

mini-swe-agent (SWE-agent/mini-swe-agent) keeps the whole conversation as one
flat `messages` list and sends it, as is, on every call: the request of an
assistant message is every message before it. `save_traj`
(`src/minisweagent/run/utils/save.py`) writes ``{"info", "messages",
"trajectory_format": "mini-swe-agent-1"}`` (``-1.1`` in 2.x); older versions and
the project's test fixtures are a bare JSON list of messages. Both are read.

Guarantees:

* Request k is ``messages[:i]`` for the k-th assistant message ``messages[i]``,
  with the ``extra`` key of every message removed (the models'
  `_prepare_messages_for_api` drops it; it holds the raw response and
  bookkeeping), key order and content otherwise as logged; `tool_calls` /
  `tool_call_id` of the tool-calling agents are kept. Messages with role
  ``exit`` are local markers and never part of a request. Body:
  ``{"messages": [...]}`` in OpenAI Chat form (`metadata["body_from"]`).
* Usage per call from the assistant message's ``extra.response.usage`` (the
  LiteLLM response dump, OpenAI convention) when present, else None. The
  tool schemas of tool-calling configs are not in the file
  (`metadata["tools_missing"]`). The call's cost as LiteLLM priced it (``extra.cost``,
  dollars) is kept as `metadata["cost"]` (report sets list prices beside it).
* `model` from ``info.config.model.model_name``, else the response's `model`.
  `timestamp` from ``extra.timestamp`` of the assistant message when present
  (when the response arrived).
* One file is one session: ``mini-swe-agent:<file stem>:<12 hex of the content
  hash>`` (``mini-swe-agent.file``), so two runs of one instance stay apart.
* A batch run's ``preds.json`` (each instance's patch, no model call) beside its
  ``<instance>/<instance>.traj.json`` folders is a companion (`is_companion`): a directory
  walk passes it over and counts it as ignored, not as a file no format recognizes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prefixscope.ingest.normalize.fields import (
    as_object,
    dig,
    first_present,
    parse_time,
    to_float,
)
from prefixscope.ingest.normalize.sessions import file_session_key, source_stem
from prefixscope.ingest.normalize.usage import usage_auto
from prefixscope.ingest.source import Probe, Source
from prefixscope.model import Record, Request, Skip

NAME = "mini-swe-agent"
DESCRIPTION = "mini-swe-agent trajectories (*.traj.json): one request per assistant message"

_MESSAGE_KEYS = frozenset({"role", "content", "extra", "tool_calls", "tool_call_id", "name",
                           "timestamp"})
_ROLES = frozenset({"system", "user", "assistant", "tool", "exit"})
_LOCAL_ROLES = frozenset({"exit"})


def is_companion(path: Path) -> bool:
    """A batch run's ``preds.json``, read with nothing: an instance folder holding a
    trajectory (``<instance>/<instance>.traj.json``) is beside it."""
    return path.name == "preds.json" \
        and next(path.parent.glob("*/*.traj.json"), None) is not None


def sniff(probe: Probe) -> bool:
    if probe.kind != "json":
        return False
    doc = probe.document
    if isinstance(doc, dict):
        fmt = doc.get("trajectory_format")
        if isinstance(fmt, str):
            return fmt.startswith("mini-swe-agent") and isinstance(doc.get("messages"), list)
        return (isinstance(doc.get("info"), dict) and _is_message_list(doc.get("messages"))
                and "trajectory" not in doc and "history" not in doc)
    return _is_message_list(doc)


def _is_message_list(messages: Any) -> bool:
    """A plain chat transcript: only role messages with chat keys, at least one assistant reply."""
    if not isinstance(messages, list) or len(messages) < 2:
        return False
    for message in messages:
        if not (isinstance(message, dict) and message.get("role") in _ROLES
                and "content" in message and message.keys() <= _MESSAGE_KEYS):
            return False
    return (messages[0]["role"] in ("system", "user")
            and any(m["role"] == "assistant" for m in messages))


def parse(source: Source, probe: Probe) -> Iterator[Record | Skip]:
    doc = probe.document
    info = as_object(doc.get("info")) if isinstance(doc, dict) else {}
    messages = doc.get("messages") if isinstance(doc, dict) else doc
    if not isinstance(messages, list):
        yield Skip(None, "mini-swe-agent trajectory without a `messages` list")
        return
    session_key = file_session_key("mini-swe-agent", source_stem(source), doc)
    config_model = dig(info, "config", "model", "model_name")
    tool_calling = any(isinstance(m, dict) and ("tool_calls" in m or m.get("role") == "tool")
                       for m in messages)
    sent: list[dict[str, Any]] = []
    calls = 0
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            yield Skip(index + 1, f"message {index + 1} is not a role message")
            continue
        if message["role"] == "assistant":
            yield _record(session_key, calls, index + 1, list(sent), message, config_model,
                          info, tool_calling)
            calls += 1
        if message["role"] not in _LOCAL_ROLES:
            sent.append({k: v for k, v in message.items() if k != "extra"})


def _record(session_key: str, call: int, place: int, messages: list[dict[str, Any]],
            reply: dict[str, Any], config_model: Any, info: dict[str, Any],
            tool_calling: bool) -> Record:
    response = dig(reply, "extra", "response")
    response = response if isinstance(response, dict) else {}
    metadata: dict[str, Any] = {"call_index": call,
                                "body_from": "mini-swe-agent messages before the assistant reply"}
    cost = to_float(dig(reply, "extra", "cost"))
    if cost is not None:
        metadata["cost"] = cost
    if tool_calling:
        metadata["tools_missing"] = "tool schemas come from the agent's model class, not the file"
    if call == 0:
        for key in ("exit_status", "mini_version", "model_stats"):
            if info.get(key) is not None:
                metadata[key] = info[key]
    request = Request(
        id="", source_format="", source_file="", source_line=place, source_position=call,
        timestamp=parse_time(first_present(dig(reply, "extra", "timestamp"),
                                           reply.get("timestamp"))),
        endpoint="openai-chat",
        model=first_present(config_model, response.get("model")),
        session_key=session_key, session_key_source="mini-swe-agent.file",
        client="mini-swe-agent",
        native_id=response.get("id") if isinstance(response.get("id"), str) else None,
        body={"messages": messages},
        output={k: v for k, v in reply.items() if k != "extra"},
        usage=usage_auto(response.get("usage"), "openai-chat"),
        metadata=metadata,
    )
    return Record(request=request, key=f"{session_key}:call:{call}")
