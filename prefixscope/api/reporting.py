"""``report``, ``calls`` and ``export_bundle``: the findings over a store (or over the share-
safe bundle a store was ingested from), and the ledger a call at a time."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

from prefixscope.api.capacity import capacity_tokens
from prefixscope.api.engine_logs import report_engine_logs
from prefixscope.api.handle import Store, store_of
from prefixscope.api.masking import masked
from prefixscope.api.options import checked, dimensions, what_ifs
from prefixscope.api.scope import reading, scope_of_options
from prefixscope.model.errors import Error

if TYPE_CHECKING:
    from prefixscope.analyses.onepass import StageRunner
    from prefixscope.findings.evidence import Evidence, ReportOptions
    from prefixscope.store import Store as _CoreStore
    from prefixscope.views.results import Calls, Report


def report(store: Store | str | PathLike[str], *, engine: str = "auto",
           block_size: int | None = None, capacity: int | str | None = None,
           bytes_per_token: int | None = None,
           engine_logs: Sequence[str | PathLike[str]] = (), fail_under: float | None = None,
           max_volatile_before: int | None = None, baseline: str | PathLike[str] | None = None,
           by: str | Sequence[str] | None = None, price_per_mtok: float | None = None,
           what_if: str | Sequence[str] = (), gateway: str = "auto", tokenizer: str = "auto",
           workers: int | None = None, runner: str = "local", since: str | None = None,
           until: str | None = None, project: str | None = None,
           progress: Callable[[str], None] | None = None) -> Report:
    """Every analysis over the store as ranked findings, the missed-token ledger and the
    gate: what ``prefixscope report`` prints (docs/report.md).

    Args:
        store: a `Store`, or the path of a store file.
        engine: the cache model to replay with; ``auto`` chooses it from the log.
        block_size: the engine's block size (None: inferred, else fitted).
        capacity: the replay's cache size: tokens, ``"N blocks"``, ``"2M"``, or bytes
            (``"8GiB"``) with `bytes_per_token` (None: fitted to the observed cache).
        bytes_per_token: KV bytes per token, for a capacity in bytes.
        engine_logs: vLLM / SGLang logs or /metrics dumps to read too; when `store` is a
            temporary one (``ps.ingest(paths, store=None)``), also those among its paths,
            first, each read as the ingest classified it (as ``prefixscope report LOGS``
            reads them).
        fail_under: gate: the hit rate (observed, else predicted) must be at least this.
        max_volatile_before: gate: no consecutive turns may diverge before this token.
        baseline: gate: a ``--write-baseline`` file no scenario's stable prefix may fall
            below.
        by: also the ledger by these dimensions (``"day"``, ``["session", "model"]``).
        price_per_mtok: dollars per million uncached prompt tokens of a self-hosted engine.
        what_if: what-ifs to price: ``ttl-1h``, ``keep-warm`` and the render transforms.
        gateway, tokenizer: how to rebuild the prompts (``prefixscope render``).
        workers: processes diffing whole sessions (None: the machine's cores on a large
            store; 1: this process). The report does not depend on it.
        runner: ``local``, or ``ray``: the per-session stage (each request rendered and
            tokenized once, the diff, each cache domain's replay input) as Ray tasks
            (docs/scale.md); the report is the same.
        since, until, project: only these requests (a scoped copy; the store is not
            changed).
        progress: called with each step's name as the report runs.

    Returns:
        The `Report` (``gate.passed`` False when a gate option failed).

    Raises:
        Error: a bad option (``usage``), unreadable input, or an empty scope.
    """
    from prefixscope.distributed import DistributedError
    from prefixscope.engines import ENGINES
    from prefixscope.findings.build import build_report, shown_windows
    from prefixscope.findings.evidence import ReportOptions, gather
    from prefixscope.findings.gate import BaselineError, GateOptions, read_baseline
    from prefixscope.model.whatifs import LEDGER_WHAT_IFS
    from prefixscope.parallel import WorkerError
    from prefixscope.prompt import RenderError, RenderOptions
    from prefixscope.prompt.whatif import WHAT_IFS as RENDER_WHAT_IFS
    from prefixscope.tokenizers import TokenizerError
    from prefixscope.views.results import Report

    if engine != "auto" and engine not in ENGINES:
        raise Error(f"unknown engine {engine!r}; known: auto, {', '.join(ENGINES)}",
                    usage=True)
    if runner not in ("local", "ray"):
        raise Error(f"unknown runner {runner!r} (known: local, ray)", usage=True)
    asked = what_ifs(what_if)
    for name in asked:
        if name not in LEDGER_WHAT_IFS and name not in RENDER_WHAT_IFS \
                and not name.startswith("drop:"):
            raise Error(f"unknown what-if {name!r} (known: "
                        f"{', '.join((*LEDGER_WHAT_IFS, *RENDER_WHAT_IFS))})", usage=True)
    checked(RenderOptions(what_if=tuple(w for w in asked if w not in LEDGER_WHAT_IFS)))
    render_options = checked(RenderOptions(gateway=gateway, tokenizer=tokenizer))
    saved = None
    if baseline is not None:
        try:
            saved = read_baseline(Path(baseline).read_text(encoding="utf-8"), str(baseline))
        except OSError as exc:
            raise Error(f"cannot read {baseline}: {exc.strerror or exc}") from None
        except (BaselineError, UnicodeDecodeError) as exc:
            raise Error(str(exc).splitlines()[0]) from None
    options = ReportOptions(render=render_options, engine=engine, block_size=block_size,
                            capacity_tokens=capacity_tokens(capacity, block_size,
                                                             bytes_per_token),
                            engine_logs=report_engine_logs(engine_logs, None),
                            price_per_mtok=price_per_mtok, what_if=asked)
    gate = GateOptions(fail_under, max_volatile_before, saved)
    scoped = scope_of_options(since, until, project)
    with store_of(store) as handle, reading(handle, scoped) as st:
        # the command's LOGS: their bad records are findings (not a store named by path)
        ingested = handle.ingest_result if handle.temporary else None
        if ingested is not None and ingested.engine_inputs:
            # the engine logs among the paths given for this temporary store (ingest
            # passes them over): read as `prefixscope report LOGS` reads them
            from dataclasses import replace

            options = replace(options, engine_logs=report_engine_logs(
                options.engine_logs, ingested))
        bundle = bundle_of(st)
        try:
            if bundle is not None:  # a share-safe bundle: its evidence, the ledger redone
                evidence = bundle_evidence(bundle, options, scoped is not None)
            else:
                with stage_runner(runner) as stages:
                    evidence = gather(st, options, progress, ingest=ingested,
                                      workers=workers, runner=stages, windows=False)
        except (RenderError, TokenizerError, ValueError, WorkerError, DistributedError) as exc:
            raise Error(str(exc).splitlines()[0]) from None
        except OSError as exc:
            raise Error(f"cannot read {exc.filename}: {exc.strerror or exc}") from None
        try:
            result = build_report(evidence, gate, by=dimensions(by))
        except ValueError as exc:
            raise Error(str(exc), usage=True) from None
        try:
            result = shown_windows(result, st)
        except (RenderError, TokenizerError) as exc:
            raise Error(str(exc).splitlines()[0]) from None
    # Masked once, before any view: every file a view writes is as masked as the terminal.
    return masked(Report._of(result))


def bundle_of(st: _CoreStore) -> Path | None:
    """The bundle directory the store was ingested from (None: other logs)."""
    from prefixscope.findings.bundle import bundle_directory

    if st.source_formats() != ["bundle"]:
        return None
    return bundle_directory(st.source_files())


def bundle_evidence(directory: Path, options: ReportOptions, scoped: bool) -> Evidence:
    """The evidence of the report a bundle was exported from, its ledger recomputed from its
    own parts and priced as `options` asks (docs/bundle.md).

    Raises:
        Error: an option that needs the prompts (they are not in a bundle), a bad bundle.
    """
    from prefixscope.findings.bundle import BundleError, read_bundle
    from prefixscope.findings.evidence import ReportOptions, relabel
    from prefixscope.model.whatifs import LEDGER_WHAT_IFS
    from prefixscope.prompt import RenderOptions

    default = ReportOptions()
    needs_text = [name for name, given in (
        ("--engine", options.engine != default.engine),
        ("--block-size", options.block_size is not None),
        ("--capacity", options.capacity_tokens is not None),
        ("--engine-log", bool(options.engine_logs)),
        ("--gateway / --tokenizer", options.render != RenderOptions()),
        ("--since / --until / --project", scoped),
        ("--what-if " + ", ".join(w for w in options.what_if if w not in LEDGER_WHAT_IFS),
         any(w not in LEDGER_WHAT_IFS for w in options.what_if))) if given]
    if needs_text:
        raise Error(f"{directory} is a bundle: its prompts were replayed where it was "
                    f"exported; {needs_text[0]} needs them (pass it to export --bundle "
                    "there)", usage=True)
    try:
        evidence = read_bundle(directory)
    except BundleError as exc:
        raise Error(str(exc)) from None
    return relabel(evidence, options)


def export_bundle(store: Store | str | PathLike[str], directory: str | PathLike[str], *,
                  gateway: str = "auto", tokenizer: str = "auto", workers: int | None = None,
                  progress: Callable[[str], None] | None = None) -> Path:
    """Write a share-safe bundle of the store into `directory` (``prefixscope export
    --bundle``): every request's time, session, model, backend, usage, its rendered
    prompt's segments as keyed hashes with their token spans, the ledger's causes, and the
    report's evidence without text, so that ``report(ingest(directory))`` gives the
    report of `store` again, excerpts aside (docs/bundle.md).

    Args:
        store: a `Store`, or the path of a store file.
        directory: where to write requests.jsonl and evidence.json (created if missing).
        gateway, tokenizer: how to rebuild the prompts (``prefixscope render``).
        workers: processes diffing whole sessions, as for `report`.
        progress: called with each step's name.

    Returns:
        The directory written.

    Raises:
        Error: a bad option, unreadable input, or a directory that cannot be written.
    """
    from prefixscope.findings.bundle import write_bundle
    from prefixscope.findings.evidence import ReportOptions, gather
    from prefixscope.parallel import WorkerError
    from prefixscope.prompt import RenderError, RenderOptions
    from prefixscope.tokenizers import TokenizerError

    target = Path(directory)
    if target.exists() and not target.is_dir():
        raise Error(f"--bundle {target} is a file: give a directory", usage=True)
    render_options = checked(RenderOptions(gateway=gateway, tokenizer=tokenizer))
    options = ReportOptions(render=render_options)
    with store_of(store) as handle, reading(handle, None) as st:
        if bundle_of(st) is not None:
            raise Error("the store holds a bundle already: export its source logs")
        ingested = handle.ingest_result if handle.temporary else None
        if ingested is not None and ingested.engine_inputs:  # as report reads them
            from dataclasses import replace

            options = replace(options, engine_logs=report_engine_logs((), ingested))
        try:
            evidence = gather(st, options, progress, ingest=ingested, workers=workers,
                              with_census=True)
            if progress is not None:
                progress("bundle")
            write_bundle(evidence, st.iter_requests(copies=True), target, render_options)
        except (RenderError, TokenizerError, ValueError, WorkerError) as exc:
            raise Error(str(exc).splitlines()[0]) from None
        except OSError as exc:
            raise Error(f"cannot read {exc.filename}: {exc.strerror or exc}") from None
    return target


def calls(store: Store | str | PathLike[str], *, session: str | None = None,
          engine: str = "auto", block_size: int | None = None,
          capacity: int | str | None = None, bytes_per_token: int | None = None,
          gateway: str = "auto", tokenizer: str = "auto", workers: int | None = None,
          since: str | None = None, until: str | None = None, project: str | None = None,
          progress: Callable[[str], None] | None = None) -> Calls:
    """The report's ledger one request at a time, a session at a time: each call's
    prompt tokens (in), cached (read), cache writes where the log has them (write),
    missed tokens and their causes, with its time and model (``prefixscope calls``,
    docs/report.md#calls).

    The calls are `report`'s ledger entries, made by the same replay and session
    threading with the same options: their missed tokens sum to the report's.

    Args:
        store: a `Store`, or the path of a store file.
        session: only the session of this id, else every session whose id starts with it.
        engine, block_size, capacity, bytes_per_token, gateway, tokenizer, workers,
            since, until, project, progress: as `report` takes them.

    Raises:
        Error: a bad option (``usage``), no session matching `session`, or as `report`.
    """
    from prefixscope.findings.calls import NoSuchSession, per_call
    from prefixscope.model.redaction import active
    from prefixscope.views.results import Calls

    if session is not None and not session.strip():
        raise Error("--session needs a session id (see: prefixscope sql \"select "
                    "distinct session from sessions\")", usage=True)
    result = report(store, engine=engine, block_size=block_size, capacity=capacity,
                    bytes_per_token=bytes_per_token, gateway=gateway, tokenizer=tokenizer,
                    workers=workers, since=since, until=until, project=project,
                    progress=progress)
    if result.ledger is None or result.evidence is None:
        raise Error("no model call to list (the inputs hold engine logs alone)")
    try:
        # the report is masked: its session ids are compared with the filter masked alike
        found = per_call(result.ledger, result.evidence.records,
                         None if session is None else active().text(session),
                         result.evidence.events, result.evidence.verdicts)
    except NoSuchSession as exc:
        raise Error(str(exc)) from None
    return Calls._of(found)


@contextmanager
def stage_runner(runner: str) -> Iterator[StageRunner | None]:
    """report's per-session stages on `runner`: None for this machine (its processes)."""
    if runner != "ray":
        yield None
        return
    from prefixscope.distributed.report_runner import ray_stages

    with ray_stages() as stages:
        yield stages
