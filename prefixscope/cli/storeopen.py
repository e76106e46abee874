"""Open the store a command works on: `--store FILE`, or LOGS ingested into a temporary one.

`input_store` / `maybe_input_store` give the library's `prefixscope.Store` the commands
hand to `prefixscope.api`, opened (LOGS ingested) when the API first reads it: after the
API has checked the options, so a bad option fails before any log is read. What ingesting
LOGS skipped is warned about here; an analysis of LOGS without a request fails here.
They use `api.handle`'s `store_file` and `deferred_store` for it: the command line
names a store before it may open it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from prefixscope.cli import console

if TYPE_CHECKING:
    from prefixscope import api

_SHOWN_SKIPS = 3  # skip reasons printed when logs are ingested into a temporary store


@contextmanager
def input_store(logs: list[str] | None, store: Path | None, *, quiet: int = 0,
                json_mode: bool = False, allow_empty: bool = False,
                allow_engine_logs: bool = False,
                skip_missing: bool = False) -> Iterator[api.Store]:
    """LOGS ingested into a temporary store, else --store (default prefixscope.duckdb); LOGS
    without a request are an error unless `allow_empty`, or `allow_engine_logs` and they
    hold engine logs (the report reads those). Closed (a temporary store deleted) on
    leaving."""
    from prefixscope import api
    from prefixscope.api.handle import deferred_store, store_file

    if logs:
        def ingested() -> api.Store:
            with console.byte_progress(console.show_progress(json_mode, quiet),
                                       "ingest") as progress:
                st = api.ingest(logs, store=None, progress=progress,
                                skip_missing=skip_missing)
            result = st.ingest_result
            assert result is not None
            _warn_skips(result, quiet)
            if result.ingested == 0 and not result.already_present and not allow_empty \
                    and not (allow_engine_logs and result.engine_inputs):
                st.close()
                raise console.fail("no requests found in the given logs"
                                   + (f" ({result.skipped} skipped)" if result.skipped
                                      else ""))
            return st

        handle = deferred_store(ingested)
    else:
        handle = store_file(store or _default_store())
    try:
        yield handle
    finally:
        handle.close()


@contextmanager
def maybe_input_store(store: Path | None) -> Iterator[api.Store | None]:
    """The store when one is named or the default exists; else nothing (files only)."""
    from prefixscope.api.handle import store_file

    path = store or _default_store()
    if store is None and not path.exists():
        yield None
        return
    handle = store_file(path)
    try:
        yield handle
    finally:
        handle.close()


def _warn_skips(result: api.IngestResult, quiet: int) -> None:
    for e in result.errors[:_SHOWN_SKIPS]:
        place = f"{e.file}:{e.line}" if e.line is not None else e.file
        console.warn(f"skipped {place}: {e.reason}", quiet)
    if result.skipped > _SHOWN_SKIPS:
        console.warn(f"{result.skipped} record(s) or file(s) skipped in all while "
                     "reading the logs (`prefixscope ingest --json` lists them)", quiet)


def _default_store() -> Path:
    """The store a command reads without --store: the library's (`api.open`'s default)."""
    from prefixscope import api
    from prefixscope.cli.options import defaults

    return Path(defaults(api.open)["path"])
