"""The bench corpora in each peer's own input format: the conversion a user of the peer must
write before it reads their logs, timed by bench_scale.py beside the peer's own run.

prefixscope reads every shape of `gen_corpus.py` as it is; the peers each read one format
of their own (from their sources: llmtrafficlens 0.13.4 ``adapters.py``, promptcachelint
0.1.0 ``recorder.py`` / ``model.py``, prefixcash 0.2.1 ``integrations/importers.py``):

* **llmtrafficlens** ``profile``: a gateway CSV whose ``request_json`` column holds an
  OpenAI Chat request body (it reads ``messages``, ``tools`` or ``prompt`` and nothing
  else) and ``response_json`` its response (``usage.prompt_tokens``). Anthropic bodies
  (raw captures, Langfuse inputs) go through the converting gateway's own conversion
  (`gen_corpus.openai_body`, new-api's ``ClaudeToOpenAIRequest``: without it the tool
  results and the system prompt are not in the text it hashes); a Codex rollout's
  Responses input becomes Chat messages (reasoning, encrypted, left out).
* **promptcachelint** ``report``: its recorder's JSONL trace, one ``{provider, body, at,
  model, usage: {input_tokens (uncached), cache_read, cache_write, output_tokens},
  session_id}`` per request; ``anthropic`` bodies as sent, ``openai`` Chat bodies as sent
  and the Codex calls as Responses bodies (``instructions`` + ``input``, rebuilt from the
  rollout's items before each call). ``session_id`` is the log's session id where the log
  has one (else its own grouping by prefix).
* **prefixcash** ``report`` / ``diagnose``: its normalized JSONL call log (what its
  ``import`` writes), one ``{provider, model, usage: {input_tokens (the whole prompt),
  cache_read_tokens, cache_write_tokens, output_tokens}, session_id, messages, ts}`` per
  call; ``messages`` the request's (Chat messages for a Codex call) for ``diagnose``, none
  in the ``prefixcash-usage`` feed its ``report`` reads.

A Claude Code transcript holds no request body (no system prompt, no tool definitions,
one line per content block): llmtrafficlens and promptcachelint cannot read it at all
(`CANNOT_READ`); prefixcash reads its usage.

Run: ``python bench/peer_feeds.py PEER FORM LOG OUT [--max-gb G]`` (LOG a file, or the
folder of an agent-log form); prints the number of records written. An agent log written
as requests grows many times over (each call resends its history, which the agent wrote
once): ``--max-gb`` stops the conversion there.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_corpus import openai_body  # noqa: E402

PEERS = ("llmtrafficlens", "promptcachelint", "prefixcash")
# (peer, form) -> why the peer cannot read that form after any conversion
CANNOT_READ = {
    ("llmtrafficlens", "claude-code"): "no request bodies in a Claude Code transcript",
    ("promptcachelint", "claude-code"): "no request bodies in a Claude Code transcript",
}


class Call(NamedTuple):
    """One model call of a log, as the feeds need it."""

    time: str  # ISO 8601
    protocol: str  # anthropic | openai-chat | openai-responses | none (no body)
    body: dict[str, Any] | None
    usage: dict[str, Any]  # the provider's own usage payload
    session: str | None


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    with path.open("rb") as fh:
        for line in fh:
            if line.strip():
                yield orjson.loads(line)


def _files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.jsonl"))


def raw_calls(log: Path) -> Iterator[Call]:
    for rec in _lines(log):
        headers = rec.get("headers") or {}
        yield Call(rec["timestamp"], "anthropic", rec["request"], rec["response"]["usage"],
                   headers.get("x-claude-code-session-id"))


def langfuse_calls(log: Path) -> Iterator[Call]:
    for row in _lines(log):
        u = row["usageDetails"]
        usage = {"input_tokens": u["input"], "cache_read_input_tokens": u["input_cache_read"],
                 "cache_creation_input_tokens": u["input_cache_creation"],
                 "output_tokens": u["output"]}
        yield Call(row["startTime"], "anthropic", row["input"], usage, row.get("sessionId"))


def openai_calls(log: Path) -> Iterator[Call]:
    for rec in _lines(log):
        headers = rec.get("headers") or {}
        yield Call(rec["timestamp"], "openai-chat", rec["request"], rec["response"]["usage"],
                   headers.get("x-session-id"))


def claude_code_calls(folder: Path) -> Iterator[Call]:
    """One call per `message.id` of each transcript: its last line's usage (the streamed
    response's final count)."""
    for path in _files(folder):
        last: dict[str, dict[str, Any]] = {}
        for rec in _lines(path):
            message = rec.get("message")
            if rec.get("type") == "assistant" and isinstance(message, dict) \
                    and message.get("usage"):
                last[message["id"]] = rec
        for rec in last.values():
            usage = {**rec["message"]["usage"], "model": rec["message"]["model"]}
            yield Call(rec["timestamp"], "none", None, usage, rec.get("sessionId"))


