"""Google Gemini CLI chat recordings (`~/.gemini/tmp/<project hash>/chats/session-*.jsonl`).

Gemini CLI records every conversation it has (`ChatRecordingService`) so that `/resume`
can reload it. Like a Claude Code transcript it is the agent's own log: it holds the
usage the Gemini API reported for each model response and, unlike Claude Code's, the
turns the next request was built from (user messages, model text, tool calls with their
results), so the history before each call can be rebuilt; what it lacks is the system
instruction and the tool declarations.

The shape, from the Gemini CLI source (google-gemini/gemini-cli,
`packages/core/src/services/chatRecordingService.ts` and `chatRecordingTypes.ts`):

* current versions append JSON lines to ``session-<YYYY-MM-DDTHH-MM>-<8 hex>.jsonl``
  (a sub-agent's to ``chats/<parent session id>/<session id>.jsonl``): a first
  `PartialMetadataRecord` line `{sessionId, projectHash, startTime, lastUpdated, kind,
  directories}`; then `MessageRecord` lines `{id, timestamp, type, content,
  displayContent}`, `type` one of ``user`` / ``gemini`` / ``info`` / ``error`` /
  ``warning``, a ``gemini`` message adding `model`, `thoughts`, `toolCalls`
  (`ToolCallRecord {id, name, args, result, status, timestamp}`, `result` the
  `functionResponse` parts sent back) and `tokens` (`TokensSummary {input, output, cached,
  thoughts, tool, total}` = the response's `usageMetadata` `promptTokenCount`,
  `candidatesTokenCount`, `cachedContentTokenCount`, `thoughtsTokenCount`,
  `toolUsePromptTokenCount`, `totalTokenCount`); `{"$set": {...}}` metadata updates
  (`updateMessagesFromHistory` sets `messages`, the whole history after masking or
  compression); `{"$rewindTo": id}` (the conversation was rewound to before that message).
  A message is re-appended whole each time it changes (tokens or tool calls added):
  the last line of an id is its current state (`pushMessage`);
* older versions wrote one JSON document ``session-*.json``, the `ConversationRecord`
  `{sessionId, projectHash, startTime, lastUpdated, messages: [...]}` (the legacy format
  ccusage's Gemini adapter also reads, `rust/crates/ccusage/src/adapter/gemini/parser.rs`).
  Resuming one copies it into a ``.jsonl`` next to it: the same messages, same ids.

Guarantees:

* One request per model response: a ``gemini`` message with `tokens` or a `model`
  (synthetic messages -- a compression summary recorded with no model -- are none),
  identified by its id within the session (record key ``gemini-cli:<sessionId>:<id>``),
  so the re-appended versions of a message, the `.json` and its resumed `.jsonl`, and a
  rewound call are each stored once. A rewind removes messages from the history, not
  the calls that were made (they were billed).
* Usage from `tokens`: `input` (`promptTokenCount`) includes the cached tokens, as the
  Gemini API defines it, so `prompt_tokens` = `input` + `tool` (tool-use prompt tokens
  are input too), `cached_tokens` = `cached`, `output_tokens` = `output` + `thoughts`
  (reasoning included, as elsewhere); `cache_write_tokens` is not reported (None).
  Semantics ``gemini``; when `total` equals the sum with `cached` added and not the
  sum without it, `input` excluded the cached tokens (``gemini:input-excludes-cached``,
  ccusage's `normalize_session_input` rule) and `prompt_tokens` adds them. `thoughts`,
  `tool` and `total` are kept in metadata. A message whose `tokens` are missing (not yet
  written when the file was copied) has no usage (all None), never zeros.
* Body (``openai-chat`` shape): the conversation before the call, as of the line that
  first logged it: user turns as user messages, model turns as assistant messages with
  their `toolCalls` as `tool_calls`, each tool's `functionResponse` as a tool message;
  ``info`` / ``error`` / ``warning`` messages and thought summaries are UI-only and left
  out. `metadata.approximate` is ``["system", "tools", "protocol"]``: the system
  instruction and tool declarations are not logged, and the Gemini `contents` are given
  in chat shape. `output` is the call's own message (text and tool calls).
* Sessions: `session_key` is `sessionId` (``gemini-cli.sessionId``; else the file name,
  ``gemini-cli.file``); a sub-agent (`kind: "subagent"`, under
  ``chats/<parent id>/``) has `parent_key` = the parent directory's name.
* Session events (`model.SessionEvent`, kept with the next call first logged after them):
  a ``compaction`` when Gemini CLI compressed the chat. Compression replaces the history
  (`GeminiChat.setHistory` -> `updateMessagesFromHistory`): a `{"$set": {"messages": ...}}`
  that drops recorded turns and adds turns never seen before (the summary Gemini CLI
  wrote, with no model or tokens); the UI then records an ``info`` message ``Context
  compressed from X% to Y%.`` (automatic compression, `useGeminiStream`
  `handleChatCompressionEvent`; ``/compress`` shows ``Chat history compressed from N to
  M tokens.``). Either is the compaction; both before one call are one. A `$set` that
  only drops turns (a cancelled request rolled back) or only changes their content
  (tool output masking) is none. A call whose `model` differs from the previous call's
  is a ``model-change``.
* Reported as skips: invalid JSON, lines that are not objects or are none of the record
  kinds above. Messages are gathered until the end of the file (a message's later lines
  complete it); a file cut short keeps what was read, the cut is one skip.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from prefixscope.ingest.normalize.fields import parse_time, to_int, to_text
from prefixscope.ingest.readers import BadRecord
from prefixscope.ingest.readers.json import iter_json_records
from prefixscope.ingest.source import READ_ERRORS, Probe, Source
from prefixscope.model import Record, Request, SessionEvent, Skip, Usage

NAME = "gemini-cli"
DESCRIPTION = ("Gemini CLI chat recordings (~/.gemini/tmp/*/chats/session-*.jsonl / .json): "
               "usage per model response, bodies rebuilt")

APPROXIMATE = ("system", "tools", "protocol")
_SENT_TYPES = frozenset({"user", "gemini"})  # info / error / warning are shown, never sent
_TOKEN_KEYS = ("input", "output", "cached", "thoughts", "tool", "total")
# the info messages Gemini CLI records after compressing the chat (automatic, /compress)
_COMPRESSED_INFO = ("Context compressed from", "Chat history compressed from")


def sniff(probe: Probe) -> bool:
    """The first record is a conversation's metadata: string `sessionId` and `projectHash`
    (the JSON-lines header, or the legacy whole-conversation document)."""
    for rec in probe.head_lines:
        return is_metadata(rec)
    return False


def is_metadata(rec: Any) -> bool:
    return (isinstance(rec, dict) and isinstance(rec.get("sessionId"), str)
            and isinstance(rec.get("projectHash"), str))


@dataclass
class _Call:
    """One model response: where it was first logged, its latest version, the history then."""

    line: int
    position: int | None
    message: dict[str, Any]
    history: list[dict[str, Any]]
    events: list[SessionEvent] = field(default_factory=list)  # recorded before it


@dataclass
class _State:
    session: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    conversation: list[dict[str, Any]] = field(default_factory=list)
    calls: dict[str, _Call] = field(default_factory=dict)
    pending: list[SessionEvent] = field(default_factory=list)  # since the last new call
    seen: set[str] = field(default_factory=set)  # every message id read

    def compacted(self, detail: str, when: Any, line: int) -> None:
        """A compression recorded since the last call (its `$set` and its info: one)."""
        if not any(e.kind == "compaction" for e in self.pending):
            self.pending.append(SessionEvent("compaction", detail, parse_time(when), line))

    def read_metadata(self, rec: dict[str, Any], line: int) -> None:
        if self.session is None:
            self.session = to_text(rec.get("sessionId"))
        for key in ("projectHash", "kind"):
            if isinstance(rec.get(key), str):
                self.meta[key] = rec[key]
        messages = rec.get("messages")
        if isinstance(messages, list):  # the legacy document, or `$set` after a history sync
            ids = {m["id"] for m in messages if isinstance(m, dict)
                   and isinstance(m.get("id"), str)}
            kept = [m for m in self.conversation if m.get("type") in _SENT_TYPES]
            dropped = sum(1 for m in kept if m.get("id") not in ids)
            added = len(ids - self.seen)
            if dropped and added:
                self.compacted(f"history replaced: {len(kept)} -> {len(ids)} messages "
                               f"({dropped} dropped, {added} new)",
                               rec.get("lastUpdated"), line)
            self.conversation = []
            for position, message in enumerate(messages):
                self.read_message(message, line, position)

    def read_message(self, message: Any, line: int, position: int | None = None) -> None:
        if not isinstance(message, dict) or not isinstance(message.get("id"), str):
            return
        mid = message["id"]
        content = message.get("content")
        if message.get("type") == "info" and mid not in self.seen and isinstance(content, str) \
                and content.startswith(_COMPRESSED_INFO):
            self.compacted(content, message.get("timestamp"), line)
        self.seen.add(mid)
        index = next((i for i, m in enumerate(self.conversation) if m.get("id") == mid), None)
        if index is None:
            index = len(self.conversation)
            self.conversation.append(message)
        else:
            self.conversation[index] = message
        if message.get("type") != "gemini" or not _is_call(message):
            return
        call = self.calls.get(mid)
        if call is None:
            self.calls[mid] = _Call(line, position, message, list(self.conversation[:index]),
                                    self.pending)
            self.pending = []
            return
        if not isinstance(message.get("tokens"), dict) \
                and isinstance(call.message.get("tokens"), dict):
            message = {**message, "tokens": call.message["tokens"]}
        call.message = message

    def rewind(self, mid: str) -> None:
        index = next((i for i, m in enumerate(self.conversation) if m.get("id") == mid), None)
        self.conversation = [] if index is None else self.conversation[:index]


def _is_call(message: dict[str, Any]) -> bool:
    return isinstance(message.get("tokens"), dict) or isinstance(message.get("model"), str)


def parse(source: Source, probe: Probe) -> Iterator[Record | Skip]:
    state = _State()
    cut: Skip | None = None
    try:
        yield from _read(source, probe, state)
    except READ_ERRORS as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        cut = Skip(None, f"read failed part-way, the rest of the file is lost: {reason}")
    session, session_source = state.session, "gemini-cli.sessionId"
    if session is None:
        session, session_source = _file_stem(source), "gemini-cli.file"
    parent = _parent(source) if state.meta.get("kind") == "subagent" else None
    before: str | None = None
    for call in state.calls.values():
        model = to_text(call.message.get("model"))
        if before and model and model != before:
            call.events.append(SessionEvent("model-change", f"{before} -> {model}",
                                            parse_time(call.message.get("timestamp")),
                                            call.line))
        before = model or before
    for mid, call in state.calls.items():
        yield _record(mid, call, state.meta, session, session_source if session else None,
                      parent)
    if cut is not None:
        yield cut


def _read(source: Source, probe: Probe, state: _State) -> Iterator[Skip]:
    for place, rec in iter_json_records(source, probe):
        if isinstance(rec, BadRecord):
            yield Skip(place, str(rec))
        elif not isinstance(rec, dict):
            yield Skip(place, f"line is a JSON {type(rec).__name__}, not a chat record")
        elif isinstance(rec.get("$rewindTo"), str):
            state.rewind(rec["$rewindTo"])
        elif isinstance(rec.get("id"), str):
            state.read_message(rec, place)
        elif isinstance(rec.get("$set"), dict):
            state.read_metadata(rec["$set"], place)
        elif is_metadata(rec):
            state.read_metadata(rec, place)
        else:
            yield Skip(place, "not a Gemini CLI chat record (metadata, message, $set or "
                              "$rewindTo)")


def _usage(tokens: Any) -> tuple[Usage, dict[str, int]]:
    if not isinstance(tokens, dict):
        return Usage(), {}
    inp, out, cached, thoughts, tool, total = (to_int(tokens.get(k)) for k in _TOKEN_KEYS)
    inclusive = sum(v or 0 for v in (inp, out, thoughts, tool))
    excludes_cached = bool(cached) and total == inclusive + (cached or 0) and total != inclusive
    prompt = None if inp is None else inp + (tool or 0) + ((cached or 0) if excludes_cached
                                                           else 0)
    output = None if out is None else out + (thoughts or 0)
    extra = {f"{k}_tokens": v for k, v in (("thoughts", thoughts), ("tool", tool),
                                          ("total", total)) if v is not None}
    semantics = "gemini:input-excludes-cached" if excludes_cached else "gemini"
    return Usage(prompt_tokens=prompt, cached_tokens=cached, output_tokens=output,
                 semantics=semantics), extra


def _record(mid: str, call: _Call, meta: dict[str, Any], session: str | None,
            session_source: str | None, parent: str | None) -> Record:
    message = call.message
    usage, extra = _usage(message.get("tokens"))
    model = to_text(message.get("model"))
    messages: list[dict[str, Any]] = []
    for turn in call.history:
        messages.extend(_chat_messages(turn))
    output = _chat_messages(message, with_results=False)
    metadata: dict[str, Any] = {**meta, **extra, "approximate": list(APPROXIMATE)}
    request = Request(
        id="", source_format="", source_file="", source_line=call.line,
        timestamp=parse_time(message.get("timestamp")),
        endpoint="openai-chat",
        model=model,
        session_key=session, session_key_source=session_source, parent_key=parent,
        client="gemini-cli",
        native_id=mid,
        body={"model": model, "messages": messages} if messages else None,
        output=output[0] if output else None,
        usage=usage,
        metadata=metadata,
        source_position=call.position,
        events=tuple(call.events),
    )
    return Record(request=request, key=f"gemini-cli:{session}:{mid}")


def _chat_messages(turn: dict[str, Any], *, with_results: bool = True) -> list[dict[str, Any]]:
    """A recorded turn as the chat messages it was sent as ([] for UI-only messages)."""
    kind = turn.get("type")
    if not isinstance(kind, str) or kind not in _SENT_TYPES:
        return []
    text, calls, responses = _parts(turn.get("content"))
    if kind == "user":
        out: list[dict[str, Any]] = [_tool_message(r) for r in responses]
        if text or not responses:
            out.insert(0, {"role": "user", "content": text})
        return out
    results: list[dict[str, Any]] = []
    tool_calls = turn.get("toolCalls")
    for tc in tool_calls if isinstance(tool_calls, list) else []:
        if not isinstance(tc, dict):
            continue
        calls.append({"id": to_text(tc.get("id")), "type": "function",
                      "function": {"name": to_text(tc.get("name")),
                                   "arguments": json.dumps(tc.get("args"), ensure_ascii=False)}})
        _, _, sent = _parts(tc.get("result"))
        results.extend(_tool_message(r, tc.get("id")) for r in sent)
    assistant: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        assistant["tool_calls"] = calls
    return [assistant, *results] if with_results else [assistant]


def _parts(content: Any) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """(text, function calls, function responses) of a `PartListUnion`."""
    if isinstance(content, str):
        return content, [], []
    parts = content if isinstance(content, list) else [content]
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    responses: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif not isinstance(part, dict) or part.get("thought") is True:
            continue
        elif isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif isinstance(part.get("functionCall"), dict):
            fc = part["functionCall"]
            calls.append({"id": to_text(fc.get("id")), "type": "function",
                          "function": {"name": to_text(fc.get("name")),
                                       "arguments": json.dumps(fc.get("args"),
                                                               ensure_ascii=False)}})
        elif isinstance(part.get("functionResponse"), dict):
            responses.append(part["functionResponse"])
    return "".join(texts), calls, responses


def _tool_message(response: dict[str, Any], call_id: Any = None) -> dict[str, Any]:
    body = response.get("response")
    content = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
    return {"role": "tool", "tool_call_id": to_text(response.get("id")) or to_text(call_id),
            "content": content}


def _file_stem(source: Source) -> str | None:
    if source.path is None:
        return None
    return PurePath(source.name).name.split(".", 1)[0] or None


def _parent(source: Source) -> str | None:
    """A sub-agent's file lives in ``chats/<parent session id>/``."""
    if source.path is None:
        return None
    parent = PurePath(source.name).parent.name
    return parent if parent and parent != "chats" else None


def prefer(new: Request, old: Request) -> bool:
    """True when `new`, another copy of the stored response `old` (the legacy `.json` and
    the `.jsonl` it was resumed into), has the usage the stored copy lacks."""
    return new.usage.reported and not old.usage.reported
