"""Why two consecutive requests diverge: the cause, decided from the requests themselves.

A token index says *where* the prefix broke; the fix depends on *why*. The cause is
decided from the two requests' parts as logged (and, for volatile values and
whitespace, from the rendered text around the divergence), first match wins:

``identical``, ``append-only`` (no divergence), then for a divergence:

* ``json-key-order`` -- the diverging part is equal after sorting JSON keys;
* ``tool-order`` -- same tool set, different order;
* ``tool-set`` -- tools added or removed;
* ``volatile-value`` -- the differing characters are a nonce, hash, counter, uuid or
  timestamp inside otherwise equal text (``cch=8c7f0 -> cch=7ee55``);
* ``compaction`` -- the history was replaced by a shorter summary (same system and
  tools, fewer messages, or the session threading marked it);
* ``whitespace`` -- the diverging part differs only in whitespace;
* ``history-rewrite`` -- an earlier message's content changed (old tool output elided);
* ``template-divergence`` -- system, tools and history are append-only as logged, but
  the rendered tokens are not (e.g. a template that drops earlier reasoning);
* ``content-change`` -- anything else.

NOTE: ``whitespace`` is tested before ``history-rewrite`` (design.md lists it after):
a whitespace-only edit of an old message is reported as what it is, not as a rewrite.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from prefixscope.model import Request
from prefixscope.model.hashing import (
    canonical_json,
    exact_json,
    fold_whitespace,
    strip_cache_control,
)
from prefixscope.model.keys import split_body, strip_billing_header
from prefixscope.model.redaction import active
from prefixscope.tokens.tokenize import common_text_prefix

CAUSES = (
    "identical", "append-only", "json-key-order", "tool-order", "tool-set", "volatile-value",
    "compaction", "whitespace", "history-rewrite", "template-divergence", "content-change",
    "model-change",
)

_PATH_HEAD = re.compile(r"^(?P<family>[a-z_]+)(?:\[(?P<index>\d+)\])?")
_TOKENISH = re.compile(r"[\w.:+/=-]")
_WS = re.compile(r"\s+")
_VOLATILE = re.compile(
    r"""^(?:
        [0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}  # uuid
      | \d{4}-\d{2}-\d{2}                                             # date
        (?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?  # time
      | \d{1,2}:\d{2}(?::\d{2})?                                           # clock time
      | \d+(?:\.\d+)?                                                      # counter / number
      | (?=[0-9a-fA-F]*\d)[0-9a-fA-F]{4,}                                  # hex nonce / hash
      | (?=[A-Za-z0-9_-]*\d)(?=[A-Za-z0-9_-]*[A-Za-z])[A-Za-z0-9_-]{10,}   # opaque id
    )$""",
    re.VERBOSE,
)
_HEX = re.compile(r"[0-9a-fA-F]+")
MAX_VOLATILE_CHARS = 64


@dataclass(frozen=True, slots=True)
class Cause:
    cause: str  # one of CAUSES
    detail: str  # a short human sentence with the concrete evidence


def path_head(path: str) -> tuple[str, int | None]:
    """("tools", 3) for "tools[3].function.parameters"; ("template", None) for glue."""
    m = _PATH_HEAD.match(path)
    if not m:
        return path, None
    return m["family"], int(m["index"]) if m["index"] is not None else None


def _same(a: Any, b: Any) -> bool:
    return exact_json(strip_cache_control(a)) == exact_json(strip_cache_control(b))


def _same_sorted(a: Any, b: Any) -> bool:
    return canonical_json(strip_cache_control(a)) == canonical_json(strip_cache_control(b))


def _tool_name(tool: Any) -> str:
    if isinstance(tool, dict):
        fn = tool.get("function")
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            return fn["name"]
        if isinstance(tool.get("name"), str):
            return tool["name"]
    return canonical_json(tool)[:40]


def key_order_change(a: Any, b: Any, path: str) -> str | None:
    """The first place where two canonically equal values list keys in another order."""
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            return f"{path} keys [{', '.join(map(str, a))}] → [{', '.join(map(str, b))}]"
        for k in a:
            found = key_order_change(a[k], b.get(k), f"{path}.{k}")
            if found:
                return found
    elif isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            found = key_order_change(x, y, f"{path}[{i}]")
            if found:
                return found
    return None


def volatile_change(text_a: str, text_b: str, start: int, end_a: int, end_b: int
                    ) -> tuple[str, str] | None:
    """The differing token pair when the texts differ only by one volatile value.

    Args:
        text_a, text_b: the two rendered prompts.
        start: first differing character (the same offset in both: the prefix is shared).
        end_a, end_b: end of the diverging segment in each text.

    Returns:
        (token in A, token in B), e.g. ("cch=8c7f0", "cch=7ee55"), or None.
    """
    seg_a, seg_b = text_a[start:end_a], text_b[start:end_b]
    suffix = _common_end(seg_a, seg_b)
    diff_a, diff_b = seg_a[: len(seg_a) - suffix], seg_b[: len(seg_b) - suffix]
    if not diff_a or not diff_b or max(len(diff_a), len(diff_b)) > MAX_VOLATILE_CHARS:
        return None
    left = start
    while left > 0 and _TOKENISH.match(text_a[left - 1]):
        left -= 1
    tok_a = _extend_right(text_a, start, start + len(diff_a))
    tok_b = _extend_right(text_b, start, start + len(diff_b))
    word_a, word_b = text_a[left:tok_a].rstrip(".:,"), text_b[left:tok_b].rstrip(".:,")
    value_a, value_b = _value_part(word_a), _value_part(word_b)
    if value_a and value_b and (
            (_VOLATILE.match(value_a) and _VOLATILE.match(value_b))
            or _hex_pair(value_a, value_b)):
        return word_a, word_b
    return None


def _common_end(a: str, b: str) -> int:
    """How many trailing characters `a` and `b` share: the common start of the two
    reversed, slices compared in C (`common_text_prefix`). A loop here read a whole
    segment a character at a time: where a billing header at the start of an OpenAI Chat
    view's system message changed, the whole system prompt each turn (0.55 s at 1 GiB)."""
    return common_text_prefix(a[::-1], b[::-1])


def _hex_pair(a: str, b: str) -> bool:
    """Two same-length hex values, one with a digit: a nonce even where one side is all
    letters (cch=defdb -> cch=0b7e2); two digit-free words are left to the word rules."""
    return (len(a) == len(b) >= 4 and _HEX.fullmatch(a) is not None
            and _HEX.fullmatch(b) is not None and any(c.isdigit() for c in a + b))


def _extend_right(text: str, start: int, end: int) -> int:
    while end < len(text) and _TOKENISH.match(text[end]):
        end += 1
    return end


def _value_part(word: str) -> str:
    """The value of a ``key=value`` / ``key:value`` word, else the word."""
    for sep in ("=", ": ", ":"):
        if sep in word and not _VOLATILE.match(word):
            head, _, tail = word.rpartition(sep)
            if head and tail:
                return tail
    return word


def _preview(value: Any, limit: int = 60) -> str:
    if isinstance(value, dict):
        content = value.get("content", value.get("text", value))
    else:
        content = value
    if isinstance(content, list):
        content = " ".join(
            str(c.get("text", c.get("content", ""))) if isinstance(c, dict) else str(c)
            for c in content)
    text = _WS.sub(" ", content if isinstance(content, str) else exact_json(content)).strip()
    text = active().text(text)  # before the cut: no half of a key
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True, slots=True)
class DivergenceSite:
    """What the classifier needs to know about where two rendered prompts split."""

    segment: str  # deepest segment path at the divergence token
    text_a: str  # rendered prompt A
    text_b: str  # rendered prompt B
    char: int  # first differing character (same offset in both)
    segment_end_a: int  # end of the diverging segment's span in A
    segment_end_b: int  # end of the diverging segment's span in B


