"""DeepSeek API context caching on disk, from its current documentation.

Source: api-docs.deepseek.com/guides/kv_cache ("Cache Persistence and Hit Rules",
the sliding-window-attention era; shared/reference/cache-semantics.md A.4):

* "Each cached prefix is an independent, complete unit. A subsequent request can
  only hit the cache if it fully matches a cache prefix unit." Not block-granular:
  a hit is the longest persisted unit that is a prefix of the request.
* Units are persisted (1) "at the end position of the user input and the end
  position of the model output" of each request, (2) "when the system detects a
  common prefix across multiple requests", (3) "at fixed token intervals" for long
  inputs or outputs (the interval is not published: `interval`, off by default).
* The documented example: ``A + B`` then ``A + C`` misses, but ``A`` is then
  persisted, so a later ``A + D`` hits on ``A``.

Assumed, not documented: the last prompt token is always computed (a unit as long
as the whole prompt is not used for it), and the common prefix of (2) is the
longest one the request shares with any earlier request or output. Units are
persisted when a request is released; ``ttl`` (seconds since last use, None = no
expiry, the default) stands in for the undocumented clean-up. Keys are the raw
token ids (`Units.tokens`); a unit is the xxh3-64 of the int64 bytes of its prefix.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
import xxhash

from prefixscope.engines.base import Admission, BaseEngine, Lookup, Units
from prefixscope.engines.sglang import SglangEngine


def _digests(tokens: np.ndarray, depths: Sequence[int]) -> list[int]:
    """xxh3-64 of ``tokens[:d]`` for each of the ascending `depths`, in one pass."""
    data = memoryview(np.ascontiguousarray(tokens, dtype=np.int64).tobytes())
    h = xxhash.xxh3_64()
    out = []
    pos = 0
    for d in depths:
        h.update(data[pos * 8:d * 8])
        pos = d
        out.append(h.intdigest())
    return out


class DeepseekEngine(BaseEngine):
    """DeepSeek's prefix units (see the module docstring)."""

    name: ClassVar[str] = "deepseek"

    def __init__(self, *, interval: int | None = None, ttl: float | None = None,
                 last_token: bool = True) -> None:
        """Args:
            interval: also persist a unit every `interval` tokens of long inputs
                and outputs (undocumented length; None = not modelled).
            ttl: seconds a unit survives unused; None = forever.
            last_token: the last prompt token is always computed, so a unit as
                long as the whole prompt does not serve it (an assumption; turn it
                off if logs show whole-prompt hits).
        """
        self.unit = 1
        self.interval = interval
        self.ttl = ttl
        self.last_token = last_token
        self._seen = SglangEngine()  # every sequence sent so far: common prefixes
        self._units: dict[int, float] = {}  # prefix digest -> last use
        self._depths: list[int] = []  # sorted lengths of persisted units

    def units(self, token_ids: Sequence[int] | np.ndarray) -> Units:
        return Units.tokens(token_ids)

    def _check(self, units: Units) -> None:
        if units.unit != 1 or units.chained:
            raise ValueError("deepseek needs the token ids themselves (Units.tokens)")

    def _alive(self, digest: int, now: float | None) -> bool:
        used = self._units.get(digest)
        return used is not None and (self.ttl is None or now is None or now - used <= self.ttl)

    def _lookup(self, prompt: Units, now: float | None) -> tuple[Lookup, int, int | None]:
        self._check(prompt)
        common = self._seen.lookup(prompt).matched_units  # longest prefix sent before
        candidates = self._depths[: bisect.bisect_right(self._depths, common)]
        matched = cached = 0
        hit: int | None = None
        for depth, digest in zip(candidates, _digests(prompt.keys, candidates), strict=True):
            if self._alive(digest, now):
                matched = depth
                if depth <= prompt.n_tokens - self.last_token:
                    cached, hit = depth, digest
        return Lookup(cached, matched, 1), common, hit

    def lookup(self, prompt: Units, *, now: float | None = None) -> Lookup:
        return self._lookup(prompt, now)[0]

    def admit(self, prompt: Units, *, now: float | None = None) -> Admission:
        lookup, common, hit = self._lookup(prompt, now)
        if hit is not None and now is not None:
            self._units[hit] = now
        return Admission(lookup, prompt, handle=common)

    def _persist(self, tokens: np.ndarray, depths: set[int], now: float | None) -> None:
        ordered = sorted(d for d in depths if 0 < d <= len(tokens))
        t = 0.0 if now is None else now
        for depth, digest in zip(ordered, _digests(tokens, ordered), strict=True):
            self._units[digest] = t
            i = bisect.bisect_left(self._depths, depth)
            if i == len(self._depths) or self._depths[i] != depth:
                self._depths.insert(i, depth)

    def release(self, admission: Admission, *, sequence: Units | None = None,
                now: float | None = None) -> None:
        admission.finish()
        prompt = admission.prompt
        full = prompt
        if sequence is not None and sequence.n_tokens > prompt.n_tokens:
            self._check(sequence)
            full = sequence
        depths = {admission.handle, prompt.n_tokens, full.n_tokens}
        if self.interval:
            depths.update(range(self.interval, full.n_tokens, self.interval))
        self._persist(full.keys, depths, now)
        self._seen.insert(full)

    def __len__(self) -> int:
        """Persisted units."""
        return len(self._units)
