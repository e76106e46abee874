"""report's replay input spilled to disk (`analyses.simulate.spill`): the walk writes each
call's token ids to a file instead of holding them, and the replay reads them back. The
invariant: the spilled entries are the held ones (same ids, same dtype), so every replay
of them gives the same cached tokens -- checked against the walk that holds its arrays (the
path report took before the spill) on multi-session logs, in this process and through a
pool of workers; and the scratch folder goes when nothing reads it any more."""

from __future__ import annotations

import gc
import os
import pickle

import numpy as np
import pytest
from conftest import ROOT

from prefixscope.analyses.diff import resolve_block_sizes, session_pair_rows
from prefixscope.analyses.onepass import (
    Domain,
    PassSetup,
    merge_stages,
    one_pass,
    session_stage,
    start_pass,
    walk_order,
)
from prefixscope.analyses.simulate import SimulateOptions
from prefixscope.analyses.simulate.prepare import Links
from prefixscope.analyses.simulate.replay import _replays
from prefixscope.analyses.simulate.spill import (
    HOLD_BYTES,
    Spill,
    SpilledIds,
    keep_ids,
    spill_ids,
)
from prefixscope.model.redaction import Redactor
from prefixscope.prompt import RenderOptions
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths

# several sessions each: two Codex rollouts, an agent's Langfuse export, a gateway's log
LOGS = [str(ROOT / "tests" / "fixtures" / "codex" / "handmade"),
        str(ROOT / "sample_logs" / "langfuse-claude-code.events_full.jsonl"),
        str(ROOT / "sample_logs" / "bifrost-mcp-keyorder.jsonl")]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    path = tmp_path_factory.mktemp("spill") / "s.duckdb"
    writer = Store.open(path)
    ingest_paths(LOGS, writer)
    writer.close()
    return Store.open(path, read_only=True)  # read-only: pool workers open it too


def _setup(store: Store) -> PassSetup:
    """A domain per engine kind: token blocks with the output cached (output ids too),
    OpenAI's hosted cache, Anthropic's content blocks."""
    files = sorted(store.source_files())
    codex = tuple(f for f in files if "codex" in f)
    langfuse = tuple(f for f in files if "langfuse" in f)
    rest = tuple(f for f in files if f not in codex + langfuse)
    assert codex and langfuse and rest
    domains = (Domain("codex", SimulateOptions(engine="openai", source_files=codex)),
               Domain("tokens", SimulateOptions(engine="vllm", cache_output=True,
                                                source_files=langfuse)),
               Domain("blocks", SimulateOptions(engine="anthropic", source_files=rest)))
    # spill_hold=0: every array spilled (a report holds 16 MiB a process first)
    return PassSetup(RenderOptions(), resolve_block_sizes(None, store), domains,
                     Links.of(store), tuple(session_pair_rows(store, None)),
                     redactor=Redactor(), spill_hold=0)


def _held(store: Store, setup: PassSetup):
    """The walk holding every array (no spill folder): the independent oracle."""
    assert setup.spill is None
    return merge_stages([session_stage(store.iter_requests(), setup)], setup,
                        walk_order(store), store)


def _check_same(spilled, held) -> int:
    """The spilled entries are the held ones, field by field (ids read back from disk);
    returns how many arrays were spilled (with `spill_hold=0`: every one)."""
    n = 0
    for name, (entries, skipped) in held.prepared.items():
        got, got_skipped = spilled.prepared[name]
        assert got_skipped == skipped
        assert [p.id for p in got] == [p.id for p in entries]
        for x, y in zip(got, entries, strict=True):
            for field in x.__dataclass_fields__:
                u, v = getattr(x, field), getattr(y, field)
                if isinstance(v, np.ndarray):
                    assert isinstance(u, SpilledIds | np.ndarray), (x.id, field)
                    back = np.asarray(u)
                    assert back.dtype == v.dtype and np.array_equal(back, v), (x.id, field)
                    n += isinstance(u, SpilledIds)
                else:
                    assert u == v, (x.id, field)
    return n


def _replayed(prepared) -> list[list[int]]:
    runs = [SimulateOptions(engine="vllm", capacity_tokens=2_000), None,
            SimulateOptions(engine="vllm", cache_output=True),
            SimulateOptions(engine="openai")]
    return _replays(prepared, runs, workers=1)


def test_a_spilled_walk_gives_the_held_entries_and_replays(store: Store) -> None:
    setup = _setup(store)
    held = _held(store, setup)
    spilled = one_pass(store, setup)
    assert spilled.spill is not None and os.listdir(spilled.spill.folder)
    assert _check_same(spilled, held) > 20  # prompts and outputs of every domain
    assert any(p.output_ids is not None for p in held.prepared["tokens"][0])
    for name, (entries, _) in held.prepared.items():
        assert entries, name
        assert _replayed(spilled.prepared[name][0]) == _replayed(entries), name


