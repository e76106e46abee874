"""Where output goes: data on stdout, progress/warnings/errors on stderr.

The only module (with the command modules) that knows about rich. In ``--json``
mode nothing but the JSON document reaches stdout. Progress bars appear only when
stderr is a terminal and neither ``--json`` nor ``--quiet`` is set.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from prefixscope.cli.exitcodes import ExitCode

# Piped output is not cut to 80 columns: tables are data there.
out = Console(highlight=False, soft_wrap=False,
              width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, highlight=False)


def print_json(data: Any) -> None:
    """The JSON document, alone, on stdout."""
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2, default=str))
    sys.stdout.write("\n")


def fail(message: str, code: ExitCode = ExitCode.ERROR) -> typer.Exit:
    """Print a one-line error on stderr and return the Exit to raise.

    `message` is plain text (file names, SQL, log content): never read as rich markup.
    """
    err.print(f"[bold red]error:[/] {escape(message)}", markup=True, soft_wrap=True)
    return typer.Exit(code=int(code))


def warn(message: str, quiet: int = 0) -> None:
    """A warning on stderr; `message` is plain text, never rich markup."""
    if quiet < 2:
        err.print(f"[yellow]warning:[/] {escape(message)}", markup=True, soft_wrap=True)


def note(message: str, quiet: int = 0) -> None:
    if quiet < 1:
        err.print(message, markup=False, soft_wrap=True)


def show_progress(json_mode: bool, quiet: int) -> bool:
    return sys.stderr.isatty() and not json_mode and quiet == 0


@contextmanager
def byte_progress(enabled: bool, description: str) -> Iterator[Any]:
    """A callback (name, done, total) driving a rich progress bar, or a no-op."""
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                  TimeRemainingColumn(), console=err, transient=True) as progress:
        task = progress.add_task(description, total=None)

        def update(name: str, done: int, total: int) -> None:
            progress.update(task, completed=done, total=total or None,
                            description=f"{description} {name[-40:]}")

        yield update


@contextmanager
def count_progress(enabled: bool, description: str, total: int) -> Iterator[Any]:
    """A callback (items done) driving a rich progress bar over `total` items, or None."""
    if not enabled or total <= 1:
        yield None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), console=err, transient=True) as progress:
        task = progress.add_task(description, total=total)
        yield lambda done: progress.update(task, completed=done)
