"""Claude Code local session transcripts (`~/.claude/projects/<escaped-cwd>/<sessionId>.jsonl`).

Claude Code writes every conversation it has to a JSON-lines transcript
(formats.md §5). The transcript holds no system prompt, no tool definitions and
no billing header, so it cannot be re-rendered; what it does hold is the
provider-reported usage of every API call, per session, which is exactly what
the usage analyses (hit rate by session, cached-token spikes, compaction) need.

Guarantees:

* One request per API call, identified by `message.id` within its session tree (the
  record key is ``msg:<sessionId>:<message.id>``; sub-agents log their parent's
  `sessionId`; lines without one, as in ccusage's fixtures, are keyed
  ``msg:<message.id>``): an assistant line with `message.usage`. A streamed response
  is written as several assistant lines with the same id (one per content block),
  each repeating `usage`. `/btw` side questions (``subagents/agent-aside_question-*``)
  re-log parent messages with the same `message.id` and a new `requestId`: those
  replays are copies of the parent's call, not calls. Of all lines of one message id
  the usage kept is, as ccusage does it (`rust/crates/ccusage/src/adapter/claude/mod.rs`,
  `should_replace_deduped_entry`): a main-conversation line over a sidechain replay,
  then the largest total (input + output + cache read + cache creation; the final
  count of a stream is only on its last line), later lines winning ties. Content
  blocks of the winning `requestId`'s lines are joined into `output`.
* The same call in another file (the parent transcript and the aside's replay, two
  copies of a transcript) has the same id, so the store keeps one row; `prefer` is
  the same rule across files, so the most complete copy wins whatever the order files
  are read in, and re-ingesting a transcript that grew updates its calls.
* Usage is Anthropic-native (`input_tokens` excludes cache reads/writes) and is
  normalized with `normalize.usage.usage_anthropic` (semantics ``anthropic``).
* Not requests, not reported: `user`, `summary`, `system`, `progress`,
  `file-history-snapshot`, `queue-operation`, `permission-mode` and any other typed
  record (new Claude Code versions add types); assistant lines with
  `model: "<synthetic>"` (written locally, never sent) and
  `isApiErrorMessage: true` lines (the API call failed; no usage).
* Reported as skips: invalid JSON, lines that are not JSON objects or are not
  Claude Code records at all, assistant lines without `message`, `message.id` or
  `usage`.
* Sessions: the main conversation's `session_key` is `sessionId`
  (``claude-code.sessionId``; else the file name, ``claude-code.file``). A sub-agent
  transcript (``<sessionId>/subagents/agent-<id>.jsonl``, compaction's
  ``agent-acompact-*`` included) and sidechain lines (`isSidechain: true`) of the main
  file are sessions of their own, ``<sessionId>/agent-<id>`` (the file's name, else
  `agentId`), with `parent_key` = the main session. `native_id` is `message.id`.
  `body` is None; `endpoint` is ``anthropic-messages`` because that is the protocol
  Claude Code speaks. `parentUuid` points at transcript lines, not at requests, so
  it is kept in metadata.
* Detection looks past records that say nothing of the file (``permission-mode``,
  ``file-history-snapshot``, ``summary``, titles, ...) to the first record that does.

* Session events (`model.SessionEvent`, kept with the first call of the same session after
  them in the file): ``compaction`` from a ``{"type": "system", "subtype":
  "compact_boundary", "compactMetadata": {...}}`` record (or, without one before the
  call, an ``isCompactSummary`` user message); ``history-rewrite`` from a
  ``microcompact_boundary`` system record (old tool results cleared from the history);
  ``tool-set`` from an attachment record
  whose ``attachment.type`` is ``deferred_tools_delta`` or ``mcp_instructions_delta``
  and names tools / servers added or removed; ``model-change`` when a call's
  `message.model` differs from the previous call's in its session; ``client-upgrade``
  when its `version` (the Claude Code release) does; ``compaction`` on every call of a
  compaction's summarizer file (``subagents/agent-acompact-*.jsonl``: the conversation
  sent to be summarized, whose missed tokens are the compaction's).
* What the call sent last (metadata ``last_message``): ``tool_result`` when the
  conversation's user line before it holds a ``tool_result`` block (the agent's tool
  loop), ``user`` for a human's message (a new turn); absent when no user line precedes it.
* The provider's own verdict on a miss (Claude Code >= 2.1.150 writes the API's
  ``message.diagnostics.cache_miss_reason: {"type": ..., "cache_missed_input_tokens":
  ...}``) is kept in metadata as ``cache_miss_reason`` (its type) and
  ``cache_missed_input_tokens``.

Lines are read in one pass; the requests of a file are kept until its end
because the lines of one streamed response need not be adjacent. A file cut short (a
truncated gzip, an I/O error part-way) keeps the calls read before the cut, and the cut
is reported as one skip ("read failed part-way, ..."), as streaming formats do.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

from prefixscope.ingest.normalize.fields import parse_time, to_text
from prefixscope.ingest.normalize.usage import usage_anthropic
from prefixscope.ingest.readers import BadRecord
from prefixscope.ingest.readers.json import iter_json_records
from prefixscope.ingest.source import READ_ERRORS, Probe, Source
from prefixscope.model import Record, Request, SessionEvent, Skip, Usage

NAME = "claude-code"
DESCRIPTION = "Claude Code session transcripts (~/.claude/projects/**/*.jsonl): usage per API call"

SYNTHETIC_MODEL = "<synthetic>"
# Record types whose first line identifies a transcript (with the keys that make them specific).
_TRANSCRIPT_LINE_TYPES = frozenset({"user", "assistant", "system", "progress", "attachment"})
# Records that are no call and say little of the file: detection looks past them.
_NON_CALL_TYPES = frozenset({
    "permission-mode", "file-history-snapshot", "summary", "queue-operation", "custom-title",
    "ai-title", "agent-name", "cost-state", "last-prompt", "mode", "worktree-state", "pr-link",
    "tag"})
_METADATA_KEYS = ("version", "isSidechain", "agentId", "cwd", "gitBranch", "uuid", "parentUuid",
                  "userType", "requestId", "slug", "costUSD")
_SUBAGENTS_DIR = "subagents"
_SUMMARIZER = "agent-acompact-"  # a compaction's summarizer call: a sub-agent file of its own
_PROJECTS_DIR = "projects"


def is_companion(path: Path) -> bool:
    """A sub-agent's sidecar (``<session>/subagents/agent-<id>.meta.json``: its agent type,
    no call): read with nothing, passed over in a walk and counted as ignored."""
    return path.parent.name == _SUBAGENTS_DIR and path.name.startswith("agent-") \
        and path.name.endswith(".meta.json")


def sniff(probe: Probe) -> bool:
    """The first record that is not a known non-call record decides (a JSON array is never a
    transcript); a file of non-call records only is a transcript when one is specific."""
    specific = False
    for rec in probe.head_lines:
        if rec.get("type") not in _NON_CALL_TYPES:
            return is_transcript_line(rec)
        specific = specific or _is_specific_non_call(rec)
    return specific


def is_transcript_line(rec: dict[str, Any]) -> bool:
    """True for a line only a Claude Code transcript has (typed, or ccusage's untyped shape)."""
    rtype = rec.get("type")
    if rtype in _TRANSCRIPT_LINE_TYPES:
        return isinstance(rec.get("sessionId"), str) and ("uuid" in rec or "parentUuid" in rec)
    if rtype in _NON_CALL_TYPES:
        return _is_specific_non_call(rec)
    if rtype is None:
        return _is_untyped_assistant(rec)
    return False


def _is_specific_non_call(rec: dict[str, Any]) -> bool:
    rtype = rec.get("type")
    if rtype == "summary":
        return "leafUuid" in rec and "summary" in rec
    if rtype == "file-history-snapshot":
        return "messageId" in rec and "snapshot" in rec
    if rtype == "queue-operation":
        return isinstance(rec.get("sessionId"), str) and "operation" in rec
    if rtype == "permission-mode":
        return isinstance(rec.get("sessionId"), str) and "permissionMode" in rec
    return False


def _is_untyped_assistant(rec: dict[str, Any]) -> bool:
    """ccusage's minimal lines: no `type`, a `message` with `id` and `usage`, and a
    `requestId`, `sessionId` or `costUSD` (its loader needs no more; the role is optional)."""
    message = rec.get("message")
    if not isinstance(message, dict) or message.get("role") not in (None, "assistant"):
        return False
    if message.get("role") == "assistant" and isinstance(rec.get("sessionId"), str) \
            and "requestId" in rec:
        return True
    return (isinstance(message.get("usage"), dict) and "id" in message
            and isinstance(rec.get("timestamp"), str)
            and any(k in rec for k in ("requestId", "sessionId", "costUSD")))


@dataclass
class _Copy:
    """The lines of one (`message.id`, `requestId`): one copy of a call, streamed."""

    line: int
    first: dict[str, Any]
    message: dict[str, Any]
    usage: dict[str, Any]
    content: list[Any] = field(default_factory=list)
    lines: int = 1
    verdict: dict[str, Any] | None = None  # message.diagnostics.cache_miss_reason
    last_message: str | None = None  # `_user_kind` of the conversation's last user line

    def add(self, message: dict[str, Any], usage: dict[str, Any]) -> None:
        self.lines += 1
        self.content.extend(_content_blocks(message))
        self.verdict = self.verdict or _verdict(message)
        if _usage_total(usage) >= _usage_total(self.usage):  # later lines win ties
            self.usage = usage
            self.message = message

    @property
    def sidechain(self) -> bool:
        return self.first.get("isSidechain") is True


def _usage_total(usage: dict[str, Any]) -> int:
    """ccusage's completeness measure: input + output + cache creation + cache read."""
    counted = usage_anthropic(usage)
    return (counted.prompt_tokens or 0) + (counted.output_tokens or 0)


def _better(copy: _Copy, than: _Copy) -> bool:
    """The main conversation's copy over a sidechain replay, then the larger total."""
    if copy.sidechain != than.sidechain:
        return than.sidechain
    return _usage_total(copy.usage) > _usage_total(than.usage)


def parse(source: Source, probe: Probe) -> Iterator[Record | Skip]:
    calls: dict[str, dict[str | None, _Copy]] = {}
    noted: list[_Noted] = []
    cut: Skip | None = None
    try:
        yield from _read_calls(source, probe, calls, noted)
    except READ_ERRORS as exc:  # a damaged gzip, an I/O error: keep the calls read before it
        cut = Skip(None, f"read failed part-way, the rest of the file is lost: {_reason(exc)}")
    place_of = _FilePlace.of(source)
    chosen: list[tuple[str, _Copy, int]] = []
    for message_id, copies in calls.items():
        best = None
        for copy in copies.values():  # first seen first: ties keep the earlier copy
            if best is None or _better(copy, best):
                best = copy
        assert best is not None
        chosen.append((message_id, best, len(copies)))
    events = _session_events(chosen, noted)
    if place_of.subagent and (place_of.stem or "").startswith(_SUMMARIZER):
        events = _summarizer_events(chosen, events, str(place_of.stem))
    for message_id, call, n_copies in chosen:
        yield _record(message_id, call, n_copies, place_of, events.get(message_id, ()))
    if cut is not None:
        yield cut


@dataclass(frozen=True, slots=True)
class _Noted:
    """A session event read from a non-call line, before it is given to a call."""

    session: tuple[str | None, str | None]  # `_line_session` of its line
    event: SessionEvent


def _line_session(rec: dict[str, Any]) -> tuple[str | None, str | None]:
    """(sessionId, sidechain agent) of a line: the calls and events of one conversation."""
    side = to_text(rec.get("agentId")) or "sidechain" if rec.get("isSidechain") is True \
        else None
    return to_text(rec.get("sessionId")), side


def _note(rec: dict[str, Any], place: int) -> SessionEvent | None:
    """The session event a non-call line records, if any."""
    rtype = rec.get("type")
    when = parse_time(rec.get("timestamp"))
    if rtype == "system" and rec.get("subtype") == "compact_boundary":
        meta = rec.get("compactMetadata")
        meta = meta if isinstance(meta, dict) else {}
        said = [f"{k} {meta[k]}" for k in ("trigger", "preTokens") if meta.get(k) is not None]
        return SessionEvent("compaction", "compact_boundary" + (
            f" ({', '.join(map(str, said))})" if said else ""), when, place)
    if rtype == "system" and rec.get("subtype") == "microcompact_boundary":
        meta = rec.get("microcompactMetadata")
        meta = meta if isinstance(meta, dict) else {}
        cleared = meta.get("compactedToolIds")
        said = [f"{k} {meta[k]}" for k in ("trigger", "tokensSaved") if meta.get(k) is not None]
        if isinstance(cleared, list):
            said.append(f"{len(cleared)} tool results cleared")
        return SessionEvent("history-rewrite", "microcompact_boundary" + (
            f" ({', '.join(map(str, said))})" if said else ""), when, place)
    if rtype == "user" and rec.get("isCompactSummary") is True:
        return SessionEvent("compaction", "isCompactSummary user message", when, place)
    attachment = rec.get("attachment") if rtype == "attachment" else None
    if isinstance(attachment, dict) and attachment.get("type") in _TOOL_DELTAS:
        changed = [f"+{n}" for n in _names(attachment.get("addedNames"))] + \
            [f"-{n}" for n in _names(attachment.get("removedNames"))]
        if changed:
            shown = " ".join(changed[:8]) + (f" (+{len(changed) - 8} more)"
                                              if len(changed) > 8 else "")
            return SessionEvent("tool-set", f"{attachment['type']}: {shown}", when, place)
    return None


_TOOL_DELTAS = ("deferred_tools_delta", "mcp_instructions_delta")


def _names(value: Any) -> list[str]:
    return [str(v) for v in value if isinstance(v, str | int)] if isinstance(value, list) \
        else []


def _session_events(chosen: list[tuple[str, _Copy, int]], noted: list[_Noted]
                    ) -> dict[str, tuple[SessionEvent, ...]]:
    """message id -> the events before it in its session: those noted on lines since the
    session's previous call, then another model or client version than that call's."""
    by_session: dict[tuple[str | None, str | None], list[tuple[int, str, _Copy]]] = {}
    for message_id, copy, _ in chosen:
        by_session.setdefault(_line_session(copy.first), []).append(
            (copy.line, message_id, copy))
    pending: dict[tuple[str | None, str | None], list[SessionEvent]] = {}
    for note in noted:
        pending.setdefault(note.session, []).append(note.event)
    out: dict[str, tuple[SessionEvent, ...]] = {}
    for session, calls in by_session.items():
        calls.sort(key=lambda c: c[0])
        waiting = sorted(pending.get(session, []), key=lambda e: e.source_line or 0)
        before: _Copy | None = None
        at = 0
        for line, message_id, copy in calls:
            events: list[SessionEvent] = []
            while at < len(waiting) and (waiting[at].source_line or 0) < line:
                if waiting[at].kind != "compaction" or not any(
                        e.kind == "compaction" for e in events):  # one per compaction
                    events.append(waiting[at])
                at += 1
            if before is not None:
                when = parse_time(copy.first.get("timestamp"))
                for kind, old, new in (
                        ("model-change", _model(before), _model(copy)),
                        ("client-upgrade", to_text(before.first.get("version")),
                         to_text(copy.first.get("version")))):
                    if old and new and old != new:
                        events.append(SessionEvent(kind, f"{old} -> {new}", when, line))
            if events:
                out[message_id] = tuple(events)
            before = copy
    return out


def _summarizer_events(chosen: list[tuple[str, _Copy, int]],
                       events: dict[str, tuple[SessionEvent, ...]], stem: str
                       ) -> dict[str, tuple[SessionEvent, ...]]:
    """The calls of a compaction's summarizer (``subagents/agent-acompact-*.jsonl``: Claude
    Code sends the conversation to be summarized from a sub-agent file of its own) are the
    compaction's: each carries a recorded ``compaction`` (its missed tokens are the
    compaction's, not a new session's cold start)."""
    out = dict(events)
    for message_id, copy, _ in chosen:
        have = out.get(message_id, ())
        if not any(e.kind == "compaction" for e in have):
            out[message_id] = (SessionEvent(
                "compaction", f"the compaction's summarizer call ({stem})",
                parse_time(copy.first.get("timestamp")), copy.line), *have)
    return out


def _model(copy: _Copy) -> str | None:
    return to_text(copy.message.get("model")) or to_text(copy.first["message"].get("model"))


def _verdict(message: dict[str, Any]) -> dict[str, Any] | None:
    diagnostics = message.get("diagnostics")
    verdict = diagnostics.get("cache_miss_reason") if isinstance(diagnostics, dict) else None
    return verdict if isinstance(verdict, dict) and to_text(verdict.get("type")) else None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _read_calls(source: Source, probe: Probe, calls: dict[str, dict[str | None, _Copy]],
                noted: list[_Noted]) -> Iterator[Skip]:
    """Every line into `calls` (message id -> requestId -> copy) and the session events of
    the other lines into `noted`; the skips as they come."""
    last_user: dict[tuple[str | None, str | None], str] = {}  # conversation -> its last
    for place, rec in iter_json_records(source, probe):
        kind = _classify_line(rec)
        if kind is None:
            if isinstance(rec, dict) and rec.get("type") == "user":
                last_user[_line_session(rec)] = _user_kind(rec)
            event = _note(rec, place) if isinstance(rec, dict) else None
            if event is not None:
                noted.append(_Noted(_line_session(rec), event))
            continue
        if isinstance(kind, str):
            yield Skip(place, kind)
            continue
        message, usage = kind
        copies = calls.setdefault(str(message["id"]), {})
        request_id = _request_id(rec)
        copy = copies.get(request_id)
        if copy is None:
            copies[request_id] = _Copy(place, rec, message, usage, _content_blocks(message),
                                       verdict=_verdict(message),
                                       last_message=last_user.get(_line_session(rec)))
        else:
            copy.add(message, usage)


def _user_kind(rec: dict[str, Any]) -> str:
    """What a user line sends as the call's last message: ``tool_result`` (a tool's output:
    the agent's tool loop) or ``user`` (a human's message)."""
    message = rec.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result"
                                         for b in content):
        return "tool_result"
    return "user"


