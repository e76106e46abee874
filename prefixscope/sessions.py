"""Thread requests into sessions: explicit ids first, the shared history otherwise.

A prompt cache can only help a request whose prefix was sent before, and "before"
is almost always the previous turn of the same conversation. So every analysis
(diff of consecutive turns, cold vs break vs eviction) needs each request's session
and its predecessor. Requests are visited in the order they happened (`Store.threading_rows`:
time, then file, line and position inside the line). Rules, in order:

1. **Explicit session id** (`Request.session_key`: Langfuse sessionId/traceId,
   Claude Code sessionId, OTel gen_ai.conversation.id, a trajectory file, ...):
   the session is that id. Within it, a request's predecessor is, of the session's
   last `RECENT` requests, the one sharing the longest history prefix with it (the
   latest on ties): ``extends`` when that is its whole history, else the session's
   latest request when it has the same system + tools fingerprint and a longer history
   (``compaction``; no marker needed: the id says it is the same conversation), else,
   when it shares no history with any of them and its history holds a compaction marker
   (`keys.compaction_marker`: a summary that opens the history anew, as long as the
   history it replaced or not), a ``compaction`` of the session's latest request with the
   same system + tools (else its latest), else that closest request (its history was
   rewritten) or, when none shares any history, the session's latest request
   (``explicit``). The turns after a compaction keep its summary at their head: they
   share it, so they extend (or rewrite) and are never read as compactions again. Side
   requests with other histories are passed over.
2. **Explicit parent** (`parent_key`, e.g. Bailian ``parent_chat_id``): the request
   joins its parent's session with the parent as predecessor.
3. **Shared history** (no id): within the same (source, user, client, model) and no more
   than `gap_s` apart (past the earlier request's retention, below), the predecessor is
   the earlier request sharing the longest history prefix with it -- at least the first
   non-system message, so two conversations that share only a system prompt and tools are
   never glued. Candidates: every earlier request whose whole history is a prefix of this
   one's (looked up through `prefix_chain`, so ``cache_control`` markers do not matter),
   and the last `RECENT` requests that start with the same first message; the longest
   shared prefix wins, the latest on ties. ``extends`` when it is the predecessor's whole history,
   else ``shared-prefix`` (a history rewritten in the middle, a turn retried or edited).
   Side requests with other first messages (title generation, quota checks) start
   sessions of their own without breaking the main one. Block-hash traces have no
   message boundary (their first block is often a system prompt shared by every user),
   so they thread by ``extends`` only.
4. **Compaction** (no id): a request sharing no history with an earlier one whose
   history holds a known compaction marker (`keys.compaction_marker`: Claude Code's
   continuation summary, Codex's compaction item or summary prefix, OpenHands'
   condensation summary, SWE-agent's elided outputs) continues the open session (within
   the gap) whose latest request has the same system + tools fingerprint and a longer
   history, when exactly one session is such; it is marked ``compaction`` (the next turn
   is a cold start for the cache). When several are, the log does not say which one
   compacted, and a wrong pair (two conversations joined) is worse than a missing one:
   the request starts a session of its own marked as the continuation of an unknown
   session (``continuation``: no predecessor, ``compaction`` true); so does a marked
   request with no such session open (its predecessor is not in the log, or beyond the
   gap). Without a marker it starts a new session.
5. **Growing prompt** (no bodies, e.g. new-api): within (user, client, model), of the
   open sessions whose last prompt is not larger than this one, within the gap, the one
   with the largest last prompt -- unless the request read from the cache, its read does
   not repeat that run's own read (a pinned prefix), and it reads back the last prompt of
   one or more of those runs (ending at most `READ_REACH` tokens short of it): then, of
   those, the run whose last prompt it ends closest to (two open runs of one user and
   model are told apart by it).
6. Otherwise the request starts a session of its own.

Without an id, "within the gap" is measured past the retention of the cache entry the
earlier request left, as its usage shows it (`_retention`): a 1-hour write
(`cache_write_1h_tokens`) keeps its entry an hour, so a pause of up to `gap_s` after that
hour is still one session (a gap no longer than the retention could never tell an expiry
from a new conversation: every expiry of a 1-hour entry would open a session of its own);
5 minutes after 5-minute writes (a log that splits writes by TTL with none of the long
ones), the retention of the entry it read when it wrote nothing, and none when the log
does not split its writes. With a session id (rule 1) no gap applies.

Threaded session ids are ``t-`` + the first request's id (stable across re-ingest).
"""

from __future__ import annotations

from array import array
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

