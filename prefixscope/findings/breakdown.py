"""ccusage-style views: the ledger by day, session, project or model -- tokens, hit rate,
spend and lost dollars per row, the rows summing to the ledger's totals.

`breakdown` groups a ledger's entries (the basis) by the `--by` dimensions: report's
``--by``, and bucket's ``--by`` spend, which is the report's own ledger (prompts diffed,
every missed token attributed), so both commands name the same cause for the same loss.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from prefixscope.analyses.dimensions import check_dimensions, dimension_value
from prefixscope.findings.ledger import LOSSES, Ledger, LedgerEntry
from prefixscope.model import UsageRecord


@dataclass(frozen=True, slots=True)
class BreakdownRow:
    key: dict[str, object]  # dimension -> value (None: the log does not say)
    requests: int
    prompt_tokens: int
    cached_tokens: int
    missed_tokens: int
    lost_tokens: int  # the loss causes' tokens (not cold, new, rounding)
    spend_usd: float | None  # None: no request of the row is priced
    lost_usd: float | None
    top_cause: str | None  # the loss cause with the most tokens

    @property
    def hit_rate(self) -> float | None:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None


@dataclass(frozen=True, slots=True)
class Breakdown:
    by: tuple[str, ...]
    rows: tuple[BreakdownRow, ...]  # most prompt tokens first (by day first: in date order)
    basis: str  # the ledger's basis source


def breakdown(ledger: Ledger, records: Sequence[UsageRecord], by: Sequence[str]
              ) -> Breakdown:
    """The ledger's entries grouped by `by`.

    Raises:
        ValueError: an unknown dimension.
    """
    check_dimensions(by)
    of = {r.id: r for r in records}
    groups: dict[tuple[object, ...], list[LedgerEntry]] = defaultdict(list)
    for e in ledger.entries:
        r = of[e.id]
        groups[tuple(dimension_value(d, r, r.session) for d in by)].append(e)
    rows = []
    for key, entries in groups.items():
        causes: Counter[str] = Counter()
        lost_usd = 0.0
        priced = [e for e in entries if e.id in ledger.prices]
        for e in entries:
            causes.update(e.causes)
            lost_usd += sum(e.lost_usd.values())
        losses = {c: causes[c] for c in LOSSES if causes[c]}
        rows.append(BreakdownRow(
            dict(zip(by, key, strict=True)), len(entries),
            sum(e.prompt_tokens for e in entries), sum(e.cached_tokens for e in entries),
            sum(e.missed_tokens for e in entries), sum(losses.values()),
            sum(ledger.prices[e.id].spend_usd for e in priced) if priced else None,
            lost_usd if priced else None, max(losses, key=losses.__getitem__) if losses
            else None))
    if by and by[0] == "day":  # a calendar: days in order
        rows.sort(key=lambda r: (r.key["day"] is None, str(r.key["day"]), -r.prompt_tokens))
    else:
        rows.sort(key=lambda r: (-r.prompt_tokens, str(r.key)))
    return Breakdown(tuple(by), tuple(rows), ledger.basis.source)
