"""Generate large, realistic agent-traffic corpora for the scale benchmark (issue 11).

A gateway serving a team of coding agents logs tens of thousands of 100k-token
requests a day; the bench needs such logs at 0.25 / 0.5 / 1 / 2 GB, written the way
real captures are, without anyone's private traffic. This script builds them from the
real public material in ../shared/data/real/ (OpenHands' system prompt and tool
schemas, its tool observations and task texts, SWE-agent's system prompt and tool
outputs) and writes them as

* ``raw``: raw Anthropic Messages captures, one ``{timestamp, headers, request,
  response}`` per line (what `prefixscope.ingest.formats.raw` reads),
* ``langfuse``: a Langfuse batch export (camelCase observation rows as JSON lines,
  ``input`` the same Anthropic body; ``sessionId`` where the raw form has the session
  header, else one trace per session),
* ``openai``: raw OpenAI Chat captures of the same traffic as the upstream of a
  converting gateway logs it (new-api's ``ClaudeToOpenAIRequest``: the system blocks
  joined into one leading system message -- the billing header and all --, tools as
  functions, tool_use as assistant ``tool_calls``, tool_result as ``tool`` messages),
  OpenAI usage (``prompt_tokens_details.cached_tokens``): the gateway-converted shape of
  issue 37,
* ``claude-code``: a Claude Code projects folder (``projects/<cwd>/<sessionId>.jsonl``, a
  transcript per session: the user's messages and tool results, the responses with their
  usage; no system prompt, no tools, no billing header), and
* ``codex``: a Codex CLI sessions folder (``sessions/YYYY/MM/DD/rollout-*.jsonl``, a
  rollout per session: the input items, the calls' token counts), the same sessions' texts
  as the agents' own logs write them (issue 37's usage-only and agent-log shapes; for these
  two ``--out`` is the folder and ``--size`` its bytes).

Shape of every session (the same at every size, so seconds per GB are comparable
across sizes; a bigger corpus has more sessions, not longer ones): ``--turns``
turns (default 50) whose prompt grows from ~20k to ``--max-tokens`` (default 150k)
estimated tokens (4 bytes a token); each turn appends an assistant tool call and its
tool result. Sessions run concurrently (staggered starts, 20–90 s between turns), so
the log interleaves them as a gateway would. Incidents mixed in, per session, seeded:

* volatile header: Claude Code's ``x-anthropic-billing-header`` with a fresh ``cch``
  each request in ``system[0]`` (a third of the sessions);
* key shuffle: the tool schemas' ``properties`` re-serialized in random key order on
  some turns (an MCP gateway over Go maps; a sixth of the sessions);
* compaction: the history replaced by Claude Code's continuation summary around
  turn 30 (a sixth of the sessions).

Half of the sessions carry ``X-Claude-Code-Session-Id``; the rest are threaded by
shared history. Usage is the Anthropic response's, consistent with the incidents.
Deterministic: the same ``--seed`` and size give the same bytes. Standard library
only (plus orjson when installed); it never imports prefixscope.

Run: ``python bench/gen_corpus.py --size 0.25 --form raw --out /tmp/corpus-0.25.jsonl``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

try:
    import orjson

    def dumps(value: Any) -> bytes:
        return orjson.dumps(value)
except ImportError:  # pragma: no cover - orjson is a prefixscope dependency
    def dumps(value: Any) -> bytes:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()

ROOT = Path(__file__).resolve().parent.parent
REAL_DIRS = (ROOT.parent / "shared" / "data" / "real", ROOT / "tests" / "data" / "real")
BYTES_PER_TOKEN = 4
# Text a real agent writes only when it rewrites its history (SWE-agent's elided
# observations): material holding it would make every session look compacted.
REWRITE_MARKS = ("Old environment output: (", "Outdated window with ")
START = datetime(2026, 9, 1, 9, 0, 0, tzinfo=UTC)
MODEL = "claude-sonnet-4-5-20250929"
COMPACTION_PREFIX = ("This session is being continued from a previous conversation that ran "
                     "out of context. The conversation is summarized below:\n")


# --------------------------------------------------------------------------- material

@dataclass
class Material:
    """Real texts the corpus is cut from."""

    systems: list[str]
    tools: list[dict[str, Any]]  # Anthropic tool definitions
    outputs: list[str]  # tool observations
    tasks: list[str]  # first user messages
    thoughts: list[str]  # assistant texts
    commands: list[dict[str, Any]]  # (tool name, input) of real tool calls


def _real(*parts: str) -> Path:
    for base in REAL_DIRS:
        path = base.joinpath(*parts)
        if path.exists():
            return path
    raise SystemExit(f"real material not found: {'/'.join(parts)} under {REAL_DIRS}")


def load_material() -> Material:
    systems: list[str] = []
    tools: list[dict[str, Any]] = []
    outputs: list[str] = []
    tasks: list[str] = []
    thoughts: list[str] = []
    commands: list[dict[str, Any]] = []
    openhands = _real("openhands",
                      "evaluation__benchmarks__multi_swe_bench__examples__output.jsonl")
    for line in openhands.read_text().splitlines():
        run = json.loads(line)
        history = run["history"]
        first = history[0]
        if first.get("message") and first["message"] not in systems:
            systems.append(first["message"])
        if not tools:
            for tool in first.get("args", {}).get("tools") or []:
                fn = tool["function"]
                tools.append({"name": fn["name"], "description": fn.get("description", ""),
                              "input_schema": fn.get("parameters", {})})
        if isinstance(run.get("instruction"), str):
            tasks.append(run["instruction"])
        for event in history:
            if event.get("observation") and isinstance(event.get("content"), str) \
                    and len(event["content"]) > 40 \
                    and not any(mark in event["content"] for mark in REWRITE_MARKS):
                outputs.append(event["content"])
            if event.get("action") in ("run", "edit", "read", "str_replace") and \
                    isinstance(event.get("args"), dict):
                thought = event["args"].get("thought") or event.get("message")
                if isinstance(thought, str) and thought:
                    thoughts.append(thought)
                cmd = event["args"].get("command")
                if isinstance(cmd, str) and cmd:
                    commands.append({"name": "execute_bash", "input": {"command": cmd}})
    for traj in sorted(_real("swe-agent").glob("*.traj")):
        doc = json.loads(traj.read_text())
        for step in doc.get("trajectory") or []:
            for msg in step.get("messages") or []:
                content = msg.get("content")
                text = content if isinstance(content, str) else "".join(
                    c.get("text", "") for c in content or [] if isinstance(c, dict))
                if msg.get("role") == "system" and text and text not in systems:
                    systems.append(text)
                elif msg.get("role") == "tool" and len(text) > 40 and text not in outputs \
                        and not any(mark in text for mark in REWRITE_MARKS):
                    outputs.append(text)
    if not (systems and tools and outputs and tasks):
        raise SystemExit("real material incomplete (OpenHands output.jsonl, "
                         "SWE-agent trajectories)")
    thoughts = thoughts or ["Let me look at the relevant code."]
    commands = commands or [{"name": "execute_bash", "input": {"command": "ls"}}]
    return Material(systems, tools, outputs, tasks, thoughts, commands)


# --------------------------------------------------------------------------- sessions

@dataclass
class Session:
    """One agent session's state: what the next request sends."""

    index: int
    rng: random.Random
    material: Material
    turns: int
    start_bytes: int
    step_bytes: int
    volatile: bool
    shuffle: bool
    compact_at: int | None
    explicit: bool
    when: datetime
    turn: int = 0
    messages: list[dict[str, Any]] = field(default_factory=list)
    system_text: str = ""
    prev_prompt: int = 0
    prev_stable: int = 0
    session_id: str = ""

    def __post_init__(self) -> None:
        rng = self.rng
        self.session_id = str(_uuid(rng))
        self.system_text = self.material.systems[self.index % len(self.material.systems)]
        task = rng.choice(self.material.tasks)
        fixed = len(self.system_text) + len(json.dumps(self.material.tools))
        context = _fill(rng, self.material.outputs, max(0, self.start_bytes - fixed - len(task)))
        self.messages = [{"role": "user", "content": [
            {"type": "text", "text": f"<repository-context>\n{context}\n</repository-context>"},
            {"type": "text", "text": task}]}]

    def system(self) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if self.volatile:
            cch = self.rng.getrandbits(20)
            blocks.append({"type": "text", "text": "x-anthropic-billing-header: cc_version=2.0.14;"
                                                   f" cc_entrypoint=cli; cch={cch:05x};"})
        blocks.append({"type": "text", "text": self.system_text,
                       "cache_control": {"type": "ephemeral"}})
        return blocks

    def tools(self) -> list[dict[str, Any]]:
        if not (self.shuffle and self.rng.random() < 0.3):
            return self.material.tools
        out = []
        for tool in self.material.tools:
            schema = dict(tool["input_schema"])
            props = list((schema.get("properties") or {}).items())
            self.rng.shuffle(props)
            schema["properties"] = dict(props)
            out.append({**tool, "input_schema": schema})
        return out

    def request(self) -> dict[str, Any]:
        return {"model": MODEL, "max_tokens": 32000, "stream": False,
                "system": self.system(), "tools": self.tools(), "messages": list(self.messages),
                "metadata": {"user_id": f"user_{self.index % 7:064x}"}}

    def advance(self) -> None:
        """Append this turn's assistant tool call and tool result (or compact)."""
        rng = self.rng
        self.turn += 1
        self.when += timedelta(seconds=rng.uniform(20, 90))
        if self.compact_at is not None and self.turn == self.compact_at:
            summary = _fill(rng, self.material.thoughts + self.material.outputs,
                            self.start_bytes // 2)
            self.messages = [{"role": "user", "content": [
                {"type": "text", "text": COMPACTION_PREFIX + summary}]}]
            return
        call = rng.choice(self.material.commands)
        tool_id = f"toolu_{rng.getrandbits(96):024x}"
        self.messages.append({"role": "assistant", "content": [
            {"type": "text", "text": rng.choice(self.material.thoughts)[:2000]},
            {"type": "tool_use", "id": tool_id, "name": call["name"], "input": call["input"]}]})
        output = _fill(rng, self.material.outputs, self.step_bytes)
        self.messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tool_id, "content": output}]})

    def usage(self, body_bytes: int, stable_bytes: int) -> dict[str, int]:
        prompt = body_bytes // BYTES_PER_TOKEN
        if self.turn == 0 or (self.compact_at is not None and self.turn == self.compact_at):
            cached = 0
        elif self.volatile:
            cached = 0  # the billing header is system[0]: nothing before it is stable
        else:
            cached = min(self.prev_prompt, prompt - 1)
            if self.shuffle and stable_bytes != self.prev_stable:
                cached = 0
        cached = cached // 64 * 64
        self.prev_prompt, self.prev_stable = prompt, stable_bytes
        return {"input_tokens": prompt - cached, "cache_read_input_tokens": cached,
                "cache_creation_input_tokens": prompt - cached,
                "output_tokens": rng_out(self.rng)}


