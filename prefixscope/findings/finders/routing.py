"""Sessions that hop between backends: a gateway or router sent consecutive calls of one
session, for the same model, to different backends (OpenRouter's providers, LiteLLM's
deployments, new-api's channels, a router's replicas, a raw capture's hosts), and each
backend keeps a cache of its own, so the call after a hop could not read what its
predecessor left. The ledger books that shortfall as ``routing`` (`findings.ledger.hop`);
this finder reports it, with the hops it saw and the knob of the gateway that routed them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence

from prefixscope.engines import ENGINES
from prefixscope.findings.evidence import Evidence
from prefixscope.findings.finders.base import EXAMPLES, count, finding
from prefixscope.findings.model import Finding
from prefixscope.findings.pinning import pin_backend, pin_line
from prefixscope.model import UsageRecord

KIND = "backend-hop"


def find(ev: Evidence) -> Iterator[Finding]:
    if ev.ledger is None:
        return
    entries = [e for e in ev.ledger.entries if e.causes.get("routing") and e.hop]
    if not entries:
        return
    by_id = {r.id: r for r in ev.records}
    tokens = sum(e.causes["routing"] for e in entries)
    priced = [e.lost_usd["routing"] for e in entries if "routing" in e.lost_usd]
    worst = sorted(entries, key=lambda e: -e.causes["routing"])
    hops: Counter[str] = Counter()
    hop_tokens: Counter[str] = Counter()
    for e in entries:
        assert e.hop is not None
        name = f"{e.hop[0]} -> {e.hop[1]}"
        hops[name] += 1
        hop_tokens[name] += e.causes["routing"]
    gateway = gateway_of([by_id[e.id] for e in entries if e.id in by_id])
    sessions = {e.session for e in entries}
    backends = {b for e in entries if e.hop for b in e.hop}
    evidence: dict[str, object] = {
        "requests": len(entries),
        "sessions": len(sessions),
        "backends": sorted(backends),
        "hops": {name: {"requests": n, "tokens": hop_tokens[name]}
                 for name, n in hops.most_common()},
        "example_requests": [e.id for e in worst[:EXAMPLES]],
        "tokens_per_request_max": worst[0].causes["routing"],
        "gateway": gateway,
    }
    usd = sum(priced) if priced else None
    money = f" (${usd:,.2f} at list prices)" if usd is not None else ""
    top = hops.most_common(1)[0][0]
    title = (f"{count(len(sessions), 'session')} hopped between backends before "
             f"{count(len(entries), 'request')} ({top}"
             f"{', …' if len(hops) > 1 else ''}): each backend keeps its own cache, so "
             f"{tokens:,} tokens its predecessor had cached were written again{money}")
    remedy = fix(gateway)
    pinned = pin_backend(ev.ledger, ev.records)
    line = pin_line(pinned)
    remedy += f" Priced on this log (`--what-if pin-backend`): {line.detail}."
    if line.net_usd is not None:
        evidence["what_if"] = {line.name: round(line.net_usd, 6)}
    yield finding(KIND, title, tokens, evidence, remedy, lost_usd=usd)


def gateway_of(records: Sequence[UsageRecord]) -> str | None:
    """Which gateway routed these calls, where the log says: its format, or a raw
    capture's host (OpenRouter's)."""
    formats = {r.source_format for r in records}
    if formats == {"raw"} and records and all("openrouter" in (r.channel or "")
                                              for r in records):
        return "openrouter"
    return next(iter(formats)) if len(formats) == 1 else None


def fix(gateway: str | None) -> str:
    """Keep a session on one backend, with the routing gateway's own knob."""
    known = {
        "openrouter": "Keep the session on one provider: OpenRouter's provider sticky routing "
                      "does so for a cached prompt unless `provider.order` is set (then the "
                      "order decides) or the provider fails over; to pin it, "
                      "`provider.order` with `allow_fallbacks: false` (a fallback is a cold "
                      "cache).",
        "litellm": "Keep a session on the deployment that cached it: LiteLLM's router "
                   "`optional_pre_call_checks: [\"session_affinity\"]` (a session sent as "
                   "`x-litellm-session-id` stays on its deployment; `deployment_affinity` "
                   "pins per API key, `responses_api_deployment_check` a Responses chain) "
                   "with `deployment_affinity_ttl_seconds` at least the cache's TTL, or "
                   "`prompt_caching` (sends a cached prompt back to the deployment it was "
                   "written on), instead of the `routing_strategy` shuffling a model group's "
                   "deployments per call.",
        "new-api": "Turn on channel affinity (`channel_affinity_setting`: a rule keyed on "
                   "the session id or `prompt_cache_key` keeps a session on the channel that "
                   "served it) instead of weighted-random channel selection; on a multi-key "
                   "channel (each key an account with a cache of its own), "
                   "`multi_key_mode: \"affinity\"` instead of random or polling keys.",
        "bifrost": "Keep a session on the provider and key that served it: Bifrost's "
                   "session affinity does so for every request that carries a session id "
                   "(`x-bf-session-id`, or the session header of Claude Code, Codex or "
                   "OpenCode it adopts); without one, a fallback or weighted key selection "
                   "moves the session to a cold cache.",
        "cline": "Use one API provider for the task: the same model through another provider "
                 "has another cache.",
    }
    keyed = ", ".join(f"`{s.session_key}` on {s.label}" for s in ENGINES.values()
                      if s.session_key is not None)
    return known.get(gateway or "", (
        "Keep each session on one backend: session-sticky routing (a consistent hash of "
        f"the session id{', or ' + keyed if keyed else ''}) in the gateway or router; "
        "fallbacks and load balancing across backends of the same model start a cold "
        "cache."))

