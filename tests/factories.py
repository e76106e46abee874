"""Factories for hand-built requests: keyword defaults, so a test states only what matters."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from prefixscope.model import Request, Usage

T0 = datetime(2026, 8, 1, 12, 0, 0)
BILLING = "x-anthropic-billing-header: cc_version=2.1.37.0d9; cc_entrypoint=cli; cch={};"
SYSTEM = "You are Claude Code, Anthropic's official CLI for Claude."
TOOLS = [
    {"name": "Bash", "description": "Run a shell command.",
     "input_schema": {"type": "object", "properties": {"command": {"type": "string"}},
                      "required": ["command"]}},
    {"name": "Read", "description": "Read a file.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}},
]


def conversation(n_user: int, tag: str = "") -> list[dict[str, Any]]:
    """user/assistant alternation ending with a user turn: n_user user messages."""
    msgs: list[dict[str, Any]] = []
    for i in range(n_user):
        msgs.append({"role": "user", "content": f"{tag}question {i}"})
        if i < n_user - 1:
            msgs.append({"role": "assistant", "content": f"{tag}answer {i}"})
    return msgs


def anthropic_body(messages: list[dict[str, Any]], *, cch: str = "fa690",
                   system: str = SYSTEM, tools: list[dict[str, Any]] | None = None,
                   ) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "system": [{"type": "text", "text": BILLING.format(cch)},
                   {"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
        "tools": TOOLS if tools is None else tools,
        "messages": messages,
    }


def make_request(rid: str, *, minutes: float = 0, body: dict[str, Any] | None = None,
                 endpoint: str = "anthropic-messages", **kw: Any) -> Request:
    fields: dict[str, Any] = {
        "id": rid, "source_format": "raw", "source_file": "test.jsonl", "source_line": None,
        "timestamp": T0 + timedelta(minutes=minutes), "endpoint": endpoint, "body": body,
        "model": "claude-sonnet-4-5", "usage": Usage(),
    }
    fields.update(kw)
    return Request(**fields)


def nested(depth: int) -> Any:
    """A value `depth` containers deep (a scalar is 0), dicts and lists alternating."""
    value: Any = 1
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def assert_same_entries(got: list[Any], want: list[Any]) -> None:
    """Two lists of replay entries (dataclasses) equal field by field: the same ids in
    order, arrays (or spilled arrays) equal by value and dtype, every other field equal."""
    import numpy as np

    assert [p.id for p in got] == [p.id for p in want]
    for x, y in zip(got, want, strict=True):
        for name in x.__dataclass_fields__:
            u, v = getattr(x, name), getattr(y, name)
            if isinstance(u, np.ndarray) or isinstance(v, np.ndarray):
                assert u is not None and v is not None, (x.id, name)
                assert np.array_equal(np.asarray(u), np.asarray(v)), (x.id, name)
                assert np.asarray(u).dtype == np.asarray(v).dtype, (x.id, name)
            else:
                assert u == v, (x.id, name)


def run_main(argv: list[str], cwd: Path, modules: tuple[str, ...]) -> tuple[set[str], str]:
    """(which of `modules` -- each a module or package name -- are in sys.modules after
    `prefixscope ARGV` ran in a fresh process, its stdout)."""
    code = (
        "import sys\n"
        "from prefixscope.cli.main import main\n"
        f"sys.argv = ['prefixscope', *{argv!r}]\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exit:\n"
        "    assert exit.code in (0, None), exit.code\n"
        f"print(','.join(n for n in {modules!r} if n in sys.modules), file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=cwd)
    assert out.returncode == 0, out.stderr
    last = out.stderr.strip().splitlines()[-1:] or [""]  # the line printed last
    return set(filter(None, last[0].split(","))), out.stdout
