"""Process parallelism in one place: a pure function mapped over partitions in worker
processes, its results handed back in the order of the partitions.

Rendering and tokenizing are Python (Jinja, marking) and hold the GIL, so threads do not
help; whole sessions are independent, so the commands that render every request cut the
store into runs of whole sessions and map over them here (`--workers N`). Guarantees:

* results come back in partition order, whatever order the workers finish in, so merging
  them gives what one process gives (`--workers 1`);
* `workers <= 1` runs every task in this process, one after another, with no pool;
* workers are *spawned* (a fresh interpreter, no state copied from the parent): a task
  and its function must be picklable (a function defined at module level), and whatever a
  worker needs (the store's file path, the active secret patterns) travels in the task or
  the initializer;
* with ``fork=True`` they are *forked* instead, where the platform forks safely (Linux;
  spawned elsewhere): a worker starts with the parent's imported modules and loaded
  tokenizers, so the start-up a spawned worker pays again (the package's imports, the
  tokenizer's load, 0.3 + 0.35 s of CPU each) is paid once, and the pages stay shared
  (copy-on-write). Tasks and results still travel pickled. Why the parent's threads do
  not break the child: see `Pool._forking`;
* a task submitted runs at once in the background (`Pool.submit`), so a caller can do
  other work while the workers run, and collect the results later;
* with ``shared=`` a pool's workers are *forked* instead, after the parent set the shared
  value, and read it with `shared()` (copy-on-write: a GB of prepared requests replayed
  ten times over is never pickled). Only for pure computation over that value (the
  parent must not hold a DuckDB connection the tasks use); where fork does not exist the
  tasks run in this process.

Nothing here knows about stores, requests or analyses (it is the bottom layer).
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from functools import cache
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class WorkerError(RuntimeError):
    """A worker process died before finishing its task (killed, out of memory)."""


def cores() -> int:
    """The machine's cores (`--workers` default)."""
    return os.cpu_count() or 1


def effective_workers(workers: int | None, items: int, *, auto_minimum: int) -> int:
    """How many processes to run `items` partitions with: `workers` as asked (capped by
    `items`), or with None (`--workers` not given) the machine's cores when there are at
    least `auto_minimum` units of work -- below that, starting interpreters costs more
    than it saves and the work runs in this process."""
    if workers is None:
        workers = cores() if items >= auto_minimum else 1
    return max(1, min(workers, items))


def runs(weights: Sequence[int], parts: int) -> list[range]:
    """Cut consecutive units (whole sessions, each of `weights[i]` work) into at most
    `parts` contiguous runs of about equal work, in order; no run is empty."""
    total = sum(weights)
    if not weights or parts <= 1 or total <= 0:
        return [range(0, len(weights))] if weights else []
    target = total / parts
    out: list[range] = []
    start = 0
    acc = 0
    for i, w in enumerate(weights):
        acc += w
        if acc >= target * (len(out) + 1) and len(out) < parts - 1:
            out.append(range(start, i + 1))
            start = i + 1
    if start < len(weights):
        out.append(range(start, len(weights)))
    return out


# A worker is one of `workers` processes on as many cores: libraries' own thread pools
# (the tokenizers crate's Rayon pool) would oversubscribe the machine and spin.
_ONE_THREAD = {"TOKENIZERS_PARALLELISM": "false", "RAYON_NUM_THREADS": "1",
               "OMP_NUM_THREADS": "1"}


def tokenizer_threads() -> int:
    """Threads a batch given to the tokenizers library is spread over in this process: one
    in a pool's worker (`_ONE_THREAD`), else the machine's cores."""
    try:
        return max(1, int(os.environ.get("RAYON_NUM_THREADS") or 0) or cores())
    except ValueError:
        return cores()


def release_freed_memory(keep: int = 0) -> None:
    """Hand the heap's free pages back to the system (glibc's ``malloc_trim``; nothing
    elsewhere). CPython frees a task's objects, but glibc keeps their pages in the
    process: a worker that walked a run of sessions held ~160 MB more than it used.
    `keep`: only when the heap holds more than that many bytes free (`_free_heap`;
    where it cannot be read, always).

    With nothing kept (the parent, before it forks and after the what-ifs), DuckDB's
    allocator's free pages too (`_duckdb_purge`): it keeps what its queries freed until
    later allocations pass its decay time. A report's first queries (the usage summary,
    the records) leave ~85 MB there at 2 GiB of Codex, which the walk's workers forked
    with (purged: 288 -> 203 MB private, in 5 ms)."""
    if not keep:
        purge = _duckdb_purge()
        if purge is not None:
            purge()
    trim = _malloc_trim()
    if trim is None:
        return
    if keep:
        free = _free_heap()
        if free is not None and free <= keep:
            return
    trim(0)


