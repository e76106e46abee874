"""Everything the finders read, gathered once: each analysis runs one time over the store.

`gather` runs, in order: the usage summary, bucket (overall, and by each dimension the
log distinguishes), the diff of every consecutive pair (with `workers`, in worker
processes while this one runs the next two), the segments census, the usage lint, a cache
replay (the engine chosen from the log when not given, its parameters fitted to the
observed cached tokens when the log has them, priced what-ifs for the breakages the diff
found) and the engine logs. A step that cannot run (no bodies, no usage, no engine fitting
the log) leaves its field None and says why in `notes`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from prefixscope.analyses.bucket import BucketReport, BucketTotals, bucket_store
from prefixscope.analyses.diff import (
    AUTO_MIN_PAIRS,
    DiffReport,
    resolve_block_sizes,
    session_pair_rows,
)
from prefixscope.analyses.engine_log import EngineLogAnalysis, analyze_engine_logs
from prefixscope.analyses.onepass import (
    Domain,
    PassResult,
    PassSetup,
    PendingPass,
    StageRunner,
    WhatIfJob,
    WhatIfRunner,
    one_pass,
    pool_what_ifs,
    start_pass,
    what_if_pass,
    what_if_passes,
)
from prefixscope.analyses.pool import worker_pool
from prefixscope.analyses.prices import Pricer, price_all
from prefixscope.analyses.segments import SegmentsReport, segments_store
from prefixscope.analyses.simulate import (
    AUTO_MIN_REPLAY_REQUESTS,
    SimulateError,
    SimulateOptions,
    SimulateReport,
    WhatIfInput,
    fit_parameters,
    merge_replays,
    remembered_replays,
    replay_prepared,
    sweep_ahead,
)
from prefixscope.analyses.simulate.prepare import Links, prepare_what_if
from prefixscope.analyses.usage_lint import UsageLint, lint_usage
from prefixscope.engines import ENGINES
from prefixscope.engines.choose import (
    AUTO,
    choose_engine,
    model_family_engine,
    unmodelled_family,
)
from prefixscope.findings.breakdown import usage_ledger
from prefixscope.findings.ledger import Ledger, ReplayedRequest, build_ledger, rules_for
from prefixscope.findings.policy import Policy, price_policy, request_kinds
from prefixscope.findings.rebuild import not_rebuilt, rendered_tokens
from prefixscope.findings.ttl_choice import TtlWhatIf, ttl_what_ifs
from prefixscope.model import SessionEvent, UsageRecord
from prefixscope.model.redaction import active
from prefixscope.model.whatifs import LEDGER_WHAT_IFS, POLICY
from prefixscope.parallel import Pool, effective_workers, release_freed_memory
from prefixscope.prompt import RenderError, RenderOptions
from prefixscope.store import Store
from prefixscope.store.kinds import bodies_without_last_message, request_roles
from prefixscope.store.store import UsageSummary
from prefixscope.tokenizers import TokenizerError

# Dimensions a hit rate is split by to find the part of the traffic that caches badly.
SPLIT_DIMENSIONS = ("source", "endpoint", "model", "client", "channel")
# What-ifs the report prices, by the diff cause that calls for them.
WHAT_IF_FOR_CAUSE = {"volatile-value": "strip-billing-header", "json-key-order": "sort-json-keys"}

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ReportOptions:
    """What the report analyses with."""

    render: RenderOptions = field(default_factory=RenderOptions)
    engine: str = AUTO  # a cache model name, or "auto" (chosen from the log)
    block_size: int | None = None  # None: inferred from the cached values
    capacity_tokens: int | None = None  # None: fitted when the log has cached tokens
    engine_logs: tuple[Path, ...] = ()  # vLLM / SGLang logs and /metrics dumps
    # Dollars per million uncached prompt tokens of a self-hosted engine (its compute);
    # None: hosted models at their list prices (genai-prices), self-hosted unpriced.
    price_per_mtok: float | None = None
    # What-ifs to price (--what-if): render transforms (replayed) and TTL choices (priced
    # from the ledger); the ones the diff's causes call for are priced anyway.
    what_if: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Replay:
    """One cache domain's replay: the log file whose requests share one server's cache."""

    domain: str
    report: SimulateReport


@dataclass(frozen=True, slots=True)
class Evidence:
    """The analyses' results over one store (None: the step could not run; see notes)."""

    usage: UsageSummary
    records: tuple[UsageRecord, ...]
    bucket: BucketReport  # by source
    by_dimension: tuple[BucketReport, ...]  # one per dimension with more than one value
    diff: DiffReport | None
    segments: tuple[SegmentsReport, ...]
    simulate: SimulateReport | None  # every domain's replay merged
    what_if_of: dict[str, str]  # diff cause -> the what-if transform priced for it
    scenarios: tuple[tuple[str, bool, str, int], ...]  # Store.session_origins()
    usage_lint: UsageLint | None = None
    engine_log: EngineLogAnalysis | None = None
    ingest: Any = None  # ingest.IngestResult, when the report ingested the logs
    truncated: tuple[str, ...] = ()  # ids of requests whose body the logger cut short
    replays: tuple[Replay, ...] = ()  # per cache domain (a log file)
    notes: tuple[str, ...] = ()
    ledger: Ledger | None = None  # every missed token of the basis, by cause
    # Anthropic-protocol calls whose input_tokens already held the cache reads (the whole
    # rendered prompt): their logged prompt counts the reads twice (`cache_inclusive_input`)
    inclusive_input: tuple[str, ...] = ()
    ttl_what_ifs: tuple[TtlWhatIf, ...] = ()  # the TTL decision priced (Anthropic expiries)
    requested_what_if: tuple[str, ...] = ()  # --what-if, as asked
    # request id -> the session events the log recorded before it (compaction, truncation,
    # model change, client upgrade, tool-set delta), and the provider's own verdict on its
    # miss where the log kept one: (reason, missed tokens)
    events: Mapping[str, tuple[SessionEvent, ...]] = field(default_factory=dict)
    verdicts: Mapping[str, tuple[str, int | None]] = field(default_factory=dict)
    # request id -> its rendered prompt's tokens, and the calls whose prompt the log could
    # not rebuild (`findings.rebuild`)
    rendered: Mapping[str, int] = field(default_factory=dict)
    not_rebuilt: frozenset[str] = frozenset()
    # what the ledger reads besides: each log file's (engine, block size) as the replay
    # chose them, and the requests that asked for OpenAI's 24-hour retention (a bundle
    # rebuilds the ledger from these: `findings.bundle`)
    chosen: Mapping[str, tuple[str | None, int | None]] = field(default_factory=dict)
    extended: frozenset[str] = frozenset()
    policy: Policy | None = None  # --what-if policy: the choice per kind of request


