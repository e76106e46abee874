"""How much of each prompt the log let prefixscope rebuild: the rendered prompt's tokens
against the prompt tokens the log reports for the same call.

A call's prompt is **not rebuilt** when the log reports its prompt tokens and the rendered
prompt holds less than `PARTIAL_COVERAGE` of them, or, without a logged count, when ingest
says the log lacks part of it (``metadata.approximate``: no system prompt, no tools, ...).
No break position the diff finds is mapped onto such a prompt (its break is placed as a
recorded change is, ``D = C``), and on a predicted basis (the replay's own sizes) no
`below-minimum` or located break is sized on it: those tokens are ``unexplained``
(`findings.ledger`); the report's replay basis says so (``coverage``, ``partial``;
docs/report.md#the-basis).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from prefixscope.analyses.diff import PairDiff
from prefixscope.analyses.simulate import RequestSim
from prefixscope.findings.model import PARTIAL_COVERAGE
from prefixscope.model import UsageRecord


def rendered_tokens(pairs: Sequence[PairDiff], sims: Iterable[RequestSim],
                    records: Sequence[UsageRecord]) -> dict[str, int]:
    """request id -> its rendered prompt's tokens: the diff's count of its body (either side
    of a pair), else the replay's for a call with a body (a call replayed from its usage
    alone has none)."""
    out: dict[str, int] = {}
    for p in pairs:
        out.setdefault(p.a, p.tokens_a)
        out.setdefault(p.b, p.tokens_b)
    bodies = {r.id for r in records if r.has_body}
    for sim in sims:
        if sim.id in bodies:
            out.setdefault(sim.id, sim.prompt_tokens)
    return out


def not_rebuilt(records: Sequence[UsageRecord], rendered: Mapping[str, int],
                lacking: Mapping[str, Sequence[str]]) -> frozenset[str]:
    """Ids of the rendered calls whose prompt the log could not rebuild (the module
    docstring's rule)."""
    out = set()
    for r in records:
        got = rendered.get(r.id)
        if got is None or r.duplicate_of is not None:
            continue
        if r.prompt_tokens:
            if got < PARTIAL_COVERAGE * r.prompt_tokens:
                out.add(r.id)
        elif lacking.get(r.id):
            out.add(r.id)
    return frozenset(out)
