"""Pinned constants: many requests cache exactly the same number of tokens -- a lens.

A spike in the cached-token histogram (bucket) means those requests' prompts agree up to
one place and never beyond; bucket maps the constant to the template boundary it is
(``floor(boundary / block) * block``). The constant is not a cause: the ledger has already
attributed every missed token of those requests (a break after the constant, a prefix that
expired or was evicted beyond the part other traffic kept warm). The finding names those
causes (``attributed_to``, the tokens it shows of each) and claims no tokens of its own, so
it never counts a token its cause's finding counts.
"""

from __future__ import annotations

from collections.abc import Iterator

from prefixscope.analyses.bucket import Boundary, BucketGroup, Spike, describe_boundary
from prefixscope.findings.evidence import Evidence
from prefixscope.findings.finders.base import EXAMPLES, finding
from prefixscope.findings.ledger import LOSSES, Ledger
from prefixscope.findings.model import Finding

_MIN_SHARE = 0.05  # a spike smaller than this share of the requests is not a pattern
_CAUSE_WORDS = {
    "break": "the prompt changed after it",
    "ttl": "the rest expired in a pause longer than the cache's retention",
    "eviction": "the rest was evicted (the cache is too small for the traffic)",
    "compaction": "the rest was replaced by a compaction summary",
    "not-requested": "caching was never requested for the rest",
    "routing": "the rest was cached on another backend than the one that served the call",
    "provider": "the provider did not serve the rest, although it was live",
    "below-minimum": "the rest is below the minimum cacheable length",
    "unexplained": "nothing in the log explains why the rest missed",
}


def find(ev: Evidence) -> Iterator[Finding]:
    if ev.ledger is None:
        return
    # Bucket is by source: a call two logs hold shows the same spike in both; one finding.
    spikes: dict[int, tuple[Spike, BucketGroup, list[str]]] = {}
    for group in ev.bucket.groups:
        for spike in group.spikes:
            if spike.share < _MIN_SHARE or spike.cached_tokens <= 0:
                continue
            source = str(group.key.get("source", "all"))
            held = spikes.get(spike.cached_tokens)
            if held is None:
                spikes[spike.cached_tokens] = (spike, group, [source])
            else:
                held[2].append(source)
                if held[0].boundary is None and spike.boundary is not None:
                    spikes[spike.cached_tokens] = (spike, group, held[2])
    for value, (spike, group, sources) in sorted(spikes.items()):
        yield _finding(ev, ev.ledger, value, spike, group, sources)


def _finding(ev: Evidence, ledger: Ledger, value: int, spike: Spike, group: BucketGroup,
             sources: list[str]) -> Finding:
    at = [r for r in ev.records if r.cached_tokens == value and r.duplicate_of is None
          and r.source_format in sources]
    shown = ledger.tokens_of([r.id for r in at])
    losses = {c: n for c, n in sorted(shown.items(), key=lambda kv: -kv[1]) if c in LOSSES}
    block = group.block_size
    evidence: dict[str, object] = {
        "cached_tokens": value, "requests": len(at), "share_of_requests": spike.share,
        "sources": sources, "block_size": block, "blocks": spike.blocks,
        "example_requests": [r.id for r in at[:EXAMPLES]], "explanation": spike.explanation,
        "attributed_to": list(losses), "shows_tokens": sum(losses.values()),
        "shows_tokens_by_cause": losses,
    }
    segment = None
    if spike.boundary is not None:
        b = spike.boundary
        segment = b.segment_after
        evidence.update(boundary_token=b.token, segment_before=b.segment_before,
                        segment_after=b.segment_after, distinct_after=b.distinct_after)
        if block:
            evidence["explanation"] = describe_boundary(b, value, block)
    where = f"`{segment}`" if segment else "a fixed place in the prompt"
    blocks = (f" = {value // block} × {block}" if block and value % block == 0 else "")
    return finding(
        "pinned-constant",
        f"{spike.share:.0%} of {', '.join(sources)} requests cache exactly {value:,} tokens"
        f"{blocks}: the cache stops at {where}", 0, evidence,
        _fix(spike.boundary, where, losses, any(r.has_body for r in at)), segment=segment)


def _fix(boundary: Boundary | None, where: str, losses: dict[str, int], bodies: bool) -> str:
    """What the constant shows, by the causes the ledger found for those requests."""
    causes = "; ".join(_CAUSE_WORDS[c] for c in list(losses)[:2])
    shows = (f"The ledger's causes for these requests: {causes} (see those findings)."
             if losses else "These requests lost nothing beyond the unavoidable.")
    if boundary is None:
        if not bodies:  # usage alone: explain by the numbers, not by a render they lack
            return ("The first tokens up to the constant are shared with other live traffic "
                    "(the system prompt and tools), so they stayed cached; " + shows[0].lower()
                    + shows[1:])
        return (shows + " `prefixscope render` one of them to see which segment ends at this "
                "token.")
    n, distinct = boundary.requests, boundary.distinct_after
    if distinct is not None and distinct == n and n > 1:
        return f"{where} changes in every request: the cache cannot reach past it. {shows}"
    if distinct is not None and distinct > 1:
        return (f"The prefix before {where} is shared by {distinct} different sessions or "
                f"prompts and stays cached; each one's own part after it does not. {shows}")
    return f"{where} is the same in these requests: what stops the cache is later. {shows}"
