"""Log files -> the store: the ingest driver.

Reading is `prefixscope.ingest`'s (pure: bytes in, `Request` records out); this module
streams those records into the store in bounded batches (`ingest.BATCH` requests or
`ingest.BATCH_BYTES` of body JSON held: an agent's call that resends the last call's
lists counts its new elements, `_extends`), each committed on its own: DuckDB holds what a
transaction appends in memory until its commit, so one transaction for the whole run
grew with the log (~2.2 GB of RSS per GiB of Codex rollouts). A batch spans files: each
store write scans what the store holds, so a write per file made a folder of 20,000
one-call files quadratic. It links second logs of one call (`store.duplicates`) and
re-threads sessions in the run's last transaction: in a store that held calls before, only
what the new calls can change (`relink`), so a few MB ingested into a store of GBs costs
what those MB do (1.8 MB of Codex rollouts into a 2 GiB store: 6.6 s of CPU re-linking and
re-threading all 117k calls). A run that fails (under ``--strict``
any skipped record; a full disk; an interrupt) is undone: the store is left as it was
(`store.runs`: the run is recorded, what it adds listed, and a run killed outright is
removed by the next open).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from prefixscope.ingest import (
    BATCH,
    BATCH_BYTES,
    BATCH_NEW_BYTES,
    IngestError,
    ProgressFn,
    Tally,
    detect,
    engine_kind,
    expand_paths,
    forced_mismatch,
    io_reason,
    is_json_schema,
    parse_serialized,
    probe,
    resolved,
    unrecognized_reason,
)
from prefixscope.ingest.engine_logs import EngineLogInput
from prefixscope.ingest.formats import get_format
from prefixscope.ingest.normalize.sessions import SessionRule, apply_session_rules
from prefixscope.ingest.source import DECODE_ERRORS, MAX_LINE_BYTES, Probe, Source
from prefixscope.model import Request, Skip
from prefixscope.model.bodytext import WrittenBody
from prefixscope.sessions import thread_sessions
from prefixscope.store import runs
from prefixscope.store.duplicates import (
    RESPONSE_ID_FORMATS,
    call_row,
    link_duplicates,
    match_keys,
)
from prefixscope.store.store import Store, UsageSummary


class _Rejected(Exception):
    """--strict and something was skipped: undo the run."""


class _Batch:
    """Requests read but not yet written, from one file or many: written when `BATCH`
    requests or `BATCH_BYTES` of body JSON are held (`_extends`), and at the end of the
    run."""

    def __init__(self, store: Store, max_count: int, max_bytes: int) -> None:
        self.store = store
        self.max_count, self.max_bytes = max_count, max_bytes
        self.requests: list[Request] = []
        self.texts: list[WrittenBody | None] = []  # each request's body (serialized once)
        self.ids: set[str] = set()
        self.held = 0  # bytes of body JSON held (UTF-8)
        self.new_held = 0  # of bodies that extend the one before them: their new bytes
        self.prefer: Callable[[Request, Request], bool] | None = None
        self.new = 0  # requests the writes so far added

    def add(self, request: Request, prefer: Callable[[Request, Request], bool] | None,
            stored: Callable[[], None] | None, text: WrittenBody | None) -> None:
        """Hold `request`, whose body `text` is (`bodytext.write_body` of it; None: no
        body)."""
        # A format's rule for two copies of one call compares a copy with the stored one:
        # a second copy (same id, another file) or another format's rule waits for a write.
        if self.requests and (request.id in self.ids or prefer is not self.prefer):
            self.write(stored)
        self.prefer = prefer
        self.requests.append(request)
        self.texts.append(text)
        self.ids.add(request.id)
        if text is None:
            pass
        elif _extends(text, self.texts[-2] if len(self.texts) > 1 else None):
            # its layout (a part hash an element, as stored) is inserted whole each time
            entries = sum(map(len, (text.layout or {}).values()))
            self.new_held += text.fresh + _LAYOUT_ENTRY * entries
        else:
            self.held += text.size
        if (len(self.requests) >= self.max_count or self.held >= self.max_bytes
                or self.new_held >= BATCH_NEW_BYTES):
            self.write(stored)

    def write(self, stored: Callable[[], None] | None = None) -> None:
        if self.requests:
            with self.store.transaction():  # a batch is committed whole, or not at all
                if self.store.ingest_run is not None:
                    runs.record(self.store, self.store.ingest_run)
                self.new += self.store.add(self.requests, self.prefer, body_texts=self.texts)
        self.requests, self.texts, self.ids, self.held, self.new_held = [], [], set(), 0, 0
        if stored is not None:
            stored()


def _extends(text: WrittenBody, before: WrittenBody | None) -> bool:
    """Does `text` resend the lists of `before` (the body held before it in the batch),
    those very objects (`WrittenBody.shares`), as an agent's next call does? The batch
    then holds only its new bytes (`WrittenBody.fresh`) beside `before`'s, and its write
    inserts only those: such a batch is bounded by `BATCH_NEW_BYTES` of them, not by
    `BATCH_BYTES` of whole bodies, which would cut it every ~90 calls of a long Codex
    session (0.25 GiB folder: 160 writes, each scanning what the store holds)."""
    return before is not None and text.shares is not None and text.shares == before.serial


# What an ingest lets DuckDB keep of the blocks of its store before its last transaction
# (`Store.let_go_written`): ~50 ms to let them go, for a store whose blocks outgrow this.
LET_GO_BYTES = 64 << 20


# A part hash in a stored layout: ``"x3:`` + 32 hex digits + ``",``.
_LAYOUT_ENTRY = 38


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What one `ingest_paths` call did."""

    ingested: int  # requests added to the store
    already_present: int  # records whose id was already stored (re-ingest)
    skipped: int  # bad records and unrecognized files
    by_format: dict[str, int]  # records read per format (new and already present)
    sessions: int  # sessions in the store after threading
    files: int  # files read
    errors: tuple[IngestError, ...]  # the first MAX_LISTED_ERRORS problems (all are counted)
    unrecognized: tuple[str, ...] = ()  # files no format recognized
    ignored: tuple[str, ...] = ()  # documentation/config files passed over in directory walks
    empty: tuple[str, ...] = ()  # files recognized (format named) that held no request
    engine_logs: tuple[str, ...] = ()  # vLLM/SGLang server logs, Prometheus dumps: not read here
    duplicates: int = 0  # requests in the store that are a second log of a call (duplicate_of)
    summary: tuple[UsageSummary, ...] = ()  # the store after the run, per source format
    totals: UsageSummary | None = None  # the store after the run, every upstream call once
    failed: bool = False  # --strict and something was skipped: nothing was stored (undone)
    # the engine logs that are files, each with the kind the ingest sniffed (`report` reads
    # them without sniffing again); not in the --json document, whose engine_logs names them
    engine_inputs: tuple[EngineLogInput, ...] = ()


