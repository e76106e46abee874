"""``since`` / ``until`` / ``project``: the scope an analysis reads, parsed once."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from prefixscope.api.notes import note
from prefixscope.model.errors import Error

if TYPE_CHECKING:
    from prefixscope.api.handle import Store
    from prefixscope.store import Store as _CoreStore
    from prefixscope.store.scope import Scope


def scope_of_options(since: str | None, until: str | None, project: str | None) -> Scope | None:
    """The since / until / project scope (None: the whole store)."""
    from prefixscope.store.scope import ScopeError, scope_of

    try:
        return scope_of(since, until, project)
    except ScopeError as exc:
        raise Error(str(exc), usage=True) from None


@contextmanager
def reading(handle: Store, scope: Scope | None, *, writable: bool = False
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
        st = CoreStore.open(Path(tmp) / "store.duckdb", made_here=True)
        try:
            # only the requests within the scope are read and copied (the scope is the
            # copy's query), then threaded into sessions again; workers open the copy's file
            source.copy_into(st, scope)
            before, left = source.count(), st.count()
            with st.transaction():
                relink(st)
            note(f"{scope.describe()}: {left:,} of {before:,} requests")
            if not left:
                raise Error(f"no request {scope.describe()} (of {before:,})")
            st.close()
            st = CoreStore.open(st.file, read_only=True, made_here=True)
            # a temporary store keeps its name: the scope is of the given logs
            st.path = handle._label if handle.temporary else \
                f"{handle._label} ({scope.describe()})"
            yield st
        finally:
            st.close()