def rng_out(rng: random.Random) -> int:
    return rng.randint(40, 900)


def _uuid(rng: random.Random) -> str:
    h = f"{rng.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}"


def _fill(rng: random.Random, pool: list[str], size: int) -> str:
    """About `size` characters of real text from `pool`, pieces joined by blank lines."""
    parts: list[str] = []
    got = 0
    while got < size:
        piece = rng.choice(pool)
        if got + len(piece) > size and parts:
            piece = piece[: max(200, size - got)]
        parts.append(piece)
        got += len(piece) + 2
    return "\n\n".join(parts)


def session_stream(*, turns: int, max_tokens: int, min_tokens: int, seed: int,
                   material: Material) -> Iterator[Session]:
    """Session 0, 1, 2, ... of the corpus, without end (each drawn from the seed in turn, so
    the first n are the same however many are taken)."""
    start_bytes = min_tokens * BYTES_PER_TOKEN
    step_bytes = (max_tokens - min_tokens) * BYTES_PER_TOKEN // max(1, turns - 1)
    master = random.Random(seed)
    i = 0
    while True:
        rng = random.Random(master.getrandbits(64))
        yield Session(
            index=i, rng=rng, material=material, turns=turns, start_bytes=start_bytes,
            step_bytes=step_bytes, volatile=i % 3 == 1, shuffle=i % 6 == 2,
            compact_at=turns * 3 // 5 if i % 6 == 4 else None, explicit=i % 2 == 0,
            when=START + timedelta(seconds=i * 240 + rng.uniform(0, 60)))
        i += 1


