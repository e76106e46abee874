"""Aider's LLM history (`.aider.llm.history`, written with `--llm-history-file`).

Aider can log every request it sends and every reply, as text, to the file named by
`--llm-history-file` / ``AIDER_LLM_HISTORY_FILE`` (conventionally ``.aider.llm.history``
in the repository). Unlike the other agents' logs it holds the whole prompt, system
prompt and repo map included, so consecutive requests can be compared exactly as sent
(up to line endings); what it lacks is usage, the model name and any session id.

The shape, from the Aider source (Aider-AI/aider): `InputOutput.log_llm_history(role,
content)` in `aider/io.py` appends ``f"{role.upper()} {timestamp}\\n"`` (local time,
`datetime.now().isoformat(timespec="seconds")`) and ``content + "\\n"``;
`Coder.send_message` / `send` in `aider/coders/base_coder.py` log ``TO LLM`` with
`format_messages(messages)` before each completion and ``LLM RESPONSE`` with
`format_content("ASSISTANT", content)` after it. `format_messages` (`aider/utils.py`)
writes ``-------`` before each message and every line of its content as ``<ROLE>
<line>`` (`content.splitlines()`); list content (images) is written one ``<ROLE>
<key>: <value>`` line per item.

Guarantees:

* One request per ``TO LLM`` block (weak-model calls -- commit messages, summaries --
  included: they are calls too), at the line of its header; `output` is the
  ``LLM RESPONSE`` block after it, when logged. Record key: the timestamp and the
  content hash of the messages, so the same call in a copied file is stored once.
* Body (``openai-chat``): `{"messages": [...]}` rebuilt from the block, each message's
  lines joined with ``\\n`` after their role prefix. `splitlines` dropped the content's
  trailing newline and turned ``\\r\\n`` into ``\\n``, so `metadata.approximate` is
  ``["line-endings", "model"]`` (and ``list-content`` when a message had list content,
  which the log flattens). The model is not logged (None).
* Usage: not logged (all None, never zeros). Aider's ``.aider.chat.history.md`` prints
  rounded counts (``Tokens: 3.2k sent``) and is not read.
* Sessions: none in the file (one file accumulates every session of the repository):
  threading groups the requests by their shared history.
* Time: the header's local time, read as written (no zone is logged).
* Reported as skips: a block whose lines are not ``<ROLE> <text>`` lines of the roles
  Aider writes (system, user, assistant, tool), and text before the first header.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from prefixscope.ingest.normalize.fields import parse_time
from prefixscope.ingest.source import READ_ERRORS, Probe, Source
from prefixscope.model import Record, Request, Skip, Usage
from prefixscope.model.hashing import content_hash

NAME = "aider"
DESCRIPTION = "Aider LLM history (.aider.llm.history): every request as sent, no usage"

_HEADER = re.compile(r"^(TO LLM|LLM RESPONSE) (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)$")
_SEPARATOR = "-------"
_ROLES = ("SYSTEM", "USER", "ASSISTANT", "TOOL")
_LIST_ITEM = re.compile(r"^(type|text|image_url|Image_url URL): ")


def sniff(probe: Probe) -> bool:
    """A text file whose first line is a ``TO LLM <timestamp>`` header."""
    if probe.kind != "text":
        return False
    first = probe.text.lstrip("\ufeff").split("\n", 1)[0].rstrip("\r")
    match = _HEADER.match(first)
    return match is not None and match.group(1) == "TO LLM"


@dataclass
class _Block:
    kind: str  # "TO LLM" | "LLM RESPONSE"
    time: str
    line: int
    lines: list[str] = field(default_factory=list)


def parse(source: Source, probe: Probe) -> Iterator[Record | Skip]:
    pending: _Block | None = None  # a TO LLM block waiting for its response
    cut: Skip | None = None
    blocks = _blocks(source)
    try:
        for item in blocks:
            if isinstance(item, Skip):
                yield item
            elif item.kind == "TO LLM":
                if pending is not None:
                    yield _request(pending, None)
                pending = item
            elif pending is not None:
                yield _request(pending, item)
                pending = None
    except READ_ERRORS as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        cut = Skip(None, f"read failed part-way, the rest of the file is lost: {reason}")
    if pending is not None:
        yield _request(pending, None)
    if cut is not None:
        yield cut


def _blocks(source: Source) -> Iterator[_Block | Skip]:
    block: _Block | None = None
    stray: int | None = None
    with source.open_binary() as fh:
        for lineno, raw in enumerate(fh, start=1):
            text = raw.decode("utf-8", errors="replace").rstrip("\n").rstrip("\r")
            if lineno == 1:
                text = text.lstrip("\ufeff")
            match = _HEADER.match(text)
            if match:
                if block is not None:
                    yield block
                block = _Block(match.group(1), match.group(2), lineno)
            elif block is not None:
                block.lines.append(text)
            elif stray is None and text.strip():
                stray = lineno
                yield Skip(lineno, "text before the first TO LLM / LLM RESPONSE header")
    if block is not None:
        yield block


def _messages(lines: list[str]) -> tuple[list[dict[str, Any]], bool] | None:
    """(messages, had list content) of a TO LLM block; None when a line is not Aider's."""
    messages: list[dict[str, Any]] = []
    current: tuple[str, list[str]] | None = None
    listed = False
    for text in lines:
        if text == _SEPARATOR:
            if current is not None:
                messages.append({"role": current[0], "content": "\n".join(current[1])})
            current = None
            continue
        if text == "":
            continue  # an empty message's content: format_content wrote no line
        role, _, rest = text.partition(" ")
        if role not in _ROLES:
            return None
        if current is None:
            current = (role.lower(), [])
        elif current[0] != role.lower():
            return None
        if _LIST_ITEM.match(rest):
            listed = True
        current[1].append(rest)
    if current is not None:
        messages.append({"role": current[0], "content": "\n".join(current[1])})
    return messages, listed


def _request(block: _Block, response: _Block | None) -> Record | Skip:
    parsed = _messages(block.lines)
    if parsed is None or not parsed[0]:
        return Skip(block.line, "TO LLM block whose lines are not '<ROLE> <text>' messages")
    messages, listed = parsed
    output: dict[str, Any] | None = None
    if response is not None:
        reply = [t.partition(" ")[2] if t.partition(" ")[0] == "ASSISTANT" else t
                 for t in response.lines]
        while reply and reply[-1] == "":
            reply.pop()
        output = {"role": "assistant", "content": "\n".join(reply)}
    approximate = ["line-endings", "model"]
    if listed:
        approximate.append("list-content")
    metadata: dict[str, Any] = {"approximate": approximate}
    if response is not None:
        metadata["response_time"] = response.time
    request = Request(
        id="", source_format="", source_file="", source_line=block.line,
        timestamp=parse_time(block.time),
        endpoint="openai-chat",
        client="aider",
        body={"messages": messages},
        output=output,
        usage=Usage(),
        metadata=metadata,
    )
    return Record(request=request, key=f"aider:{block.time}:{content_hash(messages)}")