def _classify_line(rec: Any) -> tuple[dict[str, Any], dict[str, Any]] | str | None:
    """(message, usage) of a request line; a skip reason; None for a line that is no request."""
    if isinstance(rec, BadRecord):
        return str(rec)
    if not isinstance(rec, dict):
        return f"line is a JSON {type(rec).__name__}, not a transcript record"
    rtype = rec.get("type")
    if rtype is None and not _is_untyped_assistant(rec):
        return "not a Claude Code transcript record (no `type` and no assistant `message`)"
    if rtype not in (None, "assistant"):
        return None  # user / summary / system / progress / snapshots / unknown new types
    message = rec.get("message")
    if not isinstance(message, dict):
        return "assistant line without a `message` object"
    if message.get("model") == SYNTHETIC_MODEL or rec.get("isApiErrorMessage") is True:
        return None  # written locally / failed call: never a billed request
    if not message.get("id"):
        return "assistant message without `message.id`"
    usage = message.get("usage")
    if not isinstance(usage, dict):
        return "assistant message without `usage`"
    return message, usage


def _request_id(rec: dict[str, Any]) -> str | None:
    value = rec.get("requestId")
    return str(value) if value not in (None, "") else None


def _content_blocks(message: dict[str, Any]) -> list[Any]:
    content = message.get("content")
    if isinstance(content, list):
        return list(content)
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return []


