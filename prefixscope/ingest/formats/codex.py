"""OpenAI Codex CLI rollout files (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`).

Codex writes every session it runs to a JSON-lines "rollout" (also kept under
`~/.codex/archived_sessions/`). Like a Claude Code transcript it is an agent's own log:
it holds the provider-reported usage of every model call and, unlike Claude Code's, the
Responses API input items the calls were built from, so the history of each call can be
rebuilt and threaded; what it lacks is the tool list (and, in older versions, the base
instructions).

The line shape, from the Codex source (openai/codex, `codex-rs/protocol/src/protocol.rs`):
`RolloutLine { timestamp, #[serde(flatten)] item: RolloutItem }` with `RolloutItem`
tagged ``#[serde(tag = "type", content = "payload", rename_all = "snake_case")]``:

* ``session_meta`` -- `SessionMetaLine` (`SessionMeta` flattened + `git`): `id` (the
  session / conversation id), `timestamp`, `cwd`, `originator`, `cli_version`,
  `instructions`, `source`, `model_provider`; newer versions add `forked_from_id` and
  `base_instructions` (`{text}`, the system prompt sent as Responses `instructions`);
* ``turn_context`` -- `TurnContextItem`: `cwd`, `approval_policy`, `sandbox_policy`,
  `model`, `effort`, `summary`, ...;
* ``response_item`` -- a `ResponseItem` (`codex-rs/protocol/src/models.rs`): `message`
  (`role`, `content` of `input_text` / `output_text` / `input_image`), `reasoning`,
  `function_call` / `function_call_output`, `custom_tool_call` / `_output`,
  `local_shell_call`, `web_search_call`, `compaction` (remote compaction's encrypted
  item), `ghost_snapshot` (an undo snapshot, never sent to the model);
* ``compacted`` -- `CompactedItem { message, replacement_history }`: the history was
  replaced (local compaction: the summary `message`; remote / newer: the new history);
* ``event_msg`` -- an `EventMsg`; the one read here is ``token_count``,
  `TokenCountEvent { info: Option<TokenUsageInfo>, rate_limits }` with
  `TokenUsageInfo { total_token_usage, last_token_usage, model_context_window }` and
  `TokenUsage { input_tokens, cached_input_tokens, output_tokens,
  reasoning_output_tokens, total_tokens }`.

Guarantees:

* One request per model call: a ``token_count`` event with non-null `info`. Codex
  re-emits the event with an unchanged `total_token_usage` (rate-limit and UI refreshes;
  ccusage issues #876, #884, #1288): an event whose totals equal the previous event's is
  no call. An event whose counts are all zero (`fill_to_context_window`'s marker) is no
  call either (ccusage skips them too).
* Usage is `last_token_usage` (semantics ``codex:last``), else the difference of this
  event's `total_token_usage` and the previous one's (``codex:total-diff``; the first
  such event counts its totals), as ccusage's Codex adapter does
  (`rust/crates/ccusage/src/adapter/codex/parser.rs`). OpenAI convention:
  `input_tokens` includes the cached ones (`TokenUsage::non_cached_input` is
  `input_tokens - cached_input_tokens`), so `prompt_tokens` = `input_tokens`,
  `cached_tokens` = `cached_input_tokens`; `cache_write_input_tokens`, when a version
  logs it, is `cache_write_tokens`; `output_tokens` includes reasoning.
* Model: `info.model` / `payload.model` when the event names one (ccusage's fixtures do),
  else the latest ``turn_context``'s `model`.
* Body (``openai-responses``): ``{"model", "input": [...]}`` rebuilt from the
  ``response_item`` lines before the call: the history so far, without the call's own
  output (the model-output items -- reasoning, assistant messages, tool calls -- logged
  after the last input item and before the event), made what Codex sends
  (`codex-rs/core/src/context_manager/normalize.rs`, `client_common.rs`): a call with
  no output is followed by an ``"aborted"`` one, an output with no call is dropped, and
  next to the freeform apply_patch tool JSON exec outputs are sent as Codex's structured
  text. `instructions` is the session's `base_instructions` when logged. Reasoning is
  the current turn's only: the Responses API reads the reasoning items after the last
  user turn boundary and drops those of earlier turns (Codex sends them all back
  encrypted and counts them out of the server's usage,
  `ContextManager::get_non_last_reasoning_items_tokens`; a boundary is a user message
  that is not context Codex injects -- `<environment_context>`, `<user_instructions>`,
  AGENTS.md, ... -- `is_user_turn_boundary` in `context_manager/history.rs`), so the
  body leaves them out and the logged prompt shrinks at a new user turn.
  `metadata.approximate` lists what the log lacks: ``tools`` always; ``instructions``
  when not logged; ``reasoning`` / ``compaction-item`` when the input holds encrypted
  reasoning / a remote compaction item (sent back, content unknown);
  ``history-after-compaction`` when a local compaction logged only its summary (the
  history is then that summary as one user message). How many logged tokens that is,
  per request, is `Tokens.unrebuilt_tokens` once tokenized. A call with no
  ``response_item`` before it (a log of token counts
  alone, as ccusage's fixtures are) has no body. A ``compacted`` line replaces the
  history and the next call carries `metadata.compaction` (``local`` / ``remote``,
  with its line); its body then holds the compaction item or summary that
  `model.keys.compaction_marker` recognises.
* Session events (`model.SessionEvent`, kept with the next call): ``compaction`` at a
  ``compacted`` line (or, without one, a ``context_compacted`` event: one per
  boundary); ``model-change`` when a call's model differs from the previous call's (the
  line is the ``turn_context`` that named it); ``client-upgrade`` when a later
  ``session_meta`` of the same session (a resume) names another `cli_version` (later
  calls carry the new one); ``settings-change`` when the reasoning effort (the
  ``turn_context``'s `effort`) differs from the previous call's -- OpenAI's prompt
  header holds it, and its cache diagnostics name ``reasoning_effort_changed`` a miss
  reason; ``history-rewrite`` when a call's input lacks reasoning
  items the previous call sent (a new user turn: the API dropped them; the line is the
  user message).
* Sessions: `session_key` is the first ``session_meta`` `id` (``codex.session_meta``),
  else the uuid in the file name (``codex.file``). A forked or sub-agent rollout starts
  by replaying its parent's history, `token_count` events included, with the parent's
  cumulative totals: the record key of an event with totals is those totals (not the
  file or time), so the replayed copy has the parent call's id and is stored once;
  `prefer` keeps the earlier-timed copy (the original; on equal times the one whose file
  name, which begins with the session's start time, sorts first) whatever order files are
  read in.
* Not requests, not reported: every other event. Reported as skips: invalid JSON, lines
  that are not objects of the rollout shape, a ``token_count`` whose `info` has no usage
  object, and a well-formed line of a type this reader does not know (0.146's
  ``world_state`` and ``inter_agent_communication_metadata``: what they add to a prompt is
  not rebuilt), which the skip names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from prefixscope.ingest.normalize.fields import parse_time, to_int, to_text
from prefixscope.ingest.readers import BadRecord
from prefixscope.ingest.readers.json import iter_json_records
from prefixscope.ingest.source import Probe, Source
from prefixscope.model import Record, Request, SessionEvent, Skip, Usage

NAME = "codex"
DESCRIPTION = ("OpenAI Codex CLI rollouts (~/.codex/sessions/**/rollout-*.jsonl): usage per "
               "model call, bodies rebuilt")

LINE_TYPES = frozenset({"session_meta", "turn_context", "response_item", "event_msg",
                        "compacted"})
# ResponseItem types the model produces (a call's output); everything else is input.
_OUTPUT_ITEM_TYPES = frozenset({"reasoning", "function_call", "custom_tool_call",
                                "local_shell_call", "web_search_call", "image_generation_call",
                                "tool_search_call"})
_NOT_SENT_ITEM_TYPES = frozenset({"ghost_snapshot"})  # undo snapshots: never in a request
_USAGE_FIELDS = ("input_tokens", "cached_input_tokens", "cache_write_input_tokens",
                 "output_tokens", "reasoning_output_tokens", "total_tokens")
_META_KEYS = ("cwd", "originator", "cli_version", "source", "model_provider",
              "forked_from_id")
_TURN_KEYS = ("approval_policy", "sandbox_policy", "effort")
# Function tools whose JSON output Codex re-renders as text next to freeform apply_patch
# (`is_shell_tool_name` in codex-rs/core/src/client_common.rs), with apply_patch itself.
_RESERIALIZED_CALLS = frozenset({"shell", "container.exec", "apply_patch"})
# Calls Codex pairs with an output before sending (`ensure_call_outputs_present`):
# call item type -> the output item type synthesised when the history lacks one.
_CALL_OUTPUTS = {"function_call": "function_call_output",
                 "custom_tool_call": "custom_tool_call_output",
                 "local_shell_call": "function_call_output"}
_ABORTED = "aborted"  # the synthesised output's text
# A user message whose text starts with one of these is context Codex injects, not a user
# turn (`is_contextual_user_message_content` / `is_contextual_user_fragment` in codex-rs:
# user instructions, AGENTS.md, the environment context, skills, a user shell command, an
# aborted turn's marker, a sub-agent's notification), so it is no turn boundary.
_CONTEXTUAL_USER_PREFIXES = ("<user_instructions>", "<environment_context>", "<skill>",
                             "<skills_instructions>", "<user_shell_command>", "<turn_aborted>",
                             "<subagent_notification>", "# agents.md instructions for")
_UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)


def sniff(probe: Probe) -> bool:
    """The first object line has the rollout shape: `type` one of `RolloutItem`'s tags,
    a `payload` object and a `timestamp` (an event line also names its event type)."""
    for rec in probe.head_lines:
        return is_rollout_line(rec)
    return False


def is_rollout_line(rec: Any) -> bool:
    if not isinstance(rec, dict) or not isinstance(rec.get("type"), str) \
            or rec["type"] not in LINE_TYPES:
        return False
    payload = rec.get("payload")
    if not isinstance(payload, dict) or "timestamp" not in rec:
        return False
    return rec["type"] != "event_msg" or isinstance(payload.get("type"), str)


def _not_read(rec: Any) -> str:
    """Why a line that `is_rollout_line` refuses is skipped: a well-formed line of a type
    newer Codex versions write (0.146's ``world_state``) is named, not called malformed."""
    if isinstance(rec, dict) and isinstance(rec.get("type"), str) \
            and rec["type"] not in LINE_TYPES and isinstance(rec.get("payload"), dict) \
            and "timestamp" in rec:
        return (f"a Codex `{rec['type']}` line: a line type this reader does not read "
                f"(a newer Codex's), passed over")
    return "not a Codex rollout line ({timestamp, type, payload})"


Counts = tuple[int | None, ...]


def _counts(value: Any) -> Counts | None:
    if not isinstance(value, dict):
        return None
    counts = tuple(to_int(value.get(k)) for k in _USAGE_FIELDS)
    return None if all(c is None for c in counts) else counts


def _diff(total: Counts, previous: Counts | None) -> Counts:
    if previous is None:
        return total
    return tuple(None if t is None else max(t - (p or 0), 0)
                 for t, p in zip(total, previous, strict=True))


def _usage(counts: Counts, semantics: str) -> Usage:
    inp, cached, write, out, _reasoning, _total = counts
    return Usage(prompt_tokens=inp, cached_tokens=cached, cache_write_tokens=write,
                 output_tokens=out, semantics=semantics)


def _kind(item: dict[str, Any]) -> str | None:
    """An item's `type` when it is a string (a damaged log's list is no type)."""
    kind = item.get("type")
    return kind if isinstance(kind, str) else None


def _is_output(item: dict[str, Any]) -> bool:
    kind = _kind(item)
    if kind == "message":
        return item.get("role") == "assistant"
    return kind in _OUTPUT_ITEM_TYPES


@dataclass
class _State:
    """What the lines read so far say: the session, the turn, the history sent next."""

    session: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    instructions: str | None = None
    model: str | None = None
    turn: dict[str, Any] = field(default_factory=dict)
    items: list[Any] = field(default_factory=list)
    output_start: int | None = None  # index in items of the pending call's first output
    previous_total: Counts | None = None
    compaction: dict[str, Any] | None = None  # a compaction not yet followed by a call
    summary_only: bool = False  # the history is a local compaction's summary alone
    freeform_patch: bool = False  # a custom (freeform) apply_patch call was seen
    shell_calls: set[str] = field(default_factory=set)  # call ids whose output Codex re-renders
    events: list[SessionEvent] = field(default_factory=list)  # recorded since the last call
    model_at: tuple[Any, int] | None = None  # (time, line) of the turn_context naming the model
    effort: str | None = None  # the latest turn_context's reasoning effort
    effort_at: tuple[Any, int] | None = None  # (time, line) of the turn_context naming it
    last_effort: str | None = None  # the previous call's reasoning effort
    boundary_at: tuple[Any, int] | None = None  # (time, line) of the last user turn boundary
    last_model: str | None = None  # the previous call's model
    sent_reasoning: set[int] = field(default_factory=set)  # indices in items of the reasoning
    # items the previous call's input held (after the API's drop of earlier turns' reasoning)
    sent: _SentInput = field(default_factory=lambda: _SentInput())  # the input sent so far

    def read_meta(self, payload: dict[str, Any], when: Any = None, line: int = 0) -> None:
        if self.session is not None:
            # a fork replays its parent's meta later: the file's own comes first. The same
            # session's meta again is a resume, by the Codex release that wrote it
            version = to_text(payload.get("cli_version"))
            before = to_text(self.meta.get("cli_version"))
            if to_text(payload.get("id") or payload.get("session_id")) == self.session \
                    and version and before and version != before:
                self.events.append(SessionEvent("client-upgrade", f"{before} -> {version}",
                                                parse_time(when), line))
                self.meta["cli_version"] = version
            return
        self.session = to_text(payload.get("id") or payload.get("session_id"))
        self.meta = {k: payload[k] for k in _META_KEYS if payload.get(k) is not None}
        base = payload.get("base_instructions")
        if isinstance(base, dict):
            base = base.get("text")
        if isinstance(base, str) and base:
            self.instructions = base

    def read_turn(self, payload: dict[str, Any], when: Any = None, line: int = 0) -> None:
        model = to_text(payload.get("model"))
        if model:
            if model != self.model:
                self.model_at = (when, line)
            self.model = model
        effort = to_text(payload.get("effort"))
        if effort:
            if effort != self.effort:
                self.effort_at = (when, line)
            self.effort = effort
        self.turn = {k: payload[k] for k in _TURN_KEYS if payload.get(k) is not None}

    def read_item(self, item: dict[str, Any], when: Any = None, line: int = 0) -> None:
        if not isinstance(item, dict) or _kind(item) in _NOT_SENT_ITEM_TYPES:
            return
        if is_turn_boundary(item):
            self.boundary_at = (when, line)
        item = self._as_sent(item)
        self.items.append(item)
        if not _is_output(item):
            # an input item: the outputs logged before it are history (Codex 0.60 logs a
            # call's output items after its token_count, before the next call's input)
            self.output_start = None
        elif self.output_start is None:
            self.output_start = len(self.items) - 1

    def _as_sent(self, item: dict[str, Any]) -> dict[str, Any]:
        """The item as Codex sends it. With the freeform apply_patch tool, Codex sends the
        JSON output (``{"output", "metadata": {exit_code, duration_seconds}}``) of
        apply_patch, ``shell`` / ``container.exec`` and local shell calls as structured
        text (`Prompt::get_formatted_input`, ``reserialize_shell_outputs``)."""
        kind = _kind(item)
        call_id = item.get("call_id")
        if kind == "custom_tool_call" and item.get("name") == "apply_patch":
            self.freeform_patch = True
            self.shell_calls.add(str(call_id))
        elif (kind == "function_call" and isinstance(item.get("name"), str)
              and item["name"] in _RESERIALIZED_CALLS) \
                or kind == "local_shell_call":
            self.shell_calls.add(str(call_id if call_id is not None else item.get("id")))
        elif kind in ("function_call_output", "custom_tool_call_output") \
                and self.freeform_patch and str(call_id) in self.shell_calls:
            self.shell_calls.discard(str(call_id))
            text = structured_shell_output(item.get("output"))
            if text is not None:
                return {**item, "output": text}
        return item

    def read_compacted(self, payload: dict[str, Any], line: int, when: Any = None) -> None:
        replacement = payload.get("replacement_history")
        if isinstance(replacement, list):
            self.items = [i for i in replacement
                          if not (isinstance(i, dict) and _kind(i) in _NOT_SENT_ITEM_TYPES)]
            self.summary_only = False
            kind = "remote" if any(isinstance(i, dict) and i.get("type") == "compaction"
                                   for i in self.items) else "local"
        else:
            text = payload.get("message")
            self.items = [{"type": "message", "role": "user",
                           "content": [{"type": "input_text", "text": str(text or "")}]}]
            self.summary_only = True
            kind = "local"
        self.output_start = None
        self.sent_reasoning = set()  # the history was replaced: nothing of it to drop
        self.compaction = {"kind": kind, "line": line,
                           "replacement_history": isinstance(replacement, list)}
        detail = (f"compacted ({kind}: replacement_history of {len(self.items)} items)"
                  if isinstance(replacement, list) else "compacted (local: summary message)")
        self.record_compaction(detail, when, line)

    def record_compaction(self, detail: str, when: Any, line: int) -> None:
        """One compaction per boundary: Codex writes both a ``compacted`` line and a
        ``context_compacted`` event for it."""
        if not any(e.kind == "compaction" for e in self.events):
            self.events.append(SessionEvent("compaction", detail, parse_time(when), line))


def parse(source: Source, probe: Probe) -> Iterator[Record | Skip]:
    state = _State()
    file_session = _file_session(source)
    for place, rec in iter_json_records(source, probe):
        if isinstance(rec, BadRecord):
            yield Skip(place, str(rec))
            continue
        if not is_rollout_line(rec):
            yield Skip(place, _not_read(rec))
            continue
        kind, payload = rec["type"], rec["payload"]
        when = rec.get("timestamp")
        if kind == "session_meta":
            state.read_meta(payload, when, place)
        elif kind == "turn_context":
            state.read_turn(payload, when, place)
        elif kind == "response_item":
            state.read_item(payload, when, place)
        elif kind == "compacted":
            state.read_compacted(payload, place, when)
        elif kind == "event_msg" and payload.get("type") == "context_compacted":
            state.record_compaction("context_compacted event", when, place)
        elif kind == "event_msg" and payload.get("type") == "token_count":
            item = _call(state, rec, payload, place, file_session)
            if item is not None:
                yield item


def _call(state: _State, rec: dict[str, Any], payload: dict[str, Any], line: int,
          file_session: str | None) -> Record | Skip | None:
    info = payload.get("info")
    if not isinstance(info, dict):
        return None  # rate limits only: no call
    total = _counts(info.get("total_token_usage"))
    last = _counts(info.get("last_token_usage"))
    if total is not None and total == state.previous_total:
        return None  # re-emitted counter: the same call again
    if last is not None:
        counts, semantics = last, "codex:last"
    elif total is not None:
        counts, semantics = _diff(total, state.previous_total), "codex:total-diff"
    else:
        return Skip(line, "token_count info without last_token_usage or total_token_usage")
    if total is not None:
        state.previous_total = total
    if not any(counts[:5]):
        return None  # all zero (fill_to_context_window's marker): no call
    request = _request(state, rec, payload, info, line, counts, semantics, file_session)
    state.output_start = None  # the call's output is history now
    state.compaction = None
    state.events = []
    state.last_model = request.model or state.last_model
    state.last_effort = state.effort or state.last_effort
    key_counts = total if total is not None else counts
    key = (f"codex:{key_counts}:{last}" if total is not None
           else f"codex:{request.session_key}:{rec.get('timestamp')}:{counts}")
    return Record(request=request, key=key)


def _request(state: _State, rec: dict[str, Any], payload: dict[str, Any],
             info: dict[str, Any], line: int, counts: Counts, semantics: str,
             file_session: str | None) -> Request:
    end = state.output_start if state.output_start is not None else len(state.items)
    model = to_text(info.get("model")) or to_text(payload.get("model")) or state.model
    body: dict[str, Any] | None = None
    if end:  # a log of token counts alone (no response_item before the call): no body
        body = {"model": model}
        if state.instructions is not None:
            body["instructions"] = state.instructions
        body["input"] = state.sent.upto(state.items, end)
        _note_dropped_reasoning(state, state.sent.reasoning)
    if state.last_model is not None and model is not None and model != state.last_model:
        when, at = state.model_at if state.model_at is not None else (rec.get("timestamp"),
                                                                       line)
        state.events.append(SessionEvent("model-change", f"{state.last_model} -> {model}",
                                         parse_time(when), at))
    if state.last_effort is not None and state.effort is not None \
            and state.effort != state.last_effort:
        when, at = state.effort_at if state.effort_at is not None else (rec.get("timestamp"),
                                                                         line)
        state.events.append(SessionEvent(
            "settings-change", f"reasoning effort {state.last_effort} -> {state.effort}",
            parse_time(when), at))
    approximate = ["tools"]
    if state.instructions is None:
        approximate.append("instructions")
    if state.summary_only:
        approximate.append("history-after-compaction")
    if body is not None:
        if state.sent.reasoning:
            approximate.append("reasoning")
        if state.sent.compactions:
            approximate.append("compaction-item")
    metadata: dict[str, Any] = {**state.meta, **state.turn, "approximate": approximate}
    if counts[4] is not None:
        metadata["reasoning_output_tokens"] = counts[4]
    if counts[5] is not None:
        metadata["total_tokens"] = counts[5]
    window = to_int(info.get("model_context_window"))
    if window is not None:
        metadata["model_context_window"] = window
    if state.compaction is not None:
        metadata["compaction"] = dict(state.compaction)
    session: str | None = state.session
    session_source: str | None = "codex.session_meta"
    if session is None:
        session, session_source = file_session, "codex.file"
    return Request(
        id="", source_format="", source_file="", source_line=line,
        timestamp=parse_time(rec.get("timestamp")),
        endpoint="openai-responses",
        model=model,
        session_key=session, session_key_source=session_source if session else None,
        client=to_text(state.meta.get("originator")) or "codex",
        body=body,
        output=list(state.items[end:]) or None,
        usage=_usage(counts, semantics),
        metadata=metadata,
        events=tuple(sorted(state.events, key=lambda e: e.source_line or 0)),
    )


def _note_dropped_reasoning(state: _State, reasoning: set[int]) -> None:
    """Record a history rewrite when reasoning the previous call's input held is not in this
    one's (a user turn began: the API dropped the reasoning of the turns before it).
    `reasoning`: the indices in `state.items` of the reasoning items this call's input
    holds."""
    dropped = state.sent_reasoning - reasoning
    state.sent_reasoning = set(reasoning)
    if not dropped:
        return
    when, line = state.boundary_at if state.boundary_at is not None else (None, None)
    n = len(dropped)
    state.events.append(SessionEvent(
        "history-rewrite",
        f"a user turn began: the Responses API dropped {n} reasoning item"
        f"{'' if n == 1 else 's'} of the turns before it",
        parse_time(when), line))


class _SentInput:
    """The input Codex sends for ``items[:end]`` -- `paired_outputs` of the items
    `current_turn_reasoning` keeps -- built incrementally: a call's history is the previous
    call's plus what was logged since, so its input is the previous input (shared, not
    rebuilt) plus the new items' part. Walking the whole history every call was O(calls x
    history): 125,000 items visited for the 351 calls of a 2 MB rollout.

    Why the extension equals the whole build, for ``end`` >= the previous call's ``end``
    over the same `items` list (appended to only; a compaction replaces the list and a
    whole build follows):

    * reasoning: `current_turn_reasoning` keeps an item unless it is reasoning at or before
      the last turn boundary. A boundary among the new items drops every reasoning item
      of the previous input (all lie before it) and the new ones before it: the previous
      input without its reasoning items (pairing neither adds nor drops reasoning), then
      the new items filtered. Without a new boundary the previous input's items all stay.
    * pairing: an item's place in `paired_outputs` depends on the (type, call_id) pairs of
      the whole kept history (reasoning carries none, so kept or all items alike): a call
      is followed by a synthesised ``aborted`` output when no output answers it, an
      output is dropped when no call asks for it. New items only add pairs: the previous
      input's part stays as it was unless a new output answers a call that had an
      ``aborted`` one, or a new call asks for an output that was dropped -- then the
      input is built whole (the test holds every call to the whole build)."""

    def __init__(self) -> None:
        self._reset(None)

    def _reset(self, items: list[Any] | None) -> None:
        self.items = items  # the history list the state below is of
        self.done = 0  # items[:done] are in `input`
        self.input: list[Any] = []
        self.boundary = -1  # index of the last turn boundary in items[:done]
        self.called: set[tuple[str, str]] = set()  # output pairs calls in items[:done] ask for
        self.answered: set[tuple[str, str]] = set()  # output pairs in items[:done]
        self.aborted: set[tuple[str, str]] = set()  # pairs given a synthesised output
        self.orphans: set[tuple[str, str]] = set()  # pairs of outputs dropped (no call)
        self.reasoning: set[int] = set()  # indices in items of the input's reasoning items
        self.compactions = 0  # compaction items in the input

    def upto(self, items: list[Any], end: int) -> list[Any]:
        """The input sent for ``items[:end]`` (a new list; earlier inputs are not changed)."""
        if items is not self.items or end < self.done:
            self._reset(items)
        new = items[self.done:end]
        called: set[tuple[str, str]] = set()
        answered: set[tuple[str, str]] = set()
        boundary = self.boundary
        for offset, item in enumerate(new):
            kind, cid = _call_key(item)
            if cid is not None:
                if kind in ("function_call_output", "custom_tool_call_output"):
                    answered.add((kind, cid))
                elif kind in _CALL_OUTPUTS:
                    called.add((_CALL_OUTPUTS[kind], cid))
            if is_turn_boundary(item):
                boundary = self.done + offset
        if (answered & self.aborted) or (called & self.orphans):
            self._reset(items)
            return self.upto(items, end)
        self.called |= called
        self.answered |= answered
        head = self.input
        if boundary >= self.done and self.reasoning:
            head = [i for i in head if not (isinstance(i, dict) and _kind(i) == "reasoning")]
            self.reasoning = set()
        part: list[Any] = []
        for offset, item in enumerate(new):
            index = self.done + offset
            kind, cid = _call_key(item)
            if kind == "reasoning" and isinstance(item, dict):
                if index <= boundary:
                    continue
                self.reasoning.add(index)
            elif kind == "compaction":
                self.compactions += 1
            if cid is not None and kind in ("function_call_output", "custom_tool_call_output") \
                    and (kind, cid) not in self.called:
                self.orphans.add((kind, cid))
                continue
            part.append(item)
            if cid is not None and kind in _CALL_OUTPUTS \
                    and (_CALL_OUTPUTS[kind], cid) not in self.answered:
                self.aborted.add((_CALL_OUTPUTS[kind], cid))
                part.append({"type": _CALL_OUTPUTS[kind], "call_id": cid, "output": _ABORTED})
        self.input = head + part  # a new list: the earlier calls' inputs stay as they were
        self.done = end
        self.boundary = boundary
        return self.input


def is_turn_boundary(item: Any) -> bool:
    """A user message that starts a turn (`is_user_turn_boundary` in codex-rs): a user
    message that is not context Codex injects."""
    if not isinstance(item, dict) or _kind(item) != "message" or item.get("role") != "user":
        return False
    content = item.get("content")
    parts = content if isinstance(content, list) else [content]
    for part in parts:
        text = part.get("text") if isinstance(part, dict) else part
        if isinstance(text, str) and text.lstrip().lower().startswith(_CONTEXTUAL_USER_PREFIXES):
            return False
    return True


def current_turn_reasoning(items: list[Any]) -> list[int]:
    """Indices of `items` the model reads: every item, but reasoning only after the last
    user turn boundary. The Responses API uses the reasoning of the current turn and drops
    the reasoning items of earlier turns from the input (Codex sends them all and counts
    them out of the server's usage: `ContextManager::get_non_last_reasoning_items_tokens`,
    ``is_user_turn_boundary`` in `codex-rs/core/src/context_manager/history.rs`), so a
    prompt shrinks at each user turn by the reasoning of the turns before it."""
    last = max((i for i, item in enumerate(items) if is_turn_boundary(item)), default=-1)
    return [i for i, item in enumerate(items)
            if i > last or not (isinstance(item, dict) and _kind(item) == "reasoning")]


def paired_outputs(items: list[Any]) -> list[Any]:
    """The history as Codex sends it (`ContextManager::normalize_history`): a call with no
    output gets one (``"aborted"``) right after it, an output with no call is dropped."""
    answered: set[tuple[str, str]] = set()
    called: set[tuple[str, str]] = set()
    for item in items:
        kind, cid = _call_key(item)
        if cid is None:
            continue
        if kind in ("function_call_output", "custom_tool_call_output"):
            answered.add((kind, cid))
        elif kind in _CALL_OUTPUTS:
            called.add((_CALL_OUTPUTS[kind], cid))
    out: list[Any] = []
    for item in items:
        kind, cid = _call_key(item)
        if cid is not None and kind in ("function_call_output", "custom_tool_call_output") \
                and (kind, cid) not in called:
            continue
        out.append(item)
        if cid is not None and kind in _CALL_OUTPUTS \
                and (_CALL_OUTPUTS[kind], cid) not in answered:
            out.append({"type": _CALL_OUTPUTS[kind], "call_id": cid, "output": _ABORTED})
    return out


def _call_key(item: Any) -> tuple[str | None, str | None]:
    """(type, call_id) of an item; the id is None unless it is a string (a local shell
    call without `call_id` is never paired: Codex skips it; a damaged one is left as is)."""
    if not isinstance(item, dict):
        return None, None
    cid = item.get("call_id")
    return _kind(item), cid if isinstance(cid, str) else None


def structured_shell_output(raw: Any) -> str | None:
    """Codex's ``build_structured_output`` of a JSON exec output, else None (left as is):
    ``Exit code: N``, ``Wall time: S seconds`` (S as Rust prints an f32),
    ``Total output lines: L`` when the output starts with that header, ``Output:``, the
    output -- joined with newlines."""
    if not isinstance(raw, str):
        return None
    try:
        parsed = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("output"), str):
        return None
    meta = parsed.get("metadata")
    if not isinstance(meta, dict):
        return None
    code, seconds = meta.get("exit_code"), meta.get("duration_seconds")
    if not isinstance(code, int) or isinstance(code, bool) or not -2**31 <= code < 2**31 \
            or not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
        return None
    output = parsed["output"]
    sections = [f"Exit code: {code}", f"Wall time: {_rust_f32(float(seconds))} seconds"]
    header = _TOTAL_LINES_RE.match(output)
    if header is not None:
        sections.append(f"Total output lines: {int(header.group(1))}")
        output = output[header.end():]
        output = output[1:] if output.startswith("\n") else output
    sections += ["Output:", output]
    return "\n".join(sections)