def test_a_pool_walk_spills_in_its_workers_and_the_parent_reads_them(store: Store) -> None:
    """Spawned workers write their own files in the parent's folder; the entries they
    send back are references to them, read in this process as the held arrays. Each
    run's result goes through a file of that folder too (`walkfile`), removed once read."""
    from prefixscope.analyses.pool import worker_pool

    setup = _setup(store)
    with worker_pool(2) as pool:
        pending = start_pass(store, setup, pool, diff=True)
        spilled = pending.result(store)
    files = os.listdir(spilled.spill.folder)
    assert sum(f.startswith("ids-") and f != f"ids-{os.getpid()}.bin" for f in files) >= 1
    assert not [f for f in files if f.startswith("run-")]
    held = _held(store, setup)
    assert spilled.diff == held.diff
    assert _check_same(spilled, held) > 20
    for name, (entries, _) in held.prepared.items():
        assert _replayed(spilled.prepared[name][0]) == _replayed(entries), name


def test_a_pool_walk_of_workers_reading_databases_of_their_own_gives_the_held_walk(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the store unconnected while the workers fork (`own_blocks`), each reads the
    file through a database of its own, here let go of after every task (a keep of one
    byte): the diff and every domain's entries are the held walk's, and this process
    reads on through its connection opened again."""
    from prefixscope.analyses import onepass
    from prefixscope.analyses.pool import worker_pool

    monkeypatch.setattr(onepass, "WORKER_KEEPS_BLOCKS", 1)
    setup = _setup(store)
    with worker_pool(2) as pool:
        own = start_pass(store, setup, pool, diff=True, own_blocks=True).result(store)
    held = _held(store, setup)
    assert own.diff == held.diff
    assert _check_same(own, held) > 20
    for name, (entries, _) in held.prepared.items():
        assert _replayed(own.prepared[name][0]) == _replayed(entries), name


def test_a_pool_walk_holding_its_arrays_gives_the_held_entries_through_its_files(
        store: Store) -> None:
    """Under the hold budget the workers keep their arrays: they go to the runs' files
    with the rest of each run's result (`walkfile`), and this process reads them from
    there where needed (references, not arrays), equal to the held walk's."""
    from dataclasses import replace

    from prefixscope.analyses.pool import worker_pool

    setup = replace(_setup(store), spill_hold=HOLD_BYTES)
    with worker_pool(2) as pool:
        kept = start_pass(store, setup, pool, diff=True).result(store)
    files = os.listdir(kept.spill.folder)
    assert not [f for f in files if f.startswith("ids-")]  # nothing spilled by a worker
    assert [f for f in files if f.startswith("run-")]
    held = _held(store, setup)
    assert kept.diff == held.diff
    assert _check_same(kept, held) > 20  # every array read from a run's file, equal
    for name, (entries, _) in held.prepared.items():
        assert _replayed(kept.prepared[name][0]) == _replayed(entries), name


def test_spilled_ids_pickle_as_where_they_are_and_read_back_equal() -> None:
    spill = Spill()
    arrays = [np.arange(100_000, dtype=np.uint32), np.array([7, 2**40], dtype=np.int64),
              np.zeros(0, dtype=np.uint32), np.arange(5, dtype=np.uint32)[::2]]
    refs = [spill_ids(a, spill.folder) for a in arrays]
    for a, ref in zip(arrays, refs, strict=True):
        sent = pickle.dumps(ref)
        assert len(sent) < 400  # the place, not 400 KB of ids
        back = np.asarray(pickle.loads(sent))
        assert len(ref) == len(a) and back.dtype == a.dtype and np.array_equal(back, a)
    spill.close()


def test_the_folder_lives_while_an_entry_reads_it_and_goes_after() -> None:
    spill = Spill()
    folder = spill.folder
    ref = spill_ids(np.arange(10, dtype=np.uint32), folder)
    del spill
    gc.collect()
    assert np.array_equal(np.asarray(ref), np.arange(10))  # the entry keeps its folder
    del ref
    gc.collect()
    assert not os.path.exists(folder)


def test_a_forked_copy_letting_go_of_the_owner_leaves_the_folder() -> None:
    spill = Spill()
    folder = spill.folder
    pid = os.fork()
    if pid == 0:  # the child: its copy of the owner goes, the parent's folder must not
        spill.close()
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert os.path.isdir(folder)
    spill.close()
    assert not os.path.exists(folder)


def test_a_walk_under_the_hold_budget_writes_no_file_and_gives_the_held_entries(
        store: Store) -> None:
    """Below `spill_hold` bytes a process keeps its arrays: a small log's report touches no
    disk (a limit on file sizes meets the output first), its entries the held ones."""
    from dataclasses import replace

    setup = replace(_setup(store), spill_hold=HOLD_BYTES)
    held = _held(store, setup)
    kept = one_pass(store, setup)
    assert kept.spill is not None and os.listdir(kept.spill.folder) == ["owner.pid"]
    assert _check_same(kept, held) == 0  # nothing spilled, every array equal
    for name, (entries, _) in held.prepared.items():
        assert _replayed(kept.prepared[name][0]) == _replayed(entries), name


def test_keep_ids_holds_up_to_the_budget_then_spills() -> None:
    spill = Spill()
    try:
        a, b, c = (np.arange(n, dtype=np.uint32) for n in (10, 5, 1))  # 40, 20, 4 bytes
        kept = [keep_ids(x, spill.folder, hold=60) for x in (a, b, c)]
        assert kept[0] is a and kept[1] is b  # 40, then 60: within the 60 bytes
        assert isinstance(kept[2], SpilledIds)  # 64 > 60
        assert np.asarray(kept[2]).tolist() == [0]
    finally:
        spill.close()
