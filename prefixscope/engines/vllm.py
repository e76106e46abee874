"""vLLM v1 automatic prefix caching, as vLLM 0.33.0 does it (full-attention models).

Follows, by name:

* ``vllm/config/cache.py``: ``DEFAULT_BLOCK_SIZE = 16``.
* ``vllm/v1/core/kv_cache_utils.py::get_request_block_hasher``: only full blocks
  are hashed, each chained on its parent (`base.block_keys`).
* ``kv_cache_manager.py::get_computed_blocks``: ``max_cache_hit_length =
  request.num_tokens - 1``; ``FullAttentionManager.find_longest_cache_hit`` scans
  ``islice(block_hashes, max_length // block_size)`` and stops at the first miss;
  with EAGLE/MTP (``drop_eagle_block``) one more block is dropped.
* ``block_pool.py::BlockPool`` and ``kv_cache_utils.py::FreeKVCacheBlockQueue``:
  a fixed pool of physical blocks. ``touch`` takes a hit block out of the free
  queue; ``get_new_blocks`` pops from the front and evicts the hash the block held
  (``_maybe_evict_cached_block``); ``free_blocks`` gets a request's blocks in
  reverse order (``SingleTypeKVCacheManager.free``), *prepends* blocks without a
  hash (reused first) and *appends* hashed ones (LRU, chain tail in front of its
  head). ``allocate_slots`` caches new full blocks right after allocating them, so
  a concurrent request hits blocks still being computed. Duplicates are kept
  (``BlockHashToBlockMap``): a block recomputed while an equal one is cached
  holds a second physical copy; lookups take the first.

Free queue, front (reused first) to back::

    [freed blocks without hash, newest first][never used, by id][hashed: LRU ... MRU]
      ^ self._empty (a stack)                 ^ self._fresh       ^ self._lru

``capacity_blocks`` is vLLM's ``num_gpu_blocks - 1`` (block 0 is the null block),
so block ids run 1..capacity as in vLLM. A request the pool cannot hold would
wait in vLLM; here it is admitted and its blocks that do not fit stay uncached
(counted in `overflow_blocks`). Not modelled: hybrid models (sliding window,
Mamba), fine-grained partial hits, multimodal extra keys, chunked-prefill
scheduling, preemption, the KV connector (see `lmcache`).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from itertools import takewhile
from typing import ClassVar

from prefixscope.engines.base import (
    Admission,
    BaseEngine,
    KeySet,
    Lookup,
    Units,
    resolve_capacity,
)


class VllmEngine(BaseEngine):
    """vLLM's block pool with prefix caching (see the module docstring)."""

    name: ClassVar[str] = "vllm"

    def __init__(self, *, block_size: int = 16, capacity_blocks: int | None = None,
                 capacity_tokens: int | None = None, cache_output: bool = True,
                 eagle: bool = False) -> None:
        """Args:
            block_size: tokens per block (vLLM's default 16; backends and hybrid
                models raise it, read it from the engine log).
            capacity_blocks: usable KV blocks (``num_gpu_blocks - 1``); None = unlimited.
            capacity_tokens: the same in tokens (rounded down to blocks).
            cache_output: hash the blocks filled by the output tokens when a
                request is released with its `sequence` (vLLM always does; turn it
                off when the logged output is not what the next turn re-renders).
            eagle: EAGLE/MTP speculative decoding drops one more block from a hit.
        """
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.unit = block_size
        self.capacity = resolve_capacity(block_size, capacity_blocks, capacity_tokens)
        self.cache_output = cache_output
        self.eagle = eagle
        self._empty: list[int] = []  # freed blocks without hash; the last is the queue front
        self._fresh = 1  # next never-used block id
        self._lru: OrderedDict[int, None] = OrderedDict()  # free hashed blocks, LRU first
        self._key_of: dict[int, int] = {}  # block id -> the key it holds
        self._table: dict[int, int | dict[int, None]] = {}  # key -> block id(s), first = hit
        self._ref: dict[int, int] = {}  # block id -> ref count, only while > 0
        self._running = 0  # admitted, not yet released requests
        self.overflow_blocks = 0  # blocks requests needed that the pool could not give

    # -- lookup ----------------------------------------------------------------------------

    def _hit_blocks(self, prompt: Units, keys: list[int]) -> tuple[int, int]:
        """(leading cached full blocks, blocks the hit may use) for `prompt`, whose
        full keys are `keys`."""
        matched = len(list(takewhile(self._table.__contains__, keys)))
        n_tokens = prompt.n_tokens
        hit = min(matched, (n_tokens - 1) // self.unit) if n_tokens else 0
        if self.eagle and hit:
            hit -= 1
        return matched, hit

    def lookup(self, prompt: Units, *, now: float | None = None) -> Lookup:
        self._check(prompt)
        matched, hit = self._hit_blocks(prompt, prompt.full_keys())
        return Lookup(hit * self.unit, matched, self.unit)

    # -- pool ------------------------------------------------------------------------------

    def _cache_one(self, block: int, key: int) -> None:
        """``cache_full_blocks`` for one block: duplicates are kept, the older first."""
        self._key_of[block] = key
        ids = self._table.get(key)
        if ids is None:
            self._table[key] = block
        elif isinstance(ids, int):
            self._table[key] = {ids: None, block: None}
        else:
            ids[block] = None

    def _allocate(self, blocks: list[int], n: int, keys: list[int]) -> None:
        """``get_new_blocks(n)`` then ``cache_full_blocks``: each new block is taken from
        the front of the free queue (evicting the hash it held) and, when `keys` has
        a key at its position, caches that key (duplicates kept, the older first)."""
        empty, lru, key_of, table, ref = (self._empty, self._lru, self._key_of, self._table,
                                          self._ref)
        capacity = self.capacity
        fresh = self._fresh
        n_keys = len(keys)
        i = len(blocks)
        append = blocks.append
        for j in range(n):
            if empty:
                block = empty.pop()
            elif capacity is None or fresh <= capacity:
                block = fresh
                fresh += 1
            elif lru:
                block = lru.popitem(False)[0]
                old = key_of.pop(block)  # _maybe_evict_cached_block
                ids = table[old]
                if ids.__class__ is int:
                    del table[old]
                else:
                    del ids[block]  # type: ignore[union-attr]
                    if len(ids) == 1:  # type: ignore[arg-type]
                        table[old] = next(iter(ids))  # type: ignore[arg-type]
            else:
                self.overflow_blocks += n - j
                break
            ref[block] = 1
            append(block)
            if i < n_keys:  # cache_full_blocks, inlined `_cache_one`
                key = keys[i]
                key_of[block] = key
                held = table.get(key)
                if held is None:
                    table[key] = block
                elif held.__class__ is int:
                    table[key] = {held: None, block: None}
                else:
                    held[block] = None  # type: ignore[index]
            i += 1
        self._fresh = fresh

    # -- request life cycle ----------------------------------------------------------------

    def admit(self, prompt: Units, *, now: float | None = None) -> Admission:
        if prompt.unit != self.unit or not prompt.chained:
            self._check(prompt)
        keys = prompt.full_keys()
        matched, hit = self._hit_blocks(prompt, keys)
        table, refs, lru = self._table, self._ref, self._lru
        # touch: the first block holding each hit key (a request's blocks are distinct)
        blocks: list[int] = list(map(table.__getitem__, keys[:hit]))  # type: ignore[arg-type]
        if dict in set(map(type, blocks)):
            blocks = [b if b.__class__ is int else next(iter(b))  # type: ignore[call-overload]
                      for b in blocks]
        if not refs:  # nothing running (a sequential replay): every hit block is free
            deque(map(lru.__delitem__, blocks), maxlen=0)
            refs.update(dict.fromkeys(blocks, 1))
        else:
            for block in blocks:
                ref = refs.get(block, 0)
                if ref == 0:
                    del lru[block]
                refs[block] = ref + 1
        self._running += 1
        self._allocate(blocks, -(-prompt.n_tokens // self.unit) - hit, keys)
        lookup = Lookup(hit * self.unit, matched, self.unit)
        return Admission(lookup, prompt, handle=blocks)

    def release(self, admission: Admission, *, sequence: Units | None = None,
                now: float | None = None) -> None:
        admission.finish()
        blocks: list[int] = admission.handle
        prompt = admission.prompt
        if sequence is not None and sequence.n_tokens > prompt.n_tokens:
            self._check(sequence)
            # The last sampled token is never fed back: KV exists for n_tokens - 1.
            computed = sequence.n_tokens - 1
            n_cached = min(prompt.n_full, len(blocks))
            self._allocate(blocks, -(-computed // self.unit) - len(blocks), [])
            if self.cache_output:
                # The prompt's partial block and the output blocks, once full.
                keys = sequence.keys[: computed // self.unit].tolist()
                for i in range(n_cached, min(len(keys), len(blocks))):
                    self._cache_one(blocks[i], keys[i])
        to_front: list[int] = []
        refs, key_of, lru = self._ref, self._key_of, self._lru
        self._running -= 1
        if not self._running:  # it held every pinned block, each once: all are freed
            refs.clear()
            tail_first = blocks[::-1]
            keyed = list(filter(key_of.__contains__, tail_first))
            lru.update(dict.fromkeys(keyed))
            if len(keyed) < len(tail_first):
                to_front = [b for b in tail_first if b not in key_of]
        else:
            for block in reversed(blocks):  # tail first
                ref = refs[block] - 1
                if ref:
                    refs[block] = ref
                    continue
                del refs[block]
                if block in key_of:
                    lru[block] = None
                else:
                    to_front.append(block)
        if to_front:
            to_front.reverse()
            self._empty.extend(to_front)

    # -- inspection (tests, reports) -------------------------------------------------------

    def free_queue(self) -> list[int]:
        """Block ids in vLLM's free-queue order (the next block to reuse first)."""
        fresh_end = self.capacity + 1 if self.capacity is not None else self._fresh
        return [*reversed(self._empty), *range(self._fresh, fresh_end), *self._lru]

    def blocks_of(self, admission: Admission) -> list[int]:
        """The physical block ids a running request holds, in token order."""
        return list(admission.handle)

    def __len__(self) -> int:
        """Number of blocks holding a hash (cached, in use or free)."""
        return len(self._key_of)


class VllmUnlimitedEngine(BaseEngine):
    """`VllmEngine` with unlimited capacity, in 8 bytes per cached block.

    Nothing is ever evicted, so physical blocks, reference counts and the free queue
    decide nothing: a hit is the leading prompt blocks whose key was ever cached (by an
    admitted prompt's full blocks, or a released output's, with `cache_output`), capped
    as `VllmEngine` caps it. `simulate` replays unlimited capacity with this engine;
    tests hold its lookups equal to `VllmEngine(capacity_blocks=None)`'s."""

    name: ClassVar[str] = "vllm"

    def __init__(self, *, block_size: int = 16, cache_output: bool = True,
                 eagle: bool = False) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.unit = block_size
        self.cache_output = cache_output
        self.eagle = eagle
        self._keys = KeySet(prefix_closed=True)  # admit and release add chains' rests

    def lookup(self, prompt: Units, *, now: float | None = None) -> Lookup:
        self._check(prompt)
        matched = self._keys.leading(prompt.keys[: prompt.n_full])
        n_tokens = prompt.n_tokens
        hit = min(matched, (n_tokens - 1) // self.unit) if n_tokens else 0
        if self.eagle and hit:
            hit -= 1
        return Lookup(hit * self.unit, matched, self.unit)

    def admit(self, prompt: Units, *, now: float | None = None) -> Admission:
        lookup = self.lookup(prompt)
        # the blocks after the leading match are allocated and cached at once
        self._keys.add(prompt.keys[lookup.matched_units: prompt.n_full])
        return Admission(lookup, prompt)

    def release(self, admission: Admission, *, sequence: Units | None = None,
                now: float | None = None) -> None:
        admission.finish()
        prompt = admission.prompt
        if sequence is not None and sequence.n_tokens > prompt.n_tokens:
            self._check(sequence)
            if self.cache_output:  # the blocks the output filled (KV for n_tokens - 1)
                self._keys.add(sequence.keys[prompt.n_full: (sequence.n_tokens - 1)
                                             // self.unit])

    def __len__(self) -> int:
        """Number of distinct keys cached."""
        return len(self._keys)
