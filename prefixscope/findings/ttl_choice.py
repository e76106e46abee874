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
* ``keep-warm``: a request every 4.5 minutes (59.5 after 1-hour writes: 30 seconds inside
  the TTL the log shows) through each pause keeps the prefix alive; each ping costs the
  prefix's cache read (the tokens the predecessor left, ``X``), and the expired tokens
  are read instead of re-sent. Pinging pays for a pause when the pings cost less than
  what the expiry cost; the figure is for pinging exactly those pauses.

A session whose writes already use the 1-hour TTL has no 5-minute write to change:
``ttl-1h`` says so and prices nothing.

The calls priced are those read by the rules of an engine whose writes choose a longer TTL
(`engines.EngineSpec.long_ttl`: Anthropic's); its TTLs come from its registry entry.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from prefixscope.analyses.prices import MTOK, CallPrice
from prefixscope.engines import ENGINES, EngineSpec
from prefixscope.findings.ledger import Ledger, LedgerEntry, read_ttls
from prefixscope.model import UsageRecord
from prefixscope.model.whatifs import TTL_WHAT_IFS as TTL_WHAT_IFS  # where it is defined
from prefixscope.model.words import plural, signed_usd

PING_MARGIN = 30.0  # keep-warm pings this many seconds inside the TTL


def _choosing(engine: str | None) -> EngineSpec | None:
    """`engine`'s registry entry when its writes choose a longer TTL (`long_ttl`)."""
    spec = ENGINES.get(engine or "")
    return spec if spec is not None and spec.long_ttl is not None else None


def _ttls(engine: str | None) -> tuple[float, float]:
    """(default, longer) TTL of an engine whose writes choose one (`_choosing`)."""
    spec = _choosing(engine)
    assert spec is not None and spec.long_ttl is not None and spec.ttl_seconds is not None
    return spec.ttl_seconds, spec.long_ttl.seconds


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
    in_use: bool = False  # ttl-1h: every write of the log already uses the 1-hour TTL

    @property
    def net_usd(self) -> float:
        return self.saved_usd - self.cost_usd


def ttl_what_ifs(ledger: Ledger, records: Sequence[UsageRecord],
                 prices: Mapping[str, CallPrice]) -> tuple[TtlWhatIf, ...]:
    """Both what-ifs over the calls of `ledger` read by an engine whose writes choose a
    longer TTL (empty: no priced TTL loss)."""
    expired = [e for e in ledger.entries
               if e.causes.get("ttl") and _choosing(e.engine) and e.id in prices]
    if not expired:
        return ()
    return (one_hour(ledger, records, prices),
            keep_warm(expired, prices, read_ttls(records)))


def one_hour(ledger: Ledger, records: Sequence[UsageRecord],
             prices: Mapping[str, CallPrice]) -> TtlWhatIf:
    """``ttl-1h`` over `ledger`'s calls: a ledger of some calls alone prices those (their
    writes and their expiries; `findings.policy` prices each kind of request so)."""
    choosing = [e for e in ledger.entries if _choosing(e.engine)]
    in_basis = {e.id for e in choosing}
    short, long = _ttls(choosing[0].engine) if choosing else (300.0, 3600.0)
    kept = [e for e in ledger.entries if e.causes.get("ttl") and _choosing(e.engine)
            and e.id in prices and e.gap_seconds is not None
            and e.gap_seconds <= long]
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
    if not written and not kept and any(r.cache_write_1h_tokens for r in records
                                        if r.id in in_basis):
        return TtlWhatIf("ttl-1h", 0, 0, 0.0, 0.0, "every cache write of the log already "
                         f"uses the {_adjective(long)} TTL: nothing to change", in_use=True)
    tokens = sum(avoided_of.values())
    saved = sum(e.lost_usd.get("ttl", 0.0) for e in kept)
    reused = avoided / written if written else None
    even = weighted / written if written else None
    verdict = ("pays" if saved > cost else "does not pay")
    detail = (f"{_adjective(long)} writes would keep {tokens:,} expired tokens of "
              f"{plural(len(kept), 'pause')} up to {_span(long, one='an')} (saving "
              f"{signed_usd(saved)}) and cost {signed_usd(cost)} more on the other "
              f"{written - avoided:,.0f} {_adjective(short)}-written "
              f"tokens: it {verdict} (net {signed_usd(saved - cost)})")
    if reused is not None and even is not None:
        detail += (f"; {reused:.1%} of the {_adjective(short)} writes were re-writes after "
                   f"{_range(short, long)}: the {_adjective(long)} TTL pays when more than "
                   f"{even:.1%} of them are")
    return TtlWhatIf("ttl-1h", len(kept), tokens, saved, cost, detail, reused, even)


def keep_warm(expired: Sequence[LedgerEntry], prices: Mapping[str, CallPrice],
              ttls: Mapping[str, float]) -> TtlWhatIf:
    """``keep-warm`` through the pauses of `expired` (each decided alone), pinged inside
    the TTL `ttls` shows for each (`read_ttls`), else the engine's default."""
    saved = cost = 0.0
    tokens = bridged = 0
    every: set[float] = set()
    # every pause's pings, whether or not they pay: what the detail says when none does
    all_saved = all_cost = 0.0
    all_tokens = paused = 0
    all_every: set[float] = set()
    for e in expired:
        if e.gap_seconds is None:
            continue
        # inside the TTL the log shows (else the engine's default)
        interval = ttls.get(e.id, _ttls(e.engine)[0]) - PING_MARGIN
        pings = max(0, math.ceil(e.gap_seconds / interval) - 1)
        price = prices[e.id]
        ping_cost = pings * (e.expected_tokens or 0) * price.read_rate
        loss = e.lost_usd.get("ttl", 0.0)
        all_saved += loss
        all_cost += ping_cost
        all_tokens += e.causes["ttl"]
        paused += 1
        all_every.add(interval)
        if ping_cost < loss:  # ping exactly the pauses where it pays
            saved += loss
            cost += ping_cost
            tokens += e.causes["ttl"]
            bridged += 1
            every.add(interval)
    if bridged or not paused:
        minutes = _minutes(every or {_ttls(expired[0].engine)[0] - PING_MARGIN})
        detail = (f"pinging every {minutes} minutes through the {bridged} of "
                  f"{plural(len(expired), 'pause')} where it pays would cost {signed_usd(cost)} in "
                  f"cache reads and keep {tokens:,} expired tokens ({signed_usd(saved)}): net "
                  f"{signed_usd(saved - cost)}")
    else:
        detail = (f"pinging every {_minutes(all_every)} minutes through the "
                  f"{plural(paused, 'pause')} would cost {signed_usd(all_cost)} in cache reads "
                  "to keep "
                  f"{all_tokens:,} expired tokens ({signed_usd(all_saved)}): it does not pay (net "
                  f"{signed_usd(all_saved - all_cost)})")
    return TtlWhatIf("keep-warm", bridged, tokens, saved, cost, detail)


def _minutes(intervals: set[float]) -> str:
    """The ping intervals in minutes."""
    return " or ".join(f"{s / 60:.1f}" for s in sorted(intervals))


def _span(seconds: float, one: str = "1") -> str:
    """A TTL in words: "5 minutes", "1 hour" (`one`: how to say a single unit, "an hour")."""
    value, unit = (seconds / 3600, "hour") if seconds >= 3600 else (seconds / 60, "minute")
    return (f"{one} {unit}" if value == 1 else f"{value:g} {unit}s")


def _range(short: float, long: float) -> str:
    """Pauses between two TTLs in words: "5-60 minutes", "1-24 hours"."""
    if long < 3600 or short >= 3600:
        return f"{_span(short).split()[0]}-{_span(long)}"
    return f"{short / 60:g}-{long / 60:g} minutes"


def _adjective(seconds: float) -> str:
    """A TTL as an adjective: "5-minute", "1-hour"."""
    value, unit = (seconds / 3600, "hour") if seconds >= 3600 else (seconds / 60, "minute")
    return f"{value:g}-{unit}"


def ttl_shown(entries: Sequence[LedgerEntry], records: Sequence[UsageRecord]
              ) -> set[float | None]:
    """The TTLs the log's writes show for the entries' expired prefixes (`read_ttls`; None:
    the log does not split its writes by TTL)."""
    ttls = read_ttls(records)
    return {ttls.get(e.id) for e in entries}


def retention_words(engine: str | None, shown: set[float | None]) -> str:
    """The retention an expiry was read by, in words: for an engine whose writes choose a
    TTL the one the log's writes show (`ttl_shown`), else the provider's default
    (`EngineSpec.retention_words`, else its TTL in minutes or hours)."""
    spec = ENGINES.get(engine or "")
    if _choosing(engine):
        default, long = _ttls(engine)
        if shown == {long}:
            return f"{_span(long)}: the log's writes use the {_adjective(long)} TTL"
        if shown == {default}:
            return f"{_span(default)}: the log's writes use the {_adjective(default)} TTL"
        if long in shown:
            return f"{_span(default)}, {_span(long)} after the log's {_adjective(long)} writes"
    if spec is None or (spec.retention_words is None and spec.ttl_seconds is None):
        return "its TTL"
    return spec.retention_words or _span(spec.ttl_seconds or 0)


def ttl_fix(engine: str | None, what_ifs: Sequence[TtlWhatIf],
            shown: set[float | None]) -> str:
    """The `ttl-expiry` finding's fix, as the prices on the same report decide it: the
    1-hour TTL only where it pays and the log does not use it already, keep-warm pings
    where they pay more, else keeping a session's turns within the TTL or accepting the
    expiries (docs/report.md#money). `shown`: `ttl_shown` of the finding's requests."""
    spec = _choosing(engine)
    if spec is None or spec.long_ttl is None:
        return ("Keep requests of a session within the provider's retention, or use its "
                "extended retention where offered.")
    default, long = _ttls(engine)
    one_hour = shown == {long}
    longer, mark = _adjective(long), spec.long_ttl.mark
    the_long = "the hour" if long == 3600 else _span(long)
    window = the_long if one_hour else _span(default)
    if not what_ifs:  # not priced (a model without list prices)
        if one_hour:
            return (f"The log's writes already use the {longer} TTL and these pauses ran past "
                    f"it: keep a session's turns within {the_long}, or keep the session warm "
                    f"with a cheap request before {the_long} runs out.")
        return (f"Mark the stable prefix with the {longer} TTL ({mark}) where pauses "
                f"exceed {_span(default)}, or keep the session warm with a cheap request "
                "before the TTL runs out.")
    by_name = {w.name: w for w in what_ifs}
    hour = by_name.get("ttl-1h")
    if one_hour or (hour is not None and hour.in_use):
        hour = None
    warm = by_name.get("keep-warm")
    warm_net = warm.net_usd if warm is not None and warm.requests else 0.0
    if hour is not None and hour.net_usd > 0 and hour.net_usd >= warm_net:
        return (f"Mark the stable prefix with the {longer} TTL ({mark}): on this log it "
                f"pays (net {signed_usd(hour.net_usd)}"
                + (f"; keep-warm pings: net {signed_usd(warm_net)})." if warm_net > 0 else ")."))
    if warm_net > 0:
        every = _minutes({(long if one_hour else default) - PING_MARGIN})
        fix = ("Keep the session warm through its long pauses: a cheap request (a keep-alive "
               f"ping) every {every} minutes through the pauses where it pays (net "
               f"{signed_usd(warm_net)})")
        if hour is not None:
            fix += (f"; the {longer} TTL {'pays less' if hour.net_usd > 0 else 'does not pay'}"
                    f" on this log (net {signed_usd(hour.net_usd)})")
        return fix + "."
    if hour is not None:
        verdict = (f"Neither the {longer} TTL (net {signed_usd(hour.net_usd)}) nor keep-warm pings "
                   "pay on this log")
    elif one_hour:
        verdict = (f"The log's writes already use the {longer} TTL, and keep-warm pings do "
                   "not pay on this log")
    else:
        verdict = "Keep-warm pings do not pay on this log"
    return (f"{verdict}: keep a session's turns within {window} of each other where you "
            "can, or accept these expiries.")
