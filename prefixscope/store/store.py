"""The DuckDB store: normalized requests, their bodies, and their sessions.

The one module family that speaks SQL (an import-linter contract and a test hold it).

Every command either reads a store file (``--store``) or ingests log paths into a
temporary one, so this module is the single place that knows the schema. The
schema is versioned: `MIGRATIONS` is an append-only list, each entry run once and
recorded in ``schema_version`` (the llm log-store pattern). Never edit a migration
that has shipped; add a new one.

Tables:

* ``requests`` -- one row per model call: identity, time, source place, routing
  (user, client, channel, gateway), usage (cache-inclusive ``prompt_tokens``,
  NULL when unreported), the body's content hash, and two derived keys used to
  thread sessions: ``prefix_chain`` (chained hashes of the non-system messages,
  or the full blocks of a block-hash trace) and ``fingerprint`` (system prompt
  minus volatile billing header, plus tools).
* ``bodies`` / ``parts`` -- request bodies with their original key order (key order
  is exactly what a JSON-key-order cache break is about), keyed by `exact_hash`, so
  identical bodies are stored once; each body as a skeleton plus the ordered hashes
  of its messages / tools / system blocks, each stored once in ``parts``
  (`store.parts`: a session's bodies are quadratic in its turns, its content linear).
* ``sessions`` -- the result of session threading (`prefixscope.sessions`),
  recomputed after each ingest.
* ``session_events`` -- what the log records happening in a session (compaction,
  truncation, another model, a client upgrade, a tool-set delta), each with the first
  call after it (`model.SessionEvent`).
* ``turns`` (view) -- requests joined with their session, the table most
  queries want.
* ``ingest_runs`` / ``ingest_added`` -- the ingest under way and what its batches
  inserted (`store.runs`: an ingest commits batch by batch and undoes a run that fails;
  a run that died is removed by the next open, before anything reads the store). Empty
  between runs.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import orjson

from prefixscope.model import API_USAGE_SEMANTICS, Request, SessionEvent, Usage, UsageRecord
from prefixscope.model.bodytext import WrittenBody, write_body
from prefixscope.model.hashing import exact_json
from prefixscope.model.keys import (
    compaction_marker,
    fingerprint,
    history_hashes,
    prefix_chain,
)
from prefixscope.store import catalog, runs
from prefixscope.store.parts import Layout, join_body, layout_hashes, layout_json
from prefixscope.store.schema import (
    COLUMNS,
    DEFAULT_STORE,
    MIGRATIONS,
    REQUEST_COLUMNS,
    REQUEST_TYPES,
    SCHEMA_VERSION,
    duckdb_type,
    polars_type,
)
from prefixscope.store.scope import Scope

if TYPE_CHECKING:  # polars is imported by the writes, not by a command that only reads
    import polars as pl

    from prefixscope.sessions import SessionLink
    from prefixscope.store.duplicates import MatchKeys

# A write's rows (`Store._run_on`): each column's values, in the order its statement reads
# them, and each column's type as the schema names them (`schema.polars_type`).
Rows = Mapping[str, Sequence[Any]]
# A store's writes, in a process that has not imported Polars, give DuckDB their columns as
# parameters (`Store._run_bound`), not as frames, until they have given it this many
# characters of text in all: importing Polars is ~0.09 s of CPU (of the ~1.5 s of `report`
# on sample_logs/ or a 2 MB Codex rollout, whose writes hold ~6.3 M characters, ~4.8 M of
# them one write's body layouts; issue 37), and DuckDB converts a column of Python strings
# ~3-8 ms per MB slower than Polars does (0.43 -> 2.9 s for 310 MB), so frames pay past
# ~10-25 MB. Counted over the store's writes, not each write's own, so an ingest of many
# small batches binds no more than one large write would before it imports Polars. Once
# Polars is imported (a larger write, a frame read), every write goes through a frame.
# Either way each column is cast to the type the schema names
# (tests/test_store_bound_writes.py: the same rows).
BOUND_TEXT = 8 << 20
# Session threading fetches its rows without a frame up to this many requests, where the
# frame's faster rows (`Store.threading_rows`) would not yet pay for Polars' import.
_FETCHED_ROWS = 10_000


class _ArrowStream:
    """What a name registered with DuckDB scans (`Store._run_framed`): the frame of the
    statement running, seen only through the Arrow C stream interface: DuckDB scans it
    without importing pyarrow (~0.1 s of every ingest), which it does to convert a frame
    it recognizes as Polars."""

    def __init__(self, frame: pl.DataFrame | None) -> None:
        self.frame = frame

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        assert self.frame is not None, "scanned outside Store._run_on"
        return self.frame.__arrow_c_stream__(requested_schema)


class StoreError(Exception):
    """The store file cannot be used (not a prefixscope store, newer schema, locked)."""


def no_store_message(path: str | os.PathLike[str]) -> str:
    """What to do when a command reads a store that is not there: name the logs, or
    ingest them into it first."""
    return (f"no store at {path}: name the logs instead (`prefixscope report LOGS`, and so "
            f"for every command), or ingest them first (`prefixscope ingest LOGS --store "
            f"{path}`)")


# prefixscope never reaches the network: DuckDB must not fetch extensions on its own
# (it would, e.g., to open a SQLite file given as --store, or for an http:// path in SQL).
_OFFLINE: dict[str, str | bool | int | float | list[str]] = {
    "autoinstall_known_extensions": False, "autoload_known_extensions": False}
# `Store.hold_stored` holds up to this many bytes of JSON: the bench's raw captures have
# 50 MB at 1.05 GiB (parts 43, bodies 7), 100 MB at 2.1 GiB; a 0.25 GiB folder of Codex
# rollouts has 212 MB of parts, not held (their reads stay queries).
HELD_BYTES = 128 << 20
# Rows `hold_stored` fetches at a time: each batch's texts are made as str, copied into the
# buffer and freed before the next. 4,096 rows of parts (~24 MB of text at 1 GiB of raw
# captures) took the heap ~9k more page faults than 256 (its CPU 0.14 -> 0.12 s there).
_HOLD_BATCH = 256
# What a held text costs beside its bytes: its dict entry, its hash and its span's tuples
# (~250 bytes measured), pages a forked worker copies when it reads them.
_HELD_ENTRY = 256
_DUCKDB_MAGIC = b"DUCK"  # bytes 8..12 of every DuckDB database file
_SQLITE_MAGIC = b"SQLite format 3\x00"
_LOCK_HOLDER = re.compile(r"Conflicting lock is held in (.*?) \(PID (\d+)\)")


def _polars_loaded() -> bool:
    """Whether this process has imported Polars (a frame then costs no import)."""
    return "polars" in sys.modules


def _binds(rows: Rows, types: Mapping[str, str], bound: int = 0) -> bool:
    """Whether a write of `rows` gives DuckDB its columns as parameters (`BOUND_TEXT`):
    Polars is not imported, and the text columns hold at most `BOUND_TEXT` characters with
    the `bound` characters the store's writes gave as parameters before."""
    return (not _polars_loaded()
            and bound + _text_size(rows, types, BOUND_TEXT - bound) <= BOUND_TEXT)


def _text_size(rows: Rows, types: Mapping[str, str], past: int | None = None) -> int:
    """The characters of the text columns of `rows` (counted up to `past`, a bound)."""
    total = 0
    for name, spelled in types.items():
        if spelled == "Utf8":
            total += sum(len(v) for v in rows[name] if v is not None)
            if past is not None and total > past:
                break
    return total


def _list_text(values: Iterable[Sequence[int] | None]) -> list[str | None]:
    """A list column's values as `Store._run_bound` gives them: each list's integers as
    decimal text joined by commas ("" an empty list, None a NULL). DuckDB converts a list
    parameter's Python integers one at a time (0.08 s for the 125k of a 2 MB Codex
    rollout's prefix chains); the text is split and cast in the statement.

    A list that starts with the whole list before it (an agent's turn extends its
    predecessor's prefix chain: 319 of the rollout's 351) is that list's text, a comma and
    the text of the rest: the same text, as the join of a concatenation is the joins
    joined (0.015 -> 0.004 s for the rollout)."""
    out: list[str | None] = []
    last: Sequence[int] = ()
    last_text = ""
    for value in values:
        if value is None:
            out.append(None)
            continue
        n = len(last)
        if n and isinstance(value, list) and value[:n] == last:
            rest = ",".join(map(str, value[n:]))
            text = f"{last_text},{rest}" if rest else last_text
        else:
            text = ",".join(map(str, value))
        out.append(text)
        last, last_text = value, text
    return out


def _naive_utc(values: Iterable[datetime | None]) -> list[datetime | None]:
    """Timestamps as a Polars ``Datetime`` column holds them: one with a time zone as its
    UTC time without it (the store's times are naive UTC; DuckDB would read an aware one
    as ``TIMESTAMPTZ`` and cast it in the session's time zone)."""
    return [v if v is None or v.tzinfo is None else v.astimezone(UTC).replace(tzinfo=None)
            for v in values]


def _check_store_file(path: Path, read_only: bool) -> None:
    """Refuse, with a reason, what DuckDB would refuse with a less helpful message."""
    if path.is_dir():
        raise StoreError(f"--store {path} is a directory; give a file "
                         f"(e.g. {path / DEFAULT_STORE})")
    if not path.exists():
        if read_only:
            raise StoreError(no_store_message(path))
        return
    try:
        with open(path, "rb") as fh:
            head = fh.read(16)
    except OSError as exc:
        raise StoreError(f"cannot open store {path}: {exc.strerror or exc}") from None
    if not head:
        if read_only:
            raise StoreError(f"{path} is empty (run `prefixscope ingest LOGS --store {path}`)")
        path.unlink()  # an empty placeholder (`touch`, `mktemp`): DuckDB refuses it
        return
    if head.startswith(_SQLITE_MAGIC):
        raise StoreError(f"{path} is a SQLite database, not a prefixscope store (to read it "
                         f"as logs: prefixscope ingest {path} --store store.duckdb)")
    if head[8:12] != _DUCKDB_MAGIC:
        raise StoreError(f"{path} is not a DuckDB file, so not a prefixscope store "
                         "(--store names the store file; logs are arguments)")


def _connect_error(path: str, exc: duckdb.Error) -> str:
    message = str(exc).splitlines()[0]
    holder = _LOCK_HOLDER.search(message)
    if holder or "Could not set lock" in message:
        who = f" ({Path(holder.group(1)).name}, PID {holder.group(2)})" if holder else ""
        return f"store {path} is in use by another process{who}; retry when it is done"
    return f"cannot open store {path}: {message}"


def unreadable_store(exc: BaseException) -> str | None:
    """The one line for a store file DuckDB opened but cannot read (truncated, blocks
    overwritten); None when `exc` is not such a failure (a bug, reported as one)."""
    if not isinstance(exc, duckdb.Error):
        return None
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, duckdb.IOException) or message.startswith(
            ("Corrupt database file", "FATAL Error", "Invalid Input Error: Invalid database")) \
            or "database has been invalidated" in message:
        return f"the store cannot be read (damaged or truncated file?): {message}"
    return None


