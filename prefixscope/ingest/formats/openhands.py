"""OpenHands event streams: one request per LLM call, rebuilt as OpenAI Chat.

OpenHands (All-Hands-AI/OpenHands) logs a run as a list of events: actions (what
the agent or user did) and observations (what came back). Evaluation and
resolver runs write `output.jsonl`, one JSON line per instance with the events
in `history` (plus `instance_id` / `issue`, `metrics`, `metadata`); tests and
the server keep bare event lists (a JSON array). Both are read. The request
text is not logged; it is rebuilt the way `ConversationMemory.process_events`
(`openhands/memory/conversation_memory.py`) turns events into messages:

* the ``system`` action event gives the system message and the tool schemas
  (`args.content`, `args.tools`, already OpenAI ``{"type": "function", ...}``);
* user ``message`` actions become user messages; agent actions with
  `tool_call_metadata` are held until every tool call of their model response
  has its observation, then the assistant message (content + `tool_calls` of
  `model_response.choices[0].message`) is appended followed by the ``tool``
  results in call order; an agent ``finish`` becomes an assistant message;
  error observations without a tool call become user messages ending
  ``[Error occurred in processing last action]``; the workspace-context recall
  becomes a user message (repository, runtime hosts, today's date, triggered
  microagents); consecutive user messages get the ``\\n\\n`` separator.

One LLM call = one model response id: several actions from one response
(`total_calls_in_response`) are one request. An agent ``message`` action
without tool metadata (a plain-text reply) is also a call. The request of a
call is the message list at its first action. Because the list is only ever
appended to, the requests of one run are append-only by construction (no
condenser is modelled: condensation events are ignored); the diff tests rely
on this for the evaluation runs.

Approximations (the request is not byte-exact; `metadata["body_from"]` says so):
contents are plain strings (OpenHands sends text-part lists with
`cache_control` when prompt caching is on), tool outputs are formatted as
`CmdOutputObservation.to_agent_observation` / `truncate_content` do with the
run's `max_message_chars`, other observation types use their `content`, the
workspace-context text follows the prompt templates' structure but not their
exact wording, and the mock-function-calling prompt conversion used for models
without native tool calls is not applied.

Usage from `tool_call_metadata.model_response.usage` (LiteLLM, OpenAI
convention: `prompt_tokens` includes cache; cache read from
`prompt_tokens_details.cached_tokens`, write from
`cache_creation_input_tokens`), None when absent. `timestamp` is the
response's `created` (epoch seconds, UTC); event timestamps are naive local
time and are only a fallback. Legacy text-mode CodeAct histories (events
without `source`, no tool metadata) are rebuilt as assistant turns with
``<execute_bash>`` / ``<execute_ipython>`` blocks and ``OBSERVATION:`` user
turns, with no system prompt.

`session_key`: ``openhands:<instance_id or issue or file stem>:<12 hex of the
history's content hash>`` (``openhands.instance_id`` / ``openhands.issue`` /
``openhands.file``); the hash keeps reruns of one instance apart.

OpenHands V1 (software-agent-sdk; the OpenHands/benchmarks `EvalOutput` rows) types its
events by `kind` (`SystemPromptEvent`, `MessageEvent`, `ActionEvent`,
`ObservationEvent`, ...): `_V1Builder` rebuilds them as the SDK's
`events_to_messages` does, one request per distinct `llm_response_id`, usage from the
row's `metrics.token_usages` when logged, and ``metadata["approximate"]`` naming what
the log lacks (no `SystemPromptEvent`; tool definitions without parameter schemas).

A file in which no event is a model call is one skip with the reason (so ``--strict``
fails on it), never a silent empty read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from prefixscope.ingest.normalize.fields import as_object, dig, loads_deep, parse_time, to_int
from prefixscope.ingest.normalize.sessions import file_session_key, source_stem
from prefixscope.ingest.normalize.usage import usage_openai_chat
from prefixscope.ingest.readers import BadRecord
from prefixscope.ingest.readers.json import iter_json_records
from prefixscope.ingest.source import Probe, Source
from prefixscope.model import Record, Request, Skip, Usage

NAME = "openhands"
DESCRIPTION = "OpenHands event streams (output.jsonl, event lists): one request per LLM call"

_RUN_LINE_KEYS = ("instance_id", "instruction", "metrics", "test_result", "issue")
_TRUNCATION_NOTE = "\n[... Observation truncated due to length ...]\n"
_ERROR_SUFFIX = "\n[Error occurred in processing last action]"
# Legacy text-mode CodeAct: action -> (argument holding the code, execute tag).
_LEGACY_CODE_ACTIONS = {"run": ("command", "execute_bash"),
                        "run_ipython": ("code", "execute_ipython"),
                        "browse_interactive": ("browser_actions", "execute_browse")}
_LEGACY_AGENT_ACTIONS = frozenset({*_LEGACY_CODE_ACTIONS, "browse", "read", "write", "edit",
                                   "delegate", "finish", "reject", "talk"})


# OpenHands V1 (software-agent-sdk) event kinds, `openhands-sdk/openhands/sdk/event/`.
_V1_KINDS = frozenset({
    "SystemPromptEvent", "MessageEvent", "ActionEvent", "ObservationEvent", "AgentErrorEvent",
    "UserRejectObservation", "ConversationStateUpdateEvent", "ConversationErrorEvent",
    "Condensation", "CondensationRequest", "CondensationSummaryEvent", "PauseEvent",
    "TokenEvent", "StreamingDeltaEvent", "LLMCompletionLogEvent", "HookExecutionEvent",
    "InterruptEvent"})
_V1_OBSERVATION_KINDS = frozenset({"ObservationEvent", "AgentErrorEvent",
                                   "UserRejectObservation"})
_V1_ERROR_HEADER = "[An error occurred during execution.]\n"  # Observation.ERROR_MESSAGE_HEADER


def sniff(probe: Probe) -> bool:
    if probe.kind == "json" and isinstance(probe.document, list):
        first = probe.first
        return (isinstance(first, dict) and ("action" in first or "observation" in first
                                             or first.get("kind") in _V1_KINDS)
                and "source" in first and "id" in first)
    if probe.kind not in ("json", "jsonl"):
        return False
    first = probe.first
    return (isinstance(first, dict) and isinstance(first.get("history"), list)
            and any(k in first for k in _RUN_LINE_KEYS) and _looks_like_events(first["history"]))


def _looks_like_events(history: list[Any]) -> bool:
    head = [e[0] if isinstance(e, list) and e else e for e in history[:5]]
    if head and all(isinstance(e, dict) and isinstance(e.get("kind"), str) for e in head):
        return any(e["kind"] in _V1_KINDS for e in head)  # V1: typed by `kind`
    return bool(head) and all(isinstance(e, dict) and ("action" in e or "observation" in e)
                              for e in head)


def _is_v1(events: list[Any]) -> bool:
    return any(isinstance(e, dict) and e.get("kind") in _V1_KINDS for e in events)


def parse(source: Source, probe: Probe) -> Iterator[Record | Skip]:
    found = 0
    for item in _parse_file(source, probe):
        found += 1
        yield item
    if not found:
        yield Skip(None, "recognized as OpenHands output but no event is a model call (no "
                         "action with a model response, no ActionEvent or agent MessageEvent "
                         "with an llm_response_id)")


def _parse_file(source: Source, probe: Probe) -> Iterator[Record | Skip]:
    if probe.kind == "json" and isinstance(probe.document, list):
        key = file_session_key("openhands", source_stem(source), probe.document)
        yield from _parse_run(probe.document, key, "openhands.file", {}, 0)
        return
    for place, rec in iter_json_records(source, probe):
        if isinstance(rec, BadRecord):
            yield Skip(place, str(rec))
            continue
        if not isinstance(rec, dict) or not isinstance(rec.get("history"), list):
            yield Skip(place, "line has no `history` event list")
            continue
        name, key_source = _run_name(rec, source, place)
        key = file_session_key("openhands", name, rec["history"])
        yield from _parse_run(rec["history"], key, key_source, rec, place)


def _run_name(rec: dict[str, Any], source: Source, place: int) -> tuple[str, str]:
    if rec.get("instance_id") not in (None, ""):
        return str(rec["instance_id"]), "openhands.instance_id"
    issue = loads_deep(rec.get("issue"))
    if isinstance(issue, dict) and issue.get("number") is not None:
        return f"{issue.get('owner')}/{issue.get('repo')}#{issue['number']}", "openhands.issue"
    return f"{source_stem(source)}#{place}", "openhands.file"


@dataclass
class _Call:
    """One LLM call: the request snapshot and what the log says about it."""

    key: str
    place: int
    messages: list[dict[str, Any]]
    native_id: str | None = None
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    timestamp: Any = None
    event_time: Any = None  # the event's own (naive, local) time: the fallback clock
    actions: list[str] = field(default_factory=list)
    event_ids: list[Any] = field(default_factory=list)
    calls_in_response: int | None = None


class _Conversation:
    """ConversationMemory's message list, built event by event; only ever appended to."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.pending: dict[str, dict[str, Any]] = {}
        self.results: dict[str, dict[str, Any]] = {}
        self.seen_microagents: set[str | None] = set()

    def append(self, message: dict[str, Any]) -> None:
        previous = self.messages[-1]["role"] if self.messages else None
        if message["role"] == "user" == previous and isinstance(message.get("content"), str):
            message = {**message, "content": "\n\n" + message["content"]}
        self.messages.append(message)

    def flush(self) -> None:
        """Append every pending assistant message whose tool calls all have results."""
        for response_id in list(self.pending):
            message = self.pending[response_id]
            call_ids = [_hashable(c.get("id")) for c in message.get("tool_calls") or []]
            if all(i in self.results for i in call_ids):
                self.append(message)
                for call_id in call_ids:
                    self.append(self.results.pop(call_id))
                del self.pending[response_id]


