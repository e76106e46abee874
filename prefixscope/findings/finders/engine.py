"""What the inference engine's own log says (vLLM / SGLang logs, Prometheus dumps), from
`analyses.engine_cache`: a write-only offload tier (``l2-write-only``) and the other facts
the engine reports about its cache (``engine-log``).

The engine's figures are aggregates without sessions, so these findings carry no lost
tokens of their own: they explain the misses the replay counts.
"""

from __future__ import annotations

from collections.abc import Iterator

from prefixscope.findings.evidence import Evidence
from prefixscope.findings.finders.base import finding
from prefixscope.findings.model import Finding


def find(ev: Evidence) -> Iterator[Finding]:
    analysis = ev.engine_log
    if analysis is None:
        return
    for fact in analysis.findings:
        kind = "l2-write-only" if fact.kind == "l2-write-only" else "engine-log"
        evidence = {"engine_log_kind": fact.kind, "files": list(analysis.files), **fact.evidence}
        yield finding(kind, fact.title, 0, evidence, fact.fix,
                      severity="medium" if kind == "l2-write-only" else "low")
