"""Breakage: consecutive turns of a session whose prompts diverge before the new turn.

Every diffed pair with a breaking cause (not append-only, identical or a compaction, which
the misses finder reports) is grouped by the finding kind its cause maps to and the part
of the request to blame; the lost tokens are the ledger's ``break`` tokens of those
requests (what the previous turn had sent after the divergence, in the log's count), so
no two findings claim a token. A what-if the replay priced for the
cause (strip the billing header, sort JSON keys) gives the fix its expected hit rate.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterator

from prefixscope.analyses.diff import PairDiff
from prefixscope.findings.evidence import Evidence
from prefixscope.findings.finders.base import EXAMPLES, count, excerpt, finding, pct
from prefixscope.findings.ledger import blamed_segment, break_kind
from prefixscope.findings.model import Finding
from prefixscope.prompt.whatif import BILLING_PREFIX

# Claude Code's billing header (`prompt.whatif.BILLING_PREFIX`, its name) or its value
_BILLING = re.compile(rf"\bcch=|{re.escape(BILLING_PREFIX.rstrip(':'))}", re.I)


def find(ev: Evidence) -> Iterator[Finding]:
    if ev.diff is None or ev.ledger is None:
        return
    groups: dict[tuple[str, str | None], list[PairDiff]] = defaultdict(list)
    for pair in ev.diff.pairs:
        kind = break_kind(pair)
        if kind is not None:
            groups[(kind, blamed_segment(kind, pair))].append(pair)
    # What each group costs is the ledger's: its requests' `break` tokens.
    tokens: Counter[tuple[str, str | None]] = Counter()
    usd: dict[tuple[str, str | None], float] = defaultdict(float)
    priced: set[tuple[str, str | None]] = set()
    for e in ev.ledger.entries:  # (a break the log records is the recorded finder's)
        if e.causes.get("break") and e.break_kind is not None and e.recorded is None:
            key = (e.break_kind, e.break_segment)
            tokens[key] += e.causes["break"]
            if "break" in e.lost_usd:
                usd[key] += e.lost_usd["break"]
                priced.add(key)
    in_basis = {e.id for e in ev.ledger.entries}
    diffed = len(ev.diff.pairs)
    change_rate = {s.segment: s.change_rate for report in ev.segments for s in report.segments}
    for key, pairs in groups.items():
        outside = sum(p.b not in in_basis for p in pairs)
        if not tokens[key] and not outside:
            continue  # a divergence inside the last partial block: it cost nothing
        yield _finding(ev, key[0], key[1], pairs, diffed, change_rate, tokens[key],
                       usd[key] if key in priced else None, outside)


def _finding(ev: Evidence, kind: str, segment: str | None, pairs: list[PairDiff], diffed: int,
             change_rate: dict[str, float | None], lost: int, lost_usd: float | None,
             outside: int) -> Finding:
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
        "rendered_lost_tokens": sum(p.lost_tokens for p in pairs),
    }
    if outside:
        evidence["pairs_outside_basis"] = outside
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
    if outside:
        title += (f" ({count(outside, 'turn')} outside the basis: no cache reported, "
                  "not in the token count)")
    return finding(kind, title, lost, evidence, fix, segment=segment,
                   fix_hit_rate=priced[1] if priced else None, lost_usd=lost_usd,
                   severity="" if lost else "info")


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
            return (f"Strip the `{BILLING_PREFIX}` system block before the upstream "
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
