"""``--what-if pin-backend``: the routing loss priced, as a replay of every session on one
backend.

A gateway that spreads one session's calls over backends (OpenRouter's providers,
LiteLLM's deployments, new-api's channels or keys) costs each call after a hop what its
predecessor had cached (the ledger's ``routing``, `findings.ledger.hop`). Pinned, the
session's calls all go to one backend -- the one that served most of them (the first of
them on a tie): it moves the fewest calls, and it is the one the gateway's own affinity
would most likely have kept. Which one does not change the figure: on one backend every
call reads what its predecessor left, whichever backend that is.

The replay walks each session's calls in order on that backend. A call its log shows on
the same backend as its predecessor reads what it read (pinning changes nothing there:
its chain is the same). A call after a hop reads ``X``, what the ledger says its
predecessor left (the read lag, the unit, the minimum, and never past the predecessor's
read + write: its uncached tail was never written), when the pause before it is within
the retention the ledger read it by (`LedgerEntry.ttl_seconds`: a fixed TTL, or the top
of a retention range, as the replay keeps it); after a longer pause it reads what it read:
the prefix had expired on any backend, and the pinned call's loss is ``ttl``. So the
tokens recovered are the ``routing`` tokens of the hops the retention bridges -- all of
them on a log whose pauses are short.

Dollars at list price, each hop's call priced again: the recovered tokens lie before its
last breakpoint, so they come out of what it wrote on the new backend (at the rate its
writes were charged; then out of its uncached input, at the input price) and are read
instead. Pinning writes nothing extra: the rest of the prompt is written on either
backend, and the calls after the hop read from the pinned backend what they read from
the other one. A gateway's providers may price the same model differently
(OpenRouter's do); the figures are at the model's list price, not the provider's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from prefixscope.analyses.prices import MTOK, CallPrice
from prefixscope.findings.ledger import Ledger, LedgerEntry
from prefixscope.findings.model import WhatIfLine
from prefixscope.model import UsageRecord
from prefixscope.model.whatifs import PIN_BACKEND
from prefixscope.model.words import plural


@dataclass(frozen=True, slots=True)
class PinnedSession:
    """One hopping session, pinned."""

    session: str | None
    backend: str  # the backend its calls are pinned to: the one that served most of them
    calls: int  # its calls whose log names a backend
    served: int  # of them, the ones `backend` served


@dataclass(frozen=True, slots=True)
class PinBackend:
    """Every hopping session's calls replayed on one backend, priced over the log."""

    requests: int  # calls after a hop that read what their predecessor left, pinned
    tokens: int  # their routing tokens, read instead of written again
    saved_usd: float | None  # what those tokens were charged less their cache reads
    cost_usd: float | None  # the extra writes pinning makes (none: module docstring)
    hit_rate_before: float | None  # the ledger basis's hit rate
    hit_rate_after: float | None  # with the recovered tokens read
    expired_requests: int  # hops after a pause past the retention: ttl when pinned
    expired_tokens: int
    sessions: tuple[PinnedSession, ...]

    @property
    def net_usd(self) -> float | None:
        if self.saved_usd is None or self.cost_usd is None:
            return None
        return self.saved_usd - self.cost_usd

    @property
    def hopped(self) -> bool:
        """Some session hopped between backends (with a routing loss)."""
        return bool(self.requests or self.expired_requests)


def pin_backend(ledger: Ledger, records: Sequence[UsageRecord]) -> PinBackend:
    """The replay of `ledger`'s hopping sessions on one backend each (module docstring);
    `records` in time order, as the ledger read them."""
    hops = [e for e in ledger.entries if e.causes.get("routing") and e.hop is not None]
    kept = [e for e in hops if _bridged(e)]
    lost = [e for e in hops if not _bridged(e)]
    tokens = sum(e.causes["routing"] for e in kept)
    # (the calls priced: a model without list prices is left out of the dollars)
    by_id = {r.id: r for r in records}
    priced = [_saved(e.causes["routing"], by_id[e.id], ledger.prices[e.id])
              for e in kept if e.id in ledger.prices and e.id in by_id]
    saved = sum(priced) if priced else None
    basis = ledger.basis
    before = basis.hit_rate
    after = (basis.cached_tokens + tokens) / basis.prompt_tokens if basis.prompt_tokens \
        else None
    return PinBackend(len(kept), tokens, saved, 0.0 if saved is not None else None,
                      before, after, len(lost), sum(e.causes["routing"] for e in lost),
                      _pins({e.session for e in hops}, records))


