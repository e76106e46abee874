"""OpenAI automatic prompt caching (models before GPT-5.6), from its documentation.

Sources (developers.openai.com/api/docs/guides/prompt-caching and the cookbook
``Prompt_Caching_201.ipynb``, as quoted in shared/reference/cache-semantics.md A.4):

* "works automatically for prompts containing 1024 tokens or more, with cache
  hits occurring in increments of 128 tokens": a hit is 0 or a multiple of 128 of
  at least 1024 (confirmed on TraceLab's gpt-5.4 sample: every ``cached_tokens``
  is a multiple of 128).
* Retention ``in_memory`` (default): prefixes stay "5-10 minutes of inactivity,
  up to 1 hour" -- the hour is how long an unused prefix can survive off-peak, not an
  age limit on a prefix in use (a Codex session read at 100k tokens for hours keeps its
  cache): the replay expires a prefix after 10 minutes unused (the top of the usual
  range) and never for its age; ``"24h"`` (extended) up to 24 hours. The ledger reads a
  pause beyond 5 minutes as an expiry only when the read after it shows one
  (`findings.ledger.Rules.expired`).
* Output tokens are cached too: TraceLab's ``cached_tokens`` sometimes exceed the
  previous request's input, so pass the request's `sequence` (prompt + output)
  at release.

Assumed, not documented: the last prompt token is always computed (hit at most
``floor((L - 1) / 128) * 128``), as every engine must to produce logits; a prompt
under 1024 tokens writes nothing. Not modelled: routing by a hash of the first
~256 tokens and ``prompt_cache_key`` (a prefix above ~15 requests per minute
overflows to machines that miss), eviction before the retention time, GPT-5.6's
explicit breakpoints and billed writes. ``now`` is in seconds; ``now=None`` means
no expiry.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from prefixscope.engines.base import Admission, BaseEngine, Lookup, Units

RETENTION: dict[str, tuple[float, float | None]] = {  # idle TTL, maximum age (seconds)
    "in_memory": (600.0, None),  # "5-10 minutes of inactivity, up to 1 hour" (off-peak)
    "24h": (86_400.0, 86_400.0),  # extended retention
}


class OpenaiEngine(BaseEngine):
    """OpenAI's automatic prefix cache with retention (see the module docstring)."""

    name: ClassVar[str] = "openai"

    def __init__(self, *, step: int = 128, min_tokens: int = 1024,
                 retention: Literal["in_memory", "24h"] = "in_memory",
                 idle_ttl: float | None = None, max_age: float | None = None,
                 cache_output: bool = True) -> None:
        """Args:
            step: hit granularity in tokens.
            min_tokens: shortest prompt that is cached, and shortest hit.
            retention: ``prompt_cache_retention``; sets `idle_ttl` and `max_age`.
            idle_ttl: seconds a prefix survives unused (in_memory: 600, the top of
                the documented 5-10 minutes).
            max_age: seconds a prefix survives at all since it was written (None: no
                limit; in_memory has none).
            cache_output: cache the output tokens of the `sequence` given at release.
        """
        if step < 1:
            raise ValueError(f"step must be >= 1, got {step}")
        self.unit = step
        self.min_tokens = min_tokens
        default_idle, default_age = RETENTION[retention]
        self.idle_ttl = default_idle if idle_ttl is None else idle_ttl
        self.max_age = default_age if max_age is None else max_age
        self.cache_output = cache_output
        self._entries: dict[int, tuple[float, float]] = {}  # key -> (last used, written)

    def _alive(self, key: int, now: float | None) -> bool:
        entry = self._entries.get(key)
        if entry is None:
            return False
        return now is None or (now - entry[0] <= self.idle_ttl
                               and (self.max_age is None or now - entry[1] <= self.max_age))

    def _matched(self, keys: list[int], now: float | None) -> int:
        """How many of `keys`, from the first, are alive (`_alive` of each, inlined: a
        replay asks this of every block of every prompt)."""
        entries = self._entries
        n = 0
        if now is None:
            for key in keys:
                if key not in entries:
                    break
                n += 1
            return n
        idle, age = self.idle_ttl, self.max_age
        for key in keys:
            entry = entries.get(key)
            if entry is None or not (now - entry[0] <= idle
                                     and (age is None or now - entry[1] <= age)):
                break
            n += 1
        return n

    def lookup(self, prompt: Units, *, now: float | None = None) -> Lookup:
        self._check(prompt)
        matched = self._matched(prompt.full_keys(), now)
        cached = min(matched, max(prompt.n_tokens - 1, 0) // self.unit) * self.unit
        return Lookup(cached if cached >= self.min_tokens else 0, matched, self.unit)

    def admit(self, prompt: Units, *, now: float | None = None) -> Admission:
        lookup = self.lookup(prompt, now=now)
        if now is not None:
            for key in prompt.full_keys()[: lookup.cached_tokens // self.unit]:
                self._entries[key] = (now, self._entries[key][1])
        return Admission(lookup, prompt)

    def release(self, admission: Admission, *, sequence: Units | None = None,
                now: float | None = None) -> None:
        admission.finish()
        prompt = admission.prompt
        if prompt.n_tokens < self.min_tokens:
            return
        keys = prompt.full_keys()
        if self.cache_output and sequence is not None and sequence.n_tokens > prompt.n_tokens:
            self._check(sequence)
            # KV exists for all but the last sampled token.
            keys = sequence.keys[: (sequence.n_tokens - 1) // self.unit].tolist()
        t = 0.0 if now is None else now
        entries = self._entries
        idle, age = self.idle_ttl, self.max_age
        for key in keys:  # `_alive(key, now)` of an entry, inlined
            old = entries.get(key)
            written = old[1] if old is not None and (
                now is None or (now - old[0] <= idle
                                and (age is None or now - old[1] <= age))) else t
            entries[key] = (t, written)

    def __len__(self) -> int:
        return len(self._entries)
