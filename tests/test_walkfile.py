"""A walk run's result through its file (`analyses.walkfile`): what is read back equals
what was written, field by field (the oracle: the values themselves, compared with ==,
arrays by dtype and elements, read back from the file); a value the file cannot hold
exactly is refused before any file is left."""

from __future__ import annotations

import math
import os
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.analyses.diff import Divergence, PairDiff
from prefixscope.analyses.simulate.model import _Prepared
from prefixscope.analyses.simulate.spill import Spill, SpilledIds, spill_ids
from prefixscope.analyses.walkfile import Unwritable, read_run, write_run

texts = st.text(max_size=12)  # any code point but lone surrogates (not UTF-8)
ints = st.integers(-(2**63), 2**63 - 1)
floats = st.floats(allow_nan=False, allow_infinity=False)
maybe = st.none

DTYPES = [np.uint32, np.int64, np.int32, np.uint16, np.uint8]


@st.composite
def arrays(draw: st.DrawFn) -> np.ndarray:
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    info = np.iinfo(dtype)
    values = draw(st.lists(st.integers(int(info.min), int(info.max)), max_size=40))
    return np.array(values, dtype=dtype)


# every field of `_Prepared`, each with values of its whole type (a new field must be
# added here: `test_the_strategies_name_every_field`)
PREPARED = {
    "id": texts, "session": maybe() | texts, "prev": maybe() | texts,
    "compacted": st.booleans(), "seconds": maybe() | floats, "observed": maybe() | ints,
    "ids": maybe() | arrays(), "output_ids": maybe() | arrays(),
    "trace": maybe() | st.tuples(ints, ints) | st.lists(ints).map(tuple),
    "trace_tokens": ints, "trace_block": ints,
    "segments": maybe() | st.lists(st.tuples(texts, ints)).map(tuple),
    "model": maybe() | texts, "logged_prompt": maybe() | ints, "trace_engine": texts,
    "blocks": maybe() | st.lists(st.tuples(texts, ints)).map(tuple),
    "breakpoints": st.lists(st.tuples(ints, floats)).map(tuple),
    "duration": maybe() | floats, "approximate": st.booleans(), "base": maybe() | texts,
    "shared": ints, "resumed": maybe() | st.tuples(ints, ints, ints),
    "namespace": maybe() | texts, "head": maybe() | ints, "write_ttl": maybe() | floats,
    "changed": st.booleans(),
}
DIVERGENCE = {"token": ints, "char_a": ints, "char_b": ints, "segment": texts,
              "text_a": maybe() | texts, "text_b": maybe() | texts, "context_start": ints,
              "first_char": ints, "token_a": maybe() | texts, "token_b": maybe() | texts}
PAIR = {"a": texts, "b": texts, "session": maybe() | texts, "tokens_a": ints,
        "tokens_b": ints,
        "first_divergence": maybe() | st.builds(Divergence, **DIVERGENCE),
        "block_size": ints, "reusable_tokens": ints, "lost_tokens": ints, "cause": texts,
        "detail": texts, "approximate": st.booleans(), "block_size_source": texts,
        "observed_cached": maybe() | ints, "breakpoints_a": st.lists(ints).map(tuple)}

prepared = st.builds(_Prepared, **PREPARED)
runs = st.tuples(
    st.lists(st.tuples(st.integers(0, 10**6), texts | st.builds(PairDiff, **PAIR))),
    st.dictionaries(texts, st.lists(prepared, max_size=4), max_size=3),
    st.dictionaries(texts, st.lists(st.tuples(texts, texts)), max_size=3),
    st.dictionaries(texts, texts, max_size=3),
    st.lists(st.integers(0, 10**6)))


def test_the_strategies_name_every_field() -> None:
    assert set(PREPARED) == {f.name for f in fields(_Prepared)}
    assert set(PAIR) == {f.name for f in fields(PairDiff)}
    assert set(DIVERGENCE) == {f.name for f in fields(Divergence)}