def _parse_run(events: list[Any], session_key: str, key_source: str, line: dict[str, Any],
               line_place: int) -> Iterator[Record | Skip]:
    flat = [e for item in events for e in (item if isinstance(item, list) else [item])]
    legacy = not any(isinstance(e, dict) and "source" in e for e in flat)
    builder: _EventBuilder | _LegacyBuilder | _V1Builder
    if _is_v1(flat):
        builder = _V1Builder(session_key, line)
    elif legacy:
        builder = _LegacyBuilder(session_key)
    else:
        builder = _EventBuilder(session_key, line)
    for index, event in enumerate(flat, start=1):
        if not isinstance(event, dict):
            yield Skip(line_place or index, f"event {index} is not an object")
            continue
        builder.add(index, event)
    context = _RunContext(session_key, key_source, line, builder, line_place)
    for number, call in enumerate(builder.calls):
        yield context.record(number, call)


class _RunContext:
    """Run-level fields shared by every request of one history."""

    def __init__(self, session_key: str, key_source: str, line: dict[str, Any],
                 builder: _EventBuilder | _LegacyBuilder | _V1Builder,
                 line_place: int) -> None:
        self.session_key = session_key
        self.key_source = key_source
        self.builder = builder
        self.line_place = line_place
        metadata = as_object(line.get("metadata"))
        self.model = dig(metadata, "llm_config", "model") or dig(metadata, "llm", "model")
        self.costs = _costs(line.get("metrics"))
        self.base: dict[str, Any] = {"body_from": builder.body_from}
        for key, value in (("instance_id", line.get("instance_id")),
                           ("agent_class", metadata.get("agent_class") or builder.agent_class),
                           ("openhands_version", builder.openhands_version)):
            if value is not None:
                self.base[key] = value
        if not builder.has_system:
            self.base["system_missing"] = (
                "no system event: system prompt and tools are not in the log")
        if builder.approximate:
            self.base["approximate"] = list(builder.approximate)

    def record(self, number: int, call: _Call) -> Record:
        metadata = {**self.base, "call_index": number, "event_index": call.place}
        timestamp = call.timestamp
        if any(c.timestamp is c.event_time for c in self.builder.calls) and \
                all(c.event_time is not None for c in self.builder.calls):
            # Some calls have no response time (UTC) and fell back on the event's local
            # time: one clock for the whole run, or ordering by time mixes the two.
            timestamp = call.event_time
        if call.actions:
            metadata["actions"] = call.actions
        if call.event_ids:
            metadata["event_ids"] = call.event_ids
        if call.calls_in_response is not None:
            metadata["total_calls_in_response"] = call.calls_in_response
        if call.model and self.model and call.model != self.model:
            metadata["response_model"] = call.model
        if self.costs is not None and len(self.costs) == len(self.builder.calls):
            metadata["cost"] = self.costs[number]
        body: dict[str, Any] = {"messages": call.messages}
        if self.builder.tools:
            body["tools"] = self.builder.tools
        request = Request(
            id="", source_format="", source_file="",
            source_line=self.line_place or call.place, source_position=number,
            timestamp=timestamp, endpoint="openai-chat",
            model=self.model or call.model,
            session_key=self.session_key, session_key_source=self.key_source,
            client="openhands", native_id=call.native_id, body=body,
            usage=call.usage, metadata=metadata,
        )
        return Record(request=request, key=call.key)