def sessions_for(size_gb: float, *, turns: int, max_tokens: int, min_tokens: int,
                 sessions: int | None, seed: int, material: Material) -> list[Session]:
    start_bytes = min_tokens * BYTES_PER_TOKEN
    step_bytes = (max_tokens - min_tokens) * BYTES_PER_TOKEN // max(1, turns - 1)
    per_session = turns * (start_bytes + step_bytes * (turns - 1) / 2)
    count = sessions or max(1, round(size_gb * (1 << 30) / per_session))
    stream = session_stream(turns=turns, max_tokens=max_tokens, min_tokens=min_tokens,
                            seed=seed, material=material)
    return [next(stream) for _ in range(count)]


def requests(sessions: list[Session]) -> Iterator[tuple[Session, dict[str, Any], dict[str, int]]]:
    """(session, request body, usage) in time order across all sessions."""
    live = sorted(sessions, key=lambda s: (s.when, s.index))
    while live:
        s = live.pop(0)
        body = s.request()
        stable = len(dumps(body["tools"]))
        yield s, body, s.usage(len(dumps(body)), stable)
        s.advance()
        if s.turn < s.turns:
            # insert keeping time order (few live sessions: a linear insert is enough)
            key = (s.when, s.index)
            pos = 0
            while pos < len(live) and (live[pos].when, live[pos].index) <= key:
                pos += 1
            live.insert(pos, s)


