"""Log files are named by the shortest trailing part of their path no other file shares
(`findings.names.short_names`). The oracle: the definition, each path's tails compared
with every other path's (what the function did before it counted tails)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from prefixscope.findings.names import short_names


def _by_definition(paths: list[str]) -> dict[str, str]:
    names: dict[str, str] = {}
    for path in paths:
        parts = Path(path).parts
        tail = parts
        for n in range(1, len(parts) + 1):
            tail = parts[-n:]
            if not any(other != path and Path(other).parts[-n:] == tail for other in paths):
                break
        names[path] = "/".join(tail)
    return names


_PART = st.sampled_from(["a", "b", "ui_messages.json", "x.jsonl", "", ".", "/"])
_PATH = st.lists(_PART, max_size=5).map(lambda parts: "/".join(parts))


@given(st.lists(_PATH, max_size=12))
def test_each_name_is_the_shortest_tail_no_other_path_ends_with(paths):
    assert short_names(paths) == _by_definition(paths)


def test_a_tail_shared_by_every_depth_is_the_whole_path():
    # two strings of the same parts ("a//b" is "a/b"), and one path inside another
    assert short_names(["a/b", "a//b", "c/a/b", "/x/y/z.json", "/w/y/z.json"]) == {
        "a/b": "a/b", "a//b": "a/b", "c/a/b": "c/a/b", "/x/y/z.json": "x/y/z.json",
        "/w/y/z.json": "w/y/z.json"}
