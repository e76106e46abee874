"""simulate's first job: every replayable request of a store, rendered, tokenized
and kept compact (`_Prepared`), in log order."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import lru_cache

import numpy as np

from prefixscope.analyses.breakpoints import BLOCK
from prefixscope.analyses.simulate.model import (
    ANTHROPIC_READ_LAG,
    DEFAULT_TRACE_BLOCK,
    TRACE_ENGINES,
    SimulateOptions,
    _Prepared,
    render_batch,
    spec_of,
)
from prefixscope.analyses.simulate.spill import HOLD_BYTES, SpilledIds, keep_ids
from prefixscope.model import Request
from prefixscope.prompt import RenderError, RenderOptions
from prefixscope.prompt.pipeline import BillingScan, head_text
from prefixscope.store import Store
from prefixscope.tokenizers import load_tokenizer
from prefixscope.tokens import PieceCache, Tokens, Turns, common_prefix_length, piece_cache


def prepare(store: Store, options: SimulateOptions,
            progress: Callable[[int, int], None] | None = None
            ) -> tuple[list[_Prepared], dict[str, int]]:
    """Every replayable request of the store, in log order, rendered and tokenized."""
    preparer = Preparer(Links.of(store), options)
    copies = store.duplicate_count() if options.source_files is None else 0
    if copies:  # a call two sources logged is replayed once, through the copy kept
        preparer.skipped["a second log of a call another source logged (replayed once)"] = \
            copies
    turns = Turns(options.render)
    pending: list[Request] = []
    batch = render_batch()
    total = store.count()
    seen = 0

    def flush() -> None:
        nonlocal seen
        results = turns.tokens_many(pending, [preparer.links.prev(r.id) for r in pending])
        for request, tok in zip(pending, results, strict=True):
            preparer.rendered(request, tok, turns.head_tokens(request.id))
        for request in pending:
            for rid in preparer.done(request.id):
                turns.forget(rid)
            if not preparer.live_after(request.id):
                turns.forget(request.id)
        seen += len(pending)
        pending.clear()
        if progress is not None:
            progress(seen, total)

    for request in store.iter_requests(source_files=options.source_files):
        if preparer.renders(request):
            pending.append(request)
            if len(pending) >= batch:
                flush()
        else:
            if pending:
                flush()
            preparer.plain(request)
            for rid in preparer.done(request.id):
                turns.forget(rid)
            seen += 1
    if pending:
        flush()
    return preparer.out, preparer.skipped


def prepare_what_if(store: Store, options: SimulateOptions, base: Sequence[_Prepared],
                    transforms: tuple[str, ...]) -> list[_Prepared]:
    """`prepare(store, options)[0]`, where `options.render` is the render `base` was
    prepared with plus `transforms` (a what-if replay's input), rendering only the requests
    the transforms may change (`prompt.pipeline.what_if_changes`): any other keeps the token
    ids of its entry in `base` (rebuilt from its compact form), the entry `prepare` would
    make of them. The changed ones are rendered and tokenized as `prepare` does, each from
    its session predecessor's render and ids when that one was rendered here too."""
    return what_if_entries(store.iter_requests(source_files=options.source_files),
                           Links.of(store), options, base, transforms)


def what_if_entries(requests: Iterable[Request], links: Links, options: SimulateOptions,
                    base: Sequence[_Prepared], transforms: tuple[str, ...]
                    ) -> list[_Prepared]:
    """`prepare_what_if` over `requests` (whole sessions, in log order, as the store
    yields them for `options.source_files`) threaded by `links`, `base` their entries: an
    entry depends on its session alone, so runs of sessions can be prepared apart
    (`analyses.onepass.what_if_pass`) and their entries merged in log order."""
    return what_if_entries_many(requests, links, [(options, base, transforms)])[0]


def prepare_what_ifs(store: Store, options: SimulateOptions, base: Sequence[_Prepared],
                     transforms: Sequence[str]) -> list[list[_Prepared]]:
    """`prepare_what_if(store, options.with_what_if(t), base, (t,))` of each transform `t`,
    the store's requests read once for all of them."""
    return what_if_entries_many(
        store.iter_requests(source_files=options.source_files), Links.of(store),
        [(options.with_what_if(t), base, (t,)) for t in transforms])


def what_if_entries_many(requests: Iterable[Request], links: Links,
                         jobs: Sequence[tuple[SimulateOptions, Sequence[_Prepared],
                                              tuple[str, ...]]]) -> list[list[_Prepared]]:
    """`what_if_entries` of each job (options with the transforms, base entries, the
    transforms) over the same `requests`, read once for all of them; the jobs of one base
    (the same entries: a domain's what-ifs) share each request's base entry and its whole
    ids, rebuilt once for all of them."""
    bases = {id(base): _BaseWalk(base) for _, base, _ in jobs}
    made = [(_WhatIf(links, options, transforms), bases[id(base)])
            for options, base, transforms in jobs]
    for request in requests:
        found = {key: walk.of(request) for key, walk in bases.items()}
        for what_if, walk in made:
            what_if.feed(request, *found[id(walk.base)])
    return [what_if.finish() for what_if, _ in made]


class _BaseWalk:
    """A base replay's entries (in log order) walked beside the requests: each request's
    entry and its whole token ids, built when first asked for (`_Whole`; None: it has
    none, or no ids: a trace)."""

    def __init__(self, base: Sequence[_Prepared]) -> None:
        self.base = base
        self.full = _FullIds(base)
        self.entries = iter(base)
        self.entry = next(self.entries, None)

    def of(self, request: Request) -> tuple[_Prepared | None, _Whole | None]:
        mine, ids = None, None
        if self.entry is not None and self.entry.id == request.id:  # `base` is in log order
            mine, self.entry = self.entry, next(self.entries, None)
            if mine.ids is not None and mine.trace is None:
                ids = self.full.of(mine)
        return mine, ids


class _WhatIf:
    """One what-if replay's input, fed the requests one at a time (`what_if_entries`):
    a request the transforms provably leave as they are keeps its base ids, one whose
    head alone they change takes its base ids after a new head (`head_swapped`), any
    other is rendered and tokenized (in batches, each from its session predecessor's).

    Where a request's predecessor was kept or swapped the same way, its entry is read off
    its base entry without building either whole prompt (`_kept_entry`, `_swapped_entry`:
    the proofs are there): a session's turns cost their own new ids, not their prompts."""

    def __init__(self, links: Links, options: SimulateOptions,
                 transforms: tuple[str, ...]) -> None:
        logged = options.render.what_if
        self.before = replace(options.render, what_if=logged[: len(logged) - len(transforms)])
        self.after = options.render
        self.transforms = transforms
        self.preparer = Preparer(links, options)
        self.turns = Turns(options.render)
        self.pending: list[Request] = []
        self.batch = render_batch()
        self.scan = BillingScan()
        # How the what-if prompt of each request a later one still extends was made from
        # its base prompt: _KEPT (the same ids) or a `_Swap` (a new head on them)
        self.made: dict[str, _Swap | str] = {}

    def feed(self, request: Request, mine: _Prepared | None, ids: _Whole | None) -> None:
        """The next request (log order), with its base entry and that entry's whole ids
        (`_BaseWalk.of`)."""
        from prefixscope.prompt.pipeline import what_if_changes

        preparer = self.preparer
        prev = preparer.links.prev(request.id)
        if not preparer.renders(request):
            self._flush()
            preparer.plain(request)
            self._forget(request.id)
        elif mine is not None and ids is not None and \
                not what_if_changes(request, self.before, self.transforms, self.scan, prev):
            self._flush()
            if not self._kept_entry(request, mine, ids, prev):
                preparer.reused(request, ids.ids(), mine, mine.head)
            self.made[request.id] = _KEPT
            self._forget(request.id)
        elif mine is not None and ids is not None and not preparer.by_blocks and \
                (swap := self._swap(request, mine, ids, prev)) is not None:
            self._flush()
            made, entry = swap
            if isinstance(entry, np.ndarray):
                preparer.reused(request, entry, mine, made.n)
            else:
                preparer.extended(request, mine, entry, made.n)
            self.made[request.id] = made
            self._forget(request.id)
        else:
            self.pending.append(request)
            if len(self.pending) >= self.batch:
                self._flush()

    def finish(self) -> list[_Prepared]:
        self._flush()
        return self.preparer.out

    def _kept_entry(self, request: Request, mine: _Prepared, ids: _Whole, prev: str | None
                    ) -> bool:
        """Add `request`'s entry as its base entry `mine`, where that is provably the entry
        `Preparer.reused` would make of its ids (True; else nothing is added).

        Why: `reused` compacts the request's ids against its predecessor's what-if ids
        (`_compact(live[prev], ids)`, a function of the two arrays alone). Both are the
        base's here -- this request is kept, and so was its predecessor (`made`) -- and
        `mine` is the base preparer's `_compact` of those very two arrays (its `base` is
        `prev`: it held the predecessor's ids, which are the ids it made that entry of)."""
        if prev is None or self.made.get(prev) is not _KEPT or mine.base != prev or \
                mine.ids is None or not self.preparer.extends(request.id):
            return False
        self.preparer.extended(request, mine, (mine.shared, mine.resumed, mine.ids),
                               mine.head, ids)
        return True

    def _swap(self, request: Request, mine: _Prepared, ids: _Whole, prev: str | None
              ) -> tuple[_Swap, np.ndarray | tuple[int, None, np.ndarray]] | None:
        """`request`'s what-if prompt as its base ids after the what-if's head
        (`head_swap`; None: not proved), and its entry's input: the whole ids to compact
        (`Preparer.reused`), or, where its predecessor was swapped to the same head, the
        compact form read off its base entry (`_swapped_entry`; `Preparer.extended`)."""
        new = head_text(request, self.after)
        if new is None:
            return None
        before = self.made.get(prev) if prev is not None else None
        if isinstance(before, _Swap) and before.head == new and mine.head is not None and \
                mine.base == prev and self.preparer.extends(request.id):
            tail = _swapped_entry(mine, mine.head, before)
            if tail is not None:
                return (replace(before, h=mine.head, length=mine.n_tokens),
                        (before.n + before.length - before.h, None, tail))
        whole = ids.ids()
        swapped = _head_swap(request, self.before, new, whole, mine.head)
        if swapped is None:
            return None
        return _Swap(new, swapped[1], swapped[2], len(whole)), swapped[0]

    def _forget(self, request_id: str) -> None:
        for rid in self.preparer.done(request_id):
            self.turns.forget(rid)
            self.scan.forget(rid)
            self.made.pop(rid, None)
        if not self.preparer.live_after(request_id):
            self.turns.forget(request_id)
            self.scan.forget(request_id)
            self.made.pop(request_id, None)

    def _flush(self) -> None:
        pending = self.pending
        if not pending:
            return
        results = self.turns.tokens_many(pending, [self.preparer.links.prev(r.id)
                                                   for r in pending])
        for request, tok in zip(pending, results, strict=True):
            self.preparer.rendered(request, tok, self.turns.head_tokens(request.id))
        for request in pending:
            self._forget(request.id)
        pending.clear()


def head_swapped(request: Request, before: RenderOptions, after: RenderOptions,
                 ids: np.ndarray, head: int | None = None) -> np.ndarray | None:
    """The token ids of `request` rendered with `after`, from `ids` (its ids rendered with
    `before`), when the two renders differ in their head alone (`prompt.head_text`): the
    ids of the new head, then those of `ids` after the old head. None where that is not
    proved (the caller renders the request). `head`: how many of `ids` spell the old head,
    proved where they were made (`Turns.head_tokens`; the old head is then not rendered).

    Why the ids split there: `ids[:h]` being the ids of the old head text H means those h
    tokens spell H (byte-level tokens spell their text), so token h spells the text right
    after it; when that is a split token, the prompt is cut at a split-token occurrence,
    where its tokenization provably splits (`tokens.tokenize`), so `ids[h:]` are the ids of
    the rest alone -- and the what-if's prompt is the new head followed by that very rest,
    cut at that same occurrence."""
    swapped = head_swap(request, before, after, ids, head)
    return swapped[0] if swapped is not None else None


def head_swap(request: Request, before: RenderOptions, after: RenderOptions,
              ids: np.ndarray, head: int | None = None) -> tuple[np.ndarray, int] | None:
    """(`head_swapped`'s ids, how many of them spell the new head): the new head's own ids
    are followed by the old ids' split token, so they spell the what-if prompt's head
    with its template splitting there, as `Turns.head_tokens` says of a render."""
    new = head_text(request, after)
    swapped = None if new is None else _head_swap(request, before, new, ids, head)
    return swapped[:2] if swapped is not None else None


def _head_swap(request: Request, before: RenderOptions, new: tuple[str, str],
               ids: np.ndarray, head: int | None) -> tuple[np.ndarray, int, int] | None:
    """`head_swap` given the new head's `head_text`, with the old head's length in `ids`
    (the new head's ids then `ids[h:]`: (ids, their new head's length, h))."""
    h: int | None = head
    if h is not None:  # (`before` and `after` differ in their what-ifs: one tokenizer)
        cache = piece_cache(load_tokenizer(new[1]))
    else:
        old = head_text(request, before)
        if old is None or old[1] != new[1]:
            return None
        cache = piece_cache(load_tokenizer(old[1]))
        h = _spelling(cache, old[0], ids)
    if h is None or h >= len(ids) or int(ids[h]) not in cache.split_ids:
        return None
    swapped = _head_ids(cache, new[0])
    return np.concatenate((swapped.astype(ids.dtype, copy=False), ids[h:])), len(swapped), h


_KEPT = "kept"  # `_WhatIf.made`: the what-if prompt is the base prompt itself


@dataclass(frozen=True, slots=True)
class _Swap:
    """`_WhatIf.made`: the what-if prompt is the base prompt with a new head, ``N +
    B[h:]``: N the ids of `head` (its text, its tokenizer: `head_text`), `n` of them, B the
    base prompt's whole ids, `length` of them, and B's first `h` spelling its old head."""

    head: tuple[str, str]
    n: int
    h: int
    length: int


def _swapped_entry(mine: _Prepared, h: int, before: _Swap) -> np.ndarray | None:
    """The ids a request's what-if prompt adds to its predecessor's whole what-if prompt,
    where both swapped their base prompts' heads to the same new head N: `mine` its base
    entry (compacted against the predecessor's base prompt, `mine.base`), the first `h` of
    its base ids spelling its old head, `before` how the predecessor's was made. None
    where the base entry does not show that the what-if prompt extends the predecessor's.

    Why: write B, P for the request's and its predecessor's base ids (B's first h spell
    its old head, P's first p = before.h), so the what-if prompts are N + B[h:] and
    N + P[p:] (`head_swap`'s proof: B[h] is a split token, shown below). `mine` gives B as
    P[:s] + own (no `resumed` run), or with B[at:at + k] = P[st:st + k] (`_compact` finds
    runs equal token by token). When that run (or the shared start, at = st = 0, k = s)
    covers the old heads' ends at one offset (at <= h, h - at = p - st) and reaches P's end
    (st + k = |P|), then B[h:at + k] = P[p:] and N + B[h:] = N + P[p:] + B[at + k:]: the
    what-if prompt extends the predecessor's whole, by B[at + k:] (own's ids after at - s),
    and B[h] = P[p] is the split token the predecessor's swap checked (p < |P|). Then
    `_compact` of the two what-if prompts finds them sharing the predecessor's whole prompt,
    |N| + |P| - p tokens, and stops there (no run looked for past the base's end): the
    entry is (that, no run, those ids) -- what the caller adds."""
    length, s = before.length, mine.shared
    if mine.resumed is None:
        at, start, run = 0, 0, s
    else:
        at, start, run = mine.resumed
    if not (at <= h < at + run and h - at == before.h - start and start + run == length):
        return None
    own = np.asarray(mine.ids)
    return own if mine.resumed is None else own[at - s:]


def _spelling(cache: PieceCache, text: str, ids: np.ndarray) -> int | None:
    """h with ``ids[:h]`` spelling `text` (None: they do not start so).

    Read off the bytes the ids spell where the tokenizer says them (`Tokenizer.spelled`:
    the first h whose bytes add up to the text's, checked equal to them), else by
    tokenizing `text` (its ids are the spelling); the text's ids are not needed, only
    that those tokens spell it (`head_swapped`)."""
    lengths = cache.tokenizer.byte_lengths
    if lengths is not None:
        want = text.encode("utf-8", "surrogatepass")
        spelled = np.cumsum(lengths[ids[:len(want) + 1]])  # every token spells a byte or more
        h = int(np.searchsorted(spelled, len(want))) + 1
        if h <= len(spelled) and int(spelled[h - 1]) == len(want) and \
                cache.tokenizer.spelled(ids[:h]) == want:
            return h
    head = _head_ids(cache, text)
    return len(head) if np.array_equal(ids[:len(head)], head) else None


@lru_cache(maxsize=32)
def _head_ids(cache: PieceCache, text: str) -> np.ndarray:
    """`cache.encode(text).ids` (not to be written to), the last heads remembered whole: a
    session's turns share their heads (and the what-if's), and a head is tens of
    thousands of tokens the piece cache would assemble again piece by piece."""
    return cache.encode(text).ids


class _Whole:
    """A compact `_Prepared` prompt's whole token ids, built when first asked for (from its
    base's `_Whole`): a what-if entry read off its base entry needs neither prompt whole."""

    __slots__ = ("_ids", "_entry", "_base")

    def __init__(self, entry: _Prepared | None, base: _Whole | None = None,
                 ids: np.ndarray | None = None) -> None:
        self._ids, self._entry, self._base = ids, entry, base

    def ids(self) -> np.ndarray:
        """The whole ids (built once; the prompts they were built from let go)."""
        chain: list[_Whole] = []  # the prompts not built yet, newest first
        node: _Whole | None = self
        while node is not None and node._ids is None:
            chain.append(node)
            node = node._base
        built = node._ids if node is not None else None
        for node in reversed(chain):
            assert node._entry is not None
            built = node._entry.whole_ids(built)
            node._ids, node._entry, node._base = built, None, None
        assert self._ids is not None
        return self._ids


def _whole_ids(held: np.ndarray | _Whole) -> np.ndarray:
    return held.ids() if isinstance(held, _Whole) else held


class _FullIds:
    """The whole token ids of compact `_Prepared` prompts, asked for in log order (each
    rendered one once), as `_Whole`s: a prompt's are held only while a later one still
    extends it."""

    def __init__(self, prepared: Sequence[_Prepared]) -> None:
        self._left = Counter(p.base for p in prepared if p.base is not None)
        self._held: dict[str, _Whole] = {}

    def of(self, p: _Prepared) -> _Whole:
        ids = _Whole(p, self._held[p.base] if p.base is not None else None)
        if p.base is not None:
            self._left[p.base] -= 1
            if not self._left[p.base]:
                del self._held[p.base], self._left[p.base]
        if self._left.get(p.id):
            self._held[p.id] = ids
        return ids


# The session events (`model.EVENT_KINDS`) that change the prompt's prefix without
# compacting it: the ledger's recorded `break` kinds.
RECORDED_CHANGES = frozenset({"model-change", "settings-change", "client-upgrade",
                              "tool-set", "truncation", "history-rewrite"})
# Of them, those that change the prompt's text. Another model sends the same conversation:
# its prompt still extends the session's, and the model's own cache namespace
# (`_namespace`) is what keeps the two models' entries apart -- so the chain goes on.
TEXT_CHANGES = RECORDED_CHANGES - {"model-change"}


@dataclass(frozen=True, slots=True)
class Links:
    """How the requests to prepare are threaded: each one's session, predecessor (and
    whether the link is a compaction), and how many later requests name each one so."""

    session_of: dict[str, str]
    prev_of: dict[str, tuple[str | None, bool]]
    successors: Counter[str]
    # Requests after a change the log records other than a compaction (another model or
    # reasoning effort, a client upgrade, a tool-set delta, a truncation, a history
    # rewrite: `session_events`, as report's ledger reads them): a replay from usage does
    # not serve them the predecessor's prefix, and their misses of it are `break`.
    changed: frozenset[str] = frozenset()
    # Of `changed`, the requests after a change of the prompt's text (`TEXT_CHANGES`):
    # their prompt starts a new chain; after another model alone the chain goes on.
    rewritten: frozenset[str] = frozenset()

    @classmethod
    def of(cls, store: Store) -> Links:
        pairs = store.session_pairs()
        prev_of: dict[str, tuple[str | None, bool]] = {
            b: (a, compaction) for a, b, _, compaction in pairs}
        # a compacted request threading could not pair (docs/store.md#sessions): no
        # predecessor, but a compaction all the same
        prev_of.update((rid, (None, True)) for rid in store.continuations())
        # a compaction the log records before a request (`session_events`: the ledger's
        # `compaction`) is a compaction link for the replay's miss classes too
        events_of = store.session_events()
        for rid, events in events_of.items():
            if any(e.kind == "compaction" for e in events):
                prev_of[rid] = (prev_of.get(rid, (None, False))[0], True)
        changed = frozenset(rid for rid, events in events_of.items()
                            if any(e.kind in RECORDED_CHANGES for e in events))
        rewritten = frozenset(rid for rid, events in events_of.items()
                              if any(e.kind in TEXT_CHANGES for e in events))
        return cls(store.session_of(), prev_of, Counter(a for a, _, _, _ in pairs), changed,
                   rewritten)

    def prev(self, request_id: str) -> str | None:
        return self.prev_of.get(request_id, (None, False))[0]


class Preparer:
    """`prepare`, one request at a time, in log order: a request with a prompt to render is
    given with its tokens (`rendered`), any other as it is (`plain`). The entries are the
    same whether the log is fed in one go or session by session (each depends on its
    session's earlier requests only), so a per-session stage can build them."""

    def __init__(self, links: Links, options: SimulateOptions, spill: str | None = None,
                 hold: int = HOLD_BYTES) -> None:
        self.links = links
        self.options = options
        # a `Spill`'s folder: each entry's own ids written there, not held (`spill`), once
        # this process holds `hold` bytes of them
        self.spill = spill
        self.hold = hold
        self.spec = spec_of(options.engine)
        self.by_blocks = self.spec.replays == "segments"
        self.out: list[_Prepared] = []
        self.skipped: dict[str, int] = {}
        # A rendered prompt's ids are held only while a later request of its session may
        # still extend it: memory bounded by the sessions running at once, not by the log.
        # How many later requests still name a request as their predecessor is
        # `links.successors`' count less those `done` here (`_successors_left`): only the
        # requests this preparer meets are counted, not a copy of the whole counter -- a
        # report makes one preparer per cache domain, and a folder of agent transcripts
        # is a domain per file, so a copy each was O(domains x log): 528 x 38,759 ids,
        # 480 MB, at 1 GiB of Claude Code transcripts.
        self._done_after: Counter[str] = Counter()
        # (a what-if entry read off its base entry holds them unbuilt: `_Whole`)
        self._live: dict[str, np.ndarray | _Whole] = {}
        self._chains: dict[str, tuple[tuple[str, int], ...]] = {}  # request id -> its segments
        self._ttls: dict[str, float | None] = {}  # request id -> the TTL its usage shows

    def renders(self, request: Request) -> bool:
        """Is `request` prepared from its rendered prompt (else `plain`)?"""
        return not self._from_usage(request) and request.block_hashes is None

    def _from_usage(self, request: Request) -> bool:
        anthropic_body = request.body is not None and request.endpoint == "anthropic-messages"
        return (self.by_blocks and not anthropic_body) or (request.body is None
                                                           and request.block_hashes is None)

    def rendered(self, request: Request, tok: Tokens | RenderError,
                 head: int | None = None) -> None:
        """A request `renders` says is rendered, with its tokens (or why it cannot be);
        `head`: how many of them spell its head (`Turns.head_tokens`)."""
        if isinstance(tok, RenderError):
            reason = f"cannot render: {str(tok).splitlines()[0]}"
            self.skipped[reason] = self.skipped.get(reason, 0) + 1
            return
        blocks, breakpoints = (_anthropic_blocks(tok, request.body or {})
                               if self.by_blocks else (None, ()))
        self._add(request, tok.ids, tok.prompt.approximate, blocks, breakpoints,
                  _output_ids(request, self.options), head)

    def reused(self, request: Request, ids: np.ndarray, entry: _Prepared,
               head: int | None = None) -> None:
        """A request `renders` says is rendered, whose prompt is the one `entry` (its entry
        prepared under other render options) was made from, whole token ids `ids`: the
        entry `rendered` would add for it, from `entry`'s prompt-derived fields (what-if
        replays: `prepare_what_if`). `head`: how many of `ids` spell its head, where that
        is known (`entry.head` when the prompt is `entry`'s own: the what-if provably
        changes neither the body's render nor, so, its head's)."""
        self._add(request, ids, entry.approximate, entry.blocks, entry.breakpoints,
                  entry.output_ids, head)

    def extends(self, request_id: str) -> bool:
        """Will `request_id`'s entry be compacted against its predecessor's prompt (held)?"""
        prev = self.links.prev(request_id)
        return prev is not None and prev in self._live

    def extended(self, request: Request, entry: _Prepared,
                 compact: tuple[int, tuple[int, int, int] | None, np.ndarray | SpilledIds],
                 head: int | None, whole: _Whole | None = None) -> None:
        """`reused(request, ids, entry, head)` where the caller proved what `_compact` of
        the predecessor's held prompt (`extends`) and `ids` gives: `compact` (shared, run,
        own ids), so neither prompt is built whole. `whole`: the whole ids, where the
        caller has them as a `_Whole` (else built from the predecessor's when asked)."""
        self._add(request, whole, entry.approximate, entry.blocks, entry.breakpoints,
                  entry.output_ids, head, compact)

    def _add(self, request: Request, full: np.ndarray | _Whole | None, approximate: bool,
             blocks: tuple[tuple[str, int], ...] | None,
             breakpoints: tuple[tuple[int, float], ...],
             output: np.ndarray | SpilledIds | None,
             head: int | None = None,
             compact: tuple[int, tuple[int, int, int] | None,
                            np.ndarray | SpilledIds] | None = None) -> None:
        prev, compacted = self.links.prev_of.get(request.id, (None, False))
        ids: np.ndarray | SpilledIds
        base, shared, resumed = None, 0, None
        if compact is not None:  # `extended`: its predecessor's prompt is held
            assert prev is not None and prev in self._live
            base = prev
            shared, resumed, ids = compact
        else:
            assert isinstance(full, np.ndarray)
            ids = full
            if prev is not None and prev in self._live:
                base = prev
                shared, resumed, ids = _compact(_whole_ids(self._live[prev]), full)
        own: np.ndarray | SpilledIds = ids
        if self.spill is not None and isinstance(ids, np.ndarray):
            # (the held ids below stay arrays: they are the live ones)
            own = keep_ids(ids, self.spill, self.hold)
            if isinstance(output, np.ndarray):
                output = keep_ids(output, self.spill, self.hold)
        entry = _Prepared(
            request.id, self.links.session_of.get(request.id), prev, compacted,
            _seconds(request.timestamp), request.usage.cached_tokens, own,
            output, None, 0, 0,
            logged_prompt=request.usage.prompt_tokens, approximate=approximate,
            blocks=blocks, breakpoints=breakpoints, duration=_duration(request),
            base=base, shared=shared, resumed=resumed, namespace=_namespace(request),
            head=head)
        self.out.append(entry)
        if self._successors_left(request.id):
            if full is None:  # `extended` without the whole ids: built from the base's
                assert base is not None
                full = _Whole(entry, _held_whole(self._live[base]))
            self._live[request.id] = full

    def plain(self, request: Request) -> None:
        """A request `renders` says is not rendered: from its usage, or a block-hash trace."""
        prev, compacted = self.links.prev_of.get(request.id, (None, False))
        session = self.links.session_of.get(request.id)
        if not self._from_usage(request):
            block = self.options.trace_block_size or request.block_size or DEFAULT_TRACE_BLOCK
            self.out.append(_Prepared(
                request.id, session, prev, compacted, _seconds(request.timestamp),
                request.usage.cached_tokens, None, None, request.block_hashes,
                request.usage.prompt_tokens or 0, block,
                logged_prompt=request.usage.prompt_tokens,
                trace_engine=TRACE_ENGINES.get(request.source_format, "blocktrace")))
        elif request.usage.prompt_tokens and (self.by_blocks or self.spec.hosted):
            n = request.usage.prompt_tokens or 0
            changed = request.id in self.links.changed
            before = self._chains.get(prev) if prev is not None and not compacted \
                and request.id not in self.links.rewritten else None
            if before is not None and before[-1][1] <= n:
                segments = (*before, (request.id, n))
            else:
                segments = ((request.id, n),)
            self._chains[request.id] = _written(segments, request)
            ttl = self._ttls[request.id] = self.spec.write_ttl(
                request.usage.cache_write_tokens, request.usage.cache_write_1h_tokens,
                self._ttls.get(prev) if prev is not None else None)
            self.out.append(_Prepared(
                request.id, session, prev, compacted, _seconds(request.timestamp),
                request.usage.cached_tokens, None, None, None, 0, 0, segments, request.model,
                logged_prompt=request.usage.prompt_tokens, namespace=_namespace(request),
                write_ttl=ttl, changed=changed))
        else:
            reason = ("no prompt in the log (no body, no block ids): a hosted engine "
                      "replays such logs from their usage" if request.usage.prompt_tokens
                      else "no prompt in the log (no body, no block ids, no prompt tokens)")
            self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def done(self, request_id: str) -> list[str]:
        """`request_id` is prepared: the requests whose prompts no later one needs now."""
        prev = self.links.prev(request_id)
        if prev is not None and self._successors_left(prev):
            self._done_after[prev] += 1
            if not self._successors_left(prev):
                self._live.pop(prev, None)
                return [prev]
        return []

    def live_after(self, request_id: str) -> bool:
        """Will a later request still read this one's prompt?"""
        return self._successors_left(request_id) > 0

    def _successors_left(self, request_id: str) -> int:
        """The requests naming `request_id` their predecessor not `done` here yet (never
        below 0: `done` counts one only while some are left)."""
        return self.links.successors[request_id] - self._done_after[request_id]


def _held_whole(held: np.ndarray | _Whole) -> _Whole:
    return held if isinstance(held, _Whole) else _Whole(None, ids=held)


def _written(segments: tuple[tuple[str, int], ...], request: Request
             ) -> tuple[tuple[str, int], ...]:
    """`segments` as a later request of the session extends them: the last (this
    request's) ends where its usage shows its cache write ended, read + write, when the
    log reports both (Anthropic's uncached ``input_tokens`` after the last breakpoint were
    never written), so a read from it reaches ``min(end - ANTHROPIC_READ_LAG, read +
    write)`` -- the cap report's ledger puts on what the predecessor left
    (docs/simulate.md). Kept no shorter than the segment before it."""
    usage = request.usage
    if usage.cached_tokens is None or usage.cache_write_tokens is None:
        return segments
    key, end = segments[-1]
    floor = segments[-2][1] if len(segments) > 1 else 0
    reach = usage.cached_tokens + usage.cache_write_tokens + ANTHROPIC_READ_LAG
    return (*segments[:-1], (key, max(floor, min(end, reach))))


def _namespace(request: Request) -> str | None:
    """The block-hash namespace of a logged request, as vLLM's
    `generate_block_hash_extra_keys` builds it: the LoRA adapter's name, then the
    ``cache_salt`` (a body field of its OpenAI-compatible API); None when it has neither.

    vLLM's server picks a LoRA adapter by the request's model name (``--lora-modules
    NAME=PATH``) and keys every block of it by that name, so requests for two model names
    never share a block (nor do two hosted models, nor two servers behind one log). The
    name on the first block only separates the chain just as well: the keys are chained.
    The base model gets its name too -- distinct from every adapter's, as vLLM's "no
    adapter" is."""
    names = []
    if request.model:
        names.append(f"lora:{request.model}")
    salt = (request.body or {}).get("cache_salt")
    if isinstance(salt, str) and salt:
        names.append(f"cache_salt:{salt}")
    return "|".join(names) or None


def _duration(request: Request) -> float | None:
    """Seconds the request ran, from what the log recorded (Bifrost ``latency``, LiteLLM
    ``request_duration_ms`` or ``endTime``)."""
    meta = request.metadata
    for key, scale in (("latency_ms", 1e-3), ("request_duration_ms", 1e-3)):
        value = meta.get(key)
        if isinstance(value, (int, float)) and value >= 0:
            return float(value) * scale
    end = meta.get("end_time")
    if isinstance(end, str) and request.timestamp is not None:
        try:
            return max(0.0, (datetime.fromisoformat(end) - request.timestamp).total_seconds())
        except ValueError:
            return None
    return None


_PROBE = 32  # tokens of a prompt looked for in its base after they differ
_PROBE_AT = (0, 16, 64, 256, 1024, 4096, 16384, 65536)  # tokens after the shared prefix
_MIN_RUN = 64  # a shorter run found again is kept in the prompt's own ids


def _compact(base: np.ndarray, ids: np.ndarray
             ) -> tuple[int, tuple[int, int, int] | None, np.ndarray]:
    """`ids` as (tokens shared with `base` from the start, one more run of `base` found
    after them as (at, start, length), the rest of `ids` as a new array): see
    `_Prepared`. The run is the longest found by looking up a few probes of `ids` in
    `base`, each extended both ways (reordered tools match in short runs, the history
    after them in a long one), where `ids` diverge from `base` before its end; any run
    found is exact, so `_Expander.full_ids` rebuilds `ids`."""
    shared = common_prefix_length(base, ids)
    resumed = None
    # `ids` extends all of `base` (a turn that appends): the rest is new (looking for it in
    # `base` costs a scan of the whole base per probe, and finds nothing as a rule)
    if shared < len(ids) and shared < len(base):
        hay = base.tobytes()
        for offset in _PROBE_AT:
            at = shared + offset
            if at + _PROBE > len(ids):
                break
            if resumed is not None and resumed[0] <= at < resumed[0] + resumed[2]:
                continue  # inside the run already found
            start = _find(hay, ids[at: at + _PROBE].tobytes(), base.itemsize)
            if start < 0:
                continue
            back = common_prefix_length(base[:start][::-1], ids[shared:at][::-1])
            length = back + common_prefix_length(base[start:], ids[at:])
            if length >= _MIN_RUN and (resumed is None or length > resumed[2]):
                resumed = (at - back, start - back, length)
    if resumed is None:
        return shared, None, ids[shared:].copy()  # a copy: the whole array can go
    at, _, length = resumed
    return shared, resumed, np.concatenate((ids[shared:at], ids[at + length:]))


def _find(hay: bytes, needle: bytes, itemsize: int) -> int:
    """Index of the first whole item where `needle` occurs in `hay`, or -1."""
    pos = hay.find(needle)
    while pos >= 0 and pos % itemsize:
        pos = hay.find(needle, pos + 1)
    return -1 if pos < 0 else pos // itemsize


def _output_ids(request: Request, options: SimulateOptions) -> np.ndarray | None:
    """The logged output's text tokenized, to follow the prompt (for --cache-output)."""
    if not options.cache_output or request.output is None:
        return None
    from prefixscope.tokenizers import choose_tokenizer, load_tokenizer

    text = _output_text(request.output)
    if not text:
        return None
    tok = load_tokenizer(choose_tokenizer(options.render.tokenizer, request.model).spec)
    return np.asarray(tok.encode(text).ids)


def _output_text(output: object) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, dict):
        content = output.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "".join(p.get("text", "") for p in content
                           if isinstance(p, dict) and isinstance(p.get("text"), str))
    if isinstance(output, list):
        return "".join(_output_text(o) for o in output)
    return ""


