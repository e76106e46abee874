"""Every capacity's hits from one replay: Mattson's stack distances for the cache policies
that allow them (vLLM's block pool replayed one request after another; the block-trace
LRU), so a capacity fit or a capacity curve costs one pass over the log, not one replay
per capacity.

An LRU is a *stack algorithm* (Mattson et al., 1970): the cache of capacity C always
holds the C most recent entries of one recency list that does not depend on C, so an
entry hits at every capacity at least its *depth* in that list. One replay that keeps the
list and reads each request's depths gives its hits at every capacity.

vLLM's pool is such a list once two of its rules are written into it (the proof is in
docs/simulate.md, "Every capacity in one pass"):

* **the last-token rule**: a request never hits its block ``h_max = (L - 1) // bs``;
  that block (and every later one: the partial block, the output's) is always allocated
  anew, so it enters the list as a new entry and an earlier copy of the same key stays
  where it is (vLLM keeps duplicates). Every copy occupies a slot; a key hits while its
  shallowest copy is within the capacity.
* **hashless blocks reused first**: a request's partial last block holds a slot while the
  request runs and is then free, so after a request with one the pool holds one entry
  less: ``cutoff(C) = C - 1`` for ``C >= blocks of that request``, else ``C``.

What it cannot follow: vLLM touches the *first-inserted* surviving copy of a duplicated
key. The list moves the first-inserted copy; at a capacity that has evicted it but holds
a later copy, vLLM touches that later one, and from that request on the list no longer
describes that capacity. Such capacities are recorded (`SweepResult.tainted`) and the
caller replays them one by one. They need a block-aligned prompt sent again in full,
then a hit on it while only the newer copy survives: a few capacities, rarely.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from prefixscope.engines.base import Units

_SHIFT = 8  # timestamps per counted block of `_Recency` (256)


class _Recency:
    """The recency list as timestamps (a newer entry has a larger one): the depth of a live
    entry (1 = the most recent) is the number of live entries at or after its timestamp.
    A bitmap of live timestamps and a count per 256 of them answer a request's depths in
    a few numpy calls."""

    def __init__(self) -> None:
        self._live = np.zeros(1 << 16, dtype=np.uint8)
        self._counts = np.zeros(len(self._live) >> _SHIFT, dtype=np.int64)
        self.next = 0  # the next timestamp

    def depths(self, ts: np.ndarray) -> np.ndarray:
        """Depth of each live entry of timestamps `ts` (int64)."""
        if not len(ts):
            return np.zeros(0, dtype=np.int64)
        block = ts >> _SHIFT
        low, high = int(block.min()), int(block.max())
        # Counted from `low` on, not from the first timestamp: every live entry at or after
        # one of `ts` is in a counted block from `low` to the newest one's, so a depth is
        # those blocks' live entries less the ones before it among them. (A request's hit
        # keys were stamped by recent requests: ~190 counted blocks at 1 GiB of raw
        # captures, against ~9,700 from the first.)
        counts = self._counts[low:((self.next - 1) >> _SHIFT) + 1]
        from_low = np.cumsum(counts)
        before = from_low - counts  # live entries of the blocks from `low` to each one's
        # the counted blocks `ts` falls in, ascending, and each one's row among them:
        # `np.unique(block, return_inverse=True)` without its sort (the blocks are small
        # integers, a request's within the span its cumulative counts above read anyway)
        block -= low
        present = np.zeros(high - low + 1, dtype=bool)
        present[block] = True
        rows = np.flatnonzero(present) + low
        inverse = (np.cumsum(present) - 1)[block]
        upto = np.cumsum(self._live.reshape(-1, 1 << _SHIFT)[rows], axis=1, dtype=np.int32)
        at_or_before = before[block] + upto[inverse, ts & ((1 << _SHIFT) - 1)]
        return int(from_low[-1]) - at_or_before + 1

    def remove(self, ts: np.ndarray) -> None:
        """Drop the live entries of (distinct) timestamps `ts`."""
        self._live[ts] = 0
        np.add.at(self._counts, ts >> _SHIFT, -1)

    def push(self, n: int) -> int:
        """`n` new entries, the newest last; returns the first one's timestamp."""
        start, end = self.next, self.next + n
        if end > len(self._live):
            self._live = _grown(self._live, end)
            self._counts = _grown(self._counts, len(self._live) >> _SHIFT)
        if n:
            self._live[start:end] = 1
            first, last = start >> _SHIFT, (end - 1) >> _SHIFT
            self._counts[first: last + 1] += 1 << _SHIFT  # less the first's and last's ends
            self._counts[first] -= start - (first << _SHIFT)
            self._counts[last] -= ((last + 1) << _SHIFT) - end
        self.next = end
        return start


