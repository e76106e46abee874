"""A walk run's result written to a file by the worker that made it and read back by the
process that merges the runs: JSON and raw array bytes, nothing evaluated.

A pool's walk (`onepass.start_pass`) used to send each run's result back as it was made,
and the parent held them all until the merge: each request's prepared entry and its
pair's diff, a few objects and fresh strings, ~1.5 KB a request once unpickled, so the
parent grew through the whole walk beside the workers mid-task -- the walk's peak of
summed memory on large logs (2 GiB of Codex rollouts: +265 MB by its end). Written to a
file, they cost that memory only at the merge, beside idle workers.

The file holds only data (docs/security.md: nothing read from a file is evaluated): an
8-byte length, a JSON document of the run's values (each `PairDiff` and `_Prepared` as
the list of its fields), then the bytes of the token-id arrays the worker held (under
`spill.HOLD_BYTES`), each named in the JSON by its dtype, offset and length. Those are
not read back into memory: each comes back as a `SpilledIds` into the run's file, read
where the replay needs it, as the arrays the worker spilled itself are (written as their
reference); held, they were up to `HOLD_BYTES` a worker more in the merging process
through the replays. The values are read back equal, field by field (tuples as tuples,
floats exact: JSON keeps a finite float's shortest repr), and the strings a run repeats
(request ids, sessions, causes, the spill files' paths) are one object each
(`sys.intern`), as the worker held them. A value JSON cannot hold exactly (a non-finite
float, an integer past 64 bits, a string that is not UTF-8) is refused (`Unwritable`):
the caller sends that run's result as it is.
"""

from __future__ import annotations

import math
import os
import struct
import sys
from collections.abc import Callable
from dataclasses import fields
from typing import Any

import numpy as np
import orjson

from prefixscope.analyses.diff import Divergence, PairDiff
from prefixscope.analyses.simulate.model import _Prepared
from prefixscope.analyses.simulate.spill import SpilledIds

_HEAD = struct.Struct("<Q")  # the JSON document's length in bytes

_PREPARED = tuple(f.name for f in fields(_Prepared))
_PAIR = tuple(f.name for f in fields(PairDiff))
_DIVERGENCE = tuple(f.name for f in fields(Divergence))
# _Prepared's fields by kind: arrays, tuples (of ints), tuples of pairs, floats, strings
_ARRAYS = tuple(_PREPARED.index(n) for n in ("ids", "output_ids"))
_TUPLES = tuple(_PREPARED.index(n) for n in ("trace", "resumed"))
_PAIRS = tuple(_PREPARED.index(n) for n in ("segments", "blocks", "breakpoints"))
_FLOATS = tuple(_PREPARED.index(n) for n in ("seconds", "duration", "write_ttl"))
_BREAKPOINTS = _PREPARED.index("breakpoints")
_STRINGS = tuple(_PREPARED.index(n) for n in ("id", "session", "prev", "model",
                                               "trace_engine", "base", "namespace"))
_PAIR_DIVERGENCE = _PAIR.index("first_divergence")
_PAIR_BREAKPOINTS = _PAIR.index("breakpoints_a")
_PAIR_STRINGS = tuple(_PAIR.index(n) for n in ("a", "b", "session", "cause", "detail",
                                               "block_size_source"))

# A run's values as `write_run` takes them and `read_run` gives them back: diffed pairs by
# index (a diff or the reason it was skipped), per domain its entries and skip reasons
# (request id, reason), why a domain failed, the pairs left open.
RunValues = tuple[list[tuple[int, PairDiff | str]], dict[str, list[_Prepared]],
                  dict[str, list[tuple[str, str]]], dict[str, str], list[int]]


class Unwritable(ValueError):
    """A value the file cannot hold exactly (the run's result goes back as it is)."""


