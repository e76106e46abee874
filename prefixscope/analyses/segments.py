"""Segment census: which parts of the request change between turns, and what it costs.

The investigator's third move in the 17920 incident: hash each part of the raw request
(each system block, the tools, each message) and see which one changes. This module
does it for every request and every consecutive pair of a session.

Hash contract (version ``x3``, see `prefixscope.hashing`): a segment's content is its
JSON value as logged, without ``cache_control`` markers (`hashing.strip_cache_control`:
they move between turns but never reach the model). Three hashes are kept per segment:

* ``exact``     -- xxh3-128 of the JSON with the logged key order (`hashing.exact_json`);
* ``canonical`` -- `hashing.content_hash`: keys sorted, compact separators, UTF-8;
* ``folded``    -- the canonical hash after folding every whitespace run in every string
  to one space (and stripping the ends).

Changing how any of these hashes is computed changes every census: bump the tag in
`hashing.HASH_VERSION`.

Between the two requests of a pair a segment is unchanged (equal exact hash), or
changed by ``key-order`` (canonical equal), ``whitespace`` (folded equal), ``value``
(anything else) or ``inserted-deleted`` (present on one side only). Messages (or
Responses input items) appended at the end of the history are growth, not a change;
messages cut from the end (a compaction, a rewind) are not counted either -- the
first message that changed before the cut is where the prefix broke. Such a pair
does not count for those messages at all.

Segment paths are the request's as logged, the same names `prefixscope.prompt.render()`
uses: ``tools[3]``, ``system[0]`` (or ``system`` for a string), ``messages[7]``,
``instructions``, ``input[2]``. Token positions (median token start, tokens after)
are filled in when a tokenizer renders the requests; without one they are omitted
and the census still ranks by change rate.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

import orjson
import xxhash

from prefixscope.analyses.dimensions import check_dimensions, group_key
from prefixscope.analyses.pool import worker_pool
from prefixscope.model import Request
from prefixscope.model.hashing import (
    HASH_VERSION,
    content_hash,
    exact_json,
    fold_whitespace,
    strip_cache_control,
)
from prefixscope.model.redaction import active, opaque_masked
from prefixscope.parallel import effective_workers, runs
from prefixscope.prompt import RenderError, RenderOptions
from prefixscope.store import Layout, Store, reader
from prefixscope.tokens import tokens

CHANGE_KINDS = ("value", "key-order", "whitespace", "inserted-deleted")
_WS = re.compile(r"\s+")
PREVIEW_CHARS = 48


@dataclass(frozen=True, slots=True)
class RawSegment:
    path: str  # place in the request as logged, e.g. "system[0]"
    kind: str  # "system" | "tool" | "message" | "instructions" | "input"
    family: str  # "system" | "tools" | "messages" | "instructions" | "input"
    index: int | None  # position within its family
    value: Any  # the JSON value as logged


@dataclass(frozen=True, slots=True)
class SegmentHashes:
    exact: str
    canonical: str
    folded: str


@dataclass(frozen=True, slots=True)
class SegmentStats:
    segment: str  # path
    kind: str
    requests: int  # requests holding it
    distinct: int  # distinct exact contents
    pairs: int  # consecutive same-session pairs where it is on either side
    change_rate: float | None  # changed pairs / pairs
    unique_per_request: bool  # every request holding it has its own content
    change_kinds: dict[str, int]  # change kind -> pairs
    token_start_median: float | None  # median token index where it starts
    tokens_after_median: float | None  # median tokens from its start to the prompt end
    invalidated_tokens: float | None  # change_rate x tokens_after_median
    preview: str  # short, redacted text of its most common content


@dataclass(frozen=True, slots=True)
class SegmentsTotals:
    requests: int  # requests with a body
    pairs: int  # consecutive same-session pairs compared
    segments: int  # distinct segment paths
    without_body: int  # requests in scope without a body (not censused)
    hash_version: str


@dataclass(frozen=True, slots=True)
class SegmentsReport:
    group: dict[str, Any]  # the --by key of this census ({} for all)
    segments: tuple[SegmentStats, ...]  # ranked: most invalidated tokens first
    totals: SegmentsTotals


def raw_segments(request: Request) -> list[RawSegment]:
    """The top-level parts of a request body, with their as-logged paths."""
    body = request.body
    if not isinstance(body, dict):
        return []
    out: list[RawSegment] = []

    def family(name: str, kind: str) -> None:
        items = body.get(name)
        if isinstance(items, list):
            out.extend(RawSegment(f"{name}[{i}]", _item_kind(kind, v), name, i, v)
                       for i, v in enumerate(items))
        elif items is not None:
            out.append(RawSegment(name, kind, name, None, items))

    for name, kind in _families(request.endpoint):
        family(name, kind)
    return out


def _families(endpoint: str | None) -> tuple[tuple[str, str], ...]:
    """A body's segment families in census order: (field, segment kind)."""
    if endpoint == "openai-responses":
        return (("tools", "tool"), ("instructions", "instructions"), ("input", "input"))
    return (("tools", "tool"), ("system", "system"), ("messages", "message"))


