"""SWE-agent trajectories (`.traj` JSON): one request per model call, rebuilt as OpenAI Chat.

SWE-agent (SWE-agent/SWE-agent) saves each run as one JSON document with
`trajectory` (one entry per step), `history` (every message of the run, with
SWE-agent bookkeeping keys), `info` (`model_stats` totals) and, since 1.0,
`replay_config` (the run config, a JSON string or object) and `environment`.
Its `last_n_observations` history processor rewrites old tool outputs, so
consecutive requests of one run can diverge in the middle: a real cache breaker
this module must reproduce, not hide.

What each request is, by what the file holds:

* steps with `query` (SWE-agent >= 1.0.x: `step.query = copy.deepcopy(history)`
  in `DefaultAgent.forward`): request k is step k's `query`, verbatim.
* steps with `messages` (SWE-agent 1.0 pre-release: `"messages": self.messages`
  in `add_step_to_trajectory`, recorded *after* the step's action and
  observation were added): step k's `messages` is the request of call k+1, and
  the request of call 0 is step 0's `messages` up to its last assistant message.
  Every step is one call.
* otherwise the requests are rebuilt from `history`: the request of the k-th
  (non-demonstration) assistant message is the history before it, restricted
  to that message's `agent`, passed through the configured history processors
  (`last_n_observations` is implemented here exactly as SWE-agent's
  `history_processors.py`; other processors are listed in
  `metadata["history_processors_not_applied"]`).

Messages are mapped as `LiteLLMModel._history_to_messages` maps them
(`sweagent/agent/models.py`): ``{role, content}``; assistant `tool_calls`
(and `thinking_blocks`) kept; tool messages get ``tool_call_id =
tool_call_ids[0]``; `cache_control` kept; system becomes user when the model
config says `convert_system_to_user`. Bookkeeping keys (`agent`,
`message_type`, `thought`, `action`, `is_demo`, `tags`) are dropped. Messages
marked `is_demo` ARE sent: `_add_demonstration_to_history` appends the
demonstration to the history the model is queried with (one user message, or
every demonstration message with `put_demos_in_history`), so they stay in the
request.

Not recoverable from the file: per-call usage (only run totals in
`info.model_stats`, kept in the first request's metadata; usage is None) and,
for function calling, the tool schemas (the config names tool bundles only:
`metadata["tools_missing"]`). Retry-agent files (`attempts`) give one session
per attempt.

`session_key` is ``swe-agent:<instance id or file stem>:<12 hex of the file
content hash>`` (``swe-agent.file``): one file is one session, and the content
hash keeps two runs of the same instance apart.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prefixscope.ingest.normalize.fields import as_array, as_object, dig, loads_deep, to_int
from prefixscope.ingest.normalize.sessions import file_session_key, source_stem
from prefixscope.ingest.source import Probe, Source
from prefixscope.model import Record, Request, Skip, Usage

NAME = "swe-agent"
DESCRIPTION = "SWE-agent trajectories (.traj JSON): requests rebuilt per model call, OpenAI Chat"

_STEP_KEYS = frozenset({"action", "observation", "response", "thought"})
_HISTORY_BOOKKEEPING = frozenset({"agent", "thought", "action", "message_type", "is_demo"})


def sniff(probe: Probe) -> bool:
    if probe.kind != "json" or not isinstance(probe.document, dict):
        return False
    doc = probe.document
    attempts = doc.get("attempts")
    if isinstance(attempts, list) and attempts and isinstance(attempts[0], dict):
        doc = attempts[0]
    return _has_swe_steps(doc.get("trajectory")) or _has_swe_history(doc.get("history"))


def _has_swe_steps(trajectory: Any) -> bool:
    return (isinstance(trajectory, list) and bool(trajectory) and isinstance(trajectory[0], dict)
            and len(_STEP_KEYS & trajectory[0].keys()) >= 3)


def _has_swe_history(history: Any) -> bool:
    """A list of role messages carrying SWE-agent's bookkeeping keys."""
    if not isinstance(history, list) or not history:
        return False
    if not all(isinstance(m, dict) and "role" in m for m in history[:5]):
        return False
    return any(_HISTORY_BOOKKEEPING & m.keys() for m in history[:5])


def parse(source: Source, probe: Probe) -> Iterator[Record | Skip]:
    doc = probe.document
    if not isinstance(doc, dict):
        yield Skip(None, "not a SWE-agent trajectory: the file is not one JSON object")
        return
    attempts = doc.get("attempts")
    if isinstance(attempts, list):
        for number, attempt in enumerate(attempts, start=1):
            if isinstance(attempt, dict):
                yield from _parse_attempt(source, attempt, number)
            else:
                yield Skip(number, f"attempt {number} is not an object")
        return
    yield from _parse_attempt(source, doc, None)


