"""The finders: one module per family of findings, each a ``find(evidence)`` yielding
`Finding` values (share and severity left for `build` to fill unless a finder knows
better). ``FINDERS`` is the registry: a new family is one module and one line here."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prefixscope.findings.evidence import Evidence
from prefixscope.findings.finders import (
    breakage,
    constants,
    data,
    disagreement,
    engine,
    recorded,
    replay,
    routing,
    split,
    usage,
)
from prefixscope.findings.model import Finding

Finder = Callable[[Evidence], Iterable[Finding]]

FINDERS: tuple[Finder, ...] = (
    breakage.find,  # where consecutive turns diverge (diff causes)
    recorded.find,  # changes the log records (model, client version, tools, truncation)
    replay.find,  # eviction, TTL, provider misses, compaction (the cache replay)
    routing.find,  # a session's calls served by different backends (gateway routing)
    constants.find,  # cached values pinned at a constant (bucket spikes)
    split.find,  # a part of the traffic that caches far worse (bucket by dimension)
    usage.find,  # usage numbers that mean something else than they seem (usage lint)
    engine.find,  # what the engine's own log says (engine-log)
    data.find,  # records that could not be read, bodies cut by the logger
    disagreement.find,  # the provider's verdict and prefixscope's cause disagree
)