def _costs(metrics: Any) -> list[Any] | None:
    costs = dig(loads_deep(metrics), "costs")
    if not isinstance(costs, list) or not costs:
        return None
    return [c.get("cost") if isinstance(c, dict) else c for c in costs]


class _EventBuilder:
    """Function-calling event streams (events with `source`, `tool_call_metadata`)."""

    body_from = "openhands events, rebuilt like ConversationMemory (approximate)"
    approximate: tuple[str, ...] = ()

    def __init__(self, session_key: str, line: dict[str, Any]) -> None:
        self.session_key = session_key
        self.conversation = _Conversation()
        self.calls: list[_Call] = []
        self.by_response: dict[str, _Call] = {}
        self.tools: list[Any] | None = None
        self.has_system = False
        self.agent_class: str | None = None
        self.openhands_version: str | None = None
        self.max_chars = to_int(dig(line, "metadata", "llm_config", "max_message_chars"))

    def add(self, index: int, event: dict[str, Any]) -> None:
        if "action" in event:
            self._action(index, event)
        elif "observation" in event:
            self._observation(event)
        self.conversation.flush()

    def _action(self, index: int, event: dict[str, Any]) -> None:
        action, source = event.get("action"), event.get("source")
        args = as_object(event.get("args"))
        metadata = event.get("tool_call_metadata")
        if action == "system":
            self._system(args)
        elif isinstance(metadata, dict) and isinstance(metadata.get("model_response"), dict):
            self._tool_action(index, event, args, metadata)
        elif action == "message" and source == "user":
            self.conversation.append({"role": "user", "content": _text(args.get("content"))})
        elif action == "message" and source == "agent":
            call = self._open_call(index, f"{self.session_key}:event:{event.get('id', index)}",
                                   None, event)
            call.actions.append("message")
            if event.get("id") is not None:
                call.event_ids.append(event["id"])
            self.conversation.append({"role": "assistant", "content": _text(args.get("content"))})

    def _system(self, args: dict[str, Any]) -> None:
        self.has_system = True
        self.conversation.append({"role": "system", "content": _text(args.get("content"))})
        if isinstance(args.get("tools"), list):
            self.tools = args["tools"]
        self.agent_class = args.get("agent_class") or self.agent_class
        self.openhands_version = args.get("openhands_version") or self.openhands_version

    def _tool_action(self, index: int, event: dict[str, Any], args: dict[str, Any],
                     metadata: dict[str, Any]) -> None:
        response = metadata["model_response"]
        response_id = str(response.get("id") or f"event-{event.get('id', index)}")
        call = self.by_response.get(response_id)
        if call is None:
            call = self._open_call(index, f"resp:{response_id}", response, event)
            call.native_id = response_id
            call.calls_in_response = to_int(metadata.get("total_calls_in_response"))
            self.by_response[response_id] = call
        call.actions.append(str(event.get("action")))
        if event.get("id") is not None:
            call.event_ids.append(event["id"])
        reply = dig(response, "choices", 0, "message")
        reply = reply if isinstance(reply, dict) else {}
        if event.get("action") == "finish":
            self.conversation.append({"role": "assistant", "content": _finish_text(args, reply)})
            return
        content = reply.get("content")
        message: dict[str, Any] = {
            "role": reply.get("role") or "assistant",
            "content": content if isinstance(content, str) and content.strip() else None,
            "tool_calls": [_tool_call(c) for c in reply.get("tool_calls") or []
                           if isinstance(c, dict)],
        }
        self.conversation.pending[response_id] = message

    def _open_call(self, index: int, key: str, response: dict[str, Any] | None,
                   event: dict[str, Any]) -> _Call:
        call = _Call(key=key, place=index, messages=list(self.conversation.messages))
        if response is not None:
            call.usage = usage_openai_chat(response.get("usage"))
            call.model = response.get("model") if isinstance(response.get("model"), str) else None
            call.timestamp = parse_time(response.get("created"))
        call.event_time = parse_time(event.get("timestamp"))
        if call.timestamp is None:
            call.timestamp = call.event_time
        self.calls.append(call)
        return call

    def _observation(self, event: dict[str, Any]) -> None:
        kind = event.get("observation")
        metadata = event.get("tool_call_metadata")
        extras = as_object(event.get("extras"))
        text = self._observation_text(kind, event, extras)
        if isinstance(metadata, dict) and metadata.get("tool_call_id") is not None:
            call_id = metadata["tool_call_id"]
            self.conversation.results[_hashable(call_id)] = {
                "role": "tool", "content": text, "tool_call_id": call_id,
                "name": metadata.get("function_name"),
            }
            return
        if kind == "error":
            self.conversation.append({"role": "user", "content": text})
        elif kind == "run" and event.get("source") == "user":
            text = f"\nObserved result of command executed by user:\n{text}"
            self.conversation.append({"role": "user", "content": text})
        elif kind == "user_rejected":
            self.conversation.append({"role": "user", "content": "OBSERVATION:\n" + text
                                      + "\n[Last action has been rejected by the user]"})
        elif kind == "recall":
            content = _recall_text(extras, self.conversation.seen_microagents)
            if content:
                self.conversation.append({"role": "user", "content": content})

    def _observation_text(self, kind: Any, event: dict[str, Any], extras: dict[str, Any]) -> str:
        content = _text(event.get("content"))
        if kind == "run":
            meta = as_object(extras.get("metadata"))
            content = _agent_observation(content, meta)
        elif kind == "error":
            return _truncate(content, self.max_chars) + _ERROR_SUFFIX
        return _truncate(content, self.max_chars)