def classify(a: Request, b: Request, site: DivergenceSite | None, *,
             identical: bool = False, compaction_link: bool = False,
             what_if: tuple[str, ...] = ()) -> Cause:
    """The cause of B not reusing A's prefix (see the module docstring for the order).

    `what_if` names the transforms the rendering applied, so that the logged parts are
    compared as the upstream saw them (e.g. without the billing header).
    """
    if identical:
        return Cause("identical", "same prompt tokens")
    if site is None:
        return Cause("append-only", "B extends A: everything A sent is reusable")
    sys_a, tools_a, hist_a = _as_rendered(*split_body(a.endpoint, a.body), what_if)
    sys_b, tools_b, hist_b = _as_rendered(*split_body(b.endpoint, b.body), what_if)
    family, index = path_head(site.segment)

    # Every template renders tools before the history, so changed tools with an unchanged
    # system prompt are the cause even when the split shows up at the next segment
    # (tools removed altogether: A's tool section vs B's system text).
    if family == "tools" or (not _same(tools_a, tools_b) and _same(sys_a, sys_b)):
        found = _tools_cause(tools_a, tools_b, index)
        if found:
            return found
    # Any logged part, history included: a re-serialized tool_use `input` in an old
    # message breaks the prefix as surely as a reordered tool schema.
    if family in ("system", "instructions", "messages", "input"):
        part_a = _part(a.body, family, index)
        part_b = _part(b.body, family, index)
        if part_a is not None and part_b is not None and not _same(part_a, part_b) \
                and _same_sorted(part_a, part_b):
            where = family if index is None else f"{family}[{index}]"
            return Cause("json-key-order",
                         key_order_change(part_a, part_b, where) or site.segment)

    vol = volatile_change(site.text_a, site.text_b, site.char, site.segment_end_a,
                          site.segment_end_b)
    if vol and family != "template":
        return Cause("volatile-value", f"{site.segment}: {vol[0]} → {vol[1]}")

    raw_same_prefix = (_same(sys_a, sys_b) and _same(tools_a, tools_b)
                       and len(hist_b) >= len(hist_a) and _same(hist_a, hist_b[: len(hist_a)]))
    is_system = family in ("system", "instructions") or _is_system_message(a, family, index) \
        or _is_system_message(b, family, index)
    in_history = family in ("messages", "input") and not is_system
    if in_history and not raw_same_prefix:
        same_frame = _same(strip_billing_header(sys_a), strip_billing_header(sys_b)) and \
            _same(tools_a, tools_b)
        if compaction_link or (same_frame and len(hist_b) < len(hist_a)):
            first = _preview(hist_b[0]) if hist_b else ""
            return Cause("compaction", f"history of {len(hist_a)} messages replaced by "
                                       f"{len(hist_b)} (starting '{first}')")
    if raw_same_prefix:
        return Cause("template-divergence",
                     f"the logged request is append-only but the rendered prompt differs at "
                     f"{site.segment}")
    part_a = _part(a.body, family, index)
    part_b = _part(b.body, family, index)
    if part_a is not None and part_b is not None and _only_whitespace(part_a, part_b):
        return Cause("whitespace", f"{site.segment} differs only in whitespace")
    if in_history and index is not None:
        messages_a = a.body.get(family) if isinstance(a.body, dict) else None
        if isinstance(messages_a, list) and index < len(messages_a) and part_b is not None:
            what = "tool output" if _is_tool_output(part_b) else "content"
            return Cause("history-rewrite", f"{family}[{index}] {what} replaced by "
                                            f"'{_preview(part_b)}'")
    return Cause("content-change", f"{site.segment} changed: '{_preview(part_a)}' → "
                                   f"'{_preview(part_b)}'")


