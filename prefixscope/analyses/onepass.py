"""One render per request for a whole report: the diff of every pair and each cache
domain's replay input (`Preparer` entries) from a single walk over the requests.

report used to render and tokenize every request once for the diff and once more per
cache domain's replay. Here each request is rendered and tokenized once (from its session
predecessor's: `tokens.Turns`), and the same `Tokens` go to the pairs it is in and to its
domain's `Preparer`; they are held only while one of its pairs or a later request of its
session still needs them, so memory follows the sessions open at once.

The walk is a pure function of a run of whole sessions' requests in log order
(`session_stage`): consecutive pairs and a prepared entry depend on their session alone.
So it runs in this process over the whole store (`one_pass`), in worker processes over
runs of sessions, or on Ray (`distributed.report_stage`); `merge_stages` puts the parts
back in log and pair order, and the result is the same whatever the split (tests).
Pairs with a side the walk never meets (a second log of a call: only the copy kept is
walked) are diffed afterwards from the store (`finish`).
"""

from __future__ import annotations

import os
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace

import numpy as np
import orjson

from prefixscope.analyses.diff import (
    DEFAULT_CONTEXT,
    BlockSizes,
    DiffReport,
    PairDiff,
    PairRef,
    PairRow,
    _without_ids,
    assemble_report,
    diff_pairs,
    diff_tokens,
)
from prefixscope.analyses.simulate import SimulateError, SimulateOptions, _Prepared
from prefixscope.analyses.simulate.model import render_batch
from prefixscope.analyses.simulate.prepare import (
    Links,
    Preparer,
    prepare_what_if,
    what_if_entries_many,
)
from prefixscope.analyses.simulate.spill import HOLD_BYTES, Spill, close_writers
from prefixscope.analyses.walkfile import Unwritable, read_run, write_run
from prefixscope.model import Request
from prefixscope.model.redaction import Redactor, activate, active
from prefixscope.parallel import Batch, Pool, release_duckdb_freed, runs
from prefixscope.prompt import RenderError, RenderOptions
from prefixscope.store import Store, reader
from prefixscope.tokens import Tokens, Turns

_RUNS_PER_WORKER = 4  # sessions differ in length: smaller runs even out the workers
# A run holds about this many sessions at most (a bigger log: more runs, up to
# `_MAX_RUNS`), so what a worker holds for the sessions it has open (their turns, their
# pieces) does not grow with the log.
SESSIONS_PER_RUN = 4  # 2.09 GiB report: 16 -> 4, peak summed memory 1,060 -> 975 MB, same time
# Past this many runs, a run holds more sessions. Each run reads its requests in queries of
# its own (`Store.iter_ids`: three a batch of ids, each scanning a column), so their count is
# bounded; at 256, 2 GiB of Codex rollouts (2,350 sessions) ran ~9 sessions a run, each
# worker holding ~50 MB more at once than at 4 (1 GiB, two walks at once: runs of 9.2 and
# 4.0 sessions, workers' peak private 277-289 -> 225-230 MB, the walk's CPU 155.4 / 155.6 s).
_MAX_RUNS = 1024
# What a worker reading a database of its own (`start_pass`'s `own_blocks`) keeps of the
# blocks its tasks read, for its next task (its neighbour in the log) to reuse; past it,
# let go (~20-30 ms to open the database again, and the blocks read again after it).
# 2 GiB of Codex rollouts, one run each in one window (load 2): 16 MiB 327.9 s of CPU /
# 890 MB summed, 64 MiB 289.1 s / 878 MB; the shared blocks before (0f64762) 252.3 s /
# 1,058 MB.
WORKER_KEEPS_BLOCKS = 64 << 20
NO_BODY = "a request has no body in the log"


@dataclass(frozen=True, slots=True)
class Domain:
    """A cache domain whose replay input the walk builds: its name and prepare options."""

    name: str
    options: SimulateOptions


