"""prefixscope as a library: the functions a notebook calls, and the command line too.

``import prefixscope as ps`` re-exports this module's names (lazily: `import prefixscope`
stays fast). Every command that analyses a store (``ingest``, ``report``, ``diff``,
``simulate``, ``render``) parses its options and calls the function here of the same
name, so the library and the command line are one code path: the same options with the
same defaults (the command line reads each default from these signatures), the same
checks in the same order, the same typed results (`views.results`: the core's frozen
dataclasses with ``to_dict()`` -- the command's ``--json`` -- and ``to_polars(table)``),
and the same one-line messages, raised here as `Error`.

Nothing here writes to stdout or stderr. What the command line prints as a note on
stderr (the replay the engine ``auto`` chose, a scope's size) is logged at INFO on the
``prefixscope`` logger; progress goes to the ``progress`` callback a function takes.
Results are masked as the command line's output is (`model.redaction`: the built-in
secret patterns, and what `redact` adds).

The public surface is ``__all__`` (pinned by tests/test_api.py and listed in
docs/api.md); every other name is private.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefixscope.ingest.source import MAX_LINE_BYTES
from prefixscope.model.errors import Error

if TYPE_CHECKING:
    import tempfile

    import polars as pl

    from prefixscope.analyses.engine_log import EngineLogAnalysis
    from prefixscope.analyses.onepass import StageRunner
    from prefixscope.findings.evidence import Evidence, ReportOptions
    from prefixscope.prompt import RenderOptions
    from prefixscope.store import Store as _CoreStore
    from prefixscope.store.scope import Scope
    from prefixscope.views.ingested import IngestResult
    from prefixscope.views.results import (
        BucketResult,
        Calls,
        DiffReport,
        RenderResult,
        Report,
        SegmentsResult,
        SimulateReport,
        SqlResult,
    )

__all__ = ["Calls", "DiffReport", "Error", "IngestResult", "RenderResult", "Report",
           "SimulateReport", "Store", "bucket", "calls", "diff", "engine_log", "export",
           "export_bundle", "ingest", "open", "redact", "render", "report", "segments",
           "simulate", "sql"]

# The result types live with their views (`views.results`, `views.ingested`); imported
# on first use.
_RESULT_TYPES = ("Calls", "DiffReport", "RenderResult", "Report", "SimulateReport")
_TEMPORARY = "the given logs"  # what messages call a temporary store (as the CLI says it)


def __getattr__(name: str) -> Any:
    if name == "IngestResult":
        from prefixscope.views.ingested import IngestResult

        return IngestResult
    if name in _RESULT_TYPES:
        from prefixscope.views import results

        return getattr(results, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Store:
    """A prefixscope store (a DuckDB file), read through the library.

    Get one from `open` (an existing store) or `ingest` (logs read into one). It holds a
    read-only connection, opened when first needed and closed by `close` (or ``with``);
    a temporary store (``ingest(..., store=None)``) is deleted when closed.
    """

    __slots__ = ("_core", "_file", "_label", "_later", "_tmp", "_writable", "ingest_result")

    _core: _CoreStore | None  # the open connection
    _writable: bool  # it is read-write (a simulation saving its results)
    _file: str  # the store file
    _label: str  # what messages call the store
    _tmp: tempfile.TemporaryDirectory[str] | None  # a temporary store's directory
    _later: Callable[[], Store] | None  # builds the store on first use (`_deferred`)
    ingest_result: IngestResult | None  # what the ingest that made this store did

    def __init__(self) -> None:
        raise TypeError("use prefixscope.open(path) or prefixscope.ingest(paths, store=...)")

    @classmethod
    def _at(cls, file: str | PathLike[str], *, label: str | None = None,
            tmp: tempfile.TemporaryDirectory[str] | None = None,
            ingest_result: IngestResult | None = None) -> Store:
        """The store file `file`, opened on first use (`label`: what messages call it)."""
        self = cls.__new__(cls)
        self._core = None
        self._writable = False
        self._file = os.fspath(file)
        self._label = label if label is not None else self._file
        self._tmp = tmp
        self._later = None
        self.ingest_result = ingest_result
        return self

    @classmethod
    def _deferred(cls, make: Callable[[], Store]) -> Store:
        """A store `make` builds when it is first used: the command line's LOGS are
        ingested only once the options are known to be good, as before the API existed."""
        self = cls._at("")
        self._later = make
        return self

    def _resolve(self) -> None:
        if self._later is None:
            return
        made = self._later()
        self._later = None
        for name in ("_core", "_file", "_label", "_tmp", "_writable", "ingest_result"):
            setattr(self, name, getattr(made, name))
        made._core = made._tmp = None  # now this store's to close

    @property
    def temporary(self) -> bool:
        """The store was made from logs for this session (``ingest(..., store=None)``)."""
        self._resolve()
        return self._tmp is not None

    @property
    def path(self) -> str:
        """The store file (a temporary store's in a temporary directory)."""
        self._resolve()
        return self._file

    def requests(self) -> pl.DataFrame:
        """One row per model call, in time order (columns: docs/api.md)."""
        from prefixscope.store.frames import requests_frame

        return _masked_frame(requests_frame(self._open()))

    def sessions(self) -> pl.DataFrame:
        """One row per threaded session, in the order of their first turns (columns:
        docs/api.md)."""
        from prefixscope.store.frames import sessions_frame

        return _masked_frame(sessions_frame(self._open()))

    def close(self) -> None:
        """Close the connection; a temporary store's directory is deleted."""
        self._close_connection()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        self._later = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._later is not None:
            return "<prefixscope.Store (not opened yet)>"
        return f"<prefixscope.Store {self._label}>"

    def _close_connection(self) -> None:
        if self._core is not None:
            self._core.close()
            self._core = None

    def _open(self, writable: bool = False) -> _CoreStore:
        """The core store, opened read-only (workers open the file too) unless `writable`.

        Raises:
            Error: the file is not a usable store (the one line `StoreError` says).
        """
        from prefixscope.store import Store as CoreStore
        from prefixscope.store import StoreError, no_store_message

        self._resolve()
        if self._core is not None and self._writable == writable:
            return self._core
        self._close_connection()
        if writable and not Path(self._file).exists():
            raise Error(no_store_message(self._file))
        try:
            core = CoreStore.open(self._file, read_only=not writable)
        except StoreError as exc:
            raise Error(str(exc)) from None
        core.path = self._label
        self._core, self._writable = core, writable
        return core


@contextmanager
def _store_of(store: Store | str | PathLike[str]) -> Iterator[Store]:
    """`store`, or the store file a path names (opened read-only, closed after)."""
    if isinstance(store, Store):
        yield store
        return
    handle = Store._at(store)
    try:
        yield handle
    finally:
        handle.close()


def open(path: str | PathLike[str] = "prefixscope.duckdb") -> Store:
    """Open an existing store (what ``prefixscope ingest --store`` wrote) for reading.

    Args:
        path: the store file; the command line's default ``prefixscope.duckdb``.

    Raises:
        Error: no store there, not a prefixscope store, in use by a writer, or damaged.
    """
    handle = Store._at(path)
    handle._open()
    return handle


def ingest(paths: str | PathLike[str] | Sequence[str | PathLike[str]],
           store: str | PathLike[str] | None = "prefixscope.duckdb", *, format: str = "auto",
           strict: bool = False, session_gap: float = 60.0,
           session_key: str | Sequence[str] = (), max_line_bytes: int = MAX_LINE_BYTES,
           skip_missing: bool = False,
           progress: Callable[[str, int, int, int], None] | None = None) -> Store:
    """Read logs of any supported format into a store and thread them into sessions
    (``prefixscope ingest``).

    A bad record never fails the ingest: it is counted in ``store.ingest_result``
    (``skipped``, ``errors``), unless `strict`.

    Args:
        paths: log files, directories (recursive), globs, or ``"-"`` for stdin.
        store: the store file to add to. When missing it is built beside its name and put
            there whole when the ingest ends, unless another process created it meanwhile
            (an `Error`; that store is left as it is) or every record and file was
            skipped (none is made). ``:memory:`` is refused: it would keep nothing.
            None: a temporary store, deleted when closed (what a command given LOGS
            analyses).
        format: a format name to force instead of detecting each file's.
        strict: any skipped record or file fails the ingest and nothing is stored (a
            store file this ingest would have created is not made, as after an
            interrupt).
        session_gap: the longest pause between two turns of one threaded session, in
            minutes.
        session_key: ``header:NAME``, ``body:dotted.path`` or ``meta:dotted.path`` rules
            for where else a session id is; the first that matches wins.
        max_line_bytes: a longer line of a log is one counted skip, read past in bounded
            pieces (a decompression bomb cannot fill memory).
        skip_missing: a path that does not exist (or a glob that matches nothing) is a
            counted skip, the rest read; by default it is an error before anything is read
            (a CI gate must not silently narrow its input).
        progress: called with (file, bytes done, bytes total, requests read).

    Returns:
        The store, open for reading, with ``ingest_result``.

    Raises:
        Error: an unknown format or session-key rule, or a path that does not exist
            without `skip_missing` (``usage``), a store file that
            cannot be written, or `strict` and something was skipped (``result``: the
            `IngestResult`).
    """
    from prefixscope.ingest import missing_paths
    from prefixscope.ingest.formats import format_names
    from prefixscope.ingest.normalize.sessions import parse_session_rule
    from prefixscope.store import Store as CoreStore
    from prefixscope.store import StoreError
    from prefixscope.store.load import ingest_paths
    from prefixscope.views.ingested import IngestResult

    if format != "auto" and format not in format_names():
        raise Error(f"unknown format {format!r}; formats: {', '.join(format_names())}",
                    usage=True)
    try:
        rules = tuple(parse_session_rule(expr) for expr in _strings(session_key))
    except ValueError as exc:
        raise Error(str(exc), usage=True) from None
    missing = [] if skip_missing else missing_paths(_strings(paths))
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise Error(f"no such file or directory: {missing[0]}{more}; nothing was read "
                    "(--skip-missing reads the paths that exist)", usage=True)
    from prefixscope.store.files import NewStore, temporary_folder

    tmp: tempfile.TemporaryDirectory[str] | None = None
    new: NewStore | None = None  # a store file this ingest creates: built beside its name
    try:
        if store is None:
            tmp = temporary_folder()
            file = os.path.join(tmp.name, "store.duckdb")
        else:
            file = os.fspath(store)
            if file.startswith(":memory:"):
                raise Error(f"--store {file} would keep nothing: name a store file, or give "
                            "the logs to the command that reads them (`prefixscope report "
                            "LOGS`)", usage=True)
            if not os.path.lexists(file) or (os.path.isfile(file)
                                             and os.path.getsize(file) == 0):
                new = NewStore(file)
        try:
            core = CoreStore.open(new.file if new else file,
                                  label=file if new else None)
        except StoreError as exc:
            raise Error(str(exc)) from None
        if tmp is not None:
            core.path = _TEMPORARY
        try:
            result = ingest_paths(_strings(paths), core, fmt=format, strict=strict,
                                  session_gap_s=session_gap * 60, progress=progress,
                                  session_rules=rules, max_line_bytes=max_line_bytes)
        except StoreError as exc:  # the disk is full: the store is rolled back
            raise Error(str(exc)) from None
        finally:
            core.close()
        done = _masked(IngestResult._of(result))
        if done.failed:
            first = ""
            if done.errors:
                err = done.errors[0]
                place = err.file if err.line is None else f"{err.file}:{err.line}"
                first = f" (the first: {place}: {err.reason})"
            raise Error(f"--strict: {done.skipped} record(s)/file(s) skipped{first}; "
                        "nothing was stored", result=done)
        if new is not None:
            # a new store that would hold nothing because everything was skipped is not made
            if done.skipped and not done.ingested + done.already_present:
                new.discard()
            else:
                new.place()
    except StoreError as exc:  # created by another process meanwhile; a full disk at close
        if tmp is not None:
            tmp.cleanup()
        if new is not None:
            new.discard()
        raise Error(str(exc)) from None
    except BaseException:  # Ctrl-C, SIGTERM, a strict rejection: nothing new left behind
        if tmp is not None:
            tmp.cleanup()
        if new is not None:
            new.discard()
        raise
    return Store._at(file, label=_TEMPORARY if tmp is not None else None, tmp=tmp,
                     ingest_result=done)


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
        engine_logs: vLLM / SGLang logs or /metrics dumps to read too; when none is given
            and `store` is a temporary one (``ps.ingest(paths, store=None)``), those among
            its paths (as ``prefixscope report LOGS`` reads them).
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
    from prefixscope.findings.build import build_report
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
    asked = _what_ifs(what_if)
    for name in asked:
        if name not in LEDGER_WHAT_IFS and name not in RENDER_WHAT_IFS \
                and not name.startswith("drop:"):
            raise Error(f"unknown what-if {name!r} (known: "
                        f"{', '.join((*LEDGER_WHAT_IFS, *RENDER_WHAT_IFS))})", usage=True)
    _checked(RenderOptions(what_if=tuple(w for w in asked if w not in LEDGER_WHAT_IFS)))
    render_options = _checked(RenderOptions(gateway=gateway, tokenizer=tokenizer))
    saved = None
    if baseline is not None:
        try:
            saved = read_baseline(Path(baseline).read_text(encoding="utf-8"), str(baseline))
        except OSError as exc:
            raise Error(f"cannot read {baseline}: {exc.strerror or exc}") from None
        except (BaselineError, UnicodeDecodeError) as exc:
            raise Error(str(exc).splitlines()[0]) from None
    options = ReportOptions(render=render_options, engine=engine, block_size=block_size,
                            capacity_tokens=_capacity_tokens(capacity, block_size,
                                                             bytes_per_token),
                            engine_logs=tuple(dict.fromkeys(Path(p) for p in engine_logs)),
                            price_per_mtok=price_per_mtok, what_if=asked)
    gate = GateOptions(fail_under, max_volatile_before, saved)
    scoped = _scope(since, until, project)
    with _store_of(store) as handle, _reading(handle, scoped) as st:
        # the command's LOGS: their bad records are findings (not a store named by path)
        ingested = handle.ingest_result if handle.temporary else None
        if not options.engine_logs and ingested is not None and ingested.engine_logs:
            # the engine logs among the paths given for this temporary store (ingest
            # passes them over): read them as `prefixscope report LOGS` does
            from dataclasses import replace

            options = replace(options, engine_logs=tuple(
                Path(p) for p in ingested.engine_logs))
        bundle = _bundle_of(st)
        try:
            if bundle is not None:  # a share-safe bundle: its evidence, the ledger redone
                evidence = _bundle_evidence(bundle, options, scoped is not None)
            else:
                with _stage_runner(runner) as stages:
                    evidence = gather(st, options, progress, ingest=ingested,
                                      workers=workers, runner=stages)
        except (RenderError, TokenizerError, ValueError, WorkerError, DistributedError) as exc:
            raise Error(str(exc).splitlines()[0]) from None
        except OSError as exc:
            raise Error(f"cannot read {exc.filename}: {exc.strerror or exc}") from None
        try:
            result = build_report(evidence, gate, by=_dimensions(by))
        except ValueError as exc:
            raise Error(str(exc), usage=True) from None
    # Masked once, before any view: every file a view writes is as masked as the terminal.
    return _masked(Report._of(result))


def _bundle_of(st: _CoreStore) -> Path | None:
    """The bundle directory the store was ingested from (None: other logs)."""
    from prefixscope.findings.bundle import bundle_directory

    if st.source_formats() != ["bundle"]:
        return None
    return bundle_directory(st.source_files())


def _bundle_evidence(directory: Path, options: ReportOptions, scoped: bool) -> Evidence:
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
    render_options = _checked(RenderOptions(gateway=gateway, tokenizer=tokenizer))
    options = ReportOptions(render=render_options)
    with _store_of(store) as handle, _reading(handle, None) as st:
        if _bundle_of(st) is not None:
            raise Error("the store holds a bundle already: export its source logs")
        ingested = handle.ingest_result if handle.temporary else None
        if ingested is not None and ingested.engine_logs:  # as report reads them
            from dataclasses import replace

            options = replace(options, engine_logs=tuple(Path(p) for p in ingested.engine_logs))
        try:
            evidence = gather(st, options, progress, ingest=ingested, workers=workers)
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
def _stage_runner(runner: str) -> Iterator[StageRunner | None]:
    """report's per-session stages on `runner`: None for this machine (its processes)."""
    if runner != "ray":
        yield None
        return
    from prefixscope.distributed.report_runner import ray_stages

    with ray_stages() as stages:
        yield stages


def diff(store: Store | str | PathLike[str] | None, *requests: str, session: str | None = None,
         gateway: str = "auto", tokenizer: str = "auto", what_if: str | Sequence[str] = (),
         block_size: int | None = None, context: int = 40, workers: int | None = None,
         runner: str = "local", parquet_in: str | None = None, parquet_out: str | None = None,
         since: str | None = None, until: str | None = None, project: str | None = None,
         progress: Callable[[int, int], None] | None = None) -> DiffReport:
    """Where consecutive turns first diverge, in which segment, and why (``prefixscope
    diff``): two requests, every pair of one session, or every pair of every session.

    Args:
        store: a `Store`, the path of a store file, or None (two request files).
        requests: two requests A B: store ids, id prefixes or native ids, or files holding
            one request body; none: the pairs of `session`, else of every session.
        session: a session id (or a unique prefix of one).
        gateway, tokenizer, what_if: how to rebuild the prompts (``prefixscope render``).
        block_size: the cache block size (None: inferred per group, else 16).
        context: characters of text kept around each divergence.
        workers: processes diffing whole sessions (None: the machine's cores once there
            are 500 pairs; 1: this process). The report does not depend on it.
        runner: ``local``, or ``ray`` (every session on Ray Data, docs/scale.md).
        parquet_in, parquet_out: with ``ray``: the store's ``export --parquet`` directory
            and a new directory for the results.
        since, until, project: only these requests (sessions, not two requests).
        progress: called with (pairs done, pairs in all).

    Raises:
        Error: a bad option (``usage``), no such request or session, a render failure.
    """
    from prefixscope.analyses.diff import diff_sessions, diff_two
    from prefixscope.distributed import DistributedError
    from prefixscope.parallel import WorkerError
    from prefixscope.prompt import RenderError, RenderOptions
    from prefixscope.store.lookup import LookupError_, resolve_request
    from prefixscope.tokenizers import TokenizerError
    from prefixscope.views.results import DiffReport

    options = _checked(RenderOptions(gateway=gateway, tokenizer=tokenizer,
                                     what_if=_what_ifs(what_if)))
    if session is not None and not session.strip():
        raise Error("--session needs a session id (see: prefixscope sql \"select "
                    "distinct session from sessions\")", usage=True)
    if (requests and (len(requests) != 2 or session is not None)):
        raise Error("give two requests A B, or --session S, or --all", usage=True)
    if runner not in ("local", "ray"):
        raise Error(f"unknown runner {runner!r} (known: local, ray)", usage=True)
    if (runner == "ray" and (session is not None or requests)) or \
            (runner == "local" and (parquet_in or parquet_out)):
        raise Error("--runner ray runs --all (without --session); --parquet-in and "
                    "--parquet-out go with it", usage=True)
    try:
        if requests:
            with _maybe(store) as handle:
                # the store's block sizes are read for two files too
                core = handle._open() if handle is not None else None
                a, b = (resolve_request(r, core) for r in requests)
                result = diff_two(a, b, options, core, block_size=block_size, context=context)
        else:
            if store is None:
                raise Error("diff of sessions needs a store (prefixscope.open or "
                            "prefixscope.ingest)", usage=True)
            scoped = _scope(since, until, project)
            with _store_of(store) as handle, _reading(handle, scoped) as st:
                if runner == "ray":
                    from prefixscope.distributed.ray_runner import diff_all_ray

                    result = diff_all_ray(st, options, block_size=block_size, context=context,
                                          parquet_in=parquet_in, parquet_out=parquet_out)
                else:
                    result = diff_sessions(st, session, options, block_size=block_size,
                                           context=context, progress=progress,
                                           workers=workers)
    except (LookupError_, LookupError, RenderError, TokenizerError, WorkerError,
            DistributedError) as exc:
        raise Error(str(exc).splitlines()[0]) from None
    return _masked(DiffReport._of(result))  # secrets masked before any view cuts text


def simulate(store: Store | str | PathLike[str], *, engine: str = "auto",
             block_size: int | None = None, capacity: int | str | None = None,
             bytes_per_token: int | None = None, trace_block_size: int | None = None,
             cache_output: bool = False,
             ttl: float | None = None, concurrent: bool = False, fit: bool = False,
             capacities: Sequence[int | str | None] = (), save: bool = False,
             gateway: str = "auto", tokenizer: str = "auto", what_if: str | Sequence[str] = (),
             workers: int | None = None, since: str | None = None, until: str | None = None,
             project: str | None = None,
             progress: Callable[[int, int], None] | None = None) -> SimulateReport:
    """Replay the requests through a cache model: observed vs predicted vs ideal cached
    tokens, the class of every uncached token, what a fix would gain (``prefixscope
    simulate``, docs/simulate.md).

    Args:
        store: a `Store`, or the path of a store file.
        engine: the cache model; ``auto`` chooses it as `report` does, and replays a log
            of usage alone with its models' hosted API.
        block_size: the engine's unit (vLLM block, SGLang page, LMCache chunk, OpenAI step;
            None: inferred from the cached values for a self-hosted engine, else the
            engine's own).
        capacity: the cache size (as `report` reads it; ``"unlimited"``); None: fitted to
            the observed cached tokens when a self-hosted engine got less than an
            unlimited cache predicts (as `report` does), else unlimited.
        bytes_per_token: KV bytes per token, for a capacity in bytes.
        trace_block_size: tokens per id of a block-hash trace (None: the trace's own).
        cache_output: also cache the logged output's tokens.
        ttl: hosted engines' retention in seconds (None: the engine's own).
        concurrent: overlapping requests overlap (needs logged durations).
        fit: search the block size and capacity that best reproduce the observed cache,
            and replay at the fit (those not given).
        capacities: the capacity curve: each capacity to replay (like `capacity`).
        save: also store the per-request results in the store's ``simulated`` table (a
            store file only: not a temporary store, nor a scope). Off by default: an
            analysis does not write into the user's store unasked.
        gateway, tokenizer, what_if: how to rebuild the prompts; each what-if is replayed.
        workers: processes running the independent replays (None: the machine's cores on
            500 requests or more; 1: this process). The result does not depend on it.
        since, until, project: only these requests (a scoped copy; nothing is saved).
        progress: called with (requests prepared, requests in all).

    Raises:
        Error: a bad option (``usage``), or nothing to replay.
    """
    from prefixscope.analyses.simulate import (
        AUTO_MIN_REPLAY_REQUESTS,
        SimulateError,
        SimulateOptions,
        stored_rows,
    )
    from prefixscope.engines import ENGINES
    from prefixscope.findings.defaults import (
        USAGE_ONLY,
        choose_engine,
        replay_with_defaults,
        usage_only_fix,
    )
    from prefixscope.parallel import effective_workers
    from prefixscope.prompt import RenderError, RenderOptions
    from prefixscope.tokenizers import TokenizerError
    from prefixscope.views.results import SimulateReport

    if engine != "auto" and engine not in ENGINES:
        raise Error(f"unknown engine {engine!r}; known: auto, {', '.join(ENGINES)}",
                    usage=True)
    render_options = _checked(RenderOptions(gateway=gateway, tokenizer=tokenizer))
    scoped = _scope(since, until, project)
    with _store_of(store) as handle:
        # a temporary store (of logs, or a scope's copy) is gone after the call
        keep = save and not handle.temporary and scoped is None
        with _reading(handle, scoped, writable=keep) as st:
            # the one set of defaults (`findings.defaults`): the engine and block from the
            # log, the capacity fitted when a self-hosted engine got less than unlimited
            records = st.usage_records()
            chosen = choose_engine(records, engine, block_size,
                                   with_bodies=bool(st.body_count()))
            if chosen.engine is None:  # the log's fault, not the options': exit 1
                fix = "" if "--engine" in chosen.why else (
                    f"; pass --engine (one of {', '.join(ENGINES)})")
                raise Error(f"nothing to replay with --engine auto: {chosen.why}{fix}")
            spec = ENGINES[chosen.engine]
            if engine == "auto":
                _note(f"replaying with {chosen.engine}"
                      + (f" (block {chosen.unit})" if chosen.unit and spec.block_parameter
                         and not spec.hosted else "")
                      + f": {chosen.why}")
            # 'N blocks' are the engine's blocks: the block size given (or inferred),
            # else the engine's default
            block = chosen.unit or spec.block_size
            options = SimulateOptions(
                engine=chosen.engine, unit=chosen.unit, trace_block_size=trace_block_size,
                capacity_tokens=_capacity_tokens(capacity, block, bytes_per_token),
                cache_output=cache_output, render=render_options, concurrent=concurrent,
                ttl_seconds=ttl)
            curve = [_capacity_tokens(c.strip() if isinstance(c, str) else c, block,
                                      bytes_per_token) for c in capacities]
            try:
                n = effective_workers(workers, st.count(),
                                      auto_minimum=AUTO_MIN_REPLAY_REQUESTS)
                result = replay_with_defaults(
                    st, options, unit_source=chosen.unit_source,
                    capacity_given=capacity is not None, fit=fit, what_if=_what_ifs(what_if),
                    capacity_curve=curve, progress=progress, workers=n)
            except SimulateError as exc:
                raise Error(str(exc), usage=True) from None
            except (RenderError, TokenizerError) as exc:
                raise Error(str(exc).splitlines()[0]) from None
            if not result.requests:
                if not spec.hosted and st.count() and not st.body_count():
                    raise Error(f"{USAGE_ONLY}: {chosen.engine} has no prompt to replay; "
                                f"replay it from its usage with {usage_only_fix(records)}")
                reasons = "; ".join(f"{n:,} {why}" for why, n in result.skipped.items())
                raise Error(f"nothing to replay ({reasons or 'no requests'})")
            if keep:
                st.save_simulation(result.engine, result.unit, result.capacity_tokens,
                                   stored_rows(result))
                _note(f"saved {result.requests:,} results in {st.path} (table simulated)")
    return _masked(SimulateReport._of(result))  # masked before any view or plot cuts text


def render(store: Store | str | PathLike[str] | None, request: str, *, gateway: str = "auto",
           tokenizer: str = "auto", what_if: str | Sequence[str] = ()) -> RenderResult:
    """The prompt one request became upstream: gateway conversion, chat template and the
    model's tokenizer, with its tokens and every segment's character and token span
    (``prefixscope render``, docs/render.md).

    Args:
        store: a `Store`, the path of a store file, or None (`request` is a file).
        request: a request id, a unique prefix of one, or the source's own id; or a file
            holding one request body (``"-"``: stdin).
        gateway, tokenizer, what_if: how to rebuild the prompt.

    Raises:
        Error: a bad option (``usage``), no such request, or one that cannot be rendered.
    """
    from prefixscope.analyses.render import render_report
    from prefixscope.prompt import RenderError, RenderOptions
    from prefixscope.store.lookup import LookupError_, request_from_file, resolve_request
    from prefixscope.tokenizers import TokenizerError
    from prefixscope.views.results import RenderResult

    options = _checked(RenderOptions(gateway=gateway, tokenizer=tokenizer,
                                     what_if=_what_ifs(what_if)))
    try:
        if _is_file(request):
            req = request_from_file(Path(request))
        else:
            with _maybe(store) as handle:
                req = resolve_request(request, handle._open() if handle is not None else None)
        result = render_report(req, options)
    except (LookupError_, RenderError, TokenizerError) as exc:
        raise Error(str(exc).splitlines()[0]) from None
    return _masked(RenderResult._of(result))  # secrets masked before any view cuts text


# -- the investigations: bucket, segments, engine-log, sql, export -----------------------


def bucket(store: Store | str | PathLike[str], *, by: str | Sequence[str] | None = None,
           bins: int = 20, block_size: int | None = None, price_per_mtok: float | None = None,
           explain: bool = True, gateway: str = "auto", tokenizer: str = "auto",
           what_if: str | Sequence[str] = (), since: str | None = None,
           until: str | None = None, project: str | None = None) -> BucketResult:
    """Token-weighted hit rate per group, the cached-token histogram, spikes at exact
    constants, the block size and the template boundary each constant is: what
    ``prefixscope bucket`` prints (docs/investigate.md).

    Args:
        store: a `Store`, or the path of a store file.
        by: group by these dimensions (``"endpoint"``, ``["endpoint", "day"]``); with
            them, also the report's ledger by the same dimensions (``spend``).
        bins: histogram bins.
        block_size: the engine's block size (None: inferred from the cached tokens).
        price_per_mtok: dollars per million uncached prompt tokens of a self-hosted engine.
        explain: render requests to explain the spikes.
        gateway, tokenizer, what_if: how to rebuild the prompts (``prefixscope render``).
        since, until, project: only these requests.

    Raises:
        Error: a bad option (``usage``), unreadable input, or an empty scope.
    """
    from prefixscope.analyses.bucket import bucket_store
    from prefixscope.prompt import RenderOptions
    from prefixscope.tokenizers import TokenizerError
    from prefixscope.views.results import BucketResult

    dims = _dimensions(by)
    asked = _what_ifs(what_if)
    options = RenderOptions(gateway=gateway, tokenizer=tokenizer, what_if=asked)
    with _store_of(store) as handle:
        try:
            with _reading(handle, _scope(since, until, project)) as st:
                found = bucket_store(st, dims, bins=bins, block_size=block_size,
                                     options=options, explain=explain)
            # ccusage's view, usage and dollars by the same dimensions: the report's own
            # ledger (prompts diffed, every missed token attributed), so both commands
            # name the same cause for the same loss
            spend = None if not dims else report(
                handle, by=dims, block_size=block_size, price_per_mtok=price_per_mtok,
                gateway=gateway, tokenizer=tokenizer, what_if=asked, since=since,
                until=until, project=project).breakdown
        except ValueError as exc:
            raise Error(str(exc), usage=True) from None
        except TokenizerError as exc:
            raise Error(str(exc)) from None
    # masked once, before any view or plot cuts text
    return _masked(BucketResult(found, spend, dims))


def segments(store: Store | str | PathLike[str], *, by: str | Sequence[str] | None = None,
             tokens: bool = True, show_text: bool = False, gateway: str = "auto",
             tokenizer: str = "auto", what_if: str | Sequence[str] = (),
             workers: int | None = None, since: str | None = None, until: str | None = None,
             project: str | None = None,
             progress: Callable[[int, int], None] | None = None) -> SegmentsResult:
    """Census of every request segment: how often it changes between turns and how many
    tokens a change there invalidates (``prefixscope segments``, docs/segments.md).

    Args:
        store: a `Store`, or the path of a store file.
        by: one census per group of these dimensions.
        tokens: render and tokenize the requests (False: change rates only).
        show_text: longer previews of each segment's text (masked all the same).
        gateway, tokenizer, what_if: how to rebuild the prompts (``prefixscope render``).
        workers: processes (None: the machine's cores on a large store; 1: this process).
        since, until, project: only these requests.
        progress: called with (sessions done, sessions in all).

    Raises:
        Error: a bad option (``usage``), unreadable input, or an empty scope.
    """
    from prefixscope.analyses.segments import segments_store
    from prefixscope.parallel import WorkerError
    from prefixscope.prompt import RenderOptions
    from prefixscope.tokenizers import TokenizerError
    from prefixscope.views.results import SegmentsResult

    dims = _dimensions(by)
    options = RenderOptions(gateway=gateway, tokenizer=tokenizer, what_if=_what_ifs(what_if))
    scoped = _scope(since, until, project)
    with _store_of(store) as handle, _reading(handle, scoped) as st:
        try:
            found = segments_store(st, dims, options=options, with_tokens=tokens,
                                   show_text=show_text, progress=progress, workers=workers)
        except ValueError as exc:
            raise Error(str(exc), usage=True) from None
        except (TokenizerError, WorkerError) as exc:
            raise Error(str(exc)) from None
    # masked once, before any view cuts text
    return _masked(SegmentsResult(tuple(found), dims))


def engine_log(paths: str | PathLike[str] | Sequence[str | PathLike[str]]
               ) -> EngineLogAnalysis:
    """What vLLM / SGLang server logs and Prometheus /metrics dumps say about the cache:
    the hit-rate series, the configuration, offload stores vs loads, and findings
    (``prefixscope engine-log``, docs/engine-log.md).

    Args:
        paths: engine logs, /metrics dumps, or directories (walked; other files passed
            over); gzip is read transparently.

    Raises:
        Error: a path that does not exist (``usage``), a file named that is not an engine
            log or cannot be read, or no engine log among `paths`.
    """
    from prefixscope.analyses.engine_log import analyze_engine_logs, classify_engine_paths
    from prefixscope.ingest import missing_paths

    names = _strings(paths)
    missing = missing_paths(names)
    if missing:  # a typo'd path is a usage error, as for every command that reads logs
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise Error(f"no such file or directory: {missing[0]}{more}", usage=True)
    files, problems = classify_engine_paths(names)
    if problems:
        place, reason = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise Error(f"{place}: {reason}{more}")
    if not files:
        raise Error(f"no vLLM / SGLang server log or Prometheus dump in {', '.join(names)}")
    try:
        analysis = analyze_engine_logs(files)
    except (OSError, ValueError) as exc:
        raise Error(str(exc)) from None
    return _masked(analysis)


def sql(store: Store | str | PathLike[str], query: str) -> SqlResult:
    """Run read-only SQL (DuckDB's dialect) on the store: the rows of the last statement
    (``prefixscope sql``, docs/store.md). Tables: requests, bodies, parts, sessions,
    session_events; view: turns.

    Raises:
        Error: no usable store, or the query cannot run (``usage``: not a read, or a
            syntax error; else the database's one line).
    """
    from prefixscope.store.sqlquery import SqlError, run_readonly
    from prefixscope.views import sqlrows
    from prefixscope.views.results import SqlResult

    with _store_of(store) as handle:
        try:
            result = run_readonly(handle._open(), query)
        except SqlError as exc:
            raise Error(str(exc), usage=exc.usage) from None
    # the values asked for (BLOBs as the text every format shows), secrets masked; a
    # column's name is query text and can hold one too (`select 1 as "sk-..."`)
    rows = _masked(sqlrows.plain_values(result.rows))
    columns, renamed = sqlrows.unique_columns(_masked(list(result.columns)))
    return SqlResult(tuple(columns), tuple(rows), result.statements, tuple(renamed))


def export(store: Store | str | PathLike[str], *, parquet: str | PathLike[str] | None = None,
           bundle: str | PathLike[str] | None = None, gateway: str = "auto",
           tokenizer: str = "auto", workers: int | None = None,
           progress: Callable[[str], None] | None = None) -> tuple[Path, ...]:
    """Write the store for other tools (``prefixscope export``, docs/store.md): with
    `parquet`, its tables (requests, bodies, parts, sessions, session_events) and the
    turns view as ``<table>.parquet`` files in that directory, each whole or not at all;
    with `bundle`, a share-safe bundle there (`export_bundle`, docs/bundle.md).

    Args:
        store: a `Store`, or the path of a store file.
        parquet, bundle: the directory to write into; exactly one of them.
        gateway, tokenizer, workers, progress: the bundle's, as `export_bundle` takes them.

    Returns:
        The files written.

    Raises:
        Error: neither or both directories, a directory that is a file (``usage``), no
            usable store, or as `export_bundle`.
    """
    from prefixscope.findings.bundle import EVIDENCE_FILE, REQUESTS_FILE
    from prefixscope.store import Store as CoreStore
    from prefixscope.store import StoreError
    from prefixscope.store.export import TABLES, export_parquet

    if (parquet is None) == (bundle is None):
        raise Error("give one of --parquet DIR or --bundle DIR", usage=True)
    file = Path(store.path if isinstance(store, Store) else store)
    if bundle is not None:
        if not file.is_file():
            raise Error(f"no store at {file}: run prefixscope ingest first (or --store)")
        written = export_bundle(store, bundle, gateway=gateway, tokenizer=tokenizer,
                                workers=workers, progress=progress)
        return (written / REQUESTS_FILE, written / EVIDENCE_FILE)
    assert parquet is not None
    target = Path(parquet)
    if target.exists() and not target.is_dir():
        raise Error(f"--parquet {target} is a file: give a directory (export writes "
                    f"{', '.join(t + '.parquet' for t in TABLES)} into it)", usage=True)
    if isinstance(store, Store):  # its connection reopens when next read: DuckDB opens a
        store._close_connection()  # file once per process, and this one may write files
    try:
        with CoreStore.open(file, read_only=True, writes_into=target) as st:
            return tuple(export_parquet(st, target))
    except StoreError as exc:
        raise Error(str(exc)) from None

def redact(patterns: str | Sequence[str] = (), *, defaults: bool = True) -> None:
    """Mask every match of these regular expressions in everything the library returns
    from now on, besides the built-in secret patterns (API keys, bearer tokens,
    Authorization headers, private keys) unless ``defaults=False``: the command line's
    ``--redact`` and ``--no-default-redaction``. Masking keeps lengths (``•``).

    Raises:
        Error: a pattern that is not a regular expression (``usage``).
    """
    from prefixscope.model.redaction import RedactionError, activate, redactor

    try:
        activate(redactor(_strings(patterns), defaults=defaults))
    except RedactionError as exc:
        raise Error(str(exc).splitlines()[0], usage=True) from None


# -- the option assembly the commands share -------------------------------------------


def _strings(values: str | PathLike[str] | Sequence[str | PathLike[str]]) -> list[str]:
    """One value or several, as strings."""
    if isinstance(values, str | os.PathLike):
        return [os.fspath(values)]
    return [os.fspath(v) for v in values]


def _is_file(ref: str) -> bool:
    """A request reference that names a file (``-``: stdin), not a store id."""
    return ref == "-" or Path(ref).is_file()


def _what_ifs(values: str | Sequence[str]) -> tuple[str, ...]:
    """``"a,b"`` or ``["a,b", "c"]`` -> ("a", "b", "c"); a drop:<regex> keeps its commas."""
    out: list[str] = []
    for value in [values] if isinstance(values, str) else values:
        if value.startswith("drop:"):
            out.append(value)
            continue
        out.extend(v.strip() for v in value.split(",") if v.strip())
    return tuple(out)


def _dimensions(by: str | Sequence[str] | None) -> tuple[str, ...]:
    """"endpoint, day" (or a list of names) -> ("endpoint", "day")."""
    if by is None:
        return ()
    names = by.split(",") if isinstance(by, str) else by
    return tuple(d.strip() for d in names if d.strip())


def _checked(options: RenderOptions) -> RenderOptions:
    """`options` once its gateway and what-ifs are valid (``usage`` error) and a tokenizer
    it names loads: checked before any log is read or pair rendered."""
    from prefixscope.prompt import RenderError, check_options
    from prefixscope.tokenizers import AUTO, TokenizerError, load_tokenizer

    try:
        check_options(options)
    except RenderError as exc:
        raise Error(str(exc).splitlines()[0], usage=True) from None
    if options.tokenizer == AUTO:
        # Each request's family picks a bundled tokenizer, loaded when first needed:
        # loading the default here would cost a load the requests may never use.
        return options
    try:
        load_tokenizer(options.tokenizer)
    except TokenizerError as exc:
        raise Error(str(exc).splitlines()[0]) from None
    return options


def _scope(since: str | None, until: str | None, project: str | None) -> Scope | None:
    """The since / until / project scope (None: the whole store)."""
    from prefixscope.store.scope import ScopeError, scope_of

    try:
        return scope_of(since, until, project)
    except ScopeError as exc:
        raise Error(str(exc), usage=True) from None


_UNITS = {"k": 10**3, "m": 10**6, "g": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30,
          "tib": 2**40, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


def _capacity_tokens(value: int | str | None, block_size: int | None,
                     bytes_per_token: int | None) -> int | None:
    """A capacity in tokens: ``500000``, ``"1e6"``, ``"2M"`` (tokens), ``"4096 blocks"``,
    ``"8GiB"`` / ``"500MB"`` (bytes, with `bytes_per_token`). None stays unlimited."""
    import re

    if value is None or isinstance(value, int):
        return value
    text = value
    if text.strip().lower() in ("", "unlimited", "none"):
        return None
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-z]*)\s*", text.lower())
    if match is None:
        raise Error(f"--capacity {text!r}: expected N, 'N blocks' or N with a byte unit "
                    "(GiB, MB, ...)", usage=True)
    number, unit = float(match[1]), match[2]
    if unit in ("", "tokens", "token"):
        return int(number)
    if unit in ("k", "m", "g"):
        return int(number * _UNITS[unit])
    if unit in ("blocks", "block"):
        if block_size is None:
            raise Error(f"--capacity {text}: blocks of how many tokens? Give --block-size "
                        "(the engine's block, e.g. 16 for vLLM)", usage=True)
        return int(number) * block_size
    if unit in _UNITS or unit == "b":
        if bytes_per_token is None:
            raise Error(f"--capacity {text}: a size in bytes needs --bytes-per-token (the KV "
                        "cache bytes of one token of this model)", usage=True)
        return int(number * _UNITS.get(unit, 1)) // bytes_per_token
    raise Error(f"--capacity {text!r}: unknown unit {unit!r}", usage=True)


