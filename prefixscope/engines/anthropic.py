"""Anthropic prompt caching (Messages API), from its documentation.

Sources (platform.claude.com/docs/en/build-with-claude/prompt-caching, as quoted
in shared/reference/cache-semantics.md A.4; pages change, the quotes are dated):

* Caching is opt-in: a prefix is written only at a ``cache_control`` breakpoint
  (at most 4 per request), or, with top-level ``cache_control`` ("automatic"),
  at "the last cacheable block", a breakpoint that "moves forward as
  conversations grow". The prefix order is tools -> system -> messages.
* A read looks for an earlier entry at the breakpoint and at earlier content
  block boundaries, **20 blocks** back ("the window counts the breakpoint itself
  as the first of the 20", a third-party restatement of the docs).
* TTL: 5 minutes (``"5m"``, default) or 1 hour (``"1h"``), "refreshed each time
  the entry is read".
* A prefix shorter than the model's minimum cacheable length is silently not
  cached (`MIN_CACHEABLE`).
* Usage: ``cache_read_input_tokens`` (`Lookup.cached_tokens`),
  ``cache_creation_input_tokens`` (`Lookup.written_tokens`), ``input_tokens``
  (the rest). Reads are token-exact: in TraceLab's Claude Code sample a warm
  turn reads exactly the previous request's input minus 2 (its automatic
  breakpoint ends 2 tokens before the prompt does) -- no block rounding.

Units are segments (`Units.segments`): one chained key per content block with
its token end, breakpoints by block index with their TTL. An entry is the key of
the block a breakpoint was on; it is written when the request is released (the
docs: an entry "only becomes available after the first response begins"). ``now``
is in seconds; ``now=None`` means no expiry. Not modelled: workspace isolation,
eviction before the TTL, the 1h-before-5m ordering rule, the 4-breakpoint limit
(a request with more is an API error, not a cache event).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from prefixscope.engines.base import Admission, BaseEngine, Lookup, Units

TTL_5M = 300.0
TTL_1H = 3600.0

# Minimum cacheable prompt length by model id pattern, first match wins. Official table
# as quoted in anthropics/anthropic-sdk-python issue #1194 (cache-semantics.md A.4);
# the Opus 4.7 / Opus 5 rows come from third-party copies of newer docs (unverified).
MIN_CACHEABLE: tuple[tuple[str, int], ...] = (
    (r"opus-5", 512),  # third-party copy
    (r"opus-4-7", 2048),  # third-party copy
    (r"opus-4-[56]", 4096),
    (r"haiku-4-5", 4096),
    (r"sonnet-4-[56]", 1024),
    (r"opus-4-1|opus-4(?![-.]?\d)|opus-4-\d{8}", 1024),
    (r"sonnet-4(?![-.]?\d)|sonnet-4-\d{8}|3-7-sonnet|sonnet-3-7", 1024),
    (r"3-5-haiku|haiku-3-5|3-haiku|haiku-3", 2048),
)
DEFAULT_MIN_CACHEABLE = 1024


def min_cacheable(model: str | None) -> int:
    """The minimum cacheable prefix of `model` (`DEFAULT_MIN_CACHEABLE` when unknown).
    A name spelled with underscores or dots, version first (Cline through an
    OpenAI-compatible provider logs ``claude_4_5_opus``), is read as Anthropic's
    ``claude-opus-4-5``."""
    if model:
        plain = re.sub(r"[_.]", "-", model.lower())
        plain = re.sub(r"(\d+)-(\d+)-(opus|sonnet|haiku)", r"\3-\1-\2", plain)
        for pattern, tokens in MIN_CACHEABLE:
            if re.search(pattern, model) or re.search(pattern, plain):
                return tokens
    return DEFAULT_MIN_CACHEABLE


class AnthropicEngine(BaseEngine):
    """Anthropic's breakpoint cache with lookback and TTL (see the module docstring)."""

    name: ClassVar[str] = "anthropic"

    def __init__(self, *, model: str | None = None, min_tokens: int | None = None,
                 lookback: int = 20, ttl: float = TTL_5M, automatic: bool = False) -> None:
        """Args:
            model: model id, for its minimum cacheable length.
            min_tokens: override that minimum.
            lookback: block positions searched per breakpoint, the breakpoint included.
            ttl: TTL of the automatic breakpoint (breakpoints carry their own).
            automatic: top-level ``cache_control``: a request without breakpoints
                gets one on its last block.
        """
        self.unit = 1
        self.min_tokens = min_cacheable(model) if min_tokens is None else min_tokens
        self.lookback = lookback
        self.ttl = ttl
        self.automatic = automatic
        self._entries: dict[int, tuple[float, float]] = {}  # key -> (expires at, ttl)

    def units(self, token_ids: Sequence[int] | np.ndarray) -> Units:
        """A prompt given only as tokens: one block, no breakpoint (automatic adds one)."""
        return Units.segments([np.asarray(token_ids, dtype=np.int64).tobytes()],
                              [len(token_ids)])

    def _check(self, units: Units) -> None:
        if units.ends is None:
            raise ValueError("anthropic needs segments (Units.segments): one unit per "
                             "content block with its token end")

    def _breakpoints(self, prompt: Units) -> dict[int, float]:
        if prompt.breakpoints:
            return {i: t for i, t in prompt.breakpoints.items() if 0 <= i < len(prompt.keys)}
        if self.automatic and len(prompt.keys):
            return {len(prompt.keys) - 1: self.ttl}
        return {}

    def _alive(self, key: int, now: float | None) -> bool:
        entry = self._entries.get(key)
        return entry is not None and (now is None or now <= entry[0])

    def _read(self, prompt: Units, now: float | None) -> tuple[int, dict[int, float]]:
        """(index of the longest live entry in a lookback window or -1, breakpoints)."""
        breakpoints = self._breakpoints(prompt)
        keys = prompt.keys.tolist()
        best = -1
        for b in breakpoints:
            for j in range(b, max(b - self.lookback, best), -1):
                if self._alive(keys[j], now):
                    best = j
                    break
        return best, breakpoints

    def _lookup(self, prompt: Units, now: float | None) -> tuple[Lookup, int, dict[int, float]]:
        self._check(prompt)
        best, breakpoints = self._read(prompt, now)
        cached = min(prompt.end(best), prompt.n_tokens) if best >= 0 else 0
        writable = [prompt.end(b) for b in breakpoints if prompt.end(b) >= self.min_tokens]
        written = max(max(writable, default=0) - cached, 0)
        return Lookup(cached, best + 1, 1, written), best, breakpoints

    def lookup(self, prompt: Units, *, now: float | None = None) -> Lookup:
        return self._lookup(prompt, now)[0]

    def admit(self, prompt: Units, *, now: float | None = None) -> Admission:
        lookup, best, breakpoints = self._lookup(prompt, now)
        if best >= 0:  # a read refreshes the entry
            key = int(prompt.keys[best])
            ttl = self._entries[key][1]
            self._entries[key] = (now + ttl if now is not None else 0.0, ttl)
        return Admission(lookup, prompt, handle=breakpoints)

    def release(self, admission: Admission, *, sequence: Units | None = None,
                now: float | None = None) -> None:
        admission.finish()
        prompt = admission.prompt
        for b, ttl in admission.handle.items():
            if prompt.end(b) < self.min_tokens:
                continue
            key = int(prompt.keys[b])
            old = self._entries.get(key)
            keep = max(ttl, old[1]) if old is not None and self._alive(key, now) else ttl
            self._entries[key] = (now + keep if now is not None else 0.0, keep)

    def __len__(self) -> int:
        """Entries written (live or not)."""
        return len(self._entries)
