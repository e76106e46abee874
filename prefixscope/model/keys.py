"""Protocol-independent views of a request body: its system part, tools and history.

Session threading and segment census need the same three parts of every body,
whatever its protocol: the system prompt (Anthropic ``system``, leading OpenAI
``system``/``developer`` messages, Responses ``instructions``), the tool list,
and the conversation history. This module extracts them and derives the keys
the store keeps per request:

* `prefix_chain`: chained hashes (`hashing.chain_hashes`) of the history
  messages with ``cache_control`` removed, so "B's history starts with A's" is one
  comparison; for block-hash traces, the ids of the full blocks (they are already
  prefix-chained by the trace).
* `fingerprint`: content hash of system (without Claude Code's volatile billing
  header) plus tools: equal fingerprints with a shorter history is how a
  compaction is recognized.
* `compaction_marker`: the agent whose compaction marker (a summary's opening words, an
  elided-output placeholder, a compaction item) the history holds: without an explicit
  session id, the only evidence that a history sharing nothing with an earlier request
  is a compaction and not a new conversation.
"""

from __future__ import annotations

import operator
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from prefixscope.model import Request
from prefixscope.model.hashing import chain_hashes, content_hash, strip_cache_control

# Claude Code's first system block: "x-anthropic-billing-header: cc_version=2.1.37.0d9;
# cc_entrypoint=cli; cch=fa690;" -- `cch` changes on every request. Gateways may join it
# to the next block with no separator, so match only the `key=value;` items.
BILLING_HEADER_RE = re.compile(r"x-anthropic-billing-header:(?:[ \t]*[\w.-]+=[^;\s]*;)*[ \t]*\n?")

_MASK64 = (1 << 64) - 1


def split_body(endpoint: str, body: dict[str, Any] | None) -> tuple[Any, list[Any], list[Any]]:
    """(system, tools, history) of a body; history excludes leading system messages."""
    if not isinstance(body, dict):
        return None, [], []
    raw_tools = body.get("tools")
    tools: list[Any] = raw_tools if isinstance(raw_tools, list) else []
    if endpoint == "openai-responses":
        items = body.get("input")
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        return body.get("instructions"), tools, items if isinstance(items, list) else []
    raw_messages = body.get("messages")
    messages: list[Any] = raw_messages if isinstance(raw_messages, list) else []
    if endpoint == "anthropic-messages" or "system" in body:
        return body.get("system"), tools, messages
    lead = _lead(messages)
    system = [m.get("content") for m in messages[:lead]] if lead else None
    return system, tools, messages[lead:]


def _lead(messages: list[Any]) -> int:
    """How many system / developer messages an OpenAI Chat history opens with."""
    lead = 0
    while lead < len(messages) and isinstance(messages[lead], dict) and \
            messages[lead].get("role") in ("system", "developer"):
        lead += 1
    return lead


def history_hashes(endpoint: str, body: Any,
                   layout: Mapping[str, Sequence[str]] | None) -> Sequence[str] | None:
    """The stored part hashes of the history `split_body` gives (`store.parts`: `layout`
    names the hash of each element of a body's lists), item for item; None when the
    history is not a slice of one of them (a Responses input given as one string, no
    list) or `layout` does not hold it."""
    if not isinstance(body, dict) or not layout:
        return None
    name = "input" if endpoint == "openai-responses" else "messages"
    items = body.get(name)
    hashes = layout.get(name)
    if not isinstance(items, list) or hashes is None or len(hashes) != len(items):
        return None
    if name == "input" or endpoint == "anthropic-messages" or "system" in body:
        return hashes
    return hashes[_lead(items):]


def strip_billing_header(system: Any) -> Any:
    """System content without Claude Code's billing header (string, blocks, or contents)."""
    if isinstance(system, str):
        return BILLING_HEADER_RE.sub("", system)
    if isinstance(system, list):
        out = []
        for item in system:
            if isinstance(item, dict) and isinstance(item.get("text"), str):
                text = BILLING_HEADER_RE.sub("", item["text"])
                if not text.strip() and item["text"].strip():
                    continue
                out.append({**item, "text": text})
            else:
                out.append(strip_billing_header(item))
        return out
    return system


