"""Cline / Roo Code / Kilo Code task logs (`.../globalStorage/<extension>/tasks/<task id>/`).

Cline (the VS Code extension ``saoudrizwan.claude-dev``) and its forks Roo Code
(``rooveterinaryinc.roo-cline``) and Kilo Code (``kilocode.kilo-code``) keep every task in
a directory of its own: ``ui_messages.json``, the chat as the extension shows it, and
``api_conversation_history.json``, the Anthropic-shaped messages it sends to the model
(plus ``task_metadata.json``: files in context, models used). The UI log holds the usage
of every model call; the API history holds what each call was sent, except the system
prompt and the tools.

The shape, from the Cline source (cline/cline, `src/shared/ExtensionMessage.ts`
`ClineMessage` and `ClineApiReqInfo`; `src/core/task/index.ts` writes them):

* ``ui_messages.json`` is a JSON array of `ClineMessage {ts, type: "ask" | "say", ask,
  say, text, partial, modelInfo {providerId, modelId, mode}, conversationHistoryIndex,
  conversationHistoryDeletedRange, ...}`. Each model call is one ``say:
  "api_req_started"`` message whose `text` is the JSON of `ClineApiReqInfo {request,
  tokensIn, tokensOut, cacheWrites, cacheReads, cost, cancelReason,
  streamingFailedMessage}` (Roo Code and Kilo Code add `apiProtocol`: ``anthropic`` /
  ``openai``); `conversationHistoryIndex` is the index of the API history's last message
  when the request started;
* ``api_conversation_history.json`` is a JSON array of Anthropic `MessageParam`s
  `{role, content}` (newer versions add `ts`, `modelInfo` and a lossy `metrics` to
  assistant messages).

Guarantees:

* One request per ``api_req_started`` message of ``ui_messages.json`` (record key
  ``cline:<task id>:<ts>``); one whose `text` reports no token count (a request that
  failed or was cancelled before usage arrived) is a request without usage (None).
* Usage: Cline writes the provider's counts with the Anthropic convention (its
  providers report `tokensIn` without the cache reads and writes, and its context-window
  meter and cost add all four: `getTotalTokensFromApiReqMessage`,
  `calculateApiCostAnthropic`), so `prompt_tokens` = `tokensIn` + `cacheReads` +
  `cacheWrites` (semantics ``cline``). Roo Code and Kilo Code, whose messages carry
  `apiProtocol`, write `tokensIn` = `totalInputTokens` of their cost functions (cache
  reads and writes included for both protocols, Roo Code `src/core/task/Task.ts`
  `updateApiReqMsg`), so `prompt_tokens` = `tokensIn` (semantics ``roo``).
  `cached_tokens` = `cacheReads`, `cache_write_tokens` = `cacheWrites`, `output_tokens` =
  `tokensOut`; `cost` is kept in metadata.
* Body (``anthropic-messages``): when ``api_conversation_history.json`` is next to the
  file, the messages before the call: the history up to index
  `conversationHistoryIndex + 1` (the user message the request sent); without the index
  (older versions), up to the call's own user message counted in order. Only `role` and
  `content` are kept. `metadata.approximate` is ``["system", "tools"]`` (never logged),
  plus ``history-truncation`` when the message carries a
  `conversationHistoryDeletedRange` (Cline dropped a range from what it sent), and
  ``cache-control`` for a Claude model: the body then carries the prompt-cache
  breakpoints Cline's Anthropic-family handlers add, which the log does not record
  (`addCacheControl`: ``cache_control: ephemeral`` on the last block of the last two
  user messages).
  `output` is the next assistant message. No companion: no body.
* Model: `modelInfo.modelId` of the message, else the latest ``task_metadata.json``
  `model_usage` entry at or before the call. Session: the task directory's name
  (``cline.task-dir``; stdin: none). Client: ``cline``, ``roo-code`` or ``kilo-code`` from
  the extension directory in the path, else ``cline``.
* Session events (`model.SessionEvent`): Cline stamps every UI message with the
  `conversationHistoryDeletedRange` in force when it was written, and truncates the
  history while setting a request up, after its ``api_req_started`` message: a range that
  changes to a new one is a ``truncation`` of the latest request started before the
  message that first shows it (that request was sent without the range). A condense --
  Cline's auto-compact (a ``say: "tool"`` ``summarizeTask``, `SummarizeTaskHandler`) or
  ``/smol`` (``ask: "condense"``, `CondenseHandler`) -- sets the range while the
  summarizing request's answer is handled: the range it sets is a ``compaction`` of the
  request after it (the first sent without the history). A call whose
  model differs from the previous call's is a ``model-change``; one whose extension
  version (the latest ``task_metadata.json`` `environment_history` entry at or before it,
  kept as `metadata.version`) differs is a ``client-upgrade``. Roo Code (and Kilo Code)
  say ``condense_context`` (a ``compaction``) and ``sliding_window_truncation`` (a
  ``truncation``) when they manage the context: automatically while a request is set up,
  after its ``api_req_started`` and before any of its answer (that request's), or on
  demand between requests (the next request's).
* `api_conversation_history.json` and `task_metadata.json` next to a `ui_messages.json`
  are its companions (read with it, not alone).
* An ``api_conversation_history.json`` alone (a task shared without its UI log) is read
  when its assistant messages carry the `metrics` newer Cline versions write with them
  (`addToApiConversationHistory({role: "assistant", content, modelInfo, metrics: {tokens:
  {prompt, completion, cached}, cost}, ts})`, `prompt` = the call's `inputTokens`,
  `cached` = `cacheWriteTokens + cacheReadTokens`: the same counts `ClineApiReqInfo`
  holds, reads and writes summed). One request per such assistant message (record key
  ``cline:<task id>:history:<index>``): `prompt_tokens` = `prompt` + `cached` (as
  `tokensIn` + `cacheReads` + `cacheWrites` above), `output_tokens` = `completion`; when
  `cached` is 0 the call read and wrote nothing (`cached_tokens` = `cache_write_tokens`
  = 0), else the reads and writes cannot be told apart (both None, the sum kept as
  `metadata.cache_reads_and_writes`; semantics ``cline-history``). Model from
  `modelInfo.modelId` (a change between calls is a ``model-change``), timestamp the
  `ts` of the user message it answers, body the history before it (``approximate``
  ``system``, ``tools`` and ``history-truncation``: a range Cline dropped is recorded
  only in the UI log). A history without `metrics` is one skip saying where the usage
  is (``ui_messages.json`` of the task folder). Reported as skips: elements that are not
  UI messages, and an ``api_req_started`` whose `text` is not a JSON object.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path, PurePath
from typing import Any

import orjson

from prefixscope.ingest.normalize.fields import as_object, parse_time, to_float, to_int, to_text
from prefixscope.ingest.readers import BadRecord
from prefixscope.ingest.readers.json import iter_json_records
from prefixscope.ingest.source import Probe, Source
from prefixscope.model import Record, Request, SessionEvent, Skip, Usage

NAME = "cline"
DESCRIPTION = ("Cline / Roo Code / Kilo Code task logs (tasks/<id>/ui_messages.json + "
               "api_conversation_history.json): usage per API request, bodies rebuilt")

UI_MESSAGES = "ui_messages.json"
API_HISTORY = "api_conversation_history.json"
TASK_METADATA = "task_metadata.json"
APPROXIMATE = ("system", "tools")
_CLIENTS = (("rooveterinaryinc.roo-cline", "roo-code"), ("kilocode.kilo-code", "kilo-code"),
            ("saoudrizwan.claude-dev", "cline"))
_TOKEN_KEYS = ("tokensIn", "tokensOut", "cacheWrites", "cacheReads")
_META_KEYS = ("apiProtocol", "cancelReason", "streamingFailedMessage")


def sniff(probe: Probe) -> bool:
    """A JSON array whose first element is a UI message: `ts` and `type` ``say`` / ``ask``
    with its `say` / `ask` kind; or an API history (`{role, content, ts}` first) read
    alone."""
    if probe.kind != "json" or not isinstance(probe.document, list):
        return False
    return is_ui_message(probe.first) or is_history_message(probe.first)


def is_history_message(rec: Any) -> bool:
    """A message of Cline's API history: Anthropic `{role, content}` with Cline's `ts`."""
    return (isinstance(rec, dict) and rec.get("role") in ("user", "assistant")
            and "content" in rec and to_int(rec.get("ts")) is not None)


def is_ui_message(rec: Any) -> bool:
    if not isinstance(rec, dict) or "ts" not in rec:
        return False
    kind = rec.get("type")
    return kind in ("say", "ask") and isinstance(rec.get(kind), str)


def is_companion(path: Path) -> bool:
    """The API history and task metadata of a task whose ``ui_messages.json`` is beside them."""
    return path.name in (API_HISTORY, TASK_METADATA) and path.with_name(UI_MESSAGES).exists()


def parse(source: Source, probe: Probe) -> Iterator[Record | Skip]:
    if not is_ui_message(probe.first) and is_history_message(probe.first):
        yield from _parse_history(source, probe)
        return
    history = _load_list(source.sibling(API_HISTORY))
    model_usage = _model_usage(source.sibling(TASK_METADATA))
    versions = _versions(source.sibling(TASK_METADATA))
    task, client = _place(source)
    started: list[tuple[dict[str, Any], dict[str, Any], int]] = []
    truncated: dict[int, list[SessionEvent]] = {}  # index in `started` -> its truncations
    in_force: tuple[int, ...] | None = None
    answered = False  # a message other than context management since the last request began
    condensed: str | None = None  # a condense the latest request's answer asked for
    for place, rec in iter_json_records(source, probe):
        if isinstance(rec, BadRecord):
            yield Skip(place, str(rec))
            continue
        if not is_ui_message(rec):
            yield Skip(place, "not a Cline UI message ({ts, type: say|ask, ...})")
            continue
        deleted = _range(rec.get("conversationHistoryDeletedRange"))
        if deleted is not None and deleted != in_force:
            was = "none" if in_force is None else list(in_force)
            change = f"conversationHistoryDeletedRange {was} -> {list(deleted)}"
            if condensed is not None:
                # a condense: its tool handler dropped the history while the latest
                # request's answer was handled; the next request is the first sent without
                # it (this message may be that request's own api_req_started)
                truncated.setdefault(len(started), []).append(SessionEvent(
                    "compaction", f"{condensed}: {change}", parse_time(rec.get("ts")), place))
                condensed = None
            else:
                # set while the latest request was set up (its own message shows the old one)
                owner = len(started) - 1 if started else 0
                truncated.setdefault(owner, []).append(SessionEvent(
                    "truncation", change, parse_time(rec.get("ts")), place))
            in_force = deleted
        if rec.get("partial") is not True:
            condensed = _condense(rec) or condensed
        say = rec.get("say")
        if say in _CONTEXT_SAYS and rec.get("partial") is not True:
            # Roo Code / Kilo Code: condensed or truncated while the latest request was set
            # up (nothing of its answer yet), else between requests: the next one's
            owner = len(started) - 1 if started and not answered else len(started)
            truncated.setdefault(owner, []).append(_context_event(rec, place))
        elif say not in _CONTEXT_SAYS and say != "api_req_started":
            answered = True
        if say != "api_req_started":
            continue
        answered = False
        condensed = None  # a condense the user answered with feedback dropped nothing
        info = _info(rec.get("text"))
        if info is None:
            yield Skip(place, "api_req_started whose text is not a ClineApiReqInfo JSON object")
            continue
        started.append((rec, info, place))
    before: str | None = None
    version_before: str | None = None
    for ordinal, (rec, info, place) in enumerate(started):
        record = _record(rec, info, place, ordinal, history, model_usage, task, client)
        events = list(truncated.get(ordinal, ()))
        model = record.request.model
        when = record.request.timestamp
        if before and model and model != before:
            events.append(SessionEvent("model-change", f"{before} -> {model}", when, place))
        before = model or before
        version = _model_at(versions, to_int(rec.get("ts")))
        if version_before and version and version != version_before:
            events.append(SessionEvent("client-upgrade", f"{version_before} -> {version}",
                                       when, place))
        version_before = version or version_before
        if events or version:
            metadata = {**record.request.metadata, "version": version} if version \
                else record.request.metadata
            record = Record(replace(record.request, events=tuple(events), metadata=metadata),
                            record.key)
        yield record


def _parse_history(source: Source, probe: Probe) -> Iterator[Record | Skip]:
    """An ``api_conversation_history.json`` read alone: one request per assistant message
    with `metrics.tokens`."""
    task, client = _place(source)
    history: list[Any] = []
    places: list[int] = []
    for place, rec in iter_json_records(source, probe):
        history.append(None if isinstance(rec, BadRecord) else rec)
        places.append(place)
        if isinstance(rec, BadRecord):
            yield Skip(place, str(rec))
    calls = [i for i, m in enumerate(history)
             if _role(m, "assistant") and isinstance(as_object(m.get("metrics")).get("tokens"),
                                                     dict)]
    if not calls:
        yield Skip(None, "Cline API history without per-call usage: no assistant message "
                         "carries metrics.tokens (Cline writes them from version 3.x on); "
                         "the usage is in ui_messages.json: ingest the whole task folder "
                         "(globalStorage/saoudrizwan.claude-dev/tasks/<task id>/)")
        return
    before: str | None = None
    for index in calls:
        rec = history[index]
        model_info = as_object(rec.get("modelInfo"))
        model = to_text(model_info.get("modelId"))
        asked = history[index - 1] if index and _role(history[index - 1], "user") else rec
        when = parse_time(to_int(asked.get("ts")))
        events: tuple[SessionEvent, ...] = ()
        if before and model and model != before:
            events = (SessionEvent("model-change", f"{before} -> {model}", when,
                                    places[index]),)
        before = model or before
        messages = [_message(m) for m in history[:index]]
        body = None
        metadata: dict[str, Any] = {}
        if messages and all(m is not None for m in messages):
            body = {"model": model, "messages": messages}
            metadata["approximate"] = [*APPROXIMATE, "history-truncation"]
        for key, name in (("providerId", "provider"), ("mode", "mode")):
            if model_info.get(key) is not None:
                metadata[name] = model_info[key]
        usage, cached = _history_usage(rec["metrics"])
        if cached:
            metadata["cache_reads_and_writes"] = cached
        cost = to_float(as_object(rec.get("metrics")).get("cost"))
        if cost is not None:
            metadata["cost"] = cost
        request = Request(
            id="", source_format="", source_file="", source_line=places[index],
            timestamp=when, endpoint="anthropic-messages", model=model,
            session_key=task, session_key_source="cline.task-dir" if task else None,
            client=client, body=body, output=_message(rec), usage=usage,
            metadata=metadata, events=events)
        yield Record(request=request, key=f"cline:{task}:history:{index}")


def _history_usage(metrics: dict[str, Any]) -> tuple[Usage, int | None]:
    """(usage, cache reads + writes) of a history message's `metrics.tokens`."""
    tokens = as_object(metrics.get("tokens"))
    prompt, completion, cached = (to_int(tokens.get(k)) for k in ("prompt", "completion",
                                                                  "cached"))
    if prompt is None and completion is None:
        return Usage(), cached
    total = None if prompt is None else prompt + (cached or 0)
    known = 0 if cached == 0 else None  # nothing read or written; else the two are summed
    return Usage(prompt_tokens=total, cached_tokens=known, cache_write_tokens=known,
                 output_tokens=completion, semantics="cline-history"), cached