def _agent_observation(content: str, meta: dict[str, Any]) -> str:
    """CmdOutputObservation.to_agent_observation."""
    text = f"{_text(meta.get('prefix'))}{content}{_text(meta.get('suffix'))}"
    if meta.get("working_dir"):
        text += f"\n[Current working directory: {meta['working_dir']}]"
    if meta.get("py_interpreter_path"):
        text += f"\n[Python interpreter: {meta['py_interpreter_path']}]"
    exit_code = to_int(meta.get("exit_code"))
    if exit_code is not None and exit_code != -1:
        text += f"\n[Command finished with exit code {exit_code}]"
    return text


def _truncate(content: str, max_chars: int | None) -> str:
    """openhands.events.serialization.event.truncate_content."""
    if max_chars is None or max_chars < 0 or len(content) <= max_chars:
        return content
    half = max_chars // 2
    return content[:half] + _TRUNCATION_NOTE + content[-half:]


def _finish_text(args: dict[str, Any], reply: dict[str, Any]) -> str:
    content = _text(reply.get("content"))
    thought = _text(args.get("thought"))
    if thought:
        return thought if thought == content else thought + "\n" + content
    return content


def _hashable(value: Any) -> Any:
    """A tool call id as a dict key: a damaged log's list or object id by its JSON text."""
    return value if value is None or isinstance(value, str | int | float | bool) \
        else json.dumps(value, sort_keys=True, default=str)