def _item_kind(kind: str, value: Any) -> str:
    return "system" if kind == "message" and _is_system(value) else kind


def _is_system(value: Any) -> bool:
    """Is this list item a system or developer message?"""
    return isinstance(value, dict) and value.get("role") in ("system", "developer")


def segment_hashes(value: Any) -> SegmentHashes:
    exact, value = _exact(value)
    # A session resends its history every turn: the same segment comes back hundreds of
    # times. Its exact JSON determines the value (JSON-derived: key order kept), so the
    # canonical and whitespace-folded hashes are computed once per distinct content.
    known = _DERIVED.get(exact)
    if known is None:
        if len(_DERIVED) >= _DERIVED_MAX:
            _DERIVED.clear()
        known = _DERIVED[exact] = (content_hash(value), content_hash(fold_whitespace(value)))
    return SegmentHashes(exact=exact, canonical=known[0], folded=known[1])


_DERIVED: dict[str, tuple[str, str]] = {}  # exact hash -> (canonical, folded) hashes
_DERIVED_MAX = 100_000


def _exact(value: Any) -> tuple[str, Any]:
    """`value`'s exact hash and the value it hashes (`value` without its cache_control
    markers)."""
    raw = exact_json(value).encode()
    if b'"cache_control"' in raw:  # else there is no such key to strip: the same JSON
        value = strip_cache_control(value)
        raw = exact_json(value).encode()
    return f"{HASH_VERSION}:{xxhash.xxh3_128_hexdigest(raw)}", value


@dataclass(frozen=True, slots=True)
class PartHashes:
    """A stored part's exact hash (`SegmentHashes.exact`); its canonical and folded hashes
    are made only for a part a pair compares with another content (`Census.report`).

    Why: the derived hashes are read only where two contents of a segment differ
    exactly (`change_kind`), and folding every string's whitespace is most of hashing a
    part: of the 7,452 distinct parts of a 1.05 GiB agent log, 1,242 are ever compared
    that way, and folding the others cost 0.25 s of the census's 0.84 s."""

    exact: str
    digest: str  # the part's hash in the store (`store.parts`)


@dataclass(frozen=True, slots=True)
class StoredPart:
    """A stored part (`store.parts`) standing for its value in a census's samples: read
    back only for the few contents a report previews."""

    digest: str


# A segment's hashes in a census: all three, or a stored part's exact one (`PartHashes`).
_Hashes = SegmentHashes | PartHashes

# What `Census._add` counts of one segment of a request: (path, kind, family, index in it,
# its hashes, the value a sample keeps).
_Entry = tuple[str, str, str, "int | None", _Hashes, Any]


class PartCensus:
    """Each stored part's exact hash (`PartHashes`) and whether it is a system or developer
    message, computed once per distinct part however many bodies hold it (a session
    resends its history every turn). At most `limit` are kept: a batch's parts are read
    again when a long log has pushed them out."""

    def __init__(self, store: Store, limit: int = 200_000) -> None:
        self.store = store
        self.limit = limit
        self.known: dict[str, tuple[PartHashes, bool]] = {}

    def read(self, layouts: Sequence[Layout | None]) -> None:
        """Make sure every part `layouts` name is known (one query for those that are not)."""
        wanted = [h for layout in layouts if layout for hashes in layout.values()
                  for h in hashes if h not in self.known]
        if not wanted:
            return
        wanted = list(dict.fromkeys(wanted))
        if len(self.known) + len(wanted) > self.limit:
            needed = {h for layout in layouts if layout for hs in layout.values() for h in hs}
            self.known = {h: v for h, v in self.known.items() if h in needed}
        for digest, text in self.store.parts_text(wanted).items():
            value = orjson.loads(text)
            self.known[digest] = (PartHashes(_exact(value)[0], digest), _is_system(value))


