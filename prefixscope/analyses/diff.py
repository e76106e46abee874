"""diff: the first divergent token of two requests, located in the request and explained.

"Tokenize this turn and the previous one and find the first token that differs" is
the most useful single step of a prompt-cache investigation. This module does it on
the prompt the upstream model saw (`prefixscope.tokens.tokens`: gateway profile +
chat template + the model's tokenizer), says in which logged segment the split is,
and why (`prefixscope.analyses.causes`).

Semantics (design.md §4), for A (earlier) and B (later) with token ids ``a``, ``b``
and block size ``bs``::

    a:  t0 t1 t2 ... t(d-1) | a_d ...          d = first i with a[i] != b[i]
    b:  t0 t1 t2 ... t(d-1) | b_d ...          (none when a is a prefix of b)

    reusable_tokens = floor(min(d, len(b) - 1) / bs) * bs    d := len(a) if append-only
    lost_tokens     = floor(min(len(a), len(b) - 1) / bs) * bs - reusable_tokens

An engine caches only full blocks and always recomputes the last prompt token, hence
``len(b) - 1``; ``lost_tokens`` is what B had to recompute of what A had cached.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from prefixscope.analyses.breakpoints import breakpoint_ends
from prefixscope.analyses.bucket import group_block_sizes
from prefixscope.analyses.causes import CAUSES, Cause, DivergenceSite, classify
from prefixscope.analyses.pool import worker_pool
from prefixscope.model import Request
from prefixscope.model.redaction import active
from prefixscope.parallel import Batch, Pool, effective_workers, runs
from prefixscope.prompt import RenderError, RenderOptions
from prefixscope.store import Store, reader
from prefixscope.tokenizers import load_tokenizer
from prefixscope.tokens.tokenize import Tokens, common_prefix_length, tokens_many
from prefixscope.tokens.turns import Turns

DEFAULT_BLOCK_SIZE = 16
DEFAULT_CONTEXT = 40


@dataclass(frozen=True, slots=True)
class Divergence:
    token: int  # index of the first differing token
    char_a: int  # offset of that token in A's rendered prompt
    char_b: int  # offset of that token in B's rendered prompt
    segment: str  # deepest segment path at the divergence (as logged)
    # A's and B's texts around the divergence (context chars each side); None: not made
    # (report's walk leaves them to `windowed`, for the pairs the report shows)
    text_a: str | None
    text_b: str | None
    context_start: int  # offset in both texts where text_a / text_b begin
    first_char: int  # first differing character (offset, same in both texts)
    token_a: str | None  # A's token at the split, decoded (None past A's end)
    token_b: str | None  # B's token at the split, decoded (None past B's end)

    def texts(self) -> tuple[str, str]:
        """(text_a, text_b), where they were made (`windowed`).

        Raises:
            ValueError: a divergence whose texts were left unmade.
        """
        if self.text_a is None or self.text_b is None:
            raise ValueError(f"the texts around token {self.token} were not made")
        return self.text_a, self.text_b


@dataclass(frozen=True, slots=True)
class PairDiff:
    a: str  # request id of the earlier request
    b: str  # request id of the later request
    session: str | None  # session both belong to
    tokens_a: int
    tokens_b: int
    first_divergence: Divergence | None  # None: append-only or identical
    block_size: int
    reusable_tokens: int
    lost_tokens: int
    cause: str  # one of diffcause.CAUSES
    detail: str  # the concrete evidence, one sentence
    approximate: bool = False  # counted with a stand-in tokenizer: counts are estimates
    block_size_source: str = "flag"  # "flag" | "inferred" (for B's group) | "default"
    observed_cached: int | None = None  # B's cached tokens as its log reports them
    # A's ``cache_control`` breakpoints (an Anthropic body's marks): the token end of each
    # marked block in A's rendered prompt, in order -- where A wrote cache entries
    breakpoints_a: tuple[int, ...] = ()

    @property
    def shortfall(self) -> int | None:
        """reusable − observed: cache B did not get although its prefix allowed it (an
        intact prefix that missed: eviction, expiry, the provider). None without usage."""
        if self.observed_cached is None:
            return None
        return self.reusable_tokens - self.observed_cached


@dataclass(frozen=True, slots=True)
class CauseTotal:
    pairs: int
    lost_tokens: int


@dataclass(frozen=True, slots=True)
class DiffTotals:
    pairs: int
    lost_tokens: int
    by_cause: dict[str, CauseTotal]
    skipped: int = 0  # pairs not diffed (a side without a body, or not renderable)
    skipped_reasons: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DiffReport:
    pairs: tuple[PairDiff, ...]
    totals: DiffTotals
    options: RenderOptions
    block_size: int | None  # the block size of every pair; None when groups differ
    block_size_source: str  # "flag" | "inferred" | "default" | "mixed" (groups differ)


def first_divergence_index(a: np.ndarray, b: np.ndarray) -> int | None:
    """The first index where a and b differ; None when a is a prefix of b (or equal)."""
    n = common_prefix_length(a, b)
    if n < min(len(a), len(b)):
        return n
    return None if len(a) <= len(b) else n


def reusable_tokens(d: int, len_b: int, block_size: int) -> int:
    return max(0, (min(d, len_b - 1) // block_size) * block_size)


def lost_tokens(len_a: int, len_b: int, reusable: int, block_size: int) -> int:
    return max(0, (min(len_a, len_b - 1) // block_size) * block_size - reusable)


def diff_tokens(ta: Tokens, tb: Tokens, a: Request, b: Request, *, block_size: int,
                context: int = DEFAULT_CONTEXT, session: str | None = None,
                compaction_link: bool = False, block_size_source: str = "flag",
                windows: bool = True) -> PairDiff:
    """Compare two tokenized requests (same options) and explain the divergence;
    `windows` False: its texts around the split are left unmade (`windowed` makes them)."""
    ids_a, ids_b = ta.ids, tb.ids
    d = first_divergence_index(ids_a, ids_b)
    identical = d is None and len(ids_a) == len(ids_b)
    effective = len(ids_a) if d is None else d
    reusable = reusable_tokens(effective, len(ids_b), block_size)
    lost = lost_tokens(len(ids_a), len(ids_b), reusable, block_size)
    divergence = None
    site = None
    if d is not None:
        divergence, site = _locate(ta, tb, d, context, windows)
    cause = classify(a, b, site, identical=identical, compaction_link=compaction_link,
                     what_if=ta.options.what_if)
    if cause.cause == "append-only":
        cause = _shrank(a, b) or cause
    switched = _model_change(a, b, ta, tb)
    if switched is not None:  # another model never shares a cache, whatever the tokens say
        cause, reusable = switched, 0
        lost = lost_tokens(len(ids_a), len(ids_b), 0, block_size)
    return PairDiff(
        a=a.id, b=b.id, session=session, tokens_a=len(ids_a), tokens_b=len(ids_b),
        first_divergence=divergence, block_size=block_size, reusable_tokens=reusable,
        lost_tokens=lost, cause=cause.cause, detail=cause.detail,
        approximate=ta.prompt.approximate or tb.prompt.approximate,
        block_size_source=block_size_source, observed_cached=b.usage.cached_tokens,
        breakpoints_a=breakpoint_ends(ta, a.body)
        if a.endpoint == "anthropic-messages" and isinstance(a.body, dict) else (),
    )


def _shrank(a: Request, b: Request) -> Cause | None:
    """A rebuilt B that extends A, where the log says B's prompt is shorter than A's: what
    A sent and the log cannot show (encrypted reasoning, a remote compaction item) was
    dropped, so the prefix was not unchanged (a Codex rollout: the Responses API drops the
    reasoning of earlier turns at each user turn, docs/formats/codex.md)."""
    before, now = a.usage.prompt_tokens, b.usage.prompt_tokens
    if before is None or now is None or now >= before:
        return None
    return Cause("history-rewrite", f"the log's prompt shrank ({before:,} → {now:,} tokens) "
                                    "while the rebuilt body extends A: something A sent that "
                                    "the log cannot show was dropped")


def _model_change(a: Request, b: Request, ta: Tokens, tb: Tokens) -> Cause | None:
    """The cause when the pair was sent to two models (or counted with two tokenizers)."""
    if a.model and b.model and a.model != b.model:
        return Cause("model-change", f"model {a.model} → {b.model}")
    if ta.prompt.tokenizer != tb.prompt.tokenizer:
        return Cause("model-change", f"counted with {ta.prompt.tokenizer} → "
                                     f"{tb.prompt.tokenizer} (model {a.model or 'not logged'}"
                                     f" → {b.model or 'not logged'})")
    return None


def _locate(ta: Tokens, tb: Tokens, d: int, context: int, windows: bool = True
            ) -> tuple[Divergence, DivergenceSite]:
    text_a, text_b = ta.prompt.text, tb.prompt.text
    char_a = int(ta.char_starts[d]) if d < len(ta) else len(text_a)
    char_b = int(tb.char_starts[d]) if d < len(tb) else len(text_b)
    first = min(char_a, char_b)
    limit = min(len(text_a), len(text_b))
    while first < limit and text_a[first] == text_b[first]:
        first += 1
    seg_a = ta.prompt.segments[ta.prompt.segment_at(min(first, max(len(text_a) - 1, 0)))]
    seg_b = tb.prompt.segments[tb.prompt.segment_at(min(first, max(len(text_b) - 1, 0)))]
    segment = seg_b.path
    if (segment == "template" or first >= len(text_b)) and seg_a.path != "template":
        segment = seg_a.path
    tok_a, tok_b = load_tokenizer(ta.prompt.tokenizer), load_tokenizer(tb.prompt.tokenizer)
    divergence = Divergence(
        token=d, char_a=char_a, char_b=char_b, segment=segment, text_a=None, text_b=None,
        context_start=max(0, first - context), first_char=first,
        token_a=tok_a.decode([int(ta.ids[d])]) if d < len(ta) else None,
        token_b=tok_b.decode([int(tb.ids[d])]) if d < len(tb) else None,
    )
    if windows:
        divergence = windowed(divergence, text_a, text_b, context)
    site = DivergenceSite(segment=segment, text_a=text_a, text_b=text_b, char=first,
                          segment_end_a=seg_a.char_end, segment_end_b=seg_b.char_end)
    return divergence, site


def windowed(divergence: Divergence, text_a: str, text_b: str, context: int) -> Divergence:
    """`divergence` with its texts: A's and B's prompts (`text_a`, `text_b`) from its
    `context_start` to `context` characters past its first differing character, masked
    around that window, then cut (masking keeps offsets): a secret across the window's
    edge does not show its inner part. A function of the two prompts, the divergence's
    offsets and the run's redactor: made beside the diff or later, from the same prompts,
    it is the same."""
    masked = active()
    start, end = divergence.context_start, divergence.first_char + context
    return replace(divergence, text_a=masked.window(text_a, start, end),
                   text_b=masked.window(text_b, start, end))


def diff_requests(a: Request, b: Request, options: RenderOptions, *,
                  block_size: int = DEFAULT_BLOCK_SIZE, context: int = DEFAULT_CONTEXT,
                  session: str | None = None, compaction_link: bool = False) -> PairDiff:
    """Render, tokenize and compare two requests.

    Raises:
        RenderError: a request cannot be rendered (no body, unknown profile).
        TokenizerError: the tokenizer cannot be loaded offline.
    """
    ta, tb = tokens_many([a, b], options)
    return diff_tokens(ta, tb, a, b, block_size=block_size, context=context, session=session,
                       compaction_link=compaction_link)


@dataclass(frozen=True, slots=True)
class PairRef:
    """A consecutive pair of one session, as the store's threading found it."""

    a: Request
    b: Request
    session: str | None
    compaction: bool


