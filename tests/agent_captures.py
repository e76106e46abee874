"""A generator of raw OpenAI Chat captures of several agent sessions at once, for tests.

The real case (issue 13): one agent runs 8 tasks in parallel against one gateway; every
session sends the same system prompt and the same tool list, each starts from its own
first user message (the task), and the capture interleaves their calls in time. With
`with_ids` each request carries an ``X-Claude-Code-Session-Id`` header (the one session
header raw captures read); without it nothing but the bodies says which call belongs to
which session.

Each turn appends the assistant's tool call and the tool's result to the session's
history, so a session's requests are append-only. `compact_after` replaces a
session's history after that many turns by a compaction summary (`compaction_text`) in
one user message, as an agent does when its context fills up.

The truth is returned beside the file, computed from the generator's own bookkeeping
(which session and turn wrote each call): it is the oracle the tests check threading
against. Deterministic: a seeded `random.Random` decides the interleaving.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

SYSTEM = ("You are a coding agent. Work in the repository at /workspace. Use the tools to "
          "inspect and edit files and to run commands; finish with a short report.")
TOOLS = [
    {"type": "function", "function": {
        "name": "bash", "description": "Run a shell command in the workspace.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                       "required": ["command"]}}},
    {"type": "function", "function": {
        "name": "str_replace_editor", "description": "View or edit a file.",
        "parameters": {"type": "object", "properties": {
            "command": {"type": "string"}, "path": {"type": "string"}},
            "required": ["command", "path"]}}},
]
TASKS = [
    "Fix the failing test in tests/test_parser.py",
    "Add a --verbose flag to the CLI",
    "Make the cache eviction LRU instead of FIFO",
    "Document the config file format in README.md",
    "Port setup.py to pyproject.toml",
    "Find why the nightly build is slow",
    "Add type hints to utils/strings.py",
    "Remove the deprecated v1 API endpoints",
]
T0 = datetime(2026, 3, 2, 9, 0, 0)
MODEL = "gpt-4.1-mini"
# Codex CLI's compaction summary prefix (codex-rs/core/templates/compact/summary_prefix.md).
CODEX_SUMMARY = ("Another language model started to solve this problem and produced a summary "
                 "of its thinking process. You also have access to the state of the tools "
                 "that were used by that language model.")


@dataclass(frozen=True)
class Call:
    """What the generator knows of one capture line."""

    response_id: str  # the response's id: the request's native id once ingested
    session: int  # which session (task) sent it
    turn: int  # 0-based turn in that session
    compaction: bool  # its history was just replaced by a compaction summary
    messages: int  # non-system messages in its request


def write_agent_captures(path: Path, *, sessions: int = 8, turns: int = 6,
                         with_ids: bool = False, compact_after: dict[int, int] | None = None,
                         compaction_text: str = CODEX_SUMMARY, cached_block: int | None = None,
                         compaction_at_once: bool = True, seed: int = 13) -> list[Call]:
    """Write `sessions` interleaved agent sessions of `turns` calls each as a JSON-lines
    capture at `path`; return the calls in file (= time) order.

    Usage: ``prompt_tokens = 1000 + 300 * history messages``; with `cached_block`, a turn
    reports the previous turn's prompt rounded down to whole blocks as cached (an engine
    with that block size, the session's prefix still cached), the first turn and a
    compaction 0."""
    rng = random.Random(seed)
    compact_after = compact_after or {}
    histories: list[list[dict[str, Any]]] = [
        [{"role": "user", "content": TASKS[s % len(TASKS)] + (f" (#{s})" if s >= len(TASKS)
                                                               else "")}]
        for s in range(sessions)]
    # Calls come in a random order, so sessions start while others are under way; a
    # compaction follows its session's previous call at once (the agent compacts when that
    # call's reply shows the context is full), or, with `compaction_at_once=False`, where
    # the shuffle put it (the summarising call took a while: other sessions' calls came
    # in between).
    order = [s for s in range(sessions) for _ in range(turns)]
    rng.shuffle(order)
    slots = [(s, order[:n].count(s)) for n, s in enumerate(order)]
    for s, turn in compact_after.items() if compaction_at_once else ():
        slots.remove((s, turn))
        slots.insert(slots.index((s, turn - 1)) + 1, (s, turn))
    calls: list[Call] = []
    lines = []
    last_prompt: dict[int, int] = {}
    for n, (s, turn) in enumerate(slots):
        compaction = compact_after.get(s) == turn
        if compaction:
            histories[s] = [{"role": "user", "content": f"{compaction_text}\n\nSummary: "
                                                        f"work on task {s} so far."}]
        response_id = f"chatcmpl-s{s}t{turn}-{rng.getrandbits(40):010x}"
        request = {"model": MODEL,
                   "messages": [{"role": "system", "content": SYSTEM}, *histories[s]],
                   "tools": TOOLS}
        call_id = f"call_{s}_{turn}"
        reply = {"role": "assistant", "content": None, "tool_calls": [{
            "id": call_id, "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": f"step {turn}"})}}]}
        prompt = 1000 + 300 * len(histories[s])
        usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": 12,
                                 "total_tokens": prompt + 12}
        if cached_block:
            cached = 0 if compaction else last_prompt.get(s, 0) // cached_block * cached_block
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        last_prompt[s] = prompt
        response = {"id": response_id, "object": "chat.completion", "model": MODEL,
                    "choices": [{"index": 0, "message": reply, "finish_reason": "tool_calls"}],
                    "usage": usage}
        line: dict[str, Any] = {
            "timestamp": (T0 + timedelta(seconds=7 * n)).isoformat() + "Z",
            "url": "http://gateway.internal/v1/chat/completions",
            "request": request, "response": response}
        if with_ids:
            line["headers"] = {"X-Claude-Code-Session-Id": f"session-{s:02d}"}
        lines.append(json.dumps(line))
        calls.append(Call(response_id, s, turn, compaction, len(histories[s])))
        histories[s] = [*histories[s], reply,
                        {"role": "tool", "tool_call_id": call_id, "content": f"ok {s}.{turn}"}]
    path.write_text("\n".join(lines) + "\n")
    return calls