def _grown(array: np.ndarray, size: int) -> np.ndarray:
    """`array` zero-padded to `size` or more, its length doubled as often as needed
    (itself when long enough)."""
    length = len(array)
    if length >= size:
        return array
    while length < size:
        length *= 2
    out = np.zeros(length, dtype=array.dtype)
    out[: len(array)] = array
    return out


@dataclass(frozen=True, slots=True, eq=False)
class SweepResult:
    """Each request's hit at every capacity, from one `VllmSweep` / `BlocktraceSweep`.

    Request r's hit in units at capacity C is the number of its depths ``<= cutoff_r(C)``,
    where ``cutoff_r(C) = C - 1`` if the request before it freed a hashless block and C
    held that request's blocks (``prev_free[r] and C >= prev_blocks[r]``), else C. A
    request's depths increase; they are kept as runs of consecutive values: run p starts
    at depth index ``run_index[p]`` with value ``run_value[p]`` and stops before index
    ``run_stop[p]``; ``runs[r]:runs[r + 1]`` are request r's runs."""

    unit: int
    run_value: np.ndarray  # int64
    run_index: np.ndarray  # int64
    run_stop: np.ndarray  # int64
    runs: np.ndarray  # int64, one more than requests
    depths: np.ndarray  # int64 per request: its hit in units with unlimited capacity
    prev_blocks: np.ndarray  # int64 per request
    prev_free: np.ndarray  # bool per request
    n_tokens: np.ndarray  # int64 per request
    cap_at_tokens: bool  # a hit is at most the request's tokens (block traces)
    tainted: tuple[tuple[int, int, int], ...] = ()  # (lo, hi, request): capacities [lo, hi)
    exact: bool = True  # False: a request the sweep cannot follow (replay every capacity)
    limited: bool = True  # False: made for the unlimited capacity alone (`VllmSweep`'s)

    def __len__(self) -> int:
        return len(self.n_tokens)

    def follows(self, capacity_units: int | None) -> bool:
        """Whether `hits` is this capacity's replay exactly (else replay it)."""
        if not self.limited:
            return capacity_units is None
        if not self.exact:
            return False
        return capacity_units is None or not any(
            lo <= capacity_units < hi for lo, hi, _ in self.tainted)

    def hits(self, capacity_units: int | None) -> np.ndarray:
        """Each request's hit in units at capacity `capacity_units` (None: unlimited)."""
        if capacity_units is None or not len(self.run_value):
            return self.depths.copy() if capacity_units is None else np.zeros_like(self.depths)
        n = len(self.depths)
        cutoff = capacity_units - (self.prev_free & (capacity_units >= self.prev_blocks))
        owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(self.runs))
        # request r's runs and cutoff are shifted by r * span: one search for all of them
        span = max(int(self.run_value.max()), capacity_units) + 2
        at = np.searchsorted(self.run_value + owner * span,
                             np.arange(n, dtype=np.int64) * span + cutoff, side="right") - 1
        mine = at >= self.runs[:-1]
        at = np.maximum(at, 0)
        within = np.minimum(cutoff - self.run_value[at] + 1,
                            self.run_stop[at] - self.run_index[at])
        return np.where(mine, self.run_index[at] + within, 0)

    def cached_tokens(self, capacity_units: int | None) -> list[int]:
        """Each request's cached tokens at capacity `capacity_units` (see `hits`)."""
        tokens = self.hits(capacity_units) * self.unit
        if self.cap_at_tokens:
            tokens = np.minimum(tokens, self.n_tokens)
        return tokens.tolist()