# Roo Code's context management messages (`ClineSay`): a condensation into a summary, a
# sliding-window truncation (Kilo Code has the same).
_CONTEXT_SAYS = ("condense_context", "sliding_window_truncation")


def _condense(rec: dict[str, Any]) -> str | None:
    """What a UI message says of a Cline condense, else None: the ``summarize_task`` tool
    (auto-compact; a ``say: "tool"`` whose text is ``{"tool": "summarizeTask", ...}``,
    `SummarizeTaskHandler`) or ``/smol``'s ``ask: "condense"`` (`CondenseHandler`). Either
    handler then sets `conversationHistoryDeletedRange` to everything after the first
    user / assistant pair (keep ``none``; ``lastTwo`` when the summary is already the last
    message), so the request after it sends the first pair and the summary exchange."""
    if rec.get("ask") == "condense":
        return "condense (/smol)"
    if rec.get("say") == "tool" and isinstance(rec.get("text"), str) \
            and "summarizeTask" in rec["text"]:
        tool = _info(rec["text"])
        if tool is not None and tool.get("tool") == "summarizeTask":
            return "summarize_task (auto-compact)"
    return None


def _context_event(rec: dict[str, Any], place: int) -> SessionEvent:
    """The session event of a Roo Code ``condense_context`` / ``sliding_window_truncation``
    message, with the counts its ``contextCondense`` / ``contextTruncation`` gives."""
    condensed = rec.get("say") == "condense_context"
    facts = as_object(rec.get("contextCondense" if condensed else "contextTruncation"))
    said = [f"{k} {facts[k]}" for k in ("messagesRemoved", "prevContextTokens",
                                        "newContextTokens") if to_int(facts.get(k)) is not None]
    detail = str(rec.get("say")) + (f" ({', '.join(said)})" if said else "")
    return SessionEvent("compaction" if condensed else "truncation", detail,
                        parse_time(rec.get("ts")), place)