def release_duckdb_freed() -> None:
    """Hand DuckDB's allocator's free pages back to the system (`_duckdb_purge`; nothing
    where DuckDB is not loaded or has no jemalloc): what a database closed in this process
    (`Store.let_go_cache`) freed stays there until later allocations pass its decay time."""
    purge = _duckdb_purge()
    if purge is not None:
        purge()


# What a pool's worker keeps of the heap its task freed, for its next task to reuse: handed
# back after every task, it was faulted in again page by page by the next (report of the
# 1.05 GiB raw store: a walk task frees 40-70 MB, a what-if task 15-25 MB; each worker
# took ~240k page faults, 0.5-0.65 s of system CPU of its 8 s). Above this, handed back,
# so a worker holds at most this much more than it uses (summed memory: two workers).
WORKER_KEEPS_FREED = 64 << 20


def _duckdb_purge() -> Callable[[], None] | None:
    """What hands DuckDB's allocator's free pages back: its jemalloc's (linked into DuckDB
    on Linux, its symbols exported) ``arena.<all>.purge``, after this thread's cache is
    flushed into the arenas; None where DuckDB is not loaded in this process (nothing to
    hand back: not imported for it) or has no jemalloc."""
    module = sys.modules.get("_duckdb")
    path = getattr(module, "__file__", None)
    return None if path is None else _jemalloc_purge(path)


@cache
def _jemalloc_purge(path: str) -> Callable[[], None] | None:
    try:
        import ctypes

        mallctl = ctypes.CDLL(path).duckdb_je_mallctl
    except (OSError, AttributeError):
        return None
    mallctl.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                        ctypes.c_size_t]
    mallctl.restype = ctypes.c_int

    def purge() -> None:
        mallctl(b"thread.tcache.flush", None, None, None, 0)
        mallctl(b"arena.%d.purge" % _ARENAS_ALL, None, None, None, 0)
    return purge


_ARENAS_ALL = 4096  # jemalloc's MALLCTL_ARENAS_ALL: an arena index naming every arena


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def _free_heap() -> int | None:
    """The bytes free in glibc's heap (``mallinfo2().fordblks``: freed, not handed back),
    or None where it cannot be read (another libc; glibc before 2.33)."""
    info = _mallinfo2()
    return None if info is None else int(info().fordblks)