def write_run(path: str, values: RunValues) -> None:
    """Write `values` to `path` (see the module doc).

    Raises:
        Unwritable: a value JSON cannot hold exactly; nothing is left at `path`.
    """
    diffs, prepared, skips, failed, open_pairs = values
    arrays: list[np.ndarray] = []
    offset = 0

    def array(ids: np.ndarray | SpilledIds | None) -> list[Any] | None:
        nonlocal offset
        if ids is None:
            return None
        if isinstance(ids, SpilledIds):
            return ["s", ids.path, ids.offset, ids.count, ids.dtype.str]
        if ids.ndim != 1 or ids.dtype.hasobject:
            raise Unwritable(f"an array of {ids.ndim} dimensions of {ids.dtype}")
        arrays.append(np.ascontiguousarray(ids))
        offset += ids.nbytes
        return ["a", ids.dtype.str, offset - ids.nbytes, len(ids)]

    def entry(p: _Prepared) -> list[Any]:
        row = [getattr(p, name) for name in _PREPARED]
        for i in _ARRAYS:
            row[i] = array(row[i])
        for i in _FLOATS:
            _finite(row[i])
        for _, ttl in p.breakpoints:
            _finite(ttl)
        return row

    def pair(d: PairDiff | str) -> list[Any] | str:
        if isinstance(d, str):
            return d
        row = [getattr(d, name) for name in _PAIR]
        div = d.first_divergence
        row[_PAIR_DIVERGENCE] = (None if div is None
                                 else [getattr(div, name) for name in _DIVERGENCE])
        return row

    document = {"diffs": [[i, pair(d)] for i, d in diffs],
                "prepared": {name: [entry(p) for p in out] for name, out in prepared.items()},
                "skips": skips, "failed": failed, "open": open_pairs}
    try:
        text = orjson.dumps(document)
    except (TypeError, orjson.JSONEncodeError) as exc:  # (JSONEncodeError is a TypeError)
        raise Unwritable(str(exc)) from exc
    with open(path, "wb") as file:
        file.write(_HEAD.pack(len(text)))
        file.write(text)
        for ids in arrays:
            file.write(ids.data)


def _finite(value: float | None) -> None:
    if value is not None and not math.isfinite(value):
        raise Unwritable(f"a non-finite float: {value!r}")


def read_run(path: str) -> RunValues:
    """The values `write_run` wrote to `path`, equal to them. The arrays the file holds
    are read from it where they are needed (`SpilledIds`), not held: the file stays for
    them (its folder, a walk's `Spill`, goes with the last of them); a file without
    arrays is removed."""
    with open(path, "rb") as file:
        (length,) = _HEAD.unpack(file.read(_HEAD.size))
        document = orjson.loads(file.read(length))
    start = _HEAD.size + length
    intern: Callable[[str], str] = sys.intern
    name = intern(path)
    held = False

    def array(ref: list[Any] | None) -> SpilledIds | None:
        nonlocal held
        if ref is None:
            return None
        if ref[0] == "s":
            return SpilledIds(intern(ref[1]), ref[2], ref[3], np.dtype(ref[4]))
        held = True
        return SpilledIds(name, start + ref[2], ref[3], np.dtype(ref[1]))

    def entry(row: list[Any]) -> _Prepared:
        for i in _STRINGS:
            if row[i] is not None:
                row[i] = intern(row[i])
        for i in _ARRAYS:
            row[i] = array(row[i])
        for i in _TUPLES:
            if row[i] is not None:
                row[i] = tuple(row[i])
        for i in _PAIRS:
            if row[i] is not None:
                row[i] = tuple([(intern(k) if i != _BREAKPOINTS else k, v) for k, v in row[i]])
        return _Prepared(*row)

    def pair(row: list[Any] | str) -> PairDiff | str:
        if isinstance(row, str):
            return intern(row)
        for i in _PAIR_STRINGS:
            if row[i] is not None:
                row[i] = intern(row[i])
        div = row[_PAIR_DIVERGENCE]
        if div is not None:
            row[_PAIR_DIVERGENCE] = Divergence(*div)
        row[_PAIR_BREAKPOINTS] = tuple(row[_PAIR_BREAKPOINTS])
        return PairDiff(*row)

    values = ([(i, pair(row)) for i, row in document["diffs"]],
              {domain: [entry(row) for row in rows]
               for domain, rows in document["prepared"].items()},
              {domain: [(intern(rid), intern(reason)) for rid, reason in rows]
               for domain, rows in document["skips"].items()},
              document["failed"], document["open"])
    if not held:
        os.remove(path)
    return values
