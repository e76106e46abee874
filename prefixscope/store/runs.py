"""An ingest run: its writes committed batch by batch, and the undo that keeps a run that
fails from leaving anything in the store.

Why batches: DuckDB holds the rows a transaction appends (their strings) in memory until
its commit. An ingest that was one transaction grew by ~2.2 GB of RSS per GiB of Codex
rollouts (docs/scale.md, "The Codex rollout shape"); committing each batch keeps it flat.
What a run that fails leaves (a ``--strict`` rejection, a full disk, Ctrl-C or SIGTERM,
a bug) must still be the store as it was, and a run killed with no chance to clean up
(SIGKILL, power loss) must not be read half-written. How:

* ``ingest_runs`` holds a row for each run under way, written by its first batch's
  transaction (`record`: a run stopped before any batch committed wrote nothing, not
  even this). The run's last transaction deletes it; so does its undo. A row found there when the
  store is opened is a run that died: `recover` removes its additions at every writable
  open, before anything reads the store, and a read-only open of such a store opens it
  for writing once first (`Store.open`): readers never see half a run, and no reader
  query needs a condition for it. A row of a run still going in this process (`_LIVE`)
  is not touched (another process cannot hold the store: a writer locks the file).
* ``ingest_added`` lists what each batch newly inserted -- request ids, body and part
  hashes, session events (`EVENT_KEY`) -- written in the batch's own transaction, so it
  always matches the rows committed. Undoing a run deletes exactly those rows: a body or
  a part an earlier run stored is never listed (the inserts skip stored hashes), so
  content shared with earlier runs stays.
* A run that began on a store holding no call (a new store, a command's temporary store)
  lists nothing (``fresh``): undoing it empties the ingest's tables.
* Batches only insert. What rewrites stored rows -- replacing a call an earlier run
  stored by a more complete copy (`Store.add`'s `prefer`: the copy waits in `Run.deferred`),
  linking duplicates (``requests.duplicate_of``), threading sessions (``sessions``,
  ``requests.session``) -- runs in the run's last transaction with the deletion of its
  ``ingest_runs`` row (`finish`): all of it commits or none of it does.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from prefixscope.model import Request
from prefixscope.model.bodytext import WrittenBody

# The tables an ingest writes (the undo of a fresh run empties them).
INGEST_TABLES = ("requests", "bodies", "parts", "session_events", "sessions")
# A session event's identity in `ingest_added` (what `Store._add_events` checks before
# inserting: an event with such a key already stored is not inserted again, so every row
# holding a key a run listed is that run's).
EVENT_KEY = "json_array(request_id, kind, source_file, source_line)::VARCHAR"
# How each listed table's rows are found from their keys.
_KEY_OF = {"requests": "id", "bodies": "hash", "parts": "hash", "session_events": EVENT_KEY}

_LIVE: set[str] = set()  # the runs under way in this process


class Store(Protocol):
    """What this module uses of `store.Store` (which imports this module)."""

    ingest_run: Run | None

    def run(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    def transaction(self) -> AbstractContextManager[None]: ...

    def _run_on(self, name: str, rows: Mapping[str, Sequence[Any]], types: Mapping[str, str],
                sql: str) -> list[tuple[Any, ...]]: ...

    def add(self, requests: Sequence[Request], prefer: Any = None, *,
            body_texts: Sequence[WrittenBody | None] | None = None) -> int: ...


@dataclass(slots=True)
class Run:
    """One ingest run into a store (`begin`)."""

    id: str
    fresh: bool  # the store held no call when it began: nothing is listed
    recorded: bool = False  # its row in ingest_runs is written (`record`)
    # request id -> (a copy that replaces the call an earlier run stored, its body written):
    # written by `finish`, so that a failed run leaves the earlier copy in place
    deferred: dict[str, tuple[Request, WrittenBody | None]] = field(default_factory=dict)

    @property
    def listing(self) -> bool:
        """Whether the batches list what they insert (`note`)."""
        return not self.fresh


def begin(store: Store) -> Run:
    """A run into `store`, whose writes `Store.add` lists (nothing is written yet)."""
    empty = store.run("SELECT " + " AND ".join(
        f"NOT EXISTS (SELECT 1 FROM {table})" for table in INGEST_TABLES))[0][0]
    run = Run(uuid.uuid4().hex, bool(empty))
    _LIVE.add(run.id)
    store.ingest_run = run
    return run


def record(store: Store, run: Run) -> None:
    """Record the run as under way, in the transaction of its first batch (so that the
    batch is never committed without it). Marked before that commit: if the batch is
    rolled back instead, `undo` finds nothing of the run to delete, and deletes nothing
    else (a fresh run's store is still empty)."""
    if not run.recorded:
        store.run("INSERT INTO ingest_runs VALUES (?, ?, ?, ?)",
                  [run.id, datetime.now(UTC).replace(tzinfo=None), os.getpid(), run.fresh])
        run.recorded = True


def note(store: Store, run: Run, table: str, keys: list[str]) -> None:
    """List `keys`, rows of `table` this run's open batch inserted."""
    if not keys:
        return
    store._run_on("_added", {"run": [run.id] * len(keys), "tbl": [table] * len(keys),
                             "key": keys}, {"run": "Utf8", "tbl": "Utf8", "key": "Utf8"},
                  "INSERT INTO ingest_added SELECT run, tbl, key FROM _added")


def own(store: Store, run: Run, ids: list[str]) -> set[str]:
    """Those of `ids` whose stored request this run inserted."""
    if run.fresh:
        return set(ids)
    return {r[0] for r in store.run(
        "SELECT key FROM ingest_added WHERE run = ? AND tbl = 'requests' AND key IN "
        "(SELECT unnest(?::VARCHAR[]))", [run.id, ids])}


def added(store: Store, run: Run) -> list[str] | None:
    """The requests this run inserted, in its last transaction before `finish` (which
    forgets them); None when that list does not say what changed: a fresh run (nothing is
    listed: every request is new) or one whose copies replace calls earlier runs stored
    (`Run.deferred`: stored rows change, and what they matched before with them)."""
    if run.fresh or run.deferred:
        return None
    return [r[0] for r in store.run(
        "SELECT key FROM ingest_added WHERE run = ? AND tbl = 'requests'", [run.id])]


def finish(store: Store, run: Run) -> None:
    """The run's last writes, inside the caller's transaction (with the re-threading): the
    copies that replace calls earlier runs stored, and the run's record deleted."""
    store.ingest_run = None  # what this transaction writes is not listed: it all commits
    if run.deferred:
        ids = list(run.deferred)
        store.run("DELETE FROM requests WHERE id IN (SELECT unnest(?::VARCHAR[]))", [ids])
        store.run("DELETE FROM session_events WHERE request_id IN "
                  "(SELECT unnest(?::VARCHAR[]))", [ids])
        copies = list(run.deferred.values())
        store.add([r for r, _ in copies], body_texts=[text for _, text in copies])
    _forget(store, run.id)


def ended(run: Run) -> None:
    """The transaction `finish` wrote in committed (or was rolled back: the run stays
    recorded, for `undo`)."""
    _LIVE.discard(run.id)


def undo(store: Store, run: Run) -> None:
    """Delete what the run added, in one transaction (a batch's own is rolled back by the
    caller first). If this fails too (the disk is full), the run stays recorded and the
    next open of the store removes it (`recover`).

    Raises:
        StoreError: the disk is full.
    """
    store.ingest_run = None
    run.deferred.clear()
    try:
        if run.recorded:  # else no batch was committed: nothing to undo
            with store.transaction():
                _remove(store, run.id, run.fresh)
    finally:  # removed, or left for the next open's `recover`: no longer going on
        _LIVE.discard(run.id)


def recover(store: Store) -> int:
    """Remove every run recorded as under way but not going on in this process (it died:
    a writer holds the file alone); returns how many."""
    dead = [(rid, bool(fresh)) for rid, fresh in store.run(
        "SELECT run, fresh FROM ingest_runs ORDER BY started DESC") if rid not in _LIVE]
    if dead:
        with store.transaction():
            for rid, fresh in dead:
                _remove(store, rid, fresh)
    return len(dead)


def unfinished(store: Store) -> bool:
    """Whether a run is recorded as under way (read-only: it died, `recover` removes it)."""
    return bool(store.run("SELECT EXISTS (SELECT 1 FROM ingest_runs)")[0][0])


def _remove(store: Store, rid: str, fresh: bool) -> None:
    """Delete run `rid`'s additions and its record (inside a transaction)."""
    if fresh:  # the store held no call when it began: everything there is the run's
        for table in INGEST_TABLES:
            store.run(f"DELETE FROM {table}")
    else:
        for table, key in _KEY_OF.items():
            store.run(f"DELETE FROM {table} WHERE {key} IN (SELECT key FROM ingest_added "
                      "WHERE run = ? AND tbl = ?)", [rid, table])
    _forget(store, rid)


def _forget(store: Store, rid: str) -> None:
    store.run("DELETE FROM ingest_added WHERE run = ?", [rid])
    store.run("DELETE FROM ingest_runs WHERE run = ?", [rid])