RECENT = 16  # requests of a session (or of a first message) considered as a predecessor
READ_REACH = 256  # a read this close below a prompt's end is that prompt read back (rule 5)
# How long the entry a write leaves lives, by the usage's split of writes by TTL
# (`model.Usage.cache_write_1h_tokens`: Anthropic's 1-hour writes; the rest 5-minute ones)
ONE_HOUR_WRITE_S = 3600.0
FIVE_MINUTE_WRITE_S = 300.0
LINK_KINDS = ("start", "explicit", "parent", "extends", "shared-prefix", "compaction",
              "continuation", "growing-prompt")


@dataclass(frozen=True, slots=True)
class SessionLink:
    """Where one request sits in its session."""

    request_id: str  # the request
    session: str  # session id (explicit key, or "t-<first request id>")
    turn: int  # 0-based position in the session, in time order
    prev_id: str | None  # the request it continues (None for a session's first)
    link: str  # how prev_id was found: one of LINK_KINDS
    # history replaced by a shorter summary; with prev_id None (link "continuation") the
    # compacted session is unknown
    compaction: bool


@dataclass(slots=True)
class _Row:
    seq: int  # place in threading order (later = larger)
    id: str
    ts: datetime | None
    session_key: str | None
    parent_key: str | None
    native_id: str | None
    source_format: str
    group: tuple[Any, ...]
    chain: Sequence[int] | None  # `_compact`: 8 bytes a history message, held to the end
    fingerprint: str | None
    count: int | None
    prompt: int | None
    cached: int | None = None  # the tokens it read from the cache (usage), None: unknown
    marker: str | None = None  # compaction marker its history holds (keys.compaction_marker)
    blocks: bool = False  # chain made of block hashes (a block trace), not messages
    written: int | None = None  # the tokens it wrote to the cache (usage), None: unknown
    written_1h: int | None = None  # of those, written with the 1-hour TTL; None: not split
    retention: float = 0.0  # seconds the entry it left lives (`_retention`), 0: unknown


def _compact(chain: Sequence[int] | None) -> Sequence[int] | None:
    """A history's chain values (unsigned 64-bit: the store's ``UBIGINT[]``) as an
    ``array('Q')``: threading keeps every request's row to the end (`_State.full_history`),
    and a list of Python ints costs ~44 bytes a value where the array costs 8 (a 1 GiB folder
    of Codex rollouts: 4.07 M values, ~180 -> ~33 MB). Indexing it gives back the same ints,
    so every comparison and key below is unchanged; an empty chain stays empty (falsy)."""
    return None if chain is None else array("Q", chain)


def _within(a: datetime | None, b: datetime | None, gap_s: float) -> bool:
    if a is None or b is None:
        return True
    return abs((b - a).total_seconds()) <= gap_s


def _open(earlier: _Row, row: _Row, gap_s: float) -> bool:
    """Whether row is within the gap of an earlier request, measured past the retention of
    the entry that request left (`_retention`)."""
    return _within(earlier.ts, row.ts, gap_s + earlier.retention)


def _retention(row: _Row, prev: _Row | None) -> float:
    """Seconds the cache entry row leaves lives, as its usage shows: an hour when it wrote
    1-hour entries, 5 minutes when it wrote and its usage splits writes by TTL with none
    of the long ones, its predecessor's when it wrote nothing (a read refreshes the entry
    it read, which keeps its TTL); 0 when the log does not say."""
    if row.written_1h:
        return ONE_HOUR_WRITE_S
    if row.written and row.written_1h is not None:
        return FIVE_MINUTE_WRITE_S
    if not row.written and prev is not None:
        return prev.retention
    return 0.0


class _State:
    """What threading remembers of the requests already placed."""

    def __init__(self) -> None:
        self.session_of: dict[str, str] = {}
        self.by_native: dict[tuple[str, str], _Row] = {}
        # (scope, chain value of a request's full history) -> latest such request
        self.full_history: dict[tuple[Any, int], _Row] = {}
        # scope -> session -> latest request of that session
        self.tails: dict[Any, dict[str, _Row]] = defaultdict(dict)
        # explicit session, or (scope, first history message) -> its latest requests,
        # most recent first
        self.recent: dict[Any, deque[_Row]] = {}

    def remember(self, row: _Row, scope: Any, session: str) -> None:
        self.session_of[row.id] = session
        if row.native_id:
            self.by_native[(row.source_format, row.native_id)] = row
        if row.chain:
            self.full_history[(scope, row.chain[-1])] = row
        self.tails[scope][session] = row
        if row.session_key:
            self.recent.setdefault(scope, deque(maxlen=RECENT)).appendleft(row)
        elif row.chain and not row.blocks:
            self.recent.setdefault((scope, row.chain[0]), deque(maxlen=RECENT)).appendleft(row)


