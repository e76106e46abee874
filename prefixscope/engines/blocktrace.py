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
from typing import ClassVar

from prefixscope.engines.base import (
    Admission,
    BaseEngine,
    Lookup,
    Units,
    leading_matches,
    resolve_capacity,
)


class BlocktraceEngine(BaseEngine):
    """An LRU of trace block ids with the trace publishers' hit rule."""

    name: ClassVar[str] = "blocktrace"
    unit_parameter: ClassVar[str | None] = "block_size"  # the keyword that sets `unit`

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
        self._lru: OrderedDict[int, None] = OrderedDict()  # LRU first

    def lookup(self, prompt: Units, *, now: float | None = None) -> Lookup:
        self._check(prompt)
        matched = leading_matches(prompt.keys.tolist(), self._lru)
        return Lookup(min(matched * self.unit, prompt.n_tokens), matched, self.unit)

    def admit(self, prompt: Units, *, now: float | None = None) -> Admission:
        return Admission(self.lookup(prompt), prompt)

    def release(self, admission: Admission, *, sequence: Units | None = None,
                now: float | None = None) -> None:
        admission.finish()
        lru, capacity = self._lru, self.capacity
        for key in reversed(admission.prompt.keys.tolist()):  # tail first: head ends newest
            if key in lru:
                lru.move_to_end(key)
            else:
                lru[key] = None
                if capacity is not None and len(lru) > capacity:
                    lru.popitem(last=False)

    def contents(self) -> list[int]:
        """Cached ids, the next to be evicted first."""
        return list(self._lru)

    def __len__(self) -> int:
        return len(self._lru)