def _parse_attempt(source: Source, doc: dict[str, Any],
                   attempt: int | None) -> Iterator[Record | Skip]:
    config = loads_deep(doc.get("replay_config"))
    agent_config = dig(config, "agent") if isinstance(config, dict) else None
    agent_config = agent_config if isinstance(agent_config, dict) else {}
    instance = dig(config, "problem_statement", "id") if isinstance(config, dict) else None
    name = str(instance) if instance else source_stem(source)
    if attempt is not None:
        name = f"{name}:attempt-{attempt}"
    session_key = file_session_key("swe-agent", name, doc)
    to_user = bool(dig(agent_config, "model", "convert_system_to_user"))
    context = _CallContext(
        session_key=session_key,
        model=_text(dig(agent_config, "model", "name")),
        base_metadata=_run_metadata(doc, agent_config),
        model_stats=dig(doc, "info", "model_stats"),
    )
    steps = as_array(doc.get("trajectory"))
    history = as_array(doc.get("history"))
    if steps and all(isinstance(s, dict) and isinstance(s.get("query"), list) for s in steps):
        calls = _calls_from_queries(steps)
        body_from = "swe-agent trajectory[].query"
    elif steps and all(isinstance(s, dict) and isinstance(s.get("messages"), list) for s in steps):
        calls = _calls_from_step_messages(steps)
        body_from = "swe-agent trajectory[].messages (step k holds call k+1's request)"
    else:
        processors, not_applied = _history_processors(agent_config)
        if not_applied:
            context.base_metadata["history_processors_not_applied"] = not_applied
        calls = _calls_from_history(history, processors)
        body_from = "swe-agent history (rebuilt per assistant message)"
    for index, (place, messages, output) in enumerate(calls):
        if isinstance(messages, str):
            yield Skip(place, messages)
            continue
        if not all(isinstance(m, dict) for m in messages):
            yield Skip(place, f"call {index + 1}: a message of its request is not an object")
            continue
        yield context.record(index, place, [_to_openai(m, to_user) for m in messages],
                             output, body_from)


class _CallContext:
    """What every request of one trajectory shares."""

    def __init__(self, session_key: str, model: str | None, base_metadata: dict[str, Any],
                 model_stats: Any) -> None:
        self.session_key = session_key
        self.model = model
        self.base_metadata = base_metadata
        self.model_stats = model_stats

    def record(self, index: int, place: int, messages: list[dict[str, Any]], output: Any,
               body_from: str) -> Record:
        metadata = {**self.base_metadata, "call_index": index, "body_from": body_from}
        if index == 0 and isinstance(self.model_stats, dict):
            metadata["model_stats"] = self.model_stats  # run totals: per-call usage is not logged
        request = Request(
            id="", source_format="", source_file="", source_line=place, source_position=index,
            timestamp=None,
            endpoint="openai-chat", model=self.model,
            session_key=self.session_key, session_key_source="swe-agent.file",
            client="swe-agent", body={"messages": messages}, output=output,
            usage=Usage(), metadata=metadata,
        )
        return Record(request=request, key=f"{self.session_key}:call:{index}")


# (1-based place, history messages or a skip reason, the call's output)
Call = tuple[int, list[dict[str, Any]] | str, Any]


def _calls_from_queries(steps: list[dict[str, Any]]) -> list[Call]:
    return [(n, step["query"], _step_output(step)) for n, step in enumerate(steps, start=1)]


def _calls_from_step_messages(steps: list[dict[str, Any]]) -> list[Call]:
    first = steps[0]["messages"]
    last_assistant = max((i for i, m in enumerate(first)
                          if isinstance(m, dict) and m.get("role") == "assistant"), default=None)
    if last_assistant is None:
        opening: list[dict[str, Any]] | str = "step 1 `messages` holds no assistant message"
    else:
        opening = first[:last_assistant]
    calls: list[Call] = [(1, opening, _step_output(steps[0]))]
    for n in range(1, len(steps)):
        calls.append((n + 1, steps[n - 1]["messages"], _step_output(steps[n])))
    return calls


