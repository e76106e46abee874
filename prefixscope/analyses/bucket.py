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
  nearly all of the non-zero cached values seen often enough. With fewer than three
  distinct values it is only an upper bound (17920 alone fits 512): a group then takes
  the block size of its log formats' values (its cache domain), else the overall one,
  when that divides its own (`group_block_evidence`), and the report carries a note.
  Each group carries its evidence: the candidate sizes that fit and what they fit.
* Histograms of cached tokens have whole-block (or whole-token) bin edges, so a
  constant starts its bin (`histogram` with ``step``).
* Spikes (`find_spikes`): every non-zero cached value held by >= 5% of a group's
  requests and by >= 5 requests, with ``blocks = value / block_size``.
* Constant explanation (`explain_spike`): the requests at a spike (up to
  `EXPLAIN_SAMPLE`, spread over them) are rendered; the explanation is the top-level
  segment boundary b with ``floor(b / bs) * bs == value``, or one block below it (the
  next segment's first tokens are shared too), with the segments on both sides and
  how many distinct texts the segment after it has. Requests without a body are
  never guessed at: the explanation says what is missing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prefixscope.analyses.dimensions import check_dimensions, group_key
from prefixscope.engines.choose import BLOCK_SIZES as BLOCK_SIZES  # (read from here too)
from prefixscope.model import UsageRecord
from prefixscope.prompt import RenderError, RenderOptions
from prefixscope.store import Store
from prefixscope.tokens import Tokens, tokens, tokens_many

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
    rendered: int = 0  # requests at the spike rendered to look for it
    distinct_after: int | None = None  # distinct texts of segment_after among those requests


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
    block_basis: str = "none"  # what block_size was inferred from (BlockEvidence.basis)
    block_size_candidates: tuple[int, ...] = ()  # the block sizes that fit those values


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
    notes: tuple[str, ...] = ()  # about the whole report (a weakly inferred block size)
    block_size_candidates: tuple[int, ...] = ()  # block sizes fitting every cached value


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One request as bucket sees it."""

    id: str
    key: tuple[Any, ...]
    prompt_tokens: int
    cached_tokens: int
    has_body: bool
    source: str = ""  # the log format the request came from (its cache domain)


def infer_block_size(cached_values: Sequence[int]) -> int | None:
    """The largest candidate block size dividing nearly all non-zero cached values.

    Values seen at least twice are used when there are at least three of them (noise
    from one-off values does not decide); otherwise every distinct non-zero value, and
    failing that the repeated values alone (383 x 17920 + 3 x 256 + one odd 1000 -> 256).
    None when there is no non-zero value or none of the candidates fits. With only one
    or two distinct values the answer is an upper bound (17920 alone fits 512 too).
    """
    fits = fitting_block_sizes(cached_values)
    return max(fits) if fits else None


def fitting_block_sizes(cached_values: Sequence[int]) -> tuple[int, ...]:
    """Every candidate block size (`BLOCK_SIZES`) dividing nearly all (90%) of the values
    `infer_block_size` looks at, smallest first: the evidence for the block size it picks
    (the largest). Empty when none fits."""
    counts = Counter(v for v in cached_values if v and v > 0)
    if not counts:
        return ()
    frequent = [v for v, c in counts.items() if c >= _INFER_MIN_SEEN]
    candidates = [frequent, list(counts)] if len(frequent) >= _INFER_MIN_VALUES else \
        [list(counts), frequent]
    for values in candidates:
        if not values:
            continue
        fits = tuple(bs for bs in BLOCK_SIZES
                     if sum(1 for v in values if v % bs == 0) >= _INFER_SHARE * len(values))
        if fits:
            return fits
    return ()


@dataclass(frozen=True, slots=True)
class BlockEvidence:
    """A group's block size and what it was inferred from."""

    block_size: int | None
    basis: str  # "forced", "group" (its own values), "sources" (every value of its log
    #             formats), "overall" (every value of the store) or "none"
    candidates: tuple[int, ...]  # the block sizes that fit those values (`fitting_block_sizes`)
    distinct: int  # distinct non-zero cached values they were


def _evidence(values: Sequence[int], basis: str) -> BlockEvidence:
    fits = fitting_block_sizes(values)
    return BlockEvidence(max(fits) if fits else None, basis if fits else "none", fits,
                         len({v for v in values if v > 0}))


def group_block_evidence(values: Sequence[int], source_values: Sequence[int],
                         overall: BlockEvidence | None = None) -> BlockEvidence:
    """A group's block size, as bucket and diff infer it: from the group's own cached
    values; a group with too few values of its own to tell (fewer than three distinct,
    consistent with the fallback) or none takes the block size of its cache domain (every
    value of its log formats), else the overall one -- not other engines' logs."""
    fallback = _evidence(source_values, "sources")
    if fallback.block_size is None and overall is not None:
        fallback = overall if overall.block_size else fallback
    own = _evidence(values, "group")
    if own.block_size is None:
        return fallback
    if (fallback.block_size and own.distinct < _INFER_MIN_VALUES
            and own.block_size % fallback.block_size == 0):
        return fallback
    return own


def group_block_sizes(store: Store) -> dict[tuple[str, str, str | None], BlockEvidence]:
    """The block size of every (source, endpoint, model) group of a store, inferred as
    `bucket --by source,endpoint,model` does (`group_block_evidence`), over the requests
    that report both prompt and cached tokens."""
    groups: dict[tuple[str, str, str | None], list[int]] = {}
    by_source: dict[str, list[int]] = {}
    every: list[int] = []
    for r in store.usage_records():
        if r.prompt_tokens is None or r.cached_tokens is None:
            continue
        groups.setdefault((r.source_format, r.endpoint, r.model), []).append(r.cached_tokens)
        by_source.setdefault(r.source_format, []).append(r.cached_tokens)
        every.append(r.cached_tokens)
    overall = _evidence(every, "overall")
    return {key: group_block_evidence(values, by_source[key[0]], overall)
            for key, values in groups.items()}


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
              hi: float | None = None, *, step: int | None = None) -> tuple[HistogramBin, ...]:
    """Equal-width bins over `values`.

    Without `step`: `bins` bins from lo (default 0) to hi (default max); the last bin is
    closed. With `step` (token counts: 1, or the block size): the bin width is the
    smallest multiple of `step` that puts every value in at most `bins` half-open bins
    ``[lo, lo + width)`` starting at lo (default 0), so edges are whole tokens (or whole
    blocks) and a value on a block edge starts its bin; trailing empty bins are omitted.
    """
    if not values or bins <= 0:
        return ()
    if step:
        return _stepped_histogram(values, bins, 0 if lo is None else lo, step)
    start = 0.0 if lo is None else lo
    end = float(max(values)) if hi is None else hi
    if end <= start:
        return (HistogramBin(start, end, len(values)),)
    span = end - start
    # Edges from integers (start + span * i / bins: 0.3, never 0.30000000000000004), and a
    # value on an edge in the bin that edge starts (0.3 * 10 / 1 is 3.0; 0.3 / 0.1 is not).
    counts = [0] * bins
    for v in values:
        idx = min(int((v - start) * bins / span), bins - 1)
        counts[max(idx, 0)] += 1
    edges = [start + span * i / bins for i in range(bins + 1)]
    return tuple(HistogramBin(edges[i], edges[i + 1], c) for i, c in enumerate(counts))