def change_kind(a: SegmentHashes | None, b: SegmentHashes | None) -> str | None:
    """How a segment changed between two requests; None when unchanged."""
    if a is None or b is None:
        return None if a is b else "inserted-deleted"
    if a.exact == b.exact:
        return None
    if a.canonical == b.canonical:
        return "key-order"
    if a.folded == b.folded:
        return "whitespace"
    return "value"


def preview(value: Any, limit: int = PREVIEW_CHARS, redact: bool = True,
            other: Any = None) -> str:
    """Short text of a segment: its text content, whitespace folded, secrets masked.

    With `other` (another content of the same segment) and a first difference past
    the first two thirds of `limit`, the preview keeps the head and jumps to where the
    two differ: ``x-anthropic-bil…=claude-vscode; cch=•••••;``.
    """
    text = _WS.sub(" ", _text_of(value)).strip()
    focus = None
    if other is not None:
        other_text = _WS.sub(" ", _text_of(other)).strip()
        first = next((i for i, (a, b) in enumerate(zip(text, other_text, strict=False))
                      if a != b),
                     min(len(text), len(other_text)))
        focus = len(_redact(text[:first])) if redact and active().defaults else first
    if redact and active().defaults:  # --no-default-redaction turns this off too
        text = _redact(text)
    # The run's secret masking before the cut (same length: `focus` holds), so a cut
    # never shows part of a key, with or without --show-text.
    return _window(active().text(text), focus, limit)


def _redact(text: str) -> str:
    return opaque_masked(text)


