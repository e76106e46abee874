"""The one set of defaults behind ``--engine``, ``--block-size`` and ``--capacity``.

`simulate` replays a store the way `report` replays each of its cache domains
(`findings.domains`): the engine chosen from the log (`engines.choose`, which report
asks per log file), the block size given, else inferred from the cached values a
self-hosted engine reported, else the engine's own; the capacity given, else
unlimited -- unless a self-hosted engine got less cache than an unlimited one predicts,
when the capacity is fitted to the observed cached tokens and the log replayed at the
fit. Each choice carries the words the output says it in, so a reader always knows
which numbers were asked for and which the log decided.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from prefixscope.analyses.simulate import (
    SimulateError,
    SimulateOptions,
    SimulateReport,
    engine_block_size,
    fit_parameters,
    prepare,
    replay_prepared,
)
from prefixscope.engines import ENGINES
from prefixscope.model.whatifs import LEDGER_WHAT_IFS
from prefixscope.prompt import RenderError
from prefixscope.prompt.whatif import parse_what_ifs
from prefixscope.store import Store


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
    _check_what_ifs(what_if)
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
        if (ENGINES[options.engine].has_unit and unit_source != "given"
                and fitted.unit != first.unit):
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


def _check_what_ifs(names: Sequence[str]) -> None:
    """Each what-if is a render transform this replay can apply: a what-if the ledger
    prices (`model.whatifs.LEDGER_WHAT_IFS`: the TTL choices, pinning each session to one
    backend) is report's, and an unknown name is an error, not an empty line.

    Raises:
        SimulateError: one line, naming the command that prices it.
    """
    for name in names:
        if name in LEDGER_WHAT_IFS:
            raise SimulateError(
                f"--what-if {name} is priced by report from the ledger (each call's usage, "
                f"pause and backend), not replayed by simulate: prefixscope report LOGS "
                f"--what-if {name}")
    try:
        parse_what_ifs(tuple(names))
    except RenderError as exc:
        raise SimulateError(str(exc).splitlines()[0]) from None