@dataclass(frozen=True, slots=True)
class PassSetup:
    """What every run of the walk shares (picklable: it travels to workers and to Ray)."""

    render: RenderOptions
    sizes: BlockSizes
    domains: tuple[Domain, ...]
    links: Links
    # diff --all's pairs by their place in its order: all of them, or (a run's: `subset`)
    # those of the run's sessions
    pairs: tuple[PairRow, ...] | Mapping[int, PairRow]
    context: int = DEFAULT_CONTEXT
    redactor: Redactor = field(default_factory=Redactor)
    # A `Spill`'s folder on this machine: the entries' ids are written there as the walk
    # makes them, not held until the replay (`one_pass`, `start_pass`; Ray's stages: None)
    spill: str | None = None
    spill_hold: int = HOLD_BYTES  # bytes of ids a process holds before it spills (`keep_ids`)
    # Requests whose tokens the walk hands back as it renders them (`PassResult.kept`:
    # bucket's spike samples, for a walk in the process that explains the spikes), up to
    # `keep_hold` bytes of them (`tokens_bytes`; the others are rendered where asked)
    keep: frozenset[str] = frozenset()
    keep_hold: int = HOLD_BYTES
    # False: the pairs' divergences come without their texts (`diff.windowed` makes those
    # a report shows, from the two prompts)
    windows: bool = True

    def subset(self, request_ids: Iterable[str], pair_indexes: Iterable[int],
               files: Iterable[str] | None = None) -> PassSetup:
        """The setup a run of these requests' sessions needs: its own links and its own
        pairs (`pair_indexes`, kept by their place) only, and with `files` (its requests'
        log files) each domain's files cut to those. Each run's setup is pickled to its
        worker: with every pair and the whole log's links, a log cut into the most runs
        (`_MAX_RUNS`) sent and read each of them once a run; with every domain's files,
        each run sent all the log's (2 GiB of Codex rollouts: 2,350 file names, 130 KB of
        a run's 183)."""
        pairs = self.pairs
        domains = self.domains if files is None else _domains_of(self.domains, files)
        return PassSetup(self.render, self.sizes, domains,
                         links_of(self.links, request_ids), {i: pairs[i] for i in pair_indexes},
                         self.context, self.redactor, self.spill, self.spill_hold, self.keep,
                         self.keep_hold, self.windows)


def _domains_of(domains: tuple[Domain, ...], files: Iterable[str]) -> tuple[Domain, ...]:
    """`domains`, each with only those of its files among `files`. The walk reads a
    domain's files only to find a request's domain by its file (`_Walk.domain_of`), so a
    run whose requests are all of `files` finds each the same domain (or none) as with
    all of them; a domain keeps its place and its other options (a run with none of its
    files still reports it: no entries)."""
    mine = list(dict.fromkeys(files))
    out = []
    for domain in domains:
        all_files = domain.options.source_files
        if all_files is not None:
            of_domain = set(all_files)
            domain = replace(domain, options=replace(domain.options, source_files=tuple(
                f for f in mine if f in of_domain)))
        out.append(domain)
    return tuple(out)


def indexed(pairs: tuple[PairRow, ...] | Mapping[int, PairRow]) -> Iterable[tuple[int, PairRow]]:
    """`PassSetup.pairs`, each with its place in diff --all's order."""
    return pairs.items() if isinstance(pairs, Mapping) else enumerate(pairs)


def links_of(links: Links, request_ids: Iterable[str]) -> Links:
    """`links` of these requests only (a run of whole sessions needs no other), looked up
    by them: a scan of the whole log's links for each run cost every run the log."""
    ids = list(dict.fromkeys(request_ids))
    session_of, prev_of, successors = links.session_of, links.prev_of, links.successors
    return Links({r: session_of[r] for r in ids if r in session_of},
                 {r: prev_of[r] for r in ids if r in prev_of},
                 Counter({r: successors[r] for r in ids if r in successors}),
                 links.changed.intersection(ids), links.rewritten.intersection(ids))


@dataclass(slots=True)
class StageResult:
    """One run's part: diffed pairs by index, and per domain the entries and skip reasons
    of its requests (by request id, in log order), or why the domain cannot be prepared."""

    diffs: list[tuple[int, PairDiff | str]] = field(default_factory=list)
    prepared: dict[str, list[_Prepared]] = field(default_factory=dict)
    skips: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # domain -> SimulateError text
    open_pairs: list[int] = field(default_factory=list)  # pairs a side of which never came
    kept: dict[str, Tokens] = field(default_factory=dict)  # `PassSetup.keep`'s, rendered