def _tool_call(call: dict[str, Any]) -> dict[str, Any]:
    """A response tool call as it is sent back: the streaming `index` dropped."""
    return {k: v for k, v in call.items() if k != "index"}


def _recall_text(extras: dict[str, Any], seen: set[str | None]) -> str:
    """The user message a recall observation adds (workspace context, microagent knowledge)."""
    parts: list[str] = []
    if extras.get("recall_type") == "workspace_context":
        workspace = _workspace_text(extras)
        if workspace:
            parts.append(workspace)
    agents = [a for a in extras.get("microagent_knowledge") or []
              if isinstance(a, dict) and a.get("name") not in seen]
    seen.update(a.get("name") for a in agents)
    if agents:
        parts.append("\n".join(
            "<EXTRA_INFO>\nThe following information has been included based on a keyword match "
            f"for \"{a.get('trigger')}\".\nIt may or may not be relevant to the user's request.\n\n"
            f"{a.get('content')}\n</EXTRA_INFO>" for a in agents))
    return "\n\n".join(parts)


def _workspace_text(extras: dict[str, Any]) -> str:
    """The workspace-context block: repository, instructions, hosts, date (approximate wording)."""
    blocks: list[str] = []
    if extras.get("repo_name") or extras.get("repo_directory"):
        blocks.append(f"<REPOSITORY_INFO>\nRepository {extras.get('repo_name')} is at "
                      f"{extras.get('repo_directory')}.\n</REPOSITORY_INFO>")
    if extras.get("repo_instructions"):
        blocks.append(f"<REPOSITORY_INSTRUCTIONS>\n{extras['repo_instructions']}\n"
                      "</REPOSITORY_INSTRUCTIONS>")
    runtime: list[str] = []
    hosts = extras.get("runtime_hosts")
    if isinstance(hosts, dict) and hosts:
        runtime.append("The user has access to the following hosts for accessing a web "
                       "application, each of which has a corresponding port:\n"
                       + "\n".join(f"* {h} (port {p})" for h, p in hosts.items()))
    if extras.get("additional_agent_instructions"):
        runtime.append(str(extras["additional_agent_instructions"]))
    if extras.get("date"):
        runtime.append(f"Today's date is {extras['date']} (UTC).")
    if runtime:
        blocks.append("<RUNTIME_INFORMATION>\n" + "\n".join(runtime) + "\n</RUNTIME_INFORMATION>")
    if extras.get("conversation_instructions"):
        blocks.append(f"<CONVERSATION_INSTRUCTIONS>\n{extras['conversation_instructions']}\n"
                      "</CONVERSATION_INSTRUCTIONS>")
    return "\n".join(blocks)