def relink(store: Store, session_gap_s: float = 3600.0,
           added: Sequence[str] | None = None) -> None:
    """Link every second log of a call to the copy kept, then thread sessions: what an
    ingest ends with, and what a scoped store (`store.scope`) is given again.

    `added`: the requests an ingest just added to a store this function left linked and
    threaded (None: every request is to be linked and threaded). Only what they can change
    is done again, with the links and sessions one pass over the whole store gives:

    * duplicates: the requests they reach through a response id, a body or a usage
      (`duplicates.match_keys`, followed until it reaches no more): linking groups requests
      by these keys alone, so no other request's link can change;
    * sessions: threading places a request from the requests of its scope before it (an
      explicit session key, else its source, user, client and model) and nothing else but
      a named parent (rule 2). The sessions of the added requests' keys are threaded
      again, and so is every request without a key, whose threading depends on the gap
      this ingest is given. When a request names a parent (its session is another
      scope's), or a session threaded anew is named as some request's key (their turns
      are numbered together), the whole store is threaded.
    """
    if added is None:
        store.set_duplicates(link_duplicates(map(call_row, store.duplicate_rows())))
        store.replace_sessions(thread_sessions(store.threading_rows(), gap_s=session_gap_s))
        return
    reached = _reached(store, added)
    store.set_duplicates(link_duplicates(map(call_row, store.duplicate_rows(reached))),
                         among=reached)
    keys = store.session_keys(added)
    links = None if store.has_parent_keys() else thread_sessions(
        store.threading_rows(keys), gap_s=session_gap_s)
    if links is None or store.keyed(sorted({ln.session for ln in links} - set(keys))):
        store.replace_sessions(thread_sessions(store.threading_rows(), gap_s=session_gap_s))
    else:
        store.replace_sessions(links, only=True)


