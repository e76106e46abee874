"""report's one walk over the store (`analyses.onepass`): each request rendered and
tokenized once gives the diff `diff --all` gives and each domain's replay input `prepare`
gives, whatever the runs of sessions the walk is cut into (workers, Ray)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefixscope.analyses.diff import (
    BlockSizes,
    diff_sessions,
    resolve_block_sizes,
    session_pair_rows,
)
from prefixscope.analyses.onepass import (
    Domain,
    PassSetup,
    merge_stages,
    one_pass,
    run_of,
    run_text,
    session_runs,
    session_stage,
    what_if_pass,
    what_if_passes,
    what_if_stage,
)
from prefixscope.analyses.simulate import SimulateOptions, prepare
from prefixscope.analyses.simulate.prepare import Links, prepare_what_if
from prefixscope.model.redaction import Redactor
from prefixscope.prompt import RenderOptions
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths

SAMPLES = [str(ROOT / "sample_logs" / "langfuse-claude-code.events_full.jsonl"),
           str(ROOT / "sample_logs" / "bifrost-mcp-keyorder.jsonl")]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    st = Store.open(tmp_path_factory.mktemp("onepass") / "s.duckdb")
    ingest_paths(SAMPLES, st)
    return st


def _setup(store: Store) -> PassSetup:
    files = tuple(store.source_files())
    domains = (Domain("tokens", SimulateOptions(engine="vllm", source_files=files[:1])),
               Domain("blocks", SimulateOptions(engine="anthropic", source_files=files[1:])),
               Domain("bad", SimulateOptions(engine="no-such-engine", source_files=())))
    return PassSetup(RenderOptions(), resolve_block_sizes(None, store), domains,
                     Links.of(store), tuple(session_pair_rows(store, None)),
                     redactor=Redactor())


def _same_entries(a, b) -> None:
    assert [p.id for p in a] == [p.id for p in b]
    for x, y in zip(a, b, strict=True):
        for name in x.__dataclass_fields__:
            u, v = getattr(x, name), getattr(y, name)
            if isinstance(u, np.ndarray) or isinstance(v, np.ndarray):
                assert np.array_equal(u, v), (x.id, name)
            else:
                assert u == v, (x.id, name)


def test_one_walk_gives_the_diff_and_each_domains_prepared_input(store: Store) -> None:
    setup = _setup(store)
    passed = one_pass(store, setup)
    assert passed.diff == diff_sessions(store, None, RenderOptions())
    assert passed.diff is not None and passed.diff.totals.pairs == 99
    for domain in setup.domains[:2]:
        entries, skipped = passed.prepared[domain.name]
        want, want_skipped = prepare(store, domain.options)
        assert entries and skipped == want_skipped
        _same_entries(entries, want)
    assert set(passed.failed) == {"bad"}


@pytest.mark.parametrize("own_files", [False, True])
@pytest.mark.parametrize("parts", [2, 5])
def test_runs_of_sessions_merged_in_any_order_give_the_whole_walk(store: Store, parts: int,
                                                                 own_files: bool) -> None:
    """(`own_files`: each run's domains cut to its requests' log files, as report's
    workers are sent them.)"""
    setup = _setup(store)
    whole = one_pass(store, setup)
    order, cut = session_runs(store, setup, parts)
    assert len(cut) > 1
    loaded = {r.id: r for r in store.iter_requests()}
    results = [session_stage([loaded[i] for i in ids], setup.subset(
        ids, pairs, [loaded[i].source_file for i in ids] if own_files else None), pairs)
               for ids, pairs in cut][::-1]
    merged = merge_stages(results, setup, order, store)
    assert merged.diff == whole.diff and merged.failed == whole.failed
    for name, (entries, skipped) in whole.prepared.items():
        assert merged.prepared[name][1] == skipped
        _same_entries(merged.prepared[name][0], entries)


def test_a_runs_setup_holds_its_own_pairs_and_links_only(store: Store) -> None:
    """What a worker is sent for a run of sessions: the pairs whose later request is in
    the run, by their place in diff --all's order, and the links of the run's requests."""
    setup = _setup(store)
    order, cut = session_runs(store, setup, 5)
    assert isinstance(setup.pairs, tuple)
    for ids, pairs in cut:
        run = setup.subset(ids, pairs)
        assert run.pairs == {i: setup.pairs[i] for i in pairs}
        assert all(b in ids for _, b, _, _ in run.pairs.values())
        assert set(run.links.session_of) == set(ids) & set(setup.links.session_of)
        assert run.links.prev_of == {r: p for r, p in setup.links.prev_of.items() if r in ids}
        assert run.links.successors == {r: n for r, n in setup.links.successors.items()
                                        if r in ids}
    assert sorted(i for _, pairs in cut for i in pairs) == list(range(len(setup.pairs)))


def test_a_runs_text_gives_back_its_ids_links_and_pairs(store: Store) -> None:
    """What a worker is sent as text (`run_text`) reads back (`run_of`) as the run's own
    setup (`PassSetup.subset`) and its ids and pair indexes, every field equal."""
    setup = _setup(store)
    _, cut = session_runs(store, setup, 5)
    for ids, pairs in cut:
        run = setup.subset(ids, pairs)
        bare = replace(run, links=Links({}, {}, Counter()), pairs={})
        assert run_of(run_text(ids, run, pairs), bare) == (ids, run, pairs)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.text(), st.text(), st.one_of(st.none(), st.text()),
                          st.booleans(), st.integers(0, 3), st.booleans()), max_size=8))
def test_any_runs_links_and_pairs_read_back_from_its_text(rows) -> None:
    """Any ids (unicode, empty), sessions, predecessors (none, a compaction), successor
    counts and changes survive the text as they were, tuples as tuples."""
    ids = [rid for rid, *_ in rows]
    links = Links({rid: session for rid, session, *_ in rows},
                  {rid: (prev, compaction) for rid, _, prev, compaction, _, _ in rows},
                  Counter({rid: n for rid, _, _, _, n, _ in rows if n}),
                  frozenset(rid for rid, *_, changed in rows if changed),
                  frozenset(rid for rid, *_, changed in rows[:1] if changed))
    pairs = {3 * i: (prev or "", rid, session, compaction)
             for i, (rid, session, prev, compaction, _, _) in enumerate(rows)}
    run = PassSetup(RenderOptions(), BlockSizes(), (), links, pairs, redactor=Redactor())
    bare = replace(run, links=Links({}, {}, Counter()), pairs={})
    got_ids, got, got_pairs = run_of(run_text(ids, run, list(pairs)), bare)
    assert (got_ids, got, got_pairs) == (ids, run, list(pairs))
    assert all(type(p) is tuple for p in got.links.prev_of.values())
    assert all(type(p) is tuple for p in got.pairs.values())


def test_a_runs_domains_hold_its_own_files_only(store: Store) -> None:
    """Cut to a run's files, each domain keeps its place, its options and those of its
    files the run's requests come from (none: an empty tuple, not every file)."""
    setup = _setup(store)
    tokens_file, blocks_file = store.source_files()
    run = setup.subset([], [], [blocks_file, "elsewhere.jsonl", blocks_file])
    assert [d.name for d in run.domains] == ["tokens", "blocks", "bad"]
    assert [d.options.source_files for d in run.domains] == [(), (blocks_file,), ()]
    assert [d.options.engine for d in run.domains] == ["vllm", "anthropic", "no-such-engine"]
    both = setup.subset([], [], [blocks_file, tokens_file])
    assert both.domains == setup.domains
    assert setup.subset([], []).domains == setup.domains


