"""The per-call view: the ledger one request at a time, a session at a time, so that a
person reading down a session spots a pattern by eye (fourteen calls reading exactly
3,072 tokens; a cold call every morning; a break at the same segment every turn).

Each line is one request of the ledger's basis (`findings.ledger`), in time order within
its session, sessions in the order of their first calls (the report's session threading):
its prompt tokens (in), cached tokens (read), cache writes where the log reports them
(write), missed tokens (in − read) and the ledger's causes of those misses. The numbers
are the ledger's own entries, not recomputed: the missed tokens of every line sum to the
report's ``ledger.missed_tokens``, and each line's causes to its missed tokens.
Requests outside the basis (their log reports no cache) have no line; they are counted.

Beside the numbers, each call carries what the log itself says of it: the session events
recorded before it (the store's ``session_events``: a compaction, a truncation, another
model, a new client version, a tool-set delta), the one of them that decided its cause in
the ledger, and the provider's own verdict on its miss where the log kept one
(``diagnostics.cache_miss_reason``, ``prompt_cache_diagnostics``) -- the evidence the
ledger read, so a person can check a call's cause against it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from prefixscope.findings.ledger import CAUSES, Ledger
from prefixscope.model import SessionEvent, UsageRecord


@dataclass(frozen=True, slots=True)
class Call:
    """One request of the basis, as the ledger read it."""

    id: str
    session: str | None
    timestamp: datetime | None  # UTC, as stored
    model: str | None
    prompt_tokens: int  # in
    cached_tokens: int  # read
    cache_write_tokens: int | None  # write (None: the log does not report it)
    causes: Mapping[str, int]  # the ledger's causes of its missed tokens (CAUSES order)
    break_kind: str | None = None  # the break's kind, when part of it is a break
    break_segment: str | None = None  # the part of the request that break blames
    gap_seconds: float | None = None  # since the session's previous request
    events: tuple[SessionEvent, ...] = ()  # what the log records before it, in log order
    recorded: str | None = None  # the one of `events` (a kind) that decided its cause
    verdict: str | None = None  # the provider's own reason for its miss, where logged
    verdict_missed_tokens: int | None = None  # the tokens the provider says it missed

    @property
    def missed_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens

    @property
    def cause(self) -> str | None:
        """The cause holding most of its missed tokens (the first in CAUSES on a tie);
        None for a call that missed nothing."""
        if not self.causes:
            return None
        return max(self.causes, key=lambda c: (self.causes[c], -CAUSES.index(c)))


@dataclass(frozen=True, slots=True)
class SessionCalls:
    """One session's calls, in time order (`session` None: requests threading left
    without a session)."""

    session: str | None
    calls: tuple[Call, ...]

    @property
    def prompt_tokens(self) -> int:
        return sum(c.prompt_tokens for c in self.calls)

    @property
    def cached_tokens(self) -> int:
        return sum(c.cached_tokens for c in self.calls)

    @property
    def missed_tokens(self) -> int:
        return sum(c.missed_tokens for c in self.calls)

    @property
    def cache_write_tokens(self) -> int | None:
        """Writes summed over the calls that report them (None: none does)."""
        logged = [c.cache_write_tokens for c in self.calls if c.cache_write_tokens is not None]
        return sum(logged) if logged else None

    @property
    def hit_rate(self) -> float | None:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None

    @property
    def by_cause(self) -> dict[str, int]:
        return _by_cause(self.calls)


@dataclass(frozen=True, slots=True)
class Calls:
    """The calls shown, a session at a time, and what they are out of."""

    basis: str  # the ledger's basis: "observed" (the log's usage), "predicted", "none"
    session: str | None  # the session filter asked for (None: every session)
    sessions: tuple[SessionCalls, ...]
    outside_requests: int  # requests of the log not in the basis (no line of their own)

    @property
    def requests(self) -> int:
        return sum(len(s.calls) for s in self.sessions)

    @property
    def prompt_tokens(self) -> int:
        return sum(s.prompt_tokens for s in self.sessions)

    @property
    def cached_tokens(self) -> int:
        return sum(s.cached_tokens for s in self.sessions)

    @property
    def missed_tokens(self) -> int:
        return sum(s.missed_tokens for s in self.sessions)

    @property
    def by_cause(self) -> dict[str, int]:
        return _by_cause([c for s in self.sessions for c in s.calls])


def _by_cause(calls: Sequence[Call]) -> dict[str, int]:
    """Every cause (zeros included, CAUSES order) -> its tokens over `calls`."""
    out = dict.fromkeys(CAUSES, 0)
    for call in calls:
        for cause, n in call.causes.items():
            out[cause] += n
    return out


class NoSuchSession(LookupError):
    """No session of the basis matches the filter (one line, for a person)."""


def per_call(ledger: Ledger, records: Sequence[UsageRecord],
             session: str | None = None,
             events: Mapping[str, Sequence[SessionEvent]] | None = None,
             verdicts: Mapping[str, tuple[str, int | None]] | None = None) -> Calls:
    """The ledger's entries as calls grouped by session (module docstring).

    `records`: the log's requests (time, model and cache writes are read from them);
    `session`: only the session of this id, else every session whose id starts with it;
    `events`: request id -> the session events recorded before it; `verdicts`: request id
    -> the provider's (reason, missed tokens) -- both as the report's evidence holds them.

    Raises:
        NoSuchSession: `session` matches no session of the basis.
    """
    by_id = {r.id: r for r in records}
    events, verdicts = events or {}, verdicts or {}
    grouped: dict[str | None, list[Call]] = {}
    for e in ledger.entries:
        r = by_id.get(e.id)
        said = verdicts.get(e.id)
        call = Call(e.id, e.session, r.timestamp if r else None, r.model if r else None,
                    e.prompt_tokens, e.cached_tokens, r.cache_write_tokens if r else None,
                    {c: e.causes[c] for c in CAUSES if e.causes.get(c)},
                    e.break_kind, e.break_segment, e.gap_seconds,
                    tuple(events.get(e.id, ())), e.recorded,
                    said[0] if said else None, said[1] if said else None)
        grouped.setdefault(e.session, []).append(call)
    names: list[str | None] = list(grouped)
    if session is not None:
        wanted = session
        names = [s for s in names if s == wanted] or [
            s for s in names if s is not None and s.startswith(wanted)]
        if not names:
            known = sum(s is not None for s in grouped)
            raise NoSuchSession(f"no session {session!r} (nor one starting with it) among the "
                                f"{known:,} sessions of the basis (see: prefixscope sql "
                                "\"select distinct session from sessions\")")
    return Calls(ledger.basis.source, session,
                 tuple(SessionCalls(s, tuple(grouped[s])) for s in names),
                 ledger.basis.outside_requests)
