"""A part of the traffic that caches far worse than the rest (bucket by one dimension).

For each dimension the log distinguishes (source, endpoint, model, client, channel), a
group holding at least `MIN_SHARE` of the prompt tokens whose token-weighted hit rate is
at least `GAP` below the rest's is a finding; the tokens it costs are what it would have
cached at the rest's rate.
"""

from __future__ import annotations

from collections.abc import Iterator

from prefixscope.analyses.bucket import BucketGroup
from prefixscope.findings.evidence import Evidence
from prefixscope.findings.finders.base import finding, pct
from prefixscope.findings.model import Finding

MIN_SHARE = 0.05
GAP = 0.2


def find(ev: Evidence) -> Iterator[Finding]:
    # The same requests under several dimensions (one client, one model, one channel) are
    # one finding naming the others: keyed by the group's numbers.
    found: dict[tuple[int, int, int], tuple[str, object, float, float, BucketGroup,
                                            list[dict[str, object]]]] = {}
    for report in ev.by_dimension:
        total_prompt = sum(g.prompt_tokens for g in report.groups)
        total_cached = sum(g.cached_tokens for g in report.groups)
        if not total_prompt:
            continue
        for group in report.groups:
            rest_prompt = total_prompt - group.prompt_tokens
            if group.hit_rate is None or not rest_prompt:
                continue
            rest_rate = (total_cached - group.cached_tokens) / rest_prompt
            if group.prompt_tokens / total_prompt < MIN_SHARE or \
                    rest_rate - group.hit_rate < GAP:
                continue
            dim, value = next(iter(group.key.items()))
            key = (group.requests, group.prompt_tokens, group.cached_tokens)
            if key in found:
                found[key][5].append({"dimension": dim, "value": value})
            else:
                found[key] = (dim, value, group.hit_rate, rest_rate, group, [])
    for dim, value, rate, rest_rate, group, also in found.values():
        evidence: dict[str, object] = {
            "dimension": dim, "value": value, "requests": group.requests,
            "prompt_tokens": group.prompt_tokens, "hit_rate": rate,
            "rest_hit_rate": rest_rate, "zero_cached_requests": group.zero_cached}
        if also:
            evidence["also"] = also
        yield finding(
            "low-hit-rate-dimension",
            f"{dim} {_shown(value)} caches {pct(rate)} of its prompt tokens, the rest "
            f"{pct(rest_rate)}", int(group.prompt_tokens * (rest_rate - rate)), evidence,
            f"Look at this {dim}'s requests first: `prefixscope diff --all` and "
            f"`prefixscope segments --by {dim}` show what changes in its prompts.")


def _shown(value: object) -> str:
    return "(not logged)" if value is None else str(value)
