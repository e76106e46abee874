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
    # each segment's token end, as `Tokens.segment_token_spans` gives it: where the next
    # segment's first token is (the last segment's: where the text ends)
    bounds = np.fromiter(map(_CHAR_START, segments), dtype=np.int64, count=len(segments))
    bounds[:-1] = bounds[1:]
    if len(bounds):
        bounds[-1] = len(tok.prompt.text)
    stops = np.searchsorted(tok.char_starts, bounds, side="left").tolist()
    ends: set[int] = set()
    key: str | None = None  # the open block's key (None: no block yet)
    end = 0
    for found, stop in zip(map(_block_key, map(_PATH, segments)), stops, strict=True):
        if key is not None and (found is None or found == key):
            # the block's end so far: the segments partition the text in order, so their
            # bounds never decrease, nor do their stops (searchsorted is monotone)
            end = stop
            continue
        if key in marked:
            ends.add(end)
        key, end = found or "template", stop
    if key is not None and (key in marked or automatic):
        ends.add(end)
    return tuple(sorted(ends))


_PATH = attrgetter("path")
_CHAR_START = attrgetter("char_start")


@lru_cache(maxsize=1 << 16)
def _block_key(path: str) -> str | None:
    """The block a segment path belongs to (`BLOCK`); None: template glue."""
    match = BLOCK.match(path)
    return match.group(1) if match else None


def _marked_keys(body: dict[str, object]) -> set[str]:
    """The block keys `simulate.prepare._cache_control` finds a mark under in `body`: ``tools[i]``,
    ``system``, ``system[i]``, ``messages[i]``, ``messages[i].content[j]`` (and
    ``template``, a body key of that name), each an index into a list, the mark a dict."""
    def marked(node: object) -> bool:
        return isinstance(node, dict) and isinstance(node.get("cache_control"), dict)

    out: set[str] = set()
    for name in ("template", "system"):
        if marked(body.get(name)):
            out.add(name)
    for name in ("tools", "system", "messages"):
        listed = body.get(name)
        if not isinstance(listed, list):
            continue
        for i, item in enumerate(listed):
            if marked(item):
                out.add(f"{name}[{i}]")
            if name == "messages" and isinstance(item, dict):
                content = item.get("content")
                if isinstance(content, list):
                    out.update(f"messages[{i}].content[{j}]"
                               for j, block in enumerate(content) if marked(block))
    return out
