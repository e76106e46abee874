"""Everything the finders read, gathered once: each analysis runs one time over the store.

`gather` runs, in order: the usage summary, bucket (overall, and by each dimension the
log distinguishes), the diff of every consecutive pair (with `workers`, in worker
processes forked after bucket and the usage lint; walked in this process, it goes before
bucket, whose spike explanations take the tokens it made), the segments census, the
usage lint, a cache replay (the engine chosen from the log when not given, its
parameters fitted to the observed cached tokens when the log has them, priced what-ifs
for the breakages the diff found) and the engine logs. A step that cannot run (no
bodies, no usage, no engine fitting the log) leaves its field None and says why in
`notes`.

The jobs are modules of their own: the report's options and the `Evidence` returned
(`values`, below every module that reads them), the engine each log file is replayed with
(`engines.choose`), the cache domains, their block sizes and their replays (`domains`),
where the what-ifs' inputs are made (`whatif_pools`) and the ledger over the evidence
(`ledgering`); this module runs them in order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from prefixscope.analyses.bucket import (
    BucketReport,
    BucketTotals,
    bucket_store,
    group_count,
    spike_samples,
)
from prefixscope.analyses.diff import (
    AUTO_MIN_PAIRS,
    DiffReport,
    resolve_block_sizes,
    session_pair_rows,
)
from prefixscope.analyses.engine_cache import EngineLogAnalysis, analyze_engine_logs
from prefixscope.analyses.onepass import (
    Domain,
    PassSetup,
    PendingPass,
    StageRunner,
    one_pass,
    start_pass,
)
from prefixscope.analyses.pool import worker_pool
from prefixscope.analyses.segments import SegmentsReport, segments_store
from prefixscope.analyses.simulate import (
    AUTO_MIN_REPLAY_REQUESTS,
    Remembered,
    SimulateOptions,
)
from prefixscope.analyses.simulate.prepare import Links
from prefixscope.analyses.usage_lint import UsageLint, lint_usage
from prefixscope.findings.domains import (
    block_size_notes,
    plan_domains,
    priced_what_ifs,
    replay_domains,
    swept_bases,
)
from prefixscope.findings.ledger import blamed_segment, break_kind
from prefixscope.findings.ledgering import cache_inclusive_input, ledger_of
from prefixscope.findings.policy import price_policy, request_kinds
from prefixscope.findings.rebuild import not_rebuilt, rendered_tokens
from prefixscope.findings.ttl_choice import ttl_what_ifs
from prefixscope.findings.values import Evidence, Plans, Progress, Replay, ReportOptions
from prefixscope.findings.whatif_pools import ready_what_ifs, what_if_runner
from prefixscope.model import UsageRecord
from prefixscope.model.protocols import makers
from prefixscope.model.redaction import active
from prefixscope.model.whatifs import POLICY
from prefixscope.parallel import Pool, effective_workers, forks, release_freed_memory
from prefixscope.store import Store, reader
from prefixscope.store.kinds import bodies_without_last_message, request_roles
from prefixscope.store.store import UsageSummary
from prefixscope.tokens import Tokens

# Dimensions a hit rate is split by to find the part of the traffic that caches badly.
SPLIT_DIMENSIONS = ("source", "endpoint", "model", "client", "channel")
_BUCKET_BY = ("source",)  # the bucket whose spikes are explained


def gather(store: Store, options: ReportOptions, progress: Progress | None = None,
           ingest: Any = None, workers: int | None = 1,
           runner: StageRunner | None = None, with_census: bool = False,
           windows: bool = True) -> Evidence:
    """Run every analysis once over `store` (and the engine logs of `options`).

    `workers` > 1 (None: the machine's cores on a store with `AUTO_MIN_PAIRS` pairs): the
    diff of every pair runs in that many processes, whole sessions each (forked once this
    process ran bucket and the usage lint: see `_Usage`), and the cache replay's
    independent replays (a fit's candidates, the capacity curve, what-ifs) run in as many
    forked processes, and the walk's processes make every what-if's input right after
    the walk, by runs of sessions; the evidence is the same whatever the number.
    `runner`: the per-session stages (the walk rendering each request once for the diff
    and each domain's replay input, the what-ifs' renders) run through it instead (Ray),
    the rest here; the evidence is the same.
    `with_census`: the segments census is in the evidence even when no finding reads it
    (`census_read`; a bundle's evidence.json carries it), else only when one does.
    `windows` False: the diff's divergences come without their texts around the split
    (`diff.windowed` makes them; `build.shown_windows` those a report shows).

    Raises:
        RenderError, TokenizerError: a bad render option (checked before anything runs).
        ValueError, OSError: an engine log that cannot be read (one line).
    """
    step = progress or (lambda _name: None)
    notes: list[str] = []
    engine_log = None
    if options.engine_logs:
        step("engine logs")
        engine_log = analyze_engine_logs(options.engine_logs)
    step("usage")
    usage = store.summary_once()
    if not usage.requests:
        notes.append("no model calls in the logs: engine logs only")
        return Evidence(usage, (), BucketReport((), (), BucketTotals(0, 0, 0, None, 0), None,
                                                "default"), (), None, (), None, {}, (),
                        None, engine_log, ingest, (), (), tuple(notes))
    records = tuple(store.usage_records())
    pending = None
    pool = None
    early = None
    replay_workers = effective_workers(workers, store.count(),
                                       auto_minimum=AUTO_MIN_REPLAY_REQUESTS)
    plans = plan_domains(store, options, records,
                         engine_log.effective_block_size if engine_log else None)
    if options.block_size is None:  # else the block size is the one given
        notes += block_size_notes(engine_log, plans[1])
    setup = replace(_pass_setup(store, options, plans[0]), windows=windows)
    # workers open the store's file: read-only only; a runner walks the log its own way
    if runner is None and store.body_count() and store.read_only:
        n = effective_workers(workers, len(setup.pairs), auto_minimum=AUTO_MIN_PAIRS)
        if n > 1:
            early = _usage_steps(store, options, step)
            pool = worker_pool(n, _tokenizers(options, records))
            # the bodies and parts read once, before the fork: the workers' runs of
            # sessions (the walk's, the what-ifs') and the census read them from memory;
            # not held, each worker reads the file through a database of its own
            held = store.hold_stored()
            pending = start_pass(store, setup, pool, diff=True, own_blocks=not held)
    try:
        return _gather(_Started(store, options, step, ingest, runner, replay_workers, notes,
                                engine_log, usage, records, plans, setup, with_census,
                                pending, pool, early))
    finally:
        if pool is not None:
            pool.close(cancel=True)
            store.let_go_stored()


def _census(store: Store, options: ReportOptions) -> tuple[SegmentsReport, ...]:
    """The segments census of the whole store (`segments_store`, without token positions)."""
    return tuple(segments_store(store, (), options=options.render, with_tokens=False))


def _census_aside(store: Store, options: ReportOptions
                  ) -> Callable[[], tuple[SegmentsReport, ...]] | None:
    """`_census(store, options)` begun in a process forked now, its result when the
    function returned is called (None: none can be forked that reads the store as this
    process does: a store open for writing, or no fork). The child opens the same file
    read-only (`reader`) and reads the bodies this process holds (`Store.hold_stored`:
    held for the processes it forks); the census reads nothing else. (A pool of one
    process is none: two are forked, one left idle.)"""
    if not (store.read_only and forks()):
        return None
    pool = worker_pool(2)
    batch = pool.submit(_census_task, [(store.file, options)])

    def taken() -> tuple[SegmentsReport, ...]:
        try:
            return batch.results()[0]
        finally:
            pool.close()
    return taken


def _census_task(task: tuple[str, ReportOptions]) -> tuple[SegmentsReport, ...]:
    file, options = task
    return _census(reader(file), options)


def _tokenizers(options: ReportOptions, records: tuple[UsageRecord, ...]) -> set[str]:
    """The tokenizers the walk renders `records` with (loaded before its workers fork)."""
    from prefixscope.tokenizers import choose_tokenizer

    return {choose_tokenizer(options.render.tokenizer, model).spec
            for model in {r.model for r in records}}


def _pass_setup(store: Store, options: ReportOptions,
                plans: dict[str, tuple[str, int | None, list[str]]]) -> PassSetup:
    """What the walk over the store needs: the diff's pairs and block sizes, each planned
    cache domain's prepare options (the render options checked first, as diff does)."""
    from prefixscope.prompt import check_options
    from prefixscope.tokenizers import AUTO, load_tokenizer

    if store.body_count():
        check_options(options.render)  # a bad option is one error, not one skip per pair
        if options.render.tokenizer != AUTO:
            load_tokenizer(options.render.tokenizer)
    domains = tuple(Domain(domain, SimulateOptions(
        engine=engine, unit=unit, capacity_tokens=options.capacity_tokens,
        render=options.render, source_files=tuple(files)))
        for domain, (engine, unit, files) in plans.items())
    pairs = tuple(session_pair_rows(store, None)) if store.body_count() else ()
    return PassSetup(options.render, resolve_block_sizes(options.block_size, store), domains,
                     Links.of(store), pairs, redactor=active())


@dataclass(frozen=True, slots=True)
class _Started:
    """One `gather` call as `_gather` goes on with it: what it was asked, what it read and
    planned before the walk, and the walk it started in worker processes."""

    store: Store
    options: ReportOptions
    step: Progress
    ingest: Any  # ingest.IngestResult, when the report ingested the logs
    runner: StageRunner | None  # the per-session stages' runner (Ray), else this process
    replay_workers: int  # processes for the replays' independent runs
    notes: list[str]  # said so far (each step adds its own)
    engine_log: EngineLogAnalysis | None
    usage: UsageSummary
    records: tuple[UsageRecord, ...]
    plans: Plans  # the cache domains (`domains.plan_domains`)
    setup: PassSetup  # what the walk needs
    with_census: bool  # the segments census whether or not a finding reads it
    pending: PendingPass | None = None  # the walk running in `pool`'s workers
    pool: Pool | None = None
    early: _Usage | None = None  # bucket's and the usage lint's, run before the fork


@dataclass(frozen=True, slots=True)
class _Usage:
    """Bucket's reports (by source, and by each dimension the log splits) and the usage
    lint: what `gather` finds from the usage columns alone.

    With workers walking, this process runs them before it forks them: their steps read
    every usage record (`Store.usage_records` hands each a list of its own) and allocate
    beside them, and each object they touch after the fork -- a reference count written
    -- copies the page it is on into this process while the workers still share it
    (copy-on-write): on the 1 GiB Codex store, run beside the walk, they took this
    process's private memory up 99-107 MB. Before the fork they take the same CPU (~1 s
    a GiB there), before the workers start instead of beside them."""

    bucket: BucketReport
    by_dimension: tuple[BucketReport, ...]
    lint: UsageLint


def _buckets(store: Store, options: ReportOptions, step: Progress,
             rendered: dict[str, Tokens] | None) -> tuple[BucketReport, list[BucketReport]]:
    """Bucket by source (its spikes explained; `rendered`: the samples' tokens a walk in
    this process made) and by each other dimension the log splits."""
    step("bucket")
    # By source: each log keeps its own block size (a gateway's and an agent's upstreams
    # differ) and its spikes are explained against its own prompts.
    bucket = bucket_store(store, _BUCKET_BY, block_size=options.block_size,
                          options=options.render, rendered=rendered)
    by_dimension = [bucket] if len(bucket.groups) > 1 else []
    for dim in SPLIT_DIMENSIONS[1:]:
        if group_count(store, (dim,)) > 1:  # one group: nothing to split (not built)
            by_dimension.append(bucket_store(store, (dim,), block_size=options.block_size,
                                             explain=False))
    return bucket, by_dimension


def _lint(store: Store, step: Progress, bucket: BucketReport) -> UsageLint:
    step("usage lint")
    return lint_usage(store, bucket.block_size if bucket.block_size_source
                      in ("inferred", "forced") else None)


def _usage_steps(store: Store, options: ReportOptions, step: Progress) -> _Usage:
    bucket, by_dimension = _buckets(store, options, step, None)
    return _Usage(bucket, tuple(by_dimension), _lint(store, step, bucket))


def _gather(started: _Started) -> Evidence:
    """Every step after the plan (module docstring), in order, over `started`."""
    store, options, step, notes = started.store, started.options, started.step, started.notes
    records, setup, pending, pool = started.records, started.setup, started.pending, started.pool
    runner, plans = started.runner, started.plans
    passed = None  # every request rendered once: the diff and each domain's replay input
    if store.body_count() and pending is None and runner is None:
        # The walk runs in this process: first, so that the spikes' samples it renders
        # are taken by bucket's explainer as they are, not rendered again
        step("diff")
        passed = one_pass(store, replace(setup, keep=frozenset(spike_samples(
            store, _BUCKET_BY, block_size=options.block_size))))
    early = started.early
    if early is not None:
        bucket, by_dimension = early.bucket, list(early.by_dimension)
    else:
        bucket, by_dimension = _buckets(store, options, step, passed.kept if passed else None)
    if passed is not None:
        passed = replace(passed, kept={})  # (the samples' tokens, let go)
    diff = None
    segments: tuple[SegmentsReport, ...] = ()
    if store.body_count():
        if passed is None and runner is not None:  # (without one: walked above)
            step("diff")
            passed = runner.walk(store, setup)
        if passed is not None:
            diff = passed.diff
        # With workers walking, the census is taken once their walk says it is read
        # (below), unless it is wanted whatever the walk finds: then now, meanwhile.
        if started.with_census or (pending is None and census_read(diff)):
            step("segments")
            segments = _census(store, options)
    else:
        notes.append("no request bodies in the log: where turns diverge cannot be seen "
                     "(usage and replay only)")
    usage_lint = early.lint if early is not None else _lint(store, step, bucket)
    ready: dict[str, dict[str, list[Any]]] = {}
    ahead: dict[str, Remembered] = {}  # each domain's base sweep, made already
    if pending is not None and pool is not None:  # the workers walked the log meanwhile
        step("diff")
        # what the census's queries freed (DuckDB's allocator keeps it), handed back
        # before this process waits out the walk beside the workers
        release_freed_memory()
        passed = pending.result(store)
        diff = passed.diff
        # The workers make the what-ifs' input; then they go: idle, they would hold their
        # memory through the replays. Meanwhile each domain's base sweep is staged here
        # (`swept_bases`: its requests given to the sweep), which its replay would make
        # first with a core idle (it reads only the walk's entries); it is made once the
        # workers are gone (most of its memory: not beside theirs), and the census, only
        # where read (as without workers), is taken beside that in a process forked then.
        # (Taken during the walk, the census cost its CPU on every log and was thrown away
        # where no finding reads it: the Codex rollouts.)
        wanted = not started.with_census and census_read(diff)
        if wanted:
            step("segments")
        walked = passed
        bases: list[Callable[[], dict[str, Remembered]]] = []

        def meanwhile() -> None:
            bases.append(swept_bases(options, plans, walked))
        ready = ready_what_ifs(store, options, setup.links, passed, plans,
                               priced_what_ifs(diff, options), pool, meanwhile=meanwhile)
        pool.close()
        aside = _census_aside(store, options) if wanted else None
        try:
            if bases:
                ahead = bases[0]()
        finally:
            if wanted:
                segments = aside() if aside is not None else _census(store, options)
        store.let_go_stored()  # (a later read of a body queries the store)
        # the blocks DuckDB read for the workers (`hold_stored`'s count: the bodies' and
        # parts' columns), which this process would hold to the end
        store.let_go_cache()
        release_freed_memory()  # those, the census's, the merge's and the sweeps' garbage
    if passed is None:  # no bodies: the replay's input from usage and traces alone
        passed = one_pass(store, setup, diff=False)
    step("replay")
    workers = started.replay_workers
    simulate, what_if_of, replays, chosen = replay_domains(
        store, options, records, diff, notes, plans, passed, workers,
        what_if_runner(store, runner, workers), setup.links, ready, ahead)
    step("ledger")
    inclusive = cache_inclusive_input(records, replays, store.lacking_parts())
    if inclusive:
        fixed = set(inclusive)
        maker = makers([r.endpoint for r in records if r.id in fixed])
        notes.append(f"{len(inclusive):,} {maker}-protocol calls report input_tokens that "
                     "already include their cache reads: the ledger counts their prompt as "
                     "input_tokens alone (the log's sum counts the reads twice)")
        records = tuple(replace(r, prompt_tokens=(r.prompt_tokens or 0) - (r.cached_tokens or 0)
                                - (r.cache_write_tokens or 0)) if r.id in fixed else r
                        for r in records)
    events = store.session_events()
    rendered = rendered_tokens(diff.pairs if diff is not None else (),
                               (sim for replay in replays for sim in replay.report.per_request),
                               records)
    unrebuilt = not_rebuilt(records, rendered, store.lacking_parts())
    extended = store.extended_retention()
    ledger = ledger_of(records, diff, replays, simulate, bucket, chosen, options, events,
                       unrebuilt, extended)
    ttl = ttl_what_ifs(ledger, records, ledger.prices)
    policy = price_policy(ledger, records, request_kinds(
        request_roles(store), bodies_without_last_message(store)),
        [rid for rid, parts in store.lacking_parts().items() if "system" in parts]) \
        if POLICY in options.what_if else None
    if ledger.money is not None and ledger.money.unknown_models:
        shown = ", ".join(ledger.money.unknown_models[:5])
        notes.append(f"no price for {len(ledger.money.unknown_models)} model(s) ({shown}): "
                     "their calls are not in the dollar figures (self-hosted: "
                     "--price-per-mtok)")
    return Evidence(started.usage, records, bucket, tuple(by_dimension), diff, segments,
                    simulate, what_if_of, tuple(store.session_origins()), usage_lint,
                    started.engine_log, started.ingest, tuple(store.truncated_ids()), replays,
                    tuple(notes), ledger,
                    inclusive, ttl, options.what_if, events, store.provider_verdicts(),
                    rendered, unrebuilt, chosen, extended, policy=policy)


def census_read(diff: DiffReport | None) -> bool:
    """Does a finding read the segments census over this diff? Only the breakage finder
    does (`finders.breakage`: each segment's change rate, for a group of breaks blamed on
    a segment); with no break blamed on one, the census (a quarter of a 2 MB Codex
    rollout's report) changes no answer and is not taken."""
    if diff is None:
        return False
    for pair in diff.pairs:
        kind = break_kind(pair)
        if kind is not None and blamed_segment(kind, pair) is not None:
            return True
    return False


def relabel(ev: Evidence, options: ReportOptions) -> Evidence:
    """`ev` with its ledger, prices and TTL what-ifs computed again from its own parts
    (the pairs' divergences, the replays, the usage, the recorded events), priced as
    `options` asks: a bundle's evidence, whose text-dependent parts were found where the
    prompts are (`findings.bundle`)."""
    ledger = ledger_of(ev.records, ev.diff, ev.replays, ev.simulate, ev.bucket, dict(ev.chosen),
                       options, ev.events, ev.not_rebuilt, ev.extended)
    ttl = ttl_what_ifs(ledger, ev.records, ledger.prices)
    return replace(ev, ledger=ledger, ttl_what_ifs=ttl,
                   requested_what_if=options.what_if or ev.requested_what_if)


__all__ = ["SPLIT_DIMENSIONS", "Evidence", "Progress", "Replay", "ReportOptions", "census_read",
           "gather", "relabel"]
