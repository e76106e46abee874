"""Where the provider's own verdict on a miss and prefixscope's cause disagree
(`findings.verdicts`): one finding per pair (the provider's reason, prefixscope's cause)
over the calls whose reason names something prefixscope compares and whose cause does not
say the same -- e.g. the provider says ``tools_changed`` where the bodies show the tools
unchanged and the ledger books a ``provider`` miss.

A lens (`model.LENS_KINDS`): the disputed calls' missed tokens are already their ledger
cause's, so it shows them (``attributed_to``, ``shows_tokens``) and claims none. Its
severity is the finder's: by the disputed tokens (per call the larger of the two sides'
counts: the ledger's lost tokens, the provider's ``cache_missed_input_tokens``) as a share
of the basis's prompt tokens, under the significance floor the cause findings use
(`model.FLOOR_TOTAL_TOKENS`, as `build.below_floor`) ``low``. Its evidence holds both
sides, and its fix says which side's evidence is stronger and what to check.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence

from prefixscope.findings.evidence import Evidence
from prefixscope.findings.finders.base import EXAMPLES, count, finding
from prefixscope.findings.model import (
    FLOOR_TOKENS_PER_REQUEST,
    FLOOR_TOTAL_TOKENS,
    HIGH_SHARE,
    MEDIUM_SHARE,
    Finding,
)
from prefixscope.findings.verdicts import VerdictCall, reconcile

KIND = "verdict-disagreement"
# prefixscope's causes that name no change: the prefix was intact (or nothing was lost)
_NO_CHANGE = frozenset({"none", "ttl", "eviction", "provider", "unexplained",
                        "below-minimum", "routing"})
# the provider's reasons that name a request setting prefixscope does not compare
_SETTINGS = frozenset({"prompt_cache_key_changed", "service_tier_changed",
                       "text_format_changed", "reasoning_effort_changed",
                       "verbosity_changed"})
_PART = {"tools_changed": "the tools", "system_changed": "the system prompt",
         "messages_changed": "the messages", "model_changed": "the model",
         "input_changed": "the input", "context_compacted": "the context (compacted)"}


def find(ev: Evidence) -> Iterator[Finding]:
    if ev.ledger is None or not ev.verdicts:
        return
    agreed = reconcile(ev.ledger, ev.verdicts, ev.diff.pairs if ev.diff is not None else ())
    groups: dict[tuple[str, str], list[VerdictCall]] = defaultdict(list)
    for c in agreed.per_call:
        if c.agrees is False:
            groups[(c.reason, c.cause)].append(c)
    basis = ev.ledger.basis.prompt_tokens
    for (reason, cause), calls in sorted(groups.items()):
        yield _finding(reason, cause, calls, basis)


def disputed(c: VerdictCall) -> int:
    """A disputed call's tokens: the larger of the two sides' counts."""
    return max(c.lost_tokens, c.provider_missed_tokens or 0)


def _severity(tokens: int, requests: int, basis: int) -> str:
    if not tokens:
        return "info"
    if tokens < FLOOR_TOTAL_TOKENS and tokens < FLOOR_TOKENS_PER_REQUEST * max(1, requests):
        return "low"
    share = tokens / basis if basis else 0.0
    return "high" if share >= HIGH_SHARE else "medium" if share >= MEDIUM_SHARE else "low"


def _finding(reason: str, cause: str, calls: Sequence[VerdictCall], basis: int) -> Finding:
    worst = sorted(calls, key=lambda c: -disputed(c))
    tokens = sum(disputed(c) for c in calls)
    lost = sum(c.lost_tokens for c in calls)
    shown: Counter[str] = Counter()
    for c in calls:
        if c.cause_tokens:
            shown["break" if c.cause.startswith("break:") else c.cause] += c.cause_tokens
    segments = Counter(c.divergence_segment or c.segment for c in calls
                       if c.divergence_segment or c.segment)
    located = [c for c in calls if c.first_divergence_token is not None]
    evidence: dict[str, object] = {
        "requests": len(calls),
        "sessions": len({c.session for c in calls}),
        "provider_reason": reason,
        "provider_missed_tokens": sum(c.provider_missed_tokens or 0 for c in calls),
        "cause": cause,
        "kind": next((c.kind for c in calls if c.kind), None),
        "cause_tokens": sum(c.cause_tokens for c in calls),
        "lost_tokens": lost,
        "segments": dict(segments.most_common()),
        "diffed": sum(c.diffed for c in calls),
        "located": len(located),
        "disputed_tokens": tokens,
        "example_requests": [c.id for c in worst[:EXAMPLES]],
        "examples": [{"id": c.id, "provider_missed_tokens": c.provider_missed_tokens,
                      "cause_tokens": c.cause_tokens, "segment": c.segment,
                      "first_divergence_token": c.first_divergence_token,
                      "divergence_segment": c.divergence_segment, "diffed": c.diffed}
                     for c in worst[:EXAMPLES]],
        "attributed_to": list(shown),
        "shows_tokens": sum(shown.values()),
        "shows_tokens_by_cause": dict(shown),
    }
    ours = "nothing lost" if cause == "none" else cause
    title = (f"the provider says {reason} where prefixscope finds {ours} on "
             f"{count(len(calls), 'request')}: its verdicts count "
             f"{evidence['provider_missed_tokens']:,} missed tokens, the ledger {lost:,} lost")
    return finding(KIND, title, 0, evidence, _fix(reason, cause, calls),
                   severity=_severity(tokens, len(calls), basis))


def _fix(reason: str, cause: str, calls: Sequence[VerdictCall]) -> str:
    bodies = any(c.diffed for c in calls)
    part = _PART.get(reason, reason)
    if reason in _SETTINGS:
        return (f"The provider's evidence is the stronger here: it names a request setting "
                f"({reason}) prefixscope does not compare, so the ledger could only book the "
                "miss by the positions. Check that setting across the session's requests "
                "(the raw request bodies) and keep it fixed for a session.")
    if cause in _NO_CHANGE:
        if bodies:
            return (f"The provider says {part} changed; prefixscope rebuilt both bodies and "
                    "found the prompt extending its predecessor, so the change it names is "
                    "not between this session's two requests. Check what the provider "
                    "compared against: another request under the same cache key or "
                    "organisation just before (a sub-agent, a parallel session, a retry "
                    "with other tools), and `prefixscope diff` the pair to confirm the "
                    "prefix is unchanged.")
        return (f"The provider says {part} changed, and the log holds no bodies that "
                f"could show it: its verdict is the stronger evidence, and the ledger's "
                f"{cause} is a reading of the usage numbers alone. Capture the request bodies "
                "(a raw capture, a gateway that keeps them) so prefixscope can locate the "
                "change to the token and segment.")
    where = ("; the per-call first divergent token and segment "
             "(`ledger.provider_verdicts.per_call`) say where" if bodies else "")
    if reason in ("previous_message_not_found", "cache_hit"):
        return (f"prefixscope found a change ({cause}) where the provider found "
                f"{'a hit' if reason == 'cache_hit' else 'no earlier request to compare'}"
                f"{where}. Where the change is in the bodies it is the stronger evidence "
                "for what changed; the provider's reason says what its comparison could "
                "see (an expired or evicted predecessor). Check the pause before the "
                "request and `prefixscope diff` the pair.")
    return (f"prefixscope found {cause} where the provider names {part}{where}. The "
            "provider's reason is coarse (which part changed, compared with the request it "
            "matched); prefixscope's diff locates the change in this session's predecessor "
            "when both bodies exist -- the stronger evidence for where. Check the segment "
            "the diff names (`prefixscope diff`) and whether the part the provider names "
            "also changed (a tool list, a system prompt the log does not keep).")