def gather(store: Store, options: ReportOptions, progress: Progress | None = None,
           ingest: Any = None, workers: int | None = 1,
           runner: StageRunner | None = None) -> Evidence:
    """Run every analysis once over `store` (and the engine logs of `options`).

    `workers` > 1 (None: the machine's cores on a store with `AUTO_MIN_PAIRS` pairs): the
    diff of every pair runs in that many processes, whole sessions each, while this
    process runs bucket, the segments census and the usage lint, and the cache replay's
    independent replays (a fit's candidates, the capacity curve, what-ifs) run in as many
    forked processes, and the walk's processes make every what-if's input right after
    the walk, by runs of sessions; the evidence is the same whatever the number.
    `runner`: the per-session stages (the walk rendering each request once for the diff
    and each domain's replay input, the what-ifs' renders) run through it instead (Ray),
    the rest here; the evidence is the same.

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
    replay_workers = effective_workers(workers, store.count(),
                                       auto_minimum=AUTO_MIN_REPLAY_REQUESTS)
    plans = _plan_domains(store, options, records,
                          engine_log.effective_block_size if engine_log else None)
    if options.block_size is None:  # else the block size is the one given
        notes += block_size_notes(engine_log, plans[1])
    setup = _pass_setup(store, options, plans[0])
    # workers open the store's file: read-only only; a runner walks the log its own way
    if runner is None and store.body_count() and store.read_only:
        n = effective_workers(workers, len(setup.pairs), auto_minimum=AUTO_MIN_PAIRS)
        if n > 1:
            pool = worker_pool(n)
            pending = start_pass(store, setup, pool, diff=True)
    try:
        return _gather(store, options, step, ingest, notes, engine_log, usage, records,
                       setup, pending, plans, replay_workers, pool, runner)
    finally:
        if pool is not None:
            pool.close(cancel=True)


# domain -> (engine, block size, files); each file's (engine, block) as chosen; the notes
# saying why
Plans = tuple[dict[str, tuple[str, int | None, list[str]]],
              dict[str, tuple[str | None, int | None]], list[str]]


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


def _gather(store: Store, options: ReportOptions, step: Progress, ingest: Any,
            notes: list[str], engine_log: EngineLogAnalysis | None, usage: UsageSummary,
            records: tuple[UsageRecord, ...], setup: PassSetup, pending: PendingPass | None,
            plans: Plans, replay_workers: int = 1, pool: Pool | None = None,
            runner: StageRunner | None = None) -> Evidence:
    step("bucket")
    # By source: each log keeps its own block size (a gateway's and an agent's upstreams
    # differ) and its spikes are explained against its own prompts.
    bucket = bucket_store(store, ("source",), block_size=options.block_size,
                          options=options.render)
    by_dimension = [bucket] if len(bucket.groups) > 1 else []
    for dim in SPLIT_DIMENSIONS[1:]:
        split = bucket_store(store, (dim,), block_size=options.block_size, explain=False)
        if len(split.groups) > 1:
            by_dimension.append(split)
    diff = None
    segments: tuple[SegmentsReport, ...] = ()
    passed = None  # every request rendered once: the diff and each domain's replay input
    if store.body_count():
        if pending is None:
            step("diff")
            passed = runner.walk(store, setup) if runner is not None else one_pass(store,
                                                                                  setup)
            diff = passed.diff
        step("segments")
        segments = tuple(segments_store(store, (), options=options.render, with_tokens=False))
    else:
        notes.append("no request bodies in the log: where turns diverge cannot be seen "
                     "(usage and replay only)")
    step("usage lint")
    usage_lint = lint_usage(store, bucket.block_size if bucket.block_size_source
                            in ("inferred", "forced") else None)
    ready: dict[str, dict[str, list[Any]]] = {}
    if pending is not None:  # the workers have been walking the log meanwhile
        step("diff")
        passed = pending.result(store)
        diff = passed.diff
        if pool is not None:
            # the same workers make the what-ifs' input, then go: idle, they would hold
            # their memory through the replays
            ready = _ready_what_ifs(store, options, setup.links, passed, plans,
                                    _what_if_of(diff, options), pool)
            pool.close()
            release_freed_memory()  # the census's and the merge's garbage, before the replays
    if passed is None:  # no bodies: the replay's input from usage and traces alone
        passed = one_pass(store, setup, diff=False)
    step("replay")
    simulate, what_if_of, replays, chosen = _replay(
        store, options, records, diff, notes, plans, passed, replay_workers,
        _what_ifs(store, runner, replay_workers), setup.links, ready)
    step("ledger")
    inclusive = cache_inclusive_input(records, replays, store.lacking_parts())
    if inclusive:
        notes.append(f"{len(inclusive):,} Anthropic-protocol calls report input_tokens that "
                     "already include their cache reads: the ledger counts their prompt as "
                     "input_tokens alone (the log's sum counts the reads twice)")
        fixed = set(inclusive)
        records = tuple(replace(r, prompt_tokens=(r.prompt_tokens or 0) - (r.cached_tokens or 0)
                                - (r.cache_write_tokens or 0)) if r.id in fixed else r
                        for r in records)
    events = store.session_events()
    rendered = rendered_tokens(diff.pairs if diff is not None else (),
                               (sim for replay in replays for sim in replay.report.per_request),
                               records)
    unrebuilt = not_rebuilt(records, rendered, store.lacking_parts())
    extended = store.extended_retention()
    ledger = _ledger(records, diff, replays, simulate, bucket, chosen, options, events,
                     unrebuilt, extended)
    ttl = ttl_what_ifs(ledger, records, ledger.prices)
    policy = price_policy(ledger, records, request_kinds(
        request_roles(store), bodies_without_last_message(store))) \
        if POLICY in options.what_if else None
    if ledger.money is not None and ledger.money.unknown_models:
        shown = ", ".join(ledger.money.unknown_models[:5])
        notes.append(f"no price for {len(ledger.money.unknown_models)} model(s) ({shown}): "
                     "their calls are not in the dollar figures (self-hosted: "
                     "--price-per-mtok)")
    return Evidence(usage, records, bucket, tuple(by_dimension), diff, segments, simulate,
                    what_if_of, tuple(store.session_origins()), usage_lint, engine_log,
                    ingest, tuple(store.truncated_ids()), replays, tuple(notes), ledger,
                    inclusive, ttl, options.what_if, events, store.provider_verdicts(),
                    rendered, unrebuilt, chosen, extended, policy=policy)


# Cache reads at least this share of the rendered prompt make the two readings of
# input_tokens far enough apart to tell (a stand-in tokenizer is off by a few percent).
_MIN_READ_SHARE = 0.2


# Parts of a prompt a rebuilt body can lack (`metadata.approximate`) that sit outside its
# messages: a rendered prompt without them is shorter than what was sent by their length.
_UNRENDERED_PARTS = frozenset({"system", "tools"})


def cache_inclusive_input(records: Sequence[UsageRecord], replays: Sequence[Replay],
                          lacking: Mapping[str, Sequence[str]] | None = None
                          ) -> tuple[str, ...]:
    """Anthropic-protocol calls (with bodies) whose uncached input as parsed (prompt − reads
    − writes, Anthropic's convention) is the whole rendered prompt while they also report
    cache reads: their input_tokens included the reads -- the cache-inclusive
    input_tokens a converting gateway answers with, whether or not the log names one.
    A call whose rebuild lacks its system prompt or tools (`lacking`: request id -> the
    parts ingest says its log lacks) is not read so: its rendered prompt is the messages
    alone, which a small uncached input can match while the reads and writes are that
    system prompt and tools (a Cline task's second call: 10 uncached tokens, 8,972 read)."""
    rendered = {r.id: r.prompt_tokens for replay in replays for r in replay.report.per_request}
    lacking = lacking or {}
    hit = []
    for r in records:
        length = rendered.get(r.id)
        if (r.endpoint != "anthropic-messages" or not r.has_body or r.duplicate_of
                or not length or r.prompt_tokens is None or not r.cached_tokens
                or _UNRENDERED_PARTS.intersection(lacking.get(r.id, ()))):
            continue
        uncached = r.prompt_tokens - r.cached_tokens - (r.cache_write_tokens or 0)
        if r.cached_tokens >= _MIN_READ_SHARE * length and \
                abs(uncached - length) < abs(r.prompt_tokens - length) / 2:
            hit.append(r.id)
    return tuple(hit)


def block_size_notes(engine_log: EngineLogAnalysis | None,
                     chosen: Mapping[str, tuple[str | None, int | None]]) -> list[str]:
    """A note for each block size the request logs' cached values support (a self-hosted
    engine's, replayed with) that is not the one the engine log states: both, with their
    sources."""
    stated = engine_log.block_size if engine_log is not None else None
    if stated is None or engine_log is None:
        return []
    where = [c for c in engine_log.config if c.key == "block_size"][-1]
    out = []
    for file, (engine, block) in sorted(chosen.items()):
        if engine is None or ENGINES[engine].hosted or block is None or block == stated:
            continue
        out.append(f"block size {block}: {file}'s cached values are multiples of {block} "
                   f"(the replay uses it); the engine log states {stated} "
                   f"({where.file}:{where.line})")
    return out


def _ledger(records: Sequence[UsageRecord], diff: DiffReport | None,
            replays: Sequence[Replay], simulate: SimulateReport | None, bucket: BucketReport,
            chosen: dict[str, tuple[str | None, int | None]], options: ReportOptions,
            events: Mapping[str, Sequence[SessionEvent]] | None = None,
            not_rebuilt: frozenset[str] = frozenset(),
            extended: frozenset[str] = frozenset()) -> Ledger:
    """The missed-token ledger over the evidence (`findings.ledger`); `extended`: the
    requests that asked for OpenAI's 24-hour retention."""
    replayed: dict[str, ReplayedRequest] = {}
    domains = replays or ((Replay("all", simulate),) if simulate is not None else ())
    for replay in domains:
        for sim in replay.report.per_request:
            replayed[sim.id] = ReplayedRequest(replay.domain, replay.report.engine,
                                               sim.unit or replay.report.unit, sim)
    block_of_source = {str(g.key.get("source")): g.block_size for g in bucket.groups}
    engine_of = {r.id: chosen.get(r.source_file, (None, None))[0] for r in records}
    family = {r.id: model_family_engine([r]) for r in records}
    unmodelled = {r.id: unmodelled_family([r]) for r in records}
    rules = rules_for(records, replayed, block_of_source, engine_of, family, unmodelled,
                      extended)
    # A self-hosted engine has no list price (a gateway may name it after a hosted model):
    # it is priced only at the user's own rate.
    pricer = Pricer(options.price_per_mtok)
    prices = price_all(((r, not rules[r.id].hosted) for r in records), pricer)
    source = f"list prices (genai-prices {_prices_version()}) for hosted APIs; " + (
        f"self-hosted at --price-per-mtok {options.price_per_mtok:g}"
        if options.price_per_mtok is not None else
        "self-hosted calls unpriced without --price-per-mtok")
    return build_ledger(records, diff.pairs if diff is not None else (), replayed, rules,
                        prices, source, sorted(pricer.unknown), event_kinds(events or {}),
                        not_rebuilt)


def event_kinds(events: Mapping[str, Sequence[SessionEvent]]) -> dict[str, list[str]]:
    """request id -> the kinds of the session events recorded before it."""
    return {rid: [e.kind for e in recorded] for rid, recorded in events.items()}


def file_engines(records: Sequence[UsageRecord], files: Sequence[str], requested: str = AUTO,
                 block_size: int | None = None
                 ) -> dict[str, tuple[str | None, int | None, str]]:
    """Each log file's (engine, block size, why): `engines.choose.choose_engine` over its
    requests, the block size given or the one its cached values are aligned to."""
    by_file: dict[str, list[UsageRecord]] = {}
    for r in records:
        if r.duplicate_of is None:
            by_file.setdefault(r.source_file, []).append(r)
    out = {}
    for file in files:
        choice = choose_engine(by_file.get(file, []), requested, block_size)
        out[file] = (choice.engine, choice.block, choice.why)
    return out


def ledger_from_usage(records: Sequence[UsageRecord], files: Sequence[str],
                      block_of_source: dict[str, int | None],
                      price_per_mtok: float | None = None,
                      events: Mapping[str, Sequence[SessionEvent]] | None = None) -> Ledger:
    """The ledger usage alone can give (no diff, no replay: `breakdown.usage_ledger`), each
    file's engine chosen as report chooses it, with the session events the log recorded."""
    engine_of_file = {f: e for f, (e, _, _) in file_engines(records, files).items()}
    return usage_ledger(records, engine_of_file, block_of_source,
                        {r.id: model_family_engine([r]) for r in records},
                        {r.id: unmodelled_family([r]) for r in records}, price_per_mtok,
                        event_kinds(events or {}))


def _prices_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("genai-prices")
    except PackageNotFoundError:
        return "?"


def _plan_domains(store: Store, options: ReportOptions, records: Sequence[UsageRecord],
                  engine_log_block: int | None) -> Plans:
    """Each cache domain to replay: a log file of a self-hosted engine is its own (one
    server's traffic: a gateway's upstream, an agent's endpoint), its engine chosen, fitted
    and replayed on its own -- two servers do not evict each other; a hosted API is one
    domain for every log file it answered (the provider's cache)."""
    plans: dict[str, tuple[str, int | None, list[str]]] = {}  # domain -> engine, unit, files
    reasons: dict[str, str] = {}
    choices = file_engines(records, store.source_files(), options.engine, options.block_size)
    chosen = {file: (engine, block) for file, (engine, block, _) in choices.items()}
    for file, (engine, block, why) in choices.items():
        if engine is None:
            reasons.setdefault(f"no cache replay: {why} (pass --engine)", file)
            continue
        reasons.setdefault(f"replayed with {engine}: {why}", file)
        if ENGINES[engine].hosted:
            plans.setdefault(f"{engine} API", (engine, None, []))[2].append(file)
        else:
            unit = block if block is not None else engine_log_block
            plans[file] = (engine, unit if ENGINES[engine].has_unit else None, [file])
    return plans, chosen, list(reasons)


def _replay(store: Store, options: ReportOptions, records: Sequence[UsageRecord],
            diff: DiffReport | None, notes: list[str], planned: Plans, passed: PassResult,
            workers: int = 1, what_ifs: tuple[WhatIfRunner, int] | None = None,
            links: Links | None = None, ready: dict[str, dict[str, list[Any]]] | None = None
            ) -> tuple[SimulateReport | None, dict[str, str], tuple[Replay, ...],
                       dict[str, tuple[str | None, int | None]]]:
    """The replay the summary and the replay findings read (None: no engine fits): each
    planned domain (`_plan_domains`) replayed from its input the walk prepared (a
    what-if's input from `ready` (domain -> transform -> entries) when made already, else
    by `what_ifs`: (a runner, the runs of sessions to cut it into) when given). The
    domains are merged for the summary.
    """
    what_if_of = _what_if_of(diff, options)
    plans, chosen, reasons = planned
    notes += reasons
    replays: list[Replay] = []
    for domain, (engine, unit, files) in plans.items():
        sim = SimulateOptions(engine=engine, unit=unit, capacity_tokens=options.capacity_tokens,
                              render=options.render, source_files=tuple(files))
        try:
            if domain in passed.failed:
                raise SimulateError(passed.failed[domain])
            prepared, skipped = passed.prepared[domain]
            what_if_input = None
            if what_ifs is not None and links is not None:
                what_if_input = _what_if_input(store, links, prepared, *what_ifs)
            if ready and ready.get(domain):
                what_if_input = _ready_input(ready[domain], what_if_input, store, prepared)
            replayed = _replay_domain(store, sim, options, records, what_if_of, notes,
                                      prepared, skipped, workers, what_if_input)
        except (SimulateError, RenderError, TokenizerError) as exc:
            notes.append(f"no cache replay of {domain}: {str(exc).splitlines()[0]}")
            continue
        if replayed is not None:
            replays.append(Replay(domain, replayed))
    if not replays:
        if plans:
            notes.append("no cache replay: nothing replayable")
        return None, {}, (), chosen
    return merge_replays([r.report for r in replays]), what_if_of, tuple(replays), chosen


def _what_if_of(diff: DiffReport | None, options: ReportOptions) -> dict[str, str]:
    """The render what-ifs the report prices: diff cause (or the option) -> transform."""
    what_if_of = {cause: transform for cause, transform in WHAT_IF_FOR_CAUSE.items()
                  if diff is not None and diff.totals.by_cause.get(cause)}
    for transform in options.what_if:  # asked for: priced whatever the diff found
        if transform not in LEDGER_WHAT_IFS:  # (the ledger prices those)
            what_if_of[f"--what-if {transform}"] = transform
    return what_if_of


def _ready_what_ifs(store: Store, options: ReportOptions, links: Links, passed: PassResult,
                    planned: Plans, what_if_of: dict[str, str], pool: Pool
                    ) -> dict[str, dict[str, list[Any]]]:
    """Every planned domain's what-if replay inputs (domain -> transform -> entries), made
    by `pool`'s workers all at once (`onepass.what_if_passes`), as `_replay` would make
    them one by one: the input depends on the domain's entries, its files and render
    options, and its engine alone. Empty when one cannot be made: each domain's replay
    then makes its own, and says why it failed."""
    transforms = sorted(set(what_if_of.values()))
    keys: list[tuple[str, str]] = []
    jobs: list[WhatIfJob] = []
    for domain, (engine, unit, files) in planned[0].items():
        if domain in passed.failed or domain not in passed.prepared:
            continue
        for transform in transforms:
            jobs.append((SimulateOptions(engine=engine, unit=unit,
                                         capacity_tokens=options.capacity_tokens,
                                         render=options.render, source_files=tuple(files)
                                         ).with_what_if(transform),
                         passed.prepared[domain][0], transform))
            keys.append((domain, transform))
    if not jobs:
        return {}
    try:
        made = what_if_passes(store, links, jobs, pool_what_ifs(pool),
                              pool.workers * _WHAT_IF_RUNS_PER_WORKER)
    except (SimulateError, RenderError, TokenizerError):
        return {}
    ready: dict[str, dict[str, list[Any]]] = {}
    for (domain, transform), entries in zip(keys, made, strict=True):
        ready.setdefault(domain, {})[transform] = entries
    return ready


def _ready_input(ready: dict[str, list[Any]], otherwise: WhatIfInput | None, store: Store,
                 prepared: Sequence[Any]) -> WhatIfInput:
    """A domain's what-if input: the one made already, else as `otherwise` makes it (else
    as `replay_prepared` makes it without one: `prepare_what_if` here)."""
    def made(changed: SimulateOptions, transform: str) -> Sequence[Any]:
        if transform in ready:  # handed over: held no longer than its replays need it
            return ready.pop(transform)
        if otherwise is not None:
            return otherwise(changed, transform)
        return prepare_what_if(store, changed, prepared, (transform,))
    return made


def unmarked_cache_reads(engine: str, prepared: Sequence[Any]) -> bool:
    """Bodies with no ``cache_control`` anywhere whose usage still reports cache reads, for
    an engine that caches only at breakpoints (`EngineSpec.reads_at_breakpoints`:
    Anthropic's): the opt-in cache cannot have served them as logged."""
    if not ENGINES[engine].reads_at_breakpoints:
        return False
    bodies = [p for p in prepared if p.blocks is not None]
    return bool(bodies) and not any(p.breakpoints for p in bodies) and any(
        p.observed for p in bodies)


def _replay_domain(store: Store, sim: SimulateOptions, options: ReportOptions,
                   records: Sequence[UsageRecord], what_if_of: dict[str, str],
                   notes: list[str], prepared: list[Any], skipped: dict[str, int],
                   workers: int = 1, what_if_input: WhatIfInput | None = None
                   ) -> SimulateReport | None:
    """One cache domain, replayed with unlimited capacity; when the log got less than that
    predicts (a self-hosted engine, no --capacity), the capacity (and the unit, unless
    known) is fitted to the observed cached tokens and the domain replayed at the fit with
    a capacity curve; the priced what-ifs either way (None: nothing replayable). A replay
    the steps share (the ideal, the fit's sweep, every capacity read off it) runs once."""
    with remembered_replays():
        return _replay_steps(store, sim, options, what_if_of, notes, prepared, skipped,
                             workers, what_if_input)


def _replay_steps(store: Store, sim: SimulateOptions, options: ReportOptions,
                  what_if_of: dict[str, str], notes: list[str], prepared: list[Any],
                  skipped: dict[str, int], workers: int, what_if_input: WhatIfInput | None
                  ) -> SimulateReport | None:
    if unmarked_cache_reads(sim.engine, prepared):
        sim = replace(sim, automatic_breakpoints=True)
        notes.append(f"replayed with {sim.engine}'s automatic breakpoints: the logged bodies carry "
                     "no cache_control mark, yet their usage reports cache reads -- the "
                     "client's marks were not logged (Claude Code puts one on the last "
                     "message), or the upstream caches automatically")
    hosted = ENGINES[sim.engine].hosted
    transforms = tuple(sorted(set(what_if_of.values())))
    if what_if_input is not None:
        what_if_input = _held_input(what_if_input)
    if not hosted and options.capacity_tokens is None:
        # a fit follows unless the log got all an unlimited cache gives: its sweep, made
        # first, is the unlimited replay too; beside it, the what-ifs' ideal replays, which
        # no fit changes where the block size is known
        ideals = []
        if what_if_input is not None and sim.unit is not None:
            for transform in transforms:
                changed = sim.with_what_if(transform)
                ideals.append((what_if_input(changed, transform), changed))
        sweep_ahead(prepared, sim, ideals, workers)
    first = replay_prepared(store, prepared, skipped, sim, workers=workers)
    if not first.requests:
        return None
    unit = first.unit
    short = any(r.observed is not None and r.predicted - r.observed > unit
                for r in first.per_request)
    fit = None
    if not hosted and options.capacity_tokens is None and short:
        known = (sim.unit,) if sim.unit is not None else None
        fit = fit_parameters(prepared, sim, known, workers=workers)
        if fit is not None and fit.capacity_tokens is not None:
            sim = replace(sim, unit=fit.unit, capacity_tokens=fit.capacity_tokens)
    curve = (_curve(sim.capacity_tokens, first.prompt_tokens)
             if not hosted and sim.capacity_tokens is not None else ())
    if not transforms and not curve and sim.capacity_tokens == first.capacity_tokens:
        report = first  # nothing changed: the first replay is the domain's
    else:
        report = replay_prepared(store, prepared, skipped, sim, what_if=transforms,
                                 capacity_curve=curve, workers=workers,
                                 what_if_input=what_if_input)
    return replace(report, fit=fit) if fit is not None else report


def _held_input(made: WhatIfInput) -> WhatIfInput:
    """`made`, each transform's input made once and handed out again (the same list: the
    replays remembered for it, by identity, are found)."""
    held: dict[str, Sequence[Any]] = {}

    def input_of(changed: SimulateOptions, transform: str) -> Sequence[Any]:
        if transform not in held:
            held[transform] = made(changed, transform)
        return held[transform]
    return input_of


def _what_ifs(store: Store, runner: StageRunner | None, workers: int
              ) -> tuple[WhatIfRunner, int] | None:
    """Where the what-ifs' renders run: `runner`'s, else `workers` spawned processes (the
    store read-only: they open its file), else this process (None)."""
    if runner is not None:
        return runner.what_ifs, runner.parts
    if workers > 1 and store.read_only and store.body_count():
        return _PoolWhatIfs(workers), workers * _WHAT_IF_RUNS_PER_WORKER
    return None


# What-if tasks per worker: a task holds its run's base entries and makes each what-if's
# entries for it, so smaller runs keep a worker smaller (2.09 GiB report: 4 -> 16, peak
# summed memory 1,169 -> 1,060 MB, the same time).
_WHAT_IF_RUNS_PER_WORKER = 16


class _PoolWhatIfs:
    """What-if tasks in a pool started on first use, for one what-if at a time: closed as
    soon as its results are in (idle workers would hold their memory through the
    replays)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers

    def __call__(self, store: Store, tasks: Sequence[Any]) -> list[list[Any]]:
        with worker_pool(min(self.workers, len(tasks))) as pool:
            return pool_what_ifs(pool)(store, tasks)


def _what_if_input(store: Store, links: Links, prepared: Sequence[Any], run: WhatIfRunner,
                   parts: int) -> WhatIfInput:
    """A domain's what-if replay input made by `run`, by runs of sessions
    (`onepass.what_if_pass`): the same entries `prepare_what_if` makes here."""
    def made(changed: SimulateOptions, transform: str) -> Sequence[Any]:
        return what_if_pass(store, links, changed, prepared, transform, run, parts)
    return made


def _curve(capacity: int | None, prompt_tokens: int) -> tuple[int | None, ...]:
    """Capacities to replay for the capacity curve: around the fitted one, else fractions
    of all prompt tokens; and unlimited."""
    base = capacity or max(1, prompt_tokens // 10)
    points = sorted({max(1, int(base * f)) for f in (0.25, 0.5, 1, 2, 4, 8)})
    return (*points, None)


def relabel(ev: Evidence, options: ReportOptions) -> Evidence:
    """`ev` with its ledger, prices and TTL what-ifs computed again from its own parts
    (the pairs' divergences, the replays, the usage, the recorded events), priced as
    `options` asks: a bundle's evidence, whose text-dependent parts were found where the
    prompts are (`findings.bundle`)."""
    ledger = _ledger(ev.records, ev.diff, ev.replays, ev.simulate, ev.bucket, dict(ev.chosen),
                     options, ev.events, ev.not_rebuilt, ev.extended)
    ttl = ttl_what_ifs(ledger, ev.records, ledger.prices)
    return replace(ev, ledger=ledger, ttl_what_ifs=ttl,
                   requested_what_if=options.what_if or ev.requested_what_if)