class _Sweep:
    """What the sweeps share: the recency list and each request's depths, as runs."""

    unit: int
    cap_at_tokens: ClassVar[bool] = False

    def __init__(self) -> None:
        self._stack = _Recency()
        self._values: list[np.ndarray] = []
        self._starts: list[np.ndarray] = []
        self._stops: list[np.ndarray] = []
        self._runs = [0]
        self._pending: list[np.ndarray] = []  # requests' depths `_record`ed, not yet runs
        self._pending_size = 0
        self._depths: list[int] = []
        self._prev_blocks: list[int] = []
        self._prev_free: list[bool] = []
        self._n_tokens: list[int] = []
        self._tainted: list[tuple[int, int, int]] = []
        self._exact = True
        self._limited = True

    def _record(self, depth: np.ndarray, n_tokens: int, prev_blocks: int = 0,
                prev_free: bool = False) -> None:
        """The next request's depths (int64), cut into runs of consecutive
        values with the pending ones (`_run_pending`) once enough are pending."""
        self._pending.append(depth)
        self._pending_size += len(depth)
        if self._pending_size >= _PENDING_DEPTHS:
            self._run_pending()
        self._depths.append(len(depth))
        self._prev_blocks.append(prev_blocks)
        self._prev_free.append(prev_free)
        self._n_tokens.append(n_tokens)

    def _run_pending(self) -> None:
        """The pending requests' depths as runs, all in a few numpy calls: a run starts at
        each request's first depth and wherever a depth is not the one before it plus
        one -- the runs each request's own depths make on their own."""
        parts, self._pending, self._pending_size = self._pending, [], 0
        if not parts:
            return
        lengths = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
        ends = np.cumsum(lengths)
        begins = ends - lengths
        depth = np.concatenate(parts)
        starts = np.ones(len(depth), dtype=bool)
        np.not_equal(np.diff(depth), 1, out=starts[1:])
        starts[begins[lengths > 0]] = True
        so_far = np.concatenate(([0], np.cumsum(starts)))
        per = so_far[ends] - so_far[begins]  # each request's runs
        at = np.flatnonzero(starts)
        owner = np.repeat(np.arange(len(parts)), per)
        first = begins[owner]
        self._values.append(depth[at])
        self._starts.append(at - first)
        self._stops.append(np.append(at[1:], len(depth)) - first)  # (a last one: the next's start)
        self._runs += (self._runs[-1] + np.cumsum(per)).tolist()

    def _record_hit(self, hit: int, n_tokens: int) -> None:
        """A request of an unlimited-only sweep: its hit in units, no depths."""
        self._run_pending()
        self._runs.append(self._runs[-1])
        self._depths.append(hit)
        self._prev_blocks.append(0)
        self._prev_free.append(False)
        self._n_tokens.append(n_tokens)

    def result(self) -> SweepResult:
        self._run_pending()

        def cat(parts: list[np.ndarray]) -> np.ndarray:
            return (np.concatenate(parts).astype(np.int64) if parts
                    else np.zeros(0, dtype=np.int64))

        return SweepResult(
            self.unit, cat(self._values), cat(self._starts), cat(self._stops),
            np.array(self._runs, dtype=np.int64), np.array(self._depths, dtype=np.int64),
            np.array(self._prev_blocks, dtype=np.int64), np.array(self._prev_free, dtype=bool),
            np.array(self._n_tokens, dtype=np.int64), self.cap_at_tokens,
            tuple(self._tainted), self._exact, self._limited)


# Depths `_Sweep._record` holds before cutting them into runs: a request's runs made one
# by one cost a dozen numpy calls each, the same for a thousand requests at once.
_PENDING_DEPTHS = 1 << 18


@dataclass(frozen=True, slots=True)
class _Staged:
    """One request `VllmSweep.step` was given, as its replay needs it: which kept prompt's
    first `shared` keys are its own (`base`, -1: none), how many keys after them it lists
    (`tail`) and output keys it caches (`extra`: those keys are in `VllmSweep._listed`),
    and its sizes."""

    base: int
    shared: int
    tail: int
    extra: int
    n_full: int
    n_tokens: int
    blocks: int  # blocks it allocates (prompt and output)


