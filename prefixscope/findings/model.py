"""The report's values: findings ranked by the prompt tokens they cost, and the gate."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from prefixscope.findings.breakdown import Breakdown
from prefixscope.findings.ledger import Basis, Ledger, Money
from prefixscope.findings.values import Evidence, Policy

# Every kind a finder may produce (docs/report.md explains each and its fix).
KINDS = (
    "volatile-prefix-segment", "json-key-order", "tool-order", "tool-set-change",
    "history-rewrite", "template-divergence", "model-change", "settings-change",
    "client-upgrade", "truncation",
    "compaction", "caching-not-requested", "backend-hop",
    "eviction-pressure", "ttl-expiry", "provider-miss", "pinned-constant",
    "below-minimum", "unexplained-miss", "usage-semantics", "l2-write-only", "engine-log",
    "low-hit-rate-dimension", "truncated-bodies", "bad-records", "verdict-disagreement",
)
# Kinds that look at the misses from another angle (a pinned constant, a part of the
# traffic): they name the ledger causes they show (`evidence["attributed_to"]`) and claim
# no tokens of their own.
LENS_KINDS = frozenset({"pinned-constant", "low-hit-rate-dimension", "verdict-disagreement"})
SEVERITIES = ("high", "medium", "low", "info")
HIGH_SHARE = 0.05  # a finding costing this share of all prompt tokens is high severity
MEDIUM_SHARE = 0.01
# The significance floor: a cause finding whose requests lost fewer than this many tokens
# each on average (the smallest prefix a hosted API caches: Anthropic's and OpenAI's
# 1,024) and fewer than `FLOOR_TOTAL_TOKENS` in all is `low` whatever its share -- its
# tokens stay in the ledger, but a few hundred tokens a request on a small log are noise,
# not a medium finding (docs/report.md#severity).
FLOOR_TOKENS_PER_REQUEST = 1_024
FLOOR_TOTAL_TOKENS = 10 * FLOOR_TOKENS_PER_REQUEST
# The reading order's groups, in the order every view lists them (`reading_group`): the
# causes (a cost or a severity of their own), the lenses (they show causes' tokens and
# claim none), then what costs nothing.
READING_GROUPS = ("cause", "lens", "info")


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing costing cache: what, where, how much, the evidence, the fix."""

    kind: str  # one of KINDS
    severity: str  # one of SEVERITIES
    title: str  # one line a person understands
    segment: str | None  # the request part to blame, when one is
    lost_tokens: int  # missed tokens of the ledger it accounts for (0: a lens, data quality)
    share: float  # lost_tokens / the basis's prompt tokens
    evidence: Mapping[str, Any]  # JSON-able numbers, example ids, short excerpts
    fix: str  # the concrete change, priced when a replay can price it
    fix_hit_rate: float | None = None  # the predicted hit rate after the fix
    lost_usd: float | None = None  # what those tokens cost beyond cache reads (None: unpriced)


def reading_group(finding: Finding) -> str:
    """The finding's group in the reading order (`READING_GROUPS`): ``info`` for what costs
    nothing, else ``lens`` for a lens, else ``cause``."""
    if finding.severity == "info":
        return "info"
    return "lens" if finding.kind in LENS_KINDS else "cause"


def reading_order(finding: Finding) -> tuple[int, int, int, str, str]:
    """The one order every view lists findings in: the causes (findings with a cost or a
    severity of their own) severe first and, within a severity, most lost tokens first;
    then the lenses, which claim no token and follow every cause they show (severe first:
    by the share they show); then what costs nothing (info)."""
    return (READING_GROUPS.index(reading_group(finding)),
            SEVERITIES.index(finding.severity), -finding.lost_tokens, finding.kind,
            finding.segment or "")


