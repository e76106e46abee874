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
    lasts = _run_lasts(list(map(_block_key, map(_PATH, segments))), marked)
    if automatic and segments:
        lasts.append(len(segments) - 1)
    if not lasts:
        return ()
    # a segment's token end, as `Tokens.segment_token_spans` gives it: where the next
    # segment's first token is (the last segment's: where the text ends); looked up for
    # these segments only (each lookup in a long prompt's offsets is cache misses)
    bounds = [segments[i + 1].char_start if i + 1 < len(segments) else len(tok.prompt.text)
              for i in lasts]
    return tuple(sorted(set(np.searchsorted(tok.char_starts, bounds, side="left").tolist())))


_PATH = attrgetter("path")


def _run_lasts(keys: list[str | None], marked: set[str]) -> list[int]:
    """The last segment of each run of a marked block, `keys` the segments' block keys
    (`_block_key`; None: template glue). A block is a run of segments: its own, and the
    glue after it up to the next block's first segment; glue before any block is the
    block ``template``'s.

    A run of a block K (not ``template``: no segment's key is that) starts at a segment of
    key K whose last keyed segment before it is not K's (none, or another block's), so at
    K's first segment and at each one after a run of K has ended: each is found by a
    search of the key list from where the last run ended (`list.index`, C), and only the
    runs' own segments are read one by one, not all of a prompt's ~240 for its one or two
    marked blocks."""
    lasts: list[int] = []
    n = len(keys)
    for key in marked:
        if key == "template":
            if n and keys[0] is None:  # the glue before the first block
                lasts.append(next((i for i, k in enumerate(keys) if k is not None), n) - 1)
            continue
        at = 0
        while True:
            try:
                i = keys.index(key, at)
            except ValueError:
                break
            j = i + 1
            while j < n and (keys[j] is None or keys[j] == key):
                j += 1
            lasts.append(j - 1)
            at = j
    return lasts


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
                    for j, block in enumerate(content):
                        if isinstance(block, dict) and "cache_control" in block and \
                                isinstance(block["cache_control"], dict):
                            out.add(f"messages[{i}].content[{j}]")
    return out


def _marked(node: object) -> bool:
    """Whether `node` carries a mark: a dict whose ``cache_control`` is a dict."""
    return isinstance(node, dict) and isinstance(node.get("cache_control"), dict)
