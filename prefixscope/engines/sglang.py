"""SGLang's RadixCache, as SGLang 0.5.10.post1 does it (``srt/mem_cache/radix_cache.py``).

Follows, by name:

* ``_handle_page_size``: ``page_size`` defaults to 1 (token-granular); some
  attention backends raise it to 16, 64 or 128 (``server_args.py``).
* ``match_prefix``: the key is truncated to whole pages and walked down the tree;
  a match that ends inside a node **splits** it (``_split_node``); every node on
  the path, and the child where the match stopped, gets ``last_access_time``.
  The scheduler matches ``fill_ids[: input_len - 1]`` (``schedule_batch.py``,
  ``max_prefix_len = input_len - 1``), so a hit is at most
  ``floor((L - 1) / page) * page`` tokens.
* ``cache_finished_req``: inserts ``(origin_input_ids + output_ids)[:kv_committed_len]``
  page-aligned (the KV of the last sampled token is never computed, so
  ``L + output - 1`` tokens) and frees the unaligned tail; ``dec_lock_ref`` then
  unlocks the path ``inc_lock_ref`` locked at admission.
* ``evict``: a heap over ``evictable_leaves`` (``lock_ref == 0``) keyed by the
  ``lru`` strategy's ``last_access_time``; whole leaf nodes are freed until at
  least ``num_tokens`` are; a parent left childless and unlocked joins the heap.
* ``mem_cache/common.py::evict_from_tree_cache``: when an allocation of ``n``
  slots finds fewer than ``n`` free it calls ``evict(n)`` -- ``n`` tokens, not the
  shortfall. A prefill allocates ``L - hit`` slots (plus one page when paged);
  decode allocates as it goes, which evicts only the shortfall.

Keys are the request's units: raw token ids with page 1 (`Units.tokens`, what
SGLang compares), or chained page keys with larger pages (`Units.chain`, or a
trace's block ids): comparing chained keys page by page decides exactly what
``_key_match_paged`` decides on the page tuples. ``now`` is not used: SGLang's
``time.monotonic()`` becomes a counter of cache operations. Capacity is the token
pool (``max_total_num_tokens``); a request that does not fit would wait in SGLang,
here it is admitted over capacity. Not modelled: ``extra_key`` namespaces,
chunked-prefill inserts (``cache_unfinished_req``), LFU/SLRU/priority policies,
HiCache, Mamba/SWA radix variants, EAGLE bigram keys.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from itertools import count
from typing import ClassVar

import numpy as np

from prefixscope.engines.base import Admission, BaseEngine, Lookup, Units, resolve_capacity


class _Node:
    """A radix tree node: a run of units, its children by their first unit."""

    __slots__ = ("key", "children", "parent", "tick", "lock", "uid", "alive")

    def __init__(self, key: np.ndarray, parent: _Node | None, tick: int, uid: int) -> None:
        self.key = key  # the units this node adds to its parent's prefix
        self.children: dict[int, _Node] = {}  # by first unit of the child's key
        self.parent = parent
        self.tick = tick  # last_access_time
        self.lock = 0  # lock_ref: running requests using this node
        self.uid = uid  # creation order, breaks heap ties deterministically
        self.alive = True  # False once evicted


def _match_len(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the common prefix of two unit arrays."""
    k = min(len(a), len(b))
    eq = a[:k] == b[:k]
    return k if eq.all() else int(eq.argmin())