def _seconds(ts: datetime | None) -> float | None:
    return None if ts is None else ts.timestamp()



def _anthropic_blocks(tok: Tokens, body: dict[str, object]
                      ) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[int, float], ...]]:
    """The content blocks of a rendered Anthropic request (template glue joins the block
    before it) and the breakpoints its ``cache_control`` marks set: on a tool, a system
    block or a message content block, or (top-level ``cache_control``, automatic mode)
    on the last block. TTL: "1h" -> 3600 s, else 300 s. No mark: nothing is cached --
    Anthropic caching is opt-in."""
    blocks: list[tuple[str, int]] = []
    for segment, (_, end) in zip(tok.prompt.segments, tok.segment_token_spans(), strict=True):
        match = BLOCK.match(segment.path)
        key = match.group(1) if match else None
        if blocks and (key is None or key == blocks[-1][0]):
            blocks[-1] = (blocks[-1][0], max(blocks[-1][1], end))
        else:
            blocks.append((key or "template", end))
    breakpoints: dict[int, float] = {}
    for index, (key, _) in enumerate(blocks):
        mark = _cache_control(body, key)
        if mark is not None:
            breakpoints[index] = mark
    automatic = body.get("cache_control")
    if isinstance(automatic, dict) and blocks:
        breakpoints[len(blocks) - 1] = _ttl_of(automatic)
    return tuple(blocks), tuple(sorted(breakpoints.items()))


def _cache_control(body: dict[str, object], key: str) -> float | None:
    node: object = body
    for name, index in re.findall(r"(\w+)(?:\[(\d+)\])?", key):
        node = node.get(name) if isinstance(node, dict) else None
        if index:
            node = node[int(index)] if isinstance(node, list) and int(index) < len(node) \
                else None
    mark = node.get("cache_control") if isinstance(node, dict) else None
    return _ttl_of(mark) if isinstance(mark, dict) else None


def _ttl_of(mark: dict[str, object]) -> float:
    return 3600.0 if mark.get("ttl") == "1h" else 300.0
