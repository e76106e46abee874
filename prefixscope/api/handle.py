"""The library's store handle: `Store`, `open`, and the helpers every function uses to
take "a `Store` or the path of a store file".

A handle is opened read-only when first read. The command line names its store before it
may open it (options are checked first, LOGS ingested only then): `store_file` and
`deferred_store` are the two public ways to get such a handle without opening it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

from prefixscope.api.masking import masked_frame
from prefixscope.model.errors import Error

if TYPE_CHECKING:
    import tempfile

    import polars as pl

    from prefixscope.store import Store as _CoreStore
    from prefixscope.views.ingested import IngestResult

TEMPORARY = "the given logs"  # what messages call a temporary store (as the CLI says it)


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

        return masked_frame(requests_frame(self._open()))

    def sessions(self) -> pl.DataFrame:
        """One row per threaded session, in the order of their first turns (columns:
        docs/api.md)."""
        from prefixscope.store.frames import sessions_frame

        return masked_frame(sessions_frame(self._open()))

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
            core = CoreStore.open(self._file, read_only=not writable,
                                  made_here=self._tmp is not None)
        except StoreError as exc:
            raise Error(str(exc)) from None
        core.path = self._label
        self._core, self._writable = core, writable
        return core


@contextmanager
def store_of(store: Store | str | PathLike[str]) -> Iterator[Store]:
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


def store_file(path: str | PathLike[str]) -> Store:
    """The store file `path`, opened when first read (`open` opens it now): a front end
    names its store before it checks its options, and a bad option must fail first."""
    return Store._at(path)


def deferred_store(make: Callable[[], Store]) -> Store:
    """A store `make` builds (e.g. by `ingest`) when it is first used: the command line's
    LOGS are ingested only once the options are known to be good."""
    return Store._deferred(make)



def damaged_store(exc: BaseException) -> str | None:
    """The one line for an exception no function turned into an `Error` that says a store
    file is damaged or the disk was full (what a front end prints instead of a stack
    trace); None for any other exception (a bug)."""
    from prefixscope.store import StoreError, unreadable_store

    return str(exc) if isinstance(exc, StoreError) else unreadable_store(exc)

@contextmanager
def maybe_store(store: Store | str | PathLike[str] | None) -> Iterator[Store | None]:
    """`store_of` of `store`, or None when there is none (a request given as a file)."""
    if store is None:
        yield None
        return
    with store_of(store) as handle:
        yield handle