def thread_sessions(rows: Iterable[Mapping[str, Any]], *, gap_s: float = 3600.0
                    ) -> list[SessionLink]:
    """Assign every request of `rows` (from `Store.threading_rows`, time-ordered) to a
    session.

    Args:
        rows: each request's columns by name: id, timestamp, source_format,
            session_key, parent_key, native_id, user_id, client, model, prefix_chain,
            fingerprint, message_count, prompt_tokens, and optionally cached_tokens,
            cache_write_tokens, cache_write_1h_tokens, compaction_marker and
            chain_of_blocks -- in the order the requests happened.
        gap_s: the longest pause between two turns of one threaded session.

    Returns:
        One SessionLink per request, turns numbered per session in that order.
    """
    threaded = [
        _Row(seq=n, id=r["id"], ts=r["timestamp"], session_key=r["session_key"],
             parent_key=r["parent_key"], native_id=r["native_id"],
             source_format=r["source_format"],
             group=(r["source_format"], r["user_id"], r["client"], r["model"]),
             chain=_compact(r["prefix_chain"]), fingerprint=r["fingerprint"],
             count=r["message_count"],
             prompt=r["prompt_tokens"], cached=r.get("cached_tokens"),
             written=r.get("cache_write_tokens"), written_1h=r.get("cache_write_1h_tokens"),
             marker=r.get("compaction_marker"), blocks=bool(r.get("chain_of_blocks")))
        for n, r in enumerate(rows)
    ]
    state = _State()
    prev_of: dict[str, tuple[str | None, str, bool]] = {}
    for row in threaded:
        scope: Any = ("s", row.session_key) if row.session_key else ("g", row.group)
        session, prev, link, compaction = _place(row, scope, state, gap_s)
        row.retention = _retention(row, prev)
        prev_of[row.id] = (prev.id if prev else None, link, compaction)
        state.remember(row, scope, session)

    turn_counter: dict[str, int] = defaultdict(int)
    links = []
    for row in threaded:
        session = state.session_of[row.id]
        prev_id, link, compaction = prev_of[row.id]
        links.append(SessionLink(row.id, session, turn_counter[session], prev_id, link,
                                 compaction))
        turn_counter[session] += 1
    return links


def _extended(row: _Row, scope: Any, full_history: dict[tuple[Any, int], _Row],
              gap_s: float) -> _Row | None:
    """The latest earlier request whose whole history is the longest prefix of row's."""
    if not row.chain:
        return None
    for k in range(len(row.chain), 0, -1):
        cand = full_history.get((scope, row.chain[k - 1]))
        if cand is not None and cand.count == k and _open(cand, row, gap_s):
            return cand
    return None


def _open_tails(row: _Row, scope: Any, tails: dict[Any, dict[str, _Row]],
                gap_s: float) -> list[_Row]:
    """The latest request of each session in scope still within the gap past its retention
    (stale ones dropped)."""
    sessions = tails[scope]
    if gap_s != float("inf") and row.ts is not None:
        stale = [s for s, t in sessions.items() if not _open(t, row, gap_s)]
        for s in stale:
            del sessions[s]
    return list(sessions.values())


def _compaction_candidates(row: _Row, scope: Any, tails: dict[Any, dict[str, _Row]],
                           gap_s: float) -> list[_Row]:
    """The latest request of every open session row could be the compaction of: the same
    system + tools fingerprint and a longer history, within the gap."""
    if row.fingerprint is None or row.count is None:
        return []
    return [tail for tail in _open_tails(row, scope, tails, gap_s)
            if tail.fingerprint == row.fingerprint and tail.count is not None
            and row.count < tail.count and _open(tail, row, gap_s)]


def _compacted_from(row: _Row, scope: Any, tails: dict[Any, dict[str, _Row]],
                    gap_s: float) -> _Row | None:
    best = None
    for tail in _compaction_candidates(row, scope, tails, gap_s):
        if best is None or _later(tail, best):
            best = tail
    return best


def _later(a: _Row, b: _Row) -> bool:
    """True when a is more recent than b (unknown times count as oldest)."""
    if a.ts is None:
        return False
    return b.ts is None or a.ts >= b.ts


def _growing(row: _Row, scope: Any, tails: dict[Any, dict[str, _Row]],
             gap_s: float) -> _Row | None:
    if row.prompt is None:
        return None
    fits = [tail for tail in _open_tails(row, scope, tails, gap_s)
            if tail.chain is None and tail.prompt is not None and tail.prompt <= row.prompt
            and _open(tail, row, gap_s)]
    if not fits:
        return None
    largest = fits[0]  # ties: the first seen
    for tail in fits[1:]:
        if tail.prompt > largest.prompt:  # type: ignore[operator]
            largest = tail
    read = row.cached or 0
    if not read or read == largest.cached:  # nothing read, or the run's pinned prefix again
        return largest
    # A run whose last prompt the read reads back is the one it continues (two open runs of
    # one user and model); of several, the one whose prompt it ends closest to (Anthropic's
    # warm read ends 2 tokens short: 256 tokens short is a partial read, not that prompt).
    back = [tail for tail in fits if _reads_back(read, tail)]
    return min(back, key=lambda t: (t.prompt or 0) - read) if back else largest