def session_stage(requests: Iterable[Request], setup: PassSetup,
                  pair_indexes: Sequence[int] | None = None) -> StageResult:
    """Walk `requests` (whole sessions, in log order; see the module doc).

    `pair_indexes`: the pairs of `setup.pairs` these sessions hold (None: all it has).

    Raises:
        TokenizerError: the tokenizer cannot be loaded offline.
    """
    previous = active()
    activate(setup.redactor)  # the run's masking, in whatever process this runs in
    try:
        return _Walk(setup, pair_indexes).run(requests)
    finally:
        activate(previous)
        if setup.spill is not None:
            close_writers(setup.spill)  # every id written: a pool worker keeps no file open


class _Walk:
    def __init__(self, setup: PassSetup, pair_indexes: Sequence[int] | None) -> None:
        self.setup = setup
        self.result = StageResult()
        self.preparers: dict[str, Preparer] = {}
        for domain in setup.domains:
            try:
                self.preparers[domain.name] = Preparer(setup.links, domain.options,
                                                       setup.spill, setup.spill_hold)
            except SimulateError as exc:
                self.result.failed[domain.name] = str(exc)
        self.domain_of = {f: d.name for d in setup.domains if d.name in self.preparers
                          for f in d.options.source_files or ()}
        indexes = (pair_indexes if pair_indexes is not None else
                   [i for i, _ in indexed(setup.pairs)])
        self.pairs_of: dict[str, list[int]] = defaultdict(list)
        self.open: Counter[str] = Counter()  # request id -> its pairs not diffed yet
        for i in indexes:
            a, b, _, _ = setup.pairs[i]
            for rid in dict.fromkeys((a, b)):
                self.pairs_of[rid].append(i)
                self.open[rid] += 1
        self.todo = set(indexes)
        self.seen: dict[str, tuple[Request, Tokens | RenderError | None]] = {}
        self.successors = Counter(setup.links.successors)
        self.turns = Turns(setup.render)
        self.kept_bytes = 0  # of the tokens kept for `setup.keep`

    def run(self, requests: Iterable[Request]) -> StageResult:
        pending: list[Request] = []
        batch = render_batch()  # requests whose new pieces are tokenized together
        for request in requests:
            if request.body is not None and (request.id in self.open or self._renders(request)):
                pending.append(request)
                if len(pending) >= batch:
                    self._flush(pending)
            else:
                self._flush(pending)
                self._plain(request)
        self._flush(pending)
        for domain, preparer in self.preparers.items():
            self.result.prepared[domain] = preparer.out
        self.result.open_pairs = sorted(self.todo)
        return self.result

    def _preparer(self, request: Request) -> Preparer | None:
        name = self.domain_of.get(request.source_file)
        return self.preparers[name] if name is not None else None

    def _renders(self, request: Request) -> bool:
        preparer = self._preparer(request)
        return preparer is not None and preparer.renders(request)

    def _flush(self, pending: list[Request]) -> None:
        if not pending:
            return
        results = self.turns.tokens_many(pending, [self.setup.links.prev(r.id)
                                                   for r in pending])
        for request, tok in zip(pending, results, strict=True):
            if request.id in self.setup.keep and isinstance(tok, Tokens):
                self._keep(request.id, tok)
            preparer = self._preparer(request)
            if preparer is not None and preparer.renders(request):
                self._prepared(preparer, request, lambda p, r=request, t=tok: p.rendered(
                    r, t, self.turns.head_tokens(r.id)))
            elif preparer is not None:  # rendered for its pairs only
                self._prepared(preparer, request, lambda p, r=request: p.plain(r))
            self._met(request, tok)
        pending.clear()

    def _keep(self, request_id: str, tok: Tokens) -> None:
        """Hand `tok` back (`PassSetup.keep`) while the kept tokens fit `keep_hold`."""
        size = tokens_bytes(tok)
        if self.kept_bytes + size <= self.setup.keep_hold:
            self.kept_bytes += size
            self.result.kept[request_id] = tok

    def _plain(self, request: Request) -> None:
        preparer = self._preparer(request)
        if preparer is not None:
            self._prepared(preparer, request, lambda p: p.plain(request))
        self._met(request, None)

    def _prepared(self, preparer: Preparer, request: Request, add: object) -> None:
        """Run `add(preparer)` and record the skip reason it counted, if any."""
        before = dict(preparer.skipped)
        add(preparer)  # type: ignore[operator]
        for reason, n in preparer.skipped.items():
            if n != before.get(reason, 0):
                name = self.domain_of[request.source_file]
                self.result.skips.setdefault(name, []).append((request.id, reason))
        preparer.done(request.id)  # its own held ids; the walk's turns follow `successors`

    def _met(self, request: Request, tok: Tokens | RenderError | None) -> None:
        """`request` walked: diff the pairs it completes; let go what nothing needs now."""
        prev = self.setup.links.prev(request.id)
        if prev is not None and prev in self.successors:
            self.successors[prev] -= 1
            if not self.successors[prev]:
                del self.successors[prev]
                self.turns.forget(prev)
        if not self.successors.get(request.id):
            self.turns.forget(request.id)
        if request.id not in self.open:
            return
        self.seen[request.id] = (request, tok)
        for i in self.pairs_of.pop(request.id, ()):
            a, b, _, _ = self.setup.pairs[i]
            if a in self.seen and b in self.seen and i in self.todo:
                self.todo.discard(i)
                self.result.diffs.append((i, self._diff(i)))
                for rid in dict.fromkeys((a, b)):
                    self.open[rid] -= 1
                    if not self.open[rid]:
                        del self.open[rid]
                        self.seen.pop(rid, None)

    def _diff(self, i: int) -> PairDiff | str:
        """Pair `i` diffed as `diff_pairs` diffs it, or the reason it is skipped."""
        a_id, b_id, session, compaction = self.setup.pairs[i]
        (a, ta), (b, tb) = self.seen[a_id], self.seen[b_id]
        return diff_outcome(PairRef(a, b, session, compaction), ta, tb, self.setup.sizes,
                            self.setup.context, self.setup.windows)


