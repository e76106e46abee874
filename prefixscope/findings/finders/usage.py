"""Usage numbers that do not mean what they seem (the usage lint, `analyses.usage_lint`,
and what only a render can show).

Each lint issue becomes a ``usage-semantics`` finding: it costs no cache by itself, but a
hit rate computed over such numbers is wrong, and some (input tokens that include cache
reads) make clients compact early. With bodies, one more check needs the rendered prompt:
Anthropic-protocol usage whose ``input_tokens`` alone is the whole rendered prompt while
cache reads are reported too is the cache-inclusive ``input_tokens`` of a converting
gateway -- flagged even when the log names no gateway.
"""

from __future__ import annotations

from collections.abc import Iterator

from prefixscope.findings.evidence import Evidence
from prefixscope.findings.finders.base import EXAMPLES, count, finding
from prefixscope.findings.model import Finding
from prefixscope.model.protocols import PROTOCOLS, makers


def find(ev: Evidence) -> Iterator[Finding]:
    lint = ev.usage_lint
    flagged: set[str] = set()
    if lint is not None:
        for issue in lint.issues:
            evidence = {"check": issue.kind, "requests": issue.requests,
                        "tokens": issue.tokens,
                        "example_requests": list(issue.examples[:EXAMPLES]), **issue.evidence}
            if issue.kind == "input-includes-cache-reads":
                flagged.add("gateway")
            yield finding("usage-semantics", issue.title, 0, evidence, issue.fix,
                          severity="info")
    if "gateway" not in flagged:
        found = _inclusive_by_render(ev)
        if found is not None:
            yield found


def _inclusive_by_render(ev: Evidence) -> Finding | None:
    """The calls `ledgering.cache_inclusive_input` found: input_tokens held the reads."""
    if not ev.inclusive_input:
        return None
    ids = set(ev.inclusive_input)
    hit = [r for r in ev.records if r.id in ids]
    rendered = {r.id: r.prompt_tokens for replay in ev.replays
                for r in replay.report.per_request if r.id in ids}
    reads = sum(r.cached_tokens or 0 for r in hit)
    maker = makers([r.endpoint for r in hit])
    convention = "; ".join(dict.fromkeys(
        p.uncached_input for r in hit if (p := PROTOCOLS.get(r.endpoint)) and p.uncached_input))
    n = count(len(hit), f"{maker}-protocol call")
    return finding(
        "usage-semantics",
        f"{n} report input_tokens as large as the whole rendered prompt and cache reads "
        f"besides: the input_tokens include the {reads:,} cache-read tokens (a cache-inclusive "
        "upstream behind a converting gateway), so the logged prompt counts them twice",
        0, {"check": "input-includes-cache-reads-by-render", "requests": len(hit),
            "cache_read_tokens": reads,
            "input_tokens": sum((r.prompt_tokens or 0) - (r.cached_tokens or 0)
                                - (r.cache_write_tokens or 0) for r in hit),
            "rendered_prompt_tokens": sum(rendered.values()),
            "example_requests": [r.id for r in hit[:EXAMPLES]]},
        f"Make the gateway answer {maker} clients in {maker}'s convention ({convention}). "
        "A client that adds the cache reads to input_tokens (Claude Code) over-counts its "
        "context by them and compacts early, which rewrites the prefix again. The report "
        "counts these prompts once (as input_tokens alone).",
        severity="medium")
