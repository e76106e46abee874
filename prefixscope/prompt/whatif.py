"""What-if transforms: render the prompt as it would be if one known cache breaker were fixed.

`simulate` replays a log under these to price each fix; `render --what-if` shows
the resulting prompt. They compose, in the order given, and never renumber the
logged paths (a dropped ``system[0]`` leaves ``system[1]`` named ``system[1]``):

* ``strip-billing-header`` -- drop Claude Code's ``x-anthropic-billing-header: ...;``
  from the system content: a system text block (or OpenAI system content part)
  that starts with it loses the header and is dropped when nothing else is left; a
  string system loses its leading header line. The header is matched by
  `requestkeys.BILLING_HEADER_RE` (its ``key=value;`` items), so a header a gateway
  already glued to the next block is cut exactly.
* ``drop:<regex>`` -- remove every match of the (Python) regex from system content
  (Anthropic ``system``, OpenAI system/developer messages, Responses
  ``instructions``). Structure is kept: a block whose text becomes empty stays.
* ``sort-json-keys`` -- tool parameter schemas reach the template with their keys
  sorted recursively, as ``tojson(sort_keys=True)`` or a deterministic gateway would
  write them.
* ``no-hoist`` -- the ``hoist-system-messages`` gateway profile leaves
  mid-conversation system messages where they are (no effect under other profiles).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prefixscope.model.keys import BILLING_HEADER_RE
from prefixscope.prompt.marks import Marker, edit, unmark
from prefixscope.prompt.values import SYSTEM_ROLES, RenderError

WHAT_IFS = ("strip-billing-header", "sort-json-keys", "no-hoist", "drop:<regex>")
BILLING_PREFIX = "x-anthropic-billing-header:"


@dataclass(frozen=True, slots=True)
class WhatIfPlan:
    """Parsed what-if list: text edits in order, plus the two stage switches."""

    edits: tuple[tuple[str, re.Pattern[str] | None], ...]  # ("strip-billing-header"|"drop", regex)
    sort_json_keys: bool
    no_hoist: bool


def parse_what_ifs(names: tuple[str, ...]) -> WhatIfPlan:
    """Validate and parse what-if names.

    Raises:
        RenderError: an unknown name or an invalid ``drop:`` regex.
    """
    edits: list[tuple[str, re.Pattern[str] | None]] = []
    sort_keys = no_hoist = False
    for name in names:
        if name == "strip-billing-header":
            edits.append((name, None))
        elif name == "sort-json-keys":
            sort_keys = True
        elif name == "no-hoist":
            no_hoist = True
        elif name.startswith("drop:"):
            try:
                edits.append(("drop", re.compile(name[len("drop:"):])))
            except re.error as exc:
                raise RenderError(f"what-if {name!r}: invalid regex: {exc}") from exc
        else:
            raise RenderError(f"unknown what-if {name!r} (known: {', '.join(WHAT_IFS)})")
    return WhatIfPlan(tuple(edits), sort_keys, no_hoist)


def apply_text_edits(endpoint: str, marked: dict[str, Any], plan: WhatIfPlan,
                     marker: Marker) -> dict[str, Any]:
    """The marked body with the plan's system-content edits applied (a new top-level dict)."""
    if not plan.edits:
        return marked
    out = dict(marked)
    for name, pattern in plan.edits:
        if name == "strip-billing-header":
            _edit_system(endpoint, out, marker, _strip_header_text,
                         lambda blocks: _strip_header_blocks(blocks, marker))
        else:
            assert pattern is not None
            _edit_system(endpoint, out, marker, _dropping_text(pattern),
                         _dropping_blocks(pattern, marker))
    return out


def _dropping_text(pattern: re.Pattern[str]) -> Callable[[str], str]:
    """A text edit deleting every match of `pattern` (marks kept around what remains)."""
    return lambda text: edit(text, lambda t: pattern.sub("", t))


def _dropping_blocks(pattern: re.Pattern[str], marker: Marker
                     ) -> Callable[[list[Any]], list[Any]]:
    return lambda blocks: _drop_in_blocks(blocks, pattern, marker)


def _like(new: Any, old: Any, marker: Marker) -> Any:
    """Register an edited copy under the path of what it replaces."""
    return marker.register_like(new, old)


def _strip_header_text(text: str) -> str:
    def cut(inner: str) -> str:
        if not inner.startswith(BILLING_PREFIX):
            return inner
        found = BILLING_HEADER_RE.match(inner)
        return inner[found.end():] if found else inner
    return edit(text, cut)


def _strip_header_blocks(blocks: list[Any], marker: Marker) -> list[Any]:
    out: list[Any] = []
    for block in blocks:
        if isinstance(block, dict) and isinstance(block.get("text"), str) and \
                unmark(block["text"]).startswith(BILLING_PREFIX):
            rest = _strip_header_text(block["text"])
            if not unmark(rest).strip():
                continue
            block = _like({**block, "text": rest}, block, marker)
        elif isinstance(block, str) and unmark(block).startswith(BILLING_PREFIX):
            block = _strip_header_text(block)
            if not unmark(block).strip():
                continue
        out.append(block)
    return _like(out, blocks, marker)


def _drop_in_blocks(blocks: list[Any], pattern: re.Pattern[str], marker: Marker) -> list[Any]:
    out: list[Any] = []
    for block in blocks:
        if isinstance(block, dict) and isinstance(block.get("text"), str):
            text = edit(block["text"], lambda t: pattern.sub("", t))
            block = _like({**block, "text": text}, block, marker)
        elif isinstance(block, str):
            block = edit(block, lambda t: pattern.sub("", t))
        out.append(block)
    return _like(out, blocks, marker)


def _edit_system(endpoint: str, body: dict[str, Any], marker: Marker,
                 on_text: Callable[[str], str], on_blocks: Callable[[list[Any]], list[Any]]
                 ) -> None:
    if endpoint == "anthropic-messages":
        system = body.get("system")
        if isinstance(system, str):
            body["system"] = on_text(system)
        elif isinstance(system, list):
            body["system"] = on_blocks(system)
        return
    if endpoint == "openai-responses":
        if isinstance(body.get("instructions"), str):
            body["instructions"] = on_text(body["instructions"])
        key = "input"
    else:
        key = "messages"
    items = body.get(key)
    if not isinstance(items, list):
        return
    edited: list[Any] = []
    for message in items:
        if isinstance(message, dict) and message.get("role") in SYSTEM_ROLES:
            content = message.get("content")
            if isinstance(content, str):
                message = _like({**message, "content": on_text(content)}, message, marker)
            elif isinstance(content, list):
                message = _like({**message, "content": on_blocks(content)}, message, marker)
        edited.append(message)
    body[key] = _like(edited, items, marker)


def sorted_schema(value: Any, marker: Marker) -> Any:
    """A recursively key-sorted copy of a JSON schema, registered like the original."""
    if isinstance(value, dict):
        out = {k: sorted_schema(value[k], marker) for k in sorted(value, key=unmark)}
    elif isinstance(value, list):
        out = [sorted_schema(v, marker) for v in value]  # type: ignore[assignment]
    else:
        return value
    return marker.register_like(out, value)