def _reads_back(read: int, tail: _Row) -> bool:
    """Whether a read of `read` tokens is `tail`'s prompt read back: it ends at most
    `READ_REACH` tokens short of that prompt (Anthropic's lag, OpenAI's 128-token steps,
    a block)."""
    return tail.prompt is not None and 0 <= tail.prompt - read <= READ_REACH


def _common_prefix(a: Sequence[int] | None, b: Sequence[int] | None) -> int:
    """How many leading history messages a and b share. The chain values are chained
    hashes (equal at k means equal through k), so a binary search finds the split."""
    if not a or not b:
        return 0
    lo, hi = 0, min(len(a), len(b))  # a[:lo] == b[:lo]; the answer is at most hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[mid - 1] == b[mid - 1]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _closest(row: _Row, recent: Any) -> _Row | None:
    """Of a session's recent requests, the one sharing the longest history prefix with row
    (the latest on ties); None when none shares any."""
    best, best_len = None, 0
    for cand in recent:  # most recent first
        n = _common_prefix(row.chain, cand.chain)
        if n > best_len:
            best, best_len = cand, n
    return best


def _marked_predecessor(row: _Row, recent: Any, latest: _Row) -> _Row:
    """What a marked request of an explicit session compacted: the session's latest request
    with the same system + tools (a side request with other ones is passed over), else its
    latest request."""
    for cand in recent:  # most recent first
        if row.fingerprint is not None and cand.fingerprint == row.fingerprint:
            return cand
    return latest


def _sharing(row: _Row, scope: Any, state: _State, gap_s: float) -> tuple[_Row | None, int]:
    """(predecessor, shared history length) without an explicit id: the earlier request
    within the gap sharing the longest history prefix with row (at least its first
    message), the latest on ties; (None, 0) when none does."""
    if not row.chain:
        return None, 0
    best = _extended(row, scope, state.full_history, gap_s)
    best_len = (best.count or 0) if best is not None else 0
    if row.blocks:  # no message boundary in a block trace: whole prefixes only
        return best, best_len
    for cand in state.recent.get((scope, row.chain[0]), ()):  # most recent first
        if not _open(cand, row, gap_s):
            continue
        n = _common_prefix(row.chain, cand.chain)
        if n > best_len or (n == best_len and best is not None and cand.seq > best.seq):
            best, best_len = cand, n
    return best, best_len


def _place(row: _Row, scope: Any, state: _State, gap_s: float,
           ) -> tuple[str, _Row | None, str, bool]:
    """(session, predecessor, link kind, compaction) for one request."""
    if row.session_key:
        session = row.session_key
        closest = _closest(row, state.recent.get(scope, ()))
        if closest is not None and closest.count == _common_prefix(row.chain, closest.chain):
            return session, closest, "extends", False
        prev = _compacted_from(row, scope, state.tails, float("inf"))
        if prev is not None:
            return session, prev, "compaction", True
        latest = state.tails[scope].get(session)
        if closest is None and row.marker is not None and latest is not None:
            # a history that opens anew with a summary: a compaction however many messages
            # it keeps (the turns after it share that summary, so never land here)
            return session, _marked_predecessor(row, state.recent.get(scope, ()),
                                                latest), "compaction", True
        prev = closest or latest
        return session, prev, "explicit" if prev else "start", False
    if row.parent_key:
        parent = state.by_native.get((row.source_format, row.parent_key))
        if parent is not None:
            return state.session_of[parent.id], parent, "parent", False
    prev, shared = _sharing(row, scope, state, gap_s)
    if prev is not None:
        link = "extends" if shared == prev.count else "shared-prefix"
        return state.session_of[prev.id], prev, link, False
    if row.marker is not None:
        candidates = _compaction_candidates(row, scope, state.tails, gap_s)
        if len(candidates) == 1:
            return state.session_of[candidates[0].id], candidates[0], "compaction", True
        return f"t-{row.id[:16]}", None, "continuation", True
    if row.chain is None:
        prev = _growing(row, scope, state.tails, gap_s)
        if prev is not None:
            return state.session_of[prev.id], prev, "growing-prompt", False
    return f"t-{row.id[:16]}", None, "start", False