def codex_calls(folder: Path) -> Iterator[Call]:
    """One call per token_count event whose totals moved, its body the Responses request
    rebuilt from the items logged before it (the history; a compaction's summary replaces
    it); usage its `last_token_usage` in OpenAI's Chat names."""
    for path in _files(folder):
        items: list[dict[str, Any]] = []
        instructions: str | None = None
        session = model = None
        totals = None
        for rec in _lines(path):
            kind, payload = rec.get("type"), rec.get("payload") or {}
            if kind == "session_meta":
                session = payload.get("id")
                instructions = (payload.get("base_instructions") or {}).get("text")
            elif kind == "turn_context":
                model = payload.get("model")
            elif kind == "compacted":
                items = [{"type": "message", "role": "user",
                          "content": [{"type": "input_text", "text": payload["message"]}]}]
            elif kind == "response_item" and payload.get("type") != "ghost_snapshot":
                items.append(payload)
            elif kind == "event_msg" and payload.get("type") == "token_count" \
                    and payload.get("info"):
                info = payload["info"]
                if info["total_token_usage"] == totals:
                    continue
                totals = info["total_token_usage"]
                last = info["last_token_usage"]
                usage = {"prompt_tokens": last["input_tokens"],
                         "completion_tokens": last["output_tokens"],
                         "total_tokens": last["total_tokens"],
                         "prompt_tokens_details": {"cached_tokens":
                                                   last["cached_input_tokens"]}}
                body = {"model": model, "instructions": instructions, "input": list(items)}
                yield Call(rec["timestamp"], "openai-responses", body, usage, session)


READERS = {"raw": raw_calls, "langfuse": langfuse_calls, "openai": openai_calls,
           "claude-code": claude_code_calls, "codex": codex_calls}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


def responses_to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """A Responses request as the Chat request a gateway would send for it."""
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    for item in body["input"]:
        kind = item.get("type")
        if kind == "message":
            messages.append({"role": item["role"], "content": _text(item["content"])})
        elif kind in ("function_call", "custom_tool_call"):
            arguments = item.get("arguments", item.get("input", ""))
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": item["call_id"], "type": "function",
                 "function": {"name": item["name"], "arguments": arguments}}]})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            messages.append({"role": "tool", "tool_call_id": item["call_id"],
                             "content": _text(item["output"])})
    return {"model": body["model"], "messages": messages}


def chat_body(call: Call) -> dict[str, Any]:
    assert call.body is not None
    if call.protocol == "anthropic":
        return openai_body(call.body)
    if call.protocol == "openai-responses":
        return responses_to_chat(call.body)
    return call.body


def chat_usage(call: Call) -> dict[str, Any]:
    """The call's usage in OpenAI Chat's names (prompt tokens include the cached)."""
    u = call.usage
    if "prompt_tokens" in u:
        return u
    prompt = u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]
    return {"prompt_tokens": prompt, "completion_tokens": u["output_tokens"],
            "total_tokens": prompt + u["output_tokens"],
            "prompt_tokens_details": {"cached_tokens": u["cache_read_input_tokens"]}}


def _epoch(time: str) -> float:
    return datetime.fromisoformat(time.replace("Z", "+00:00")).timestamp()


class TooLarge(Exception):
    """The converted file passed the size it was allowed."""

    def __init__(self, records: int, nbytes: int) -> None:
        super().__init__(f"stopped after {records} records, {nbytes / 2**30:.2f} GiB")
        self.records, self.nbytes = records, nbytes


def _check(fh: Any, records: int, max_bytes: int | None) -> None:
    if max_bytes is not None and fh.tell() > max_bytes:
        raise TooLarge(records, fh.tell())


def write_llmtrafficlens(calls: Iterator[Call], out: Path, max_bytes: int | None = None) -> int:
    n = 0
    with out.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["timestamp", "request_json", "response_json"])
        for call in calls:
            response = {"object": "chat.completion", "usage": chat_usage(call)}
            writer.writerow([call.time, orjson.dumps(chat_body(call)).decode(),
                             orjson.dumps(response).decode()])
            n += 1
            _check(fh, n, max_bytes)
    return n