@dataclass(frozen=True, slots=True)
class BlockSizes:
    """The block size a pair is diffed with: `--block-size`, else the one inferred for the
    (source, endpoint, model) group of its later request, as `bucket` infers it
    (`bucket.group_block_evidence`), else `default`."""

    flag: int | None = None
    groups: Mapping[tuple[str, str, str | None], int] = field(default_factory=dict)
    default: int = DEFAULT_BLOCK_SIZE

    def of(self, request: Request) -> tuple[int, str]:
        """(block size, "flag" | "inferred" | "default") for a pair whose later request is
        `request`."""
        if self.flag:
            return self.flag, "flag"
        inferred = self.groups.get((request.source_format, request.endpoint, request.model))
        return (inferred, "inferred") if inferred else (self.default, "default")


def resolve_block_sizes(flag: int | None, store: Store | None,
                        default: int = DEFAULT_BLOCK_SIZE) -> BlockSizes:
    """The flag, else the block size of each (source, endpoint, model) group of the store
    (groups whose cached tokens tell none get `default`)."""
    if flag or store is None:
        return BlockSizes(flag or None, {}, default)
    return BlockSizes(None, {key: ev.block_size for key, ev in group_block_sizes(store).items()
                             if ev.block_size}, default)


def _report_block_size(results: Iterable[PairDiff], sizes: BlockSizes) -> tuple[int | None, str]:
    """The report's block size and its source: the one every pair used, else (None,
    "mixed"); without pairs, what a pair would get if the store holds one group size."""
    used = {(p.block_size, p.block_size_source) for p in results}
    if len(used) == 1:
        return next(iter(used))
    if used:
        return None, "mixed"
    if sizes.flag:
        return sizes.flag, "flag"
    distinct = set(sizes.groups.values())
    if not distinct:
        return sizes.default, "default"
    return (distinct.pop(), "inferred") if len(distinct) == 1 else (None, "mixed")


