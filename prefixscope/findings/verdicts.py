"""The provider's own verdicts on cache misses beside prefixscope's causes.

Claude Code (>= 2.1.150) writes the API's cache diagnosis into its transcripts
(``message.diagnostics.cache_miss_reason: {"type": ..., "cache_missed_input_tokens":
...}``, kept per call at ingest); raw captures keep Anthropic's (the same object on the
response) and OpenAI Responses' ``prompt_cache_diagnostics`` (its miss ``reason``, or
``cache_hit`` / ``comparison_response_not_found`` / ``unavailable``). Over the calls of
the ledger's basis that carry one, the reconciliation counts each pair (prefixscope's
cause, the provider's reason): the cause is the call's largest loss (``break:<kind>`` for
a break), ``none`` when it lost nothing (cold, new or rounding only). A pair agrees when
the provider's reason names the change prefixscope found (`AGREES`; OpenAI's
``cache_hit`` agrees with a call that lost nothing); a reason of ``unavailable`` or
``comparison_response_not_found`` (or one this table does not know) says nothing and is
not compared. Over the same calls, the verdicts' missed tokens
(``cache_missed_input_tokens``) stand beside the ledger's lost tokens.

Each such call is listed too (`VerdictCall`): the provider's reason and missed tokens
beside prefixscope's cause, break kind and segment, and -- where prefixscope rebuilt both
bodies and the diff located the change -- the first divergent token (in the rendered
prompt's tokens) and the segment it lies in. That refines a coarse ``messages_changed``
(``system_changed``, ``tools_changed``) to the token and the message or block that changed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prefixscope.analyses.diff import PairDiff
from prefixscope.findings.ledger import LOSSES, Ledger, LedgerEntry

# The provider's reason -> prefixscope's causes that say the same thing.
AGREES: Mapping[str, frozenset[str]] = {
    "model_changed": frozenset({"break:model-change"}),
    "tools_changed": frozenset({"break:tool-set-change", "break:tool-order",
                                "break:json-key-order"}),
    "system_changed": frozenset({"break:client-upgrade", "break:volatile-prefix-segment",
                                 "break:template-divergence"}),
    "messages_changed": frozenset({"compaction", "break:truncation", "break:history-rewrite"}),
    "previous_message_not_found": frozenset({"ttl", "eviction", "routing"}),
    # OpenAI Responses' prompt_cache_diagnostics (raw captures): the instructions are part
    # of the input, so a changed input is a changed system prompt or history
    "input_changed": frozenset({"compaction", "break:truncation", "break:history-rewrite",
                                "break:client-upgrade", "break:volatile-prefix-segment",
                                "break:template-divergence"}),
    "context_compacted": frozenset({"compaction"}),
    "cache_hit": frozenset({"none"}),
    # request settings prefixscope does not compare (the reasoning effort only where the
    # log records it: Codex's turn_context): the provider names a change no cause of
    # prefixscope's can (a disagreement, with the provider's evidence)
    "prompt_cache_key_changed": frozenset(),
    "service_tier_changed": frozenset(),
    "text_format_changed": frozenset(),
    "reasoning_effort_changed": frozenset({"break:settings-change"}),
    "verbosity_changed": frozenset(),
}


@dataclass(frozen=True, slots=True)
class VerdictCall:
    """One call that carries a verdict: the provider's side beside prefixscope's."""

    id: str
    session: str | None
    reason: str  # the provider's reason
    provider_missed_tokens: int | None  # the verdict's cache_missed_input_tokens
    cause: str  # prefixscope's (`cause_label`)
    kind: str | None  # the break's kind, when it broke
    segment: str | None  # the part the ledger blames, else where the diff located a change
    lost_tokens: int  # the ledger's lost tokens of the call
    cause_tokens: int  # of them, the cause's (the call's largest loss)
    first_divergence_token: int | None  # the diff's first divergent token (rendered tokens)
    divergence_segment: str | None  # the segment that token lies in (as logged)
    agrees: bool | None  # None: the reason says nothing (`unavailable`, unknown)
    diffed: bool = False  # both bodies rebuilt and diffed with the session predecessor's


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """prefixscope's cause x the provider's reason over the calls that carry a verdict."""

    calls: int  # basis calls that carry a verdict
    compared: int  # of them, with a reason `AGREES` knows (not ``unavailable``)
    agree: int  # of those, where prefixscope's cause says the same
    matrix: Mapping[str, Mapping[str, int]]  # our cause -> provider reason -> calls
    provider_missed_tokens: int = 0  # the verdicts' cache_missed_input_tokens, summed
    lost_tokens: int = 0  # the ledger's lost tokens (not cold, new, rounding) of those calls
    per_call: tuple[VerdictCall, ...] = ()  # the calls, in the ledger's order


def cause_label(entry: LedgerEntry) -> str:
    """The call's largest loss (``break:<kind>`` for a break), else ``none``."""
    losses = {c: entry.causes[c] for c in LOSSES if entry.causes.get(c)}
    if not losses:
        return "none"
    top = max(losses, key=lambda c: (losses[c], -LOSSES.index(c)))
    return f"break:{entry.break_kind or 'unknown'}" if top == "break" else top


def agrees(cause: str, reason: str) -> bool | None:
    """prefixscope's `cause` says what the provider's `reason` does; None: the reason says
    nothing prefixscope can compare."""
    return cause in AGREES[reason] if reason in AGREES else None


def reconcile(ledger: Ledger | None,
              verdicts: Mapping[str, tuple[str, int | None]],
              pairs: Iterable[PairDiff] = ()) -> Reconciliation:
    """The reconciliation over `ledger`'s entries that `verdicts` (request id -> (reason,
    missed tokens)) has a verdict for; `pairs` (the diff's, by later request) locate the
    change where both bodies were rebuilt."""
    diff_of = {p.b: p for p in pairs}
    pairs_seen: Counter[tuple[str, str]] = Counter()
    theirs_tokens = ours_tokens = 0
    calls: list[VerdictCall] = []
    for e in ledger.entries if ledger is not None else ():
        if e.id not in verdicts:
            continue
        reason, missed = verdicts[e.id]
        ours = cause_label(e)
        pairs_seen[(ours, reason)] += 1
        theirs_tokens += missed or 0
        lost = sum(e.causes.get(c, 0) for c in LOSSES)
        ours_tokens += lost
        top = "break" if ours.startswith("break:") else ours
        pair = diff_of.get(e.id)
        div = pair.first_divergence if pair is not None else None
        calls.append(VerdictCall(
            e.id, e.session, reason, missed, ours, e.break_kind,
            e.break_segment or (div.segment if div is not None else None), lost,
            e.causes.get(top, 0), div.token if div is not None else None,
            div.segment if div is not None else None, agrees(ours, reason), pair is not None))
    matrix: dict[str, dict[str, int]] = {}
    for (ours, theirs), n in sorted(pairs_seen.items()):
        matrix.setdefault(ours, {})[theirs] = n
    compared = sum(n for (_, theirs), n in pairs_seen.items() if theirs in AGREES)
    agree = sum(n for (ours, theirs), n in pairs_seen.items()
                if theirs in AGREES and ours in AGREES[theirs])
    return Reconciliation(sum(pairs_seen.values()), compared, agree, matrix, theirs_tokens,
                          ours_tokens, tuple(calls))
