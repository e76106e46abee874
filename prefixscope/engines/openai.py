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

import math
from itertools import repeat
from typing import ClassVar, Literal

import numpy as np

from prefixscope.engines.base import Admission, BaseEngine, Lookup, Units

_FIRST_ROWS = 1024  # the arrays' first size (doubled as keys come)
_KNOWN = 256  # prompts whose rows are kept for the prompts extending them
_EMPTY_KEYS = np.empty(0, dtype=np.uint64)
RETENTION: dict[str, tuple[float, float | None]] = {  # idle TTL, maximum age (seconds)
    "in_memory": (600.0, None),  # "5-10 minutes of inactivity, up to 1 hour" (off-peak)
    "24h": (86_400.0, 86_400.0),  # extended retention
}


class OpenaiEngine(BaseEngine):
    """OpenAI's automatic prefix cache with retention (see the module docstring)."""

    name: ClassVar[str] = "openai"
    # The index's new keys wait in a dict until they pass this many (or a sixteenth of the
    # sorted keys), then are merged in; `expire` looks at the entries from this many on.
    _MERGE_FROM: ClassVar[int] = 1 << 16
    _EXPIRE_FROM: ClassVar[int] = 1 << 16

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
        # Each prefix key's row in two arrays of seconds: when it was last used, and when
        # it was written. A replay tests and updates every block of every prompt (a Codex
        # session resends its whole history each call), so both are array operations on
        # the prompt's rows. A key's row is found in a sorted array of the keys beside their
        # rows, or, for the keys come since the last merge, in a dict (C-level `map`): about
        # 16 bytes a key where a dict of them all spends ~110 (a replay of a GB Codex log
        # holds millions). A prompt given with its `prefix` (the prompt it extends, `step`)
        # takes the rows of those keys from that prompt's (`_known`): only its new keys are
        # looked up. Rows are 0 .. len(self) - 1; a row stays its key's until `expire`
        # forgets entries and renumbers the rest (those in `_known` too).
        self._sorted = _EMPTY_KEYS
        self._sorted_rows = np.empty(0, dtype=np.intp)
        self._recent: dict[int, int] = {}
        self._last = np.zeros(_FIRST_ROWS)
        self._written = np.zeros(_FIRST_ROWS)
        self._expire_at = self._EXPIRE_FROM
        # the rows of the full keys of the last prompts released (by the Units' identity,
        # the Units held so that identity is not reused), oldest first
        self._known: dict[int, tuple[Units, np.ndarray]] = {}
        # Two copies of one key in a prompt (a 64-bit collision of the chain) decide as one
        # key at a time when the times are non-negative (see `_cache`); else one at a time.
        self._one_at_a_time = self.idle_ttl < 0 or (self.max_age is not None
                                                    and self.max_age < 0)

    def _rows(self, keys: np.ndarray) -> np.ndarray:
        """Each key's row (`keys`: uint64), -1 for a key not cached."""
        held = self._sorted
        if len(held) and len(keys):
            at = held.searchsorted(keys)
            rows = self._sorted_rows.take(at, mode="clip")
            absent = held.take(at, mode="clip") != keys
            rows[absent] = -1
        else:
            rows = np.full(len(keys), -1, dtype=np.intp)
            absent = rows < 0
        if self._recent:
            missing = np.flatnonzero(absent)
            if len(missing):
                rows[missing] = np.fromiter(map(self._recent.get, keys[missing].tolist(),
                                                repeat(-1, len(missing))),
                                            dtype=np.intp, count=len(missing))
        return rows

    def _prompt_rows(self, prompt: Units, prefix: tuple[Units, int] | None) -> np.ndarray:
        """The rows of `prompt`'s full keys: those of its first keys taken from `prefix`'s
        prompt when it was released here (all its keys were cached then) and its keys are
        the very same (compared, not assumed), the rest looked up."""
        keys = prompt.keys[: prompt.n_full]
        known = self._known.get(id(prefix[0])) if prefix is not None else None
        if prefix is None or known is None or known[0] is not prefix[0]:
            return self._rows(keys)
        base, base_rows = known
        n = min(prefix[1], len(base_rows), len(keys))
        if not np.array_equal(keys[:n], base.keys[:n]):
            return self._rows(keys)
        return np.concatenate((base_rows[:n], self._rows(keys[n:])))

    def _alive(self, rows: np.ndarray, now: float) -> np.ndarray:
        """Which of these rows (all of cached keys) are alive at `now`: used no more than
        `idle_ttl` ago and, with a `max_age`, written no more than that ago. The same
        float64 comparisons as on Python floats (a NaN fails them)."""
        alive = now - self._last[rows] <= self.idle_ttl
        if self.max_age is not None:
            alive &= now - self._written[rows] <= self.max_age
        return alive

    def _matched(self, rows: np.ndarray, now: float | None) -> int:
        """How many of the keys with `rows`, from the first, are alive."""
        absent = np.flatnonzero(rows < 0)
        present = int(absent[0]) if len(absent) else len(rows)
        if now is None or not present:
            return present
        alive = self._alive(rows[:present], now)
        return present if alive.all() else int(alive.argmin())  # the first dead one

    def _lookup(self, prompt: Units, now: float | None,
                prefix: tuple[Units, int] | None = None) -> tuple[Lookup, np.ndarray]:
        self._check(prompt)
        rows = self._prompt_rows(prompt, prefix)
        matched = self._matched(rows, now)
        cached = min(matched, max(prompt.n_tokens - 1, 0) // self.unit) * self.unit
        return Lookup(cached if cached >= self.min_tokens else 0, matched, self.unit), rows

    def lookup(self, prompt: Units, *, now: float | None = None) -> Lookup:
        return self._lookup(prompt, now)[0]

    def admit(self, prompt: Units, *, now: float | None = None,
              prefix: tuple[Units, int] | None = None) -> Admission:
        lookup, rows = self._lookup(prompt, now, prefix)
        if now is not None:  # the hit's keys are used now (all alive: cached <= matched)
            self._last[rows[: lookup.cached_tokens // self.unit]] = now
        return Admission(lookup, prompt, handle=rows)

    def step(self, prompt: Units, *, sequence: Units | None = None,
             now: float | None = None, prefix: tuple[Units, int] | None = None) -> Lookup:
        admission = self.admit(prompt, now=now, prefix=prefix)
        self.release(admission, sequence=sequence, now=now)
        return admission.lookup

    def release(self, admission: Admission, *, sequence: Units | None = None,
                now: float | None = None) -> None:
        admission.finish()
        prompt = admission.prompt
        if prompt.n_tokens < self.min_tokens:
            return
        # the admitted prompt's rows (its keys not cached then looked up again: another
        # request may have cached them since)
        rows = admission.handle
        if not isinstance(rows, np.ndarray):
            rows = self._prompt_rows(prompt, None)
        keys = prompt.keys[: prompt.n_full]
        rows = rows.copy()
        if self.cache_output and sequence is not None and sequence.n_tokens > prompt.n_tokens:
            self._check(sequence)
            # KV exists for all but the last sampled token.
            keys = sequence.keys[: (sequence.n_tokens - 1) // self.unit]
            # the sequence is the prompt's keys and more: those rows are the prompt's
            n = prompt.n_full if np.array_equal(keys[: prompt.n_full],
                                                prompt.keys[: prompt.n_full]) else 0
            rows = np.concatenate((rows[:n], np.full(len(keys) - n, -1, dtype=np.intp)))
        else:
            n = len(rows)
        missing = np.flatnonzero(rows < 0)
        if len(missing):
            rows[missing] = self._rows(keys[missing])
        self._cache(keys, rows, 0.0 if now is None else now, now)
        if n == prompt.n_full:  # every row of the prompt's keys known: for its successor
            self._known[id(prompt)] = (prompt, rows[:n])
            if len(self._known) > _KNOWN:
                del self._known[next(iter(self._known))]

    def _cache(self, keys: np.ndarray, rows: np.ndarray, t: float, now: float | None) -> None:
        """Every key (its row in `rows`, -1: not cached) used at `t`; written at `t` unless
        it is cached and alive at `now` (then it keeps its written time); `rows` is
        completed with the new keys' rows.

        Why all at once equals one key at a time when a key is listed twice (`idle_ttl`
        and `max_age` non-negative or NaN): its first copy leaves (t, w), w its written
        time if it was alive else t; the second copy finds it alive (0 <= idle, and
        now - w <= age held already or w = t) unless the idle TTL is NaN, when nothing is
        alive and w = t either way -- so the second copy leaves (t, w) too, what both
        copies get from the state before them."""
        if self._one_at_a_time:
            for i, key in enumerate(keys.tolist()):
                rows[i] = self._cache_one(key, t, now)
            return
        cached = rows >= 0
        keep = cached.copy()
        if now is not None:
            keep[cached] = self._alive(rows[cached], now)
        written = np.where(keep, self._written[np.where(cached, rows, 0)], t)
        absent = np.flatnonzero(~cached)
        if len(absent):
            new = self._new_rows(list(dict.fromkeys(keys[absent].tolist())))
            rows[absent] = [new[k] for k in keys[absent].tolist()]
        self._last[rows] = t
        self._written[rows] = written

    def _cache_one(self, key: int, t: float, now: float | None) -> int:
        row = int(self._rows(np.array([key], dtype=np.uint64))[0])
        if row < 0:
            row = self._new_rows([key])[key]
            self._last[row] = self._written[row] = t
            return row
        alive = now is None or bool(self._alive(np.array([row], dtype=np.intp), now)[0])
        if not alive:
            self._written[row] = t
        self._last[row] = t
        return row

    def _new_rows(self, keys: list[int]) -> dict[int, int]:
        """Rows for keys not cached yet (distinct), the arrays grown to hold them."""
        first = len(self)
        end = first + len(keys)
        if end > len(self._last):
            size = max(end, 2 * len(self._last))
            self._last = np.resize(self._last, size)
            self._written = np.resize(self._written, size)
        new = dict(zip(keys, range(first, end), strict=True))
        self._recent.update(new)
        if len(self._recent) > max(self._MERGE_FROM, len(self._sorted) >> 4):
            self._merge()
        return new

    def _merge(self) -> None:
        """The dict's keys into the sorted array (no key is in both: a key is given a row
        only when `_rows` found it in neither)."""
        count = len(self._recent)
        keys = np.fromiter(self._recent, dtype=np.uint64, count=count)
        rows = np.fromiter(self._recent.values(), dtype=np.intp, count=count)
        order = np.argsort(keys)
        keys, rows = keys[order], rows[order]
        at = np.searchsorted(self._sorted, keys)
        self._sorted = np.insert(self._sorted, at, keys)
        self._sorted_rows = np.insert(self._sorted_rows, at, rows)
        self._recent = {}

    def expire(self, horizon: float) -> None:
        """Forget the entries no later call can find alive, when the entries have doubled
        since the last pass (each pass is linear in them). The caller promises that every
        later call's `now` is a number (not None) no less than `horizon`, and that no
        admission is outstanding (its rows would be renumbered under it).

        Why forgetting changes no answer: an entry dead at a finite `horizon` (`_alive`:
        ``horizon - last <= idle_ttl`` fails, or with a `max_age` ``horizon - written <=
        max_age`` does) is dead at every ``now >= horizon``. Float subtraction rounds
        monotonically in its first operand, so ``now - x >= horizon - x`` for a finite x;
        an x of -inf gives +inf at both; an x of +inf passes at `horizon` (-inf) unless the
        bound is NaN, which nothing passes; a NaN x never passes. A NaN `now` finds nothing
        alive. And a dead entry decides as an absent key at every call: `_matched` stops
        at the first of either; `admit` marks used only the hit's keys (alive); `_cache`
        (`_cache_one`) leaves both used and written at the step's time. The rows left are
        renumbered in their order, and those `_known` holds with them; a prompt there with
        a key forgotten leaves it (`_known` lends only rows of cached keys, and the key may
        be cached again under a new row before a successor asks)."""
        if len(self) >= self._expire_at:
            self._forget(horizon)
            self._expire_at = max(self._EXPIRE_FROM, 2 * len(self))

    def _forget(self, horizon: float) -> None:
        """Drop every entry dead at `horizon` (finite; else nothing), see `expire`."""
        n = len(self)
        if not n or not math.isfinite(horizon):
            return
        keep = self._alive(np.arange(n), horizon)
        live = int(np.count_nonzero(keep))
        if live == n:
            return
        remap = np.full(n, -1, dtype=np.intp)
        remap[keep] = np.arange(live)
        size = max(_FIRST_ROWS, live)
        last, written = np.zeros(size), np.zeros(size)
        last[:live], written[:live] = self._last[:n][keep], self._written[:n][keep]
        self._last, self._written = last, written
        rows = remap[self._sorted_rows]
        held = rows >= 0
        self._sorted, self._sorted_rows = self._sorted[held], rows[held]
        recent = remap[np.fromiter(self._recent.values(), dtype=np.intp,
                                   count=len(self._recent))].tolist()
        self._recent = {key: row for key, row in zip(self._recent, recent, strict=True)
                        if row >= 0}
        known = ((i, units, remap[rows]) for i, (units, rows) in self._known.items())
        self._known = {i: (units, rows) for i, units, rows in known if rows.min(initial=0) >= 0}

    def __len__(self) -> int:
        return len(self._sorted) + len(self._recent)
