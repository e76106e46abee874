"""Claude Code local session transcripts (`~/.claude/projects/<escaped-cwd>/<sessionId>.jsonl`).

Claude Code writes every conversation it has to a JSON-lines transcript
(formats.md §5). The transcript holds no system prompt, no tool definitions and
no billing header, so it cannot be re-rendered; what it does hold is the
provider-reported usage of every API call, per session, which is exactly what
the usage analyses (hit rate by session, cached-token spikes, compaction) need.

Guarantees:

* One request per API call: an assistant line with `message.usage`, identified
  by (`message.id`, `requestId`). A streamed response is written as several
  assistant lines with the same pair (one per content block), each repeating
  `usage`; they become one request. As in ccusage
  (`rust/crates/ccusage/src/adapter/claude/daily.rs`, `usage_dedupe_hash`) the
  pair is the dedupe key; the usage kept is the one with the largest
  `output_tokens` (later lines win ties), because the final count of a stream
  only appears on its last line. Content blocks of all its lines are joined
  into `output`.
* Usage is Anthropic-native (`input_tokens` excludes cache reads/writes) and is
  normalized with `normalize.usage.usage_anthropic` (semantics ``anthropic``).
* Not requests, not reported: `user`, `summary`, `system`, `progress`,
  `file-history-snapshot`, `queue-operation` and any other typed record
  (new Claude Code versions add types); assistant lines with
  `model: "<synthetic>"` (written locally, never sent) and
  `isApiErrorMessage: true` lines (the API call failed; no usage).
* Reported as skips: invalid JSON, lines that are not JSON objects or are not
  Claude Code records at all, assistant lines without `message`, `message.id`
  or `usage`.
* `session_key` is `sessionId` (``claude-code.sessionId``); `native_id` is
  `message.id`; the record key is ``msg:<message.id>:<requestId>``. `body` is
  None; `endpoint` is ``anthropic-messages`` because that is the protocol
  Claude Code speaks. `parentUuid` points at transcript lines, not at requests,
  so it is kept in metadata and never used as `parent_key`.

Lines are read in one pass; the requests of a file are kept until its end
because the lines of one streamed response need not be adjacent.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from prefixscope.ingest.normalize.fields import parse_time, to_int
from prefixscope.ingest.normalize.usage import usage_anthropic
from prefixscope.ingest.readers import BadRecord
from prefixscope.ingest.readers.json import iter_json_records
from prefixscope.ingest.source import Probe, Source
from prefixscope.model import Record, Request, Skip

NAME = "claude-code"
DESCRIPTION = "Claude Code session transcripts (~/.claude/projects/**/*.jsonl): usage per API call"

SYNTHETIC_MODEL = "<synthetic>"
# Record types whose first line identifies a transcript (with the keys that make them specific).
_TRANSCRIPT_LINE_TYPES = frozenset({"user", "assistant", "system", "progress", "attachment"})
_METADATA_KEYS = ("version", "isSidechain", "agentId", "cwd", "gitBranch", "uuid", "parentUuid",
                  "userType", "requestId", "slug", "costUSD")


def sniff(probe: Probe) -> bool:
    first = probe.first_line  # a JSON array is never a transcript
    return first is not None and is_transcript_line(first)


def is_transcript_line(rec: dict[str, Any]) -> bool:
    """True for a line only a Claude Code transcript has (typed, or ccusage's untyped shape)."""
    rtype = rec.get("type")
    if rtype in _TRANSCRIPT_LINE_TYPES:
        return isinstance(rec.get("sessionId"), str) and ("uuid" in rec or "parentUuid" in rec)
    if rtype == "summary":
        return "leafUuid" in rec and "summary" in rec
    if rtype == "file-history-snapshot":
        return "messageId" in rec and "snapshot" in rec
    if rtype == "queue-operation":
        return isinstance(rec.get("sessionId"), str) and "operation" in rec
    if rtype is None:
        return _is_untyped_assistant(rec)
    return False


def _is_untyped_assistant(rec: dict[str, Any]) -> bool:
    """ccusage's minimal lines: no `type`, an assistant `message`, `sessionId`, `requestId`."""
    message = rec.get("message")
    return (isinstance(message, dict) and message.get("role") == "assistant"
            and isinstance(rec.get("sessionId"), str) and "requestId" in rec)


@dataclass
class _Call:
    """The assistant lines of one API call, merged."""

    line: int
    first: dict[str, Any]
    message: dict[str, Any]
    usage: dict[str, Any]
    content: list[Any] = field(default_factory=list)
    lines: int = 1

    def add(self, message: dict[str, Any], usage: dict[str, Any]) -> None:
        self.lines += 1
        self.content.extend(_content_blocks(message))
        if _output_tokens(usage) >= _output_tokens(self.usage):
            self.usage = usage
            self.message = message


def _output_tokens(usage: dict[str, Any]) -> int:
    return to_int(usage.get("output_tokens")) or 0


def parse(source: Source, probe: Probe) -> Iterator[Record | Skip]:
    calls: dict[tuple[str, str | None], _Call] = {}
    for place, rec in iter_json_records(source, probe):
        kind = _classify_line(rec)
        if kind is None:
            continue
        if isinstance(kind, str):
            yield Skip(place, kind)
            continue
        message, usage = kind
        pair = (str(message["id"]), _request_id(rec))
        call = calls.get(pair)
        if call is None:
            calls[pair] = _Call(place, rec, message, usage, _content_blocks(message))
        else:
            call.add(message, usage)
    for (message_id, request_id), call in calls.items():
        yield _record(message_id, request_id, call)


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


def _record(message_id: str, request_id: str | None, call: _Call) -> Record:
    first = call.first
    session = first.get("sessionId")
    session_key = str(session) if session not in (None, "") else None
    metadata = {k: first[k] for k in _METADATA_KEYS if first.get(k) is not None}
    for key in ("stop_reason", "service_tier"):
        value = call.message.get(key) if key == "stop_reason" else call.usage.get(key)
        if value is not None:
            metadata[key] = value
    if call.lines > 1:
        metadata["streamed_lines"] = call.lines
    request = Request(
        id="", source_format="", source_file="", source_line=call.line,
        timestamp=parse_time(first.get("timestamp")),
        endpoint="anthropic-messages",
        model=call.message.get("model") or first["message"].get("model"),
        session_key=session_key,
        session_key_source="claude-code.sessionId" if session_key else None,
        client="claude-code",
        native_id=message_id,
        body=None,
        output={"role": "assistant", "content": call.content},
        usage=usage_anthropic(call.usage),
        metadata=metadata,
    )
    return Record(request=request, key=f"msg:{message_id}:{request_id or ''}")
