"""Misses the replay explains when the prefix did not change: eviction, TTL expiry, a hosted
provider missing an intact live prefix, compaction; and the log disagreeing with a replay
that fits it (usage semantics).

The tokens are the replay's miss classes (`analyses.simulate`), which partition each
request's uncached prompt tokens; breakage (``break``) is the diff's to report, with its
cause, so it is not repeated here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from prefixscope.analyses.simulate import SimulateReport
from prefixscope.engines import ENGINES
from prefixscope.findings.evidence import Evidence
from prefixscope.findings.finders.base import EXAMPLES, count, finding, pct
from prefixscope.findings.model import Finding
from prefixscope.findings.names import short_names

_NEAR_IDEAL = 0.005  # a capacity whose hit rate is within half a point of the ideal is enough


def find(ev: Evidence) -> Iterator[Finding]:
    """Per cache domain (each log file's own replay and fit)."""
    if ev.replays:
        names = short_names([r.domain for r in ev.replays])
        several = len(ev.replays) > 1
        for replay in ev.replays:
            yield from _domain(replay.report, replay.domain if several else None,
                               names[replay.domain])
    elif ev.simulate is not None:
        yield from _domain(ev.simulate, None)


def _domain(sim: SimulateReport, domain: str | None, name: str = "") -> Iterator[Finding]:
    for f in _findings(sim):
        if domain is None:
            yield f
        else:
            yield replace(f, title=f"{name}: {f.title}",
                          evidence={"domain": domain, **f.evidence})


def _findings(sim: SimulateReport) -> Iterator[Finding]:
    hosted = ENGINES[sim.engine].hosted
    for cls in ("eviction", "ttl", "provider", "compaction", "unexplained"):
        tokens = sim.misses.get(cls, 0)
        if tokens <= 0:
            continue
        hit = [r for r in sim.per_request if r.misses.get(cls, 0) > 0]
        evidence: dict[str, object] = {
            "engine": sim.engine, "unit": sim.unit, "capacity_tokens": sim.capacity_tokens,
            "requests": len(hit), "replayed_requests": sim.requests,
            "example_requests": [r.id for r in sorted(hit, key=lambda r: -r.misses[cls])
                                 [:EXAMPLES]],
        }
        if sim.fit is not None:
            evidence["fit_agreement"] = sim.fit.agreement
        n = count(len(hit), "request")
        if cls == "eviction":
            yield _eviction(sim, tokens, evidence, n)
        elif cls == "ttl":
            yield finding("ttl-expiry", f"{n} found the cached prefix expired after "
                          f"a pause longer than the cache's retention ({_ttl(sim)})", tokens,
                          evidence, _ttl_fix(sim.engine))
        elif cls == "provider":
            yield finding("provider-miss", f"{sim.engine} missed an intact, live prefix in "
                          f"{n} (routing, overflow or best effort)", tokens,
                          evidence, _provider_fix(sim.engine))
        elif cls == "compaction":
            yield finding("compaction", f"{n} after a compaction re-sent the "
                          "conversation as a summary: the cache restarted there", tokens,
                          evidence, "Compaction rewrites the history: keep the system prompt "
                          "and tools byte-identical across it so they stay cached, and compact "
                          "later (a larger threshold) if the context allows.")
        elif not hosted:
            evidence["hit_rate_observed"] = sim.hit_rate_observed
            evidence["hit_rate_predicted"] = sim.hit_rate_predicted
            estimated = sim.approximate_requests > 0
            evidence["approximate_requests"] = sim.approximate_requests
            yield finding("usage-semantics", f"the log reports less cache than a replay that "
                          f"fits it predicts, in {n}, with no pressure to "
                          "explain it" + (f" ({sim.approximate_requests} rendered with a "
                                          "stand-in tokenizer: an estimate)" if estimated
                                          else ""), tokens, evidence,
                          "Check the engine's block size and cache size (`prefixscope simulate "
                          "--fit`), and what the source counts as cached tokens.",
                          severity="info" if estimated else "")


def _eviction(sim: SimulateReport, tokens: int, evidence: dict[str, object], n: str
              ) -> Finding:
    enough = None
    ideal = sim.hit_rate_ideal
    for point in sim.capacity_curve:  # the smallest larger cache that reaches the ideal
        if (point.capacity_tokens is not None and point.hit_rate is not None
                and ideal is not None and point.hit_rate >= ideal - _NEAR_IDEAL
                and point.capacity_tokens > (sim.capacity_tokens or 0)):
            enough = point
            break
    evidence["capacity_curve"] = [[p.capacity_tokens, p.hit_rate] for p in sim.capacity_curve]
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
                   fix_hit_rate=enough.hit_rate if enough else None)


def _ttl(sim: SimulateReport) -> str:
    return {"anthropic": "5 minutes by default", "openai": "5–10 minutes idle"}.get(
        sim.engine, "its TTL")


def _ttl_fix(engine: str) -> str:
    if engine == "anthropic":
        return ("Mark the stable prefix with the 1-hour TTL (`cache_control: {\"type\": "
                "\"ephemeral\", \"ttl\": \"1h\"}`) where pauses exceed 5 minutes, or keep the "
                "session warm with a cheap request before the TTL runs out.")
    return ("Keep requests of a session within the provider's retention, or use its extended "
            "retention where offered.")


def _provider_fix(engine: str) -> str:
    if engine == "openai":
        return ("Send a stable `prompt_cache_key` per session so requests reach the same cache "
                "machine, and keep the request rate per key under ~15 per minute.")
    if engine == "anthropic":
        return ("Put an explicit `cache_control` breakpoint at the end of the stable prefix "
                "(and at most 20 blocks back from each later breakpoint).")
    return "Keep requests of a session on one provider endpoint; caching is best effort."