class _LegacyBuilder:
    """Text-mode CodeAct histories: flat action/observation dicts, no `source`, no tool metadata."""

    body_from = "openhands legacy text-mode history, rebuilt (approximate; no system prompt)"
    approximate: tuple[str, ...] = ()
    tools = None
    has_system = False
    agent_class = None
    openhands_version = None

    def __init__(self, session_key: str) -> None:
        self.session_key = session_key
        self.conversation = _Conversation()
        self.calls: list[_Call] = []
        self.task_seen = False

    def add(self, index: int, event: dict[str, Any]) -> None:
        args: dict[str, Any] = event["args"] if isinstance(event.get("args"), dict) else event
        action = event.get("action")
        if action is None:
            if "observation" in event and event.get("observation") not in ("null", None):
                self.conversation.append(
                    {"role": "user", "content": "OBSERVATION:\n" + _text(event.get("content"))})
            return
        if action == "message" and not (self.task_seen and args.get("wait_for_response")):
            self.task_seen = True
            self.conversation.append({"role": "user", "content": _text(args.get("content"))})
            return
        if action not in _LEGACY_AGENT_ACTIONS and action != "message":
            return
        call = _Call(key=f"{self.session_key}:event:{index}", place=index,
                     messages=list(self.conversation.messages), actions=[str(action)])
        call.timestamp = parse_time(event.get("timestamp"))
        self.calls.append(call)
        text = _legacy_action_text(action, args)
        self.conversation.append({"role": "assistant", "content": text})