def _range(value: Any) -> tuple[int, ...] | None:
    """A `conversationHistoryDeletedRange` ([start, end] indexes), else None."""
    if isinstance(value, list) and len(value) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        return tuple(value)
    return None


def _info(text: Any) -> dict[str, Any] | None:
    if text is None or text == "":
        return {}  # the placeholder written before the request starts
    if not isinstance(text, str):
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _usage(info: dict[str, Any]) -> Usage:
    tokens_in, tokens_out, writes, reads = (to_int(info.get(k)) for k in _TOKEN_KEYS)
    if all(v is None for v in (tokens_in, tokens_out, writes, reads)):
        return Usage()
    if info.get("cancelReason") and not any((tokens_in, tokens_out, writes, reads)):
        # a request that failed or was cancelled before any usage arrived: Cline still
        # writes the four counts, as zeros (`cancelReason: "streaming_failed"`)
        return Usage()
    if "apiProtocol" in info:  # Roo Code / Kilo Code: tokensIn is the total input
        prompt, semantics = tokens_in, "roo"
    else:
        prompt = None if tokens_in is None else tokens_in + (reads or 0) + (writes or 0)
        semantics = "cline"
    return Usage(prompt_tokens=prompt, cached_tokens=reads, cache_write_tokens=writes,
                 output_tokens=tokens_out, semantics=semantics)


