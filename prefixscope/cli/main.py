"""The `prefixscope` command: composes one Typer sub-module per command.

Start-up must stay fast: nothing here (or in the command modules at import time)
imports polars, duckdb, transformers or matplotlib; commands import the core
lazily inside their callbacks. A test enforces this for `prefixscope --help`.
"""

from __future__ import annotations

import os
from typing import Any

import typer

from prefixscope.cli import (
    bucket_cmd,
    calls_cmd,
    diff_cmd,
    engine_log_cmd,
    export_cmd,
    ingest_cmd,
    privacy,
    render_cmd,
    report_cmd,
    segments_cmd,
    simulate_cmd,
    sql_cmd,
)
from prefixscope.cli.exitcodes import EXIT_CODES_HELP, ExitCode

# transformers announces on import that PyTorch is absent; prefixscope only needs its
# tokenizers and chat templates, so the advice is noise on stderr.
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")



def _typer() -> typer.Typer:
    """The app's group with its options (`privacy.options`), no command yet."""
    made = typer.Typer(
        name="prefixscope",
        help="Offline forensics for prompt (prefix) caching: where do consecutive turns "
             "diverge, what breaks the cache, and what a fix would gain.\n\n"
             "Example:\n    prefixscope report sample_logs/ --html report.html\n\n"
             + EXIT_CODES_HELP + "\n\nMore: README.md, docs/cli.md (every command's help).",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_show_locals=False,
        rich_markup_mode="rich",
        cls=privacy.Group,
    )
    made.callback()(privacy.options)
    return made


app = _typer()
_MODULES: dict[str, Any] = {}  # each command's name -> the module that registers it

# `report` first: the main job, and `calls`, its ledger a call at a time; then the
# analyses it is made of, then the store's tools.
for module in (report_cmd, calls_cmd, ingest_cmd, diff_cmd, segments_cmd, bucket_cmd,
               simulate_cmd, render_cmd, engine_log_cmd, sql_cmd, export_cmd):
    module.register(app)
    _MODULES[app.registered_commands[-1].name or ""] = module


def app_for(args: list[str]) -> typer.Typer:
    """The app to run `args` with: one holding only the command they name, when nothing
    but privacy options comes before its name, else `app`. Click's group is made from the
    signature of every command it holds, at each run (typer's `get_command`: 0.022 s of
    CPU for the eleven, 0.004 s for one); the command runs as in `app`: its options, the
    privacy options after its name hoisted (`privacy.hoisted` finds the same name), and
    an unknown name, the app's help or no name at all are answered by `app` itself."""
    at = privacy.command_at(args, _MODULES)
    if at is None:
        return app
    one = _typer()
    _MODULES[args[at]].register(one)
    return one


# The signal unwinding the command, once one arrived: its exit code (Ctrl-C 130, SIGTERM
# 143). Inside a DuckDB query the KeyboardInterrupt the handler raises comes out as
# DuckDB's own RuntimeError ("Query interrupted"); this says it is still the signal.
_stopped_by: ExitCode | None = None


def _on_signal(signum: int, frame: object) -> None:
    """Ctrl-C and SIGTERM unwind the command alike (temporary stores are removed, a new
    store is not left half made); the exit code says which arrived."""
    import signal  # imported by `main`, which installs this handler

    global _stopped_by
    _stopped_by = (ExitCode.TERMINATED if signum == signal.SIGTERM
                   else ExitCode.INTERRUPTED)
    raise KeyboardInterrupt


# The cyclic collector's first threshold for a run of the command line (Python's is 700):
# a report allocates millions of short-lived tuples, dicts and lists, freed by their
# reference counts, and a young collection every 700 of them walked the survivors again
# and promoted them towards the full collections. Collected every 10,000, the collector
# took 0.088 -> 0.045 s of the real Codex rollout's report, 0.163 -> 0.09 s of
# sample_logs/' and 0.060 -> 0.045 s of diff --all on 6 x 40 sessions (timed by
# gc.callbacks in the command; docs/scale.md, issue 37); at most 10,000 more container
# objects wait for it. What is collected, and every answer, stays the same: only when.
GC_YOUNG = 10_000


def main() -> None:
    """Entry point: a bug gets one line on stderr, not a traceback (PREFIXSCOPE_DEBUG=1);
    Ctrl-C one line saying what was written, and exit 130; SIGTERM the same, exit 143."""
    import atexit
    import gc
    import signal
    import sys

    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])
    # At exit the interpreter searches everything still alive for cycles, more than once,
    # as it tears the modules down: 0.07-0.2 s of a small report's CPU, for nothing the
    # run needs. Frozen at exit (an exit handler: it runs after those registered during
    # the command and before those of modules imported earlier; none needs the
    # collector), every object is still freed by its reference count and every handler
    # runs; only cyclic garbage left at exit is not searched for, which Python does not
    # promise to finalize anyway. What the command writes (stores, files, the temporary
    # store) it closes itself before it returns.
    atexit.register(gc.freeze)
    signal.signal(signal.SIGTERM, _on_signal)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        # not where Ctrl-C is ignored (`nohup`, a script's `cmd &`): it stays ignored
        signal.signal(signal.SIGINT, _on_signal)
    try:
        app_for(sys.argv[1:])(standalone_mode=True)
    except SystemExit as exit:
        if exit.code == ExitCode.INTERRUPTED:  # Typer's own answer to KeyboardInterrupt
            _interrupted()
            raise SystemExit(int(_stopped_by or ExitCode.INTERRUPTED)) from None
        raise
    except KeyboardInterrupt:  # before or after Typer's own handler
        _interrupted()
        raise SystemExit(int(_stopped_by or ExitCode.INTERRUPTED)) from None
    except Exception as exc:  # noqa: BLE001 - the last line of defence
        if _stopped_by is not None:
            # the interrupt raised inside a DuckDB query comes out as its RuntimeError
            # ("Query interrupted"): it is still the signal, answered as one
            _interrupted()
            raise SystemExit(int(_stopped_by)) from None
        if os.environ.get("PREFIXSCOPE_DEBUG"):
            raise
        _unexpected(exc)
        raise SystemExit(int(ExitCode.ERROR)) from None


def _unexpected(exc: Exception) -> None:
    """The one line an unexpected exception leaves on stderr: a damaged store or a full
    disk said as such, else an internal error (a bug) and how to see its traceback."""
    import sys

    from prefixscope.api.handle import damaged_store

    # a store file DuckDB opened but cannot read, or a write the disk had no room for
    damaged = damaged_store(exc)
    if damaged is not None:
        sys.stderr.write(f"error: {damaged}\n")
        return
    sys.stderr.write(f"error: internal error: {type(exc).__name__}: "
                     f"{str(exc).splitlines()[0] if str(exc) else ''} "
                     "(a bug: rerun with PREFIXSCOPE_DEBUG=1 and report it)\n")


def _interrupted() -> None:
    import sys

    from prefixscope.cli import console

    sys.stderr.write(console.interrupted_line() + "\n")
    sys.stderr.flush()


if __name__ == "__main__":
    main()