def tokens_bytes(tok: Tokens) -> int:
    """About the memory `tok` holds: its arrays and its prompt's text (the segments, a
    few per message, aside)."""
    return tok.ids.nbytes + tok.char_starts.nbytes + sys.getsizeof(tok.prompt.text)


def diff_outcome(pair: PairRef, ta: Tokens | RenderError | None, tb: Tokens | RenderError | None,
                 sizes: BlockSizes, context: int, windows: bool = True) -> PairDiff | str:
    """What `diff_pairs` makes of one pair: its diff, or the reason it is skipped for
    (`windows` False: its divergence without its texts, `diff_tokens`)."""
    if pair.a.body is None or pair.b.body is None:
        return NO_BODY
    error = next((t for t in (ta, tb) if isinstance(t, RenderError)), None)
    if error is not None:
        return f"cannot render: {_without_ids(str(error), pair)}"
    assert isinstance(ta, Tokens) and isinstance(tb, Tokens)
    bs, source = sizes.of(pair.b)
    return diff_tokens(ta, tb, pair.a, pair.b, block_size=bs, context=context,
                       session=pair.session, compaction_link=pair.compaction,
                       block_size_source=source, windows=windows)


@dataclass(frozen=True, slots=True)
class PassResult:
    """The walk's output, merged: the diff report and each domain's replay input (or the
    reason it has none)."""

    diff: DiffReport | None
    prepared: dict[str, tuple[list[_Prepared], dict[str, int]]]
    failed: dict[str, str]
    # where the entries' spilled ids are (their folder, removed when this and every entry
    # that reads it are let go: each `SpilledIds` holds it too)
    spill: Spill | None = None
    kept: dict[str, Tokens] = field(default_factory=dict)  # `PassSetup.keep`'s tokens


def merge_stages(parts: Sequence[StageResult], setup: PassSetup, order: Sequence[str],
                 store: Store | None = None, *, diff: bool = True,
                 spill: Spill | None = None) -> PassResult:
    """The parts of every run put back together: pairs in diff --all's order, entries and
    skip reasons in log order (`order`: the walked request ids in log order). Pairs left
    open by every run are diffed from `store` (a side the walk never met)."""
    place = {rid: i for i, rid in enumerate(order)}
    outcomes = dict(d for part in parts for d in part.diffs)
    # every pair is some run's (its later request's session's); a run lists its open ones
    left = [i for i in range(len(setup.pairs)) if i not in outcomes]
    if left and diff:
        if store is None:
            raise ValueError("pairs a walk could not finish need the store")
        outcomes.update(_finish(store, setup, left))
    report = None
    if diff:
        results: list[PairDiff] = []
        skipped: dict[str, int] = {}
        for i in range(len(setup.pairs)):
            outcome = outcomes[i]
            if isinstance(outcome, str):
                skipped[outcome] = skipped.get(outcome, 0) + 1
            else:
                results.append(outcome)
        report = assemble_report(results, skipped, setup.render, setup.sizes)
    prepared: dict[str, tuple[list[_Prepared], dict[str, int]]] = {}
    failed: dict[str, str] = {}
    for domain in setup.domains:
        error = next((p.failed[domain.name] for p in parts if domain.name in p.failed), None)
        if error is not None:
            failed[domain.name] = error
            continue
        entries = sorted((e for p in parts for e in p.prepared.get(domain.name, ())),
                         key=lambda e: place[e.id])
        reasons: dict[str, int] = {}
        for _, reason in sorted((s for p in parts for s in p.skips.get(domain.name, ())),
                                key=lambda s: place[s[0]]):
            reasons[reason] = reasons.get(reason, 0) + 1
        prepared[domain.name] = (entries, reasons)
    kept = {rid: tok for part in parts for rid, tok in part.kept.items()}
    return PassResult(report, prepared, failed, spill, kept)