def block_size_breakdown(report: DiffReport) -> list[tuple[int, str, int]]:
    """(block size, source, pairs) of every block size the report's pairs used, most
    pairs first."""
    counts = Counter((p.block_size, p.block_size_source) for p in report.pairs)
    return [(bs, src, n) for (bs, src), n in counts.most_common()]


def diff_pairs(pairs: Iterable[PairRef], options: RenderOptions, *,
               block_size: int | BlockSizes,
               context: int = DEFAULT_CONTEXT, block_size_source: str = "flag",
               progress: Callable[[int], None] | None = None) -> DiffReport:
    """Diff every pair; pairs that cannot be rendered are counted with their reason.

    `block_size`: one block size for every pair (its source is `block_size_source`), or
    `BlockSizes` choosing one per pair.

    Raises:
        RenderError: an unknown gateway profile or what-if (`render.check_options`).
        TokenizerError: the tokenizer cannot be loaded offline.
    """
    from prefixscope.prompt import check_options
    from prefixscope.tokenizers import AUTO, load_tokenizer

    check_options(options)  # a bad option is one error, not one skip per pair
    if options.tokenizer != AUTO:  # auto: each family's tokenizer loads when first used
        load_tokenizer(options.tokenizer)
    sizes = block_size if isinstance(block_size, BlockSizes) else BlockSizes(block_size)
    results: list[PairDiff] = []
    skipped: dict[str, int] = defaultdict(int)
    cache: dict[str, Tokens] = {}
    failed: dict[str, RenderError] = {}
    turns = Turns(options)  # each B rendered and tokenized from its A's
    done = 0
    for chunk in _chunks(pairs, PAIR_BATCH):
        # Tokenize the chunk's new requests together: their new pieces go to the
        # tokenizer as one parallel batch.
        wanted: dict[str, tuple[Request, str | None]] = {}
        for pair in chunk:
            for request, prev in ((pair.a, None), (pair.b, pair.a.id)):
                if request.body is not None and request.id not in cache \
                        and request.id not in failed and request.id not in wanted:
                    wanted[request.id] = (request, prev)
        requests = [request for request, _ in wanted.values()]
        for request, tok in zip(requests, turns.tokens_many(
                requests, [prev for _, prev in wanted.values()]), strict=True):
            if isinstance(tok, RenderError):
                failed[request.id] = tok
            else:
                cache[request.id] = tok
        for pair in chunk:
            if progress:
                progress(done)
            done += 1
            if pair.a.body is None or pair.b.body is None:
                skipped["a request has no body in the log"] += 1
                continue
            error = failed.get(pair.a.id) or failed.get(pair.b.id)
            if error is not None:
                skipped[f"cannot render: {_without_ids(str(error), pair)}"] += 1
                continue
            bs, source = (sizes.of(pair.b) if isinstance(block_size, BlockSizes)
                          else (block_size, block_size_source))
            results.append(diff_tokens(cache[pair.a.id], cache[pair.b.id], pair.a, pair.b,
                                       block_size=bs, context=context,
                                       session=pair.session,
                                       compaction_link=pair.compaction,
                                       block_size_source=source))
        # consecutive pairs: only the latest requests are needed again
        keep = {pair.b.id for pair in chunk}
        cache = {rid: t for rid, t in cache.items() if rid in keep}
        failed = {rid: e for rid, e in failed.items() if rid in keep}
        turns.keep_only(keep)
    if isinstance(block_size, BlockSizes):
        return assemble_report(results, skipped, options, sizes)
    return DiffReport(tuple(results), totals(results, skipped), options, block_size,
                      block_size_source)