def prefix_chain(request: Request, hashes: Sequence[str] | None = None
                 ) -> tuple[list[int] | None, int | None]:
    """(chained history hashes, history length) -- (None, None) when nothing to chain.
    `hashes`: the history's items' exact hashes (`history_hashes`), when known: an item
    whose hash was seen under the same parent is not read again (`_KNOWN`)."""
    if request.block_hashes is not None:
        blocks = list(request.block_hashes)
        tokens = request.usage.prompt_tokens
        if tokens is not None and request.block_size:
            blocks = blocks[: tokens // request.block_size]
        return [b & _MASK64 for b in blocks], len(blocks)
    if request.body is None:
        return None, None
    _, _, history = split_body(request.endpoint, request.body)
    return _chain(history, hashes), len(history)


# The last history `prefix_chain` and `compaction_marker` read, per thread, with what they
# found: an agent's log gives each call the previous call's history objects and new ones
# (a Codex rollout's 351 calls held 125,000 items), so only the new items are read.
_LAST = threading.local()


def _shares(history: list[Any], known: list[Any]) -> bool:
    """Does `history` start with `known`'s items, these very objects? Bodies are never
    written, so equal objects give equal hashes and texts (and `known`, held here, keeps
    them alive: no id is reused)."""
    return len(history) >= len(known) and all(map(operator.is_, history, known))


def _chain(history: list[Any], hashes: Sequence[str] | None = None) -> list[int]:
    """``chain_hashes(strip_cache_control(history))``: both map item by item, so the hashes
    of a history starting with the last one's objects are its hashes, continued; and an
    item's link depends only on its parent link and the item, so with the items' exact
    hashes a link made before is looked up (`_KNOWN`), not made again."""
    last = getattr(_LAST, "chain", None)
    start, out = 0, []
    if last is not None and last[0] and _shares(history, last[0]):
        start, out = len(last[0]), list(last[1])
    parent = out[-1] if out else 0
    if hashes is None:
        out += chain_hashes(strip_cache_control(history[start:]), parent)
    else:
        links = _known("links")
        for item, digest in zip(history[start:], hashes[start:], strict=True):
            link = links.get((parent, digest))
            if link is None:
                link = links.put((parent, digest),
                                 chain_hashes((strip_cache_control(item),), parent)[0])
            out.append(link)
            parent = link
    _LAST.chain = (history, tuple(out))
    return out


class _Memo(dict[Any, Any]):
    """A dict that forgets all it holds when it reaches `KNOWN_LIMIT` entries: memory stays
    flat however large the log, and what it forgot is computed again."""

    def put(self, key: Any, value: Any) -> Any:
        if len(self) >= KNOWN_LIMIT:
            self.clear()
        self[key] = value
        return value


# Per thread, what was found of history items by their exact hash (`hashing.exact_hash`
# of `exact_json`, the hash their part is stored under, `store.parts`): a capture's lines
# are parsed afresh, so the next call of a conversation holds equal items, not the same
# objects (`_shares` finds nothing), and each request would strip and hash its whole
# history again (0.25 GiB of raw captures: 40,000 items read for 1,900 distinct ones).
# Equal exact JSON is an equal JSON value (orjson writes a value one way and reads it
# back equal; ingest stores only values it can write), so its canonical JSON, stripped
# of cache_control, and its compaction marker are equal too. (A body a format built with
# an int key beside its string twin, {1: a, "1": b}, would break this, as it breaks the
# store's parts: none does, a log's JSON objects have string keys.) "links": (parent link, item
# hash) -> the item's chain link; "markers": item hash -> its `_marker` (None included).
KNOWN_LIMIT = 1 << 16
_KNOWN = threading.local()


def _known(name: str) -> _Memo:
    memo = getattr(_KNOWN, name, None)
    if memo is None:
        memo = _Memo()
        setattr(_KNOWN, name, memo)
    return memo


def fingerprint(request: Request) -> str | None:
    """Hash of system (billing header removed) + tools; None without a body."""
    if request.body is None:
        return None
    system, tools, _ = split_body(request.endpoint, request.body)
    return content_hash([strip_cache_control(strip_billing_header(system)),
                         strip_cache_control(tools)])


# Text a compacted history starts a message with, per agent: without an explicit session
# id, a request that shares no history with an earlier one continues a session as a
# compaction only when its history holds one of these (else it starts a new session).
COMPACTION_PREFIXES: tuple[tuple[str, str], ...] = (
    # Claude Code (closed source): the user message that replaces the history after /compact
    # or auto-compact, flagged `isCompactSummary` in its session transcripts: "This session
    # is being continued from a previous conversation that ran out of context. The
    # conversation is summarized below: ..." (sample_logs/make_samples.py writes the same).
    ("claude-code", "This session is being continued from a previous conversation"),
    # Codex CLI local compaction: the summary message starts with
    # codex-rs/core/templates/compact/summary_prefix.md.
    ("codex", "Another language model started to solve this problem and produced a summary "
              "of its thinking process."),
    # OpenHands: LLMSummarizingCondenser's summary (openhands/memory/condenser/impl/
    # llm_summarizing_condenser.py; the SDK's openhands/sdk/context/condenser/) is sent as a
    # user message; its prompt makes it open with the USER_CONTEXT section.
    ("openhands", "USER_CONTEXT:"),
)
COMPACTION_FRAGMENTS: tuple[tuple[str, str], ...] = (
    # SWE-agent history processors (sweagent/agent/history_processors.py): LastNObservations
    # replaces old observations with "Old environment output: (n lines omitted)",
    # ClosedWindowHistoryProcessor old file windows with "Outdated window with n lines
    # omitted...".
    ("swe-agent", "Old environment output: ("),
    ("swe-agent", "Outdated window with "),
)
# Codex: remote compaction puts a `{"type": "compaction", "encrypted_content": ...}` item in
# the Responses input (codex-rs/protocol/src/models.rs `ResponseItem::Compaction`, alias
# `compaction_summary`).
COMPACTION_ITEM_TYPES = {"compaction": "codex", "compaction_summary": "codex"}


def compaction_marker(request: Request, hashes: Sequence[str] | None = None) -> str | None:
    """The agent whose compaction marker the request's history holds (`COMPACTION_PREFIXES`,
    `COMPACTION_FRAGMENTS`, `COMPACTION_ITEM_TYPES`), else None. `hashes`: as
    `prefix_chain` takes them; an item whose hash was seen is not read again."""
    if request.body is None:
        return None
    _, _, history = split_body(request.endpoint, request.body)
    last = getattr(_LAST, "unmarked", None)  # a history holding no marker, last read
    start = len(last) if last is not None and _shares(history, last) else 0
    if hashes is None:
        found = _marker(history[start:])
    else:  # `_marker` is the first item's that has one: item by item, each remembered
        markers = _known("markers")
        found = None
        for item, digest in zip(history[start:], hashes[start:], strict=True):
            found = markers.get(digest, _UNSEEN)
            if found is _UNSEEN:
                found = markers.put(digest, _marker((item,)))
            if found is not None:
                break
    _LAST.unmarked = history if found is None else None
    return found


_UNSEEN = object()


def _marker(history: Sequence[Any]) -> str | None:
    for item in history:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if isinstance(kind, str) and kind in COMPACTION_ITEM_TYPES:
            return COMPACTION_ITEM_TYPES[kind]
        for text in _texts(item.get("content")):
            head = text.lstrip()
            for agent, prefix in COMPACTION_PREFIXES:
                if head.startswith(prefix):
                    return agent
            for agent, fragment in COMPACTION_FRAGMENTS:
                if fragment in text:
                    return agent
    return None


def _texts(content: Any) -> list[str]:
    """The text parts of a message's content (a string, or a list of text blocks)."""
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [b["text"] for b in content
                if isinstance(b, dict) and isinstance(b.get("text"), str)]
    return []


def detect_endpoint(body: Any) -> str:
    """Guess the protocol of a request body from its keys."""
    if not isinstance(body, dict):
        return "unknown"
    if "input" in body and "messages" not in body and (
        "instructions" in body or isinstance(body.get("input"), (list, str))
    ):
        return "openai-responses"
    msgs = body.get("messages")
    if not isinstance(msgs, list):
        return "unknown"
    if "system" in body or any(
        isinstance(t, dict) and "input_schema" in t for t in body.get("tools") or []
    ):
        return "anthropic-messages"
    for m in msgs:
        if not isinstance(m, dict):
            continue
        if m.get("role") in ("system", "developer", "tool") or "tool_calls" in m:
            return "openai-chat"
        content = m.get("content")
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") in (
                    "tool_use", "tool_result", "thinking", "redacted_thinking"):
                    return "anthropic-messages"
                if isinstance(block, dict) and block.get("type") in ("image_url", "input_audio"):
                    return "openai-chat"
    if any(isinstance(t, dict) and t.get("type") == "function" for t in body.get("tools") or []):
        return "openai-chat"
    return "openai-chat"
