"""The block-LRU convention of published block-hash traces (Mooncake FAST'25).

Mooncake's trace README (kvcache-ai/Mooncake, ``FAST25-release/traces/README.md``)
defines the trace: ``hash_ids`` are "remapped prefix block hashes. The block size
is 512 tokens. Identical hash IDs indicate reusable prefix KV cache blocks ... the
two sample requests share the first 12 hash IDs, so they can share prefix caching
for the first 12 * 512 = 6144 tokens". The last id may stand for a partial block.
The ideal hit ratios computed from it (tests/data/real/README.md: conversation
37.36 %, synthetic 65.12 %, token-weighted; the paper reports about 40 % and 66 %)
count a request's hit as

    cached = min(matched * block_size, input_length)

where ``matched`` is the run of leading ids already seen: a partial last block
counts when its id was seen, and there is no last-token rule. This engine is that
convention with an LRU of ``capacity_blocks`` ids: a request touches its ids tail
first, so its head is the most recent and a chain is evicted from its tail. No
pinning: a request's ids are cached at once when it is admitted and released.

Use `vllm` (``block_size=512``) to replay the same trace under vLLM's own rules
(full blocks only, hit at most ``input_length - 1``).
"""

from __future__ import annotations

from collections import OrderedDict
from itertools import takewhile
from typing import ClassVar

from prefixscope.engines.base import (
    Admission,
    BaseEngine,
    Lookup,
    Units,
    resolve_capacity,
)


class BlocktraceEngine(BaseEngine):
    """An LRU of trace block ids with the trace publishers' hit rule.

    `step` (the sequential replay) converts a request's ids once and allocates no
    admission. Without a capacity nothing is evicted, so a set (the hits) and a
    list of touches (the LRU order, for `contents`), each written in one C-level
    call per request, replace the LRU list.
    """

    __slots__ = ("_lru", "_seen", "_touches", "capacity", "unit")

    name: ClassVar[str] = "blocktrace"

    def __init__(self, *, block_size: int = 512, capacity_blocks: int | None = None,
                 capacity_tokens: int | None = None) -> None:
        """Args:
            block_size: tokens per id (Mooncake 512, Bailian 16).
            capacity_blocks: ids the cache holds; None = unlimited (the ideal).
            capacity_tokens: the same in tokens (rounded down to blocks).
        """
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.unit = block_size
        self.capacity = resolve_capacity(block_size, capacity_blocks, capacity_tokens)
        self._lru: OrderedDict[int, None] = OrderedDict()  # with a capacity: LRU first
        self._seen: set[int] = set()  # without a capacity: every id seen
        self._touches: list[int] = []  # and every touch, oldest first (for `contents`)

    def _cached(self) -> set[int] | OrderedDict[int, None]:
        return self._lru if self.capacity is not None else self._seen

    def lookup(self, prompt: Units, *, now: float | None = None) -> Lookup:
        if prompt.unit != self.unit or not prompt.chained:
            self._check(prompt)
        matched = len(list(takewhile(self._cached().__contains__, prompt.keys.tolist())))
        return Lookup(min(matched * self.unit, prompt.n_tokens), matched, self.unit)

    def admit(self, prompt: Units, *, now: float | None = None) -> Admission:
        return Admission(self.lookup(prompt), prompt)

    def release(self, admission: Admission, *, sequence: Units | None = None,
                now: float | None = None) -> None:
        admission.finish()
        self._touch(admission.prompt.keys.tolist())

    def step(self, prompt: Units, *, sequence: Units | None = None,
             now: float | None = None, prefix: tuple[Units, int] | None = None) -> Lookup:
        if prompt.unit != self.unit or not prompt.chained:
            self._check(prompt)
        keys = prompt.keys.tolist()
        matched = len(list(takewhile(self._cached().__contains__, keys)))
        self._touch(keys)
        unit = self.unit
        return Lookup(min(matched * unit, prompt.n_tokens), matched, unit)

    def _touch(self, keys: list[int]) -> None:
        """Cache `keys` tail first, so the head ends most recent."""
        capacity = self.capacity
        if capacity is None:  # nothing is evicted: a set, and the touches for `contents`
            self._seen.update(keys)
            self._touches.extend(reversed(keys))
            return
        lru = self._lru
        for key in reversed(keys):
            if key in lru:
                lru.move_to_end(key)
            else:
                lru[key] = None
                if len(lru) > capacity:
                    lru.popitem(False)

    def contents(self) -> list[int]:
        """Cached ids, the next to be evicted first."""
        if self.capacity is not None:
            return list(self._lru)
        newest_first = dict.fromkeys(reversed(self._touches))
        return list(reversed(newest_first))

    def __len__(self) -> int:
        return len(self._cached())
