"""A `Preparer` counts a request's remaining successors only for the requests it meets
(`Preparer._successors_left`), not in a copy of the whole log's counter: report makes one
preparer per cache domain, and a folder of agent transcripts is a domain per file, so a copy
each was O(domains x log) (480 MB at 1 GiB of Claude Code transcripts, docs/scale.md). What
it holds and lets go must be what the whole copy gave, whichever domain each request is in."""

from __future__ import annotations

import tracemalloc
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.analyses.simulate import SimulateOptions
from prefixscope.analyses.simulate.prepare import Links, Preparer


def _links(prevs: list[int | None]) -> Links:
    """Request i (id "r{i}") names request prevs[i] its predecessor (None: none)."""
    prev_of = {f"r{i}": (None if p is None else f"r{p}", False) for i, p in enumerate(prevs)}
    successors = Counter(f"r{p}" for p in prevs if p is not None)
    return Links({f"r{i}": "s" for i in range(len(prevs))}, prev_of, successors)


class _WholeCopy:
    """The oracle: the counter copied whole, one decrement per request done whose
    predecessor still has successors left, the predecessor let go at zero."""

    def __init__(self, links: Links) -> None:
        self.links = links
        self.left = Counter(links.successors)

    def done(self, rid: str) -> list[str]:
        prev = self.links.prev(rid)
        if prev is None or self.left[prev] <= 0:
            return []
        self.left[prev] -= 1
        return [prev] if self.left[prev] == 0 else []

    def live_after(self, rid: str) -> bool:
        return self.left[rid] > 0


@st.composite
def _logs(draw: st.DrawFn) -> tuple[list[int | None], list[int]]:
    """A log of requests each naming an earlier one (or none) as its predecessor, and
    each request's domain (any domain: a link may cross domains)."""
    n = draw(st.integers(1, 40))
    prevs = [draw(st.one_of(st.none(), st.integers(0, i - 1))) if i else None
             for i in range(n)]
    domains = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    return prevs, domains


@settings(max_examples=300, deadline=None)
@given(_logs())
def test_each_domains_preparer_holds_and_lets_go_what_a_whole_copy_does(
        log: tuple[list[int | None], list[int]]) -> None:
    prevs, domains = log
    links = _links(prevs)
    preparers = {d: Preparer(links, SimulateOptions()) for d in set(domains)}
    oracles = {d: _WholeCopy(links) for d in set(domains)}
    for i, d in enumerate(domains):
        rid = f"r{i}"
        assert preparers[d].live_after(rid) == oracles[d].live_after(rid)
        assert preparers[d].done(rid) == oracles[d].done(rid)
        for other in range(len(prevs)):  # every request's state, not just this one's
            assert (preparers[d].live_after(f"r{other}")
                    == oracles[d].live_after(f"r{other}"))


def test_a_preparer_allocates_nothing_per_request_of_the_log_it_has_not_met() -> None:
    # 100,000 requests in a chain; the preparer meets none of them. A copy of the
    # counter (100,000 keys) is several MB; the preparer's own state is a few hundred
    # bytes whatever the log's size.
    links = _links([None, *range(99_999)])
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        preparer = Preparer(links, SimulateOptions())
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert preparer.live_after("r5")
    assert grown < 100_000
