"""Pinned constants: many requests cache exactly the same number of tokens.

A spike in the cached-token histogram (bucket) means those requests' prompts agree up to
one place and never beyond; bucket maps the constant to the template boundary it is
(``floor(boundary / block) * block``). The tokens it costs are what each such request's
session predecessor had already sent beyond the constant (sent before, not cached) --
measurable from usage alone, which is why this finding also works on logs without bodies.
"""

from __future__ import annotations

from collections.abc import Iterator

from prefixscope.analyses.bucket import Boundary, BucketGroup, Spike, describe_boundary
from prefixscope.findings.evidence import Evidence
from prefixscope.findings.finders.base import EXAMPLES, finding
from prefixscope.findings.model import Finding

_MIN_SHARE = 0.05  # a spike smaller than this share of the requests is not a pattern


def find(ev: Evidence) -> Iterator[Finding]:
    prev_prompt: dict[str, int | None] = {}
    last: dict[str, int | None] = {}
    for r in ev.records:  # time order; a second log of a call is not its predecessor
        if r.session is not None and r.duplicate_of is None:
            prev_prompt[r.id] = last.get(r.session)
            last[r.session] = r.prompt_tokens
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
        yield _finding(ev, value, spike, group, sources, prev_prompt)


def _finding(ev: Evidence, value: int, spike: Spike, group: BucketGroup, sources: list[str],
             prev_prompt: dict[str, int | None]) -> Finding:
    at = [r for r in ev.records if r.cached_tokens == value and r.duplicate_of is None
          and r.source_format in sources]
    lost = 0
    for r in at:
        before = prev_prompt.get(r.id)
        if before is not None and r.prompt_tokens is not None:
            lost += max(0, min(before, r.prompt_tokens) - value)
    block = group.block_size
    evidence: dict[str, object] = {
        "cached_tokens": value, "requests": len(at), "share_of_requests": spike.share,
        "sources": sources, "block_size": block, "blocks": spike.blocks,
        "example_requests": [r.id for r in at[:EXAMPLES]], "explanation": spike.explanation,
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
        f"{blocks}: the cache stops at {where}", lost, evidence,
        _fix(spike.boundary, where), segment=segment)


def _fix(boundary: Boundary | None, where: str) -> str:
    """What to change, by what the segment after the boundary does in those requests."""
    if boundary is None:
        return ("Render one of these requests (`prefixscope render`) with the upstream's "
                "tokenizer to see which segment ends at this token.")
    n, distinct = boundary.requests, boundary.distinct_after
    if distinct is not None and distinct == n and n > 1:
        return (f"{where} changes in every request: make it identical across turns (the "
                "divergence findings show the changing value).")
    if distinct is not None and distinct > 1:
        return (f"The prefix before {where} is shared by {distinct} different sessions or "
                "prompts and stays cached; each one's own part after it does not survive to "
                "its next turn: look at the eviction and divergence findings for why.")
    return (f"{where} is the same in these requests: what breaks the cache comes later in "
            "the prompt or is not in the logged body (render one with `prefixscope render`).")
