"""What every cache model shares: the unit keys a request is cut into, the lookup
result, and the engine interface `simulate` replays requests through.

An engine never sees text. A request reaches it as `Units`: one key per unit of
``unit`` tokens (a vLLM block, an SGLang page, an LMCache chunk, a 512-token
block of a Mooncake trace), plus the request's token count. Keys come in two kinds:

* **chained** (``chained=True``): key ``i`` identifies the whole prefix
  ``tokens[: (i + 1) * unit]``, as vLLM's ``hash_block_tokens`` chains each block
  on its parent. `block_keys` computes them over full units only; block-hash
  traces (Mooncake ``hash_ids``) are chained by their publisher. Any chained hash
  gives the same hit/miss decisions as vLLM's sha256 chain, so the seed and hash
  function are free (cache-semantics.md A.1).
* **raw** (``chained=False``, unit 1): the token ids themselves. Only engines
  that keep a tree (SGLang's radix cache, DeepSeek) can use them: the path
  supplies the prefix.
* **segments** (`Units.segments`): one chained key per content block (a tool, a
  system block, a message part) with its token end and the ``cache_control``
  breakpoints on it, for hosted APIs that cache at block boundaries (Anthropic).

Hash contract of `block_keys`: block ``i``'s key is ``key[i] = key[i-1] * P + c[i]``
(mod 2**64, P odd), where ``c[i]`` is splitmix64's finalizer of the block's tokens (as
int64) weighted by fixed odd 64-bit weights and summed, and ``key[-1]`` is a fixed seed,
or the xxh3_64 of the namespace (a LoRA name, a ``cache_salt``) when one is given; a
namespace on the first block separates the whole chain, as vLLM's salt does. A key
depends on its block and every block before it, as vLLM's chain does, and the whole
chain is a few array operations: ``key[i] = P**i * (key[-1] * P + sum over j <= i of
c[j] * P**-j)`` (P is invertible mod 2**64), a running sum, not a loop over blocks.

Engine life cycle of one request (vLLM's names in brackets)::

    lookup(prompt)            pure: what would hit now          [get_computed_blocks]
    admit(prompt)             lookup + pin hits + allocate      [allocate_slots]
      ... running: its units cannot be evicted ...
    release(admission, sequence=prompt+output)  cache + unpin   [free]
    step(prompt) = admit + release at once (sequential replay, the default)

``now`` (seconds) is taken by every method and used only by engines with a TTL
(the hosted APIs); ``now=None`` means no expiry. Give it always or never.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, ClassVar, Protocol, cast, runtime_checkable

import numpy as np
import xxhash

_MASK64 = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class Lookup:
    """What an engine reuses for one request."""

    cached_tokens: int  # prompt tokens served from the cache (the engine's own rounding)
    matched_units: int  # leading units of the prompt found cached, before the last-token cap
    unit: int  # tokens per unit
    written_tokens: int | None = None  # tokens the request writes, for engines that bill it


@dataclass(frozen=True, slots=True, eq=False)
class Units:
    """A token sequence as a cache engine sees it: one key per unit."""

    keys: np.ndarray  # uint64 (chained) or int64 token ids (raw); one per unit
    n_tokens: int  # tokens in the sequence; the last unit may be partial (traces)
    unit: int  # tokens per unit (1 for segments)
    chained: bool = True  # key i identifies tokens[: (i+1)*unit] on its own
    ends: np.ndarray | None = None  # segments only: token offset where unit i ends
    breakpoints: Mapping[int, float] = field(default_factory=dict)  # segment -> TTL (s) asked

    @property
    def n_full(self) -> int:
        """Number of keys that cover a full unit of tokens."""
        if self.ends is not None:
            return len(self.keys)
        return min(len(self.keys), self.n_tokens // self.unit)

    def end(self, i: int) -> int:
        """Tokens in the prefix that ends with unit `i`."""
        return int(self.ends[i]) if self.ends is not None else (i + 1) * self.unit

    def full_keys(self) -> list[int]:
        """Keys of the full units as Python ints (dict keys)."""
        return cast(list[int], self.keys[: self.n_full].tolist())

    @classmethod
    def chain(cls, token_ids: Sequence[int] | np.ndarray, unit: int, *,
              namespace: str | None = None, prefix_keys: np.ndarray | None = None,
              contents: tuple[int, np.ndarray] | None = None) -> Units:
        """Chained keys of the full units of `token_ids` (see `block_keys`)."""
        return cls(block_keys(token_ids, unit, namespace=namespace, prefix_keys=prefix_keys,
                              contents=contents),
                   len(token_ids), unit)

    @classmethod
    def tokens(cls, token_ids: Sequence[int] | np.ndarray) -> Units:
        """The token ids themselves, one unit each (raw keys, for tree engines)."""
        keys = np.array(token_ids, dtype=np.int64)
        keys.flags.writeable = False
        return cls(keys, len(keys), 1, chained=False)

    @classmethod
    def segments(cls, hashes: Sequence[int | str | bytes], ends: Sequence[int], *,
                 n_tokens: int | None = None,
                 breakpoints: Mapping[int, float] | None = None,
                 namespace: str | None = None) -> Units:
        """Variable-size units: one per content block (a tool, a system block, a message
        part), for hosted APIs that cache at block boundaries.

        Args:
            hashes: a content hash per block, in prompt order; they are chained here,
                so equal keys mean equal prefixes through that block.
            ends: the token offset where each block ends (non-decreasing).
            n_tokens: prompt length (default: the last end); tokens after the last
                block (template glue) belong to no unit.
            breakpoints: block index -> TTL in seconds of a ``cache_control``
                breakpoint on that block (Anthropic: 300 for "5m", 3600 for "1h").
            namespace: what the chain starts from (the model: a hosted API caches each
                model's prompts apart), as `block_keys`' namespace.
        """
        if len(hashes) != len(ends):
            raise ValueError("one end per segment hash")
        keys = np.empty(len(hashes), dtype=np.uint64)
        parent = xxhash.xxh3_64_intdigest(namespace.encode()) if namespace else 0
        for i, h in enumerate(hashes):
            data = h if isinstance(h, bytes) else str(h).encode()
            parent = xxhash.xxh3_64_intdigest(data, seed=parent)
            keys[i] = parent
        keys.flags.writeable = False
        ends_arr = np.array(ends, dtype=np.int64)
        ends_arr.flags.writeable = False
        if len(ends_arr) and (np.any(np.diff(ends_arr) < 0) or ends_arr[0] < 0):
            raise ValueError("segment ends must be non-decreasing offsets")
        total = int(ends_arr[-1]) if len(ends_arr) else 0
        return cls(keys, total if n_tokens is None else n_tokens, 1, ends=ends_arr,
                   breakpoints=dict(breakpoints or {}))

    @classmethod
    def blocks(cls, hash_ids: Sequence[int], n_tokens: int, unit: int) -> Units:
        """Prefix-chained block ids from a trace (Mooncake ``hash_ids``, 512 tokens each).

        The trace may list one id for a partial last block; `n_full` excludes it.
        """
        try:
            keys = np.array(hash_ids, dtype=np.int64).view(np.uint64)
        except OverflowError:
            keys = np.array([h & _MASK64 for h in hash_ids], dtype=np.uint64)
        keys.flags.writeable = False
        return cls(keys, n_tokens, unit)


def block_keys(token_ids: Sequence[int] | np.ndarray, block_size: int, *,
               namespace: str | None = None,
               prefix_keys: np.ndarray | None = None,
               contents: tuple[int, np.ndarray] | None = None) -> np.ndarray:
    """Chained 64-bit keys of the full blocks of `token_ids` (partial tail dropped; the
    hash contract in the module doc).

    Args:
        token_ids: the tokens of one sequence.
        block_size: tokens per block.
        namespace: mixed into the first block only (LoRA name, cache salt);
            because of chaining it separates every block.
        prefix_keys: the keys of this sequence's first ``len(prefix_keys)`` blocks,
            already known (another sequence with the same leading tokens, cut with the
            same size and namespace): they are copied and only the blocks after them
            hashed, chained on the last of them. The result is the same as without.
        contents: (lo, c): the content hashes of blocks ``lo, lo + 1, ...`` already
            known (`run_contents`: blocks another sequence has, read off its keys);
            those blocks' tokens are not hashed again. The result is the same as without.

    Returns:
        A read-only uint64 array of ``len(token_ids) // block_size`` keys.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    n = len(token_ids) // block_size
    start = 0 if prefix_keys is None else min(len(prefix_keys), n)
    out = np.empty(n, dtype=np.uint64)
    if start:
        assert prefix_keys is not None
        out[:start] = prefix_keys[:start]
        parent = int(prefix_keys[start - 1])
    else:
        parent = xxhash.xxh3_64_intdigest(namespace.encode()) if namespace else _ROOT
    m = n - start
    if m:
        lo = hi = n  # the blocks [lo, hi) whose contents are known
        if contents is not None:
            lo = min(max(contents[0], start), n)
            hi = max(min(contents[0] + len(contents[1]), n), lo)
        content = np.empty(m, dtype=np.uint64)
        content[:lo - start] = _contents(token_ids, block_size, start, lo)
        if hi > lo:
            assert contents is not None
            content[lo - start: hi - start] = contents[1][lo - contents[0]: hi - contents[0]]
        content[hi - start:] = _contents(token_ids, block_size, hi, n)
        up, down = _powers(m)
        out[start:] = np.cumsum(content * down[:m], dtype=np.uint64) * up[:m] + \
            np.uint64(parent) * up[1:m + 1]
    out.flags.writeable = False
    return out


def _contents(token_ids: Sequence[int] | np.ndarray, block_size: int, lo: int, hi: int
              ) -> np.ndarray:
    """c of blocks [lo, hi) of `token_ids` (the hash contract in the module doc)."""
    if hi <= lo:
        return np.zeros(0, dtype=np.uint64)
    tokens = token_ids[lo * block_size: hi * block_size]
    if isinstance(tokens, np.ndarray) and tokens.dtype.kind in "iu" and \
            len(tokens) >= _EINSUM_TOKENS:
        # The same sums mod 2**64 in one pass: each id cast to uint64 as it is read is its
        # int64 value's two's complement (sign-extended, as the view below makes it), and
        # a sum mod 2**64 does not depend on its order. numpy's integer `matmul` has no
        # BLAS and reads and writes its output at every product: 20-30% slower on 64k-128k
        # ids, an early-diverging prompt's blocks (a billing header's new hash).
        sums = np.einsum("ij,j->i", tokens.reshape(hi - lo, block_size), _weights(block_size),
                         dtype=np.uint64, casting="unsafe")
    else:
        sums = np.ascontiguousarray(tokens, dtype=np.int64).view(np.uint64).reshape(
            hi - lo, block_size) @ _weights(block_size)
    return _mixed(sums)


# Ids from which `_contents` sums with `einsum` (below it, its fixed cost of reading its
# subscripts is more than it saves)
_EINSUM_TOKENS = 2**15


def run_contents(base: Units, unit: int, resumed: tuple[int, int, int]
                 ) -> tuple[int, np.ndarray] | None:
    """The content hashes c (`block_keys`' `contents`) of a sequence's blocks that lie in
    a run of `base`'s tokens found again in it -- `resumed` (at, start, length): its
    tokens [at, at + length) are base's [start, start + length) -- read off base's keys
    (None: no such block, or base is not cut into plain chained blocks of `unit`).

    Why: block i of the sequence holds tokens [i * unit, (i + 1) * unit); inside the run
    (at <= i * unit, (i + 1) * unit <= at + length) and with the run shifted by whole
    blocks (start - at = d * unit) those are base's tokens of its block i + d, so the two
    blocks' c are equal (c is a function of a block's tokens alone). Base's keys give
    each of its c but the first: ``key[j] = key[j - 1] * P + c[j]``, so
    ``c[j] = key[j] - key[j - 1] * P`` (mod 2**64), for 1 <= j < base's full blocks."""
    at, start, length = resumed
    if not base.chained or base.ends is not None or base.unit != unit or \
            (start - at) % unit:
        return None
    d = (start - at) // unit
    lo = max(-(-at // unit), 1 - d)
    hi = min((at + length) // unit, base.n_full - d)
    if hi <= lo:
        return None
    keys = base.keys[lo + d - 1: hi + d]
    return lo, keys[1:] - keys[:-1] * np.uint64(_P)


_GOLDEN = 0x9E3779B97F4A7C15
_ROOT = 0x2545F4914F6CDD1D  # key[-1] without a namespace
_P = 0xD6E8FEB86659FD93  # odd: invertible mod 2**64
_P_INVERSE = pow(_P, -1, 1 << 64)


def _mixed(z: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer of each value (offset first, so 0 does not stay 0)."""
    z = z + np.uint64(_GOLDEN)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@cache
def _weights(block_size: int) -> np.ndarray:
    """A fixed odd 64-bit weight per position of a block."""
    return _mixed(np.arange(1, block_size + 1, dtype=np.uint64)) | np.uint64(1)


_POWERS: list[np.ndarray] = [np.ones(1, dtype=np.uint64), np.ones(1, dtype=np.uint64)]


def _powers(m: int) -> tuple[np.ndarray, np.ndarray]:
    """(P**0 .. P**m, P**0 .. P**-(m-1)) mod 2**64, kept for the longest chain so far."""
    if len(_POWERS[0]) <= m:
        size = max(m + 1, 2 * len(_POWERS[0]))
        one = np.ones(1, dtype=np.uint64)
        _POWERS[0] = np.concatenate((one, np.cumprod(np.full(size - 1, _P, dtype=np.uint64),
                                                     dtype=np.uint64)))
        _POWERS[1] = np.concatenate((one, np.cumprod(np.full(size - 1, _P_INVERSE,
                                                             dtype=np.uint64),
                                                     dtype=np.uint64)))
    return _POWERS[0], _POWERS[1]


class KeySet:
    """A growing set of 64-bit unit keys in about 8 bytes each, for caches that never
    evict (an unlimited replay of a GB log holds millions of distinct blocks: a Python
    dict spends ~100 bytes on each). Keys live in a sorted array; new ones wait in a
    small set, merged in when it grows past an eighth of the array."""

    _MIN_PENDING = 1 << 16

    def __init__(self, *, prefix_closed: bool = False) -> None:
        """`prefix_closed`: the caller only ever adds the rest of a chain of keys whose
        start is in the set already (`block_keys`: each key hashes its block chained on the
        key before it, so equal keys have equal keys before them), so a key is in the set
        only when every key before it in its chain is: `leading` then bisects."""
        self._sorted = np.empty(0, dtype=np.uint64)
        self._recent: set[int] = set()
        self.prefix_closed = prefix_closed

    def __len__(self) -> int:
        return len(self._sorted) + len(self._recent)

    def __contains__(self, key: int) -> bool:
        held = self._sorted
        if len(held):
            at = int(np.searchsorted(held, np.uint64(key)))
            if at < len(held) and int(held[at]) == key:
                return True
        return key in self._recent

    def leading(self, keys: np.ndarray) -> int:
        """How many of `keys` (uint64), from the first, are in the set."""
        n = len(keys)
        if not n:
            return 0
        if self.prefix_closed:  # keys[:m] are in the set exactly when keys[m - 1] is
            lo, hi = 0, n  # keys[:lo] are in the set; keys[hi] is not (or hi == n)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if int(keys[mid - 1]) in self:
                    lo = mid
                else:
                    hi = mid - 1
            return lo
        held = self._sorted
        if len(held):
            found = held[np.minimum(np.searchsorted(held, keys), len(held) - 1)] == keys
            missing = np.flatnonzero(~found)
        else:
            missing = np.arange(n)
        recent = self._recent
        # The first key in neither part; only keys the sorted part lacks are looked up.
        for at, key in zip(missing.tolist(), keys[missing].tolist(), strict=True):
            if key not in recent:
                return int(at)
        return n

    def add(self, keys: np.ndarray) -> None:
        """Add `keys` (uint64; some may be in the set already)."""
        held = self._sorted
        if len(held) and len(keys):  # the pending part holds no key of the sorted one
            keys = keys[held[np.minimum(np.searchsorted(held, keys), len(held) - 1)] != keys]
        self._recent.update(keys.tolist())
        if len(self._recent) > max(self._MIN_PENDING, len(self._sorted) >> 3):
            new = np.fromiter(self._recent, dtype=np.uint64, count=len(self._recent))
            new.sort()
            self._recent.clear()
            held = self._sorted
            at = np.searchsorted(held, new)
            if len(held):
                new_mask = held[np.minimum(at, len(held) - 1)] != new
                new, at = new[new_mask], at[new_mask]
            self._sorted = np.insert(held, at, new)


def leading_matches(keys: list[int], table: Any) -> int:
    """How many of `keys`, from the first, are in `table` (stops at the first miss)."""
    n = 0
    for key in keys:
        if key not in table:
            break
        n += 1
    return n


def resolve_capacity(unit: int, capacity_blocks: int | None,
                     capacity_tokens: int | None) -> int | None:
    """Capacity in units from blocks or tokens (at most one given); None = unlimited."""
    if capacity_blocks is not None and capacity_tokens is not None:
        raise ValueError("give capacity_blocks or capacity_tokens, not both")
    if capacity_tokens is not None:
        capacity_blocks = capacity_tokens // unit
    if capacity_blocks is not None and capacity_blocks < 0:
        raise ValueError(f"capacity must be >= 0, got {capacity_blocks}")
    return capacity_blocks


@dataclass(slots=True, eq=False)
class Admission:
    """A running request: its lookup and what the engine holds for it until release."""

    lookup: Lookup  # the hit it got at admission
    prompt: Units  # the admitted prompt
    handle: Any = field(default=None, repr=False)  # engine-private state (pinned blocks, ...)
    released: bool = False

    def finish(self) -> None:
        """Mark the request released (once: a second release is a caller's bug)."""
        if self.released:
            raise ValueError("request released twice")
        self.released = True


@runtime_checkable
class Engine(Protocol):
    """The interface `simulate` replays requests through."""

    name: ClassVar[str]
    unit: int  # tokens per unit

    def units(self, token_ids: Sequence[int] | np.ndarray) -> Units:
        """Cut a token sequence into this engine's units."""
        ...

    def units_extending(self, token_ids: Sequence[int] | np.ndarray, base: Units,
                        shared: int, resumed: tuple[int, int, int] | None = None) -> Units:
        """`units(token_ids)` when its first `shared` tokens are those `base` (this
        engine's units of another sequence) was cut from: chained keys reuse `base`'s.
        `resumed` (at, start, length): its tokens [at, at + length) are base's [start,
        start + length) too (`run_contents`)."""
        ...

    def lookup(self, prompt: Units, *, now: float | None = None) -> Lookup:
        """What `prompt` would reuse now; changes nothing."""
        ...

    def admit(self, prompt: Units, *, now: float | None = None) -> Admission:
        """Start a request: take its hit, pin what it uses, allocate the rest."""
        ...

    def release(self, admission: Admission, *, sequence: Units | None = None,
                now: float | None = None) -> None:
        """Finish a request: cache its units (`sequence` = prompt + output), unpin."""
        ...

    def insert(self, sequence: Units, *, now: float | None = None) -> None:
        """Admit and release `sequence` at once, ignoring its hit."""
        ...

    def step(self, prompt: Units, *, sequence: Units | None = None,
             now: float | None = None, prefix: tuple[Units, int] | None = None) -> Lookup:
        """One request of a sequential replay: admit, then release. `prefix`: (the units
        of an earlier request, how many of its leading keys `prompt` starts with), a hint
        an engine may use to skip work; the result is the same without it."""
        ...

    def expire(self, horizon: float) -> None:
        """Forget what no later call can find (an engine may, at a time it chooses; the
        answers are the same without it), the caller promising that every later call's
        `now` is a number no less than `horizon` and that no admission is outstanding."""
        ...


class BaseEngine:
    """`insert` and `step` written once on top of an engine's `admit` / `release`."""

    name: ClassVar[str] = "base"
    unit: int

    def units(self, token_ids: Sequence[int] | np.ndarray) -> Units:
        return Units.chain(token_ids, self.unit)

    def units_extending(self, token_ids: Sequence[int] | np.ndarray, base: Units,
                        shared: int, resumed: tuple[int, int, int] | None = None) -> Units:
        # Only plain chained blocks carry over (raw ids and segments are cut afresh); a
        # key covers whole blocks, so only the blocks within the shared tokens (and the
        # contents of those within a run found again at a whole-block shift).
        if not base.chained or base.ends is not None or base.unit != self.unit:
            return self.units(token_ids)
        return Units.chain(token_ids, self.unit,
                           prefix_keys=base.keys[: min(shared // self.unit, base.n_full)],
                           contents=None if resumed is None else
                           run_contents(base, self.unit, resumed))

    def _check(self, units: Units) -> None:
        if units.unit != self.unit:
            raise ValueError(f"{self.name}: units of {units.unit} tokens given to an engine "
                             f"of {self.unit}-token units")
        if not units.chained:
            raise ValueError(f"{self.name} needs chained keys (Units.chain / Units.blocks)")

    def lookup(self, prompt: Units, *, now: float | None = None) -> Lookup:
        raise NotImplementedError

    def admit(self, prompt: Units, *, now: float | None = None) -> Admission:
        raise NotImplementedError

    def release(self, admission: Admission, *, sequence: Units | None = None,
                now: float | None = None) -> None:
        raise NotImplementedError

    def insert(self, sequence: Units, *, now: float | None = None) -> None:
        self.release(self.admit(sequence, now=now), now=now)

    def step(self, prompt: Units, *, sequence: Units | None = None,
             now: float | None = None, prefix: tuple[Units, int] | None = None) -> Lookup:
        admission = self.admit(prompt, now=now)
        self.release(admission, sequence=sequence, now=now)
        return admission.lookup

    def expire(self, horizon: float) -> None:
        """Nothing: an engine with no expiry, or one that keeps its expired entries."""
