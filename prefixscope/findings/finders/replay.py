"""Misses with an intact prefix, and the misses nothing explains: the ledger's ``ttl``,
``eviction``, ``provider``, ``compaction``, ``below-minimum`` and ``unexplained`` causes,
and ``not-requested`` (a session that never asked Anthropic to cache).

Each finding's tokens are its cause's in the ledger (`findings.ledger`), which attributes
every missed token once; breakage (``break``) is the breakage finder's, by its kind and
segment. Eviction is reported per cache domain (a log file's server), with the domain's
fitted capacity and capacity curve for the fix.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence

from prefixscope.analyses.simulate import SimulateReport
from prefixscope.engines import ENGINES, EngineSpec
from prefixscope.findings.evidence import Evidence
from prefixscope.findings.finders.base import EXAMPLES, count, finding, pct
from prefixscope.findings.finders.recorded import (
    CLAUDE_CODE,
    CODEX,
    client_family,
    clients_of,
    provider_said,
)
from prefixscope.findings.ledger import LedgerEntry
from prefixscope.findings.model import Finding
from prefixscope.findings.names import short_names
from prefixscope.findings.ttl_choice import retention_words, ttl_fix, ttl_shown
from prefixscope.model import UsageRecord

_NEAR_IDEAL = 0.005  # a capacity whose hit rate is within half a point of the ideal is enough
_FALLBACK_MIN = 3  # provider misses at one cached value this often: a fallback to a prefix


def find(ev: Evidence) -> Iterator[Finding]:
    ledger = ev.ledger
    if ledger is None:
        return
    yield from _not_requested(ev)
    by_cause: dict[str, list[LedgerEntry]] = defaultdict(list)
    for e in ledger.entries:
        for cause in e.causes:
            by_cause[cause].append(e)
    domains = {r.domain: r.report for r in ev.replays}
    names = short_names(list(domains))
    for cause in ("ttl", "eviction", "provider", "compaction", "below-minimum",
                  "unexplained"):
        hit = by_cause.get(cause, [])
        if not hit:
            continue
        if cause == "eviction":
            per_domain: dict[str | None, list[LedgerEntry]] = defaultdict(list)
            for e in hit:
                per_domain[e.domain].append(e)
            several = len(per_domain) > 1
            for domain, entries in per_domain.items():
                sim = domains.get(domain) if domain is not None else ev.simulate
                f = _eviction(sim, entries, _evidence(cause, entries, sim))
                if several and domain is not None:
                    f = f.__class__(f.kind, f.severity, f"{names.get(domain, domain)}: {f.title}",
                                    f.segment, f.lost_tokens, f.share,
                                    {"domain": domain, **f.evidence}, f.fix, f.fix_hit_rate,
                                    f.lost_usd)
                yield f
            continue
        sim = ev.simulate
        if cause in ("ttl", "provider"):  # a hosted API's: one finding per provider
            per_engine: dict[str | None, list[LedgerEntry]] = defaultdict(list)
            for e in hit:
                per_engine[e.engine].append(e)
            for engine, entries in per_engine.items():
                yield _finding(cause, entries, _evidence(cause, entries, sim), engine, ev)
            continue
        yield _finding(cause, hit, _evidence(cause, hit, sim), sim.engine if sim else None,
                       ev)


def _not_requested(ev: Evidence) -> Iterator[Finding]:
    """The ledger's ``not-requested`` tokens: sessions on a hosted Anthropic model that
    read and wrote nothing in every call (`findings.unrequested`), with what caching would
    have saved at list prices."""
    ledger = ev.ledger
    hit = [e for e in ledger.entries if e.causes.get("not-requested")] if ledger else []
    if ledger is None or not hit:
        return
    sessions = {e.session for e in hit}
    calls = [e for e in ledger.entries if e.session in sessions]
    model_of = {r.id: r.model for r in ev.records}
    # the opt-in cache's rules (`EngineSpec.reads_at_breakpoints`): its minimum, its TTL
    spec = ENGINES[str(hit[0].engine)]
    ttl = spec.ttl_seconds
    above = [e for e in calls if e.prompt_tokens >= spec.minimum(model_of.get(e.id))]
    models = sorted({m for e in calls if (m := model_of.get(e.id))})
    minimums = sorted({spec.minimum(m) for m in models} or {spec.minimum(None)})
    tokens = _tokens(hit, "not-requested")
    # Had caching been asked, each call would have read what the ledger books here
    # (unless a pause outlived the default TTL) and written the rest of its prompt once.
    late = sum(e.causes["not-requested"] for e in hit
               if e.gap_seconds is not None and ttl is not None and e.gap_seconds > ttl)
    total = 0.0
    for e in calls:
        price = ledger.prices.get(e.id)
        if price is None:
            break
        read = e.causes.get("not-requested", 0)
        if e.gap_seconds is not None and ttl is not None and e.gap_seconds > ttl:
            read = 0
        rates = price.rates
        total += (read * (rates.input - rates.cache_read)
                  - (e.prompt_tokens - read) * (rates.cache_write_5m - rates.input)) / 1e6
    saved = total if all(e.id in ledger.prices for e in calls) else None
    evidence = _evidence("not-requested", hit, None)
    evidence.update(sessions=len(sessions), calls=len(calls), calls_above_minimum=len(above),
                    minimum_tokens=minimums, models=models, cache_read_tokens=0,
                    cache_write_tokens=0, after_pause_tokens=late,
                    would_save_usd=round(saved, 6) if saved is not None else None)
    floor = "–".join(f"{m:,}" for m in (minimums[0], minimums[-1])[:len(set(minimums))])
    title = (f"caching not requested: 0 tokens written in {len(above):,} calls above the "
             f"minimum ({floor} tokens) on {', '.join(models) or 'a Claude model'}, 0 read; "
             f"the cache would have served {tokens:,} prompt tokens")
    if saved is not None:
        title += f", saving ${saved:,.2f} net of the write premium at list prices"
    if late:
        title += (f" ({late:,} of them after pauses longer than the 5-minute TTL, which only "
                  "the 1-hour TTL would have kept: not in the saving)")
    yield finding("caching-not-requested", title, tokens, evidence,
                  _not_requested_fix(spec, _family(hit, ev)),
                  lost_usd=_usd(hit, "not-requested"))


def _not_requested_fix(spec: EngineSpec, family: str | None) -> str:
    """The breakpoint cache's own advice for the client (`EngineSpec.not_requested_fix`),
    else its advice for any client, else a plain one."""
    fixes = dict(spec.not_requested_fix)
    return fixes.get(family or "") or fixes.get("") or (
        f"{spec.label} caches only what a request marks for caching, and none of these "
        "calls read or wrote a token: mark the end of the stable prefix and the last "
        "message.")


def _tokens(entries: Sequence[LedgerEntry], cause: str) -> int:
    return sum(e.causes.get(cause, 0) for e in entries)


def _usd(entries: Sequence[LedgerEntry], cause: str) -> float | None:
    priced = [e.lost_usd[cause] for e in entries if cause in e.lost_usd]
    return sum(priced) if priced else None


def _evidence(cause: str, entries: Sequence[LedgerEntry], sim: SimulateReport | None
              ) -> dict[str, object]:
    worst = sorted(entries, key=lambda e: -e.causes.get(cause, 0))
    evidence: dict[str, object] = {
        "requests": len(entries),
        "example_requests": [e.id for e in worst[:EXAMPLES]],
        "tokens_per_request_max": worst[0].causes.get(cause, 0) if worst else 0,
    }
    if sim is not None:
        evidence.update(engine=sim.engine, unit=sim.unit, capacity_tokens=sim.capacity_tokens,
                        replayed_requests=sim.requests)
        if sim.fit is not None:
            evidence["fit_agreement"] = sim.fit.agreement
    gaps = [e.gap_seconds for e in entries if e.gap_seconds is not None]
    if gaps and cause in ("ttl", "provider"):
        evidence["gap_seconds_min"] = round(min(gaps), 1)
        evidence["gap_seconds_max"] = round(max(gaps), 1)
    return evidence


def _finding(cause: str, entries: Sequence[LedgerEntry], evidence: dict[str, object],
             engine: str | None, ev: Evidence) -> Finding:
    tokens, usd = _tokens(entries, cause), _usd(entries, cause)
    n = count(len(entries), "request")
    if engine is not None:
        evidence["rules"] = engine
    said = provider_said(entries, ev)
    if said:
        evidence["provider_verdicts"] = said
    if cause == "ttl":
        gaps = [e.gap_seconds for e in entries if e.gap_seconds is not None]
        pause = ("after a pause" if not gaps else
                 f"after a pause of {_minutes(gaps[0])}" if _minutes(min(gaps)) ==
                 _minutes(max(gaps)) else
                 f"after pauses of {_minutes(min(gaps))}–{_minutes(max(gaps))}")
        # an engine whose writes choose a TTL: the TTLs the log's writes show, the choice
        spec = ENGINES.get(engine or "")
        chooses = spec is not None and spec.long_ttl is not None
        shown = ttl_shown(entries, ev.records) if chooses else set()
        if shown - {None}:  # the TTLs the log's writes show
            evidence["ttl_seconds"] = sorted(t for t in shown if t is not None)
        what_ifs = ev.ttl_what_ifs if chooses else ()
        fix = ttl_fix(engine, what_ifs, shown)
        if what_ifs:
            priced = sorted(what_ifs, key=lambda w: -w.net_usd)
            fix += " Priced on this log: " + "; ".join(
                f"`{w.name}`: {w.detail}" for w in priced) + "."
            evidence["what_if"] = {w.name: round(w.net_usd, 6) for w in priced}
        return finding("ttl-expiry", f"{n} found the cached prefix expired {pause}, longer "
                       f"than the cache's retention ({retention_words(engine, shown)})",
                       tokens, evidence, fix, lost_usd=usd)
    if cause == "provider":
        intact = _intact(entries, ev)
        title = (f"{engine or 'the provider'} cached less than the live prefix in {n}, by at "
                 f"least one cache unit: {intact}")
        fell = Counter(e.cached_tokens for e in entries if e.cached_tokens).most_common(1)
        if fell and fell[0][1] >= _FALLBACK_MIN:
            value, times = fell[0]
            lost_there = sum(e.causes["provider"] for e in entries if e.cached_tokens == value)
            evidence.update(fallback_cached_tokens=value, fallback_requests=times,
                            fallback_tokens=lost_there)
            at = [e for e in entries if e.cached_tokens == value]
            own = _own_prefix(at, value, ev.records)
            if own == len(at):  # every one read the prefix its own session cached before
                evidence["fallback_own_prefix"] = True
                title += (f"; {times} of them fell back to exactly {value:,} cached tokens, "
                          f"losing {lost_there:,}: the session's own earlier prefix (a call "
                          "before it cached that much), not the longer one the turn before "
                          "left")
            else:
                title += (f"; {times} of them fell back to exactly {value:,} cached tokens, "
                          f"losing {lost_there:,}: a prefix other traffic shares, served by "
                          "another cache machine")
        return finding("provider-miss", title, tokens, evidence,
                       _provider_fix(engine, _family(entries, ev)), lost_usd=usd)
    if cause == "compaction":
        recorded = sum(e.recorded == "compaction" for e in entries)
        if recorded:
            evidence["recorded"] = recorded  # of them, after a compaction the log records
        return finding("compaction", f"{n} after a compaction re-sent the conversation as a "
                       "summary: the cache restarted there", tokens, evidence,
                       _compaction_fix(_family(entries, ev)), lost_usd=usd)
    if cause == "below-minimum":
        return finding("below-minimum", f"{n} had a reusable prefix shorter than the "
                       "engine caches (its minimum cacheable length, or one block)", tokens,
                       evidence, "Put the stable part first and make it longer than the "
                       f"minimum{_minimums()}, or move the breakpoint after more of the "
                       "stable prefix.", lost_usd=usd, severity="low")
    assert cause == "unexplained"
    title = f"{n} got less cache than the previous turn left and nothing in the log explains why"
    unrebuilt = sum(e.id in ev.not_rebuilt for e in entries)
    if unrebuilt:  # nothing sized on what the log could not rebuild: no minimum, no break
        evidence["not_rebuilt"] = unrebuilt
        title += (f" ({unrebuilt} of them on prompts the log could not rebuild: it lacks "
                  "part of what was sent, so neither a minimum nor a break can be placed)")
    shrank = sum(e.shrank for e in entries)
    if shrank:
        evidence["shorter_than_predecessor"] = shrank
        title += (f" ({shrank} of them sent a shorter prompt than the turn before: part of the "
                  "history was dropped or rewritten, and the log records no compaction or "
                  "truncation)")
    return finding("unexplained-miss", title, tokens, evidence,
                   _unexplained_fix(ev, shrank == len(entries)), lost_usd=usd)


def _own_prefix(entries: Sequence[LedgerEntry], value: int,
                records: Sequence[UsageRecord]) -> int:
    """How many of `entries` read exactly `value` tokens that an earlier call of their own
    session had cached: its whole prompt, or its reads and writes together (the prefix up
    to its last breakpoint) -- a fallback to the session's own entry, not other traffic's."""
    by_id = {r.id: r for r in records}
    own = 0
    for e in entries:
        r = by_id.get(e.id)
        seen: set[str] = set()
        prev = by_id.get(r.prev_id) if r is not None and r.prev_id is not None else None
        while prev is not None and prev.id not in seen:
            seen.add(prev.id)
            written = (prev.cached_tokens or 0) + (prev.cache_write_tokens or 0)
            if value in (prev.prompt_tokens, written):
                own += 1
                break
            prev = by_id.get(prev.prev_id) if prev.prev_id is not None else None
    return own


def _intact(entries: Sequence[LedgerEntry], ev: Evidence) -> str:
    """What proves the prefix was intact: the diff of both rendered prompts (exact, or
    rebuilt with parts the log lacks), else only the usage."""
    pairs = {p.b: p for p in ev.diff.pairs} if ev.diff is not None else {}
    seen = [pairs[e.id] for e in entries if e.id in pairs]
    if not seen:
        return ("usage shows each turn extending the last (no bodies to prove the prefix "
                "intact)")
    rebuilt = sum(p.approximate for p in seen)
    proof = ("the bodies prove the prefix intact" if not rebuilt else
             f"the bodies show the prefix unchanged ({rebuilt} of {len(seen)} rebuilt with "
             "parts the log lacks)")
    if len(seen) < len(entries):
        proof += f"; {len(entries) - len(seen)} without a body pair: usage only"
    return proof


def _unexplained_fix(ev: Evidence, shrank: bool = False) -> str:
    if shrank:
        return ("A prompt shorter than the turn before means the client dropped or rewrote "
                "part of the history (a compaction, a truncation, old tool output cleared) "
                "without the log saying so: capture the requests themselves (a proxy "
                "capture, OpenTelemetry's request body) so the turns can be diffed.")
    if ev.diff is None:
        return ("Log the request bodies so the turns can be diffed (Langfuse: keep input; "
                "LiteLLM: store_prompts_in_spend_logs; new-api: log the request body; Claude "
                "Code already does), and the engine's own log for its cache size "
                "(`prefixscope engine-log`).")
    return ("Check the engine's block size and cache size (`prefixscope simulate --fit`), its "
            "log for evictions (`prefixscope engine-log`), and what the source counts as "
            "cached tokens.")


def _minutes(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def _eviction(sim: SimulateReport | None, entries: Sequence[LedgerEntry],
              evidence: dict[str, object]) -> Finding:
    tokens, usd = _tokens(entries, "eviction"), _usd(entries, "eviction")
    n = count(len(entries), "request")
    if sim is None:
        return finding("eviction-pressure", f"{n} missed blocks a larger cache would have "
                       "kept", tokens, evidence, "More KV cache memory, CPU offload, or "
                       "session-sticky routing.", lost_usd=usd)
    enough = None
    ideal = sim.hit_rate_ideal
    for point in sim.capacity_curve:  # the smallest larger cache that reaches the ideal
        if (point.capacity_tokens is not None and point.hit_rate is not None
                and ideal is not None and point.hit_rate >= ideal - _NEAR_IDEAL
                and point.capacity_tokens > (sim.capacity_tokens or 0)):
            enough = point
            break
    evidence["capacity_curve"] = [[p.capacity_tokens, p.hit_rate] for p in sim.capacity_curve]
    # each point's hit rate split: reuse within a conversation (what session-sticky routing
    # keeps) and across conversations (what only a cache the sessions share gives)
    evidence["capacity_curve_split"] = [[p.capacity_tokens, p.hit_rate_within,
                                         p.hit_rate_across] for p in sim.capacity_curve]
    if enough is not None:
        fix = (f"Give the prefix cache about {enough.capacity_tokens:,} tokens (now "
               f"{sim.capacity_tokens:,}): the replay then reaches {pct(enough.hit_rate)} "
               f"(ideal {pct(ideal)}). Or route each session to one replica, or offload "
               "evicted blocks to CPU.") if sim.capacity_tokens else (
               "Give the prefix cache more KV memory, or route each session to one replica.")
    else:
        fix = ("More KV cache memory (a larger --gpu-memory-utilization, a smaller max model "
               "length), CPU offload, or session-sticky routing so sessions stop evicting "
               "each other.")
    if sim.capacity_tokens is None:
        capacity = "the cache"
    elif sim.fit is not None and sim.fit.capacity_tokens == sim.capacity_tokens:
        capacity = f"{sim.capacity_tokens:,}-token cache fitted to the log"
    else:
        capacity = f"{sim.capacity_tokens:,}-token cache"
    sessions = len({r.session for r in sim.per_request})
    who = ("concurrent sessions evict each other's prefixes" if sessions > 1 else
           "the cache evicts the session's prefix between its turns")
    return finding("eviction-pressure", f"{who}: "
                   f"{n} missed blocks a larger cache would have "
                   f"kept ({capacity})", tokens, evidence, fix,
                   fix_hit_rate=enough.hit_rate if enough else None, lost_usd=usd)


def _minimums() -> str:
    """The hosted engines' minimum cacheable lengths, as the below-minimum advice quotes
    them (`EngineSpec.minimum_text`): `` (<engine>: <minimum>; ...)``, or nothing."""
    said = "; ".join(f"{s.label}: {m}" for s in ENGINES.values()
                     if s.hosted and (m := s.minimum_text) is not None)
    return f" ({said})" if said else ""


def _family(entries: Sequence[LedgerEntry], ev: Evidence) -> str | None:
    """The agent client every request of `entries` is from, when it is one whose settings
    the fix can name (Claude Code, Cline)."""
    return client_family([e.id for e in entries], clients_of(ev))


def _compaction_fix(family: str | None) -> str:
    if family == CLAUDE_CODE:
        return ("Each compaction re-sends the conversation as a summary, so only the system "
                "prompt and tools stay cached: compact at a natural break with `/compact` "
                "(before auto-compact fires mid-task), and `/clear` between unrelated tasks "
                "so fewer compactions are needed.")
    if family == "cline":
        return ("Each condensation re-sends the task as a summary: start a new task at a "
                "natural break instead, or use a model with a larger context window.")
    if family == CODEX:
        return ("Each compaction replaces the history, so only the instructions and tools "
                "stay cached: `/compact` at a natural break (before auto-compaction fires "
                "mid-task), or start a new session (`/new`) between unrelated tasks.")
    return ("Compaction rewrites the history: keep the system prompt and tools "
            "byte-identical across it so they stay cached, and compact later (a "
            "larger threshold) if the context allows.")


def _provider_fix(engine: str | None, family: str | None = None) -> str:
    """The advice for a client that sets its caching up itself (`EngineSpec.
    provider_fix_by_client`, of its provider's engine), else the engine's own."""
    for provider in ENGINES.values():
        fix = dict(provider.provider_fix_by_client).get(family or "")
        if fix is not None:
            return fix
    spec = ENGINES.get(engine or "")
    if spec is not None and spec.provider_fix is not None:
        return spec.provider_fix
    return "Keep requests of a session on one provider endpoint; caching is best effort."