def _ts(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def raw_line(s: Session, body: dict[str, Any], usage: dict[str, int]) -> bytes:
    headers = {"content-type": "application/json", "anthropic-version": "2023-06-01",
               "user-agent": "claude-cli/2.0.14 (external, cli)"}
    if s.explicit:
        headers["x-claude-code-session-id"] = s.session_id
    msg_id = "msg_" + hashlib.sha256(f"{s.session_id}/{s.turn}".encode()).hexdigest()[:24]
    response = {"id": msg_id, "type": "message", "role": "assistant", "model": MODEL,
                "content": [{"type": "text", "text": "Running the next step."}],
                "stop_reason": "tool_use", "usage": usage}
    return dumps({"timestamp": _ts(s.when), "url": "https://api.anthropic.com/v1/messages",
                  "headers": headers, "request": body, "response": response})


def langfuse_line(s: Session, body: dict[str, Any], usage: dict[str, int]) -> bytes:
    obs_id = hashlib.sha256(f"{s.session_id}/{s.turn}/obs".encode()).hexdigest()[:32]
    # a session with a Langfuse sessionId has a trace per turn; one without is one trace
    # (an agent run traced as a whole, as LangGraph does)
    trace_key = f"{s.session_id}/{s.turn}" if s.explicit else s.session_id
    trace_id = hashlib.sha256(f"{trace_key}/trace".encode()).hexdigest()[:32]
    end = s.when + timedelta(seconds=2)
    row = {"id": obs_id, "traceId": trace_id, "type": "GENERATION", "name": "anthropic.messages",
           "startTime": _ts(s.when), "endTime": _ts(end), "model": MODEL,
           "sessionId": s.session_id if s.explicit else None,
           "userId": body["metadata"]["user_id"],
           "input": body,
           "output": {"role": "assistant", "content": "Running the next step."},
           "usageDetails": {"input": usage["input_tokens"],
                            "input_cache_read": usage["cache_read_input_tokens"],
                            "input_cache_creation": usage["cache_creation_input_tokens"],
                            "output": usage["output_tokens"]}}
    return dumps(row)


def openai_body(body: dict[str, Any]) -> dict[str, Any]:
    """The Anthropic body as new-api's ClaudeToOpenAIRequest sends it upstream."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "".join(b["text"] for b in body["system"])}]
    for message in body["messages"]:
        texts = [{"type": "text", "text": b["text"]} for b in message["content"]
                 if b["type"] == "text"]
        calls = [{"id": b["id"], "type": "function", "function": {
            "name": b["name"], "arguments": json.dumps(b["input"], sort_keys=True,
                                                       separators=(",", ":"))}}
                 for b in message["content"] if b["type"] == "tool_use"]
        for block in message["content"]:
            if block["type"] == "tool_result":
                messages.append({"role": "tool", "content": block["content"], "name": "",
                                 "tool_call_id": block["tool_use_id"]})
        if calls:
            messages.append({"role": message["role"], "content": None, "tool_calls": calls})
        elif texts:
            messages.append({"role": message["role"], "content": texts})
    tools = [{"type": "function", "function": {
        "description": t["description"], "name": t["name"],
        "parameters": json.loads(json.dumps(t["input_schema"], sort_keys=True))}}
        for t in body["tools"]]
    return {"model": body["model"], "messages": messages, "max_tokens": body["max_tokens"],
            "stream": False, "tools": tools}


def openai_line(s: Session, body: dict[str, Any], usage: dict[str, int]) -> bytes:
    headers = {"content-type": "application/json", "user-agent": "new-api/0.9"}
    if s.explicit:
        headers["x-session-id"] = s.session_id
    prompt = usage["input_tokens"] + usage["cache_read_input_tokens"]
    response = {"id": "chatcmpl-" + hashlib.sha256(f"{s.session_id}/{s.turn}".encode()
                                                   ).hexdigest()[:24],
                "object": "chat.completion", "model": MODEL,
                "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                    "role": "assistant", "content": "Running the next step."}}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": usage["output_tokens"],
                          "total_tokens": prompt + usage["output_tokens"],
                          "prompt_tokens_details": {
                              "cached_tokens": usage["cache_read_input_tokens"]}}}
    return dumps({"timestamp": _ts(s.when), "url": "http://gateway:3000/v1/chat/completions",
                  "headers": headers, "request": openai_body(body), "response": response})


# --------------------------------------------------------------------------- agent logs
# The agents' own logs: one file per session in the client's folder layout, each line
# written once (the history is not resent per call, as a capture's body is), so a GB of
# them holds about fifteen times the calls of a GB of captures.

CC_VERSION = "2.0.14"
CODEX_VERSION = "0.63.0"
CODEX_MODEL = "gpt-5.1-codex-max"
FOLDER_FORMS = ("claude-code", "codex")


@dataclass
class Call:
    """One model call of an agent session as its log records it."""

    when: datetime  # when it was sent
    body: dict[str, Any]  # the Anthropic request the session sent (its size is the prompt's)
    usage: dict[str, int]  # Session.usage: the Anthropic usage of the raw form
    prompt: int  # estimated prompt tokens (body bytes / 4)
    compacted: str | None  # the summary, when the history was compacted after this call
    thought: str  # the assistant's text
    tool_id: str
    command: dict[str, Any]  # the tool call: name, input
    output: str  # the tool's output


def session_calls(s: Session) -> Iterator[Call]:
    """The calls of one session in order, with what each answered (the assistant turn and
    tool result `Session.advance` appends, or the compaction it makes)."""
    while s.turn < s.turns:
        when, body = s.when, s.request()
        body_bytes = len(dumps(body))
        usage = s.usage(body_bytes, len(dumps(body["tools"])))
        s.advance()
        if s.messages[0]["content"][0].get("text", "").startswith(COMPACTION_PREFIX) \
                and len(s.messages) == 1:
            yield Call(when, body, usage, body_bytes // BYTES_PER_TOKEN,
                       s.messages[0]["content"][0]["text"], "", "", {}, "")
            continue
        said, result = s.messages[-2]["content"], s.messages[-1]["content"][0]
        yield Call(when, body, usage, body_bytes // BYTES_PER_TOKEN, None, said[0]["text"],
                   said[1]["id"], {"name": said[1]["name"], "input": said[1]["input"]},
                   result["content"])


def _hex_id(*parts: object, n: int = 24) -> str:
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:n]


def cwd_of(s: Session) -> str:
    return f"/home/dev/work/repo-{s.index % 6}"


def claude_code_lines(s: Session) -> Iterator[tuple[dict[str, Any], bool]]:
    """Claude Code's transcript of one session (~/.claude/projects/<cwd>/<sessionId>.jsonl,
    as 2.0 writes it): the user's first message, then per API call its streamed response
    as one assistant line per content block (the same `message.id` and `requestId`, usage
    on each, the final output count on the last) and the tool result as a user line (with
    `toolUseResult`, the output again); a compaction as a `compact_boundary` system record
    and the summary as an `isCompactSummary` user message. Usage is Anthropic's as
    Claude Code reports it: the whole prompt written or read, a few tokens uncached. Yields
    (line, whether it is the last line of a call)."""
    base = {"isSidechain": False, "userType": "external", "cwd": cwd_of(s),
            "sessionId": s.session_id, "version": CC_VERSION, "gitBranch": "main"}
    parent: str | None = None
    count = 0

    def line(kind: str, when: datetime, **fields: Any) -> dict[str, Any]:
        nonlocal parent, count
        count += 1
        uid = _uuid_of(s.session_id, count)
        out = {"parentUuid": parent, **base, "type": kind, **fields, "uuid": uid,
               "timestamp": _ts(when)}
        parent = uid
        return out

    first = s.messages[0]["content"]
    yield line("user", s.when - timedelta(seconds=2),
               message={"role": "user", "content": list(first)}), False
    for call in session_calls(s):
        u = call.usage
        read = u["cache_read_input_tokens"]
        fresh = 3 + s.turn % 7  # not from the session's rng: the same texts in every form
        write = max(0, call.prompt - read - fresh)
        usage = {"input_tokens": fresh, "cache_creation_input_tokens": write,
                 "cache_read_input_tokens": read,
                 "cache_creation": {"ephemeral_5m_input_tokens": write,
                                    "ephemeral_1h_input_tokens": 0},
                 "output_tokens": u["output_tokens"], "service_tier": "standard"}
        msg_id = "msg_01" + _hex_id(s.session_id, s.turn, n=22)
        request_id = "req_011C" + _hex_id(s.session_id, s.turn, "req", n=20)
        blocks: list[dict[str, Any]] = [{"type": "text", "text": call.thought or
                                         "Let me summarize the work so far."}]
        if call.compacted is None:
            blocks.append({"type": "tool_use", "id": call.tool_id,
                           "name": "Bash", "input": call.command["input"]})
        when = call.when + timedelta(seconds=4)
        for k, block in enumerate(blocks):
            last = k == len(blocks) - 1
            message = {"id": msg_id, "type": "message", "role": "assistant", "model": MODEL,
                       "content": [block], "stop_reason": "tool_use" if last else None,
                       "stop_sequence": None,
                       "usage": usage if last else {**usage, "output_tokens": 2}}
            yield line("assistant", when + timedelta(milliseconds=300 * k), message=message,
                       requestId=request_id), last
        done = when + timedelta(seconds=3)
        if call.compacted is not None:
            before, parent = parent, None  # a compaction starts a new chain
            yield line("system", done, logicalParentUuid=before, subtype="compact_boundary",
                       content="Conversation compacted", isMeta=False, level="info",
                       compactMetadata={"trigger": "auto", "preTokens": call.prompt}), False
            yield line("user", done, isCompactSummary=True, message={
                "role": "user", "content": call.compacted}), False
            continue
        yield line("user", done, message={"role": "user", "content": [
            {"tool_use_id": call.tool_id, "type": "tool_result", "content": call.output,
             "is_error": False}]},
            toolUseResult={"stdout": call.output, "stderr": "", "interrupted": False,
                           "isImage": False}), False


def _uuid_of(*parts: object) -> str:
    h = _hex_id(*parts, n=32)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}"


RATE_LIMITS = {"primary": {"used_percent": 4.0, "window_minutes": 300,
                           "resets_at": 1763862524},
               "secondary": {"used_percent": 3.0, "window_minutes": 10080,
                             "resets_at": 1764176208},
               "credits": {"has_credits": False, "unlimited": False, "balance": "0"}}
USAGE_NAMES = ("input_tokens", "cached_input_tokens", "output_tokens",
               "reasoning_output_tokens", "total_tokens")


def codex_lines(s: Session) -> Iterator[tuple[dict[str, Any], bool]]:
    """Codex CLI's rollout of one session (~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl, as
    0.6x writes it, line order as in a real rollout): session_meta (with
    base_instructions), the environment context and the user's message as response
    items, turn_context, a ghost_snapshot; per model call an agent_reasoning event, the
    token_count event (the call's `last_token_usage` and the cumulative
    `total_token_usage`), the encrypted reasoning, a shell function_call and its output or
    (every other call) an apply_patch custom_tool_call adding the output as a file and its
    result, turn_context, and the token_count
    again with the same totals (Codex re-emits it: no new call); a compaction as a
    `compacted` line and its `context_compacted` event. Usage is OpenAI's (input includes
    the cached tokens, 128-token steps): each call reads back the previous prompt but
    after a compaction. Yields (line, whether it ends a call: its first token_count)."""
    def line(kind: str, when: datetime, payload: dict[str, Any]) -> dict[str, Any]:
        return {"timestamp": _ts(when), "type": kind, "payload": payload}

    start = s.when - timedelta(seconds=3)
    cwd = cwd_of(s)
    context = {"cwd": cwd, "approval_policy": "on-request",
               "sandbox_policy": {"type": "workspace-write", "network_access": False,
                                  "exclude_tmpdir_env_var": False,
                                  "exclude_slash_tmp": False},
               "model": CODEX_MODEL, "effort": "high", "summary": "auto"}
    yield line("session_meta", start, {
        "id": s.session_id, "timestamp": _ts(start), "cwd": cwd, "originator": "codex_cli_rs",
        "cli_version": CODEX_VERSION, "instructions": None, "source": "cli",
        "model_provider": "openai", "base_instructions": {"text": s.system_text},
        "git": {"commit_hash": _hex_id(s.session_id, "git", n=40), "branch": "main",
                "repository_url": f"git@github.com:dev/repo-{s.index % 6}.git"}}), False
    environment = (f"<environment_context>\n  <cwd>{cwd}</cwd>\n  <approval_policy>on-request"
                   "</approval_policy>\n  <sandbox_mode>workspace-write</sandbox_mode>\n  "
                   "<network_access>restricted</network_access>\n  <shell>bash</shell>\n"
                   "</environment_context>")
    yield line("response_item", start, {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": environment}]}), False
    task = "\n\n".join(b["text"] for b in s.messages[0]["content"])
    yield line("response_item", start, {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": task}]}), False
    yield line("event_msg", start, {"type": "user_message", "message": task,
                                    "images": []}), False
    yield line("turn_context", start, context), False
    yield line("response_item", start, {"type": "ghost_snapshot", "ghost_commit": {
        "id": _hex_id(s.session_id, "ghost", n=40), "parent": None,
        "preexisting_untracked_files": [], "preexisting_untracked_dirs": []}}), False
    total = [0] * 5
    previous = 0
    for call in session_calls(s):
        when = call.when + timedelta(seconds=4)
        cached = 0 if previous == 0 else min(previous, call.prompt) // 128 * 128
        out = call.usage["output_tokens"]
        last = [call.prompt, cached, out, out // 2, call.prompt + out]
        total = [a + b for a, b in zip(total, last, strict=True)]
        count = {"type": "token_count", "info": {
            "total_token_usage": dict(zip(USAGE_NAMES, total, strict=True)),
            "last_token_usage": dict(zip(USAGE_NAMES, last, strict=True)),
            "model_context_window": 272000}, "rate_limits": RATE_LIMITS}
        summary = (call.thought or "Summarizing").split("\n", 1)[0][:80]
        yield line("event_msg", when, {"type": "agent_reasoning",
                                       "text": f"**{summary}**"}), False
        yield line("event_msg", when, count), True
        reasoning = "gAAAAABp" + _hex_id(s.session_id, s.turn, "r", n=64) * 12
        yield line("response_item", when, {
            "type": "reasoning", "summary": [{"type": "summary_text", "text": call.thought}],
            "content": None, "encrypted_content": reasoning}), False
        if call.compacted is not None:
            yield line("compacted", when, {"message": call.compacted}), False
            yield line("event_msg", when, {"type": "context_compacted"}), False
            previous = 0
        elif s.turn % 2:  # a shell command and what it printed
            call_id = "call_" + _hex_id(call.tool_id, n=24)
            arguments = json.dumps({**call.command["input"], "workdir": ".",
                                    "timeout_ms": 120000}, separators=(",", ":"))
            yield line("response_item", when, {"type": "function_call", "name": "shell_command",
                                               "arguments": arguments,
                                               "call_id": call_id}), False
            yield line("response_item", when, {
                "type": "function_call_output", "call_id": call_id,
                "output": f"Exit code: 0\nWall time: 1 seconds\nOutput:\n{call.output}"}), False
            previous = call.prompt
        else:  # an apply_patch edit (the freeform tool), as many of a real rollout's calls are
            call_id = "call_" + _hex_id(call.tool_id, n=24)
            name = f"src/module_{s.turn}.py"
            patch = "".join(f"+{row}\n" for row in call.output.splitlines())
            yield line("response_item", when, {
                "type": "custom_tool_call", "status": "completed", "call_id": call_id,
                "name": "apply_patch",
                "input": f"*** Begin Patch\n*** Add File: {name}\n{patch}*** End Patch"}), False
            result = {"output": f"Success. Updated the following files:\nA {name}\n",
                      "metadata": {"exit_code": 0, "duration_seconds": 0.0}}
            yield line("response_item", when, {
                "type": "custom_tool_call_output", "call_id": call_id,
                "output": json.dumps(result, separators=(",", ":"))}), False
            previous = call.prompt
        yield line("turn_context", when, context), False
        yield line("event_msg", when + timedelta(milliseconds=700), count), False


def session_path(out: Path, form: str, s: Session) -> Path:
    """Where the client keeps the session's log, under the folder `out`."""
    if form == "claude-code":
        return out / "projects" / cwd_of(s).replace("/", "-") / f"{s.session_id}.jsonl"
    start = s.when - timedelta(seconds=3)
    return (out / "sessions" / start.strftime("%Y/%m/%d") /
            f"rollout-{start.strftime('%Y-%m-%dT%H-%M-%S')}-{s.session_id}.jsonl")


