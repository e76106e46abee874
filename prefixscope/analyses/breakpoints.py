"""Where an Anthropic request's ``cache_control`` marks write cache entries in its rendered
prompt: the content blocks of the prompt's segments and the token end of each marked one.

simulate's replay reads the blocks (`simulate.prepare._anthropic_blocks`); diff reads
every pair's A's breakpoint ends (`breakpoint_ends`, for the ledger). Apart from the
simulate package, which a diff does not otherwise import (~0.02 s of its start-up).
"""

from __future__ import annotations

import re
from functools import lru_cache
from operator import attrgetter

import numpy as np

from prefixscope.tokens import Tokens

# A content block's path in the rendered prompt: a tool, a system block, a message or one
# of its content blocks (Anthropic caches at these boundaries).
BLOCK = re.compile(r"^(tools\[\d+\]|system(?:\[\d+\])?|messages\[\d+\](?:\.content\[\d+\])?)")


def breakpoint_ends(tok: Tokens, body: dict[str, object]) -> tuple[int, ...]:
    """The token end of each block of a rendered Anthropic request its ``cache_control``
    marks set a breakpoint on (`simulate.prepare._anthropic_blocks`), in order: where it
    writes entries.

    The blocks of `_anthropic_blocks` without its per-block walk of the body (diff asks this
    of every pair's A, whose prompt holds the session's whole history): the marked keys are
    read off the body once (`_marked_keys`, the keys `simulate.prepare._cache_control` finds
    a mark under); a body with none and no automatic mark has no breakpoint, and no segment
    is read."""
    marked = _marked_keys(body)
    automatic = isinstance(body.get("cache_control"), dict)
    if not marked and not automatic:
        return ()
    segments = tok.prompt.segments
    # A block is a run of segments: its own, and the template glue after it up to the
    # next block's first segment. `lasts`: the last segment of each marked block's run.
    lasts: list[int] = []
    key: str | None = None  # the open block's key (None: no block yet)
    last = 0
    for i, found in enumerate(map(_block_key, map(_PATH, segments))):
        if key is not None and (found is None or found == key):
            last = i
            continue
        if key in marked:
            lasts.append(last)
        key, last = found or "template", i
    if key is not None and (key in marked or automatic):
        lasts.append(last)
    if not lasts:
        return ()
    # a segment's token end, as `Tokens.segment_token_spans` gives it: where the next
    # segment's first token is (the last segment's: where the text ends); looked up for
    # these segments only (each lookup in a long prompt's offsets is cache misses)
    bounds = [segments[i + 1].char_start if i + 1 < len(segments) else len(tok.prompt.text)
              for i in lasts]
    return tuple(sorted(set(np.searchsorted(tok.char_starts, bounds, side="left").tolist())))


_PATH = attrgetter("path")


@lru_cache(maxsize=1 << 16)
def _block_key(path: str) -> str | None:
    """The block a segment path belongs to (`BLOCK`); None: template glue."""
    match = BLOCK.match(path)
    return match.group(1) if match else None


def _marked_keys(body: dict[str, object]) -> set[str]:
    """The block keys `simulate.prepare._cache_control` finds a mark under in `body`: ``tools[i]``,
    ``system``, ``system[i]``, ``messages[i]``, ``messages[i].content[j]`` (and
    ``template``, a body key of that name), each an index into a list, the mark a dict."""
    out = {name for name in ("template", "system") if _marked(body.get(name))}
    for name in ("tools", "system", "messages"):
        listed = body.get(name)
        if not isinstance(listed, list):
            continue
        for i, item in enumerate(listed):
            if not isinstance(item, dict):
                continue
            if "cache_control" in item and isinstance(item["cache_control"], dict):
                out.add(f"{name}[{i}]")
            if name == "messages":
                content = item.get("content")
                if isinstance(content, list):  # the common case inline: no call a block
                    out.update(f"messages[{i}].content[{j}]" for j, block in enumerate(content)
                               if isinstance(block, dict) and "cache_control" in block
                               and isinstance(block["cache_control"], dict))
    return out


def _marked(node: object) -> bool:
    """Whether `node` carries a mark: a dict whose ``cache_control`` is a dict."""
    return isinstance(node, dict) and isinstance(node.get("cache_control"), dict)