def assemble_report(results: Iterable[PairDiff], skipped: dict[str, int],
                    options: RenderOptions, sizes: BlockSizes) -> DiffReport:
    """The report of pairs diffed with `sizes` (by `diff_pairs`, or in parts elsewhere:
    the distributed runner), their totals and the report's block size."""
    results = tuple(results)
    report_bs, report_source = _report_block_size(results, sizes)
    return DiffReport(results, totals(results, skipped), options, report_bs, report_source)


PAIR_BATCH = 16  # pairs whose requests are tokenized together


def _chunks(pairs: Iterable[PairRef], size: int) -> Iterable[list[PairRef]]:
    chunk: list[PairRef] = []
    for pair in pairs:
        chunk.append(pair)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _without_ids(message: str, pair: PairRef) -> str:
    """A skip reason that groups: the pair's own request ids taken out of the message."""
    line = message.splitlines()[0] if message else "unknown error"
    for request_id in (pair.a.id, pair.b.id):
        if request_id:
            line = line.replace(f"request {request_id}", "a request")
    return line


def totals(results: Iterable[PairDiff], skipped: dict[str, int] | None = None) -> DiffTotals:
    by_cause: dict[str, list[int]] = {}
    count = lost = 0
    for r in results:
        count += 1
        lost += r.lost_tokens
        entry = by_cause.setdefault(r.cause, [0, 0])
        entry[0] += 1
        entry[1] += r.lost_tokens
    ordered = {c: CauseTotal(*by_cause[c]) for c in CAUSES if c in by_cause}
    skipped = skipped or {}
    return DiffTotals(count, lost, ordered, sum(skipped.values()), dict(skipped))