@pytest.mark.parametrize("transform", ["strip-billing-header", "sort-json-keys"])
def test_a_what_if_pass_by_runs_of_sessions_is_prepare_what_if(store: Store,
                                                              transform: str) -> None:
    options = SimulateOptions(engine="vllm")
    base, _ = prepare(store, options)
    changed = SimulateOptions(engine="vllm", render=RenderOptions(what_if=(transform,)))
    loaded = {r.id: r for r in store.iter_requests()}
    seen = []

    def run(st: Store, tasks):
        seen.append(len(tasks))
        done = {i: what_if_stage([loaded[r] for r in t.ids], t)
                for i, t in reversed(list(enumerate(tasks)))}
        return [done[i] for i in range(len(tasks))]

    got = what_if_pass(store, Links.of(store), changed, base, transform, run, parts=5)
    assert seen and seen[0] > 1
    _same_entries(got, prepare_what_if(store, changed, base, (transform,)))


def test_what_ifs_made_together_are_each_made_alone(store: Store) -> None:
    """Several what-ifs given to the workers at once (report's pool makes every domain's
    what-if inputs before it closes), one task per run of sessions for all of them (its
    requests loaded once), come back as each one's own pass."""
    options = SimulateOptions(engine="vllm")
    base, _ = prepare(store, options)
    transforms = ("strip-billing-header", "sort-json-keys")
    jobs = [(SimulateOptions(engine="vllm", render=RenderOptions(what_if=(t,))), base, t)
            for t in transforms]
    loaded = {r.id: r for r in store.iter_requests()}
    calls = []

    def run(st: Store, tasks):
        calls.append([t.transforms for t in tasks])
        return [what_if_stage([loaded[r] for r in t.ids], t) for t in tasks]

    got = what_if_passes(store, Links.of(store), jobs, run, parts=3)
    assert len(calls) == 1 and len(calls[0]) > 1  # one run of every task
    assert all(t == transforms for t in calls[0])  # each task: every what-if of its run
    for (changed, _, transform), entries in zip(jobs, got, strict=True):
        _same_entries(entries, prepare_what_if(store, changed, base, (transform,)))


def test_a_pool_of_workers_sends_back_no_ids_the_parent_holds(tmp_path) -> None:
    """Through a pool (spawned workers), what-if entries whose token ids are their base
    entry's come back as the base entry's own arrays (not sent, not held twice), and the
    entries are the ones made in this process."""
    from prefixscope.analyses.onepass import pool_what_ifs
    from prefixscope.analyses.pool import worker_pool

    writer = Store.open(tmp_path / "s.duckdb")
    ingest_paths(SAMPLES, writer)
    writer.close()
    store = Store.open(tmp_path / "s.duckdb", read_only=True)
    options = SimulateOptions(engine="vllm")
    base, _ = prepare(store, options)
    transforms = ("strip-billing-header", "sort-json-keys")
    jobs = [(SimulateOptions(engine="vllm", render=RenderOptions(what_if=(t,))), base, t)
            for t in transforms]
    with worker_pool(2) as pool:
        got = what_if_passes(store, Links.of(store), jobs, pool_what_ifs(pool), parts=3)
    by_id = {p.id: p for p in base}
    shared = 0
    for (changed, _, transform), entries in zip(jobs, got, strict=True):
        _same_entries(entries, prepare_what_if(store, changed, base, (transform,)))
        shared += sum(e.ids is not None and e.ids is by_id[e.id].ids for e in entries)
    assert shared > len(base) // 2