def _record(rec: dict[str, Any], info: dict[str, Any], place: int, ordinal: int,
            history: list[Any] | None, model_usage: list[tuple[int, str]], task: str | None,
            client: str) -> Record:
    ts = to_int(rec.get("ts"))
    model_info = as_object(rec.get("modelInfo"))
    model = to_text(model_info.get("modelId")) or _model_at(model_usage, ts)
    body, output, approximate = _body(rec, ordinal, history, model)
    metadata: dict[str, Any] = {k: info[k] for k in _META_KEYS if info.get(k) is not None}
    for key, name in (("providerId", "provider"), ("mode", "mode")):
        if model_info.get(key) is not None:
            metadata[name] = model_info[key]
    if isinstance(rec.get("conversationHistoryIndex"), int):
        metadata["conversation_history_index"] = rec["conversationHistoryIndex"]
    if body is not None:
        metadata["approximate"] = approximate
    cost = to_float(info.get("cost"))
    if cost is not None:
        metadata["cost"] = cost
    request = Request(
        id="", source_format="", source_file="", source_line=place,
        timestamp=parse_time(ts if ts is not None else rec.get("ts")),
        endpoint="anthropic-messages",
        model=model,
        session_key=task, session_key_source="cline.task-dir" if task else None,
        client=client,
        body=body,
        output=output,
        usage=_usage(info),
        metadata=metadata,
    )
    return Record(request=request, key=f"cline:{task}:{rec.get('ts')}:{place}")


