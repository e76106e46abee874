"""`--since` / `--until` / `--project`: the part of a store an analysis looks at.

A scope is applied by making a store that holds only its requests (their bodies and
parts with them) and threading that store's sessions again, so every analysis, however it
reads the store, sees the same subset: a session cut by the window's start begins (cold)
at its first request inside it. The project is Claude Code's and Codex's working
directory (`cwd`, kept in each request's metadata; TraceLab's `project`), matched whole or
by its last path components (`--project myrepo` matches `/home/me/src/myrepo`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta


class ScopeError(ValueError):
    """A --since / --until value that is not a date (one line, for a person)."""


@dataclass(frozen=True, slots=True)
class Scope:
    since: datetime | None = None  # inclusive
    until: datetime | None = None  # exclusive
    project: str | None = None

    def where(self) -> tuple[str, list[object]]:
        """A SQL condition over the requests table's columns, and its parameters."""
        parts: list[str] = []
        params: list[object] = []
        if self.since is not None:
            parts.append("timestamp >= ?")
            params.append(self.since)
        if self.until is not None:
            parts.append("timestamp < ?")
            params.append(self.until)
        if self.project is not None:
            project = self.project.rstrip("/")
            where = ("coalesce(json_extract_string(metadata, '$.cwd'), "
                     "json_extract_string(metadata, '$.project'))")
            parts.append(f"({where} = ? OR rtrim({where}, '/') LIKE ? ESCAPE '\\')")
            params += [project, "%/" + _like(project)]
        return (" AND ".join(parts) or "true"), params

    def describe(self) -> str:
        said = []
        if self.since is not None:
            said.append(f"since {self.since:%Y-%m-%d %H:%M} UTC")
        if self.until is not None:
            said.append(f"until {self.until:%Y-%m-%d %H:%M} UTC")
        if self.project is not None:
            said.append(f"project {self.project}")
        return ", ".join(said)


def scope_of(since: str | None, until: str | None, project: str | None) -> Scope | None:
    """The scope the options give (None: the whole store). A date alone (2026-03-02 or
    ccusage's 20260302) is a whole UTC day: --until includes it; a time without an offset
    is UTC (the logs' timestamps are stored in UTC), one with an offset is converted."""
    if since is None and until is None and not project:
        return None
    return Scope(_parse(since, "--since", end=False), _parse(until, "--until", end=True),
                 project or None)


def _parse(text: str | None, option: str, *, end: bool) -> datetime | None:
    if text is None:
        return None
    value = text.strip()
    if len(value) == 8 and value.isdigit():  # ccusage's YYYYMMDD
        value = f"{value[:4]}-{value[4:6]}-{value[6:]}"
    try:
        if len(value) == 10:
            day = date.fromisoformat(value)
            start = datetime(day.year, day.month, day.day)
            return start + timedelta(days=1) if end else start
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ScopeError(f"{option} {text!r} is not a date (YYYY-MM-DD, YYYYMMDD, or an ISO "
                         "date and time)") from None
    if parsed.tzinfo is not None:  # the store keeps naive UTC
        from datetime import UTC

        parsed = parsed.astimezone(UTC).replace(tzinfo=None)
    return parsed


def _like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
