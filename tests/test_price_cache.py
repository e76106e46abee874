"""A model's prices looked up once are kept in the cache directory and read back the same
(`analyses.prices._stored`, issue 37: a second run needs no genai-prices import)."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

import pytest
from genai_prices import Usage, calc_price

from prefixscope.analyses import prices

MODELS = ("claude-sonnet-4-5", "claude-opus-4-1", "gpt-4o", "gpt-5", "claude_4_5_opus",
          "openai/gpt-4o-mini", "no-such-model-xyz")
DAYS = (date(2025, 6, 1), date(2026, 1, 15))
TOKENS = (1_000, 150_000, 250_000)


def fresh() -> None:
    prices._entry.cache_clear()
    prices._stored.cache_clear()


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PREFIXSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    fresh()
    yield tmp_path / "cache"
    fresh()


def every_rate() -> dict[tuple[str, date, int], prices.Rates | None]:
    rates = {(m, d, n): prices._rates(m, d, n) for m in MODELS for d in DAYS for n in TOKENS}
    prices._flush()  # as price_all does after its calls
    return rates


def test_a_second_process_reads_the_same_rates_without_genai_prices(monkeypatch, cache_dir):
    looked_up = every_rate()
    assert any(r is None for r in looked_up.values())  # an unknown model is kept as such
    assert len({r for r in looked_up.values() if r is not None}) > 3
    assert list(cache_dir.glob("tokenizers/prices-*.npz"))
    fresh()  # as a new process: only the file remains

    def no_lookup(model, day):
        raise AssertionError(f"genai-prices consulted for {model} on {day}")

    monkeypatch.setattr(prices, "_looked_up", no_lookup)
    assert every_rate() == looked_up


def test_the_rates_are_genai_prices_own_input_price_tier_included():
    """The independent oracle: genai-prices' calc_price of N input tokens is N times the
    input rate (the tier by N's total, Sonnet 4.5 above 200k), read from the stored file."""
    every_rate()
    fresh()
    for (model, day, tokens), rates in every_rate().items():
        if rates is None:
            continue
        when = datetime(day.year, day.month, day.day, 12)
        name = model.rsplit("/", 1)[-1].replace("_", "-")
        found = calc_price(Usage(input_tokens=tokens), model_ref=name,
                           genai_request_timestamp=when)
        assert Decimal(str(rates.input)) * tokens / prices.MTOK == pytest.approx(
            found.input_price, rel=Decimal("1e-12")), (model, day, tokens)
    sonnet = [prices._rates("claude-sonnet-4-5", DAYS[1], n) for n in (1_000, 250_000)]
    assert sonnet[1].input == 2 * sonnet[0].input  # $3 -> $6 per million above 200k


def test_a_lookup_without_a_day_is_not_kept(cache_dir):
    assert prices._rates("gpt-4o", None, 1_000) is not None
    assert not list(cache_dir.glob("tokenizers/prices-*.npz"))


def test_an_unwritable_cache_still_prices(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("PREFIXSCOPE_CACHE_DIR", str(blocker))
    fresh()
    assert prices._rates("gpt-4o", DAYS[0], 1_000) is not None


def test_pricing_a_log_writes_the_cache_once(monkeypatch, cache_dir):
    """A log spanning many days adds many lookups; `price_all` writes them in one file
    write, not one each."""
    from prefixscope.model import UsageRecord

    writes = []
    real_store = prices._store
    monkeypatch.setattr(prices, "_store", lambda stored: (writes.append(len(stored)),
                                                          real_store(stored)))
    records = [(UsageRecord(id=f"r{day}", timestamp=datetime(2025, 6, day, 12),
                            endpoint="/v1/chat/completions", model="gpt-4o", client=None,
                            user=None, channel=None, source_format="raw", session=None,
                            prompt_tokens=100, cached_tokens=0, has_body=False), False)
               for day in range(1, 11)]
    assert len(prices.price_all(records, prices.Pricer())) == 10
    assert writes == [10]
    fresh()
    monkeypatch.setattr(prices, "_looked_up", lambda model, day: 1 / 0)
    assert len(prices.price_all(records, prices.Pricer())) == 10  # all from the file
    assert writes == [10]
