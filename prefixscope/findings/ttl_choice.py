"""The TTL decision, priced: would 1-hour cache writes, or keep-warm pings, have paid for
the prefixes a hosted cache let expire?

Both read the ledger's ``ttl`` tokens (a prefix that expired in a pause) and each call's
prices (`analyses.prices`):

* ``ttl-1h``: every 5-minute write written with the 1-hour TTL instead. The expired
  tokens whose pause was at most an hour are then read, not re-written: it saves what they
  were charged less a cache read, and it costs the difference (Anthropic: 2x base input
  instead of 1.25x) on every *other* 5-minute write token -- a re-write it avoids is not
  written at all, so it pays no premium. Break-even: with ``W`` the log's 5-minute-written
  tokens and ``K`` the re-writes it avoids, it pays when
  ``K (w5m - read) > (W - K) (w1h - w5m)``, i.e. when the log's share ``K / W`` exceeds
  ``(w1h - w5m) / (w1h - read)`` (0.395 at Anthropic's 2x / 1.25x / 0.1x) -- the same
  threshold as ``K / (W - K)``, the re-reads per token the 1-hour TTL writes, above
  ``(w1h - w5m) / (w5m - read)`` (0.652).
* ``keep-warm``: a request every 4.5 minutes through each pause keeps the prefix alive;
  each ping costs the prefix's cache read (the tokens the predecessor left, ``X``), and
  the expired tokens are read instead of re-sent. Pinging pays for a pause when the pings
  cost less than what the expiry cost; the figure is for pinging exactly those pauses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from prefixscope.analyses.prices import MTOK, CallPrice
from prefixscope.engines.anthropic import TTL_1H, TTL_5M
from prefixscope.findings.ledger import Ledger
from prefixscope.model import UsageRecord

TTL_WHAT_IFS = ("ttl-1h", "keep-warm")
PING_EVERY = TTL_5M - 30.0  # seconds between keep-warm pings: inside the 5-minute TTL


@dataclass(frozen=True, slots=True)
class TtlWhatIf:
    """One way of keeping expired prefixes, priced over the log."""

    name: str  # one of TTL_WHAT_IFS
    requests: int  # requests whose expired prefix it would have kept
    tokens: int  # their ttl tokens, read instead of re-sent
    saved_usd: float
    cost_usd: float
    detail: str  # one line: what it costs and saves, and when it pays
    reused_share: float | None = None  # ttl-1h: the log's share of 5m writes read again
    break_even_share: float | None = None  # ttl-1h: the share at which it pays

    @property
    def net_usd(self) -> float:
        return self.saved_usd - self.cost_usd


def ttl_what_ifs(ledger: Ledger, records: Sequence[UsageRecord],
                 prices: Mapping[str, CallPrice]) -> tuple[TtlWhatIf, ...]:
    """Both what-ifs over the Anthropic calls of `ledger` (empty: no priced TTL loss)."""
    expired = [e for e in ledger.entries
               if e.causes.get("ttl") and e.engine == "anthropic" and e.id in prices]
    if not expired:
        return ()
    return (_one_hour(ledger, records, prices), _keep_warm(expired, prices))


def _one_hour(ledger: Ledger, records: Sequence[UsageRecord],
              prices: Mapping[str, CallPrice]) -> TtlWhatIf:
    in_basis = {e.id for e in ledger.entries if e.engine == "anthropic"}
    kept = [e for e in ledger.entries if e.causes.get("ttl") and e.engine == "anthropic"
            and e.id in prices and e.gap_seconds is not None and e.gap_seconds <= TTL_1H]
    avoided_of = {e.id: e.causes["ttl"] for e in kept}
    cost = written = weighted = 0.0
    avoided = 0
    for r in records:
        price = prices.get(r.id)
        if r.id not in in_basis or price is None:
            continue
        five = max(0, (r.cache_write_tokens or 0) - (r.cache_write_1h_tokens or 0))
        rates = price.rates
        premium = rates.cache_write_1h - rates.cache_write_5m
        rewrite = min(five, avoided_of.get(r.id, 0))  # read instead: no write, no premium
        avoided += rewrite
        cost += (five - rewrite) * premium / MTOK
        written += five
        if rates.cache_write_1h > rates.cache_read:
            weighted += five * premium / (rates.cache_write_1h - rates.cache_read)
    tokens = sum(avoided_of.values())
    saved = sum(e.lost_usd.get("ttl", 0.0) for e in kept)
    reused = avoided / written if written else None
    even = weighted / written if written else None
    verdict = ("pays" if saved > cost else "does not pay")
    detail = (f"1-hour writes would keep {tokens:,} expired tokens of "
              f"{_n(len(kept), 'pause')} up to an hour (saving {_usd(saved)}) and cost "
              f"{_usd(cost)} more on the other {written - avoided:,.0f} 5-minute-written "
              f"tokens: it {verdict} (net {_usd(saved - cost)})")
    if reused is not None and even is not None:
        detail += (f"; {reused:.1%} of the 5-minute writes were re-writes after 5-60 "
                   f"minutes, {even:.1%} would break even")
    return TtlWhatIf("ttl-1h", len(kept), tokens, saved, cost, detail, reused, even)


def _keep_warm(expired: Sequence, prices: Mapping[str, CallPrice]) -> TtlWhatIf:
    saved = cost = 0.0
    tokens = bridged = 0
    for e in expired:
        if e.gap_seconds is None:
            continue
        pings = max(0, math.ceil(e.gap_seconds / PING_EVERY) - 1)
        price = prices[e.id]
        ping_cost = pings * (e.expected_tokens or 0) * price.read_rate
        loss = e.lost_usd.get("ttl", 0.0)
        if ping_cost < loss:  # ping exactly the pauses where it pays
            saved += loss
            cost += ping_cost
            tokens += e.causes["ttl"]
            bridged += 1
    detail = (f"pinging every {PING_EVERY / 60:.1f} minutes through the {bridged} of "
              f"{_n(len(expired), 'pause')} where it pays would cost {_usd(cost)} in cache "
              f"reads and keep {tokens:,} expired tokens ({_usd(saved)}): net "
              f"{_usd(saved - cost)}")
    return TtlWhatIf("keep-warm", bridged, tokens, saved, cost, detail)


def _usd(value: float) -> str:
    sign = "−" if value < 0 else ""
    value = abs(value)
    return sign + (f"${value:,.4f}" if value < 0.01 and value else f"${value:,.2f}")


def _n(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")