class _V1Builder:
    """OpenHands V1 (software-agent-sdk) histories: events typed by `kind`.

    Messages are rebuilt as `LLMConvertibleEvent.events_to_messages`
    (`openhands-sdk/openhands/sdk/event/base.py`) does: `SystemPromptEvent` -> the system
    message (its text, then `dynamic_context`); `MessageEvent` -> its `llm_message` plus
    `extended_content`; consecutive `ActionEvent`s of one `llm_response_id` -> one
    assistant message (the first one's `thought`, every `tool_call`); `ObservationEvent` /
    `AgentErrorEvent` / `UserRejectObservation` -> `tool` messages; consecutive plain
    user messages merge. Other kinds (state updates, condensation, errors of the
    conversation) add nothing: condensation is not modelled.

    One call per distinct `llm_response_id` (an `ActionEvent` batch or an agent
    `MessageEvent`); its request is the messages before its first event. Usage is the
    row's `metrics.token_usages` entry of that response id, when logged.
    """

    body_from = "openhands v1 events, rebuilt like events_to_messages (approximate)"
    agent_class = None
    openhands_version = None

    def __init__(self, session_key: str, line: dict[str, Any]) -> None:
        self.session_key = session_key
        self.messages: list[dict[str, Any]] = []
        self.calls: list[_Call] = []
        self.seen: set[str] = set()
        self.tools: list[Any] | None = None
        self.has_system = False
        self.tool_schemas_missing = False
        self.batch: tuple[str, dict[str, Any]] | None = None  # open ActionEvent batch
        self.usage = _v1_token_usages(loads_deep(line.get("metrics")))

    @property
    def approximate(self) -> tuple[str, ...]:
        reasons = []
        if not self.has_system:
            reasons.append("no SystemPromptEvent: the system prompt and tools are not in the log")
        if self.tool_schemas_missing:
            reasons.append("tools are logged without their parameter schemas")
        return tuple(reasons)

    def add(self, index: int, event: dict[str, Any]) -> None:
        kind = event.get("kind")
        if kind != "ActionEvent":
            self.batch = None
        if kind == "SystemPromptEvent":
            self._system(event)
        elif kind == "MessageEvent":
            self._message(index, event)
        elif kind == "ActionEvent":
            self._action(index, event)
        elif kind in _V1_OBSERVATION_KINDS:
            self._append({"role": "tool", "content": _v1_observation_text(event),
                          "tool_call_id": event.get("tool_call_id"),
                          "name": event.get("tool_name")})

    def _system(self, event: dict[str, Any]) -> None:
        self.has_system = True
        parts = [_v1_part(p) for p in (event.get("system_prompt"), event.get("dynamic_context"))
                 if isinstance(p, dict)]
        self._append({"role": "system", "content": parts})
        tools = [t for t in event.get("tools") or [] if isinstance(t, dict)]
        if tools:
            self.tools = [_v1_tool(t) for t in tools]
            self.tool_schemas_missing = any("parameters" not in t["function"]
                                            for t in self.tools)

    def _message(self, index: int, event: dict[str, Any]) -> None:
        llm_message = as_object(event.get("llm_message"))
        response_id = event.get("llm_response_id")
        if event.get("source") == "agent" and isinstance(response_id, str) and response_id:
            self._open_call(index, response_id, event, "message")
        content = [_v1_part(p) for p in [*(llm_message.get("content") or []),
                                          *(event.get("extended_content") or [])]]
        message: dict[str, Any] = {"role": llm_message.get("role") or "user", "content": content}
        if llm_message.get("tool_calls"):
            message["tool_calls"] = [_v1_tool_call(c) for c in llm_message["tool_calls"]
                                     if isinstance(c, dict)]
        self._append(message)

    def _action(self, index: int, event: dict[str, Any]) -> None:
        response_id = str(event.get("llm_response_id") or f"event-{event.get('id', index)}")
        call = _v1_tool_call(as_object(event.get("tool_call")))
        if self.batch is not None and self.batch[0] == response_id:
            self.batch[1]["tool_calls"].append(call)  # parallel calls of one response
        else:
            self._open_call(index, response_id, event, "action")
            thought = [_v1_part(p) for p in event.get("thought") or []]
            message = {"role": "assistant", "content": thought or None, "tool_calls": [call]}
            self._append(message)
            self.batch = (response_id, message)
        owner = next((c for c in reversed(self.calls) if c.native_id == response_id), None)
        if owner is not None:
            owner.actions.append(str(dig(event, "action", "kind") or event.get("tool_name")))
            if event.get("id") is not None:
                owner.event_ids.append(event["id"])

    def _open_call(self, index: int, response_id: str, event: dict[str, Any],
                   what: str) -> None:
        if response_id in self.seen:
            return
        self.seen.add(response_id)
        call = _Call(key=f"v1:{response_id}", place=index, messages=list(self.messages),
                     native_id=response_id, timestamp=parse_time(event.get("timestamp")))
        usage = self.usage.get(response_id)
        if usage is not None:
            call.usage, call.model = usage
        if what == "message" and event.get("id") is not None:
            call.actions.append("message")
            call.event_ids.append(event["id"])
        self.calls.append(call)

    def _append(self, message: dict[str, Any]) -> None:
        previous = self.messages[-1] if self.messages else None
        if previous is not None and _plain_user(previous) and _plain_user(message):
            self.messages[-1] = {**previous, "content": [*previous["content"],
                                                         *message["content"]]}
        else:
            self.messages.append(message)