# `strip_total_output_header`: "Total output lines: <u32>\n" at the very start.
_TOTAL_LINES_RE = re.compile(r"Total output lines: (\d{1,10})\n")


def _rust_f32(value: float) -> str:
    """`format!("{}", value as f32)`: the shortest decimal that reads back as the same f32,
    never in exponent form ("0", "0.1", "12.5")."""
    import numpy as np

    f = np.float32(value)
    if not np.isfinite(f):
        return "inf" if f > 0 else "-inf" if f < 0 else "NaN"
    return str(np.format_float_positional(f, unique=True, trim="-"))


def _file_session(source: Source) -> str | None:
    """The uuid in ``rollout-<time>-<uuid>.jsonl``, else the file's stem."""
    if source.path is None:
        return None
    name = PurePath(source.name).name
    found = _UUID_RE.findall(name)
    if found:
        return str(found[-1])
    return name.split(".", 1)[0] or None


def prefer(new: Request, old: Request) -> bool:
    """True when `new`, another copy of the stored call `old` (a fork's replay of its
    parent's history, or the parent read after the fork), is the original: the one logged
    earlier, and on equal times the one in the file whose name sorts first (rollout names
    begin with the session's start time, so the parent's)."""
    if new.timestamp is not None and old.timestamp is not None \
            and new.timestamp != old.timestamp:
        return new.timestamp < old.timestamp
    return PurePath(new.source_file).name < PurePath(old.source_file).name