@cache
def _mallinfo2() -> Callable[[], Any] | None:
    try:
        import ctypes

        class MallInfo2(ctypes.Structure):  # glibc's struct mallinfo2, every field size_t
            _fields_ = [(name, ctypes.c_size_t) for name in (
                "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                "uordblks", "fordblks", "keepcost")]

        mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
        mallinfo2.restype = MallInfo2
        return mallinfo2
    except (OSError, AttributeError):
        return None


def _run_and_release(run: Callable[[T], R], task: T) -> R:
    """`run(task)` in a worker, then its freed memory handed back past what the next task
    reuses (`WORKER_KEEPS_FREED`, above)."""
    try:
        return run(task)
    finally:
        release_freed_memory(keep=WORKER_KEEPS_FREED)


def _start(initializer: Callable[..., object] | None, initargs: tuple[Any, ...]) -> None:
    os.environ.update(_ONE_THREAD)
    if initializer is not None:
        initializer(*initargs)


class Batch(Generic[R]):
    """Tasks submitted to a `Pool`; `results()` waits for them, in submission order."""

    def __init__(self, run: Callable[[Any], R], tasks: Sequence[Any],
                 futures: list[Future[R]] | None, weights: Sequence[int]) -> None:
        self._run = run
        self._tasks = tasks
        self._futures = futures
        self._weights = weights

    def results(self, progress: Callable[[int], None] | None = None) -> list[R]:
        """Every task's result, in task order. `progress(done)` is called with the summed
        weight of the tasks finished so far (in the order they finish)."""
        done = 0
        if self._futures is None:  # in-process: one task after another
            out = []
            for task, weight in zip(self._tasks, self._weights, strict=True):
                out.append(self._run(task))
                done += weight
                if progress is not None:
                    progress(done)
            return out
        weight_of = dict(zip(map(id, self._futures), self._weights, strict=True))
        try:
            for future in as_completed(self._futures):
                future.result()  # a task's error is raised here, in the parent
                done += weight_of[id(future)]
                if progress is not None:
                    progress(done)
        except BrokenProcessPool:
            raise WorkerError("a worker process died (out of memory? try fewer --workers)"
                              ) from None
        return [f.result() for f in self._futures]


_NOTHING = object()
# Pools open that forked their workers: this process's objects alive at their forks stay
# out of its collector until the last of them closes (`Pool._forking`)
_FROZEN_POOLS = 0
_SHARED: Any = _NOTHING  # the value of the open `Pool(shared=...)`, if any


def shared() -> Any:
    """The value the open pool was given as ``shared=`` (in its workers and in this
    process alike)."""
    if _SHARED is _NOTHING:
        raise RuntimeError("no pool with a shared value is open")
    return _SHARED


def forks() -> bool:
    """Whether `Pool(fork=True)` forks here: on Linux. (macOS has fork, but system
    libraries there are not fork-safe, which is why Python spawns by default there.)"""
    return sys.platform.startswith("linux") and \
        "fork" in multiprocessing.get_all_start_methods()


class Pool:
    """`workers` spawned processes (none when `workers <= 1`); use as a context manager.

    `initializer(*initargs)` runs once in each worker before its first task (e.g. to
    activate the parent's secret patterns). `fork`: fork the workers from this process
    where `forks()`, else spawn them (see the module docstring). `shared`: fork the
    workers, each inheriting that value (where fork does not exist the tasks run in this
    process); one such pool at a time."""

    def __init__(self, workers: int, *, initializer: Callable[..., object] | None = None,
                 initargs: tuple[Any, ...] = (), fork: bool = False,
                 shared: Any = _NOTHING) -> None:
        global _SHARED
        self.workers = max(1, workers)
        self._executor: ProcessPoolExecutor | None = None
        self._shares = shared is not _NOTHING
        method = "fork" if fork and forks() else "spawn"
        if self._shares:
            if _SHARED is not _NOTHING:
                raise RuntimeError("a pool with a shared value is open already")
            _SHARED = shared
            method = "fork"
            if method not in multiprocessing.get_all_start_methods():
                self.workers = 1
        self._unforked = method == "fork"  # the workers are forked at the first submit
        self._frozen = False  # this process's objects of the fork held out of its collector
        if self.workers > 1:
            self._executor = ProcessPoolExecutor(
                self.workers, mp_context=multiprocessing.get_context(method),
                initializer=_start, initargs=(initializer, initargs))

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self.close(cancel=exc_type is not None)

    def close(self, *, cancel: bool = False) -> None:
        """Wait for the workers to exit (`cancel`: drop the tasks not started)."""
        global _SHARED, _FROZEN_POOLS
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=cancel)
            self._executor = None
        if self._frozen:
            self._frozen = False
            _FROZEN_POOLS -= 1
            if not _FROZEN_POOLS:
                gc.unfreeze()
        if self._shares:
            _SHARED, self._shares = _NOTHING, False

    def submit(self, run: Callable[[T], R], tasks: Sequence[T],
               weights: Sequence[int] | None = None) -> Batch[R]:
        """Start `run` on every task (in the workers; in-process, it runs when the results
        are asked for). `weights`: each task's share of the progress (default 1 each)."""
        weights = list(weights) if weights is not None else [1] * len(tasks)
        if self._executor is None:
            return Batch(run, tasks, None, weights)
        with self._forking():
            futures = [self._executor.submit(_run_and_release, run, t) for t in tasks]
        return Batch(run, tasks, futures, weights)

    @contextmanager
    def _forking(self) -> Iterator[None]:
        """Around the submit that forks the workers: with the fork method CPython's
        `ProcessPoolExecutor` forks every worker at its first submit, from this thread,
        before its own manager thread starts (cpython#90622).

        Why a fork of this process is safe, and kept small:
        * threads: a child has only the forking thread. Python-level, this process runs
          no other thread that holds a lock a task takes. DuckDB's worker threads hold
          none between queries (every `store` query is fetched whole before it returns),
          and a child's query runs its tasks on its own thread (DuckDB's client thread
          executes the tasks of its query; the store opened in a child by path is this
          process's database: DuckDB's instance cache, unless this process had closed
          every connection to it first, `Store.unconnected`); its allocator (jemalloc)
          takes its locks across the fork itself (pthread_atfork). The tokenizers
          library's thread pool, once used here, would not exist in the child: the
          variables of `_ONE_THREAD` are set for the fork (and only then: this process
          keeps its own), so the library starts the child without it, one thread, and
          without its warning on stderr;
        * memory: the heap's free pages go back to the system first (each child would
          otherwise copy them), and the objects alive now are frozen out of the cyclic
          collector (`gc.freeze`), so that a collection in a child does not write to them
          and copy every page they are on. In this process too, until the last pool
          forked so closes (`_FROZEN_POOLS`): a full collection here while the workers
          live wrote to every one of them as well, each page copied into this process
          (on the 1 GiB Codex store, +24 MB of its private memory)."""
        global _FROZEN_POOLS
        if not self._unforked:
            yield
            return
        self._unforked = False
        release_freed_memory()
        saved = {name: os.environ.get(name) for name in _ONE_THREAD}
        os.environ.update(_ONE_THREAD)
        gc.freeze()
        self._frozen = True
        _FROZEN_POOLS += 1
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def map(self, run: Callable[[T], R], tasks: Sequence[T],
            weights: Sequence[int] | None = None,
            progress: Callable[[int], None] | None = None) -> list[R]:
        """`[run(t) for t in tasks]`, across the workers."""
        return self.submit(run, tasks, weights).results(progress)
