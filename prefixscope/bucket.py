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
                min_requests: int = SPIKE_MIN_REQUESTS,
                ) -> list[tuple[int, int, float, float | None]]:
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
                | None, *, forced: bool = False) -> BucketGroup:
    """One group's figures; its block size is `block_size` when forced, else inferred from
    the group's own values (falling back on `block_size`)."""
    prompt = sum(r.prompt_tokens for r in rows)
    cached = sum(r.cached_tokens for r in rows)
    ratios = [r.cached_tokens / r.prompt_tokens for r in rows if r.prompt_tokens > 0]
    hit = cached / prompt if prompt else None
    mean = sum(ratios) / len(ratios) if ratios else None
    values = [r.cached_tokens for r in rows]
    group_bs = block_size if forced else (infer_block_size(values) or block_size)
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


# -- over a store ------------------------------------------------------------------

_USAGE_COLUMNS = ("id", "timestamp", "endpoint", "model", "client", "user_id", "channel",
                  "source_format", "session", "prompt_tokens", "cached_tokens", "has_body")
EXPLAIN_SAMPLE = 40


def bucket_store(store: Any, by: Sequence[str] = (), *, bins: int = 20,
                 block_size: int | None = None, options: Any = None,
                 explain: bool = True) -> BucketReport:
    """Hit rate, histogram, spikes and constant explanations per group of a store.

    Args:
        store: an open `prefixscope.store.Store`.
        by: grouping dimensions (DIMENSIONS); none: one group of everything.
        bins: histogram bins.
        block_size: force the block size (else inferred per group and overall).
        options: `RenderOptions` for explaining spikes (None: the defaults).
        explain: render spike requests to locate the boundary their constant is.

    Raises:
        ValueError: an unknown dimension.
    """
    unknown = [d for d in by if d not in DIMENSIONS]
    if unknown:
        raise ValueError(f"unknown dimension {unknown[0]!r} (known: {', '.join(DIMENSIONS)})")
    rel = store.con.execute(f"SELECT {', '.join(_USAGE_COLUMNS)} FROM turns "
                            "ORDER BY timestamp NULLS FIRST, source_file, source_line, id")
    cols = [c[0] for c in rel.description]
    groups: dict[tuple[Any, ...], list[UsageRow]] = {}
    without = 0
    all_cached: list[int] = []
    for values in rel.fetchall():
        row = dict(zip(cols, values, strict=True))
        if row["prompt_tokens"] is None or row["cached_tokens"] is None:
            without += 1
            continue
        key = tuple(group_key_value(d, row) for d in by)
        groups.setdefault(key, []).append(UsageRow(row["id"], key, int(row["prompt_tokens"]),
                                                   int(row["cached_tokens"]),
                                                   bool(row["has_body"])))
        all_cached.append(int(row["cached_tokens"]))
    if block_size:
        overall, source = block_size, "forced"
    else:
        inferred = infer_block_size(all_cached)
        overall, source = (inferred, "inferred") if inferred else (None, "default")
    explainer = _Explainer(store, options) if explain else None
    built = []
    for key, rows in sorted(groups.items(), key=lambda kv: tuple(str(v) for v in kv[0])):
        built.append(build_group(dict(zip(by, key, strict=True)), rows, bins, overall,
                                 explainer.explain if explainer else None,
                                 forced=bool(block_size)))
    prompt = sum(g.prompt_tokens for g in built)
    cached = sum(g.cached_tokens for g in built)
    totals = BucketTotals(sum(g.requests for g in built), prompt, cached,
                          cached / prompt if prompt else None, without)
    return BucketReport(tuple(by), tuple(built), totals, overall, source)


class _Explainer:
    """Renders the requests at a spike to find the boundary the constant corresponds to."""

    def __init__(self, store: Any, options: Any) -> None:
        self.store = store
        self.options = options

    def explain(self, value: int, block_size: int, rows: Sequence[UsageRow]
                ) -> tuple[Boundary | None, str]:
        with_body = [r for r in rows if r.has_body]
        if not with_body:
            return None, (f"{len(rows)} request(s) at {value:,} have no body in the log: "
                          "ingest a log with bodies (Langfuse, raw captures, LiteLLM with "
                          "stored prompts) to locate the boundary")
        from .render import RenderError, RenderOptions
        from .tokenize import tokens_many

        requests = [self.store.get(r.id) for r in with_body[:EXPLAIN_SAMPLE]]
        try:
            rendered = tokens_many(requests, self.options or RenderOptions())
        except RenderError as exc:
            return None, f"cannot render the requests at this spike: {exc}"
        boundaries = [top_level_boundaries(t) for t in rendered]
        found = explain_spike(value, block_size, boundaries)
        if found is None:
            return None, (f"no segment boundary of the rendered prompts falls on "
                          f"{value:,} tokens (±{block_size}): the constant is not a template "
                          "boundary with these rendering options (check --gateway/--tokenizer)")
        return found, (f"stable through the end of `{found.segment_before}`; the next segment "
                       f"`{found.segment_after}` starts at token {found.token:,} "
                       f"({found.requests} of {len(requests)} rendered requests)")


def top_level_element(path: str) -> str:
    """The element a segment path belongs to, for boundaries: tools[3].x -> "tools"."""
    head = path.split(".", 1)[0]
    return "tools" if head.startswith("tools") else head


def top_level_boundaries(tok: Any) -> list[tuple[int, str, str]]:
    """(token index, element before, element after) wherever a new element starts.

    Template glue belongs to the element before it, so a boundary falls where the
    next logged element's first token is.
    """
    out: list[tuple[int, str, str]] = []
    spans = tok.segment_token_spans()
    current: str | None = None
    for segment, (start, end) in zip(tok.prompt.segments, spans, strict=True):
        if segment.path == "template" or start == end:
            continue
        element = top_level_element(segment.path)
        if current is not None and element != current:
            out.append((start, current, element))
        current = element
    return out


def report_json(report: BucketReport) -> dict[str, Any]:
    """The documented JSON shape (docs/json.md)."""
    def bins(hist: Sequence[HistogramBin]) -> list[dict[str, Any]]:
        return [{"lo": b.lo, "hi": b.hi, "requests": b.requests} for b in hist]

    return {
        "groups": [{
            "key": g.key, "requests": g.requests, "prompt_tokens": g.prompt_tokens,
            "cached_tokens": g.cached_tokens, "hit_rate": g.hit_rate,
            "mean_request_hit_rate": g.mean_request_hit_rate, "zero_cached": g.zero_cached,
            "histogram": bins(g.histogram), "fraction_histogram": bins(g.fraction_histogram),
            "block_size": g.block_size,
            "spikes": [{
                "cached_tokens": s.cached_tokens, "requests": s.requests, "share": s.share,
                "blocks": s.blocks,
                "boundary": None if s.boundary is None else {
                    "segment_before": s.boundary.segment_before,
                    "segment_after": s.boundary.segment_after, "token": s.boundary.token},
                "explanation": s.explanation,
            } for s in g.spikes],
            "notes": list(g.notes),
        } for g in report.groups],
        "totals": {"requests": report.totals.requests,
                   "prompt_tokens": report.totals.prompt_tokens,
                   "cached_tokens": report.totals.cached_tokens,
                   "hit_rate": report.totals.hit_rate,
                   "without_usage": report.totals.without_usage},
        "by": list(report.by),
        "block_size": report.block_size,
        "block_size_source": report.block_size_source,
    }