def generate_folder(out: Path, size_gb: float, form: str, *, seed: int, turns: int,
                    max_tokens: int, min_tokens: int, sessions: int | None
                    ) -> tuple[int, int, int]:
    """An agent's log folder: sessions written one file each until the folder holds
    `size_gb` (or `sessions` of them); returns (sessions, calls, bytes)."""
    write_lines = {"claude-code": claude_code_lines, "codex": codex_lines}[form]
    stream = session_stream(turns=turns, max_tokens=max_tokens, min_tokens=min_tokens,
                            seed=seed, material=load_material())
    target = size_gb * (1 << 30)
    made = calls = written = 0
    while (made < sessions) if sessions else (written < target or made == 0):
        s = next(stream)
        path = session_path(out, form, s)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as fh:
            for record, ends_call in write_lines(s):
                data = dumps(record) + b"\n"
                fh.write(data)
                written += len(data)
                calls += ends_call
        made += 1
    return made, calls, written


def generate(out: Path, size_gb: float, form: str, *, seed: int = 11, turns: int = 50,
             max_tokens: int = 150_000, min_tokens: int = 20_000,
             sessions: int | None = None) -> tuple[int, int, int]:
    """Write the corpus (a folder for the agent-log forms); returns (sessions, requests,
    bytes)."""
    if form in FOLDER_FORMS:
        return generate_folder(out, size_gb, form, seed=seed, turns=turns,
                               max_tokens=max_tokens, min_tokens=min_tokens, sessions=sessions)
    material = load_material()
    chosen = sessions_for(size_gb, turns=turns, max_tokens=max_tokens, min_tokens=min_tokens,
                          sessions=sessions, seed=seed, material=material)
    line = {"raw": raw_line, "langfuse": langfuse_line, "openai": openai_line}[form]
    count = written = 0
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as fh:
        for s, body, usage in requests(chosen):
            data = line(s, body, usage) + b"\n"
            fh.write(data)
            written += len(data)
            count += 1
    return len(chosen), count, written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=float, default=0.25, help="target size in GB (GiB)")
    ap.add_argument("--form", choices=("raw", "langfuse", "openai", *FOLDER_FORMS),
                    default="raw")
    ap.add_argument("--out", type=Path, required=True,
                    help="the log file (a folder for claude-code and codex)")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--turns", type=int, default=50)
    ap.add_argument("--min-tokens", type=int, default=20_000)
    ap.add_argument("--max-tokens", type=int, default=150_000)
    ap.add_argument("--sessions", type=int, default=None,
                    help="number of sessions (default: as many as --size needs)")
    args = ap.parse_args(argv)
    n_sessions, n_requests, size = generate(
        args.out, args.size, args.form, seed=args.seed, turns=args.turns,
        max_tokens=args.max_tokens, min_tokens=args.min_tokens, sessions=args.sessions)
    print(f"{args.out}: {n_sessions} sessions, {n_requests} requests, {size / (1 << 30):.3f} GiB",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
