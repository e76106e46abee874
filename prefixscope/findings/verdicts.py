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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from prefixscope.findings.ledger import LOSSES, Ledger, LedgerEntry

# The provider's reason -> prefixscope's causes that say the same thing.
AGREES: Mapping[str, frozenset[str]] = {
    "model_changed": frozenset({"break:model-change"}),
    "tools_changed": frozenset({"break:tool-set-change", "break:tool-order",
                                "break:json-key-order"}),
    "system_changed": frozenset({"break:client-upgrade", "break:volatile-prefix-segment",
                                 "break:template-divergence"}),
    "messages_changed": frozenset({"compaction", "break:truncation", "break:history-rewrite"}),
    "previous_message_not_found": frozenset({"ttl", "eviction"}),
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
class Reconciliation:
    """prefixscope's cause x the provider's reason over the calls that carry a verdict."""

    calls: int  # basis calls that carry a verdict
    compared: int  # of them, with a reason `AGREES` knows (not ``unavailable``)
    agree: int  # of those, where prefixscope's cause says the same
    matrix: Mapping[str, Mapping[str, int]]  # our cause -> provider reason -> calls
    provider_missed_tokens: int = 0  # the verdicts' cache_missed_input_tokens, summed
    lost_tokens: int = 0  # the ledger's lost tokens (not cold, new, rounding) of those calls


def cause_label(entry: LedgerEntry) -> str:
    """The call's largest loss (``break:<kind>`` for a break), else ``none``."""
    losses = {c: entry.causes[c] for c in LOSSES if entry.causes.get(c)}
    if not losses:
        return "none"
    top = max(losses, key=lambda c: (losses[c], -LOSSES.index(c)))
    return f"break:{entry.break_kind or 'unknown'}" if top == "break" else top


def reconcile(ledger: Ledger | None,
              verdicts: Mapping[str, tuple[str, int | None]]) -> Reconciliation:
    """The reconciliation over `ledger`'s entries that `verdicts` (request id -> (reason,
    missed tokens)) has a verdict for."""
    pairs: Counter[tuple[str, str]] = Counter()
    theirs_tokens = ours_tokens = 0
    for e in ledger.entries if ledger is not None else ():
        if e.id in verdicts:
            pairs[(cause_label(e), verdicts[e.id][0])] += 1
            theirs_tokens += verdicts[e.id][1] or 0
            ours_tokens += sum(e.causes.get(c, 0) for c in LOSSES)
    matrix: dict[str, dict[str, int]] = {}
    for (ours, theirs), n in sorted(pairs.items()):
        matrix.setdefault(ours, {})[theirs] = n
    compared = sum(n for (_, theirs), n in pairs.items() if theirs in AGREES)
    agree = sum(n for (ours, theirs), n in pairs.items()
                if theirs in AGREES and ours in AGREES[theirs])
    return Reconciliation(sum(pairs.values()), compared, agree, matrix, theirs_tokens,
                          ours_tokens)
