"""Hit rate by dimension and the shape of the cached-token distribution.

The incident write-ups' first two moves: split the hit rate by dimension instead of
looking at the overall mean, and look at the distribution of cached tokens instead of
its average. An exact constant held by many requests (383 of 451 at exactly
17920 = 280 x 64) is structure, not chance: it is the length of a stable prefix, and
working back from it to the template finds the cause.

Guarantees:

* Hit rates are token-weighted: ``sum(cached_tokens) / sum(prompt_tokens)`` over the
  requests that report both. The per-request mean is reported beside it, with a note
  when the two differ a lot (averaging ratios is a classic reporting error).
* Block size inference (`infer_block_size`): the largest of 16 ... 2048 that divides
  nearly all of the non-zero cached values seen often enough.
* Spikes (`find_spikes`): every non-zero cached value held by >= 5% of a group's
  requests and by >= 5 requests, with ``blocks = value / block_size``.
* Constant explanation (`explain_spike`): given the rendered token segments of the
  requests at a spike, the segment boundary b with ``floor(b / bs) * bs == value``
  (within one block), and the segments on both sides of it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

BLOCK_SIZES = (16, 32, 64, 128, 256, 512, 1024, 2048)
DIMENSIONS = ("endpoint", "model", "client", "user", "channel", "day", "source", "session")
SPIKE_MIN_SHARE = 0.05
SPIKE_MIN_REQUESTS = 5
# Block inference: a value must be seen this often to count (when enough such values exist),
# and this share of the distinct values must be divisible by the block size.
_INFER_MIN_SEEN = 2
_INFER_MIN_VALUES = 3
_INFER_SHARE = 0.9
# Token-weighted and per-request hit rates differing by more than this get a note.
MEAN_GAP_NOTE = 0.10


@dataclass(frozen=True, slots=True)
class HistogramBin:
    lo: float  # inclusive lower edge
    hi: float  # exclusive upper edge (inclusive for the last bin)
    requests: int  # requests in the bin


@dataclass(frozen=True, slots=True)
class Boundary:
    """The template boundary a spike's constant corresponds to."""

    segment_before: str  # segment path ending at the boundary (e.g. "tools")
    segment_after: str  # segment path starting there (e.g. "system[0]")
    token: int  # token index of the boundary in the rendered prompt
    requests: int  # rendered requests at the spike that have this boundary


@dataclass(frozen=True, slots=True)
class Spike:
    cached_tokens: int  # the exact cached-token value
    requests: int  # requests of the group holding it
    share: float  # requests / group requests
    blocks: float | None  # cached_tokens / block_size
    boundary: Boundary | None  # the matching segment boundary, when bodies allow
    explanation: str  # one sentence: what the constant is, or why it cannot be explained


@dataclass(frozen=True, slots=True)
class BucketGroup:
    key: dict[str, Any]  # dimension -> value
    requests: int  # requests reporting both prompt and cached tokens
    prompt_tokens: int
    cached_tokens: int
    hit_rate: float | None  # token-weighted
    mean_request_hit_rate: float | None  # unweighted mean of per-request ratios
    zero_cached: int  # requests with no cached tokens at all
    histogram: tuple[HistogramBin, ...]  # cached tokens per request
    fraction_histogram: tuple[HistogramBin, ...]  # cached / prompt per request
    block_size: int | None  # inferred for this group
    spikes: tuple[Spike, ...]
    notes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class BucketTotals:
    requests: int
    prompt_tokens: int
    cached_tokens: int
    hit_rate: float | None
    without_usage: int  # requests in scope that report no prompt or no cached tokens