# What the operating system says when a write finds no room (ENOSPC, EDQUOT, EFBIG), as
# DuckDB passes it on: "Could not write file "….wal": No space left on device".
_NO_ROOM = ("No space left on device", "Disk quota exceeded", "File too large")


def _disk_full(exc: BaseException, file: str) -> str | None:
    """The one line for a store write that found the disk full, naming the file system
    that holds `file` (its mount point, and what it has free); None for another failure."""
    message = str(exc).splitlines()[0] if str(exc) else ""
    reason = next((m for m in _NO_ROOM if m in message), None)
    if reason is None or not isinstance(exc, duckdb.Error | OSError):
        return None
    mount = Path(os.path.abspath(file)).parent
    while not os.path.ismount(mount) and mount != mount.parent:
        mount = mount.parent
    try:
        free = f", {shutil.disk_usage(mount).free:,} bytes free"
    except OSError:
        free = ""
    return (f"cannot write the store {file}: {reason.lower()} on the disk mounted at "
            f"{mount}{free}; this run stored nothing (free some space, or give --store "
            "a file on another disk)")


def time_order(alias: str = "") -> str:
    """The order requests happened in, everywhere requests are ordered: time (unknown first),
    then the place in the log -- file, line, position inside the line's record -- then id."""
    return ", ".join(f"{alias}{c}" for c in (
        "timestamp NULLS FIRST", "source_file", "source_line", "source_position", "id"))


def _json_or_none(value: Any) -> str | None:
    if value is None or value == {}:
        return None
    return exact_json(value)


@dataclass(frozen=True, slots=True)
class UsageSummary:
    """What a set of requests reports, each figure with the requests it is summed over, so
    the numbers add up: the hit rate is over the requests reporting both prompt and cached
    tokens (`rate_*`), not over the `prompt_tokens` / `cached_tokens` columns."""

    format: str  # the source format, or "all"
    requests: int  # requests ("all": upstream calls, a call two sources logged once)
    sessions: int
    with_body: int
    duplicates: int  # requests that are a second log of a call (duplicate_of)
    prompt_tokens: int | None  # summed over every request reporting them (None: none do)
    prompt_requests: int  # requests reporting prompt tokens
    cached_tokens: int | None  # summed over every request reporting them
    cached_requests: int  # requests reporting cached tokens
    rate_requests: int  # requests reporting both: the hit rate's basis
    rate_prompt_tokens: int  # their prompt tokens
    rate_cached_tokens: int  # their cached tokens

    @property
    def hit_rate(self) -> float | None:
        """rate_cached_tokens / rate_prompt_tokens (None without prompt tokens)."""
        return self.rate_cached_tokens / self.rate_prompt_tokens if self.rate_prompt_tokens \
            else None


@dataclass(frozen=True, slots=True)
class UsageFacts:
    """One request's usage as the usage lint reads it: the counts as stored, the source's
    convention, the protocol and gateway they passed through, and the copy it duplicates."""

    id: str
    source_format: str
    endpoint: str
    gateway: str | None  # conversion the log says was applied ("anthropic-to-openai")
    semantics: str | None  # usage_semantics: the source's own convention
    prompt_tokens: int | None
    cached_tokens: int | None
    cache_write_tokens: int | None
    duplicate_of: str | None  # the copy kept when another source logged this call too
    kept_format: str | None  # that copy's source format