_PAIRS_PER_LOAD = 64  # pairs whose requests are loaded from the store in one query


def session_pair_refs(store: Store, session: str | None) -> tuple[int, Iterator[PairRef]]:
    """(number of pairs, a generator of PairRef loading each request once, in pair order)
    of one session (an id or a unique prefix of one) or, with None, of every session (a
    call two sources logged is paired once, in the session of the copy kept).

    Raises:
        LookupError: no such session, or the prefix names more than one.
    """
    rows = session_pair_rows(store, session)
    return len(rows), _pair_refs(store, rows)


PairRow = tuple[str, str, str, bool]  # (earlier id, later id, session, compaction)


def session_pair_rows(store: Store, session: str | None) -> list[PairRow]:
    """The threaded pairs `session_pair_refs` loads, as store rows (ordered by session).

    Raises:
        LookupError: no such session, or the prefix names more than one.
    """
    if session is not None:
        matches = store.sessions_matching(session)
        if not matches:
            raise LookupError(f"no session {session!r} in the store")
        if len(matches) > 1:
            raise LookupError(f"session {session!r} is ambiguous: {', '.join(matches)}")
        session = matches[0]
    # --all: a pair whose later request is a second log of a call (duplicate_of) is diffed
    # in the session of the copy kept, once
    return store.session_pairs(session, once=session is None)


def _pair_refs(store: Store, rows: Sequence[PairRow]) -> Iterator[PairRef]:
    # One query per chunk of pairs (a query per request is ~5 ms on a big store);
    # a chunk holds at most 2 * _PAIRS_PER_LOAD requests with their bodies.
    for start in range(0, len(rows), _PAIRS_PER_LOAD):
        chunk = rows[start:start + _PAIRS_PER_LOAD]
        loaded = store.get_many(rid for a, b, _, _ in chunk for rid in (a, b))
        for a, b, s, comp in chunk:  # threading only links stored requests
            yield PairRef(loaded[a], loaded[b], s, comp)


def diff_two(a: Request, b: Request, options: RenderOptions, store: Store | None, *,
             block_size: int | None = None, context: int = DEFAULT_CONTEXT) -> DiffReport:
    """Diff two requests (`store`, when given, supplies the block size inferred for B's
    group).

    Raises:
        RenderError, TokenizerError: a request cannot be rendered with `options`.
    """
    bs, source = resolve_block_sizes(block_size, store).of(b)
    ta, tb = tokens_many([a, b], options)
    pair = diff_tokens(ta, tb, a, b, block_size=bs, context=context, block_size_source=source)
    return DiffReport((pair,), totals([pair]), options, bs, source)