@dataclass(frozen=True, slots=True)
class BucketReport:
    by: tuple[str, ...]
    groups: tuple[BucketGroup, ...]
    totals: BucketTotals
    block_size: int | None  # inferred over all requests (or forced)
    block_size_source: str  # "forced" | "inferred" | "default"


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One request as bucket sees it."""

    id: str
    key: tuple[Any, ...]
    prompt_tokens: int
    cached_tokens: int
    has_body: bool


def infer_block_size(cached_values: Sequence[int]) -> int | None:
    """The largest candidate block size dividing nearly all non-zero cached values.

    Values seen at least twice are used when there are at least three of them (noise
    from one-off values does not decide); otherwise every distinct non-zero value.
    None when there is no non-zero value or none of the candidates fits. With only one
    or two distinct values the answer is an upper bound (17920 alone fits 512 too).
    """
    counts = Counter(v for v in cached_values if v and v > 0)
    if not counts:
        return None
    frequent = [v for v, c in counts.items() if c >= _INFER_MIN_SEEN]
    values = frequent if len(frequent) >= _INFER_MIN_VALUES else list(counts)
    for bs in reversed(BLOCK_SIZES):
        if sum(1 for v in values if v % bs == 0) >= _INFER_SHARE * len(values):
            return bs
    return None


def find_spikes(cached_values: Sequence[int], block_size: int | None,
                min_share: float = SPIKE_MIN_SHARE,
                min_requests: int = SPIKE_MIN_REQUESTS) -> list[tuple[int, int, float, float | None]]:
    """(value, requests, share, blocks) for every non-zero value held by enough requests."""
    total = len(cached_values)
    if not total:
        return []
    counts = Counter(v for v in cached_values if v > 0)
    spikes = []
    for value, n in counts.most_common():
        share = n / total
        if n >= min_requests and share >= min_share:
            spikes.append((value, n, share, value / block_size if block_size else None))
    return spikes


def histogram(values: Sequence[float], bins: int, lo: float | None = None,
              hi: float | None = None) -> tuple[HistogramBin, ...]:
    """Equal-width bins from lo (default 0) to hi (default max); the last bin is closed."""
    if not values or bins <= 0:
        return ()
    lo = 0.0 if lo is None else lo
    hi = float(max(values)) if hi is None else hi
    if hi <= lo:
        return (HistogramBin(lo, hi, len(values)),)
    width = (hi - lo) / bins
    counts = [0] * bins
    for v in values:
        idx = min(int((v - lo) / width), bins - 1)
        counts[max(idx, 0)] += 1
    return tuple(HistogramBin(lo + i * width, lo + (i + 1) * width, c)
                 for i, c in enumerate(counts))


def explain_spike(value: int, block_size: int,
                  boundaries: Sequence[Sequence[tuple[int, str, str]]]) -> Boundary | None:
    """Match a spike value to a segment boundary shared by the spike's requests.

    Args:
        value: the spike's cached-token value.
        block_size: the block size in force.
        boundaries: per rendered request, its segment boundaries as
            (token index, segment before, segment after).

    Returns:
        The boundary (by segment names) found in the most requests with
        ``floor(token / bs) * bs == value``; failing an exact match, within one block.
    """
    for tolerance in (0, block_size):
        votes: Counter[tuple[str, str]] = Counter()
        token_at: dict[tuple[str, str], int] = {}
        for request_boundaries in boundaries:
            seen: set[tuple[str, str]] = set()
            for token, before, after in request_boundaries:
                if abs((token // block_size) * block_size - value) <= tolerance:
                    key = (before, after)
                    if key not in seen:
                        seen.add(key)
                        votes[key] += 1
                        token_at.setdefault(key, token)
        if votes:
            (before, after), n = max(votes.items(), key=lambda kv: (kv[1], -token_at[kv[0]]))
            return Boundary(before, after, token_at[(before, after)], n)
    return None


def group_key_value(dim: str, row: dict[str, Any]) -> Any:
    """The value of one grouping dimension for a store row."""
    if dim == "day":
        ts = row.get("timestamp")
        return ts.date().isoformat() if isinstance(ts, datetime) else None
    column = {"user": "user_id", "source": "source_format"}.get(dim, dim)
    return row.get(column)


def build_group(key: dict[str, Any], rows: Sequence[UsageRow], bins: int,
                block_size: int | None,
                explain: Callable[[int, int, Sequence[UsageRow]], tuple[Boundary | None, str]]
                | None) -> BucketGroup:
    prompt = sum(r.prompt_tokens for r in rows)
    cached = sum(r.cached_tokens for r in rows)
    ratios = [r.cached_tokens / r.prompt_tokens for r in rows if r.prompt_tokens > 0]
    hit = cached / prompt if prompt else None
    mean = sum(ratios) / len(ratios) if ratios else None
    values = [r.cached_tokens for r in rows]
    group_bs = infer_block_size(values) or block_size
    spikes = []
    for value, n, share, blocks in find_spikes(values, group_bs):
        at_spike = [r for r in rows if r.cached_tokens == value]
        if explain is not None and group_bs:
            boundary, text = explain(value, group_bs, at_spike)
        else:
            boundary, text = None, "no bodies to render: the boundary cannot be located"
        spikes.append(Spike(value, n, share, blocks, boundary, text))
    notes = []
    if hit is not None and mean is not None and abs(hit - mean) > MEAN_GAP_NOTE:
        notes.append(f"per-request mean hit rate {mean:.1%} differs from the token-weighted "
                     f"{hit:.1%}: averaging ratios over-weights short requests")
    return BucketGroup(
        key=key, requests=len(rows), prompt_tokens=prompt, cached_tokens=cached, hit_rate=hit,
        mean_request_hit_rate=mean, zero_cached=sum(1 for v in values if v == 0),
        histogram=histogram(values, bins),
        fraction_histogram=histogram(ratios, 10, 0.0, 1.0),
        block_size=group_bs, spikes=tuple(spikes), notes=tuple(notes),
    )
