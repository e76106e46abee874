"""What a call cost and what its missed cache cost, in dollars, from maintained price data.

Prices come from `genai-prices` (Pydantic's price database, shipped offline inside the
package: nothing is fetched). A model is looked up once per (model name, day) -- the data
knows when a provider changed its prices -- and its per-token rates are read from the
model's price entry; a tiered price (Claude Sonnet above 200k input tokens) applies its
tier's rate to every token of a call whose input is above the tier's start, as
genai-prices itself does. A model the data does not know has no price: its calls are
counted as unpriced, never guessed. A self-hosted engine has no list price (a gateway may
name it after a hosted model); a user's own rate (`--price-per-mtok`, dollars per million
uncached prompt tokens) prices its compute, and its cache reads cost nothing.

One call's spend is input (uncached, not written) + cache reads + cache writes (5-minute
and 1-hour apart when the log splits them; unsplit writes at the 5-minute rate) + output.
A missed token was charged as the call's uncached prompt tokens were, on average: its
writes at their write rates and the rest at the input rate (`CallPrice.missed_rate`);
had it been a cache hit it would have cost the read rate. That difference is what a
ledger cause's tokens lost (`CallPrice.lost`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from functools import lru_cache
from typing import Any

from prefixscope.model import UsageRecord

MTOK = 1_000_000


@dataclass(frozen=True, slots=True)
class Rates:
    """Dollars per million tokens of one model, as its price entry lists them."""

    model: str  # the price data's model id (the log's name may be a dated alias)
    provider: str
    input: float
    cache_read: float
    cache_write_5m: float
    cache_write_1h: float
    output: float


@dataclass(frozen=True, slots=True)
class CallPrice:
    """One call priced: the spend by part and the rates its missed tokens were charged."""

    rates: Rates
    input_usd: float  # uncached prompt tokens that were not written to the cache
    cache_read_usd: float
    cache_write_usd: float
    output_usd: float
    missed_rate: float  # dollars per missed prompt token, as this call was charged
    read_rate: float  # dollars per token of a cache read, for this call
    # what the cache writes cost beyond the same tokens at the input price (the price of
    # caching them; 0 for a self-hosted engine)
    write_premium_usd: float = 0.0

    @property
    def spend_usd(self) -> float:
        return self.input_usd + self.cache_read_usd + self.cache_write_usd + self.output_usd

    def lost(self, tokens: int) -> float:
        """Dollars `tokens` missed prompt tokens cost beyond what cache reads would have."""
        return tokens * max(0.0, self.missed_rate - self.read_rate)


class Pricer:
    """Prices hosted calls from genai-prices, self-hosted ones at the user's flat rate."""

    def __init__(self, price_per_mtok: float | None = None) -> None:
        self.price_per_mtok = price_per_mtok
        self.unknown: set[str] = set()  # hosted model names the price data does not have

    def rates(self, model: str | None, when: datetime | None, prompt_tokens: int,
              self_hosted: bool = False) -> Rates | None:
        if self_hosted:
            if self.price_per_mtok is None:
                return None
            return Rates("(--price-per-mtok)", "self-hosted", self.price_per_mtok, 0.0,
                         self.price_per_mtok, self.price_per_mtok, 0.0)
        if not model:
            return None
        rates = _rates(model, when.date() if when is not None else None, prompt_tokens)
        if rates is None:
            self.unknown.add(model)
        return rates

    def price(self, r: UsageRecord, self_hosted: bool = False) -> CallPrice | None:
        """`r`'s cost (None: no prompt tokens, a hosted model without a price, or a
        self-hosted call without a flat rate)."""
        if r.prompt_tokens is None:
            return None
        rates = self.rates(r.model, r.timestamp, r.prompt_tokens, self_hosted)
        if rates is None:
            return None
        read = min(r.cached_tokens or 0, r.prompt_tokens)
        written = min(r.cache_write_tokens or 0, r.prompt_tokens - read)
        written_1h = min(r.cache_write_1h_tokens or 0, written)
        plain = r.prompt_tokens - read - written
        write_usd = ((written - written_1h) * rates.cache_write_5m
                     + written_1h * rates.cache_write_1h) / MTOK
        input_usd = plain * rates.input / MTOK
        missed = plain + written
        missed_rate = ((input_usd + write_usd) / missed) if missed else rates.input / MTOK
        return CallPrice(rates, input_usd, read * rates.cache_read / MTOK, write_usd,
                         (r.output_tokens or 0) * rates.output / MTOK, missed_rate,
                         rates.cache_read / MTOK, write_usd - written * rates.input / MTOK)


def price_all(records: Iterable[tuple[UsageRecord, bool]], pricer: Pricer
              ) -> dict[str, CallPrice]:
    """request id -> its price, for the (record, self-hosted) calls that have one."""
    out = {}
    for r, self_hosted in records:
        priced = pricer.price(r, self_hosted)
        if priced is not None:
            out[r.id] = priced
    return out


def _rates(model: str, day: date | None, prompt_tokens: int) -> Rates | None:
    entry = _entry(model, day)
    if entry is None:
        return None
    model_id, provider, price = entry

    def rate(name: str, fallback: float | None = None) -> float:
        value = getattr(price, name, None)
        if value is None:
            return fallback if fallback is not None else 0.0
        return float(_tiered(value, prompt_tokens))

    base = rate("input_mtok")
    write_5m = rate("cache_write_mtok", base)
    return Rates(model_id, provider, base, rate("cache_read_mtok", base), write_5m,
                 rate("cache_write_1h_mtok", write_5m), rate("output_mtok"))


def _tiered(value: Any, total_input: int) -> Decimal:
    """A price at a call's total input: a tier's price applies once the input is above the
    tier's start (genai-prices' threshold rule)."""
    tiers = getattr(value, "tiers", None)
    if tiers is None:
        return Decimal(value)
    applicable = value.base
    for tier in sorted(tiers, key=lambda t: t.start, reverse=True):
        if total_input > tier.start:
            applicable = tier.price
            break
    return Decimal(applicable)


@lru_cache(maxsize=1024)
def _entry(model: str, day: date | None) -> tuple[str, str, Any] | None:
    """(model id, provider id, ModelPrice) of `model` on `day` (None: not in the data)."""
    import warnings

    from genai_prices import Usage, calc_price

    when = datetime(day.year, day.month, day.day, 12) if day is not None else None
    # NOTE: some clients log a model id with underscores (Cline through an OpenAI-compatible
    # provider: ``claude_4_5_opus``), which the data knows with hyphens
    base = model.rsplit("/", 1)[-1]
    for name in dict.fromkeys((model, base, base.replace("_", "-"))):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                found = calc_price(Usage(input_tokens=0), model_ref=name,
                                   genai_request_timestamp=when)
        except (LookupError, ValueError):
            continue
        return found.model.id, found.provider.id, found.model_price
    return None