def _as_rendered(system: Any, tools: list[Any], history: list[Any], what_if: tuple[str, ...]
                 ) -> tuple[Any, list[Any], list[Any]]:
    """The logged parts with the text-level what-if transforms applied."""
    for name in what_if:
        if name == "strip-billing-header":
            system = strip_billing_header(system)
        elif name == "sort-json-keys":
            tools = sorted_keys(tools)
        elif name.startswith("drop:"):
            pattern = re.compile(name[len("drop:"):])
            system = _map_strings(system, lambda text, p=pattern: p.sub("", text))
    return system, tools, history


def sorted_keys(value: Any) -> Any:
    """`value` with every object's keys in sorted order."""
    if isinstance(value, dict):
        return {k: sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [sorted_keys(v) for v in value]
    return value


def _map_strings(value: Any, fn: Any) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {k: _map_strings(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_strings(v, fn) for v in value]
    return value


def _tools_cause(tools_a: list[Any], tools_b: list[Any], index: int | None) -> Cause | None:
    names_a = [_tool_name(t) for t in tools_a]
    names_b = [_tool_name(t) for t in tools_b]
    count_a, count_b = Counter(names_a), Counter(names_b)
    if count_a != count_b:  # a duplicated definition is an added tool too
        added = sorted((count_b - count_a).elements())
        removed = sorted((count_a - count_b).elements())
        parts = [f"+{n}" for n in added] + [f"-{n}" for n in removed]
        return Cause("tool-set", f"tools {' '.join(parts) or 'duplicated'}")
    if not _same(tools_a, tools_b) and _same_sorted(tools_a, tools_b):
        where = key_order_change(strip_cache_control(tools_a), strip_cache_control(tools_b),
                                 "tools")
        return Cause("json-key-order", where or "tools key order")
    if names_a != names_b:
        by_name_a = sorted(tools_a, key=_tool_name)
        by_name_b = sorted(tools_b, key=_tool_name)
        if _same_sorted(by_name_a, by_name_b):
            return Cause("tool-order", f"tool order [{', '.join(names_a)}] → "
                                       f"[{', '.join(names_b)}]")
    return None


def _is_system_message(request: Request, family: str, index: int | None) -> bool:
    if family != "messages" or index is None or not isinstance(request.body, dict):
        return False
    messages = request.body.get("messages")
    return isinstance(messages, list) and index < len(messages) and \
        isinstance(messages[index], dict) and messages[index].get("role") in ("system",
                                                                            "developer")


def _part(body: Any, family: str, index: int | None) -> Any:
    if not isinstance(body, dict):
        return None
    value = body.get(family)
    if index is None:
        return value
    return value[index] if isinstance(value, list) and index < len(value) else None


def _only_whitespace(a: Any, b: Any) -> bool:
    return not _same(a, b) and _same(fold_whitespace(a), fold_whitespace(b))


def _is_tool_output(message: Any) -> bool:
    if not isinstance(message, dict):
        return False
    if message.get("role") == "tool":
        return True
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(c, dict) and c.get("type") == "tool_result" for c in content)
