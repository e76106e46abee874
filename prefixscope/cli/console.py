"""Where output goes: data on stdout, progress/warnings/errors on stderr.

The only module (with the command modules) that knows about rich. In ``--json``
mode nothing but the JSON document reaches stdout. Progress bars appear only when
stderr is a terminal and neither ``--json`` nor ``--quiet`` is set.

Secrets are masked once, by the library: every result an `api` call returns is masked
(`api.masking`, set by ``--redact`` / ``--no-default-redaction``) before a view cuts or
wraps its text, so stdout (JSON, terminal screens, raw text) writes what the library
returned and masks nothing again: the library's caller and the command line get the
same values (tests/test_redaction.py). What is no result is masked here, on stderr:
errors, warnings and notes (an `api.Error`'s line, a file name in the progress bar).

rich is imported when something is first printed through it (``out``, ``err``: the
consoles are made on first use), not at start-up: a ``--json`` run that writes no
warning never imports it (issue 37: start-up budgeted; tests/test_startup.py).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import typer

from prefixscope.api.masking import masked_text
from prefixscope.cli.exitcodes import ExitCode
from prefixscope.views.invisible import escaped, json_escaped
from prefixscope.views.terminal import Screen, one_line

if TYPE_CHECKING:
    from rich.console import Console

    out: Console  # stdout's console, made on first use (module `__getattr__`)
    err: Console  # stderr's


def __getattr__(name: str) -> Console:
    """``out`` and ``err``, the consoles, made when first asked for (PEP 562): importing
    rich costs start-up that a ``--json`` run without warnings does not need."""
    if name not in ("out", "err"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from rich.console import Console

    if name == "out":  # piped output is not cut to 80 columns: tables are data there
        made = Console(highlight=False, soft_wrap=False,
                       width=None if sys.stdout.isatty() else 200)
    else:
        made = Console(stderr=True, highlight=False)
    globals()[name] = made
    return made


def _out() -> Console:
    made = globals().get("out")
    return __getattr__("out") if made is None else made


def _err() -> Console:
    made = globals().get("err")  # (a test may have set its own)
    return __getattr__("err") if made is None else made


def escape(markup: str) -> str:
    """`rich.markup.escape`: `markup` shown as it is, not read as rich markup."""
    from rich.markup import escape as rich_escape

    return rich_escape(markup)


def print_json(data: Any) -> None:
    """The JSON document, alone, on stdout: a view of a library result, masked there."""
    sys.stdout.write(json_escaped(json.dumps(data, ensure_ascii=False, indent=2,
                                             default=str)))
    sys.stdout.write("\n")


def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def write_raw(text: str) -> None:
    """`text` (a library result's, masked there) on stdout exactly (lone surrogates from a
    log written as U+FFFD)."""
    sys.stdout.write(text.encode("utf-8", "replace").decode("utf-8"))
    sys.stdout.flush()


def fail(message: str, code: ExitCode = ExitCode.ERROR) -> typer.Exit:
    """Print a one-line error on stderr and return the Exit to raise.

    `message` is plain text (file names, SQL, log content): never read as rich markup, and
    shown on one line (`views.terminal.one_line`).
    """
    _err().print(f"[bold red]error:[/] {escape(one_line(masked_text(message)))}", markup=True,
              soft_wrap=True)
    return typer.Exit(code=int(code))


def warn(message: str, quiet: int = 0) -> None:
    """A warning on stderr; `message` is plain text, never rich markup (nor a control
    sequence, nor a second line: a file name or a log line in it is shown with ``\\xNN``)."""
    if quiet < 2:
        _err().print(f"[yellow]warning:[/] {escape(one_line(masked_text(message)))}", markup=True,
                  soft_wrap=True)


_written: list[str] = []  # the files this run wrote, for the line an interrupt prints


def wrote(path: object, quiet: int = 0, more: str = "") -> None:
    """Say a file was written (a note), and remember it for `interrupted_line`."""
    _written.append(str(path))
    note(f"wrote {path}{more}", quiet)


def interrupted_line() -> str:
    """The one line Ctrl-C leaves on stderr: what this run wrote before it."""
    if not _written:
        return "interrupted: nothing written"
    return "interrupted: wrote only " + ", ".join(_written)


def note(message: str, quiet: int = 0) -> None:
    """A note on stderr, plain text on one line (as `warn`)."""
    if quiet < 1:
        _err().print(one_line(masked_text(message)), markup=False, soft_wrap=True)


def screen() -> Screen:
    """An empty view as wide as stdout."""
    return Screen(width=_out().width)


def show(view: Screen, quiet: int = 0) -> None:
    """A view's output: its prints on stdout, then its warnings and notes on stderr."""
    for objects, kwargs in view.calls:
        print_out(*objects, **kwargs)
    for message in view.warnings:
        warn(message, quiet)
    for message in view.notes:
        note(message, quiet)