def write_promptcachelint(calls: Iterator[Call], out: Path, max_bytes: int | None = None
                          ) -> int:
    n = 0
    with out.open("wb") as fh:
        for call in calls:
            assert call.body is not None
            if call.protocol == "anthropic":
                u = call.usage
                usage = {"input_tokens": u["input_tokens"],
                         "cache_read": u["cache_read_input_tokens"],
                         "cache_write": u["cache_creation_input_tokens"],
                         "output_tokens": u["output_tokens"]}
            else:
                u = chat_usage(call)
                cached = u["prompt_tokens_details"]["cached_tokens"]
                usage = {"input_tokens": u["prompt_tokens"] - cached, "cache_read": cached,
                         "cache_write": 0, "output_tokens": u["completion_tokens"]}
            provider = "anthropic" if call.protocol == "anthropic" else "openai"
            fh.write(orjson.dumps({
                "provider": provider, "body": call.body, "id": f"r{n}", "at": _epoch(call.time),
                "model": call.body.get("model"), "usage": usage, "session_id": call.session,
                "session_explicit": call.session is not None, "stream": False}) + b"\n")
            n += 1
            _check(fh, n, max_bytes)
    return n


def write_prefixcash(calls: Iterator[Call], out: Path, max_bytes: int | None = None,
                     messages_too: bool = True) -> int:
    """prefixcash's normalized call log (what its ``import`` writes): ``input_tokens`` the
    whole prompt, cached included (its hit rate is ``cache_read_tokens / input_tokens``; an
    Anthropic payload given as it is would be read with the uncached count there); each
    call's ``messages`` unless not `messages_too` (its ``report`` reads usage only)."""
    n = 0
    with out.open("wb") as fh:
        for call in calls:
            u = call.usage
            if "prompt_tokens" in u:
                usage = {"input_tokens": u["prompt_tokens"],
                         "cache_read_tokens": u["prompt_tokens_details"]["cached_tokens"],
                         "cache_write_tokens": 0, "output_tokens": u["completion_tokens"]}
            else:
                usage = {"input_tokens": u["input_tokens"] + u["cache_read_input_tokens"]
                         + u["cache_creation_input_tokens"],
                         "cache_read_tokens": u["cache_read_input_tokens"],
                         "cache_write_tokens": u["cache_creation_input_tokens"],
                         "output_tokens": u["output_tokens"]}
            if call.body is None or not messages_too:
                provider = "anthropic" if call.protocol in ("anthropic", "none") else "openai"
                model, messages = (call.body or u).get("model"), None
            else:
                provider = "anthropic" if call.protocol == "anthropic" else "openai"
                model = call.body.get("model")
                messages = (chat_body(call)["messages"] if call.protocol == "openai-responses"
                            else call.body["messages"])
            fh.write(orjson.dumps({
                "provider": provider, "model": model, "usage": usage,
                "session_id": call.session, "messages": messages,
                "ts": call.time.replace("Z", "+00:00")}) + b"\n")
            n += 1
            _check(fh, n, max_bytes)
    return n


def write_prefixcash_usage(calls: Iterator[Call], out: Path, max_bytes: int | None = None
                           ) -> int:
    return write_prefixcash(calls, out, max_bytes, messages_too=False)


# the feeds, by the peer (and what of it) they are for
WRITERS = {"llmtrafficlens": write_llmtrafficlens, "promptcachelint": write_promptcachelint,
           "prefixcash": write_prefixcash, "prefixcash-usage": write_prefixcash_usage}


def convert(peer: str, form: str, log: Path, out: Path, max_bytes: int | None = None) -> int:
    """Write `log` (a `form` corpus) in `peer`'s format to `out`; returns the records.
    Raises `TooLarge` (the file left cut short) once `out` passes `max_bytes`."""
    if (peer.split("-")[0], form) in CANNOT_READ:
        raise ValueError(f"{peer} cannot read {form}: {CANNOT_READ[peer, form]}")
    return WRITERS[peer](READERS[form](log), out, max_bytes)


TOO_LARGE = 3  # the exit status when the converted file passed --max-gb


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("peer", choices=WRITERS)
    ap.add_argument("form", choices=READERS)
    ap.add_argument("log", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--max-gb", type=float, default=None,
                    help=f"stop once the output passes this many GiB (exit {TOO_LARGE})")
    args = ap.parse_args(argv)
    limit = None if args.max_gb is None else int(args.max_gb * 2**30)
    try:
        print(convert(args.peer, args.form, args.log, args.out, limit))
    except TooLarge as exc:
        print(exc, file=sys.stderr)
        return TOO_LARGE
    return 0


if __name__ == "__main__":
    sys.exit(main())
