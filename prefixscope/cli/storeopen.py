"""Open the store a command works on: `--store FILE`, or LOGS ingested into a temporary one.

`input_store` / `maybe_input_store` give the library's `prefixscope.Store` the commands
hand to `prefixscope.api`, opened (LOGS ingested) when the API first reads it: after the
API has checked the options, so a bad option fails before any log is read. What ingesting
LOGS skipped is warned about here; an analysis of LOGS without a request fails here.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from prefixscope.cli import console
from prefixscope.cli.exitcodes import ExitCode

if TYPE_CHECKING:
    from prefixscope import api
    from prefixscope.store import Store
    from prefixscope.store.load import IngestResult
    from prefixscope.store.scope import Scope

_SHOWN_SKIPS = 3  # skip reasons printed when logs are ingested into a temporary store


@contextmanager
def input_store(logs: list[str] | None, store: Path | None, *, quiet: int = 0,
                json_mode: bool = False, allow_empty: bool = False) -> Iterator[api.Store]:
    """LOGS ingested into a temporary store, else --store (default prefixscope.duckdb); LOGS
    without a request are an error unless `allow_empty`. Closed (a temporary store deleted)
    on leaving."""
    from prefixscope import api
    from prefixscope.store import DEFAULT_STORE

    if logs:
        def ingested() -> api.Store:
            with console.byte_progress(console.show_progress(json_mode, quiet),
                                       "ingest") as progress:
                st = api.ingest(logs, store=None, progress=progress)
            result = st.ingest_result
            assert result is not None
            _warn_skips(result, quiet)
            if result.ingested == 0 and not result.already_present and not allow_empty:
                st.close()
                raise console.fail("no requests found in the given logs"
                                   + (f" ({result.skipped} skipped)" if result.skipped
                                      else ""))
            return st

        handle = api.Store._deferred(ingested)
    else:
        handle = api.Store._at(store or Path(DEFAULT_STORE))
    try:
        yield handle
    finally:
        handle.close()


@contextmanager
def maybe_input_store(store: Path | None) -> Iterator[api.Store | None]:
    """The store when one is named or the default exists; else nothing (files only)."""
    from prefixscope import api
    from prefixscope.store import DEFAULT_STORE

    path = store or Path(DEFAULT_STORE)
    if store is None and not path.exists():
        yield None
        return
    handle = api.Store._at(path)
    try:
        yield handle
    finally:
        handle.close()


def _warn_skips(result: IngestResult, quiet: int) -> None:
    for e in result.errors[:_SHOWN_SKIPS]:
        place = f"{e.file}:{e.line}" if e.line is not None else e.file
        console.warn(f"skipped {place}: {e.reason}", quiet)
    if result.skipped > _SHOWN_SKIPS:
        console.warn(f"{result.skipped} record(s) or file(s) skipped in all while "
                     "reading the logs (`prefixscope ingest --json` lists them)", quiet)


@contextmanager
def open_store(logs: list[str] | None, store: Path | None, *, quiet: int = 0,
               json_mode: bool = False, writable: bool = False,
               ingested: list[IngestResult] | None = None,
               allow_empty: bool = False, scope: Scope | None = None) -> Iterator[Store]:
    """Yield a store: LOGS ingested into a temp store, else --store (default
    prefixscope.duckdb), read-only unless `writable`. What ingesting LOGS ran into is
    appended to `ingested` when given; LOGS without a request are an error unless
    `allow_empty`. A `scope` (--since / --until / --project) yields a temporary store of
    its requests alone, sessions threaded again (never written back)."""
    from prefixscope.store import DEFAULT_STORE, Store, StoreError
    from prefixscope.store.load import ingest_paths

    if scope is not None and not logs:
        with _scoped_copy(store or Path(DEFAULT_STORE), scope, quiet) as st:
            yield st
        return

    if logs:
        with tempfile.TemporaryDirectory(prefix="prefixscope-") as tmp:
            st = Store.open(Path(tmp) / "store.duckdb")
            st.path = "the given logs"  # what messages name, not the temporary file
            try:
                with console.byte_progress(console.show_progress(json_mode, quiet),
                                           "ingest") as progress:
                    result = ingest_paths(logs, st, progress=progress)
                if ingested is not None:
                    ingested.append(result)
                _warn_skips(result, quiet)
                if result.ingested == 0 and not result.already_present and not allow_empty:
                    raise console.fail("no requests found in the given logs"
                                       + (f" ({result.skipped} skipped)" if result.skipped
                                          else ""))
                if scope is not None:
                    _restrict(st, scope, quiet)
                if not writable:  # read-only, so worker processes can open it too
                    st.close()
                    st = Store.open(st.file, read_only=True)
                    st.path = "the given logs"
                yield st
            finally:
                st.close()
        return
    path = store or Path(DEFAULT_STORE)
    if writable and not path.exists():
        raise console.fail(f"no store at {path} (run `prefixscope ingest LOGS --store {path}`)")
    try:
        st = Store.open(path, read_only=not writable)
    except StoreError as exc:
        raise console.fail(str(exc), ExitCode.ERROR) from None
    try:
        yield st
    finally:
        st.close()


def _restrict(st: Store, scope: Scope, quiet: int) -> None:
    from prefixscope.store.load import relink

    before = st.count()
    left = st.restrict(scope)
    with st.transaction():
        relink(st)
    console.note(f"{scope.describe()}: {left:,} of {before:,} requests", quiet)
    if not left:
        raise console.fail(f"no request {scope.describe()} (of {before:,})")


@contextmanager
def _scoped_copy(path: Path, scope: Scope, quiet: int) -> Iterator[Store]:
    """`path`'s requests within `scope`, in a temporary read-only store."""
    from prefixscope.store import Store, StoreError

    try:
        source = Store.open(path, read_only=True)
    except StoreError as exc:
        raise console.fail(str(exc), ExitCode.ERROR) from None
    with tempfile.TemporaryDirectory(prefix="prefixscope-") as tmp:
        st = Store.open(Path(tmp) / "store.duckdb")
        try:
            with source:
                source.copy_into(st)
            _restrict(st, scope, quiet)
            st.close()
            st = Store.open(st.file, read_only=True)
            st.path = f"{path} ({scope.describe()})"
            yield st
        finally:
            st.close()


def maybe_store(store: Path | None) -> AbstractContextManager[Store | None]:
    """The store when one is named or the default exists; else nothing (files only)."""
    from prefixscope.store import DEFAULT_STORE, Store, StoreError

    path = store or Path(DEFAULT_STORE)
    if store is None and not path.exists():
        return nullcontext(None)
    try:
        return Store.open(path, read_only=True)
    except StoreError as exc:
        raise console.fail(str(exc)) from None
