"""`calls` for a person: one line per request, a session at a time, so a pattern shows by
eye down a column (fourteen calls reading exactly 3,072; a break at the same segment
every turn)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from rich.markup import escape
from rich.table import Table

from prefixscope.findings.calls import Call, Calls, SessionCalls
from prefixscope.views.terminal import Screen, count, percent, visible


def calls_screen(calls: Calls, screen: Screen) -> Screen:
    """A line for the whole, then each session: its header line and its calls' table."""
    shown = f" matching {escape(visible(calls.session))!s}" if calls.session else ""
    screen.print(f"{count(calls.requests, 'call')} in {count(len(calls.sessions), 'session')}"
                 f"{shown} · in {calls.prompt_tokens:,} · read {calls.cached_tokens:,} = "
                 f"{percent(_rate(calls.cached_tokens, calls.prompt_tokens))} · missed "
                 f"{calls.missed_tokens:,}{_causes(calls.by_cause)} · times in UTC",
                 soft_wrap=True)
    for s in calls.sessions:
        screen.print()
        screen.print(_header(s), soft_wrap=True)
        screen.print(_table(s))
    if calls.outside_requests:
        reason = "predicted" if calls.basis == "predicted" else "observed"
        screen.note(f"{count(calls.outside_requests, 'request')} of the log are not listed: "
                    f"outside the ledger's basis ({reason})")
    return screen


def _header(s: SessionCalls) -> str:
    name = "(no session)" if s.session is None else escape(visible(s.session))
    times = [c.timestamp for c in s.calls if c.timestamp is not None]
    span = f" · {_when(times[0])} → {_when(times[-1])}" if times else ""
    write = "" if s.cache_write_tokens is None else f" · write {s.cache_write_tokens:,}"
    return (f"[bold]session {name}[/] · {count(len(s.calls), 'call')}{span} · "
            f"in {s.prompt_tokens:,} · read {s.cached_tokens:,} = {percent(s.hit_rate)}"
            f"{write} · missed {s.missed_tokens:,}{_causes(s.by_cause)}")


def _table(s: SessionCalls) -> Table:
    table = Table(show_edge=False, pad_edge=False)
    table.add_column("time", no_wrap=True)
    table.add_column("model", no_wrap=True)
    for name in ("in", "read", "write", "missed"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("cause")
    said = any(c.events or c.verdict for c in s.calls)
    if said:  # only where the log recorded something: the usual table stays as it was
        table.add_column("the log says")
    for c in s.calls:
        row = [_when(c.timestamp) if c.timestamp else "-",
               escape(visible(c.model)) if c.model else "-",
               f"{c.prompt_tokens:,}", f"{c.cached_tokens:,}",
               "-" if c.cache_write_tokens is None else f"{c.cache_write_tokens:,}",
               f"{c.missed_tokens:,}", _cause(c)]
        table.add_row(*row, *([_log_says(c)] if said else []))
    return table


def _log_says(c: Call) -> str:
    """The session events recorded before the call (the one that decided its cause marked
    ``decided``) and the provider's own verdict on its miss."""
    parts = []
    for e in c.events:
        mark = " (decided)" if e.kind == c.recorded else ""
        parts.append(f"{escape(e.kind)}{mark}: {escape(visible(e.detail))}")
    if c.verdict is not None:
        missed = ("" if c.verdict_missed_tokens is None
                  else f", {c.verdict_missed_tokens:,} missed")
        parts.append(f"provider: {escape(visible(c.verdict))}{missed}")
    return " · ".join(parts) or "-"


def _cause(c: Call) -> str:
    """Each cause with its tokens, the largest first; a break says where it broke."""
    if not c.causes:
        return "-"
    parts = []
    for cause, n in sorted(c.causes.items(), key=lambda kv: -kv[1]):
        said = f"{cause} {n:,}"
        if cause == "break" and (c.break_segment or c.break_kind):
            where = f" at {escape(visible(c.break_segment))}" if c.break_segment else ""
            kind = f" ({escape(c.break_kind)})" if c.break_kind else ""
            said += where + kind
        parts.append(said)
    return " · ".join(parts)


def _causes(by_cause: Mapping[str, int]) -> str:
    said = [f"{cause} {n:,}" for cause, n in sorted(by_cause.items(), key=lambda kv: -kv[1])
            if n]
    return f": {' · '.join(said)}" if said else ""


def _when(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S")


def _rate(cached: int, prompt: int) -> float | None:
    return cached / prompt if prompt else None
