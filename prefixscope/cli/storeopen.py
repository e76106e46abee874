"""Open the store a command works on: `--store FILE`, or LOGS ingested into a temporary one."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ..exitcodes import ExitCode
from . import console

if TYPE_CHECKING:
    from ..store import Store


@contextmanager
def open_store(logs: list[str] | None, store: Path | None, *, quiet: int = 0,
               json_mode: bool = False) -> Iterator[Store]:
    """Yield a store: LOGS ingested into a temp store, else --store (default prefixscope.duckdb)."""
    from ..ingest import ingest_paths
    from ..store import DEFAULT_STORE, Store, StoreError

    if logs:
        with tempfile.TemporaryDirectory(prefix="prefixscope-") as tmp:
            st = Store.open(Path(tmp) / "store.duckdb")
            try:
                with console.byte_progress(console.show_progress(json_mode, quiet),
                                           "ingest") as progress:
                    result = ingest_paths(logs, st, progress=progress)
                if result.skipped:
                    console.warn(f"{result.skipped} record(s) or file(s) skipped while reading "
                                 "the logs (run `prefixscope ingest` to see them)", quiet)
                if result.ingested == 0 and not result.already_present:
                    raise console.fail("no requests found in the given logs")
                yield st
            finally:
                st.close()
        return
    path = store or Path(DEFAULT_STORE)
    try:
        st = Store.open(path, read_only=True)
    except StoreError as exc:
        raise console.fail(str(exc), ExitCode.ERROR) from None
    try:
        yield st
    finally:
        st.close()
