"""The one set of defaults behind ``--engine``, ``--block-size`` and ``--capacity``.

`simulate` replays a store the way `report` replays each of its cache domains
(`evidence._replay_domain`): the engine chosen from the log (`evidence.choose_engine`),
the block size given, else inferred from the cached values a self-hosted engine reported
(`evidence.aligned_block_size`), else the engine's own; the capacity given, else
unlimited -- unless a self-hosted engine got less cache than an unlimited one predicts,
when the capacity is fitted to the observed cached tokens and the log replayed at the
fit. Each choice carries the words the output says it in, so a reader always knows
which numbers were asked for and which the log decided.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from prefixscope.analyses.simulate import (
    SimulateOptions,
    SimulateReport,
    engine_block_size,
    fit_parameters,
    prepare,
    replay_prepared,
)
from prefixscope.engines import ENGINES
from prefixscope.findings.evidence import (
    AUTO,
    TRACE_FORMATS,
    aligned_block_size,
    auto_engine,
    has_unit,
    model_family_engine,
)
from prefixscope.model import UsageRecord
from prefixscope.store import Store


@dataclass(frozen=True, slots=True)
class EngineChoice:
    """The cache model a replay uses, and why."""

    engine: str | None  # None: no engine can replay this log; `why` names the fix
    unit: int | None  # None: the engine's own default
    why: str  # why this engine ("as asked", or auto's reason)
    # "given", "inferred from the cached values", "the engine's default" or NO_UNIT
    unit_source: str


USAGE_ONLY = "a usage-only log (no bodies, no block ids)"
NO_UNIT = "no block size"  # the unit source of an engine that has none (Anthropic, DeepSeek)


def usage_only_fix(records: Sequence[UsageRecord]) -> str:
    """The engine option that replays a log of usage alone: its models' hosted API."""
    family = model_family_engine([r for r in records if r.duplicate_of is None])
    if family is not None:
        return f"`--engine {family}` (its models' hosted API)"
    return "a hosted engine: `--engine anthropic`, `openai` or `deepseek`"


def choose_engine(records: Sequence[UsageRecord], requested: str, block_size: int | None,
                  *, with_bodies: bool) -> EngineChoice:
    """The engine and unit `simulate` replays `records` with (see the module docstring).

    A log of usage alone (no bodies, no block-hash ids) has nothing a self-hosted engine
    could rebuild: auto replays it from its usage with its models' hosted API, or says
    which engine to pass.
    """
    kept = [r for r in records if r.duplicate_of is None]
    traces = any(r.source_format in TRACE_FORMATS for r in kept)
    if requested == AUTO:
        engine, unit, why = auto_engine(records, block_size)
        if engine is not None and not ENGINES[engine].hosted and not with_bodies \
                and not traces:
            family = model_family_engine(kept)
            if family is None:
                return EngineChoice(None, None, f"{USAGE_ONLY}: replay it with "
                                    f"{usage_only_fix(records)}", "")
            engine, unit = family, block_size
            why = f"{USAGE_ONLY}: replaying with `--engine {family}`, its models' hosted API"
        if engine is None:
            return EngineChoice(None, None, why, "")
    else:
        engine, why = requested, "as asked"
        unit = block_size
        if unit is None and not ENGINES[engine].hosted and has_unit(engine):
            unit = aligned_block_size([r.cached_tokens for r in kept if r.cached_tokens])
    if not has_unit(engine):
        source = NO_UNIT
    elif block_size is not None:
        source = "given"
    elif unit is not None:
        source = "inferred from the cached values"
    else:
        source = "the engine's default"
    return EngineChoice(engine, unit, why, source)


def replay_with_defaults(store: Store, options: SimulateOptions, *, unit_source: str,
                         capacity_given: bool, fit: bool = False,
                         what_if: Sequence[str] = (),
                         capacity_curve: Sequence[int | None] = (),
                         progress: Callable[[int, int], None] | None = None,
                         workers: int = 1) -> SimulateReport:
    """Replay `store` with `options`, fitting what the options leave to the log; the
    report says where its block size and capacity came from (`unit_source`,
    `capacity_source`).

    `fit` (``--fit``): the block size (unless given) and the capacity (unless given) are
    fitted to the observed cached tokens whatever the replay predicts, and the log replayed
    at the fit. Without it, the capacity alone is fitted, and only when a self-hosted
    engine got less cache than an unlimited one predicts and no capacity was given.

    Raises:
        SimulateError: unknown engine or parameters.
        RenderError, TokenizerError: a bad render option.
    """
    engine_block_size(options.engine, options.unit)  # a bad engine or unit fails before any render
    prepared, skipped = prepare(store, options, progress=progress)
    first = replay_prepared(store, prepared, skipped, options, workers=workers)
    if not first.requests:
        return replace(first, unit_source=unit_source,
                       capacity_source="given" if capacity_given else "unlimited")
    hosted = ENGINES[options.engine].hosted
    short = any(r.observed is not None and r.predicted - r.observed > first.unit
                for r in first.per_request)
    fitted = None
    capacity_source = "given" if capacity_given else (
        "unlimited (a hosted API's cache is bounded by its retention, not its size)" if hosted
        else "unlimited (the log got no less cache than an unlimited one predicts)")
    if fit or (not capacity_given and not hosted and short):
        known = (options.unit,) if options.unit is not None and (
            unit_source == "given" or not fit) else None
        fitted = fit_parameters(prepared, options, known, workers=workers)
    changes: dict[str, object] = {}
    if fitted is not None:
        if not capacity_given and not hosted:
            capacity_source = ("fitted to the log's cached tokens"
                               if fitted.capacity_tokens is not None else
                               "unlimited (fitted to the log's cached tokens)")
            if fitted.capacity_tokens != options.capacity_tokens:
                changes["capacity_tokens"] = fitted.capacity_tokens
        if has_unit(options.engine) and unit_source != "given" and fitted.unit != first.unit:
            changes["unit"] = fitted.unit
            unit_source = "fitted to the log's cached tokens"
        if fitted.ttl_seconds is not None and options.ttl_seconds is None:
            changes["ttl_seconds"] = fitted.ttl_seconds
    if not changes and not what_if and not capacity_curve:
        report = first
    else:
        report = replay_prepared(store, prepared, skipped,
                                 replace(options, **changes),  # type: ignore[arg-type]
                                 what_if=what_if, capacity_curve=capacity_curve,
                                 workers=workers)
    if fitted is not None:
        report = replace(report, fit=fitted)
    return replace(report, unit_source=unit_source, capacity_source=capacity_source)
