"""Log files named for a person: by the shortest trailing part of their path that no other
file of the same report shares (Cline writes every task's log as ``ui_messages.json``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path


def short_names(paths: Sequence[str]) -> dict[str, str]:
    """path -> its shortest trailing path that no other path in `paths` ends with.

    Each path's parts are read once and every tail length's tails counted: a tail counted
    once is that path's alone (comparing each path with every other one cost a log of
    Codex rollouts, one file a session, the square of its files: 1.37 M paths parsed at
    1 GiB). Two strings of the same parts never have a tail of their own: the whole path."""
    split = {path: Path(path).parts for path in paths}
    counts: Counter[tuple[str, ...]] = Counter(
        parts[-n:] for parts in split.values() for n in range(1, len(parts) + 1))
    names: dict[str, str] = {}
    for path, parts in split.items():
        tail = parts
        for n in range(1, len(parts) + 1):
            tail = parts[-n:]
            if counts[tail] == 1:
                break
        names[path] = "/".join(tail)
    return names