def _stepped_histogram(values: Sequence[float], bins: int, lo: float, step: int
                       ) -> tuple[HistogramBin, ...]:
    top = max(values) - lo
    width = step * (int(top // (bins * step)) + 1)
    counts = [0] * (int(top // width) + 1)
    for v in values:
        counts[max(int((v - lo) // width), 0)] += 1
    return tuple(HistogramBin(lo + i * width, lo + (i + 1) * width, c)
                 for i, c in enumerate(counts))


def explain_spike(value: int, block_size: int,
                  boundaries: Sequence[Sequence[tuple[int, str, str]]]) -> Boundary | None:
    """Match a spike value to a segment boundary shared by the spike's requests.

    A prompt identical through boundary b caches ``floor(b / bs) * bs`` tokens, or one
    block more when the requests also share the first tokens of the next segment (the
    billing header's ``x-anthropic-billing-header: cc_version=...; cch=`` before the
    nonce). So a boundary explains `value` when ``floor(b / bs) * bs == value`` (exact)
    or ``== value - bs`` (one-block tolerance); exact matches are tried first.

    Args:
        value: the spike's cached-token value.
        block_size: the block size in force.
        boundaries: per rendered request, its segment boundaries as
            (token index, segment before, segment after).

    Returns:
        The boundary (by segment names) found in the most requests (ties: the earliest
        token), with the token index where it was first seen; None when none matches.
    """
    for floor_at in (value, value - block_size):
        votes: Counter[tuple[str, str]] = Counter()
        token_at: dict[tuple[str, str], int] = {}
        for request_boundaries in boundaries:
            seen: set[tuple[str, str]] = set()
            for token, before, after in request_boundaries:
                if (token // block_size) * block_size == floor_at:
                    key = (before, after)
                    if key not in seen:
                        seen.add(key)
                        votes[key] += 1
                        token_at.setdefault(key, token)
        if votes:
            (before, after), n = max(votes.items(), key=lambda kv: (kv[1], -token_at[kv[0]]))
            return Boundary(before, after, token_at[(before, after)], n)
    return None


def group_block_size(values: Sequence[int], overall: int | None) -> int | None:
    """The block size of one group: inferred from its own values, unless they are too few
    to tell (fewer than three distinct non-zero values) and the overall block size is
    consistent with them -- one constant like 17920 alone fits 512 as well as 64."""
    return group_block_evidence(values, (), _given(overall, "overall")).block_size


def _given(block_size: int | None, basis: str) -> BlockEvidence:
    return BlockEvidence(block_size, basis if block_size else "none",
                         (block_size,) if block_size else (), 0)


def build_group(key: dict[str, Any], rows: Sequence[UsageRow], bins: int,
                block_size: int | BlockEvidence | None,
                explain: Callable[[int, int, Sequence[UsageRow]], tuple[Boundary | None, str]]
                | None, *, forced: bool = False) -> BucketGroup:
    """One group's figures. Its block size: `block_size` as given when it is evidence
    (`group_block_evidence`) or forced, else `group_block_size` of its own values
    (falling back on `block_size`)."""
    prompt = sum(r.prompt_tokens for r in rows)
    cached = sum(r.cached_tokens for r in rows)
    ratios = [r.cached_tokens / r.prompt_tokens for r in rows if r.prompt_tokens > 0]
    hit = cached / prompt if prompt else None
    mean = sum(ratios) / len(ratios) if ratios else None
    values = [r.cached_tokens for r in rows]
    if isinstance(block_size, BlockEvidence):
        evidence = block_size
    elif forced:
        evidence = _given(block_size, "forced")
    else:
        evidence = group_block_evidence(values, (), _given(block_size, "overall"))
    group_bs = evidence.block_size
    spikes = []
    for value, n, share, blocks in find_spikes(values, group_bs):
        at_spike = [r for r in rows if r.cached_tokens == value]
        if explain is None:
            boundary, text = None, "not explained (--no-explain)"
        elif not group_bs:
            boundary, text = None, ("no block size: pass --block-size to locate the boundary "
                                    "this constant corresponds to")
        else:
            boundary, text = explain(value, group_bs, at_spike)
        spikes.append(Spike(value, n, share, blocks, boundary, text))
    notes = []
    over = sum(1 for r in rows if r.cached_tokens > r.prompt_tokens)
    if over:
        notes.append(f"{over} request(s) report more cached than prompt tokens: the log's "
                     "prompt tokens probably exclude the cache (Anthropic-style input_tokens); "
                     "check the usage semantics of this source")
    if hit is not None and mean is not None and abs(hit - mean) > MEAN_GAP_NOTE:
        notes.append(f"the per-request mean hit rate ({mean:.1%}) differs from the "
                     f"token-weighted one ({hit:.1%}): a mean of ratios weighs a short request "
                     "like a long one; the token-weighted rate is what the cache saved")
    return BucketGroup(
        key=key, requests=len(rows), prompt_tokens=prompt, cached_tokens=cached, hit_rate=hit,
        mean_request_hit_rate=mean, zero_cached=sum(1 for v in values if v == 0),
        histogram=histogram(values, bins, step=group_bs or 1),
        fraction_histogram=histogram(ratios, 10, 0.0, 1.0),
        block_size=group_bs, spikes=tuple(spikes), notes=tuple(notes),
        block_basis=evidence.basis, block_size_candidates=evidence.candidates,
    )


# -- over a store ------------------------------------------------------------------

EXPLAIN_SAMPLE = 40


def bucket_store(store: Store, by: Sequence[str] = (), *, bins: int = 20,
                 block_size: int | None = None, options: RenderOptions | None = None,
                 explain: bool = True, rendered: Mapping[str, Tokens] | None = None
                 ) -> BucketReport:
    """Hit rate, histogram, spikes and constant explanations per group of a store.

    Args:
        store: an open `prefixscope.store.Store`.
        by: grouping dimensions (DIMENSIONS); none: one group of everything.
        bins: histogram bins.
        block_size: force the block size (else inferred per group and overall).
        options: `RenderOptions` for explaining spikes (None: the defaults).
        explain: render spike requests to locate the boundary their constant is.
        rendered: requests already rendered and tokenized with `options` (by id; a walk
            in this process makes `spike_samples`' as it goes): their tokens are taken,
            not made again.

    Raises:
        ValueError: an unknown dimension.
    """
    split = _split(store, by, block_size)
    explainer = _Explainer(store, options, rendered or {}) if explain else None
    built = [build_group(dict(zip(by, key, strict=True)), rows, bins, evidence,
                         explainer.explain if explainer else None)
             for key, rows, evidence in split.groups]
    prompt = sum(r.prompt_tokens for r in split.once)
    cached = sum(r.cached_tokens for r in split.once)
    totals = BucketTotals(len(split.once), prompt, cached, cached / prompt if prompt else None,
                          split.without)
    return BucketReport(tuple(by), tuple(built), totals, split.overall.block_size,
                        split.source, tuple(split.notes), split.overall.candidates)


def spike_samples(store: Store, by: Sequence[str] = (), *, block_size: int | None = None
                  ) -> list[str]:
    """The ids of the requests `bucket_store(store, by, block_size=block_size)` renders to
    explain its spikes (at most `EXPLAIN_SAMPLE` a spike, `_sample`), without rendering:
    a walk rendering every request anyway hands their tokens over (`rendered`).

    Raises:
        ValueError: an unknown dimension.
    """
    out: list[str] = []
    for _, rows, evidence in _split(store, by, block_size).groups:
        if evidence.block_size:  # (without one a spike is not explained: `build_group`)
            values = [r.cached_tokens for r in rows]
            for value, _, _, _ in find_spikes(values, evidence.block_size):
                out += [r.id for r in _sample([r for r in rows if r.cached_tokens == value])]
    return list(dict.fromkeys(out))


@dataclass(frozen=True, slots=True)
class _Split:
    """A store's requests as `bucket_store` groups them, before any group is built."""

    groups: list[tuple[tuple[Any, ...], list[UsageRow], BlockEvidence]]  # in report order
    once: list[UsageRow]  # each call once (the totals)
    without: int  # calls reporting no usage
    notes: list[str]
    overall: BlockEvidence
    source: str  # how the overall block size was found


def _split(store: Store, by: Sequence[str], block_size: int | None) -> _Split:
    """The groups of `bucket_store(store, by, block_size=block_size)`, each with its rows
    and block size evidence, and what the report says of the whole."""
    check_dimensions(by)
    records = store.usage_records()
    counted, without = _once(records)
    per_source = "source" in by  # each source shows its own copy of a call logged twice
    groups: dict[tuple[Any, ...], list[UsageRow]] = {}
    all_cached: list[int] = []
    by_source: dict[str, list[int]] = {}
    once: list[UsageRow] = []
    for record in records:
        if record.prompt_tokens is None or record.cached_tokens is None:
            continue
        key = group_key(by, record, record.session)
        row = UsageRow(record.id, key, record.prompt_tokens, record.cached_tokens,
                       record.has_body, record.source_format)
        by_source.setdefault(record.source_format, []).append(record.cached_tokens)
        if record.id in counted:
            once.append(row)
            all_cached.append(record.cached_tokens)
        if _in_groups(record, per_source, counted):
            groups.setdefault(key, []).append(row)
    notes: list[str] = []
    copies = sum(1 for r in records if r.duplicate_of is not None)
    if copies:
        notes.append(f"{copies:,} request(s) are a second log of a call another source logged "
                     "too (duplicate_of): " + (
                         "each counts in its own source's group, once in the totals"
                         if per_source else "each call counts once, through one copy"))
    if block_size:
        overall, source = _given(block_size, "forced"), "forced"
    else:
        overall = _evidence(all_cached, "overall")
        source = "inferred" if overall.block_size else "default"
        if overall.block_size and overall.distinct < _INFER_MIN_VALUES:
            notes.append(f"block size {overall.block_size} was inferred from "
                         f"{overall.distinct} distinct cached value(s) only: the engine's "
                         "block size may be a divisor of it (pass --block-size if you know it)")
    split = []
    for key, rows in sorted(groups.items(), key=lambda kv: tuple(str(v) for v in kv[0])):
        if block_size:
            evidence = overall
        else:
            sources = sorted({r.source for r in rows})
            evidence = group_block_evidence([r.cached_tokens for r in rows],
                                            [v for src in sources for v in by_source[src]],
                                            overall)
        split.append((key, rows, evidence))
    return _Split(split, once, without, notes, overall, source)


def group_count(store: Store, by: Sequence[str]) -> int:
    """How many groups `bucket_store(store, by)` reports (one per key of the requests
    `_in_groups` puts in a group), without building them: report builds a split by a
    dimension only when it holds more than one group (2.0 s of CPU for four one-group
    splits at 2 GiB of Claude Code transcripts).

    Raises:
        ValueError: an unknown dimension.
    """
    check_dimensions(by)
    records = store.usage_records()
    counted, _ = _once(records)
    per_source = "source" in by
    return len({group_key(by, r, r.session) for r in records
                if _in_groups(r, per_source, counted)})


def _in_groups(record: UsageRecord, per_source: bool, counted: set[str]) -> bool:
    """Is `record` in a group of `bucket_store`: it reports both prompt and cached
    tokens, and it is the copy of its call counted once (`_once`), or grouped by source
    (each source shows its own copy)."""
    return (record.prompt_tokens is not None and record.cached_tokens is not None
            and (per_source or record.id in counted))


def _once(records: Sequence[UsageRecord]) -> tuple[set[str], int]:
    """(ids of the requests that count each call once, calls reporting no usage): of a call
    logged by several sources (``duplicate_of``), the first copy reporting both prompt and
    cached tokens, the copy kept first; a call none of whose copies reports both counts
    once among those without usage."""
    copies: dict[str, list[UsageRecord]] = {}
    for r in records:
        copies.setdefault(r.duplicate_of or r.id, []).append(r)
    counted: set[str] = set()
    without = 0
    for root, members in copies.items():
        members.sort(key=lambda r: r.id != root)  # the copy kept first, then time order
        usable = next((r for r in members
                       if r.prompt_tokens is not None and r.cached_tokens is not None), None)
        if usable is None:
            without += 1
        else:
            counted.add(usable.id)
    return counted, without


class _Explainer:
    """Renders the requests at a spike to find the boundary the constant corresponds to
    (taking the tokens of those `rendered` already)."""

    def __init__(self, store: Store, options: RenderOptions | None,
                 rendered: Mapping[str, Tokens]) -> None:
        self.store = store
        self.options = options
        self.rendered = rendered

    def explain(self, value: int, block_size: int, rows: Sequence[UsageRow]
                ) -> tuple[Boundary | None, str]:
        with_body = [r for r in rows if r.has_body]
        if not with_body:
            return None, (f"the {len(rows):,} request(s) at {value:,} have no body in this "
                          "log, so the boundary cannot be located: ingest a log with request "
                          "bodies (Langfuse, raw captures, LiteLLM with stored prompts) for "
                          "the same traffic")
        rendered, failures = self._render(_sample(rows))
        if not rendered:
            return None, f"cannot render the requests at this spike: {failures[0]}"
        boundaries = [top_level_boundaries(t) for t in rendered]
        found = explain_spike(value, block_size, boundaries)
        if found is None:
            return None, (f"no segment boundary of the {len(rendered)} rendered prompt(s) "
                          f"floors to {value:,} tokens (or one {block_size}-token block "
                          "below): the constant is not a template boundary with these "
                          "rendering options (check --gateway and --tokenizer)")
        having = [element_texts(t) for t, b in zip(rendered, boundaries, strict=True)
                  if any((before, after) == (found.segment_before, found.segment_after)
                         for _, before, after in b)]
        distinct = len({texts.get(found.segment_after) for texts in having})
        found = Boundary(found.segment_before, found.segment_after, found.token,
                         found.requests, len(rendered), distinct)
        text = describe_boundary(found, value, block_size)
        if any(t.prompt.approximate for t in rendered):
            text += (" [approximate render: no gateway conversion known, so the requests were "
                     "rendered in hosted-Anthropic order; pass --gateway if a gateway "
                     "converted them]")
        return found, text

    def _render(self, rows: Sequence[UsageRow]) -> tuple[list[Tokens], list[str]]:
        """Tokens of the rows' requests, in their order (those not `rendered` yet: one
        batch; one by one if a request fails), and why those that failed did."""
        made = self._make([r for r in rows if r.id not in self.rendered])
        out, failures = [], []
        for row in rows:
            tok = self.rendered[row.id] if row.id in self.rendered else made[row.id]
            if isinstance(tok, RenderError):
                failures.append(str(tok))
            else:
                out.append(tok)
        return out, failures

    def _make(self, rows: Sequence[UsageRow]) -> dict[str, Tokens | RenderError]:
        """The rows' requests rendered and tokenized, or the error each one raised."""
        if not rows:
            return {}
        options = self.options or RenderOptions()
        # one read for the sample (a query per request was 0.23 s of sample_logs/' report)
        found = self.store.get_many(r.id for r in rows)
        requests = [found[r.id] for r in rows]
        try:
            return {r.id: t for r, t in zip(rows, tokens_many(requests, options), strict=True)}
        except RenderError:
            pass
        out: dict[str, Tokens | RenderError] = {}
        for row, request in zip(rows, requests, strict=True):
            try:
                out[row.id] = tokens(request, options)
            except RenderError as exc:
                out[row.id] = exc
        return out


def _sample(rows: Sequence[UsageRow]) -> list[UsageRow]:
    """The rows at a spike that are rendered to explain it: those with a body, at most
    `EXPLAIN_SAMPLE` of them spread over the spike."""
    return _spread([r for r in rows if r.has_body], EXPLAIN_SAMPLE)


def _spread(rows: Sequence[UsageRow], n: int) -> list[UsageRow]:
    """At most n rows, evenly spread over `rows` (first and last included)."""
    if len(rows) <= n:
        return list(rows)
    return [rows[round(i * (len(rows) - 1) / (n - 1))] for i in range(n)]


def describe_boundary(found: Boundary, value: int, block_size: int) -> str:
    """One sentence: which segment the prompts agree through, and what follows it."""
    blocks = f"{value // block_size} × {block_size} = {value:,}"
    if (found.token // block_size) * block_size == value:
        head = (f"identical through the end of `{found.segment_before}` "
                f"(token {found.token:,} → {blocks})")
        tail = f"the next segment, `{found.segment_after}`,"
    else:
        head = (f"identical through the end of `{found.segment_before}` (token "
                f"{found.token:,}) and the first tokens of `{found.segment_after}` "
                f"(→ {blocks})")
        tail = f"after that `{found.segment_after}`"
    n, distinct = found.requests, found.distinct_after
    if distinct is not None and distinct == n and n > 1:
        what = f"differs in every request ({distinct} distinct of {n} rendered)"
    elif distinct is not None and distinct > 1:
        what = f"takes {distinct} different values in {n} rendered requests"
    else:
        what = (f"is the same in the {n} rendered request(s): what breaks the cache comes "
                "later or is not in the logged body")
    sentence = f"{head}; {tail} {what}"
    if found.rendered and found.requests < found.rendered:
        sentence += (f" (boundary at this block in {found.requests} of {found.rendered} "
                     "rendered requests)")
    return sentence


def top_level_element(path: str) -> str:
    """The element a segment path belongs to, for boundaries: tools[3].x -> "tools"."""
    head = path.split(".", 1)[0]
    return "tools" if head.startswith("tools") else head


def top_level_boundaries(tok: Tokens) -> list[tuple[int, str, str]]:
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


def element_texts(tok: Tokens) -> dict[str, str]:
    """The rendered text of each top-level element of a prompt (template glue excluded)."""
    parts: dict[str, list[str]] = {}
    for index, segment in enumerate(tok.prompt.segments):
        if segment.path != "template":
            parts.setdefault(top_level_element(segment.path), []).append(
                tok.prompt.segment_text(index))
    return {element: "".join(texts) for element, texts in parts.items()}