def _calls_from_history(history: list[Any], processors: list[dict[str, Any]]) -> list[Call]:
    calls: list[Call] = []
    for index, entry in enumerate(history):
        if not isinstance(entry, dict):
            calls.append((index + 1, f"history entry {index + 1} is not an object", None))
            continue
        if entry.get("role") != "assistant" or entry.get("is_demo"):
            continue
        agent = entry.get("agent")
        before = [m for m in history[:index] if isinstance(m, dict)
                  and (agent is None or m.get("agent", agent) == agent)]
        for processor in processors:
            before = last_n_observations(before, **processor)
        calls.append((index + 1, before, _to_openai(entry, False)))
    return calls


def _step_output(step: Any) -> Any:
    if not isinstance(step, dict) or step.get("response") is None:
        return None
    return {"role": "assistant", "content": step["response"]}


def _to_openai(item: dict[str, Any], system_to_user: bool) -> dict[str, Any]:
    """A history item as LiteLLMModel._history_to_messages sends it."""
    role = item.get("role")
    if role == "system" and system_to_user:
        role = "user"
    if role == "tool":
        ids = item.get("tool_call_ids")
        call_id = ids[0] if isinstance(ids, list) and ids else item.get("tool_call_id")
        message: dict[str, Any] = {"role": role, "content": item.get("content"),
                                   "tool_call_id": call_id}
    elif item.get("tool_calls") is not None:
        message = {"role": role, "content": item.get("content"), "tool_calls": item["tool_calls"]}
        if item.get("thinking_blocks"):
            message["thinking_blocks"] = item["thinking_blocks"]
    else:
        message = {"role": role, "content": item.get("content")}
    if "cache_control" in item:
        message["cache_control"] = item["cache_control"]
    return message


# --- history processors (sweagent/agent/history_processors.py) ---

def _history_processors(agent_config: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """(last_n_observations settings to apply, names of processors not reproduced)."""
    configured = agent_config.get("history_processors")
    if not isinstance(configured, list):
        single = agent_config.get("history_processor")
        configured = [single] if isinstance(single, dict) else []
    apply: list[dict[str, Any]] = []
    not_applied: list[str] = []
    for proc in configured:
        if not isinstance(proc, dict):
            continue
        kind = proc.get("type")
        if kind == "last_n_observations" and to_int(proc.get("n")) is not None:
            apply.append({
                "n": to_int(proc["n"]),
                "polling": to_int(proc.get("polling")) or 1,
                "always_remove_output_for_tags": _tags(proc, "always_remove_output_for_tags"),
                "always_keep_output_for_tags": _tags(proc, "always_keep_output_for_tags"),
            })
        elif kind not in (None, "default"):
            not_applied.append(str(kind))
    return apply, not_applied


def _tags(proc: dict[str, Any], key: str) -> set[str]:
    return set(proc.get(key) or ())


def last_n_observations(history: list[dict[str, Any]], *, n: int, polling: int = 1,
                        always_remove_output_for_tags: set[str] | None = None,
                        always_keep_output_for_tags: set[str] | None = None,
                        ) -> list[dict[str, Any]]:
    """SWE-agent's LastNObservations: elide all but the last n observations (never the first)."""
    remove_tags = always_remove_output_for_tags or set()
    keep_tags = always_keep_output_for_tags or set()
    observations = [i for i, e in enumerate(history)
                    if e.get("message_type") == "observation" and not e.get("is_demo", False)]
    last_removed = max(0, (len(observations) // polling) * polling - n)
    omit = set(observations[1:last_removed])
    out: list[dict[str, Any]] = []
    for index, entry in enumerate(history):
        tags = set(entry.get("tags") or ())
        if (index not in omit or tags & keep_tags) and not tags & remove_tags:
            out.append(entry)
            continue
        lines = len(_content_text(entry.get("content")).splitlines())
        out.append({**entry, "content": f"Old environment output: ({lines} lines omitted)"})
    return out


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict)
                         and p.get("type") == "text")
    return ""


# --- metadata and shared helpers ---

def _run_metadata(doc: dict[str, Any], agent_config: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    environment = doc.get("environment")
    if isinstance(environment, str):
        meta["environment"] = environment
    exit_status = dig(doc, "info", "exit_status")
    if exit_status is not None:
        meta["exit_status"] = exit_status
    tools = as_object(agent_config.get("tools"))
    function_calling = dig(tools, "parse_function", "type") == "function_calling" or any(
        isinstance(m, dict) and m.get("tool_calls") for m in doc.get("history") or [])
    if function_calling:
        bundles = [b.get("path") for b in tools.get("bundles") or [] if isinstance(b, dict)]
        meta["tools_missing"] = ("function-calling tool schemas are not in the trajectory"
                                 + (f" (tool bundles: {', '.join(map(str, bundles))})"
                                    if bundles else ""))
    return meta


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None