@contextmanager
def _maybe(store: Store | str | PathLike[str] | None) -> Iterator[Store | None]:
    if store is None:
        yield None
        return
    with _store_of(store) as handle:
        yield handle


@contextmanager
def _reading(handle: Store, scope: Scope | None, *, writable: bool = False
             ) -> Iterator[_CoreStore]:
    """The core store an analysis reads: `handle`'s, or a temporary copy of its requests
    within `scope`, sessions threaded again (the store itself is never changed)."""
    if scope is None:
        yield handle._open(writable)
        if writable:  # the next read opens it read-only, as other processes can share it
            handle._close_connection()
        return
    from prefixscope.store import Store as CoreStore
    from prefixscope.store.files import temporary_folder
    from prefixscope.store.load import relink

    source = handle._open()
    with temporary_folder() as tmp:
        st = CoreStore.open(Path(tmp) / "store.duckdb")
        try:
            source.copy_into(st)
            before = st.count()
            left = st.restrict(scope)
            with st.transaction():
                relink(st)
            _note(f"{scope.describe()}: {left:,} of {before:,} requests")
            if not left:
                raise Error(f"no request {scope.describe()} (of {before:,})")
            st.close()
            st = CoreStore.open(st.file, read_only=True)
            # a temporary store keeps its name: the scope is of the given logs
            st.path = handle._label if handle.temporary else \
                f"{handle._label} ({scope.describe()})"
            yield st
        finally:
            st.close()


def _note(message: str) -> None:
    """What the command line prints as a note: INFO on the ``prefixscope`` logger."""
    import logging

    logging.getLogger("prefixscope").info(message)


def _masked(value: Any) -> Any:
    """`value` with its strings masked by the run's redactor (`redact`)."""
    from prefixscope.model.redaction import active

    return active().value(value)


def _masked_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with its text columns masked as `_masked` masks a result (each distinct
    value once)."""
    import polars as pl

    from prefixscope.model.redaction import active

    redactor = active()
    if not redactor.rules:
        return frame
    for name, dtype in frame.schema.items():
        if dtype != pl.Utf8:
            continue
        values = [v for v in frame[name].unique().to_list() if v is not None]
        changed = {v: m for v in values if (m := redactor.text(v)) != v}
        if changed:
            frame = frame.with_columns(pl.col(name).replace(changed))
    return frame
