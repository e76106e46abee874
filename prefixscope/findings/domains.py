"""Cache domains: which log files share one cache and which engine replays them, and each
domain's replay.

A log file of a self-hosted engine is its own domain (one server's traffic), its engine
chosen (`engines.choose`), its block size given, inferred from its cached values or
stated by the engine log, its capacity fitted to the observed cached tokens; a hosted API
is one domain for every log file it answered (the provider's cache). Each domain is
replayed with unlimited capacity first, then at the fit with a capacity curve, with the
priced what-ifs; the domains are merged for the summary.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from prefixscope.analyses.diff import DiffReport
from prefixscope.analyses.engine_cache import EngineLogAnalysis
from prefixscope.analyses.onepass import (
    PassResult,
    WhatIfRunner,
)
from prefixscope.analyses.simulate import (
    Remembered,
    SimulateError,
    SimulateOptions,
    SimulateReport,
    WhatIfInput,
    fit_parameters,
    merge_replays,
    remembered_replays,
    replay_prepared,
    sweep_ahead,
    swept_ahead,
)
from prefixscope.analyses.simulate.prepare import Links
from prefixscope.engines import ENGINES
from prefixscope.engines.choose import (
    AUTO,
    TRACE_FORMATS,
    choose_engine,
)
from prefixscope.findings.values import Plans, Replay, ReportOptions
from prefixscope.findings.whatif_pools import ready_input, runner_input
from prefixscope.model import UsageRecord
from prefixscope.model.whatifs import LEDGER_WHAT_IFS
from prefixscope.prompt import RenderError
from prefixscope.store import Store
from prefixscope.tokenizers import TokenizerError

# What-ifs the report prices, by the diff cause that calls for them.
WHAT_IF_FOR_CAUSE = {"volatile-value": "strip-billing-header", "json-key-order": "sort-json-keys"}


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


def plan_domains(store: Store, options: ReportOptions, records: Sequence[UsageRecord],
                 engine_log_block: int | None) -> Plans:
    """Each cache domain to replay: a log file of a self-hosted engine is its own (one
    server's traffic: a gateway's upstream, an agent's endpoint), its engine chosen, fitted
    and replayed on its own -- two servers do not evict each other; a hosted API is one
    domain for every log file it answered (the provider's cache)."""
    plans: dict[str, tuple[str, int | None, list[str]]] = {}  # domain -> engine, unit, files
    reasons: dict[str, str] = {}
    choices = file_engines(records, store.source_files(), options.engine, options.block_size)
    chosen = {file: (engine, block) for file, (engine, block, _) in choices.items()}
    # a self-hosted engine replays prompts (or a trace's block ids): a file with neither
    # has nothing it can replay, whatever its cached values say of the engine
    replayable = {r.source_file for r in records
                  if r.has_body or r.source_format in TRACE_FORMATS}
    for file, (engine, block, why) in choices.items():
        if engine is not None and not ENGINES[engine].hosted and file not in replayable:
            why += ", but the log has no request bodies to replay"
            engine = None
        if engine is None:
            ask = "" if "--engine" in why else " (pass --engine)"
            reasons.setdefault(f"no cache replay: {why}{ask}", file)
            continue
        reasons.setdefault(f"replayed with {engine}: {why}", file)
        if ENGINES[engine].hosted:
            plans.setdefault(f"{engine} API", (engine, None, []))[2].append(file)
        else:
            unit = block if block is not None else engine_log_block
            plans[file] = (engine, unit if ENGINES[engine].has_unit else None, [file])
    return plans, chosen, list(reasons)


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


def replay_domains(store: Store, options: ReportOptions, records: Sequence[UsageRecord],
                   diff: DiffReport | None, notes: list[str], planned: Plans, passed: PassResult,
                   workers: int = 1, what_ifs: tuple[WhatIfRunner, int] | None = None,
                   links: Links | None = None, ready: dict[str, dict[str, list[Any]]] | None = None,
                   ahead: dict[str, Remembered] | None = None
                   ) -> tuple[SimulateReport | None, dict[str, str], tuple[Replay, ...],
                              dict[str, tuple[str | None, int | None]]]:
    """The replay the summary and the replay findings read (None: no engine fits): each
    planned domain (`plan_domains`) replayed from its input the walk prepared (a
    what-if's input from `ready` (domain -> transform -> entries) when made already, else
    by `what_ifs`: (a runner, the runs of sessions to cut it into) when given; its base's
    sweep from `ahead` (`swept_bases`) when made already). The domains are merged for the
    summary.
    """
    what_if_of = priced_what_ifs(diff, options)
    plans, chosen, reasons = planned
    notes += reasons
    replays: list[Replay] = []
    for domain, (engine, unit, files) in plans.items():
        sim = _domain_options(options, engine, unit, files)
        swept = ahead.pop(domain, None) if ahead else None  # (let go with its domain)
        try:
            if domain in passed.failed:
                raise SimulateError(passed.failed[domain])
            prepared, skipped = passed.prepared[domain]
            what_if_input = None
            if what_ifs is not None and links is not None:
                what_if_input = runner_input(store, links, prepared, *what_ifs)
            if ready and ready.get(domain):
                what_if_input = ready_input(ready[domain], what_if_input, store, prepared)
            replayed = _replay_domain(store, sim, options, records, what_if_of, notes,
                                      prepared, skipped, workers, what_if_input, swept)
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


def swept_bases(options: ReportOptions, planned: Plans, passed: PassResult
                ) -> Callable[[], dict[str, Remembered]]:
    """Each planned domain's base sweep that its replay sweeps ahead (`_replay_steps`),
    for `replay_domains` to read, in two steps (`swept_ahead`): staged now, made when the
    function returned is called. Report stages them while its workers make the what-ifs'
    input, and makes them once the workers are gone: the sweep's own memory (its replay's
    arrays) then never adds to theirs. A domain whose sweep fails is left out (its replay
    sweeps it again, and says why it failed)."""
    staged: dict[str, Callable[[], Remembered]] = {}
    for domain, (engine, unit, files) in planned[0].items():
        if domain in passed.failed or domain not in passed.prepared:
            continue
        prepared = passed.prepared[domain][0]
        sim, _ = _breakpoints(_domain_options(options, engine, unit, files), prepared)
        if not _sweeps_ahead(sim, options):
            continue
        try:
            staged[domain] = swept_ahead(prepared, sim)
        except (SimulateError, RenderError, TokenizerError):
            continue

    def made() -> dict[str, Remembered]:
        out: dict[str, Remembered] = {}
        for domain, make in staged.items():
            try:
                out[domain] = make()
            except (SimulateError, RenderError, TokenizerError):
                continue
        staged.clear()  # (each domain's staged requests let go)
        return out
    return made


def _domain_options(options: ReportOptions, engine: str, unit: int | None,
                    files: Sequence[str]) -> SimulateOptions:
    return SimulateOptions(engine=engine, unit=unit, capacity_tokens=options.capacity_tokens,
                           render=options.render, source_files=tuple(files))


def _breakpoints(sim: SimulateOptions, prepared: Sequence[Any]
                 ) -> tuple[SimulateOptions, str | None]:
    """`sim` as the domain is replayed: with its engine's automatic breakpoints where the
    bodies carry no mark yet report reads (`unmarked_cache_reads`), and the note saying
    so."""
    if not unmarked_cache_reads(sim.engine, prepared):
        return sim, None
    return replace(sim, automatic_breakpoints=True), (
        f"replayed with {sim.engine}'s automatic breakpoints: the logged bodies carry "
        "no cache_control mark, yet their usage reports cache reads -- the "
        "client's marks were not logged (Claude Code puts one on the last "
        "message), or the upstream caches automatically")


def _sweeps_ahead(sim: SimulateOptions, options: ReportOptions) -> bool:
    """Does the domain's replay sweep its base first: a fit follows unless the log got all
    an unlimited cache gives (a self-hosted engine, no capacity given)?"""
    return not ENGINES[sim.engine].hosted and options.capacity_tokens is None


def priced_what_ifs(diff: DiffReport | None, options: ReportOptions) -> dict[str, str]:
    """The render what-ifs the report prices: diff cause (or the option) -> transform."""
    what_if_of = {cause: transform for cause, transform in WHAT_IF_FOR_CAUSE.items()
                  if diff is not None and diff.totals.by_cause.get(cause)}
    for transform in options.what_if:  # asked for: priced whatever the diff found
        if transform not in LEDGER_WHAT_IFS:  # (the ledger prices those)
            what_if_of[f"--what-if {transform}"] = transform
    return what_if_of


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
                   workers: int = 1, what_if_input: WhatIfInput | None = None,
                   swept: Remembered | None = None) -> SimulateReport | None:
    """One cache domain, replayed with unlimited capacity; when the log got less than that
    predicts (a self-hosted engine, no --capacity), the capacity (and the unit, unless
    known) is fitted to the observed cached tokens and the domain replayed at the fit with
    a capacity curve; the priced what-ifs either way (None: nothing replayable). A replay
    the steps share (the ideal, the fit's sweep, every capacity read off it) runs once;
    `swept`: the base's sweep, made ahead (`swept_bases`)."""
    with remembered_replays(swept):
        return _replay_steps(store, sim, options, what_if_of, notes, prepared, skipped,
                             workers, what_if_input)


def _replay_steps(store: Store, sim: SimulateOptions, options: ReportOptions,
                  what_if_of: dict[str, str], notes: list[str], prepared: list[Any],
                  skipped: dict[str, int], workers: int, what_if_input: WhatIfInput | None
                  ) -> SimulateReport | None:
    sim, note = _breakpoints(sim, prepared)
    if note is not None:
        notes.append(note)
    hosted = ENGINES[sim.engine].hosted
    transforms = tuple(sorted(set(what_if_of.values())))
    if what_if_input is not None:
        what_if_input = _held_input(what_if_input)
    if _sweeps_ahead(sim, options):
        # a fit follows unless the log got all an unlimited cache gives: its sweep, made
        # first, is the unlimited replay too. The what-ifs are swept after the fit, once
        # each: at the unlimited capacity alone when no capacity is fitted, else in full
        # (their predicted replay at the capacity; the ideal is read off the same pass).
        # Swept ahead at the unlimited capacity beside this sweep, a what-if fitted a
        # capacity was swept twice (2 GiB of raw captures: 2.5 s of CPU of ~53).
        sweep_ahead(prepared, sim, workers)  # (nothing, where swept ahead already)
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


def _curve(capacity: int | None, prompt_tokens: int) -> tuple[int | None, ...]:
    """Capacities to replay for the capacity curve: around the fitted one, else fractions
    of all prompt tokens; and unlimited."""
    base = capacity or max(1, prompt_tokens // 10)
    points = sorted({max(1, int(base * f)) for f in (0.25, 0.5, 1, 2, 4, 8)})
    return (*points, None)