def _runs(listed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(an order that sorts `listed`, where a run of equal keys starts in that order): the
    sort of ``np.unique(listed, return_index=True, return_inverse=True)``, not stable.

    np.unique sorts stably so that each run of a key starts at its first listing; its
    indices and ranks follow from the runs alone, whatever the order within each run
    (`_first_of_runs`; a key's rank is its run's). numpy's unstable sort of 64-bit keys is
    vectorized: on report's 2M listed keys at 1 GiB ~4x faster than the stable one. The
    sorted keys are compared a slice at a time, never held whole beside `listed` and the
    order."""
    order = np.argsort(listed)
    n = len(listed)
    new = np.empty(n, dtype=bool)
    new[:1] = True
    for start in range(1, n, _SLICE):
        stop = min(start + _SLICE, n)
        ordered = listed[order[start - 1:stop]]
        np.not_equal(ordered[1:], ordered[:-1], out=new[start:stop])
    return order, new


_SLICE = 1 << 18  # listings taken at a time (`_runs`, `_ranks`, `_gathered`)


def _index_type(n: int) -> type[np.signedinteger]:
    """The type of indices (or ranks) below `n` held per listing: int32 where they fit,
    half the size of numpy's own (report's base sweep lists ~2M keys a GiB)."""
    return np.int32 if n < 1 << 31 else np.intp


def _ranks(order: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Each listing's key's rank among the distinct keys, ascending (np.unique's
    ``return_inverse``), from `_runs`: its run's, the runs counted a slice at a time (no
    array of all the ranks in sorted order beside the result); in `_index_type`."""
    kind = _index_type(len(order))
    out = np.empty(len(order), dtype=kind)
    done = 0  # runs started before the slice
    for start in range(0, len(order), _SLICE):
        stop = min(start + _SLICE, len(order))
        rank = np.cumsum(new[start:stop], dtype=kind)
        rank += done - 1
        out[order[start:stop]] = rank
        done = int(rank[-1]) + 1
    return out