def _body(rec: dict[str, Any], ordinal: int, history: list[Any] | None, model: str | None
          ) -> tuple[dict[str, Any] | None, Any, list[str]]:
    """(body, output, what is approximate) of the call from the API history, if any."""
    if not history:
        return None, None, []
    raw_index = rec.get("conversationHistoryIndex")
    index = raw_index if isinstance(raw_index, int) and not isinstance(raw_index, bool) \
        else None
    if index is not None:
        end = index + 2  # the history then, and the user message this request sent
    else:
        users = [i for i, m in enumerate(history)
                 if isinstance(m, dict) and m.get("role") == "user"]
        end = users[ordinal] + 1 if ordinal < len(users) else 0
    if end <= 0 or end > len(history) or not _role(history[end - 1], "user"):
        return None, None, []
    messages = [_message(m) for m in history[:end]]
    if any(m is None for m in messages):
        return None, None, []
    approximate = list(APPROXIMATE)
    if rec.get("conversationHistoryDeletedRange"):
        approximate.append("history-truncation")
    if model is not None and "claude" in model.lower():
        messages = _with_breakpoints(messages)
        approximate.append("cache-control")
    output = _message(history[end]) if end < len(history) and _role(history[end],
                                                                      "assistant") else None
    return {"model": model, "messages": messages}, output, approximate