@dataclass(frozen=True)
class _FilePlace:
    """What the transcript's path says (the layouts ccusage reads,
    `rust/crates/ccusage/src/adapter/claude/paths.rs`): the file's stem; the session the
    path names (``projects/<project>/<session>.jsonl``, ``<session>/<file>.jsonl``); and,
    for ``<session>/subagents/<file>.jsonl``, that the file is a sub-agent's."""

    stem: str | None
    path_session: str | None
    subagent: bool

    @classmethod
    def of(cls, source: Source) -> _FilePlace:
        if source.path is None:
            return cls(None, None, False)
        path = PurePath(source.name)
        stem = path.name.split(".", 1)[0] or None
        subagent = path.parent.name == _SUBAGENTS_DIR and len(path.parts) >= 3
        if subagent:
            return cls(stem, path.parent.parent.name or None, True)
        parts = path.parts
        nested = (len(parts) >= 4 and _PROJECTS_DIR in parts
                  and len(parts) - 1 - max(i for i, p in enumerate(parts)
                                           if p == _PROJECTS_DIR) >= 3)
        return cls(stem, path.parent.name if nested else stem, False)


def _session(first: dict[str, Any],
             place: _FilePlace) -> tuple[str | None, str | None, str | None]:
    """(session key, its source, parent key): a sub-agent's own session under the main one."""
    main = to_text(first.get("sessionId"))
    main_source = "claude-code.sessionId" if main else None
    if main is None and place.path_session:
        main, main_source = place.path_session, "claude-code.file"
    if place.subagent and place.stem:
        return f"{main}/{place.stem}", "claude-code.subagent-file", main
    if first.get("isSidechain") is True:
        agent = to_text(first.get("agentId"))
        name = f"agent-{agent}" if agent else "sidechain"
        return f"{main}/{name}", "claude-code.isSidechain", main
    return main, main_source, None


