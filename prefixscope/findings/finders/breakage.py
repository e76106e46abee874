"""Breakage: consecutive turns of a session whose prompts diverge before the new turn.

Every diffed pair with a breaking cause (not append-only, identical or a compaction, which
the replay finder prices) is grouped by the finding kind its cause maps to and the part
of the request to blame; the lost tokens are the diff's (the tokens after the last
reusable block that the previous turn had sent). A what-if the replay priced for the
cause (strip the billing header, sort JSON keys) gives the fix its expected hit rate.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterator

from prefixscope.analyses.bucket import top_level_element
from prefixscope.analyses.diff import PairDiff
from prefixscope.findings.evidence import Evidence
from prefixscope.findings.finders.base import EXAMPLES, excerpt, finding, pct
from prefixscope.findings.model import Finding

KIND_OF_CAUSE = {
    "volatile-value": "volatile-prefix-segment",
    "content-change": "volatile-prefix-segment",
    "whitespace": "volatile-prefix-segment",
    "json-key-order": "json-key-order",
    "tool-order": "tool-order",
    "tool-set": "tool-set-change",
    "history-rewrite": "history-rewrite",
    "template-divergence": "template-divergence",
    "model-change": "model-change",
}
_BILLING = re.compile(r"\bcch=|x-anthropic-billing-header", re.I)
_TOOLS_KINDS = {"json-key-order", "tool-order", "tool-set-change"}


def find(ev: Evidence) -> Iterator[Finding]:
    if ev.diff is None:
        return
    groups: dict[tuple[str, str | None], list[PairDiff]] = defaultdict(list)
    for pair in ev.diff.pairs:
        kind = KIND_OF_CAUSE.get(pair.cause)
        if kind is None:
            continue
        if pair.cause == "content-change" and _in_history(pair):
            kind = "history-rewrite"  # an earlier message changed: not a prefix header
        groups[(kind, _blamed(kind, pair))].append(pair)
    diffed = len(ev.diff.pairs)
    change_rate = {s.segment: s.change_rate for report in ev.segments for s in report.segments}
    for (kind, segment), pairs in groups.items():
        yield _finding(ev, kind, segment, pairs, diffed, change_rate)


def _in_history(pair: PairDiff) -> bool:
    """The divergence is in a message after the first (the first is the system prompt in
    the OpenAI protocols, so a change there is a prefix segment's)."""
    seg = pair.first_divergence.segment if pair.first_divergence else ""
    head = seg.split(".", 1)[0]
    return head.startswith(("messages", "input")) and head not in ("messages[0]", "input[0]")


def _blamed(kind: str, pair: PairDiff) -> str | None:
    """The part of the request a group of pairs blames."""
    seg = pair.first_divergence.segment if pair.first_divergence else None
    if seg is None or kind == "model-change":
        return None
    if kind in _TOOLS_KINDS:
        return "tools"  # the tool list as a whole (its template wrapper included)
    if kind == "history-rewrite":
        return seg.split("[", 1)[0]
    return top_level_element(seg)


def _finding(ev: Evidence, kind: str, segment: str | None, pairs: list[PairDiff], diffed: int,
             change_rate: dict[str, float | None]) -> Finding:
    lost = sum(p.lost_tokens for p in pairs)
    tokens = [p.first_divergence.token for p in pairs if p.first_divergence]
    paths = Counter(p.first_divergence.segment for p in pairs if p.first_divergence)
    details = [p.detail for p in pairs if p.detail]
    billing = kind == "volatile-prefix-segment" and any(_BILLING.search(d) for d in details)
    every = billing and all(_BILLING.search(d) for d in details) and len(details) == len(pairs)
    evidence: dict[str, object] = {
        "pairs": len(pairs),
        "pairs_diffed": diffed,
        "sessions": len({p.session for p in pairs}),
        "causes": dict(Counter(p.cause for p in pairs)),
        "first_divergence_token_min": min(tokens) if tokens else None,
        "first_divergence_token_median": statistics.median(tokens) if tokens else None,
        "segments": dict(paths.most_common(5)),
        "example_pairs": [[p.a, p.b] for p in pairs[:EXAMPLES]],
        "excerpt": excerpt(details[0]) if details else None,
        "approximate": any(p.approximate for p in pairs),
    }
    rate = change_rate.get(segment) if segment else None
    if rate is not None:
        evidence["segment_change_rate"] = rate
    where = segment or "the prompt"
    causes = Counter(p.cause for p in pairs)
    transform = next((ev.what_if_of[c] for c, _ in causes.most_common() if c in ev.what_if_of),
                     None)
    priced = _priced(ev, transform) if transform and (billing or kind == "json-key-order") \
        else None
    fix = _fix(kind, where, billing, details)
    if priced is not None:
        gain, after = priced
        fix += (f" A replay with `--what-if {transform}` gains {gain:,} cached tokens: "
                f"hit rate {pct(ev.simulate.hit_rate_predicted if ev.simulate else None)} → "
                f"{pct(after)}.")
    title = _title(kind, where, len(pairs), diffed, billing, every)
    return finding(kind, title, lost, evidence, fix, segment=segment,
                   fix_hit_rate=priced[1] if priced else None)


def _priced(ev: Evidence, transform: str) -> tuple[int, float | None] | None:
    if ev.simulate is None:
        return None
    for result in ev.simulate.what_if:
        if result.transform == transform and result.gain_tokens > 0:
            return result.gain_tokens, result.hit_rate_predicted
    return None


def _title(kind: str, where: str, pairs: int, diffed: int, billing: bool, every: bool) -> str:
    share = f"{pairs} of {diffed} consecutive turns"
    return {
        "volatile-prefix-segment": (f"Claude Code's billing header (cch=…) in {where} changes "
                                    f"{'every request' if every else 'between turns'}: {share} "
                                    "lose the cache after it"
                                    if billing else
                                    f"{where} changes between turns: {share} lose the cache "
                                    "after it"),
        "json-key-order": f"tool schemas re-serialized with their JSON keys in another order "
                          f"in {share}",
        "tool-order": f"the same tools sent in another order in {share}",
        "tool-set-change": f"tools added or removed mid-session in {share}",
        "history-rewrite": f"earlier {where} rewritten (old content changed or elided) in {share}",
        "template-divergence": f"the chat template renders the same history differently in "
                               f"{share}",
        "model-change": f"the model changed between turns in {share} (a different model has "
                        "its own cache)",
    }[kind]


def _fix(kind: str, where: str, billing: bool, details: list[str]) -> str:
    if kind == "volatile-prefix-segment":
        if billing:
            return ("Strip the `x-anthropic-billing-header:` system block before the upstream "
                    "sees it (new-api's channel switch `strip_anthropic_billing_header`, or the "
                    "gateway's system-prompt rewrite).")
        example = f" (e.g. {excerpt(details[0], 60)})" if details else ""
        return (f"Keep {where} byte-identical across turns: move the changing value{example} "
                "after the conversation or into request metadata, or freeze it per session.")
    return {
        "json-key-order": "Serialize tool schemas with a fixed key order (sort keys, or keep the "
                          "client's order through the gateway: no Go map / dict round-trip).",
        "tool-order": "Send tools in a fixed order (sort by name) for the whole session.",
        "tool-set-change": "Keep the tool list fixed for a session (register every tool up "
                           "front; disable instead of removing), or put tools after the stable "
                           "prefix.",
        "history-rewrite": "Do not rewrite earlier turns (elide old tool output only at a "
                           "compaction, all at once), so each turn extends the last.",
        "template-divergence": "Use a chat template that renders earlier turns the same way "
                               "whatever follows (e.g. keep reasoning content, or strip it "
                               "client-side consistently).",
        "model-change": "Keep one model per session (route sub-tasks to their own session).",
    }[kind]