def _with_breakpoints(messages: list[Any]) -> list[Any]:
    """The messages with Cline's prompt-cache breakpoints: ``cache_control: ephemeral`` on
    the last content block of the last two user messages (`addCacheControl` of its
    Anthropic, Vertex, Bedrock and OpenRouter handlers; Roo Code's are the same)."""
    users = [i for i, m in enumerate(messages) if m["role"] == "user"][-2:]
    out = list(messages)
    for i in users:
        content = out[i]["content"]
        if isinstance(content, str):
            blocks: list[Any] = [{"type": "text", "text": content}]
        elif isinstance(content, list) and content and isinstance(content[-1], dict):
            blocks = list(content)
        else:
            continue
        blocks[-1] = {**blocks[-1], "cache_control": {"type": "ephemeral"}}
        out[i] = {**out[i], "content": blocks}
    return out


def _role(message: Any, role: str) -> bool:
    return isinstance(message, dict) and message.get("role") == role


def _message(message: Any) -> dict[str, Any] | None:
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
        return None
    return {"role": message["role"], "content": message.get("content")}


def _load_list(path: Path | None) -> list[Any] | None:
    if path is None:
        return None
    try:
        value = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return value if isinstance(value, list) else None


def _model_usage(path: Path | None) -> list[tuple[int, str]]:
    """(ts, model id) of ``task_metadata.json`` `model_usage`, in time order."""
    return _metadata_series(path, "model_usage", "model_id")


def _versions(path: Path | None) -> list[tuple[int, str]]:
    """(ts, extension version) of ``task_metadata.json`` `environment_history`, in time
    order (Cline writes an entry when a task starts or resumes)."""
    return _metadata_series(path, "environment_history", "cline_version")


def _metadata_series(path: Path | None, rows_key: str, value_key: str
                     ) -> list[tuple[int, str]]:
    """(ts, value) of the rows under `rows_key` of ``task_metadata.json`` that carry both,
    in time order; nothing when the file is missing or unreadable."""
    if path is None:
        return []
    try:
        meta = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return []
    rows = meta.get(rows_key) if isinstance(meta, dict) else None
    out = []
    for row in rows if isinstance(rows, list) else []:
        if isinstance(row, dict) and to_int(row.get("ts")) is not None \
                and to_text(row.get(value_key)):
            out.append((to_int(row["ts"]) or 0, str(to_text(row[value_key]))))
    return sorted(out)


def _model_at(model_usage: list[tuple[int, str]], ts: int | None) -> str | None:
    model = None
    for when, name in model_usage:
        if ts is not None and when > ts:
            break
        model = name
    return model


def _place(source: Source) -> tuple[str | None, str]:
    """(task id = the directory's name, client from the extension directory)."""
    if source.path is None:
        return None, "cline"
    path = PurePath(source.name)
    client = next((name for ext, name in _CLIENTS if ext in path.parts), "cline")
    return (path.parent.name or None), client