def _window(text: str, focus: int | None, limit: int) -> str:
    if len(text) <= limit:
        return text
    if focus is None or focus < limit * 2 // 3:
        return text[: limit - 1] + "…"
    head = text[: limit // 3]
    room = limit - len(head) - 1
    start = max(len(head), focus - room * 2 // 3)
    body = text[start:start + room]
    if start + room < len(text):
        body = body[:-1] + "…"
    return head + "…" + body


def _text_of(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for key in ("text", "content", "name"):
            inner = value.get(key)
            if isinstance(inner, str):
                return inner
            if isinstance(inner, list):
                return " ".join(_text_of(v) for v in inner)
        fn = value.get("function")
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            return fn["name"]
        return exact_json(value)
    if isinstance(value, list):
        return " ".join(_text_of(v) for v in value)
    return exact_json(value)


Positions = Callable[[Request], Mapping[str, tuple[int, int]] | None]


def census(
    requests: Iterable[Request],
    pairs: Iterable[tuple[str, str]],
    *,
    positions: Positions | None = None,
    group: dict[str, Any] | None = None,
    show_text: bool = False,
    without_body: int = 0,
) -> SegmentsReport:
    """Count every segment path over `requests` and its changes over `pairs`.

    Args:
        requests: the requests in scope (those without a body are ignored).
        pairs: (earlier id, later id) consecutive same-session pairs.
        positions: optional; for a request, segment path -> (token start, total tokens).
        group: the --by key this census is for.
        show_text: longer, unredacted previews.
        without_body: requests in scope that had no body (reported in totals).

    Returns:
        A SegmentsReport with segments ranked by invalidated tokens (or change rate).
    """
    tally = Census(pairs, positions=positions)
    for request in requests:
        tally.add(request)
    return tally.report(group=group, show_text=show_text, without_body=without_body)


class PairIndex:
    """The consecutive pairs of a census, by request: which pairs each request is in and
    how many of them are still to be counted. Shared by the censuses of several --by
    groups: a pair counts in a group only when both its requests are in that group."""

    def __init__(self, pairs: Iterable[tuple[str, str]]) -> None:
        # id -> the pairs it is in (a pair given twice is counted twice, as given)
        self.pairs_of: dict[str, list[tuple[str, str]]] = defaultdict(list)
        self.open: dict[str, int] = defaultdict(int)  # id -> its pairs not settled yet
        self.holder: dict[str, Census] = {}  # id -> the census keeping its hashes
        for a, b in pairs:
            for rid in {a, b}:
                self.pairs_of[rid].append((a, b))
            self.open[a] += 1
            self.open[b] += 1

    def settle(self, a_id: str, b_id: str) -> None:
        """One pair counted (or never countable): free what no other pair needs."""
        for rid in (a_id, b_id):
            self.open[rid] -= 1
            if self.open[rid] <= 0 and rid in self.holder:
                self.holder.pop(rid).forget(rid)


class Census:
    """`census` one request at a time. A request's segment hashes are kept only until
    every pair it is in is settled, so memory follows the open sessions, not the log
    (requests come in time order; a pair is counted when its second request arrives)."""

    def __init__(self, pairs: Iterable[tuple[str, str]] | PairIndex, *,
                 positions: Positions | None = None) -> None:
        self.positions = positions
        self.index = pairs if isinstance(pairs, PairIndex) else PairIndex(pairs)
        self.hashes: dict[str, dict[str, _Hashes]] = {}
        self.family_len: dict[str, dict[str, int]] = {}
        self.kinds: dict[str, str] = {}
        self.families: dict[str, tuple[str, int | None]] = {}
        self.holders: dict[str, int] = defaultdict(int)
        self.contents: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.sample: dict[tuple[str, str], Any] = {}
        self.starts: dict[str, list[int]] = defaultdict(list)
        self.afters: dict[str, list[int]] = defaultdict(list)
        self.n_requests = 0
        self.pair_count: dict[str, int] = defaultdict(int)
        self.changes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        # the pairs' segments whose contents differ exactly, in the order met: (path, the
        # earlier side's hashes, the later's), classified into `changes` by `report` (a
        # stored part's derived hashes are made there, for those parts alone)
        self._changed: list[tuple[str, _Hashes | None, _Hashes | None]] = []
        self.n_pairs = 0
        # `add_stored`'s paths ``name[i]`` and samples, made once: an agent log's calls
        # resend their history, so each call meets every path and part its last one did
        self._paths: dict[str, list[str]] = {}
        self._stored: dict[str, StoredPart] = {}

    def add(self, request: Request) -> None:
        """Census one request (ids are unique); count the pairs it completes."""
        self._add(request, [(seg.path, seg.kind, seg.family, seg.index,
                             segment_hashes(seg.value), seg.value)
                            for seg in raw_segments(request)])

    def add_stored(self, request: Request, layout: Layout | None, parts: PartCensus) -> None:
        """`add` for a request as the store keeps it (`Store.iter_layouts`): its body the
        skeleton, `layout` the part hashes of its lists, `parts` holding each of those
        parts' hashes (`PartCensus.read`). The same census as `add` of the whole request:
        a part's segment hashes are those of the element its text is (`store.parts`)."""
        if layout is None:
            self.add(request)
            return
        skeleton = raw_segments(request)
        entries: list[_Entry] = []
        known, stored = parts.known, self._stored
        for name, kind in _families(request.endpoint):
            if name in layout:
                digests = layout[name]
                paths = self._paths.setdefault(name, [])
                for i in range(len(paths), len(digests)):
                    paths.append(f"{name}[{i}]")
                for i, digest in enumerate(digests):
                    hashes, system = known[digest]
                    sample = stored.get(digest)
                    if sample is None:
                        sample = stored[digest] = StoredPart(digest)
                    entries.append((paths[i], "system" if kind == "message" and system
                                    else kind, name, i, hashes, sample))
            else:
                entries.extend((seg.path, seg.kind, seg.family, seg.index,
                                segment_hashes(seg.value), seg.value)
                               for seg in skeleton if seg.family == name)
        self._add(request, entries)

    def _add(self, request: Request, entries: list[_Entry]) -> None:
        """Count each entry (path, kind, family, index, hashes, sample value) of one
        request."""
        if not entries:
            return
        self.n_requests += 1
        per: dict[str, _Hashes] = {}
        lens: dict[str, int] = defaultdict(int)
        kinds, families, holders = self.kinds, self.families, self.holders
        contents, samples = self.contents, self.sample
        for path, kind, family, at, h, value in entries:
            per[path] = h
            if path not in kinds:
                kinds[path] = kind
            if path not in families:
                families[path] = (family, at)
            lens[family] += 1
            holders[path] += 1
            exact = h.exact
            contents[path][exact] += 1
            key = (path, exact)
            if key not in samples:
                samples[key] = value
        if self.positions is not None:
            pos = self.positions(request) or {}
            for path, (start, total) in pos.items():
                if path in per:
                    self.starts[path].append(start)
                    self.afters[path].append(total - start)
        rid = request.id
        index = self.index
        if not index.open.get(rid):
            return  # in no pair: its hashes are not needed
        self.hashes[rid] = per
        self.family_len[rid] = dict(lens)
        index.holder[rid] = self
        for a_id, b_id in index.pairs_of.pop(rid, ()):
            other = b_id if a_id == rid else a_id
            if other not in index.holder:
                continue  # not arrived yet: counted when it does
            if other in self.hashes:
                self._count(a_id, b_id)
            index.settle(a_id, b_id)  # counted, or in another group: never counted

    def forget(self, rid: str) -> None:
        self.hashes.pop(rid, None)
        self.family_len.pop(rid, None)

    def _count(self, a_id: str, b_id: str) -> None:
        a, b = self.hashes[a_id], self.hashes[b_id]
        self.n_pairs += 1
        families, pair_count = self.families, self.pair_count
        for path in a.keys() | b.keys():
            ha, hb = a.get(path), b.get(path)
            if ha is None or hb is None:  # (the hashes held are never None)
                fam, idx = families[path]
                if fam in ("messages", "input") and idx is not None and (
                        (path not in a and idx >= self.family_len[a_id].get(fam, 0))
                        or (path not in b and idx >= self.family_len[b_id].get(fam, 0))):
                    # Appended history is growth; history cut from the end (compaction,
                    # rewind) is not a change of each dropped message either: the first
                    # changed message before the cut is where the prefix broke.
                    continue
            pair_count[path] += 1
            # (one part's hashes are one object: unchanged; equal exact hashes: unchanged)
            if ha is not hb and (ha is None or hb is None or ha.exact != hb.exact):
                self._changed.append((path, ha, hb))

    def report(self, *, group: dict[str, Any] | None = None, show_text: bool = False,
               without_body: int = 0, store: Store | None = None) -> SegmentsReport:
        """The census so far; `store`: where the samples and hashes `add_stored` left as
        `StoredPart`s and `PartHashes` are read from."""
        self._classify(store)
        self._read_samples(store)
        stats = []
        for path, held in self.holders.items():
            pairs_here = self.pair_count.get(path, 0)
            changes = self.changes
            changed = sum(changes[path].values()) if path in changes else 0
            rate = changed / pairs_here if pairs_here else None
            starts, afters = self.starts, self.afters
            start_med = statistics.median(starts[path]) if starts.get(path) else None
            after_med = statistics.median(afters[path]) if afters.get(path) else None
            ranked = self._previewed(path)
            common = ranked[0]
            other = self.sample[(path, ranked[1])] if len(ranked) > 1 else None
            stats.append(SegmentStats(
                segment=path, kind=self.kinds[path], requests=held,
                distinct=len(self.contents[path]), pairs=pairs_here, change_rate=rate,
                unique_per_request=held > 1 and len(self.contents[path]) == held,
                change_kinds=dict(changes[path]) if path in changes else {},
                token_start_median=start_med, tokens_after_median=after_med,
                invalidated_tokens=(rate * after_med) if rate is not None
                and after_med is not None else None,
                preview=preview(self.sample[(path, common)], 200 if show_text else PREVIEW_CHARS,
                                redact=not show_text, other=other),
            ))
        stats.sort(key=_rank)
        return SegmentsReport(
            group=group or {}, segments=tuple(stats),
            totals=SegmentsTotals(requests=self.n_requests, pairs=self.n_pairs,
                                  segments=len(stats), without_body=without_body,
                                  hash_version=HASH_VERSION),
        )

    def _classify(self, store: Store | None) -> None:
        """Count the change kind of each pair's differing segment met so far, in the order
        met (`change_kinds` keeps that order), the stored parts among them hashed whole
        first: the same kinds as `change_kind` of their `segment_hashes` at `_count`."""
        if not self._changed:
            return
        digests = list(dict.fromkeys(h.digest for _, *sides in self._changed for h in sides
                                     if isinstance(h, PartHashes)))
        whole: dict[str, SegmentHashes] = {}
        if digests:
            if store is None:
                raise ValueError("a census of stored parts reports with its store")
            for start in range(0, len(digests), _CLASSIFY_BATCH):  # texts: a batch at once
                texts = store.parts_text(digests[start:start + _CLASSIFY_BATCH])
                whole.update((d, segment_hashes(orjson.loads(t))) for d, t in texts.items())
        for path, ha, hb in self._changed:
            kind = change_kind(whole[ha.digest] if isinstance(ha, PartHashes) else ha,
                               whole[hb.digest] if isinstance(hb, PartHashes) else hb)
            if kind:
                self.changes[path][kind] += 1
        self._changed = []

    def _previewed(self, path: str) -> list[str]:
        """The exact hashes of `path`'s most common content and, if any, the next one (the
        report previews them)."""
        ranked = sorted(self.contents[path].items(), key=lambda kv: -kv[1])
        return [exact for exact, _ in ranked[:2]]

    def _read_samples(self, store: Store | None) -> None:
        """Replace the samples a report previews that are `StoredPart`s by their values."""
        wanted: dict[tuple[str, str], str] = {}
        for path in self.contents:
            for exact in self._previewed(path):
                value = self.sample[(path, exact)]
                if isinstance(value, StoredPart):
                    wanted[(path, exact)] = value.digest
        if not wanted:
            return
        if store is None:
            raise ValueError("a census of stored parts reports with its store")
        texts = store.parts_text(list(dict.fromkeys(wanted.values())))
        for key, digest in wanted.items():
            self.sample[key] = orjson.loads(texts[digest])


def _rank(s: SegmentStats) -> tuple[float, float, float, str]:
    inval = s.invalidated_tokens if s.invalidated_tokens is not None else -1.0
    rate = s.change_rate if s.change_rate is not None else -1.0
    start = s.token_start_median if s.token_start_median is not None else 0.0
    return (-inval, -rate, start, s.segment)


# -- over a store ------------------------------------------------------------------

def token_positions(options: RenderOptions) -> Positions:
    """A `Positions` callback rendering each request with `options`."""

    def positions(request: Request) -> dict[str, tuple[int, int]] | None:
        try:
            tok = tokens(request, options)
        except RenderError:
            return None
        total = len(tok)
        out: dict[str, tuple[int, int]] = {}
        for segment, (start, end) in zip(tok.prompt.segments, tok.segment_token_spans(),
                                         strict=True):
            if segment.path == "template" or start == end:
                continue
            element = segment.path.split(".", 1)[0]
            if element not in out or start < out[element][0]:
                out[element] = (start, total)
        return out

    return positions


def segments_store(store: Store, by: tuple[str, ...] = (), *,
                   options: RenderOptions | None = None, with_tokens: bool = True,
                   show_text: bool = False,
                   progress: Callable[[int, int], None] | None = None,
                   workers: int | None = 1) -> list[SegmentsReport]:
    """The census of a store's requests, one report per --by group.

    Args:
        store: an open `prefixscope.store.Store`.
        by: grouping dimensions (endpoint, model, client, user, channel, day, source, session).
        options: `RenderOptions` for token positions (None: defaults).
        with_tokens: render requests to fill token positions; False: change rates only.
        show_text: longer, unredacted previews.
        progress: called with (requests censused so far, requests with a body).
        workers: processes rendering whole sessions for token positions (None: the
            machine's cores once `AUTO_MIN_REQUESTS` requests have a body); the reports
            do not depend on it.

    Raises:
        ValueError: an unknown dimension.
        TokenizerError: the tokenizer cannot be loaded offline.
    """
    check_dimensions(by)
    session_of = store.session_of()
    index = PairIndex((a, b) for a, b, _, _ in store.session_pairs(once=True))
    positions = None
    total = store.body_count_once()
    whole = False  # rendering here: the census reads whole bodies, not part by part
    if with_tokens:
        positions, whole = token_positions(options or RenderOptions()), True
        n = effective_workers(workers, total, auto_minimum=AUTO_MIN_REQUESTS)
        if n > 1 and store.read_only:  # a writer holds the file: workers cannot open it
            positions = _positions_in_workers(store, options or RenderOptions(), n, progress)
            whole, progress = False, None  # the census below is quick next to the rendering
    if progress is not None:
        positions = _counting(positions, lambda seen: progress(seen, total))
    groups: dict[tuple[Any, ...], Census] = {}
    without: dict[tuple[Any, ...], int] = defaultdict(int)
    # A call two sources logged (duplicate_of) is censused once, through the copy kept;
    # requests stream from the store a batch at a time (nothing holds the log's bodies),
    # as stored unless rendered here: each distinct part is read and hashed once.
    parts = PartCensus(store)
    for request, layout in _censused(store, parts, whole):
        key = group_key(by, request, session_of.get(request.id))
        if request.body is None:
            without[key] += 1
        else:
            if key not in groups:
                groups[key] = Census(index, positions=positions)
            groups[key].add_stored(request, layout, parts)
    reports = []
    for key in sorted(groups.keys() | without.keys(), key=lambda k: tuple(map(str, k))):
        group = dict(zip(by, key, strict=True))
        if key in groups:
            reports.append(groups[key].report(group=group, show_text=show_text, store=store,
                                              without_body=without.get(key, 0)))
        else:
            reports.append(census([], [], group=group, show_text=show_text,
                                  without_body=without.get(key, 0)))
    return reports


_CENSUS_BATCH = 256  # requests whose new parts are read in one query
_CLASSIFY_BATCH = 4096  # parts a census's changes read back in one query (`Census._classify`)


def _censused(store: Store, parts: PartCensus, whole: bool
              ) -> Iterator[tuple[Request, Layout | None]]:
    """The store's requests in time order for the census: whole (layout None) when `whole`,
    else as stored, each batch's parts made known to `parts` first."""
    if whole:
        yield from ((request, None) for request in store.iter_requests())
        return
    stored = store.iter_layouts(batch=_CENSUS_BATCH)
    while batch := list(islice(stored, _CENSUS_BATCH)):
        parts.read([layout for _, layout in batch])
        yield from batch


def _counting(positions: Positions | None, progress: Callable[[int], None]) -> Positions:
    """`positions` (or nothing) that also reports how many requests it has seen."""
    seen = 0

    def counted(request: Request) -> Mapping[str, tuple[int, int]] | None:
        nonlocal seen
        result = positions(request) if positions is not None else None
        seen += 1
        progress(seen)
        return result

    return counted


AUTO_MIN_REQUESTS = 500  # requests below which the default --workers runs in this process
_RUNS_PER_WORKER = 4  # sessions differ in length: smaller runs even out the workers


@dataclass(frozen=True, slots=True)
class _PositionsTask:
    """A run of whole sessions for one worker: the store's file and its requests' ids."""

    file: str
    ids: tuple[str, ...]
    options: RenderOptions


def _positions_task(task: _PositionsTask) -> list[tuple[str, Mapping[str, tuple[int, int]]
                                                  | None]]:
    store = reader(task.file)
    positions = token_positions(task.options)
    return [(request.id, positions(request)) for request in store.iter_ids(task.ids)]


def _positions_in_workers(store: Store, options: RenderOptions, workers: int,
                          progress: Callable[[int, int], None] | None) -> Positions:
    """Every censused request's token positions, rendered by `workers` processes over
    runs of whole sessions (a session's turns share their history: one worker's piece
    cache tokenizes it once); a `Positions` that looks them up."""
    sessions: dict[str, list[str]] = {}
    for record in store.usage_records():  # time order, as the census reads them
        if record.has_body and record.duplicate_of is None:
            sessions.setdefault(record.session or record.id, []).append(record.id)
    units = list(sessions.values())
    tasks = [_PositionsTask(store.file, tuple(rid for ids in units[cut.start:cut.stop]
                                              for rid in ids), options)
             for cut in runs([len(ids) for ids in units], workers * _RUNS_PER_WORKER)]
    total = sum(len(t.ids) for t in tasks)
    step = None if progress is None else (lambda done: progress(done, total))
    with worker_pool(workers) as pool:
        parts = pool.map(_positions_task, tasks, [len(t.ids) for t in tasks], step)
    found = {rid: pos for part in parts for rid, pos in part}
    return lambda request: found.get(request.id)
