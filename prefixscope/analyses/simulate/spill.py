"""Replay input kept on disk: each call's token ids written to a file as the walk makes
them, read back one call at a time when the replay reaches it.

report's walk gives every call's replay input (`_Prepared.ids`: the tokens not shared with
its session predecessor) to the replay at the end, so held in memory it grows with the log
(about one byte a log byte on Codex rollouts: 73 MB at 0.08 GiB, ~1.8 GB at 2 GiB;
docs/scale.md). With a `Spill`, the walk (in this process or in pool workers) appends each
array's bytes to a file of its own process in a scratch folder and keeps only a
`SpilledIds` -- where the bytes are and their dtype -- which pickles as that reference.
The replay reads a call's ids back (one `pread` into a new array) when it needs them (the
same bytes, the same dtype: the replay's arrays are equal to the held ones, so its answers
are) and lets go of them after: memory follows the sessions open at once, not the log.

Only for a walk on this machine (its workers share the folder); Ray's stages keep arrays.

The folder is a ``prefixscope-*`` temporary folder (`store.files.temporary_path`: marked
with its owner, swept by a later run if the owner was killed) removed when its `Spill`
is let go or the interpreter exits (SIGTERM unwinds the command, `cli.main`), and only by
the process that made it -- forked replay workers hold a copy of the owner object.
"""

from __future__ import annotations

import os
import shutil
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from prefixscope.store.files import temporary_path

# The folders whose `Spill` this process holds: a `SpilledIds` made or unpickled here
# keeps its folder's owner alive, so the bytes outlive no reader
_OWNERS: weakref.WeakValueDictionary[str, Spill] = weakref.WeakValueDictionary()
# (folder, pid) -> (file descriptor, bytes written): one append-only file per process,
# keyed by pid as well because a forked worker inherits the parent's table
_WRITERS: dict[tuple[str, int], list[int]] = {}
# A walk's ids are held in memory up to this many bytes a process and spilled past it: a
# small log writes no file at all (no disk I/O, no file-size limit met before the output's),
# a large one holds at most this much (`keep_ids`).
# What a pool's walk worker holds goes to its runs' files with their entries
# (`analyses.walkfile`), read from there by the replay like a spilled array: held, it was
# held in the parent through the replays (at 64 MiB, two workers' 128 MB from 0.25 GiB
# of Codex rollouts up; at 16 MiB, 32 MB).
HOLD_BYTES = 16 * 2**20
# (folder, pid) -> bytes of that walk's ids this process holds instead of spilling
_HELD: dict[tuple[str, int], int] = {}
# (file, pid) -> a descriptor open to read it: a replay reads every call, one `pread` each
# (opening the file per call cost ~5% of a Codex report's CPU)
_READERS: dict[tuple[str, int], int] = {}


class Spill:
    """A scratch folder for spilled replay input, owned by the process that made it."""

    def __init__(self) -> None:
        self.folder = temporary_path()
        _OWNERS[self.folder] = self
        self._finalizer = weakref.finalize(self, _remove, self.folder, os.getpid())

    def close(self) -> None:
        """Remove the folder now (else when this object is let go, or at exit)."""
        self._finalizer()


def _remove(folder: str, owner: int) -> None:
    if os.getpid() != owner:  # a forked worker's copy: the folder is its parent's
        return
    _HELD.pop((folder, owner), None)
    writer = _WRITERS.pop((folder, owner), None)
    if writer is not None:
        os.close(writer[0])
    for key in [k for k in _READERS if os.path.dirname(k[0]) == folder]:
        os.close(_READERS.pop(key))
    shutil.rmtree(folder, ignore_errors=True)


class SpilledIds:
    """A token-id array written to a spill file: its file, offset, length and dtype.

    Array-like (`np.asarray` reads it back); pickles as the reference, not the bytes."""

    __slots__ = ("path", "offset", "count", "dtype", "_owner")

    def __init__(self, path: str, offset: int, count: int, dtype: np.dtype[Any]) -> None:
        self.path = path
        self.offset = offset
        self.count = count
        self.dtype = dtype
        self._owner = _OWNERS.get(os.path.dirname(path))  # None in a worker: not its folder

    def __len__(self) -> int:
        return self.count

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        key = (self.path, os.getpid())  # a forked worker opens its own descriptor
        fd = _READERS.get(key)
        if fd is None:
            fd = _READERS[key] = os.open(self.path, os.O_RDONLY)
        ids = np.empty(self.count, dtype=self.dtype)
        # regular files are read whole up to their end (Linux: 2 GB a call, far above a prompt)
        if os.preadv(fd, [ids.data.cast("B")], self.offset) != ids.nbytes:
            # a short file is a lost spill, never a shorter prompt
            raise OSError(f"spilled token ids cut short in {self.path}")
        return ids if dtype is None else ids.astype(dtype, copy=False)

    def __reduce__(self) -> tuple[Any, ...]:
        return SpilledIds, (self.path, self.offset, self.count, self.dtype)


def keep_ids(ids: np.ndarray, folder: str, hold: int = HOLD_BYTES) -> np.ndarray | SpilledIds:
    """`ids` themselves while this process holds at most `hold` bytes of `folder`'s walk
    (these included), else `spill_ids`: either reads back as the same array."""
    key = (folder, os.getpid())
    held = _HELD.get(key, 0) + ids.nbytes
    if held <= hold:
        _HELD[key] = held
        return ids
    return spill_ids(ids, folder)


def spill_ids(ids: np.ndarray, folder: str) -> SpilledIds:
    """`ids` appended to this process's file in `folder` (written through: another
    process can read it as soon as this returns)."""
    key = (folder, os.getpid())
    writer = _WRITERS.get(key)
    if writer is None:
        path = Path(folder, f"ids-{os.getpid()}.bin")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        writer = _WRITERS[key] = [fd, os.fstat(fd).st_size]
    fd, offset = writer
    data = np.ascontiguousarray(ids).tobytes()
    view = memoryview(data)
    while view:  # os.write may write less than asked
        view = view[os.write(fd, view):]
    writer[1] = offset + len(data)
    return SpilledIds(os.path.join(folder, f"ids-{os.getpid()}.bin"), offset, len(ids),
                      ids.dtype)


def close_writers(folder: str) -> None:
    """Close this process's file in `folder`, if open (a walk's worker, done with it)."""
    writer = _WRITERS.pop((folder, os.getpid()), None)
    if writer is not None:
        os.close(writer[0])
