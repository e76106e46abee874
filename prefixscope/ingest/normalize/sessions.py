"""Session keys for agent trajectories: one file (or one run in it) is one session.

SWE-agent, OpenHands and mini-swe-agent log no session id: a trajectory file (or an
OpenHands ``output.jsonl`` line) is one agent run, and reruns of the same instance
reuse its name. All three key the session the same way, ``<format>:<name>:<12 hex of
the content hash>``, so two runs of one instance stay apart and re-ingesting a file
gives the same key.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefixscope.model.hashing import content_hash

if TYPE_CHECKING:
    from prefixscope.ingest.source import Source

_DIGEST_CHARS = 12
_TRAJ_SUFFIX = re.compile(r"(\.traj)?(\.json)?(\.gz)?$")


def file_session_key(prefix: str, name: str, content: Any) -> str:
    """``<prefix>:<name>:<12 hex>``: one file/run is one session; the hash keeps reruns apart."""
    digest = content_hash(content).split(":", 1)[1][:_DIGEST_CHARS]
    return f"{prefix}:{name}:{digest}"


def source_stem(source: Source) -> str:
    """The file name without trajectory suffixes (``x.traj``, ``x.traj.json``); "stdin" for "-"."""
    if source.name == "-":
        return "stdin"
    return _TRAJ_SUFFIX.sub("", Path(source.name).name) or Path(source.name).name
