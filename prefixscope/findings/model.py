"""The report's values: findings ranked by the prompt tokens they cost, and the gate."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prefixscope.findings.evidence import Evidence

# Every kind a finder may produce (docs/report.md explains each and its fix).
KINDS = (
    "volatile-prefix-segment", "json-key-order", "tool-order", "tool-set-change",
    "history-rewrite", "template-divergence", "model-change", "compaction",
    "eviction-pressure", "ttl-expiry", "provider-miss", "pinned-constant",
    "usage-semantics", "l2-write-only", "engine-log", "low-hit-rate-dimension",
    "truncated-bodies", "bad-records",
)
SEVERITIES = ("high", "medium", "low", "info")


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing costing cache: what, where, how much, the evidence, the fix."""

    kind: str  # one of KINDS
    severity: str  # one of SEVERITIES
    title: str  # one line a person understands
    segment: str | None  # the request part to blame, when one is
    lost_tokens: int  # prompt tokens it cost (0: a data-quality or overhead finding)
    share: float  # lost_tokens / all prompt tokens
    evidence: Mapping[str, Any]  # JSON-able numbers, example ids, short excerpts
    fix: str  # the concrete change, priced when a replay can price it
    fix_hit_rate: float | None = None  # the predicted hit rate after the fix


@dataclass(frozen=True, slots=True)
class Summary:
    """The whole log in numbers: hit rate as observed, as a replay predicts, at best."""

    requests: int
    sessions: int
    prompt_tokens: int  # every prompt token the log reports (each call once)
    cached_tokens: int  # every cached token the log reports
    # observed, token-weighted, over the calls reporting both (None: no cache reported)
    hit_rate: float | None
    hit_rate_predicted: float | None  # the replay's (engine below), None without one
    hit_rate_ideal: float | None  # unlimited capacity, no TTL
    engine: str | None = None  # the cache model replayed
    replayed_requests: int = 0
    replayed_prompt_tokens: int = 0  # the basis of every finding's share


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
class Report:
    summary: Summary
    findings: tuple[Finding, ...]  # most lost tokens first
    gate: Gate
    scenarios: tuple[ScenarioPrefix, ...] = ()
    notes: tuple[str, ...] = ()  # what could not be analysed, and why
    evidence: Evidence | None = None  # what the findings came from (the HTML plots it)