def diff_sessions(store: Store, session: str | None, options: RenderOptions, *,
                  block_size: int | None = None, context: int = DEFAULT_CONTEXT,
                  progress: Callable[[int, int], None] | None = None,
                  workers: int | None = 1) -> DiffReport:
    """Diff every consecutive pair of one session (None: of every session).

    `progress(done, total)` is called as pairs are diffed. `workers`: processes diffing
    whole sessions (None: the machine's cores once there are `AUTO_MIN_PAIRS` pairs); the
    report is the same whatever the number (`--workers 1` runs in this process).

    Raises:
        LookupError: no such session, or an ambiguous session prefix.
        RenderError, TokenizerError: a bad option (a request that cannot be rendered is
            counted as skipped instead).
    """
    rows = session_pair_rows(store, session)
    n = effective_workers(workers, len(rows), auto_minimum=AUTO_MIN_PAIRS)
    if n <= 1 or not store.read_only:  # a writer holds the file: workers cannot open it
        sizes = resolve_block_sizes(block_size, store)
        step = None if progress is None else (lambda done: progress(done, len(rows)))
        return diff_pairs(_pair_refs(store, rows), options, block_size=sizes,
                          context=context, progress=step)
    with worker_pool(n) as pool:
        return start_diff(store, rows, options, pool, block_size=block_size,
                          context=context).result(progress)


AUTO_MIN_PAIRS = 500  # pairs below which the default --workers runs in this process
_RUNS_PER_WORKER = 4  # sessions differ in length: smaller runs even out the workers


@dataclass(frozen=True, slots=True)
class _DiffTask:
    """A run of whole sessions for one worker: the store's file and the pairs' rows."""

    file: str
    rows: tuple[PairRow, ...]
    options: RenderOptions
    sizes: BlockSizes
    context: int


def _diff_task(task: _DiffTask) -> DiffReport:
    store = reader(task.file)
    return diff_pairs(_pair_refs(store, task.rows), task.options, block_size=task.sizes,
                      context=task.context)


@dataclass(frozen=True, slots=True)
class PendingDiff:
    """A diff running in a pool's workers; `result()` waits and merges the runs."""

    batch: Batch[DiffReport]
    count: int  # pairs in all
    options: RenderOptions
    sizes: BlockSizes

    def result(self, progress: Callable[[int, int], None] | None = None) -> DiffReport:
        """The report `diff_pairs` gives over every pair in one process."""
        step = None if progress is None else (lambda done: progress(done, self.count))
        parts = self.batch.results(step)
        results = [pair for part in parts for pair in part.pairs]
        skipped: dict[str, int] = {}
        for part in parts:  # first seen first, as one process counts them
            for reason, n in part.totals.skipped_reasons.items():
                skipped[reason] = skipped.get(reason, 0) + n
        return assemble_report(results, skipped, self.options, self.sizes)


def start_diff(store: Store, rows: Sequence[PairRow], options: RenderOptions, pool: Pool, *,
               block_size: int | None = None,
               context: int = DEFAULT_CONTEXT) -> PendingDiff:
    """Start diffing `rows` (`session_pair_rows`) in `pool`'s workers, runs of whole
    sessions each; the store must be open read-only (the workers open its file too).

    Raises:
        RenderError: an unknown gateway profile or what-if (`render.check_options`).
    """
    from prefixscope.prompt import check_options

    check_options(options)  # a bad option is one error, not one per worker
    sizes = resolve_block_sizes(block_size, store)
    sessions: list[list[PairRow]] = []
    for row in rows:
        if not sessions or sessions[-1][-1][2] != row[2]:
            sessions.append([])
        sessions[-1].append(row)
    cuts = runs([len(s) for s in sessions], pool.workers * _RUNS_PER_WORKER)
    tasks = [_DiffTask(store.file, tuple(r for s in sessions[cut.start:cut.stop] for r in s),
                       options, sizes, context) for cut in cuts]
    batch = pool.submit(_diff_task, tasks, [len(t.rows) for t in tasks])
    return PendingDiff(batch, len(rows), options, sizes)
