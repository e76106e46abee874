"""Hand-built OpenAI Chat captures for the report's scenarios: one session, one change.

Each turn appends an assistant reply and a user message to the history (append-only);
`change` edits the request of one turn (reorder tools, add one, rewrite an old message,
put a timestamp in the system prompt...), so the scenario holds exactly one breakage.
No prefixscope import: the captures are what a logging proxy would have written.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

T0 = datetime(2026, 6, 1, 10, 0, 0)
SYSTEM = ("You are a careful coding agent working in a git repository. "
          + " ".join(f"Rule {i}: keep the change small and test it." for i in range(60)))
TOOLS = [{"type": "function", "function": {
    "name": name, "description": f"{name} tool: " + "does its job well. " * 10,
    "parameters": {"type": "object", "properties": {
        "path": {"type": "string", "description": "a file path"},
        "limit": {"type": "integer", "description": "at most this many lines"}},
        "required": ["path"]}}} for name in ("read", "write", "grep", "bash")]

Change = Callable[[int, dict[str, Any]], None]


def write_session(path: Path, *, turns: int = 6, change: Change | None = None,
                  model: str = "gpt-4.1", minutes_apart: float = 1.0,
                  usage: Callable[[int], dict[str, Any] | None] | None = None,
                  session: str | None = None, extra: str = "") -> Path:
    """`turns` calls of one conversation as raw capture lines; `change(turn, request)` may
    edit a turn's request in place; `usage(turn)` its response usage (None: not logged)."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test."}]
    lines = []
    for turn in range(turns):
        request: dict[str, Any] = {
            "model": model, "tools": copy.deepcopy(TOOLS),
            "messages": [{"role": "system", "content": SYSTEM + extra}, *copy.deepcopy(history)]}
        if change is not None:
            change(turn, request)
        reply = {"role": "assistant", "content": f"Step {turn}: looked at module {turn}."}
        response: dict[str, Any] = {
            "id": f"chatcmpl-{path.stem}-{turn}", "object": "chat.completion",
            "model": request["model"],
            "choices": [{"index": 0, "message": reply, "finish_reason": "stop"}]}
        logged = usage(turn) if usage is not None else None
        if logged is not None:
            response["usage"] = logged
        line: dict[str, Any] = {
            "timestamp": (T0 + timedelta(minutes=minutes_apart * turn)).isoformat() + "Z",
            "url": "https://api.example.com/v1/chat/completions",
            "request": request, "response": response}
        if session is not None:
            line["headers"] = {"x-session-id": session}
        lines.append(json.dumps(line))
        history += [reply, {"role": "user", "content": f"Now check part {turn + 1}."}]
    path.write_text("\n".join(lines) + "\n")
    return path


def at(turn: int, edit: Callable[[dict[str, Any]], None]) -> Change:
    """A change applied to one turn only."""
    def change(n: int, request: dict[str, Any]) -> None:
        if n == turn:
            edit(request)
    return change


def from_turn(first: int, edit: Callable[[dict[str, Any]], None]) -> Change:
    """A change applied to every turn from `first` on (a lasting change)."""
    def change(n: int, request: dict[str, Any]) -> None:
        if n >= first:
            edit(request)
    return change


# Log text that would act if a report did not escape it: a script, an event handler, a
# Markdown link and a table-cell break.
PLANTED = "<script>window.pwned=1</script><img src=x onerror=alert(1)>[x](http://evil/)|"


def planted_log(tmp_path: Path) -> Path:
    """A session whose system prompt (changing every turn) and session id carry PLANTED."""
    def plant(turn: int, request: dict[str, Any]) -> None:
        request["messages"][0]["content"] = f"{PLANTED}{turn} " + request["messages"][0][
            "content"]
    return write_session(tmp_path / "planted.jsonl", change=plant, session=PLANTED)
