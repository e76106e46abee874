"""Invisible marks that carry "which part of the logged request is this?" through a chat template.

Rendering a request runs gateway code and a Jinja chat template that we do not
control, yet every character of the result must be attributed to the place in the
logged request it came from (`Segment` paths such as ``messages[7].content[1]``).
The technique: before rendering, each logged string is wrapped in a pair of marks,
``OPEN id CLOSE``, where ``id`` names its path; JSON a template serializes with
``tojson`` gets the same marks around each object (see `jsontext`). Templates copy
strings verbatim, so the marks come out around the same text; `strip_marks` removes
them and returns the plain text plus runs ``(start, end, path id)``.

Guarantees:

* Marks are characters of Unicode plane 16 (private use, ``U+10E000``-``U+10F0FF``),
  never produced by tokenizers or templates; `has_reserved_chars` tells when logged
  text itself contains them (then the caller renders without marks). They are not
  the plane-15 markers transformers uses for control-token sanitizing.
* Marks nest (a stack): text between an OPEN and its CLOSE belongs to the innermost
  open mark; text outside any mark is template glue (path id -1).
* A render whose logged text already holds such characters runs with marks
  disabled and `marks_active(False)`, so those characters stay text everywhere.
* Empty strings are never wrapped, so template tests such as ``if message.content``
  see what they would see without marks.
* `strip_marks` never fails: a CLOSE without an OPEN (a template split a marked
  string) is dropped and reported through ``balanced=False``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

OPEN = "\U0010f000"
CLOSE = "\U0010f001"
_DIGIT0 = 0x10E000
_BASE = 4096
TEMPLATE = -1  # path id of text no mark covers

_RESERVED_RE = re.compile("[\U0010e000-\U0010f0ff]")
_MARK_RE = re.compile(f"{OPEN}([\U0010e000-\U0010efff]{{2}})|{CLOSE}")
_ANY_MARK_RE = re.compile(f"{OPEN}[\U0010e000-\U0010efff]{{2}}|{CLOSE}")


def has_reserved_chars(text: str) -> bool:
    """True when `text` contains characters of the range marks are made of."""
    return _RESERVED_RE.search(text) is not None


def open_mark(path_id: int) -> str:
    return f"{OPEN}{chr(_DIGIT0 + path_id // _BASE)}{chr(_DIGIT0 + path_id % _BASE)}"


_ACTIVE: ContextVar[bool] = ContextVar("prefixscope_marks_active", default=True)


@contextmanager
def marks_active(active: bool) -> Iterator[None]:
    """Within this block, `unmark`/`edit` treat mark characters as marks (or as text)."""
    token = _ACTIVE.set(active)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def unmark(text: str) -> str:
    """`text` without any marks (unchanged while marks are inactive: see `marks_active`)."""
    if (OPEN not in text and CLOSE not in text) or not _ACTIVE.get():
        return text
    return _ANY_MARK_RE.sub("", text)


def unmark_value(value: Any) -> Any:
    """A copy of a JSON-like value with marks removed from every string."""
    if isinstance(value, str):
        return unmark(value)
    if isinstance(value, dict):
        return {k: unmark_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unmark_value(v) for v in value]
    return value


_SINGLE_RE = re.compile(f"{OPEN}[\U0010e000-\U0010efff]{{2}}([^{OPEN}{CLOSE}]*){CLOSE}\\Z", re.S)


def edit(text: str, change: Callable[[str], str]) -> str:
    """Apply `change` to the text inside one wrapped string, keeping its marks.

    An empty result drops the marks too (empty strings are never wrapped). Text that
    is not exactly one wrapped string is changed without marks.
    """
    found = _SINGLE_RE.match(text) if _ACTIVE.get() else None
    if found is None:
        return change(unmark(text))
    new = change(found.group(1))
    return f"{text[:3]}{new}{CLOSE}" if new else ""


@dataclass
class Marker:
    """The table of logged paths seen while marking one request.

    `enabled=False` makes every operation a no-op that still records paths, which
    gives the plain render used to verify untrusted templates.
    """

    enabled: bool = True
    paths: list[str] = field(default_factory=list)  # path of each id
    kinds: list[str] = field(default_factory=list)  # segment kind of each id
    _ids: dict[str, int] = field(default_factory=dict)
    _objects: dict[int, int] = field(default_factory=dict)  # id(container) -> path id
    _alive: list[Any] = field(default_factory=list)  # keeps registered containers alive
    _origins: dict[int, int] = field(default_factory=dict)  # id(function dict) -> arguments path
    _leaves: set[int] = field(default_factory=set)  # ids of containers with no registered inside

    def path_id(self, path: str, kind: str) -> int:
        """Id of `path`, created on first use (its first kind wins)."""
        found = self._ids.get(path)
        if found is None:
            found = self._ids[path] = len(self.paths)
            self.paths.append(path)
            self.kinds.append(kind)
        return found

    def wrap(self, text: str, path_id: int) -> str:
        """`text` wrapped in the marks of `path_id` (unchanged when empty or disabled)."""
        if not text or not self.enabled:
            return text
        return f"{open_mark(path_id)}{text}{CLOSE}"

    def register(self, container: Any, path_id: int, *, leaf: bool = False) -> Any:
        """Remember that this dict/list object stands for `path_id`; returns it.

        `leaf` promises that nothing inside the container is registered (so JSON
        writers may serialize it in one go).
        """
        self._objects[id(container)] = path_id
        self._alive.append(container)
        if leaf:
            self._leaves.add(id(container))
        return container

    def register_like(self, new: Any, old: Any) -> Any:
        """Register `new` under the path (and leaf flag) of `old`, when `old` is registered."""
        pid = self._objects.get(id(old))
        if pid is not None:
            self.register(new, pid, leaf=id(old) in self._leaves)
        return new

    def path_of(self, container: Any) -> int | None:
        """Path id registered for this exact object, if any."""
        return self._objects.get(id(container))

    def is_leaf(self, container: Any) -> bool:
        return id(container) in self._leaves

    def set_arguments_origin(self, function: Any, path_id: int) -> None:
        """The arguments string of this tool-call function dict was made from `path_id`."""
        self._origins[id(function)] = path_id
        self._alive.append(function)

    def arguments_origin(self, function: Any) -> int | None:
        return self._origins.get(id(function))

    def open(self, path_id: int) -> str:
        return open_mark(path_id) if self.enabled else ""

    def close(self) -> str:
        return CLOSE if self.enabled else ""


@dataclass(frozen=True, slots=True)
class Stripped:
    """Plain text of a marked render and who owns each stretch of it."""

    text: str  # the render without marks
    runs: tuple[tuple[int, int, int], ...]  # (start, end, path id or TEMPLATE), covering text
    balanced: bool  # False when the template split some marked strings


def strip_marks(marked: str) -> Stripped:
    """Remove marks from a render, attributing each character to the innermost open mark."""
    chunks: list[str] = []
    runs: list[tuple[int, int, int]] = []
    stack: list[int] = []
    balanced = True
    pos = 0
    out = 0
    find = marked.find
    next_open = find(OPEN)
    next_close = find(CLOSE)
    while next_open >= 0 or next_close >= 0:
        is_open = next_close < 0 or 0 <= next_open < next_close
        at = next_open if is_open else next_close
        if at > pos:
            owner = stack[-1] if stack else TEMPLATE
            end = out + at - pos
            if runs and runs[-1][2] == owner:
                runs[-1] = (runs[-1][0], end, owner)
            else:
                runs.append((out, end, owner))
            chunks.append(marked[pos:at])
            out = end
        if is_open:
            digits = marked[at + 1:at + 3]
            stack.append((ord(digits[0]) - _DIGIT0) * _BASE + ord(digits[1]) - _DIGIT0)
            pos = at + 3
            next_open = find(OPEN, pos)
        else:
            if stack:
                stack.pop()
            else:
                balanced = False
            pos = at + 1
            next_close = find(CLOSE, pos)
    if pos < len(marked):
        owner = stack[-1] if stack else TEMPLATE
        end = out + len(marked) - pos
        if runs and runs[-1][2] == owner:
            runs[-1] = (runs[-1][0], end, owner)
        else:
            runs.append((out, end, owner))
        chunks.append(marked[pos:])
    if stack:
        balanced = False
    return Stripped("".join(chunks), tuple(runs), balanced)