def print_out(*objects: Any, **kwargs: Any) -> None:
    """`rich.Console.print` on stdout (a view of a library result, masked there), any
    invisible or reordering character a view let through shown as ``\\uNNNN``."""
    stdout = _out()
    with stdout.capture() as captured:
        stdout.print(*objects, **kwargs)
    stdout.file.write(escaped(captured.get()))
    stdout.file.flush()


def show_progress(json_mode: bool, quiet: int) -> bool:
    return sys.stderr.isatty() and not json_mode and quiet == 0


@contextmanager
def byte_progress(enabled: bool, description: str) -> Iterator[Any]:
    """A callback (name, bytes done, bytes total, requests read) driving a rich progress
    bar, or None."""
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                  TimeRemainingColumn(), console=_err(), transient=True) as progress:
        task = progress.add_task(description, total=None)

        def update(name: str, done: int, total: int, requests: int) -> None:
            shown = escape(one_line(masked_text(name))[-40:])  # a file name: log text
            progress.update(task, completed=done, total=total or None,
                            description=f"{description} {shown} · {requests:,} requests")

        yield update


@contextmanager
def counter(json_mode: bool, quiet: int, description: str) -> Iterator[Any]:
    """A callback (done, total) driving a rich progress bar on a terminal, or None. The bar
    starts at the first call: what runs before it (LOGS ingested with their own bar) is
    not under it."""
    if not show_progress(json_mode, quiet):
        yield None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    with _started_on_call(lambda: Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeRemainingColumn(), console=_err(), transient=True), description, None) as bar:
        yield lambda done, total: bar(completed=done, total=total)


@contextmanager
def steps(json_mode: bool, quiet: int, description: str, total: int) -> Iterator[Any]:
    """A callback (step name) advancing a rich progress bar of `total` steps, or None; the
    bar starts at the first step (as `counter`'s)."""
    if not show_progress(json_mode, quiet):
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with _started_on_call(lambda: Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            console=_err(), transient=True), description, total) as bar:
        yield lambda name: bar(advance=1, description=f"{description}: {name}")


@contextmanager
def _started_on_call(make: Any, description: str, total: int | None) -> Iterator[Any]:
    """A callback updating a progress bar `make()` builds, started by the first update and
    stopped on leaving (rich shows one live bar at a time)."""
    live: list[Any] = []

    def update(**fields: Any) -> None:
        if not live:
            progress = make()
            progress.start()
            live.extend((progress, progress.add_task(description, total=total)))
        live[0].update(live[1], **fields)

    try:
        yield update
    finally:
        if live:
            live[0].stop()


def api_error(exc: Exception) -> typer.Exit:
    """A `prefixscope.Error` as this command's error: its one line, exit 2 for an option's
    value, else 1."""
    usage = bool(getattr(exc, "usage", False))
    return fail(str(exc), ExitCode.USAGE if usage else ExitCode.ERROR)


@contextmanager
def api_errors() -> Iterator[None]:
    """A `prefixscope.Error` raised in the block becomes this command's error
    (`api_error`)."""
    from prefixscope.api import Error

    try:
        yield
    except Error as exc:
        raise api_error(exc) from None


@contextmanager
def api_notes(quiet: int) -> Iterator[None]:
    """What the library logs on the ``prefixscope`` logger while the command runs, printed
    as the command's notes (INFO) and warnings (WARNING and above) on stderr."""
    import logging

    class _Printed(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if record.levelno >= logging.WARNING:
                warn(message, quiet)
            else:
                note(message, quiet)

    logger = logging.getLogger("prefixscope")
    handler = _Printed(logging.INFO)
    saved = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # printed here, not again by a handler the root logger has
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