def _record(message_id: str, call: _Copy, copies: int, place: _FilePlace,
            events: tuple[SessionEvent, ...] = ()) -> Record:
    first = call.first
    session_key, session_source, parent_key = _session(first, place)
    metadata = {k: first[k] for k in _METADATA_KEYS if first.get(k) is not None}
    for key in ("stop_reason", "service_tier"):
        value = call.message.get(key) if key == "stop_reason" else call.usage.get(key)
        if value is not None:
            metadata[key] = value
    if call.lines > 1:
        metadata["streamed_lines"] = call.lines
    if call.last_message is not None:
        metadata["last_message"] = call.last_message
    if copies > 1:
        metadata["copies"] = copies  # the same message id under other requestIds (replays)
    if call.verdict is not None:
        metadata["cache_miss_reason"] = to_text(call.verdict.get("type"))
        missed = call.verdict.get("cache_missed_input_tokens")
        if isinstance(missed, int) and not isinstance(missed, bool) and missed >= 0:
            metadata["cache_missed_input_tokens"] = missed
    request = Request(
        id="", source_format="", source_file="", source_line=call.line,
        timestamp=parse_time(first.get("timestamp")),
        endpoint="anthropic-messages",
        model=call.message.get("model") or first["message"].get("model"),
        session_key=session_key, session_key_source=session_source, parent_key=parent_key,
        client="claude-code",
        native_id=message_id,
        body=None,
        output={"role": "assistant", "content": call.content},
        usage=usage_anthropic(call.usage),
        metadata=metadata,
        events=events,
    )
    tree = to_text(first.get("sessionId"))
    return Record(request=request, key=f"msg:{tree}:{message_id}" if tree else f"msg:{message_id}")


def prefer(new: Request, old: Request) -> bool:
    """True when `new`, a copy of the stored call `old` read from another file (or a grown
    transcript), should replace it: the main conversation's copy over a sidechain's, then
    the larger usage total; on a tie the stored copy stays."""
    new_side, old_side = _is_side(new), _is_side(old)
    if new_side != old_side:
        return old_side
    return _total(new.usage) > _total(old.usage)


def _is_side(request: Request) -> bool:
    return request.parent_key is not None or request.metadata.get("isSidechain") is True


def _total(usage: Usage) -> int:
    return (usage.prompt_tokens or 0) + (usage.output_tokens or 0)