def _same_entry(got: _Prepared, want: _Prepared) -> None:
    for f in fields(_Prepared):
        u, v = getattr(got, f.name), getattr(want, f.name)
        if isinstance(v, np.ndarray):  # read from the run's file where it is needed
            assert isinstance(u, SpilledIds) and len(u) == len(v)
            back = np.asarray(u)
            assert back.dtype == v.dtype and np.array_equal(back, v)
        elif isinstance(v, SpilledIds):
            assert isinstance(u, SpilledIds)
            assert (u.path, u.offset, u.count, u.dtype) == (v.path, v.offset, v.count, v.dtype)
        else:
            assert type(u) is type(v) and u == v, f.name
            if isinstance(v, tuple):
                assert all(type(x) is type(y) for x, y in zip(u, v, strict=True)), f.name
            if isinstance(v, float):
                assert math.copysign(1, u) == math.copysign(1, v)  # -0.0 stays -0.0


@settings(max_examples=150, deadline=None)
@given(values=runs)
def test_a_run_read_back_is_the_run_written(tmp_path_factory: pytest.TempPathFactory,
                                            values) -> None:
    path = str(tmp_path_factory.mktemp("run") / "run-0.result")
    write_run(path, values)
    diffs, entries, skips, failed, open_pairs = read_run(path)
    arrays = any(isinstance(getattr(p, f), np.ndarray) for v in values[1].values()
                 for p in v for f in ("ids", "output_ids"))
    assert os.path.exists(path) == arrays  # kept for the arrays read from it, else gone
    assert diffs == values[0]
    assert [type(d) for _, d in diffs] == [type(d) for _, d in values[0]]
    assert all(type(p.breakpoints_a) is tuple for _, p in diffs if isinstance(p, PairDiff))
    assert list(entries) == list(values[1])
    for name, want in values[1].items():
        assert len(entries[name]) == len(want)
        for got, one in zip(entries[name], want, strict=True):
            _same_entry(got, one)
    assert skips == values[2] and all(type(s) is tuple for v in skips.values() for s in v)
    assert failed == values[3] and open_pairs == values[4]


def _entry(**changes: object) -> _Prepared:
    return replace(_Prepared("r1", "s", None, False, 12.5, 100, np.arange(5, dtype=np.uint32),
                             None, None, 0, 0), **changes)


def test_spilled_ids_are_written_as_where_they_are_and_read_back_there(
        tmp_path: Path) -> None:
    spill = Spill()
    try:
        ref = spill_ids(np.arange(100_000, dtype=np.uint32), spill.folder)
        path = str(tmp_path / "run.result")
        write_run(path, ([], {"d": [_entry(ids=ref)]}, {}, {}, []))
        assert os.path.getsize(path) < 1_000  # the place, not 400 KB of ids
        back = read_run(path)[1]["d"][0].ids
        assert isinstance(back, SpilledIds)
        assert np.array_equal(np.asarray(back), np.arange(100_000))
    finally:
        spill.close()


def test_repeated_strings_are_one_object_once_read(tmp_path: Path) -> None:
    """A run's ids and session come back as one object each wherever they recur (the
    entries, their pairs, the skip reasons), as the worker held them."""
    path = str(tmp_path / "run.result")
    session, a, b = "session-" + "x" * 20, "req-" + "a" * 20, "req-" + "b" * 20
    pair = PairDiff(a, b, session, 10, 20, None, 16, 0, 0, "append_only", "", False)
    write_run(path, ([(0, pair)], {"d": [_entry(id=a, session=session),
                                         _entry(id=b, session=session, prev=a)]},
                     {"d": [(b, "no usage")]}, {}, []))
    diffs, entries, skips, _, _ = read_run(path)
    x, y = entries["d"]
    back = diffs[0][1]
    assert isinstance(back, PairDiff)
    assert x.session is y.session is back.session
    assert x.id is back.a is y.prev and y.id is back.b is skips["d"][0][0]


@pytest.mark.parametrize("entry", [
    _entry(seconds=math.inf), _entry(duration=math.nan), _entry(write_ttl=-math.inf),
    _entry(breakpoints=((0, math.nan),)), _entry(observed=2**64),
    _entry(id="\ud800"), _entry(ids=np.zeros((2, 2), dtype=np.uint32)),
    _entry(ids=np.array([None], dtype=object)), _entry(observed=np.int64(3)),
])
def test_a_value_json_cannot_hold_exactly_is_refused_and_no_file_is_left(
        tmp_path: Path, entry: _Prepared) -> None:
    path = tmp_path / "run.result"
    with pytest.raises(Unwritable):
        write_run(str(path), ([], {"d": [entry]}, {}, {}, []))
    assert not path.exists()
