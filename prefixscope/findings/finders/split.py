"""A part of the traffic that caches far worse than the rest (bucket by one dimension) -- a lens.

For each dimension the log distinguishes (source, endpoint, model, client, channel), a
group holding at least `MIN_SHARE` of the prompt tokens whose token-weighted hit rate is
at least `GAP` below the rest's is a finding. It is a view of the ledger, not a cause: it
names the causes of that group's missed tokens (``attributed_to``, and the tokens it shows
of each) and claims none of its own.
"""

from __future__ import annotations

from collections.abc import Iterator

from prefixscope.analyses.bucket import BucketGroup
from prefixscope.findings.evidence import Evidence
from prefixscope.findings.finders.base import finding, pct
from prefixscope.findings.ledger import LOSSES
from prefixscope.findings.model import Finding
from prefixscope.model import UsageRecord

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
        ids = [r.id for r in ev.records if r.duplicate_of is None and _value(r, dim) == value]
        shown = ev.ledger.tokens_of(ids) if ev.ledger is not None else {}
        losses = {c: n for c, n in sorted(shown.items(), key=lambda kv: -kv[1])
                  if c in LOSSES}
        evidence: dict[str, object] = {
            "dimension": dim, "value": value, "requests": group.requests,
            "prompt_tokens": group.prompt_tokens, "hit_rate": rate,
            "rest_hit_rate": rest_rate, "zero_cached_requests": group.zero_cached,
            "attributed_to": list(losses), "shows_tokens": sum(losses.values()),
            "shows_tokens_by_cause": losses}
        if also:
            evidence["also"] = also
        causes = ", ".join(f"{c} {n:,}" for c, n in list(losses.items())[:3])
        yield finding(
            "low-hit-rate-dimension",
            f"{dim} {_shown(value)} caches {pct(rate)} of its prompt tokens, the rest "
            f"{pct(rest_rate)}", 0, evidence,
            (f"Its missed tokens are the ledger's {causes}: the findings for those causes "
             "say what to change. " if losses else "") +
            f"`prefixscope diff --all` and `prefixscope segments --by {dim}` show what "
            "changes in its prompts.")


_FIELD = {"source": "source_format"}


def _value(record: UsageRecord, dim: str) -> object:
    return getattr(record, _FIELD.get(dim, dim), None)


def _shown(value: object) -> str:
    return "(not logged)" if value is None else str(value)