def _reached(store: Store, ids: Sequence[str]) -> list[str]:
    """`ids` and every request duplicate linking can join to one of them, directly or
    through others (`duplicates.match_keys`)."""
    seen = set(ids)
    frontier = store.duplicate_rows(ids)
    while frontier:
        keys = match_keys(map(call_row, frontier))
        frontier = [r for r in store.duplicate_rows_matching(keys, RESPONSE_ID_FORMATS)
                    if r["id"] not in seen]
        seen.update(r["id"] for r in frontier)
    return sorted(seen)


def ingest_paths(
    paths: Iterable[str],
    store: Store,
    *,
    fmt: str = "auto",
    strict: bool = False,
    session_gap_s: float = 3600.0,
    progress: ProgressFn | None = None,
    session_rules: tuple[SessionRule, ...] = (),
    batch_size: int | None = None,
    batch_bytes: int | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> IngestResult:
    """Ingest log files into `store` (a `prefixscope.store.Store`) and re-thread sessions.

    Args:
        paths: files, directories, globs, or "-" for stdin.
        store: an open writable Store.
        fmt: "auto" to detect per file, or a format name to force.
        strict: any skipped record or unrecognized file fails the run; nothing is stored.
        session_gap_s: longest pause between two turns of one threaded session.
        progress: called with (file, bytes done, bytes total, requests read) as files
            are read: after each stored batch and each file.
        session_rules: ``--session-key`` rules; the first that reads a value from a
            request sets its session (`normalize.sessions.apply_session_rules`).
        max_line_bytes: a longer line of a log read line by line is one skip.

    Returns:
        An IngestResult; `failed` is set when strict mode rejected the input.

    Raises:
        KeyError: `fmt` is not a known format name.
        StoreError: the store cannot be written (the disk is full); nothing was stored
            (the batches committed are deleted, or, if the disk has no room for that
            either, by the next open of the store: `store.runs`).
    """
    forced = get_format(fmt) if fmt != "auto" else None
    tally = Tally()
    batch = _Batch(store, batch_size or BATCH, batch_bytes or BATCH_BYTES)
    own = Path(store.path)
    sources = list(expand_paths(paths, tally, exclude=frozenset(
        resolved(f) for f in (own, own.with_name(own.name + ".wal")))))
    total = sum(_safe_size(s) for s in sources)
    done = 0
    failed = False
    run = runs.begin(store)
    try:
        for source in sources:
            source.max_line_bytes = max_line_bytes
            try:
                _ingest_one(source, forced, batch, tally, session_rules,
                            stored=_reporter(progress, source, done, total, tally))
            finally:
                source.close()
            done += _safe_size(source)
            if progress:
                progress(source.name, done, total, tally.read)
        batch.write()
        # the blocks the batches' checkpoints wrote, under what threading holds next
        store.let_go_written(LET_GO_BYTES)
        if strict and tally.skipped > 0:
            raise _Rejected
        with store.transaction():  # what rewrites stored rows: all of it, or none
            added = runs.added(store, run)  # before `finish` forgets them
            runs.finish(store, run)
            relink(store, session_gap_s, added)
        runs.ended(run)
    except _Rejected:
        failed = True
        runs.undo(store, run)
    except BaseException:
        # the failure that got here is the one to report; an undo that fails as well
        # (the disk is full) leaves the run recorded, for the next open to remove
        with suppress(Exception):
            runs.undo(store, run)
        raise
    new = 0 if failed else batch.new
    return IngestResult(
        ingested=new, already_present=tally.read - new, skipped=tally.skipped,
        by_format=dict(sorted(tally.by_format.items())), sessions=store.session_count(),
        duplicates=store.duplicate_count(), summary=tuple(store.summary()),
        totals=store.summary_once(),
        files=tally.files, errors=tuple(tally.errors), unrecognized=tuple(tally.unrecognized),
        ignored=tuple(tally.ignored), empty=tuple(tally.empty),
        engine_logs=tuple(tally.engine_logs), failed=failed,
        engine_inputs=tuple(tally.engine_inputs),
    )


def _reporter(progress: ProgressFn | None, source: Source, before: int, total: int,
              tally: Tally) -> Callable[[], None] | None:
    """What `_ingest_one` calls after each stored batch: the bytes read so far (the files
    before this one, then how far its parser got) and the requests read."""
    if progress is None:
        return None

    def report() -> None:
        progress(source.name, before + min(source.position(), _safe_size(source)), total,
                 tally.read)

    return report


def _safe_size(source: Source) -> int:
    try:
        return source.size
    except OSError:
        return 0


def _ingest_one(source: Source, forced: ModuleType | None, batch: _Batch, tally: Tally,
                session_rules: tuple[SessionRule, ...] = (), *,
                stored: Callable[[], None] | None = None) -> None:
    try:
        found: tuple[ModuleType | None, Probe] = (
            (forced, probe(source)) if forced is not None else detect(source))
    except DECODE_ERRORS as exc:  # damaged gzip, bad encoding
        tally.error(source.name, None, f"cannot read: {io_reason(exc)}")
        return
    module, pr = found
    if module is None and is_json_schema(pr):
        tally.ignored.append(source.name)
        return
    kind = engine_kind(pr) if module is None else None
    if kind is not None:
        tally.engine_logs.append(source.name)  # `engine-log` / `report` read it
        if source.path is not None:  # classified once: the report reads it as this kind
            tally.engine_inputs.append(EngineLogInput(source.path, kind))
        return
    if module is None:
        tally.unrecognized.append(source.name)
        tally.error(source.name, None, unrecognized_reason(source, pr))
        return
    mismatch = forced_mismatch(module, pr) if forced is not None else ""
    if mismatch:
        tally.error(source.name, None, mismatch)
        return
    tally.files += 1
    read_before, skipped_before = tally.read, tally.skipped
    prefer = getattr(module, "prefer", None)  # a format's rule for two copies of one call
    whole_file_skipped = False
    try:
        for item in parse_serialized(source, module, pr):
            if isinstance(item, Skip):
                tally.error(source.name, item.line, item.reason)
                whole_file_skipped = whole_file_skipped or item.line is None
                continue
            request, body_text = item
            tally.by_format[module.NAME] += 1
            tally.read += 1  # before the write it may trigger reports it
            batch.add(apply_session_rules(request, session_rules) if session_rules
                      else request, prefer, stored, body_text)
    except (OSError, EOFError) as exc:
        tally.error(source.name, None, f"read failed part-way: {exc}")
    if tally.read == read_before and (tally.skipped == skipped_before or whole_file_skipped):
        # Recognized, yet no request in it: always a skip with a reason (the format's own,
        # else this one), so --strict fails on it.
        tally.empty.append(f"{source.name} ({module.NAME})")
        if tally.skipped == skipped_before:
            tally.error(source.name, None,
                        f"recognized as {module.NAME} but holds no model call")