class Store:
    """A prefixscope DuckDB file. Use `Store.open()`; close it (or use `with`)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, path: str, *,
                 read_only: bool = False) -> None:
        self.con = con
        self.path = path  # what messages name (a temporary store says "the given logs")
        self.file = path  # the file itself, for worker processes to open
        self.named = path  # the file a full disk's message names (a new store's final name)
        self.read_only = read_only
        self._streams: dict[str, _ArrowStream] = {}  # the names registered (`_run_on`)
        self._bound_text = 0  # the characters of text writes gave as parameters
        self._usage_records: list[UsageRecord] | None = None  # read-only: `usage_records`
        self.ingest_run: runs.Run | None = None  # the ingest writing (`store.runs`)
        self._pid = os.getpid()  # the process whose connection this is (`close`)
        self._writes_into: Path | None = None  # `open`'s, sealed again by `let_go_cache`
        self._private = False  # `open`'s: no other process opens the file (`let_go_written`)
        self._counted = False  # its connection is one of `_CONNECTED`'s

    @classmethod
    def open(cls, path: str | Path = DEFAULT_STORE, *, read_only: bool = False,
             label: str | None = None, writes_into: Path | None = None,
             made_here: bool = False) -> Store:
        """Open (or, writable, create) a store file, as data only: its catalog must be what
        prefixscope's migrations write (`store.catalog`), and the connection reaches no
        file but the store (DuckDB's ``enable_external_access = false``, then
        ``lock_configuration = true``), for every command.

        Args:
            path: the file (a name, never a DuckDB URI: ``:memory:`` or ``md:`` is a file).
            read_only: open it read-only (several processes may read it).
            label: the store's name in messages (default: `path`), e.g. the final name of
                a new store built beside it (`store.files.NewStore`).
            writes_into: a directory the connection may write files into (``export``).
            made_here: the file is a temporary store of this process, in the private
                directory it made (`files.temporary_folder`): opened read-only, it was made
                by this process's own migrations and closed, and its catalog is not read
                and compared again (0.06 s of every `report LOGS`); opened writable while
                no file is at `path` yet, the connection creates it, so its catalog is
                empty by construction and is not read either (the file's catalog query
                lists DuckDB's functions: ~0.02 s of CPU). Only this user can create a
                file in that directory, whose name no other process is given; a file
                found there is read and checked as any other.

        Raises:
            StoreError: the path is not a usable prefixscope store (one line, for a person).
        """
        path = str(path)
        name = path if label is None else label
        _check_store_file(Path(path), read_only)
        created = made_here and not read_only and not os.path.lexists(path)
        try:  # an absolute path: DuckDB reads ":memory:", "md:…" as databases, not files
            con = duckdb.connect(os.path.abspath(path), read_only=read_only, config=_OFFLINE)
        except duckdb.Error as exc:
            raise StoreError(_disk_full(exc, os.path.abspath(name))
                             or _connect_error(name, exc)) from None
        store = cls(con, name, read_only=read_only)
        store.file = os.path.abspath(path)  # workers may start in another directory
        store.named = os.path.abspath(name)
        store._writes_into = writes_into
        # no other process opens the file by a name it knows: a temporary store in this
        # process's private folder, or a new store built beside its final name
        store._private = made_here or os.path.abspath(name) != store.file
        try:
            store._seal(writes_into)
            if not read_only:
                store._migrate(0 if created else None)
                runs.recover(store)  # a run that died (SIGKILL): before anything reads
            elif not made_here:
                store._check_version()
                if runs.unfinished(store):
                    con.close()
                    return cls._recovered(path, label, writes_into)
            store._lock()
        except BaseException as exc:
            with suppress(duckdb.Error):
                con.close()
            full = _disk_full(exc, store.named)
            if full is not None:
                raise StoreError(full) from None
            raise
        store._count(True)
        return store

    @classmethod
    def _recovered(cls, path: str, label: str | None, writes_into: Path | None) -> Store:
        """`path` opened read-only after a writable open removed the run that died in it
        (`runs.recover`): a reader never sees half an ingest."""
        name = path if label is None else label
        try:
            cls.open(path, label=label).close()
        except StoreError as exc:
            raise StoreError(f"{name} holds an ingest that did not finish (killed?), which "
                             f"an open for writing removes, and that failed: {exc}") from None
        return cls.open(path, read_only=True, label=label, writes_into=writes_into)

    def _lock(self) -> None:
        """Lock the connection's settings, last: no statement reopens access (a connection
        of this process to the same file may have locked them already)."""
        if not self.run("SELECT system.main.current_setting('lock_configuration')")[0][0]:
            self.run("SET lock_configuration = true")

    def _seal(self, writes_into: Path | None) -> None:
        """No file or network access but the store (and `writes_into`), before anything of
        the file is read: a view or macro it holds cannot reach further. DuckDB shares one
        database (and its settings) between the connections of a process to a file: a
        second connection finds it sealed and locked already."""
        setting = "SELECT system.main.current_setting(?)"
        allowed = list(self.run(setting, ["allowed_directories"])[0][0] or [])
        wanted = [] if writes_into is None else [os.path.join(os.path.abspath(writes_into), "")]
        if self.run(setting, ["lock_configuration"])[0][0]:
            if self.run(setting, ["enable_external_access"])[0][0] or \
                    any(d not in allowed for d in wanted):
                raise StoreError(f"{self.path} is open already in this process with other "
                                 "settings: close it first")
            return
        if wanted:
            listed = ", ".join("'" + d.replace("'", "''") + "'" for d in allowed + wanted)
            self.run(f"SET allowed_directories = [{listed}]")
        self.run("SET enable_external_access = false")
        # A checkpoint writes what was committed since the last one as row groups of their
        # own, and by default (DuckDB 2.0) merges runs of adjacent row groups into larger
        # ones, rewriting them whole: an ingest commits batch by batch, so its checkpoints
        # rewrote the `parts` and `bodies` tables over and over (12 of 36 s of CPU at 1 GiB
        # of Codex rollouts), each merge holding its row groups in memory (+560 MB merging
        # 108 k parts: ingest's peak). Row groups are kept as written; a reader sees the
        # same rows in the same order. (A read-only connection never checkpoints.)
        self.run("SET max_vacuum_tasks = 0")

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (DuckDB checkpoints a written store here).

        Raises:
            StoreError: the checkpoint found the disk full (one line).
        """
        if os.getpid() != self._pid:
            # a forked worker's copy of its parent's store (`parallel.Pool(fork=True)`):
            # closing it tears down the DuckDB instance the child shares with the
            # parent's copied memory, and kills the child (SIGSEGV); the parent closes it
            return
        self.let_go_stored()  # (a later writer of the file may add bodies and parts)
        self._count(False)
        try:
            self.con.close()
        except duckdb.Error as exc:
            full = _disk_full(exc, self.named)
            if full is not None:
                raise StoreError(full) from None
            raise

    def _count(self, connected: bool) -> None:
        if connected != self._counted:
            _CONNECTED[self.file] += 1 if connected else -1
            self._counted = connected

    def run(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Execute and fetch everything (DuckDB refuses new work while a result is pending)."""
        return self.con.execute(sql, list(params)).fetchall()

    # -- schema -----------------------------------------------------------------

    def _version(self) -> int:
        """The schema version the file's catalog is (`store.catalog`), agreeing with its
        ``schema_version`` table; 0 for an empty file.

        Raises:
            StoreError: not a prefixscope store, one of a newer prefixscope, or a file whose
                catalog holds what prefixscope does not write (a view for a table, a macro).
        """
        found = catalog.read(self.con)
        version = catalog.version_of(found)
        if version is None:
            if not catalog.has_version_table(found):
                if not any(item[2] == "schema_version" for item in found):
                    raise StoreError(f"{self.path} is a DuckDB file but not a prefixscope "
                                     "store")
            elif not catalog.holds_code(found):  # the table is ours, max() DuckDB's
                newer = int(self.run("SELECT max(version) FROM schema_version")[0][0] or 0)
                if newer > SCHEMA_VERSION:
                    raise StoreError(f"{self.path} has schema v{newer}; this prefixscope "
                                     f"knows v{SCHEMA_VERSION}: upgrade prefixscope")
            raise StoreError(f"{self.path} is not a store prefixscope wrote: it "
                             f"{catalog.difference(found)}; not opened")
        if version:
            stored = int(self.run("SELECT max(version) FROM schema_version")[0][0] or 0)
            if stored > SCHEMA_VERSION:
                raise StoreError(f"{self.path} has schema v{stored}; this prefixscope "
                                 f"knows v{SCHEMA_VERSION}: upgrade prefixscope")
            if stored != version:
                raise StoreError(f"{self.path} is not a store prefixscope wrote: its "
                                 f"schema_version says v{stored}, its tables are "
                                 f"v{version}'s; not opened")
        return version

    def _check_version(self) -> None:
        version = self._version()
        if version == 0:
            raise StoreError(f"{self.path} is empty (run `prefixscope ingest` first)")
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path} has schema v{version}; this prefixscope knows "
                             f"v{SCHEMA_VERSION}: upgrade prefixscope")
        if version < SCHEMA_VERSION:
            raise StoreError(f"{self.path} has schema v{version}; open it once without "
                             "read-only access (e.g. `prefixscope ingest --store`) to migrate")

    def _migrate(self, version: int | None = None) -> None:
        """Bring the file to `SCHEMA_VERSION`; `version`: the schema version it is known to
        be at (0: a file the connection has just created), else read off its catalog."""
        if version is None:
            version = self._version()
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path} has schema v{version}; this prefixscope knows "
                             f"v{SCHEMA_VERSION}: upgrade prefixscope")
        if version == SCHEMA_VERSION:
            return
        self.run("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER, "
                         "applied_at TIMESTAMP DEFAULT current_timestamp)")
        for number, sql in enumerate(MIGRATIONS[version:], start=version + 1):
            self.run("BEGIN TRANSACTION")
            self.run(sql)
            self.run("INSERT INTO schema_version (version) VALUES (?)", [number])
            self.run("COMMIT")

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One transaction around the block.

        Raises:
            StoreError: the disk is full (at a write or at the commit): rolled back.
        """
        self.run("BEGIN TRANSACTION")
        try:
            yield
            self.run("COMMIT")
        except BaseException as exc:
            self._streams.clear()  # registered in the transaction: rolled back with it
            with suppress(duckdb.Error):  # a damaged file can refuse the rollback too:
                self.run("ROLLBACK")      # the error that got here is the one to report
            full = _disk_full(exc, self.named)
            if full is not None:
                raise StoreError(full) from None
            raise

    def _run_on(self, name: str, rows: Rows, types: Mapping[str, str], sql: str
                ) -> list[tuple[Any, ...]]:
        """Execute `sql` with `rows` (column -> values, each of the type `types` names)
        visible to it as `name`: as DuckDB parameters when they are small and Polars is
        not loaded (`BOUND_TEXT`), else as a Polars frame."""
        if _binds(rows, types, self._bound_text):
            self._bound_text += _text_size(rows, types)
            return self._run_bound(name, rows, types, sql)
        import polars as pl

        frame = pl.DataFrame(rows, schema={c: polars_type(t) for c, t in types.items()})
        return self._run_framed(name, frame, sql)

    def _run_bound(self, name: str, rows: Rows, types: Mapping[str, str], sql: str
                   ) -> list[tuple[Any, ...]]:
        """`_run_on` through parameters: `name` is a common table expression unnesting one
        list parameter per column, cast to the column's type (``unnest`` of several lists
        in one select zips them: row i holds each list's item i). A timestamp with a time
        zone is given as the UTC time without one, which is what a Polars ``Datetime``
        column makes of it. A column of lists of integers is given as text (`_list_text`),
        split and cast back to its type."""
        lists = [c for c, t in types.items() if t.startswith("List[")]
        columns = ", ".join(
            f'unnest(?::{"VARCHAR" if c in lists else duckdb_type(t)}[]) AS "{c}"'
            for c, t in types.items())
        values = [_naive_utc(rows[c]) if t == "Datetime" else _list_text(rows[c])
                  if c in lists else list(rows[c]) for c, t in types.items()]
        if lists:
            # `string_split` of "" is [""], not []: an empty list is spelled apart
            cast = ", ".join(f"""CASE WHEN "{c}" = '' THEN []::{duckdb_type(types[c])} """
                             f"""ELSE string_split("{c}", ',')::{duckdb_type(types[c])} """
                             f'END AS "{c}"' for c in lists)
            columns = f"* REPLACE ({cast}) FROM (SELECT {columns})"
        return self.run(f"WITH {name} AS (SELECT {columns}) {sql}", values)

    def _run_framed(self, name: str, frame: pl.DataFrame, sql: str
                    ) -> list[tuple[Any, ...]]:
        """`_run_on` through a Polars frame, scanned as Arrow.

        The name is registered once per connection (its stream given each statement's
        frame, and none between them), not registered and unregistered around each
        statement: inside a transaction (ingest runs in one) a view unregistered stays in
        the catalog's undo log until the commit, and so does the frame it scans. A 1 GiB
        ingest of raw captures held every batch's parts that way, its RSS growing ~9 MB a
        batch to 619 MB (docs/scale.md, "Ingest per byte"). A rollback takes back the
        names registered in its transaction (`transaction`, `rollback_open_transaction`
        forget them, so they are registered again)."""
        stream = self._streams.get(name)
        if stream is None:
            stream = self._streams[name] = _ArrowStream(frame)
            self.con.register(name, stream)
        stream.frame = frame
        try:
            return self.run(sql)
        finally:
            stream.frame = None

    def rollback_open_transaction(self) -> None:
        self._streams.clear()  # registered in the transaction: rolled back with it
        self.run("ROLLBACK")

    # -- writing ------------------------------------------------------------------

    def add(self, requests: Sequence[Request],
            prefer: Callable[[Request, Request], bool] | None = None, *,
            body_texts: Sequence[WrittenBody | None] | None = None) -> int:
        """Insert requests not already stored (by id); return how many were new.

        `body_texts`, when given, is each request's body already serialized by the caller
        (`bodytext.write_body`; None without a body): ingest writes each body once, for
        its serialize test, its batch's size and what is stored here.

        A request whose id is stored is a copy of the same call (re-ingest, the call in a
        second file). It is passed over, unless `prefer(copy, stored)` says the copy is
        more complete (its format's rule): then it replaces the stored row -- at the end
        of the ingest run writing (`ingest_run`) when an earlier run stored that row
        (`runs.finish`: a run that fails leaves it).

        In an ingest run that lists its writes (`runs.Run.listing`), what this inserts is
        listed in ``ingest_added``, in the caller's transaction.
        """
        if not requests:
            return 0
        replaced = 0
        if prefer is not None:
            replaced, later = self._replace_preferred(requests, prefer)
            if later:  # the copies wait for the run's end (`runs.finish`)
                run = self.ingest_run
                assert run is not None  # only a run defers (`_replace_preferred`)
                for i, r in enumerate(requests):
                    if r.id in later:
                        run.deferred[r.id] = (r, body_texts[i] if body_texts else None)
                kept = [i for i, r in enumerate(requests) if r.id not in later]
                requests = [requests[i] for i in kept]
                if body_texts is not None:
                    body_texts = [body_texts[i] for i in kept]
                if not requests:
                    return 0  # (the rows replaced now are those of copies kept here)
        listing = self.ingest_run if self.ingest_run and self.ingest_run.listing else None
        now = datetime.utcnow()
        cols: dict[str, list[Any]] = {name: [] for name in REQUEST_COLUMNS}
        bodies: dict[str, tuple[str, str | None]] = {}  # hash -> (skeleton or JSON, layout)
        layouts: dict[str, Layout | None] = {}  # hash -> the body's layout
        parts: dict[str, bytes] = {}  # hash -> the part's text in UTF-8
        for i, r in enumerate(requests):
            body_hash = None
            layout: Layout | None = None
            if r.body is not None:
                given = body_texts[i] if body_texts is not None else None
                written = given if given is not None else write_body(r.body)
                body_hash = written.hash
                if body_hash not in bodies:
                    layout = written.layout
                    if layout is None:
                        assert written.whole is not None
                        bodies[body_hash] = (written.whole.decode(), None)
                    else:
                        assert written.skeleton is not None and written.parts is not None
                        bodies[body_hash] = (written.skeleton, layout_json(layout))
                        for digest, part in written.parts.items():
                            parts.setdefault(digest, part)
                    layouts[body_hash] = layout
                layout = layouts[body_hash]
            # the history's items by the hashes their parts are stored under: the keys
            # look up what they found of an item already seen (`keys.prefix_chain`)
            hashes = history_hashes(r.endpoint, r.body, layout)
            chain, count = prefix_chain(r, hashes)
            u = r.usage
            for name, value in (
                ("id", r.id), ("source_format", r.source_format),
                ("source_file", r.source_file), ("source_line", r.source_line),
                ("timestamp", r.timestamp), ("endpoint", r.endpoint), ("model", r.model),
                ("session_key", r.session_key), ("session_key_source", r.session_key_source),
                ("parent_key", r.parent_key), ("user_id", r.user), ("client", r.client),
                ("channel", r.channel), ("gateway", r.gateway), ("native_id", r.native_id),
                ("prompt_tokens", u.prompt_tokens), ("cached_tokens", u.cached_tokens),
                ("cache_write_tokens", u.cache_write_tokens),
                ("output_tokens", u.output_tokens), ("usage_semantics", u.semantics),
                ("has_body", r.body is not None), ("body_truncated", r.body_truncated),
                ("body_hash", body_hash), ("message_count", count), ("prefix_chain", chain),
                ("fingerprint", fingerprint(r)),
                ("block_hashes", list(r.block_hashes) if r.block_hashes is not None
                 else None),
                ("block_size", r.block_size),
                ("output", None if r.output is None else exact_json(r.output)),
                ("metadata", _json_or_none(r.metadata)), ("ingested_at", now),
                ("source_position", r.source_position),
                ("compaction_marker", compaction_marker(r, hashes)), ("duplicate_of", None),
                ("cache_write_1h_tokens", u.cache_write_1h_tokens),
            ):
                cols[name].append(value)
        # each insert returns the keys it added when they are listed (`runs.note`), else
        # how many rows it added (DuckDB's result of an INSERT): the requests added, read
        # off the insert instead of counting the table before and after it
        returning = " RETURNING {}" if listing else ""
        added = {"requests": self._run_on(
            "_incoming", cols, REQUEST_TYPES,
            f"INSERT INTO requests ({COLUMNS}) SELECT {COLUMNS} FROM _incoming "
            "WHERE id NOT IN (SELECT id FROM requests) QUALIFY row_number() OVER "
            "(PARTITION BY id ORDER BY source_line) = 1" + returning.format("id"))}
        inserted = len(added["requests"]) if listing else int(added["requests"][0][0])
        if parts:
            # decoded here, once each: a batch's bodies hold each part many times
            part_rows = {"hash": list(parts), "part": [t.decode() for t in parts.values()]}
            added["parts"] = self._run_on(
                "_parts", part_rows, {"hash": "Utf8", "part": "Utf8"},
                "INSERT INTO parts SELECT hash, part FROM _parts "
                "WHERE hash NOT IN (SELECT hash FROM parts)" + returning.format("hash"))
        if bodies:
            body_rows: dict[str, list[Any]] = {
                "hash": list(bodies), "body": [b for b, _ in bodies.values()],
                "layout": [la for _, la in bodies.values()]}
            added["bodies"] = self._run_on(
                "_bodies", body_rows, {"hash": "Utf8", "body": "Utf8", "layout": "Utf8"},
                "INSERT INTO bodies (hash, body, layout) SELECT hash, body, layout "
                "FROM _bodies WHERE hash NOT IN (SELECT hash FROM bodies)"
                + returning.format("hash"))
        added["session_events"] = self._add_events(
            requests, returning.format(runs.EVENT_KEY))
        if listing:
            for table, rows in added.items():
                runs.note(self, listing, table, [r[0] for r in rows])
        return inserted - replaced

    def _add_events(self, requests: Sequence[Request], returning: str = ""
                    ) -> list[tuple[Any, ...]]:
        """The session events the requests carry, kept for the stored copy of each call
        (the row from the same file) and once (re-ingest adds none); returns what the
        `returning` clause (`` RETURNING ...``) gives of those inserted."""
        rows = [(r.id, r.session_key, e.timestamp, e.kind, e.detail, r.source_file,
                 e.source_line) for r in requests for e in r.events]
        if not rows:
            return []
        types = {"request_id": "Utf8", "session_key": "Utf8", "timestamp": "Datetime",
                 "kind": "Utf8", "detail": "Utf8", "source_file": "Utf8",
                 "source_line": "Int64"}
        columns = zip(*rows, strict=True)  # the rows' values, column by column
        return self._run_on(
            "_events", {name: list(values) for name, values in zip(types, columns, strict=True)},
            types,
            "INSERT INTO session_events SELECT DISTINCT e.* FROM _events e "
            "WHERE EXISTS (SELECT 1 FROM requests r WHERE r.id = e.request_id "
            "AND r.source_file = e.source_file) AND NOT EXISTS (SELECT 1 FROM "
            "session_events s WHERE s.request_id = e.request_id AND s.kind = e.kind "
            "AND s.source_file = e.source_file "
            "AND s.source_line IS NOT DISTINCT FROM e.source_line)" + returning)

    def _replace_preferred(self, requests: Sequence[Request],
                           prefer: Callable[[Request, Request], bool]) -> tuple[int, set[str]]:
        """Delete the stored rows `prefer` ranks below an incoming copy (`add` then inserts
        the copy under the same id), and the session events their files gave them (the
        copy brings its own file's); returns how many, and the ids of those an earlier
        ingest run stored, which are not deleted: their copies wait for the end of the run
        (`runs.finish`), so that one that fails leaves them. A copy waiting is the one the
        next copy of its call is ranked against, as if it were stored."""
        # which ids are stored, from the id column alone, before loading those whole: a
        # batch's copies are seldom stored, and `get_many` reads every column of the
        # requests table (a 1 GiB Codex ingest spent 7.2 of its 61 s of CPU there)
        present = [row[0] for row in self.run(
            "SELECT id FROM requests WHERE id IN (SELECT unnest(?::VARCHAR[]))",
            [list(dict.fromkeys(r.id for r in requests))])]
        stored = self.get_many(present) if present else {}
        run = self.ingest_run
        if run is not None:
            stored.update((rid, copy) for rid, (copy, _) in run.deferred.items()
                          if rid in stored)
        ids = [r.id for r in requests if r.id in stored and prefer(r, stored[r.id])]
        later: set[str] = set()
        if run is not None and ids:
            mine = runs.own(self, run, ids)
            later = {rid for rid in ids if rid not in mine}
            ids = [rid for rid in ids if rid in mine]
        if ids:
            self.run("DELETE FROM requests WHERE id IN (SELECT unnest(?::VARCHAR[]))", [ids])
            self.run("DELETE FROM session_events WHERE request_id IN "
                     "(SELECT unnest(?::VARCHAR[]))", [ids])
        return len(ids), later

    def copy_into(self, other: Store, scope: Scope | None = None) -> None:
        """The requests of this store within `scope` (None: every one), the bodies they
        hold, every part and their session events, into `other` (an empty store), through
        Arrow: no file access beyond the two connections. The scope is each query's
        condition: what lies outside it is never read. Sessions are not copied: the caller
        threads the copied requests again (`store.load.relink`)."""
        within = "true"
        params: list[object] = []
        if scope is not None:
            where, params = scope.where()
            # a request whose time or project is unknown is outside a window on it
            within = f"coalesce(({where}), false)"
        chosen = f"SELECT {{}} FROM requests WHERE {within}"
        queries: tuple[tuple[str, str, list[object]], ...] = (
            ("requests", chosen.format("*"), params),
            ("bodies", "SELECT * FROM bodies WHERE hash IN "
                       f"({chosen.format('body_hash')})", params),
            ("parts", "SELECT * FROM parts", []),
            ("session_events", "SELECT * FROM session_events WHERE request_id IN "
                               f"({chosen.format('id')})", params),
        )
        with other.transaction():
            for table, query, values in queries:
                rows = self.con.sql(query, params=values).to_arrow_table()
                other.con.register("_copied", rows)
                try:
                    other.run(f"INSERT INTO {table} BY NAME SELECT * FROM _copied")
                finally:
                    other.con.unregister("_copied")

    def replace_sessions(self, links: Iterable[SessionLink], *, only: bool = False) -> None:
        """Store `links` as the sessions of every request (`only`: of the requests they
        name; the others keep theirs)."""
        types = {"request_id": "Utf8", "session": "Utf8", "turn": "Int32", "prev_id": "Utf8",
                 "link": "Utf8", "compaction": "Boolean"}
        rows: dict[str, list[Any]] = {name: [] for name in types}
        for ln in links:
            for name in types:
                rows[name].append(getattr(ln, name))
        if not only:
            self.run("DELETE FROM sessions")
            self._run_on("_sessions", rows, types,
                         "INSERT INTO sessions SELECT * FROM _sessions")
            # the requests table's copy (schema v7); a request threading left out has none
            self.run("UPDATE requests SET session = (SELECT s.session FROM sessions s "
                     "WHERE s.request_id = requests.id)")
            return
        # the rows that change: a request threaded anew, or placed otherwise than before
        changed = self._run_on("_sessions", rows, types, (
            "SELECT n.request_id FROM _sessions n LEFT JOIN sessions s "
            "ON s.request_id = n.request_id WHERE s.request_id IS NULL "
            "OR " + " OR ".join(f"s.{c} IS DISTINCT FROM n.{c}" for c in types)))
        if not changed:
            return
        keep = {r[0] for r in changed}
        rows = {name: [v for rid, v in zip(rows["request_id"], values, strict=True)
                       if rid in keep] for name, values in rows.items()}
        self._run_on("_sessions", {"request_id": rows["request_id"]}, {"request_id": "Utf8"},
                     "DELETE FROM sessions WHERE request_id IN "
                     "(SELECT request_id FROM _sessions)")
        self._run_on("_sessions", rows, types, "INSERT INTO sessions SELECT * FROM _sessions")
        self._run_on("_sessions", rows, types,
                     "UPDATE requests SET session = n.session FROM _sessions n "
                     "WHERE requests.id = n.request_id "
                     "AND requests.session IS DISTINCT FROM n.session")

    # -- reading -------------------------------------------------------------------

    def count(self) -> int:
        return int(self.run("SELECT count(*) FROM requests")[0][0])

    def session_count(self) -> int:
        """Sessions holding a call, every call once (as `report` counts them): a second log
        of a call (``duplicate_of``) is in its first copy's session, not one of its own."""
        return int(self.run("SELECT count(DISTINCT session) FROM turns "
                            "WHERE duplicate_of IS NULL")[0][0])

    def summary(self) -> list[UsageSummary]:
        """Per source format: requests, sessions, bodies, copies of calls another source
        logged, and token sums each over the requests that report them, with the hit rate
        over the requests reporting both (`UsageSummary`). A copy of a call the same format
        logged too (a Claude Code call copied into another session's transcript) counts
        once, through the copy kept."""
        rows = self.run(
            "SELECT source_format, count(*), count(DISTINCT session), "
            "count(*) FILTER (WHERE has_body), count(duplicate_of), "
            "sum(prompt_tokens), count(prompt_tokens), sum(cached_tokens), "
            "count(cached_tokens), count(*) FILTER (WHERE _both), "
            "coalesce(sum(prompt_tokens) FILTER (WHERE _both), 0), "
            "coalesce(sum(cached_tokens) FILTER (WHERE _both), 0) "
            "FROM (SELECT t.*, t.prompt_tokens IS NOT NULL AND t.cached_tokens IS NOT NULL "
            "             AS _both "
            "      FROM turns t LEFT JOIN turns k ON k.id = t.duplicate_of "
            "      WHERE k.id IS NULL OR k.source_format <> t.source_format) "
            "GROUP BY 1 ORDER BY 1")
        return [UsageSummary(*row) for row in rows]

    def summary_once(self) -> UsageSummary:
        """The whole store as `summary` counts a format, every upstream call once: a call
        two sources logged (``duplicate_of``) counts through the first of its copies (the
        one kept, then in time order) that reports each figure."""
        # A call logged once is its own first copy: only the calls with copies go through
        # the ordered aggregates, whose sort held every request (2 GiB of Codex rollouts,
        # 117k calls, none copied: +197 MB at the query's peak, now +39)
        order = f"ORDER BY kept DESC, {time_order()}"
        both = "prompt_tokens IS NOT NULL AND cached_tokens IS NOT NULL"
        row = self.run(
            "WITH copied AS (SELECT DISTINCT duplicate_of AS call FROM requests "
            "                WHERE duplicate_of IS NOT NULL), "
            "m AS (SELECT *, coalesce(duplicate_of, id) AS call, "
            f"            duplicate_of IS NULL AS kept, {both} AS _both "
            "     FROM turns WHERE coalesce(duplicate_of, id) IN (SELECT call FROM copied)), "
            "c AS (SELECT bool_or(has_body) AS with_body, count(*) - 1 AS copies, "
            f"  first(prompt_tokens {order}) FILTER (WHERE prompt_tokens IS NOT NULL) AS p, "
            f"  first(cached_tokens {order}) FILTER (WHERE cached_tokens IS NOT NULL) AS c, "
            f"  first(prompt_tokens {order}) FILTER (WHERE _both) AS bp, "
            f"  first(cached_tokens {order}) FILTER (WHERE _both) AS bc "
            "  FROM m GROUP BY call "
            "  UNION ALL "
            "  SELECT has_body, 0, prompt_tokens, cached_tokens, "
            f"   CASE WHEN {both} THEN prompt_tokens END, "
            f"   CASE WHEN {both} THEN cached_tokens END "
            "  FROM requests WHERE duplicate_of IS NULL AND id NOT IN (SELECT call FROM copied)) "
            "SELECT 'all', count(*), "
            "(SELECT count(DISTINCT session) FROM turns WHERE duplicate_of IS NULL), "
            "count(*) FILTER (WHERE with_body), coalesce(sum(copies), 0), sum(p), count(p), "
            "sum(c), count(c), count(bp), coalesce(sum(bp), 0), coalesce(sum(bc), 0) FROM c")
        return UsageSummary(*row[0])

    def save_simulation(self, engine: str, block_size: int, capacity_tokens: int | None,
                        rows: Sequence[tuple[str, str | None, int, int | None, int, int,
                                             int | None, dict[str, int]]]) -> None:
        """Store one simulation's per-request results (request id, session, prompt,
        observed, predicted, ideal, shortfall, misses), replacing an earlier run of the
        same engine, block size and capacity."""
        with self.transaction():
            self.run("DELETE FROM simulated WHERE engine = ? AND block_size = ? AND "
                     "capacity_tokens IS NOT DISTINCT FROM ?",
                     [engine, block_size, capacity_tokens])
            now = datetime.now(UTC).replace(tzinfo=None)
            self.con.executemany(
                "INSERT INTO simulated VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [[engine, block_size, capacity_tokens, rid, session, prompt, observed,
                  predicted, ideal, shortfall, orjson.dumps(misses).decode(), now]
                 for rid, session, prompt, observed, predicted, ideal, shortfall, misses
                 in rows])

    def usage_records(self) -> list[UsageRecord]:
        """Every request's usage and grouping fields, in time order (file order for ties).

        A read-only store reads them once: while its connection is open no process can
        write the file (a writer needs DuckDB's exclusive lock on it) and the connection
        writes nothing, so every read gives the same rows. Each call gets a list of its own
        (of the same frozen records). report reads them eight times (its records, the block
        sizes, five bucket groupings, the walk's order): 0.66 s of CPU each at 2 GiB of
        Claude Code transcripts (79,050 calls)."""
        if self._usage_records is not None:
            return list(self._usage_records)
        records = self._read_usage_records()
        if self.read_only:
            self._usage_records = records
            return list(records)
        return records

    def _read_usage_records(self) -> list[UsageRecord]:
        rel = self.con.execute(f"SELECT {_USAGE_SELECT} FROM turns ORDER BY {time_order()}")
        # One str per distinct value of the columns a log repeats row after row (its
        # endpoint, model, client, format, session, file, project...): DuckDB makes a str
        # per value fetched, ~530 bytes a Codex call's record held for the whole report
        # (31 MB at 1 GiB), in the memory its walk's workers are forked with.
        # Fetched a batch at a time: fetched whole, the rows' values (a str or int each)
        # were made at once and most freed once deduplicated, leaving the heap's pages
        # half empty under the records kept (2 GiB of Codex rollouts: +193 MB of private
        # memory for 57 MB of records).
        # A predecessor's or a kept copy's id is the str of that request's own record
        # where it came before (time order: nearly always), not one more str per record.
        same: dict[str | None, str | None] = {}
        ids: dict[str, str] = {}
        records = []
        while rows := rel.fetchmany(_RECORDS_BATCH):
            for values in rows:
                row = list(values)
                for i in _REPEATED_USAGE_COLUMNS:
                    row[i] = same.setdefault(row[i], row[i])
                ids[row[_ID_COLUMN]] = row[_ID_COLUMN]
                for i in _ID_USAGE_COLUMNS:
                    if row[i] is not None:
                        row[i] = ids.get(row[i], row[i])
                cost = row[_RECORDED_COST_COLUMN]
                if cost is not None and not 0 <= cost < math.inf:
                    # a recorded cost that is no amount of dollars (NaN, < 0, inf)
                    row[_RECORDED_COST_COLUMN] = None
                records.append(UsageRecord(*row))
        return records

    def session_events(self) -> dict[str, tuple[SessionEvent, ...]]:
        """request id -> the session events the log recorded before it (oldest first)."""
        out: dict[str, list[SessionEvent]] = {}
        for rid, ts, kind, detail, line in self.run(
                "SELECT request_id, timestamp, kind, detail, source_line FROM session_events "
                "ORDER BY request_id, source_line NULLS FIRST, kind"):
            out.setdefault(rid, []).append(SessionEvent(kind, detail, ts, line))
        return {rid: tuple(events) for rid, events in out.items()}

    def extended_retention(self) -> frozenset[str]:
        """Ids of requests that asked for OpenAI's extended prompt-cache retention
        (``metadata.prompt_cache_retention`` = ``24h``, from the request body)."""
        rows = self.run("SELECT id FROM requests WHERE "
                        "json_extract_string(metadata, '$.prompt_cache_retention') = '24h'")
        return frozenset(rid for (rid,) in rows)

    def provider_verdicts(self) -> dict[str, tuple[str, int | None]]:
        """request id -> the provider's own cache-miss verdict the log kept for it
        (``metadata.cache_miss_reason``, its missed tokens), for calls that carry one."""
        rows = self.run(
            "SELECT id, json_extract_string(metadata, '$.cache_miss_reason'), "
            "TRY_CAST(json_extract_string(metadata, '$.cache_missed_input_tokens') AS BIGINT) "
            "FROM requests WHERE duplicate_of IS NULL AND "
            "json_extract_string(metadata, '$.cache_miss_reason') IS NOT NULL")
        return {rid: (reason, tokens) for rid, reason, tokens in rows}

    def lacking_parts(self) -> dict[str, tuple[str, ...]]:
        """request id -> what its log lacks of the prompt sent (``metadata.approximate``:
        the system prompt, the tools, ... as ingest names them), for calls whose ingest
        says its rebuild lacks something."""
        rows = self.run(
            "SELECT id, CAST(json_extract(metadata, '$.approximate') AS VARCHAR) "
            "FROM requests WHERE duplicate_of IS NULL AND "
            "json_array_length(json_extract(metadata, '$.approximate')) > 0")
        return {rid: tuple(str(x) for x in orjson.loads(text)) for rid, text in rows}

    def usage_facts(self) -> list[UsageFacts]:
        """Every request's usage counts, convention and duplicate link, in time order."""
        rows = self.run(
            "SELECT r.id, r.source_format, r.endpoint, r.gateway, r.usage_semantics, "
            "r.prompt_tokens, r.cached_tokens, r.cache_write_tokens, r.duplicate_of, "
            "k.source_format FROM requests r LEFT JOIN requests k ON k.id = r.duplicate_of "
            f"ORDER BY {time_order('r.')}")
        return [UsageFacts(*row) for row in rows]

    def duplicate_rows(self, ids: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """What duplicate matching reads of every request (`store.duplicates.call_row`), or
        of those of `ids`, in time order."""
        where = "" if ids is None else "WHERE id IN (SELECT unnest(?::VARCHAR[])) "
        return self._duplicate_rows(where, [] if ids is None else [list(ids)])

    def duplicate_rows_matching(self, keys: MatchKeys, response_formats: Iterable[str]
                                ) -> list[dict[str, Any]]:
        """`duplicate_rows` of every request holding one of `keys` (a body hash with any
        model: more rows than that key's, never fewer), in no given order. A request's
        response id is its ``metadata.response_id``, else its native id when its format
        logs the response id so (`response_formats`), as `call_row` reads them."""
        where, params = [], []
        if keys.response_ids:
            where.append("coalesce(nullif(json_extract_string(metadata, '$.response_id'), "
                         "''), CASE WHEN source_format IN (SELECT unnest(?::VARCHAR[])) "
                         "THEN nullif(native_id, '') END) IN (SELECT unnest(?::VARCHAR[]))")
            params += [sorted(response_formats), sorted(keys.response_ids)]
        if keys.bodies:
            where.append("body_hash IN (SELECT unnest(?::VARCHAR[]))")
            params.append(sorted({body for body, _ in keys.bodies}))
        if keys.usages:
            where.append("prompt_tokens::VARCHAR || ',' || coalesce(cached_tokens::VARCHAR, "
                         "'') || ',' || coalesce(cache_write_tokens::VARCHAR, '') || ',' || "
                         "output_tokens::VARCHAR IN (SELECT unnest(?::VARCHAR[]))")
            params.append(sorted(",".join("" if v is None else str(v) for v in usage)
                                 for usage in keys.usages))
        if not where:
            return []
        return self._duplicate_rows("WHERE " + " OR ".join(where) + " ", params)

    def _duplicate_rows(self, where: str, params: Sequence[Any]) -> list[dict[str, Any]]:
        rel = self.con.execute(
            "SELECT id, source_format, source_file, source_line, timestamp, model, native_id, "
            "json_extract_string(metadata, '$.response_id') AS response_id, body_hash, "
            "prompt_tokens, cached_tokens, cache_write_tokens, output_tokens FROM requests "
            f"{where}ORDER BY {time_order()}", params)
        cols = [d[0] for d in rel.description]
        return [dict(zip(cols, row, strict=True)) for row in rel.fetchall()]

    def set_duplicates(self, links: dict[str, str], among: Sequence[str] | None = None
                       ) -> None:
        """Record `links` (request id -> id of the copy kept) as ``duplicate_of``; every
        other request's (of `among`, when given: the others keep theirs) is cleared."""
        if among is None:
            self.run("UPDATE requests SET duplicate_of = NULL WHERE duplicate_of IS NOT NULL")
        else:
            self.run("UPDATE requests SET duplicate_of = NULL WHERE duplicate_of IS NOT NULL "
                     "AND id IN (SELECT unnest(?::VARCHAR[]))", [list(among)])
        if not links:
            return
        self._run_on("_duplicates", {"id": list(links), "kept": list(links.values())},
                     {"id": "Utf8", "kept": "Utf8"},
                     "UPDATE requests SET duplicate_of = d.kept FROM _duplicates d "
                     "WHERE requests.id = d.id")

    def duplicate_count(self) -> int:
        """Requests that are a second log of a call another request holds."""
        return int(self.run("SELECT count(*) FROM requests WHERE duplicate_of IS NOT NULL"
                            )[0][0])

    def session_origins(self) -> list[tuple[str, bool, str, int]]:
        """(session, whether its id came from the log, the file its first turn came from,
        its turns) of every session, in the order of their first turns."""
        rows = self.run(
            "SELECT session, bool_or(session_key IS NOT NULL AND session_key = session), "
            "arg_min(source_file, turn), count(*), min(timestamp), min(source_file), "
            "min(source_line) FROM turns WHERE session IS NOT NULL GROUP BY session "
            "ORDER BY 5 NULLS LAST, 6, 7, 1")
        return [(str(r[0]), bool(r[1]), str(r[2]), int(r[3])) for r in rows]

    def truncated_ids(self) -> list[str]:
        """Requests whose body the log cut short (``body_truncated``), in time order."""
        return [str(r[0]) for r in self.run(
            f"SELECT id FROM requests WHERE body_truncated ORDER BY {time_order()}")]

    def source_files(self) -> list[str]:
        """The log files requests came from (each call's kept copy), in name order."""
        return [str(r[0]) for r in self.run(
            "SELECT DISTINCT source_file FROM requests WHERE duplicate_of IS NULL ORDER BY 1")]

    def source_formats(self) -> list[str]:
        """The ingest formats of the stored requests, in name order."""
        return [str(r[0]) for r in self.run(
            "SELECT DISTINCT source_format FROM requests ORDER BY 1")]

    def session_of(self) -> dict[str, str]:
        """request id -> session id, for every threaded request."""
        one = self._record_strs()
        rows = self.run("SELECT request_id, session FROM sessions")
        if one is None:
            return dict(rows)
        return {one.get(rid, rid): one.get(session, session) for rid, session in rows}

    def _record_strs(self) -> dict[str, str] | None:
        """Each request id and session of the usage records a read-only store holds, to
        itself (None: none held): the ids and sessions other reads return, made the
        records' own str objects (`session_of`, `session_pairs`). report holds both
        beside the records, in the memory its walk's workers are forked with: at 2 GiB of
        Codex rollouts ~117k ids three times over and a session per request."""
        records = self._usage_records
        if records is None:
            return None
        one: dict[str, str] = {}
        for r in records:
            one[r.id] = r.id
            if r.session is not None:
                one[r.session] = r.session
        return one

    def positive_cached_values(self) -> list[int]:
        """The cached-token values above zero, every request (block-size inference)."""
        return [int(r[0]) for r in self.run("SELECT cached_tokens FROM requests "
                                            "WHERE cached_tokens > 0")]

    def body_count(self) -> int:
        """Requests whose body the log recorded."""
        return int(self.run("SELECT count(*) FROM requests WHERE has_body")[0][0])

    def body_count_once(self) -> int:
        """Requests with a body, a call two sources logged counted once (what
        `iter_requests` yields with a body)."""
        return int(self.run("SELECT count(*) FROM requests WHERE has_body AND "
                            "duplicate_of IS NULL")[0][0])

    def threading_rows(self, keys: Sequence[str] | None = None) -> Iterator[dict[str, Any]]:
        """The columns session threading needs, each request's as a dict, in time order
        (`keys`: of the requests whose session key is one of them, and of every request
        without a key).

        Through a Polars frame when Polars is loaded (a large ingest's writes load it) or
        the store holds more than `_FETCHED_ROWS` requests (a scoped copy of a large store):
        its rows come out faster than DuckDB's fetch makes them (0.15-0.19 against
        0.26-0.31 s for 14,650 requests holding 1 M prefix hashes); else fetched, as
        importing Polars (~0.09 s) would cost a small ingest more than the frame saves.
        The same values either way (tests/test_store_bound_writes.py)."""
        sql = (
            "SELECT id, timestamp, source_format, source_file, source_line, session_key, "
            "parent_key, native_id, user_id, client, model, prefix_chain, fingerprint, "
            "message_count, prompt_tokens, cached_tokens, cache_write_tokens, "
            "cache_write_1h_tokens, compaction_marker, "
            "block_hashes IS NOT NULL AS chain_of_blocks FROM requests "
            + ("" if keys is None else "WHERE session_key IN (SELECT unnest($keys::VARCHAR[])) "
               "OR coalesce(session_key, '') = '' ")
            + f"ORDER BY {time_order()}")
        params = {} if keys is None else {"keys": list(keys)}
        if _polars_loaded() or self.count() > _FETCHED_ROWS:
            import polars as pl

            # through the Arrow C stream: `.pl()` would import pyarrow (~0.1 s) to convert
            return pl.DataFrame(self.con.sql(sql, params=params)).iter_rows(named=True)
        cursor = self.con.execute(sql, params)
        names = [column[0] for column in cursor.description]
        return (dict(zip(names, row, strict=True)) for row in cursor.fetchall())

    def session_keys(self, ids: Sequence[str]) -> list[str]:
        """The session keys (none empty) the requests of `ids` carry, each once."""
        return [r[0] for r in self.run(
            "SELECT DISTINCT session_key FROM requests WHERE id IN "
            "(SELECT unnest(?::VARCHAR[])) AND session_key <> '' ORDER BY 1", [list(ids)])]

    def keyed(self, names: Sequence[str]) -> bool:
        """Whether a request's session key is one of `names`."""
        return bool(names) and bool(self.run(
            "SELECT EXISTS (SELECT 1 FROM requests WHERE session_key IN "
            "(SELECT unnest(?::VARCHAR[])))", [list(names)])[0][0])

    def has_parent_keys(self) -> bool:
        """Whether a request names a parent (`parent_key`, threading's rule 2)."""
        return bool(self.run("SELECT EXISTS (SELECT 1 FROM requests WHERE parent_key <> '')"
                             )[0][0])

    def session_pairs(self, session: str | None = None, *,
                      once: bool = False) -> list[tuple[str, str, str, bool]]:
        """(earlier id, later id, session, compaction) of every threaded consecutive pair
        (`once`: not those whose later request is a second log of a call, ``duplicate_of``:
        that call's pair is counted in the session of the copy kept)."""
        clause = "AND s.session = ?" if session is not None else ""
        if once:
            clause += " AND r.duplicate_of IS NULL"
        rows = self.run(
            "SELECT s.prev_id, s.request_id, s.session, s.compaction FROM sessions s "
            "JOIN requests r ON r.id = s.request_id "
            f"WHERE s.prev_id IS NOT NULL {clause} ORDER BY s.session, s.turn",
            [session] if session is not None else [])
        one = self._record_strs() if session is None else None
        if one is None:
            return [(a, b, s, bool(c)) for a, b, s, c in rows]
        get = one.get
        return [(get(a, a), get(b, b), get(s, s), bool(c)) for a, b, s, c in rows]

    def continuations(self) -> list[str]:
        """Ids of the requests that continue an unknown compacted session (threading's
        ``continuation`` link: ``compaction`` with no predecessor)."""
        return [r[0] for r in self.run(
            "SELECT request_id FROM sessions WHERE compaction AND prev_id IS NULL "
            "ORDER BY request_id")]

    def sessions_matching(self, ref: str) -> list[str]:
        """Session ids equal to `ref`, else starting with it."""
        exact = self.run("SELECT DISTINCT session FROM sessions WHERE session = ?", [ref])
        if exact:
            return [exact[0][0]]
        return [r[0] for r in self.run(
            "SELECT DISTINCT session FROM sessions WHERE starts_with(session, ?) ORDER BY 1 "
            "LIMIT 5", [ref])]

    def resolve_id(self, ref: str) -> str:
        """A full request id from an id, a unique id prefix, or a source native id."""
        rows = self.run("SELECT id FROM requests WHERE id = ? OR native_id = ? LIMIT 2", [ref, ref])
        if len(rows) == 1:
            return str(rows[0][0])
        if not rows:
            rows = self.run("SELECT id FROM requests WHERE starts_with(id, ?) LIMIT 2", [ref])
        if len(rows) == 1:
            return str(rows[0][0])
        if not rows:
            raise KeyError(f"no request {ref!r} in {self.path}")
        raise KeyError(f"request reference {ref!r} is ambiguous in {self.path}: it matches "
                       "several requests (give more characters of the id)")

    def get(self, request_id: str) -> Request:
        """Load one request, body included."""
        rel = self.con.execute(
            f"SELECT {_ROW_COLUMNS}, {_BODY_COLUMNS} FROM requests r "
            "LEFT JOIN bodies b ON b.hash = r.body_hash WHERE r.id = ?", [request_id])
        cols = [d[0] for d in rel.description]
        rows = [dict(zip(cols, row, strict=True)) for row in rel.fetchall()]
        if not rows:
            raise KeyError(f"no request {request_id!r} in {self.path}")
        return request_from_row(rows[0], self._parts_of(rows))

    def get_many(self, request_ids: Iterable[str]) -> dict[str, Request]:
        """Load several requests, bodies included (absent ids are left out)."""
        return {request.id: request
                for request in self.iter_ids(list(dict.fromkeys(request_ids)))}

    def iter_ids(self, request_ids: Sequence[str], *, batch: int = 256) -> Iterator[Request]:
        """The requests of `request_ids`, bodies included, in that order (absent ids are
        left out).

        Three queries for each `batch` of ids -- the rows, their bodies, the parts those
        name -- each read by row id (`_by_row_id`): a query scans a column of its table, so
        loading a long list a few ids at a time costs time that grows with the store
        (1.05 GiB log: ~23 ms a batch, 40 ms before the row ids); where
        `hold_stored` holds the bodies and parts, one (the rows). Memory is bounded by one
        batch's rows and the parts they name; each body is built as its request is yielded.
        """
        shared = _SharedParts(self)
        for start in range(0, len(request_ids), batch):
            chunk = list(dict.fromkeys(request_ids[start:start + batch]))
            rel = self.con.execute(f"SELECT {_ROW_COLUMNS} FROM requests r "
                                   f"WHERE {_by_row_id('requests', 'id')}", [chunk])
            cols = [d[0] for d in rel.description]
            rows: dict[str, dict[str, Any]] = {}
            for values in rel.fetchall():
                row = dict(zip(cols, values, strict=True))
                rows[row["id"]] = row
            bodies = self._bodies([row["body_hash"] for row in rows.values()
                                   if row["body_hash"] is not None])
            for row in rows.values():
                row["body_json"], row["body_layout"] = bodies.get(row["body_hash"],
                                                                  (None, None))
            parts = shared.batch(list(rows.values()))
            for rid in request_ids[start:start + batch]:
                if rid in rows:
                    yield request_from_row(rows[rid], parts, shared.values)

    def iter_requests(self, *, copies: bool = False, batch: int = 256,
                      source_files: Sequence[str] | None = None) -> Iterator[Request]:
        """Stream requests (with bodies) in time order; a second log of a call another
        source logged (``duplicate_of``) only with `copies`; only those of `source_files`
        when given.

        Memory is bounded by `batch` rows: each row holds its body's skeleton and layout,
        the parts of a batch are read in one query, and each body is built as its request
        is yielded.
        """
        shared = _SharedParts(self)
        for rows in self._turn_rows(copies, batch, source_files):
            parts = shared.batch(rows)
            for row in rows:
                yield request_from_row(row, parts, shared.values)

    def iter_layouts(self, *, batch: int = 256) -> Iterator[tuple[Request, Layout | None]]:
        """The requests `iter_requests` streams, each body as stored: its skeleton (the
        `bodytext.SPLIT_FIELDS` lists emptied) and its layout (those lists' part hashes; None
        for a body stored whole). A reader that works part by part reads each distinct
        part once (`parts_text`), not once for every body that holds it."""
        for rows in self._turn_rows(False, batch, None):
            for row in rows:
                text = row["body_layout"]
                yield (request_from_row({**row, "body_layout": None}),
                       None if text is None else orjson.loads(text))

    def parts_text(self, hashes: Sequence[str]) -> dict[str, str]:
        """The stored parts (hash -> JSON text) of `hashes` (absent ones left out)."""
        if not hashes:
            return {}
        held = self._held()
        if held is not None:
            return {h: held.text(held.parts[h]) for h in hashes if h in held.parts}
        return dict(self.run(f"SELECT hash, part FROM parts WHERE {_by_row_id('parts')}",
                             [list(hashes)]))

    def _bodies(self, hashes: Sequence[str]) -> dict[str, tuple[str, str | None]]:
        """The stored bodies (hash -> skeleton or whole JSON, layout) of `hashes`."""
        if not hashes:
            return {}
        held = self._held()
        if held is not None:
            return {h: held.body(h) for h in hashes if h in held.bodies}
        return {h: (body, layout) for h, body, layout in self.run(
            f"SELECT hash, body, layout FROM bodies WHERE {_by_row_id('bodies')}",
            [list(dict.fromkeys(hashes))])}

    def hold_stored(self, budget: int = HELD_BYTES) -> bool:
        """Read every stored body and part of this read-only store at once, and answer the
        reads of bodies and parts by hash from them (`iter_ids`, `iter_requests`,
        `parts_text`) in this process, and in the processes it forks while they are held,
        until `let_go_stored` (True). Nothing is held (False) on a store open for writing
        (a body or part may yet be added), or where their JSON and what holding each
        costs (`_HELD_ENTRY`) are over `budget` bytes: counted first, nothing read.

        Why: a body's and a part's JSON are read by row id (`_by_row_id`), but DuckDB
        keeps those columns ZSTD-compressed a vector of rows at a time (2,048) and
        decompresses every vector a query touches whole. Ingest writes them in log order,
        sessions interleaved, so a run of a few sessions names parts in every vector, and
        each of report's runs of sessions (16 for the walk, 32 for the what-ifs at 1 GiB)
        decompressed about the whole column again: on 1.05 GiB of raw captures ~10 ms a
        query, growing with the store. Reading them all is one pass (~0.09 s there).

        Held, they are the table's texts (the same strings `run` would fetch: nothing can
        write to a file a read-only connection has open), in one buffer (`_Held`) whose
        pages the forked workers share (copy on write) and read as this process does
        (`_held`: by the file)."""
        if not self.read_only:
            return False
        cursor = self.con.cursor()  # (its own: no result of `con` is left pending)
        try:
            # the bytes and entries to hold, counted before anything is read (DuckDB's
            # strlen counts UTF-8 bytes): a store over budget costs one scan, not a read
            # of the budget's worth and more, nor texts held twice while joined
            (texts, entries), = cursor.execute(
                "SELECT (SELECT coalesce(sum(strlen(part)), 0) FROM parts) + (SELECT "
                "coalesce(sum(strlen(body) + coalesce(strlen(layout), 0)), 0) FROM bodies), "
                "(SELECT count(*) FROM parts) + (SELECT count(*) FROM bodies)").fetchall()
            if texts + _HELD_ENTRY * entries > budget:
                return False
            blob = bytearray()

            def span(text: str) -> tuple[int, int]:
                start = len(blob)
                blob.extend(text.encode())
                return start, len(blob)

            parts: dict[str, tuple[int, int]] = {}
            bodies: dict[str, tuple[tuple[int, int], tuple[int, int] | None]] = {}
            rel = cursor.execute("SELECT hash, part FROM parts")  # (both columns NOT NULL)
            while rows := rel.fetchmany(_HOLD_BATCH):
                for digest, text in rows:
                    parts[digest] = span(text)
            rel = cursor.execute("SELECT hash, body, layout FROM bodies")
            while rows := rel.fetchmany(_HOLD_BATCH):
                for digest, body, layout in rows:
                    bodies[digest] = (span(body), None if layout is None else span(layout))
        finally:
            cursor.close()
        _HELD[self.file] = _Held(blob, bodies, parts)
        return True

    def let_go_cache(self, keep: int = 0) -> bool:
        """Let go of the blocks of the file DuckDB holds in memory (a read-only store), when
        they take more than `keep` bytes.

        DuckDB keeps every block a query has read in its buffer pool until its memory
        limit (80% of the machine's) is near; no statement evicts them, and the store's
        settings are locked. `hold_stored`'s count reads the bodies' and parts' columns
        whole: 227 MB at 2 GiB of Codex rollouts, held in report's process through its
        replays, ledger and masking; a walk's worker reading through a database of its own
        (`unconnected`) holds every block its tasks read. A database opened again starts
        empty, so the connection is closed and opened again (~20 ms) in the process that
        opened it (a forked child's copy is its parent's), sealed as `open` sealed it.
        Where another connection of this process reads the same file (`reader`'s, or a
        copy of its parent's in a forked child: `_CONNECTED`), the database stays (the same
        blocks: nothing let go, nothing read differently), and nothing is done. Returns
        whether it let go.

        Raises:
            StoreError: the file changed while no connection held it (a writer got in
                between: DuckDB lets no process write a file another reads), or cannot
                be opened again.
        """
        if not self.read_only or os.getpid() != self._pid or _CONNECTED[self.file] > 1:
            return False
        if keep and self._blocks_held() <= keep:
            return False
        with self.unconnected():
            pass
        return True

    def _blocks_held(self) -> int:
        """The bytes of the file's blocks DuckDB holds in memory."""
        return int(self.run("SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory() "
                            "WHERE tag = 'BASE_TABLE'")[0][0])

    @contextmanager
    def unconnected(self) -> Iterator[None]:
        """The connection closed while the block runs, opened again after it (a read-only
        store in the process that opened it; else it stays open), sealed and locked as
        `open` left it. Closed, with no other connection of this process to the file,
        DuckDB's database of the file is gone with its blocks: a child forked meanwhile
        holds none of it, and a connection it opens (`reader`) is to a database of its
        own, whose blocks it can let go of (`let_go_cache`), where a forked copy of this
        process's it cannot (closing the last connection to it tears it down under the
        parent's copied memory).

        Raises:
            StoreError: the file changed while no connection held it (a writer got in
                between: DuckDB lets no process write a file another reads), or cannot
                be opened again.
        """
        if not self.read_only or os.getpid() != self._pid:
            yield
            return
        before = _file_state(self.file)
        self._streams.clear()  # (registered on the old connection)
        self.con.close()
        self._count(False)
        try:
            yield
        finally:
            try:
                self.con = duckdb.connect(self.file, read_only=True, config=_OFFLINE)
            except duckdb.Error as exc:
                raise StoreError(_connect_error(self.named, exc)) from None
            self._count(True)
            if _file_state(self.file) != before:
                self.close()
                raise StoreError(f"{self.path} was written while it was being read: run "
                                 "again")
            self._seal(self._writes_into)
            self._lock()

    def let_go_written(self, keep: int = 0) -> None:
        """Let go of the blocks DuckDB holds in memory of a store being written, between
        two transactions, when they take more than `keep` bytes.

        A checkpoint leaves the blocks it wrote in DuckDB's buffer pool, and a query the
        blocks it read, until the memory limit (80% of the machine's) is near: an ingest
        of 2 GiB of Codex rollouts held 328 MB of them when its session threading began
        (1 GiB: 166 MB), under the threading's own memory (ingest's peak). As
        `let_go_cache` does for a reader: the connection is closed (DuckDB checkpoints
        what its write-ahead log holds) and opened again (~50 ms at 1 GiB), sealed and
        locked as `open` left it. Where another connection of this process writes the
        same file, the database stays (nothing let go). Only a store no other process
        opens (a new store built beside its name, a temporary one) lets go: in the gap,
        another process opening a store by its name would find the run under way
        recorded with no writer holding the file, take it for a dead run and undo it.

        Raises:
            StoreError: the disk is full (at the checkpoint); the file changed while no
                connection held it (another process wrote it in between), or cannot be
                opened again.
        """
        if self.read_only or os.getpid() != self._pid or not self._private:
            return
        held = self.run("SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory() "
                        "WHERE tag = 'BASE_TABLE'")[0][0]
        if held <= keep:
            return
        self._streams.clear()  # (registered on the old connection)
        try:
            self.con.close()
        except duckdb.Error as exc:
            raise StoreError(_disk_full(exc, self.named) or str(exc)) from None
        before = _file_state(self.file)
        try:
            self.con = duckdb.connect(self.file, config=_OFFLINE)
        except duckdb.Error as exc:
            raise StoreError(_disk_full(exc, self.named)
                             or _connect_error(self.named, exc)) from None
        if _file_state(self.file) != before:
            self.con.close()
            raise StoreError(f"{self.path} was written by another process during this "
                             "one's ingest: run again")
        self._seal(self._writes_into)
        self._lock()

    def let_go_stored(self) -> None:
        """Stop answering from what `hold_stored` read (a forked worker keeps its copy)."""
        _HELD.pop(self.file, None)

    def _held(self) -> _Held | None:
        """What `hold_stored` read of this store's file, if anything (read-only only)."""
        return _HELD.get(self.file) if self.read_only else None

    def _turn_rows(self, copies: bool, batch: int, source_files: Sequence[str] | None
                   ) -> Iterator[list[dict[str, Any]]]:
        """Rows of requests joined with their stored bodies, in time order, `batch` at a
        time (see `iter_requests`)."""
        conditions = [] if copies else ["r.duplicate_of IS NULL"]
        params: list[Any] = []
        if source_files is not None:
            conditions.append("r.source_file IN (SELECT unnest(?::VARCHAR[]))")
            params.append(list(source_files))
        clause = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        # a second cursor: the parts queries must not consume this one's pending result
        cursor = self.con.cursor()
        try:
            rel = cursor.execute(
                f"SELECT {_ROW_COLUMNS}, {_BODY_COLUMNS} FROM turns r LEFT JOIN bodies b "
                f"ON b.hash = "
                f"r.body_hash {clause} ORDER BY {time_order('r.')}", params)
            cols = [d[0] for d in rel.description]
            while chunk := rel.fetchmany(batch):
                yield [dict(zip(cols, row, strict=True)) for row in chunk]
        finally:
            cursor.close()

    def _parts_of(self, rows: Sequence[dict[str, Any]]) -> dict[str, str]:
        """The stored parts (hash -> JSON) the bodies of `rows` are made of."""
        return self.parts_text(list(dict.fromkeys(
            h for row in rows for h in layout_hashes(row["body_layout"]))))


# what a query selects of a request's body (`request_from_row` reads it)
_BODY_COLUMNS = "b.body AS body_json, b.layout AS body_layout"
# What a query selects of a request's row (of ``requests`` or the ``turns`` view, as
# ``r``): the columns `request_from_row` reads, and the body's hash `iter_ids` joins on.
# Not ``r.*``: the others are ingest's (``prefix_chain``, ``fingerprint``, ...) and
# ``prefix_chain`` is a list of ~70 hashes a Codex call: fetched, every row of report's
# walk built and dropped that list of Python ints, and each forked worker read its
# column's blocks into its own DuckDB cache (1 GiB of Codex: 0.91 -> 0.43 s of CPU a
# quarter of the walk's rows, +31 MB of cache a worker).
_ROW_COLUMNS = ", ".join(f"r.{name}" for name in (
    "id", "source_format", "source_file", "source_line", "timestamp", "endpoint", "model",
    "session_key", "session_key_source", "parent_key", "user_id", "client", "channel",
    "gateway", "native_id", "body_truncated", "body_hash", "output", "prompt_tokens",
    "cached_tokens", "cache_write_tokens", "output_tokens", "usage_semantics",
    "cache_write_1h_tokens", "block_hashes", "block_size", "source_position", "metadata"))


def _by_row_id(table: str, key: str = "hash") -> str:
    """The rows of `table` whose `key` is in the parameter (a list), found by their row
    ids: the key column alone is scanned, and only those rows' other columns are read -- a
    plain ``hash IN (...)`` read the wide column (a part's or a body's JSON) of every row
    group, ~20 ms a query at 1 GB, for each of report's ~50 runs of sessions; a plain
    ``id IN (...)`` read the ~28 columns of every request (`iter_ids`: 12 ms a batch on
    2 GiB of Codex rollouts, 4 ms so, for each of its ~600 runs)."""
    return (f"rowid IN (SELECT rowid FROM {table} WHERE {key} IN "
            "(SELECT unnest(?::VARCHAR[])))")


@dataclass(frozen=True, slots=True)
class _Held:
    """A read-only store's bodies and parts, read whole (`Store.hold_stored`): their JSON
    texts end to end in one UTF-8 buffer, each found by its hash as its span there (a
    body's skeleton or whole JSON, and its layout where it has one).

    Why one buffer, not a str each: a forked worker that is handed an object writes its
    reference count, and so copies the page its header is on; a str per text (15k at
    2 GiB of raw captures) cost two workers about a page per text each (summed memory
    +180 MB at 2 GiB for 100 MB held). Each text is decoded from the buffer when asked
    for, into the asker's own memory, and the buffer's pages stay shared."""

    blob: bytes | bytearray
    bodies: dict[str, tuple[tuple[int, int], tuple[int, int] | None]]
    parts: dict[str, tuple[int, int]]

    def text(self, where: tuple[int, int]) -> str:
        """The text at `where`."""
        return str(memoryview(self.blob)[where[0]:where[1]], "utf-8")

    def body(self, digest: str) -> tuple[str, str | None]:
        """The body `digest`'s skeleton or whole JSON, and its layout (None: stored whole)."""
        body, layout = self.bodies[digest]
        return self.text(body), None if layout is None else self.text(layout)


# `Store.hold_stored`'s, by store file (`Store.file`): in a forked worker, the parent's.
_HELD: dict[str, _Held] = {}


class _SharedParts:
    """The parts a stream of bodies is built from, each parsed once while consecutive
    batches name it (`join_body`'s shared values): the next turn of a session resends the
    history the last one held, so it is neither read from the table nor parsed again.
    Memory: the parts one batch names."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.values: dict[str, Any] = {}

    def batch(self, rows: Sequence[dict[str, Any]]) -> dict[str, str]:
        """The texts of the parts of `rows` not parsed already; the values of parts no
        row of `rows` names are let go."""
        named = dict.fromkeys(h for row in rows for h in layout_hashes(row["body_layout"]))
        self.values = {h: self.values[h] for h in named if h in self.values}
        return self.store.parts_text([h for h in named if h not in self.values])


# Where a log names the backend that served a call, first found first (the order of
# `findings.bundle.backend`, so that a bundle's ``backend`` reads back the same): a
# provider (OpenRouter's, Cline's ``providerId``), LiteLLM's deployment (``model_id``,
# ``api_base``), a deployment name; else the request's channel.
BACKEND_KEYS = ("provider", "model_id", "api_base", "deployment")
# a request's usage convention when only one API writes it, else NULL: the other conventions,
# repeated row after row, would be a str each in the fetch (~10 MB at 2 GiB of Codex rollouts)
_API_USAGE_SQL = ("CASE WHEN usage_semantics IN ("
                  + ", ".join(f"'{s}'" for s in API_USAGE_SEMANTICS) + ") THEN usage_semantics END")
_BACKEND_SQL = ", ".join(f"nullif(json_extract_string(metadata, '$.{k}'), '')"
                         for k in BACKEND_KEYS)
# Where a log says what a call cost, in dollars, the first a record has: Cline's, OpenHands'
# (LiteLLM's) and Bifrost's ``cost``, Claude Code's ``costUSD`` (its older versions),
# OpenRouter's ``total_cost``. JSON is parsed once a row: 0.04 s of CPU at 117,145 rows.
RECORDED_COST_KEYS = ("cost", "costUSD", "total_cost")
_RECORDED_COST_SQL = ("list_any_value(TRY_CAST(json_extract_string(metadata, ["
                      + ", ".join(f"'$.{k}'" for k in RECORDED_COST_KEYS) + "]) AS DOUBLE[]))")
# `_read_usage_records`' select: the SQL of each `UsageRecord` field, selected in the
# record's field order (a field without SQL here fails at import), so that its cleaning
# below finds its columns by name, whatever fields are added where.
_USAGE_SQL = {
    "id": "id", "timestamp": "timestamp", "endpoint": "endpoint", "model": "model",
    "client": "client", "user": "user_id", "channel": "channel",
    "source_format": "source_format", "session": "session", "prompt_tokens": "prompt_tokens",
    "cached_tokens": "cached_tokens", "has_body": "has_body", "duplicate_of": "duplicate_of",
    "source_file": "source_file", "cache_write_tokens": "cache_write_tokens",
    "cache_write_1h_tokens": "cache_write_1h_tokens", "output_tokens": "output_tokens",
    "prev_id": "prev_id", "compaction": "coalesce(compaction, false)",
    "project": "coalesce(json_extract_string(metadata, '$.cwd'), "
               "json_extract_string(metadata, '$.project'))",
    "backend": f"coalesce({_BACKEND_SQL}, channel)",
    "usage_semantics": _API_USAGE_SQL,
    "recorded_cost_usd": _RECORDED_COST_SQL,
}
_USAGE_FIELDS = tuple(f.name for f in fields(UsageRecord))
_USAGE_SELECT = ", ".join(_USAGE_SQL[name] for name in _USAGE_FIELDS)
# its text fields whose values repeat from row to row (one str per distinct value) ...
_REPEATED_USAGE_COLUMNS = tuple(_USAGE_FIELDS.index(name) for name in (
    "endpoint", "model", "client", "user", "channel", "source_format", "session",
    "source_file", "project", "backend", "usage_semantics"))
# ... and the log's own cost, which it cleans
_RECORDED_COST_COLUMN = _USAGE_FIELDS.index("recorded_cost_usd")
# another request's id: its record's own str (`Store._read_usage_records`)
_ID_COLUMN = _USAGE_FIELDS.index("id")
_ID_USAGE_COLUMNS = tuple(_USAGE_FIELDS.index(name) for name in ("duplicate_of", "prev_id"))
_RECORDS_BATCH = 4096  # usage records fetched at a time (`Store._read_usage_records`)


def request_from_row(row: dict[str, Any], parts: Mapping[str, str] | None = None,
                     values: dict[str, Any] | None = None) -> Request:
    """A `Request` from a row of ``requests`` joined with its body (`_BODY_COLUMNS`);
    `parts` holds the stored parts its body's layout names (`store.parts`), `values` the
    parsed ones shared with other bodies (`join_body`)."""
    body_json = row.get("body_json")
    body = None if body_json is None else join_body(body_json, row.get("body_layout"),
                                                    parts or {}, values)
    return Request(
        id=row["id"], source_format=row["source_format"], source_file=row["source_file"],
        source_line=row["source_line"], timestamp=row["timestamp"], endpoint=row["endpoint"],
        model=row["model"], session_key=row["session_key"],
        session_key_source=row["session_key_source"], parent_key=row["parent_key"],
        user=row["user_id"], client=row["client"], channel=row["channel"],
        gateway=row["gateway"], native_id=row["native_id"],
        body=body,
        body_truncated=bool(row["body_truncated"]),
        output=orjson.loads(row["output"]) if row["output"] is not None else None,
        usage=Usage(prompt_tokens=row["prompt_tokens"], cached_tokens=row["cached_tokens"],
                    cache_write_tokens=row["cache_write_tokens"],
                    output_tokens=row["output_tokens"], semantics=row["usage_semantics"],
                    cache_write_1h_tokens=row.get("cache_write_1h_tokens")),
        block_hashes=tuple(row["block_hashes"]) if row["block_hashes"] is not None else None,
        block_size=row["block_size"],
        source_position=row.get("source_position"),
        metadata=orjson.loads(row["metadata"]) if row["metadata"] is not None else {},
    )


_READERS: dict[str, Store] = {}
# The connections to each store file (absolute path) this process's memory holds: its own
# (`Store.open`, until `close`) and, in a forked child, its parent's, copied and never
# closed there. DuckDB keeps one database a file while any is open (`let_go_cache`).
_CONNECTED: Counter[str] = Counter()


def _file_state(path: str) -> tuple[int, int, int, bool]:
    """What a write to a DuckDB file changes: its inode, size and modification time, and
    whether its write-ahead log is there."""
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns, os.path.exists(path + ".wal")


def reader(file: str) -> Store:
    """This process's read-only connection to the store `file`, opened on first use and
    kept for the process's life (a worker process runs many tasks on one store; DuckDB
    lets several processes read a file no process writes).

    Raises:
        StoreError: the file cannot be opened read-only (e.g. a writer holds it).
    """
    store = _READERS.get(file)
    if store is None:
        store = _READERS[file] = Store.open(file, read_only=True)
    return store
