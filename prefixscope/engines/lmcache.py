"""LMCache's local CPU cache behind vLLM, as LMCache 0.5.6 does it.

Follows, by name:

* ``lmcache/v1/config.py``: ``chunk_size`` 256, ``save_unfull_chunk`` False,
  ``save_decode_cache`` False, ``cache_policy`` "LRU", ``min_retrieve_tokens`` 0.
* ``v1/token_database.py::ChunkedTokenDatabase``: ``_chunk_tokens`` stops at
  ``len(tokens) - len(tokens) % chunk_size`` (the partial last chunk is neither
  hashed nor stored); ``_prefix_hash`` chains each chunk on the previous one.
* ``v1/cache_engine.py::lookup``: prefix-contiguous (``batched_contains`` counts
  hit chunks up to the first miss) and returns the end of the last hit chunk.
  With ``pin=True`` (the vLLM connector) it ends with ``touch_cache``, which
  moves the hit chunks to the MRU end **in reverse** (the head chunk newest).
* ``integration/vllm/vllm_v1_adapter.py::get_num_new_matched_tokens``: if the hit
  is the whole prompt, ``need_to_allocate -= 1`` (the last-token rule); a load
  below ``min_retrieve_tokens`` is skipped.
* ``v1/cache_engine.py::store``: after the forward pass the chunks after the hit
  (``skip_leading_tokens``, aligned down to a chunk) are first *allocated* one
  by one, each allocation evicting the LRU chunk when the cache is full (it stops
  when nothing can be evicted), then put in order head to tail;
  ``local_cpu_backend.py::submit_put_task`` skips a key already present without
  touching it. So a stored request's tail chunk is the newest entry.
* ``v1/storage_backend/cache_policy/lru.py``: an ``OrderedDict``; a hit
  ``move_to_end``; eviction from the front.

Alone, this engine is LMCache's view: `Lookup.cached_tokens` is what the
connector reports as external hits when vLLM's own cache has nothing. The lookup
pins are released when the load finishes, so nothing stays pinned between
admission and release. Capacity is in chunks (``max_local_cpu_size`` divided by
the bytes of one chunk of the model). Not modelled: ``save_unfull_chunk``,
``skip_last_n_tokens``, blending, disk and remote tiers.
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


class LmcacheEngine(BaseEngine):
    """LMCache's chunk store with its LRU policy (see the module docstring)."""

    name: ClassVar[str] = "lmcache"

    def __init__(self, *, chunk_size: int = 256, capacity_blocks: int | None = None,
                 capacity_tokens: int | None = None, save_decode_cache: bool = False,
                 min_retrieve_tokens: int = 0) -> None:
        """Args:
            chunk_size: tokens per chunk (LMCache's default 256).
            capacity_blocks: chunks the local CPU cache holds; None = unlimited.
            capacity_tokens: the same in tokens (rounded down to chunks).
            save_decode_cache: also store the full chunks of the output when a
                request is released with its `sequence`.
            min_retrieve_tokens: skip a load of fewer tokens (LMCache's option).
        """
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.unit = chunk_size
        self.capacity = resolve_capacity(chunk_size, capacity_blocks, capacity_tokens)
        self.save_decode_cache = save_decode_cache
        self.min_retrieve_tokens = min_retrieve_tokens
        self._lru: OrderedDict[int, None] = OrderedDict()  # hot_cache, LRU first

    def lookup(self, prompt: Units, *, now: float | None = None) -> Lookup:
        self._check(prompt)
        matched = leading_matches(prompt.full_keys(), self._lru)
        hit = matched * self.unit
        cached = hit - 1 if hit and hit == prompt.n_tokens else hit
        if cached < self.min_retrieve_tokens:
            cached = 0
        return Lookup(cached, matched, self.unit)

    def admit(self, prompt: Units, *, now: float | None = None) -> Admission:
        lookup = self.lookup(prompt)
        keys = prompt.full_keys()
        for key in reversed(keys[:lookup.matched_units]):  # touch_cache
            self._lru.move_to_end(key)
        return Admission(lookup, prompt)

    def release(self, admission: Admission, *, sequence: Units | None = None,
                now: float | None = None) -> None:
        admission.finish()
        prompt = admission.prompt
        keys = prompt.full_keys()
        if self.save_decode_cache and sequence is not None \
                and sequence.n_tokens > prompt.n_tokens:
            self._check(sequence)
            # KV exists for all but the last sampled token.
            keys = sequence.keys[: (sequence.n_tokens - 1) // self.unit].tolist()
        lru, capacity = self._lru, self.capacity
        allocated: list[int] = []
        for key in keys[admission.lookup.matched_units:]:
            if capacity is not None:
                if len(allocated) >= capacity:
                    break  # nothing evictable: store only the chunks so far
                while lru and len(lru) + len(allocated) >= capacity:
                    lru.popitem(last=False)
            allocated.append(key)
        for key in allocated:
            if key not in lru:
                lru[key] = None

    def contents(self) -> list[int]:
        """Cached chunk keys, the next to be evicted first."""
        return list(self._lru)

    def __len__(self) -> int:
        return len(self._lru)