def _saved(tokens: int, r: UsageRecord, price: CallPrice) -> float:
    """Dollars `r` saves reading `tokens` more of its prefix: they lie before its last
    breakpoint, so they come out of its cache writes (at what its writes were charged),
    then out of its uncached input."""
    read = min(r.cached_tokens or 0, r.prompt_tokens or 0)
    written = min(r.cache_write_tokens or 0, (r.prompt_tokens or 0) - read)
    from_writes = min(tokens, written)
    write_rate = price.cache_write_usd / written if written else 0.0
    return (from_writes * (write_rate - price.read_rate)
            + (tokens - from_writes) * (price.rates.input / MTOK - price.read_rate))


def _bridged(e: LedgerEntry) -> bool:
    """The pause before `e` is within the retention it was read by: pinned, the backend
    still held what its predecessor left."""
    return e.ttl_seconds is None or e.gap_seconds is None or e.gap_seconds <= e.ttl_seconds


def _pins(sessions: set[str | None], records: Sequence[UsageRecord]
          ) -> tuple[PinnedSession, ...]:
    """Each session's backend: the one that served most of its calls, the first on a tie
    (`Counter.most_common` keeps the order first seen)."""
    served: dict[str | None, Counter[str]] = {}
    for r in records:
        if r.session in sessions and r.backend is not None and r.duplicate_of is None:
            served.setdefault(r.session, Counter())[r.backend] += 1
    out = []
    for session, counts in served.items():
        backend, n = counts.most_common(1)[0]
        out.append(PinnedSession(session, backend, sum(counts.values()), n))
    return tuple(out)


def pin_line(pin: PinBackend | None) -> WhatIfLine:
    """The what-if's line in the report (`Report.what_ifs`, the JSON's ``what_if``)."""
    if pin is None or not pin.hopped:
        return WhatIfLine(PIN_BACKEND, "no session hopped between backends the log names "
                                       "(no routing loss): nothing to price")
    return WhatIfLine(PIN_BACKEND, pin_detail(pin), gain_tokens=pin.tokens,
                      hit_rate_predicted=pin.hit_rate_after, saved_usd=pin.saved_usd,
                      cost_usd=pin.cost_usd, net_usd=pin.net_usd)


def pin_detail(pin: PinBackend) -> str:
    """One line: what pinning recovers, what it saves, the hit rate before and after."""
    moved = sum(s.calls - s.served for s in pin.sessions)
    sessions = len(pin.sessions)
    whose = "its" if pin.requests == 1 else "their"
    text = (f"pinning {plural(sessions, 'session')} to the backend that served most of "
            f"{'its' if sessions == 1 else 'their'} calls ({plural(moved, 'call')} moved) lets "
            f"{plural(pin.requests, 'call')} after a hop read what {whose} predecessor left: "
            f"{pin.tokens:,} tokens read instead of written again")
    if pin.saved_usd is not None:
        text += (f", saving {_usd(pin.saved_usd)} at list prices with no extra write "
                 f"(net {_usd(pin.net_usd or 0.0)})")
    text += f"; hit rate {_pct(pin.hit_rate_before)} → {_pct(pin.hit_rate_after)}"
    if pin.expired_requests:
        text += (f"; {plural(pin.expired_requests, 'hop')} after a pause past the retention "
                 f"({pin.expired_tokens:,} tokens) would have expired on one backend too")
    return text


def _usd(value: float) -> str:
    return f"${value:,.4f}" if 0 < abs(value) < 0.01 else f"${value:,.2f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"
