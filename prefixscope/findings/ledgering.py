"""The missed-token ledger over the gathered evidence: each request's engine rules (the
engine chosen for its log file, its replay's, its model's hosted family), its price, and
the usage the ledger corrects first (calls whose input_tokens already held the cache
reads)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from prefixscope.analyses.bucket import BucketReport
from prefixscope.analyses.diff import DiffReport
from prefixscope.analyses.prices import Pricer, price_all
from prefixscope.analyses.simulate import SimulateReport
from prefixscope.engines.choose import (
    model_family_engine,
    unmodelled_family,
)
from prefixscope.findings.ledger import Ledger, ReplayedRequest, build_ledger, rules_for
from prefixscope.findings.values import Replay, ReportOptions
from prefixscope.model import SessionEvent, UsageRecord
from prefixscope.model.protocols import input_excludes_cache

# Cache reads at least this share of the rendered prompt make the two readings of
# input_tokens far enough apart to tell (a stand-in tokenizer is off by a few percent).
_MIN_READ_SHARE = 0.2


# Parts of a prompt a rebuilt body can lack (`metadata.approximate`) that sit outside its
# messages: a rendered prompt without them is shorter than what was sent by their length.
_UNRENDERED_PARTS = frozenset({"system", "tools"})


def cache_inclusive_input(records: Sequence[UsageRecord], replays: Sequence[Replay],
                          lacking: Mapping[str, Sequence[str]] | None = None
                          ) -> tuple[str, ...]:
    """Anthropic-protocol calls (with bodies) whose uncached input as parsed (prompt − reads
    − writes, Anthropic's convention) is the whole rendered prompt while they also report
    cache reads: their input_tokens included the reads -- the cache-inclusive
    input_tokens a converting gateway answers with, whether or not the log names one.
    A call whose rebuild lacks its system prompt or tools (`lacking`: request id -> the
    parts ingest says its log lacks) is not read so: its rendered prompt is the messages
    alone, which a small uncached input can match while the reads and writes are that
    system prompt and tools (a Cline task's second call: 10 uncached tokens, 8,972 read)."""
    rendered = {r.id: r.prompt_tokens for replay in replays for r in replay.report.per_request}
    lacking = lacking or {}
    hit = []
    for r in records:
        length = rendered.get(r.id)
        if (not input_excludes_cache(r.endpoint) or not r.has_body or r.duplicate_of
                or not length or r.prompt_tokens is None or not r.cached_tokens
                or _UNRENDERED_PARTS.intersection(lacking.get(r.id, ()))):
            continue
        uncached = r.prompt_tokens - r.cached_tokens - (r.cache_write_tokens or 0)
        if r.cached_tokens >= _MIN_READ_SHARE * length and \
                abs(uncached - length) < abs(r.prompt_tokens - length) / 2:
            hit.append(r.id)
    return tuple(hit)


def ledger_of(records: Sequence[UsageRecord], diff: DiffReport | None,
              replays: Sequence[Replay], simulate: SimulateReport | None, bucket: BucketReport,
              chosen: dict[str, tuple[str | None, int | None]], options: ReportOptions,
              events: Mapping[str, Sequence[SessionEvent]] | None = None,
              not_rebuilt: frozenset[str] = frozenset(),
              extended: frozenset[str] = frozenset()) -> Ledger:
    """The missed-token ledger over the evidence (`findings.ledger`); `extended`: the
    requests that asked for OpenAI's 24-hour retention."""
    replayed: dict[str, ReplayedRequest] = {}
    domains = replays or ((Replay("all", simulate),) if simulate is not None else ())
    for replay in domains:
        for sim in replay.report.per_request:
            replayed[sim.id] = ReplayedRequest(replay.domain, replay.report.engine,
                                               sim.unit or replay.report.unit, sim)
    block_of_source = {str(g.key.get("source")): g.block_size for g in bucket.groups}
    engine_of = {r.id: chosen.get(r.source_file, (None, None))[0] for r in records}
    # (each a function of the record's model alone: found once a model)
    one_of_model = {r.model: r for r in records}
    family_of = {model: model_family_engine([r]) for model, r in one_of_model.items()}
    unmodelled_of = {model: unmodelled_family([r]) for model, r in one_of_model.items()}
    family = {r.id: family_of[r.model] for r in records}
    unmodelled = {r.id: unmodelled_of[r.model] for r in records}
    rules = rules_for(records, replayed, block_of_source, engine_of, family, unmodelled,
                      extended)
    # A self-hosted engine has no list price (a gateway may name it after a hosted model):
    # it is priced only at the user's own rate.
    pricer = Pricer(options.price_per_mtok)
    prices = price_all(((r, not rules[r.id].hosted) for r in records), pricer)
    source = f"list prices (genai-prices {_prices_version()}) for hosted APIs; " + (
        f"self-hosted at --price-per-mtok {options.price_per_mtok:g}"
        if options.price_per_mtok is not None else
        "self-hosted calls unpriced without --price-per-mtok")
    return build_ledger(records, diff.pairs if diff is not None else (), replayed, rules,
                        prices, source, sorted(pricer.unknown), event_kinds(events or {}),
                        not_rebuilt)


def event_kinds(events: Mapping[str, Sequence[SessionEvent]]) -> dict[str, list[str]]:
    """request id -> the kinds of the session events recorded before it."""
    return {rid: [e.kind for e in recorded] for rid, recorded in events.items()}


def _prices_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("genai-prices")
    except PackageNotFoundError:
        return "?"