def _finish(store: Store, setup: PassSetup, indexes: Sequence[int]
            ) -> dict[int, PairDiff | str]:
    """Pairs a side of which no walk met, diffed from the store as `diff_pairs` would."""
    out: dict[int, PairDiff | str] = {}
    for i in indexes:
        a_id, b_id, session, compaction = setup.pairs[i]
        loaded = store.get_many((a_id, b_id))
        ref = PairRef(loaded[a_id], loaded[b_id], session, compaction)
        report = diff_pairs([ref], setup.render, block_size=setup.sizes, context=setup.context)
        out[i] = (report.pairs[0] if report.pairs
                  else next(iter(report.totals.skipped_reasons)))
    return out


def walk_order(store: Store) -> list[str]:
    """The ids the walk meets, in log order (`Store.iter_requests`' order)."""
    return domain_order(store, None)


def _session_runs(order: Sequence[str], session_of: Mapping[str, str | None], parts: int
                  ) -> list[tuple[list[str], list[str]]]:
    """`order`'s requests cut into up to `parts` runs of whole sessions (more, up to
    `_MAX_RUNS`, where a run would hold over `SESSIONS_PER_RUN` sessions), about equal in
    requests: each run's session keys and its request ids in log order."""
    place = {rid: i for i, rid in enumerate(order)}
    sessions: dict[str, list[str]] = {}
    for rid in order:
        sessions.setdefault(session_of.get(rid) or rid, []).append(rid)
    units = list(sessions.items())
    out = []
    parts = max(parts, min(-(-len(units) // SESSIONS_PER_RUN), _MAX_RUNS))
    for cut in runs([len(ids) for _, ids in units], parts):
        chosen = units[cut.start:cut.stop]
        out.append(([key for key, _ in chosen],
                    sorted((rid for _, rids in chosen for rid in rids), key=place.__getitem__)))
    return out


def one_pass(store: Store, setup: PassSetup, *, diff: bool = True) -> PassResult:
    """The walk over the whole store in this process, its replay input spilled."""
    spill = Spill()
    part = session_stage(store.iter_requests(), replace(setup, spill=spill.folder))
    return merge_stages([part], setup, walk_order(store), store, diff=diff, spill=spill)


@dataclass(frozen=True, slots=True)
class _Task:
    """A run of whole sessions for one worker: the store's file, the setup every run
    shares (its domains cut to the run's files: `PassSetup.subset`), the run's own part
    as one JSON text (`run_text`: its requests' ids, their links, its pairs), and the
    file its result is written to (`_task`).

    Why a text: the pool pickles each task to send it while the workers walk, after they
    were forked, and pickling an object writes its reference count. A run's ids, links
    and pairs are the strings this process read before the fork, spread over pages the
    workers share with it, so pickling them copied those pages into this process, one by
    one (copy-on-write): on the 1 GiB Codex store, 293 runs, +71 MB of private memory,
    against +6 MB for the texts, made before the fork (the one object pickled)."""

    file: str
    setup: PassSetup  # without links and pairs (`run`'s)
    run: bytes
    out: str


def run_text(ids: Sequence[str], setup: PassSetup, pair_indexes: Sequence[int]) -> bytes:
    """A run's requests' ids, `setup`'s links and pairs (a run's: `PassSetup.subset`)
    and its pair indexes, as a JSON text (`run_of` reads it back): each id and session
    written once, in a table the rest names by place (a request's id is in its links,
    its pairs and its successors' links: written out each time, 2 GiB of Codex rollouts
    took 39 MB of texts, held from the fork until each run is sent)."""
    names: dict[str, int] = {}

    def n(name: str | None) -> int | None:
        return None if name is None else names.setdefault(name, len(names))

    links = setup.links
    return orjson.dumps([
        [n(r) for r in ids],
        [[n(r), n(session)] for r, session in links.session_of.items()],
        [[n(r), n(prev), compaction] for r, (prev, compaction) in links.prev_of.items()],
        [[n(r), count] for r, count in links.successors.items()],
        sorted(n(r) for r in links.changed), sorted(n(r) for r in links.rewritten),
        [[i, n(a), n(b), n(session), compaction]
         for i, (a, b, session, compaction) in indexed(setup.pairs)],
        list(pair_indexes),
        list(names)])  # (last: every name is in it by now)


def run_of(text: bytes, setup: PassSetup) -> tuple[list[str], PassSetup, list[int]]:
    """(the ids, `setup` with the links and pairs, the pair indexes) of `run_text`'s."""
    ids, session_of, prev_of, successors, changed, rewritten, pairs, indexes, names = \
        orjson.loads(text)

    def name(i: int | None) -> str | None:
        return None if i is None else names[i]

    links = Links({names[r]: names[session] for r, session in session_of},
                  {names[r]: (name(prev), compaction) for r, prev, compaction in prev_of},
                  Counter({names[r]: count for r, count in successors}),
                  frozenset(names[r] for r in changed), frozenset(names[r] for r in rewritten))
    return [names[r] for r in ids], replace(setup, links=links, pairs={
        i: (names[a], names[b], names[session], compaction)
        for i, a, b, session, compaction in pairs}), indexes


def _task(task: _Task) -> str | StageResult:
    """Walk `task`'s run; its result is written to `task.out` (`walkfile`), whose path is
    returned: the parent reads every run's once all are walked (`PendingPass.result`). A
    result the file cannot hold exactly (`Unwritable`), or with tokens kept for the parent
    (`PassSetup.keep`), is returned as it is."""
    store = reader(task.file)
    ids, setup, pair_indexes = run_of(task.run, task.setup)
    result = session_stage(store.iter_ids(ids), setup, pair_indexes)
    _let_go_blocks(store)
    if result.kept:
        return result
    try:
        write_run(task.out, (result.diffs, result.prepared, result.skips, result.failed,
                             result.open_pairs))
    except Unwritable:
        return result
    return task.out


def _taken(part: str | StageResult) -> StageResult:
    """A run's result as `_task` returned it, read back from its file if written there."""
    if isinstance(part, StageResult):
        return part
    diffs, prepared, skips, failed, open_pairs = read_run(part)
    return StageResult(diffs, prepared, skips, failed, open_pairs)


def session_runs(store: Store, setup: PassSetup, parts: int
                 ) -> tuple[list[str], list[tuple[list[str], list[int]]]]:
    """(the walk's order, runs of whole sessions: each its request ids in log order and
    the pairs they hold), about equal in requests."""
    order = walk_order(store)
    session_of = setup.links.session_of
    pairs_by_session: dict[str, list[int]] = defaultdict(list)
    for i, (_, b, _, _) in indexed(setup.pairs):
        pairs_by_session[session_of.get(b) or b].append(i)
    return order, [(ids, [i for key in keys for i in pairs_by_session.get(key, ())])
                   for keys, ids in _session_runs(order, session_of, parts)]


_NO_LINKS = Links({}, {}, Counter())


@dataclass(frozen=True, slots=True)
class PendingPass:
    """The walk running in a pool's workers; `result()` waits and merges."""

    batch: Batch[str | StageResult]  # each run's result, written to a file (`_task`)
    setup: PassSetup
    order: list[str]
    file: str
    diff: bool
    spill: Spill  # where the workers write the entries' ids (kept until the replay)

    def result(self, store: Store) -> PassResult:
        parts = [_taken(part) for part in self.batch.results()]
        return merge_stages(parts, self.setup, self.order, store, diff=self.diff,
                            spill=self.spill)


def start_pass(store: Store, setup: PassSetup, pool: Pool, *, diff: bool = True,
               own_blocks: bool = False) -> PendingPass:
    """Start the walk in `pool`'s workers, runs of whole sessions each (the store must be
    open read-only: the workers open its file too).

    Each run's result goes to a file in the spill folder (`walkfile`), not back to this
    process as it is made: held here as they came, the results grew this process through
    the whole walk beside the workers mid-task, its peak of summed memory on large logs.
    Read once every run is walked, they cost that memory beside idle workers.

    `own_blocks` (the bodies and parts not held here: `Store.hold_stored`): the store's
    connection is closed while the workers fork (`Store.unconnected`), so that each
    reads the file through a database of its own and lets go of its blocks past
    `WORKER_KEEPS_BLOCKS` after a task, instead of sharing those read here before the
    fork (2 GiB of Codex rollouts: 235 MB) and keeping every block it reads beside them."""
    order, cut = session_runs(store, setup, pool.workers * _RUNS_PER_WORKER)
    spill = Spill()
    spilled = replace(setup, spill=spill.folder)
    file_of = {r.id: r.source_file for r in store.usage_records()}
    tasks = []
    for n, (ids, pairs) in enumerate(cut):
        run = spilled.subset(ids, pairs, (file_of[r] for r in ids))
        tasks.append(_Task(store.file, replace(run, links=_NO_LINKS, pairs={}),
                           run_text(ids, run, pairs),
                           os.path.join(spill.folder, f"run-{n}.result")))
    with store.unconnected() if own_blocks else nullcontext():
        batch = pool.submit(_task, tasks, [len(ids) for ids, _ in cut])
    return PendingPass(batch, setup, order, store.file, diff, spill)


# -- what-if replays' input, by runs of sessions ------------------------------------------


@dataclass(frozen=True, slots=True)
class WhatIfTask:
    """A run of whole sessions of one domain's what-if replay inputs (picklable): the
    requests' ids in log order, their links, the domain's options (without the
    transforms), their entries of the base replay, the transforms (one what-if each), and
    the store's file a pool worker loads them from."""

    ids: tuple[str, ...]
    links: Links
    options: SimulateOptions
    base: tuple[_Prepared, ...]
    transforms: tuple[str, ...]
    file: str = ""

    def options_of(self, transform: str) -> SimulateOptions:
        """The options of `transform`'s what-if replay."""
        return self.options.with_what_if(transform)


def what_if_stage(requests: Iterable[Request], task: WhatIfTask) -> list[list[_Prepared]]:
    """The entries of `task`'s requests (given in its order) for each of its transforms:
    `what_if_entries`, the requests read once for all of them."""
    return what_if_entries_many(requests, task.links, [
        (task.options_of(t), task.base, (t,)) for t in task.transforms])


# Runs what-if tasks somewhere (a pool's workers, Ray): each task's entries per transform,
# in task order.
WhatIfRunner = Callable[[Store, Sequence[WhatIfTask]], list[list[list[_Prepared]]]]


def domain_order(store: Store, files: Sequence[str] | None) -> list[str]:
    """The ids `store.iter_requests(source_files=files)` meets, in its order."""
    wanted = None if files is None else set(files)
    return [r.id for r in store.usage_records()
            if r.duplicate_of is None and (wanted is None or r.source_file in wanted)]


def what_if_pass(store: Store, links: Links, options: SimulateOptions,
                 base: Sequence[_Prepared], transform: str, run: WhatIfRunner | None = None,
                 parts: int = 1) -> list[_Prepared]:
    """`prepare_what_if(store, options, base, (transform,))`, with `run`: cut into up to
    `parts` runs of whole sessions run by `run`, merged back in log order (each entry
    depends on its session alone: the same list)."""
    if run is None or parts <= 1:
        return prepare_what_if(store, options, base, (transform,))
    return what_if_passes(store, links, [(options, base, transform)], run, parts)[0]


# A what-if replay's input to make: (the options with the transform, the base replay's
# entries, the transform).
WhatIfJob = tuple[SimulateOptions, Sequence[_Prepared], str]


def what_if_passes(store: Store, links: Links, jobs: Sequence[WhatIfJob], run: WhatIfRunner,
                   parts: int) -> list[list[_Prepared]]:
    """`what_if_pass` of each job, every job's runs of sessions given to `run` at once (the
    workers take the tasks of all the what-ifs together); the what-ifs of one domain (the
    same options but for the transform, the same base entries) share their tasks, so each
    run's requests are loaded once for all of them."""
    groups: dict[tuple[SimulateOptions, int], list[int]] = {}
    for j, (options, base, _) in enumerate(jobs):
        logged = options.render.what_if
        plain = replace(options, render=replace(options.render, what_if=logged[:-1]))
        groups.setdefault((plain, id(base)), []).append(j)
    tasks: list[WhatIfTask] = []
    owners: list[list[int]] = []  # each task's jobs, in its transforms' order
    places: dict[int, dict[str, int]] = {}
    for (plain, _), members in groups.items():
        order = domain_order(store, plain.source_files)
        place = {rid: i for i, rid in enumerate(order)}
        by_id = {p.id: p for p in jobs[members[0]][1]}
        transforms = tuple(jobs[j][2] for j in members)
        for j in members:
            places[j] = place
        for _, ids in _session_runs(order, links.session_of, parts):
            tasks.append(WhatIfTask(tuple(ids), links_of(links, ids), plain,
                                    tuple(by_id[rid] for rid in ids if rid in by_id),
                                    transforms, store.file))
            owners.append(members)
    made: list[list[_Prepared]] = [[] for _ in jobs]
    for members, part in zip(owners, run(store, tasks) if tasks else [], strict=True):
        for j, entries in zip(members, part, strict=True):
            made[j].extend(entries)
    return [_in_order(entries, places[j]) for j, entries in enumerate(made)]


def _in_order(entries: list[_Prepared], place: dict[str, int]) -> list[_Prepared]:
    return sorted(entries, key=lambda e: place[e.id])


def pool_what_ifs(pool: Pool, meanwhile: Callable[[], object] | None = None
                  ) -> WhatIfRunner:
    """What-if tasks in `pool`'s workers (each opens the store's file read-only);
    `meanwhile()` is called in this process after the tasks are submitted, while the
    workers run them."""
    def run(store: Store, tasks: Sequence[WhatIfTask]) -> list[list[list[_Prepared]]]:
        batch = pool.submit(_what_if_task, tasks,
                            [len(t.ids) * len(t.transforms) for t in tasks])
        if meanwhile is not None:
            meanwhile()
        parts = batch.results()
        out = []
        for task, part in zip(tasks, parts, strict=True):
            base = {p.id: p for p in task.base}
            out.append([_base_ids_back(entries, left, base) for entries, left in part])
        return out
    return run


# A transform's entries as a worker sends them back: the indices of those whose token ids
# were left out, being their base entry's (`_base_ids_out`)
_Sent = tuple[list[_Prepared], tuple[int, ...]]


def _let_go_blocks(store: Store) -> None:
    """After a worker's task: its own database's blocks past `WORKER_KEEPS_BLOCKS` let go,
    and DuckDB's allocator emptied of what that freed (a no-op on a shared database)."""
    if store.let_go_cache(keep=WORKER_KEEPS_BLOCKS):
        release_duckdb_freed()


def _what_if_task(task: WhatIfTask) -> list[_Sent]:
    store = reader(task.file)
    made = what_if_stage(store.iter_ids(task.ids), task)
    _let_go_blocks(store)
    base = {p.id: p for p in task.base}
    return [_base_ids_out(entries, base) for entries in made]


def _base_ids_out(entries: list[_Prepared], base: Mapping[str, _Prepared]) -> _Sent:
    """`entries` with the token ids equal to their base entry's (`base`: by id) left out:
    the parent holds those arrays already (a turn the transform does not touch keeps its
    base's ids), so they are neither sent back nor held twice (`_base_ids_back`)."""
    out, left = list(entries), []
    for i, entry in enumerate(entries):
        mine = base.get(entry.id)
        if entry.ids is not None and mine is not None and mine.ids is not None and (
                entry.ids is mine.ids or entry.ids.dtype == mine.ids.dtype and
                np.array_equal(entry.ids, mine.ids)):
            out[i] = replace(entry, ids=None)
            left.append(i)
    return out, tuple(left)


def _base_ids_back(entries: list[_Prepared], left: tuple[int, ...],
                   base: Mapping[str, _Prepared]) -> list[_Prepared]:
    """The entries `_base_ids_out` sent, each left-out id array its base entry's own."""
    out = list(entries)
    for i in left:
        out[i] = replace(out[i], ids=base[out[i].id].ids)
    return out


@dataclass(frozen=True, slots=True)
class StageRunner:
    """Where report's per-session stages run instead of this process and its pool (Ray:
    `distributed.report_runner`): the walk (`one_pass`'s result) and what-if tasks, cut
    into `parts` runs of sessions."""

    walk: Callable[[Store, PassSetup], PassResult]
    what_ifs: WhatIfRunner
    parts: int
