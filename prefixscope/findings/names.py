"""Log files named for a person: by the shortest trailing part of their path that no other
file of the same report shares (Cline writes every task's log as ``ui_messages.json``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def short_names(paths: Sequence[str]) -> dict[str, str]:
    """path -> its shortest trailing path that no other path in `paths` ends with."""
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