class SglangEngine(BaseEngine):
    """SGLang's radix tree with LRU leaf eviction (see the module docstring)."""

    name: ClassVar[str] = "sglang"

    def __init__(self, *, page_size: int = 1, capacity_tokens: int | None = None,
                 capacity_blocks: int | None = None, cache_output: bool = True) -> None:
        """Args:
            page_size: tokens per page (SGLang's default 1; read ``--page-size``).
            capacity_tokens: KV slots of the token pool; None = unlimited.
            capacity_blocks: the same in pages.
            cache_output: insert the output tokens too when a request is released
                with its `sequence` (SGLang does; turn it off when the logged output
                is not what the next turn re-renders).
        """
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        self.unit = page_size
        pages = resolve_capacity(page_size, capacity_blocks, capacity_tokens)
        self.capacity_tokens = None if pages is None else pages * page_size
        self.cache_output = cache_output
        self._uids = count(1)
        self._clock = count(1)
        self.root = _Node(np.empty(0, dtype=np.int64), None, 0, 0)
        self.root.lock = 1  # never evictable, as SGLang's reset() sets it
        self.tree_tokens = 0  # tokens held by the tree
        self.inflight_tokens = 0  # slots held by running requests outside the tree
        self._heap: list[tuple[int, int, _Node]] = []  # lazy: stale entries skipped
        self._nodes = 1

    def units(self, token_ids: Sequence[int] | np.ndarray) -> Units:
        if self.unit == 1:
            return Units.tokens(token_ids)
        return Units.chain(token_ids, self.unit)

    def _check(self, units: Units) -> None:
        if units.unit != self.unit:
            raise ValueError(f"sglang: units of {units.unit} tokens given to an engine with "
                             f"page_size {self.unit}")

    # -- tree ------------------------------------------------------------------------------

    def _walk(self, query: np.ndarray) -> int:
        """Units of `query` the tree holds (pure: no touch, no split)."""
        node, pos, n = self.root, 0, len(query)
        while pos < n:
            child = node.children.get(int(query[pos]))
            if child is None:
                break
            m = _match_len(child.key, query[pos:])
            pos += m
            if m < len(child.key):
                break
            node = child
        return pos

    def _touch(self, node: _Node, tick: int) -> None:
        node.tick = tick
        if not node.children and node.lock == 0:
            heapq.heappush(self._heap, (tick, node.uid, node))

    def _split(self, child: _Node, m: int, tick: int) -> _Node:
        """``_split_node``: `child` keeps its tail; a new parent takes its first `m` units."""
        parent = child.parent
        assert parent is not None
        new = _Node(child.key[:m], parent, tick, next(self._uids))
        new.lock = child.lock
        parent.children[int(child.key[0])] = new
        child.key = child.key[m:]
        child.parent = new
        new.children[int(child.key[0])] = child
        self._nodes += 1
        return new

    def _descend(self, query: np.ndarray, tick: int) -> tuple[int, _Node]:
        """Walk `query` touching and splitting as match_prefix and insert do."""
        node, pos, n = self.root, 0, len(query)
        node.tick = tick
        while pos < n:
            child = node.children.get(int(query[pos]))
            if child is None:
                break
            self._touch(child, tick)
            m = _match_len(child.key, query[pos:])
            pos += m
            if m < len(child.key):
                node = self._split(child, m, tick)
                break
            node = child
        return pos, node

    def _insert(self, query: np.ndarray, tick: int) -> int:
        """``_insert_helper``: tokens newly added to the tree."""
        pos, node = self._descend(query, tick)
        if pos == len(query):
            return 0
        leaf = _Node(query[pos:], node, tick, next(self._uids))
        node.children[int(query[pos])] = leaf
        self._nodes += 1
        self._touch(leaf, tick)
        return (len(query) - pos) * self.unit

    def _lock(self, node: _Node, delta: int) -> None:
        while node is not self.root:
            node.lock += delta
            if node.lock == 0 and not node.children:
                heapq.heappush(self._heap, (node.tick, node.uid, node))
            parent = node.parent
            assert parent is not None
            node = parent

    def evict(self, num_tokens: int) -> int:
        """``evict``: free LRU unlocked leaves until `num_tokens` are freed; returns freed."""
        freed = 0
        heap = self._heap
        while freed < num_tokens and heap:
            tick, _, node = heapq.heappop(heap)
            if not node.alive or node.children or node.lock or node.tick != tick:
                continue  # stale entry
            parent = node.parent
            assert parent is not None
            del parent.children[int(node.key[0])]
            node.alive = False
            self._nodes -= 1
            size = len(node.key) * self.unit
            self.tree_tokens -= size
            freed += size
            if parent is not self.root and not parent.children and parent.lock == 0:
                heapq.heappush(heap, (parent.tick, parent.uid, parent))
        if len(heap) > 4 * self._nodes + 1024:
            self._compact()
        return freed

    def _compact(self) -> None:
        live: list[tuple[int, int, _Node]] = []
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            if node.children:
                stack.extend(node.children.values())
            elif node.lock == 0:
                live.append((node.tick, node.uid, node))
        heapq.heapify(live)
        self._heap = live

    def _alloc(self, need: int, *, shortfall_only: bool) -> None:
        if self.capacity_tokens is None or need <= 0:
            return
        free = self.capacity_tokens - self.tree_tokens - self.inflight_tokens
        if free < need:
            self.evict(need - free if shortfall_only else need)

    # -- request life cycle ----------------------------------------------------------------

    def _max_prefix(self, prompt: Units) -> int:
        return min(prompt.n_full, max(prompt.n_tokens - 1, 0) // self.unit)

    def lookup(self, prompt: Units, *, now: float | None = None) -> Lookup:
        self._check(prompt)
        matched = self._walk(prompt.keys[: prompt.n_full])
        return Lookup(min(matched, self._max_prefix(prompt)) * self.unit, matched, self.unit)

    def _slots(self, n_tokens: int) -> int:
        return -(-n_tokens // self.unit) * self.unit

    def admit(self, prompt: Units, *, now: float | None = None) -> Admission:
        self._check(prompt)
        matched = self._walk(prompt.keys[: prompt.n_full])
        hit, last = self._descend(prompt.keys[: self._max_prefix(prompt)], next(self._clock))
        self._lock(last, +1)
        hit_tokens = hit * self.unit
        extend = prompt.n_tokens - hit_tokens
        self._alloc(extend + (self.unit if self.unit > 1 else 0), shortfall_only=False)
        slots = self._slots(prompt.n_tokens) - hit_tokens
        self.inflight_tokens += slots
        return Admission(Lookup(hit_tokens, matched, self.unit), prompt, handle=[last, slots])

    def release(self, admission: Admission, *, sequence: Units | None = None,
                now: float | None = None) -> None:
        admission.finish()
        last, slots = admission.handle
        prompt = admission.prompt
        keys = prompt.keys[: prompt.n_full]
        if sequence is not None and sequence.n_tokens > prompt.n_tokens:
            self._check(sequence)
            committed = sequence.n_tokens - 1  # the last sampled token has no KV
            grow = self._slots(committed) - self._slots(prompt.n_tokens)
            self._alloc(grow, shortfall_only=True)
            self.inflight_tokens += max(grow, 0)
            slots += max(grow, 0)
            if self.cache_output:
                keys = sequence.keys[: min(sequence.n_full, committed // self.unit)]
        self.tree_tokens += self._insert(keys, next(self._clock))
        self.inflight_tokens -= slots
        self._lock(last, -1)

    # -- inspection ------------------------------------------------------------------------

    def leaves(self) -> list[tuple[int, ...]]:
        """Each leaf's full prefix (as units), least recently used first."""
        found: list[tuple[int, int, tuple[int, ...]]] = []
        stack: list[tuple[_Node, tuple[int, ...]]] = [(self.root, ())]
        while stack:
            node, prefix = stack.pop()
            path = prefix + tuple(node.key.tolist())
            if node.children:
                stack.extend((child, path) for child in node.children.values())
            elif node is not self.root:
                found.append((node.tick, node.uid, path))
        return [path for _, _, path in sorted(found)]

    def __len__(self) -> int:
        """Tokens held by the tree."""
        return self.tree_tokens
