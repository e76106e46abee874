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

A (model name, day) looked up is kept in prefixscope's cache directory (`_stored`: the
model id, provider and per-token prices found, or that the data has no price), under the
content hash of the genai-prices package's code and data: importing genai-prices (with
pydantic, its schemas, and the HTTP client of its price updater, which prefixscope never
runs) is ~0.2 s of CPU, a small log's start-up (issue 37), and a second run over the same
days needs none of it. A name looked up without a day depends on today and is not kept.
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
    _flush()  # the lookups new to the cache, in one write (a log may span many days)
    return out


def _rates(model: str, day: date | None, prompt_tokens: int) -> Rates | None:
    entry = _entry(model, day)
    if entry is None:
        return None
    model_id, provider, price = entry

    def rate(name: str, fallback: float | None = None) -> float:
        value = price.get(name)
        if value is None:
            return fallback if fallback is not None else 0.0
        return float(_tiered(value, prompt_tokens))

    base = rate("input_mtok")
    write_5m = rate("cache_write_mtok", base)
    return Rates(model_id, provider, base, rate("cache_read_mtok", base), write_5m,
                 rate("cache_write_1h_mtok", write_5m), rate("output_mtok"))


@dataclass(frozen=True, slots=True)
class Tiered:
    """A price by a call's total input tokens: `base`, or the price of the highest tier
    whose start the input is above (genai-prices' `TieredPrices`)."""

    base: Decimal
    tiers: tuple[tuple[int, Decimal], ...]  # (start, price)


PRICE_FIELDS = ("input_mtok", "cache_write_mtok", "cache_read_mtok", "cache_write_1h_mtok",
                "output_mtok")
# (model id, provider id, the price entry's fields that are set)
Entry = tuple[str, str, dict[str, "Decimal | Tiered"]]


def _tiered(value: Decimal | Tiered, total_input: int) -> Decimal:
    """A price at a call's total input: a tier's price applies once the input is above the
    tier's start (genai-prices' threshold rule)."""
    if not isinstance(value, Tiered):
        return Decimal(value)
    applicable = value.base
    for start, price in sorted(value.tiers, key=lambda t: t[0], reverse=True):
        if total_input > start:
            applicable = price
            break
    return Decimal(applicable)


@lru_cache(maxsize=1024)
def _entry(model: str, day: date | None) -> Entry | None:
    """(model id, provider id, prices) of `model` on `day` (None: not in the data), from
    the cache directory when looked up before (`_stored`)."""
    if day is None:  # genai-prices prices it as of now: not kept
        return _looked_up(model, day)
    name = f"{model}\0{day.isoformat()}"
    stored = _stored()
    if stored is not None and name in stored:
        return _decoded(stored[name])
    entry = _looked_up(model, day)
    if stored is not None:
        stored[name] = _encoded(entry)
        _unsaved.add(name)
    return entry


_unsaved: set[str] = set()  # (model, day) names looked up since the cache was written


def _flush() -> None:
    """Write the cache when a lookup was added to it (`price_all` calls it once)."""
    stored = _stored()
    if _unsaved and stored is not None:
        _store(stored)
    _unsaved.clear()


def _looked_up(model: str, day: date | None) -> Entry | None:
    """`_entry` from genai-prices itself."""
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
        prices: dict[str, Decimal | Tiered] = {}
        for field_name in PRICE_FIELDS:
            value = getattr(found.model_price, field_name, None)
            if value is None:
                continue
            tiers = getattr(value, "tiers", None)
            prices[field_name] = Decimal(value) if tiers is None else Tiered(
                Decimal(value.base), tuple((int(t.start), Decimal(t.price)) for t in tiers))
        return found.model.id, found.provider.id, prices
    return None


def _encoded(entry: Entry | None) -> Any:
    """`entry` as JSON values (a Decimal as its exact text)."""
    if entry is None:
        return None
    model_id, provider, prices = entry
    return [model_id, provider, {
        k: str(v) if isinstance(v, Decimal) else [str(v.base), [[s, str(p)] for s, p in v.tiers]]
        for k, v in prices.items()}]


def _decoded(value: Any) -> Entry | None:
    if value is None:
        return None
    model_id, provider, prices = value
    return model_id, provider, {
        k: Decimal(v) if isinstance(v, str) else Tiered(
            Decimal(v[0]), tuple((int(s), Decimal(p)) for s, p in v[1]))
        for k, v in prices.items()}


_KIND = "prices-v1"


@lru_cache(maxsize=1)
def _data_key() -> str | None:
    """The content hash of the installed genai-prices package's modules (its code and its
    data), found without importing it (None: not found)."""
    import importlib.util
    from pathlib import Path

    import xxhash

    spec = importlib.util.find_spec("genai_prices")
    if spec is None or not spec.submodule_search_locations:
        return None
    h = xxhash.xxh3_128()
    try:
        for path in sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.py")):
            h.update(f"\0{path.name}\0".encode())
            h.update(path.read_bytes())
    except OSError:
        return None
    return h.hexdigest()


@lru_cache(maxsize=1)
def _stored() -> dict[str, Any] | None:
    """The (model, day) lookups kept for this genai-prices (None: no cache to use)."""
    import json

    from prefixscope.tokenizers.base import TokenizerError
    from prefixscope.tokenizers.diskcache import load_arrays

    key = _data_key()
    if key is None:
        return None
    try:
        arrays = load_arrays(_KIND, key, ("json",))
    except TokenizerError:  # no cache directory can be named: look up every run
        return None
    if arrays is None:
        return {}
    try:
        stored = json.loads(arrays["json"].tobytes())
    except ValueError:
        return {}
    return stored if isinstance(stored, dict) else {}


def _store(stored: dict[str, Any]) -> None:
    import json

    import numpy as np

    from prefixscope.tokenizers.base import TokenizerError
    from prefixscope.tokenizers.diskcache import save_arrays

    key = _data_key()
    if key is None:
        return
    data = json.dumps(stored, sort_keys=True).encode()
    try:
        save_arrays(_KIND, key, {"json": np.frombuffer(data, dtype=np.uint8)})
    except TokenizerError:
        pass
