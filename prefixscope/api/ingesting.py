"""``ingest``: logs read into a store file or a temporary store, the store file built beside
its name and put there whole (nothing half-written is left behind)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from os import PathLike
from typing import TYPE_CHECKING

from prefixscope.api.handle import TEMPORARY, Store
from prefixscope.api.masking import masked
from prefixscope.api.options import strings
from prefixscope.model.errors import Error
from prefixscope.model.records import MAX_LINE_BYTES

if TYPE_CHECKING:
    import tempfile


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
        session_gap: the longest pause between two turns of one threaded session (no
            session id), in minutes, counted past the retention of the earlier turn's
            cache entry as its usage shows it (docs/store.md#sessions).
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
        rules = tuple(parse_session_rule(expr) for expr in strings(session_key))
    except ValueError as exc:
        raise Error(str(exc), usage=True) from None
    missing = [] if skip_missing else missing_paths(strings(paths))
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
                                  label=file if new else None, made_here=tmp is not None)
        except StoreError as exc:
            raise Error(str(exc)) from None
        if tmp is not None:
            core.path = TEMPORARY
        try:
            result = ingest_paths(strings(paths), core, fmt=format, strict=strict,
                                  session_gap_s=session_gap * 60, progress=progress,
                                  session_rules=rules, max_line_bytes=max_line_bytes)
        except StoreError as exc:  # the disk is full: the run is undone (`store.runs`)
            raise Error(str(exc)) from None
        finally:
            core.close()
        done = masked(IngestResult._of(result))
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
    return Store._at(file, label=TEMPORARY if tmp is not None else None, tmp=tmp,
                     ingest_result=done)
