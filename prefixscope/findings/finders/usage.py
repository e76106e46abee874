"""Usage numbers that do not mean what they seem (the usage lint, `analyses.usage_lint`).

Each lint issue becomes a ``usage-semantics`` finding: it costs no cache by itself, but a
hit rate computed over such numbers is wrong, and some (input tokens that include cache
reads) make clients compact early.
"""

from __future__ import annotations

from collections.abc import Iterator

from prefixscope.findings.evidence import Evidence
from prefixscope.findings.finders.base import EXAMPLES, finding
from prefixscope.findings.model import Finding


def find(ev: Evidence) -> Iterator[Finding]:
    lint = ev.usage_lint
    if lint is None:
        return
    for issue in lint.issues:
        evidence = {"check": issue.kind, "requests": issue.requests, "tokens": issue.tokens,
                    "example_requests": list(issue.examples[:EXAMPLES]), **issue.evidence}
        yield finding("usage-semantics", issue.title, 0, evidence, issue.fix, severity="info")