@dataclass(frozen=True, slots=True)
class ReplayBasis:
    """The basis's requests that the replay rebuilt: observed, predicted and ideal over them."""

    requests: int
    prompt_tokens: int  # as the log counts them
    cached_tokens: int  # as the log observed them (the replay's prediction, for "predicted")
    replayed_prompt_tokens: int  # as the replay rebuilt them
    hit_rate_observed: float | None  # over these requests, as logged
    hit_rate_predicted: float | None  # the replay's, over its rebuilt prompts
    hit_rate_ideal: float | None
    with_body: int = 0  # of them, rebuilt from a logged body (the rest: from usage)
    # Over the calls that log their prompt tokens and whose body was rendered: the logged
    # prompt tokens and the rendered ones (`findings.rebuild`); None: no such call
    logged_prompt_tokens: int | None = None
    rebuilt_prompt_tokens: int = 0
    not_rebuilt: int = 0  # of the requests, prompts the log could not rebuild

    @property
    def coverage(self) -> float | None:
        """Rebuilt prompt tokens per logged prompt token, call by call (1.0: the whole
        prompt; None: no rendered call logs its prompt tokens)."""
        if not self.logged_prompt_tokens:
            return None
        return self.rebuilt_prompt_tokens / self.logged_prompt_tokens

    @property
    def partial(self) -> bool:
        """The rebuilt prompts hold clearly less than the log says was sent, or (without a
        logged count to compare) the log lacks part of them."""
        coverage = self.coverage
        if coverage is None:
            return self.not_rebuilt > 0
        return coverage < PARTIAL_COVERAGE


PARTIAL_COVERAGE = 0.9  # a rebuild holding less of the logged prompt tokens is partial


@dataclass(frozen=True, slots=True)
class Summary:
    """The whole log in numbers, every rate and total over one stated basis."""

    requests: int  # calls in the log (a call two sources logged counts once)
    sessions: int
    prompt_tokens: int  # the basis's prompt tokens
    cached_tokens: int  # the basis's cached tokens
    hit_rate: float | None  # cached / prompt tokens over the basis (None: no cache reported)
    hit_rate_predicted: float | None  # the replay's, over `replay`'s requests
    hit_rate_ideal: float | None  # unlimited capacity, no TTL, over the same
    engine: str | None = None  # the cache model replayed
    replayed_requests: int = 0  # of the basis
    replayed_prompt_tokens: int = 0
    basis: Basis | None = None
    replay: ReplayBasis | None = None
    money: Money | None = None


@dataclass(frozen=True, slots=True)
class GateCheck:
    """One CI check: a value against its threshold."""

    name: str
    passed: bool
    value: float | int | None
    threshold: float | int | None
    detail: str  # one line: what was measured and why it passed or failed


@dataclass(frozen=True, slots=True)
class Gate:
    passed: bool
    checks: tuple[GateCheck, ...]


@dataclass(frozen=True, slots=True)
class ScenarioPrefix:
    """A recorded scenario's stable prefix: the tokens every turn shares with the next."""

    scenario: str  # the session id as logged, else "<file>#<n>"
    turns: int
    stable_prefix_tokens: int  # min over consecutive pairs of the shared prefix


@dataclass(frozen=True, slots=True)
class WhatIfLine:
    """A what-if priced over the log: a render transform's replayed gain, or a TTL choice's
    dollars."""

    name: str
    detail: str  # one line: what it gains or costs
    gain_tokens: int | None = None  # a render transform: cached tokens the replay gains
    hit_rate_predicted: float | None = None  # a render transform: the replay's rate after it
    saved_usd: float | None = None  # a TTL choice: the expired tokens it keeps, in dollars
    cost_usd: float | None = None
    net_usd: float | None = None
    policy: Policy | None = None  # --what-if policy: the choice per kind of request


@dataclass(frozen=True, slots=True)
class Report:
    summary: Summary
    findings: tuple[Finding, ...]  # most lost tokens first
    gate: Gate
    scenarios: tuple[ScenarioPrefix, ...] = ()
    notes: tuple[str, ...] = ()  # what could not be analysed, and why
    evidence: Evidence | None = None  # what the findings came from (the HTML plots it)
    ledger: Ledger | None = None  # every missed token of the basis, by cause
    what_ifs: tuple[WhatIfLine, ...] = ()  # asked for with --what-if (TTL choices: always)
    breakdown: Breakdown | None = None  # the ledger by --by dimensions
