"""The `--by` dimensions, defined once: bucket, segments (and later report) group by them.

A dimension is read from anything shaped like a request: a `Request` or a store
`UsageRecord` (both spell the fields the same way); the session comes from threading
and is passed separately.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

DIMENSIONS = ("endpoint", "model", "client", "user", "channel", "day", "source", "session",
              "project")


class Groupable(Protocol):
    """The request fields a dimension reads."""

    @property
    def endpoint(self) -> str: ...
    @property
    def model(self) -> str | None: ...
    @property
    def client(self) -> str | None: ...
    @property
    def user(self) -> str | None: ...
    @property
    def channel(self) -> str | None: ...
    @property
    def source_format(self) -> str: ...
    @property
    def timestamp(self) -> datetime | None: ...


def check_dimensions(by: Sequence[str]) -> None:
    """Raises ValueError naming the first unknown dimension."""
    unknown = [d for d in by if d not in DIMENSIONS]
    if unknown:
        raise ValueError(f"unknown dimension {unknown[0]!r} (known: {', '.join(DIMENSIONS)})")


def dimension_value(dim: str, item: Groupable, session: str | None) -> Any:
    """The value of one --by dimension for one request (None when the log lacks it)."""
    if dim == "day":
        return item.timestamp.date().isoformat() if item.timestamp else None
    if dim == "session":
        return session
    if dim == "project":  # the agent's working directory: a record's, or a request's cwd
        project = getattr(item, "project", None)
        if project is None:
            metadata = getattr(item, "metadata", None)
            project = metadata.get("cwd") if isinstance(metadata, dict) else None
        return project if isinstance(project, str) else None
    return {"endpoint": item.endpoint, "model": item.model, "client": item.client,
            "user": item.user, "channel": item.channel,
            "source": item.source_format}.get(dim)


def group_key(by: Sequence[str], item: Groupable, session: str | None) -> tuple[Any, ...]:
    """The tuple of dimension values `item` is grouped under."""
    return tuple(dimension_value(d, item, session) for d in by)