def _gathered(values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """``values[at]`` a slice of `at` at a time: numpy indexes through an intp copy of
    an index array of another type, which would be as large as `at` twice over."""
    out = np.empty(len(at), dtype=values.dtype)
    for start in range(0, len(at), _SLICE):
        out[start:start + _SLICE] = values[at[start:start + _SLICE]]
    return out


def _first_of_runs(order: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Where each distinct key is listed first, the keys ascending (np.unique's
    ``return_index``), from `_runs`: the least index in each run, a run holding every
    listing of its key."""
    if not len(order):
        return order
    return np.minimum.reduceat(order, np.flatnonzero(new))


class VllmSweep(_Sweep):
    """`VllmEngine` replayed one request after another (its `step`), at every capacity at
    once (see the module docstring).

    The requests are staged as they come and replayed in `result`: each distinct key gets
    a slot, numbered once for the whole log by one sort of every key a request does not
    take from its base (`_runs`: a key was seen before a request exactly when it first
    occurs among the earlier requests' keys, as every key a request holds is one it or an
    earlier request listed), and its entry's timestamp is an array element: a request's
    hit blocks are re-stamped in one numpy assignment. A prompt whose first keys the caller
    cut from an earlier prompt's (`prefix`: an agent's next turn extends its last one)
    takes those keys' slots from that prompt (stepped with `keep`), so only its own keys
    are sorted."""

    name: ClassVar[str] = "vllm"

    def __init__(self, *, block_size: int = 16, cache_output: bool = True,
                 unlimited: bool = False) -> None:
        """`unlimited`: only the unlimited capacity's hits (`VllmUnlimitedEngine`'s, the
        ideal replay): each request's leading keys listed before it, capped by the
        last-token rule -- no recency list, no slots kept."""
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        super().__init__()
        self.unit = block_size
        self.cache_output = cache_output
        self._limited = not unlimited
        self._staged: list[_Staged] = []
        self._listed: list[np.ndarray] = []  # each staged request's tail and extra keys
        # id(keys) of a prompt stepped with `keep` -> (its keys, its staged index)
        self._kept: dict[int, tuple[np.ndarray, int]] = {}
        self._done: SweepResult | None = None

    def step(self, prompt: Units, *, sequence: Units | None = None,
             prefix: tuple[Units, int] | None = None, keep: bool = False) -> None:
        """One request, as `VllmEngine.step(prompt, sequence=sequence)`. `prefix`: (an
        earlier prompt stepped with `keep` and not `forget`-ten, k): `prompt`'s first k
        keys are probably that prompt's first k (a hint, checked: the result is the same
        without it)."""
        if self._done is not None:
            raise RuntimeError("step after result")
        bs = self.unit
        n_full, n_tokens = prompt.n_full, prompt.n_tokens
        # (the kept keys hold their id: no other live array has it)
        known = self._kept.get(id(prefix[0].keys)) if prefix is not None else None
        base, shared = -1, 0
        if prefix is not None and known is not None:
            k = min(prefix[1], self._staged[known[1]].n_full, n_full)
            if k and np.array_equal(prompt.keys[:k], known[0][:k]):  # a hint, checked
                base, shared = known[1], k
        extra = _NO_KEYS
        if sequence is not None and sequence.n_tokens > n_tokens:
            computed = sequence.n_tokens - 1  # the last sampled token has no KV
            blocks = max(-(-n_tokens // bs), -(-computed // bs))
            if self.cache_output:
                extra = np.array(sequence.keys[n_full: computed // bs], dtype=np.uint64)
        else:
            blocks = -(-n_tokens // bs)
        if keep:
            self._kept[id(prompt.keys)] = (prompt.keys, len(self._staged))
        tail = np.array(prompt.keys[shared:n_full], dtype=np.uint64)
        self._listed += (tail, extra)
        self._staged.append(_Staged(base, shared, len(tail), len(extra), n_full, n_tokens,
                                    blocks))

    def forget(self, prompt: Units) -> None:
        """Drop what `step(prompt, keep=True)` kept (no later prompt extends it)."""
        self._kept.pop(id(prompt.keys), None)

    def result(self) -> SweepResult:
        if self._done is None:
            self._replay()
            self._done = super().result()
        return self._done

    def _replay_unlimited(self, staged: list[_Staged], offsets: np.ndarray,
                          first: np.ndarray) -> None:
        """`_replay` at the unlimited capacity alone: every key listed is cached for good,
        so a request hits its keys up to the first one no earlier request listed (and its
        shared start), never past its last-token block.

        That first key is the first of its tail listed nowhere before (its first listing
        in the whole log): each key before it in the tail was listed before it, and not
        first by this request -- the tail's first listing of it would be an earlier first
        listing in this tail -- so by an earlier request; and the key at it is listed by no
        earlier one. Only where each key is listed first is needed (`first`: is each
        listing its key's first), no slot numbers."""
        bs = self.unit
        for index, r in enumerate(staged):
            at, tail = int(offsets[index]), r.tail
            new = np.flatnonzero(first[at: at + tail])
            cut = int(new[0]) if len(new) else tail
            h_max = (r.n_tokens - 1) // bs if r.n_tokens else 0
            self._record_hit(min(r.shared + cut, h_max), r.n_tokens)

    def _replay(self) -> None:
        """Every staged request, in order (`VllmEngine.step`'s rules, module docstring)."""
        staged, self._staged, self._kept = self._staged, [], {}
        lengths = np.array([r.tail + r.extra for r in staged], dtype=np.int64)
        offsets = np.concatenate(([0], np.cumsum(lengths)))
        # Each array made here is held only while the next needs it (report's base sweep
        # lists ~2M keys a GiB of raw captures).
        listed = np.concatenate(self._listed) if self._listed else _NO_KEYS
        self._listed = []
        order, new = _runs(listed)
        del listed
        if not self._limited:
            first = np.zeros(len(order), dtype=bool)
            first[_first_of_runs(order, new)] = True
            del order, new
            self._replay_unlimited(staged, offsets, first)
            return
        # slot of each listed key, and where that key is listed first
        first = _first_of_runs(order, new).astype(_index_type(len(order)))
        slot_of = _ranks(order, new)  # each listing's key's rank
        del order, new
        first_at = _gathered(first, slot_of)
        del first
        self._stamp = np.zeros(int(slot_of.max()) + 1 if len(slot_of) else 0, dtype=np.int64)
        self._copied = np.zeros(len(self._stamp), dtype=bool)
        self._copies: dict[int, list[int]] = {}  # slot -> timestamps of its later copies
        uses = np.bincount([r.base for r in staged if r.base >= 0], minlength=len(staged))
        kept: dict[int, np.ndarray] = {}  # staged index -> slots of its full blocks
        self._blocks, self._free = 0, False  # blocks the previous request held, one hashless
        bs = self.unit
        for index, r in enumerate(staged):
            at, tail = int(offsets[index]), r.tail
            seen = first_at[at: at + tail] < at  # listed by an earlier request
            cut = int(seen.argmin()) if tail else 0  # the first key not seen (or all are)
            if cut < tail and seen[cut]:
                cut = tail
            looked = slot_of[at: at + cut].astype(np.intp)  # (indexes below: once)
            slots = looked if r.base < 0 else np.concatenate((kept[r.base][:r.shared], looked))
            if r.base >= 0:
                uses[r.base] -= 1
                if not uses[r.base]:
                    del kept[r.base]
            present = r.shared + cut  # keys[:present] seen, keys[present] not
            h_max = (r.n_tokens - 1) // bs if r.n_tokens else 0
            lim = min(present, h_max)  # the blocks that may hit: moved in the list, not copied
            canon = self._stamp[slots[:lim]]
            depth = self._stack.depths(canon)
            if lim and self._copies:
                depth = self._shallowest(slots[:lim], depth)
            self._record(depth, r.n_tokens, self._blocks, self._free)
            if not r.blocks:
                continue  # nothing allocated, nothing freed: the pool is as it was
            n = r.n_full + r.extra
            if r.blocks - n > 1:
                self._exact = False  # more than one hashless block: outside this model
            start = self._stack.push(n)
            new = np.arange(start + n - 1, start - 1, -1, dtype=np.int64)  # the head newest
            if lim:
                self._stack.remove(canon)
                self._stamp[slots[:lim]] = new[:lim]
            # The rest is allocated anew: a key seen before (the last-token rule's, and any
            # after a gap) gets a copy, a new one its slot.
            for j, slot in enumerate(slots[lim:].tolist()):
                self._copy(slot, int(new[lim + j]))
            where = np.arange(at + cut, int(offsets[index + 1]))
            made = slot_of[where].astype(np.intp)
            fresh = first_at[where] == where  # listed here first
            if fresh.all():
                self._stamp[made] = new[present:]
            else:
                for j in range(len(made)):
                    if fresh[j]:
                        self._stamp[made[j]] = new[present + j]
                    else:
                        self._copy(int(made[j]), int(new[present + j]))
            if uses[index]:
                kept[index] = np.concatenate((slots, made[: r.n_full - present]))
            self._blocks, self._free = r.blocks, r.blocks > n

    def _copy(self, slot: int, stamp: int) -> None:
        self._copies.setdefault(slot, []).append(stamp)
        self._copied[slot] = True

    def _shallowest(self, slots: np.ndarray, depth: np.ndarray) -> np.ndarray:
        """The depths a request hits at when some of its hit keys have several copies: each
        key's shallowest copy. A capacity that holds a later copy but not the first-inserted
        one is tainted: vLLM touches that later copy, the list moved the first."""
        shallow = depth.copy()
        dup = np.flatnonzero(self._copied[slots]).tolist()
        for j in dup:
            later = self._stack.depths(np.array(self._copies[int(slots[j])], dtype=np.int64))
            shallow[j] = min(int(shallow[j]), int(later.min()))
        reach = np.maximum.accumulate(shallow)
        request = len(self._n_tokens)
        for j in dup:
            if reach[j] < depth[j]:  # cutoffs in [reach, depth): only a later copy is held
                self._tainted.append((self._capacity(int(reach[j])),
                                      self._capacity(int(depth[j])), request))
        return reach

    def _capacity(self, cutoff: int) -> int:
        """The smallest capacity whose cutoff, for the request being swept, is `cutoff`."""
        return cutoff + int(self._free and cutoff >= self._blocks)


_NO_KEYS = np.zeros(0, dtype=np.uint64)


class BlocktraceSweep(_Sweep):
    """`BlocktraceEngine` (a plain LRU of trace ids, each request touched tail first) at
    every capacity at once: a textbook stack algorithm."""

    name: ClassVar[str] = "blocktrace"
    cap_at_tokens: ClassVar[bool] = True

    def __init__(self, *, block_size: int = 512, cache_output: bool = False,
                 unlimited: bool = False) -> None:
        """`unlimited`: accepted as `VllmSweep` takes it; every capacity is swept anyway."""
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        super().__init__()
        self.unit = block_size
        self._ts: dict[int, int] = {}  # id -> timestamp of its entry

    def step(self, prompt: Units, *, sequence: Units | None = None,
             prefix: tuple[Units, int] | None = None, keep: bool = False) -> None:
        """One request, as `BlocktraceEngine.step(prompt)` (`prefix`, `keep`: no use here)."""
        keys = prompt.keys.tolist()
        found = list(map(self._ts.get, keys))
        try:
            present = found.index(None)
        except ValueError:
            present = len(found)
        depth = self._stack.depths(np.array(found[:present], dtype=np.int64))
        self._record(np.maximum.accumulate(depth) if len(depth) else depth, prompt.n_tokens)
        # touched tail first: the list orders them by their first place, the head newest
        order = list(dict.fromkeys(keys))
        old = [ts for ts in map(self._ts.get, order) if ts is not None]
        if old:
            self._stack.remove(np.array(old, dtype=np.int64))
        n = len(order)
        start = self._stack.push(n)
        self._ts.update(zip(order, range(start + n - 1, start - 1, -1), strict=True))


    def forget(self, prompt: Units) -> None:
        """Nothing is kept (`VllmSweep.forget`)."""


Sweep = VllmSweep | BlocktraceSweep