def _plain_user(message: dict[str, Any]) -> bool:
    """`_is_plain_user_message`: a user turn with no tool metadata (consecutive ones merge)."""
    return (message.get("role") == "user" and isinstance(message.get("content"), list)
            and not message.get("tool_calls") and not message.get("tool_call_id")
            and not message.get("name"))


def _v1_part(part: Any) -> dict[str, Any]:
    """A V1 `TextContent` / `ImageContent` as an OpenAI content part."""
    if not isinstance(part, dict):
        return {"type": "text", "text": _text(part)}
    if part.get("type") == "image" and isinstance(part.get("image_urls"), list):
        urls = part["image_urls"]
        return {"type": "image_url", "image_url": {"url": urls[0] if urls else ""}}
    return {"type": "text", "text": _text(part.get("text"))}


def _v1_tool_call(call: dict[str, Any]) -> dict[str, Any]:
    """A V1 `MessageToolCall` ``{id, name, arguments}`` as OpenAI sends it back."""
    return {"id": call.get("id"), "type": "function",
            "function": {"name": call.get("name"), "arguments": _text(call.get("arguments"))}}


def _v1_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A serialized `ToolDefinition` as an OpenAI function tool. The event keeps the name
    (`title`) and description; the parameter schema only when a dump logged one."""
    function: dict[str, Any] = {"name": tool.get("title") or tool.get("name"),
                                "description": tool.get("description")}
    schema = tool.get("parameters") or dig(tool, "function", "parameters")
    if isinstance(schema, dict):
        function["parameters"] = schema
    return {"type": "function", "function": function}


def _v1_observation_text(event: dict[str, Any]) -> str:
    """The text of a tool result: `Observation.to_llm_content` (error header, content parts),
    `AgentErrorEvent.error`, or `UserRejectObservation`'s rejection."""
    kind = event.get("kind")
    if kind == "AgentErrorEvent":
        return _text(event.get("error"))
    if kind == "UserRejectObservation":
        return f"Action rejected: {_text(event.get('rejection_reason'))}"
    observation = as_object(event.get("observation"))
    parts = observation.get("content")
    texts = [_text(p.get("text")) if isinstance(p, dict) else _text(p)
             for p in (parts if isinstance(parts, list) else [parts])]
    header = _V1_ERROR_HEADER if observation.get("is_error") is True else ""
    return header + "".join(texts)


def _v1_token_usages(metrics: Any) -> dict[str, tuple[Usage, str | None]]:
    """response id -> (usage, model) from `Metrics.token_usages`. `prompt_tokens` counts
    cache reads as LiteLLM does; when `cache_read_tokens` exceeds it the reads were
    reported apart (ACP) and are added, as `MetricsSnapshot.cache_hit_rate` reads them."""
    found: dict[str, tuple[Usage, str | None]] = {}
    for entry in dig(metrics, "token_usages") or []:
        if not isinstance(entry, dict) or not entry.get("response_id"):
            continue
        prompt = to_int(entry.get("prompt_tokens"))
        read = to_int(entry.get("cache_read_tokens"))
        semantics = "openhands"
        if prompt is not None and read is not None and read > prompt:
            prompt += read
            semantics = "openhands:cache-apart"
        usage = Usage(prompt_tokens=prompt, cached_tokens=read,
                      cache_write_tokens=to_int(entry.get("cache_write_tokens")),
                      output_tokens=to_int(entry.get("completion_tokens")), semantics=semantics)
        model = entry.get("model") if isinstance(entry.get("model"), str) else None
        found[str(entry["response_id"])] = (usage, model or None)
    return found


def _legacy_action_text(action: str, args: dict[str, Any]) -> str:
    thought = _text(args.get("thought"))
    if action in _LEGACY_CODE_ACTIONS:
        arg, tag = _LEGACY_CODE_ACTIONS[action]
        return f"{thought}\n<{tag}>\n{_text(args.get(arg))}\n</{tag}>"
    if action == "message":
        return _text(args.get("content"))
    return thought


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)
