"""`prefixscope ingest`: read logs of any supported format into the store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from prefixscope.cli import console
from prefixscope.cli.exitcodes import ExitCode
from prefixscope.cli.manual import INPUTS, Command
from prefixscope.cli.options import JsonOut, Quiet, SessionGap, StoreOpt


class IngestCommand(Command):
    """`ingest`, whose help lists the format registry (read when the help is shown: the
    formats' modules are not imported for anything else)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        if self.help and FORMATS in self.help:
            self.help = self.help.replace(FORMATS, format_list())
        super().format_help(ctx, formatter)


FORMATS = "{formats}"


def format_list(width: int | None = None) -> str:
    """The registry's formats as an indented list, NAME then what it reads, wrapped to the
    terminal's width (the help's own margins taken off)."""
    import shutil
    import textwrap

    from prefixscope.ingest.formats import all_formats

    columns = (width or shutil.get_terminal_size().columns) - 2
    lines = []
    for m in all_formats():
        lines += textwrap.wrap(f"{m.NAME:<15} {m.DESCRIPTION}", max(40, columns),
                               initial_indent="  ", subsequent_indent=" " * 18)
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    app.command("ingest", cls=IngestCommand)(ingest)


def ingest(
    paths: Annotated[list[str], typer.Argument(
        metavar="LOGS", help="Log files, directories (recursive), globs, or - for stdin; gzip "
                             "is read transparently.")],
    fmt: Annotated[str, typer.Option("--format", "-f", metavar="NAME", rich_help_panel=INPUTS,
                                     help="Read every file as this format (one of the list "
                                          "above) instead of detecting it from content.")
                   ] = "auto",
    store: StoreOpt = None,
    strict: Annotated[bool, typer.Option(
        "--strict", rich_help_panel=INPUTS,
        help="Fail (exit 1, store nothing) if any record or file is skipped.")] = False,
    session_gap: SessionGap = 60.0,
    session_key: Annotated[list[str] | None, typer.Option(
        "--session-key", metavar="EXPR", rich_help_panel=INPUTS,
        help="Where else a session id is: header:NAME (a logged request header), "
             "body:dotted.path (the request body) or meta:dotted.path (the request's "
             "metadata). Repeatable; the first that matches wins over the log's own id.")
    ] = None,
    json_out: JsonOut = False,
    quiet: Quiet = 0,
) -> None:
    """Normalize logs into the store (a DuckDB file) and thread them into sessions.

    Each file's format is detected from its content (--format NAME forces one):

    {formats}

    Example:
        prefixscope ingest ~/.claude/projects/ langfuse-export.jsonl --store cc.duckdb
        prefixscope ingest proxy.jsonl --session-key header:x-run-id

    More: docs/formats.md, docs/store.md.
    """
    from prefixscope.ingest.formats import format_names
    from prefixscope.ingest.normalize.sessions import parse_session_rule
    from prefixscope.store import DEFAULT_STORE, Store, StoreError
    from prefixscope.store.load import ingest_paths
    from prefixscope.views.json import ingest_json
    from prefixscope.views.terminal.ingest import ingest_screen

    if fmt != "auto" and fmt not in format_names():
        raise console.fail(f"unknown format {fmt!r}; formats: {', '.join(format_names())}",
                           ExitCode.USAGE)
    try:
        rules = tuple(parse_session_rule(expr) for expr in session_key or ())
    except ValueError as exc:
        raise console.fail(str(exc), ExitCode.USAGE) from None
    path = Path(store or DEFAULT_STORE)
    created = not path.exists()  # a run that stores nothing leaves no new file behind
    try:
        st = Store.open(path)
    except StoreError as exc:
        raise console.fail(str(exc)) from None
    try:
        with console.byte_progress(console.show_progress(json_out, quiet), "ingest") as progress:
            result = ingest_paths(paths, st, fmt=fmt, strict=strict,
                                  session_gap_s=session_gap * 60, progress=progress,
                                  session_rules=rules)
    except KeyboardInterrupt:  # the one transaction rolled back: the store is as it was
        st.close()
        if created:
            _remove_store(path)
        raise
    finally:
        st.close()
    rejected = result.failed or (result.skipped and not result.ingested + result.already_present)
    if rejected and created:
        _remove_store(path)
    result = console.redacted(result)  # secrets masked before any view cuts text
    if json_out:
        console.print_json(ingest_json(result))
    else:
        console.show(ingest_screen(result, str(path), console.screen()), quiet)
    if result.failed:
        first = ""
        if result.errors:
            err = result.errors[0]
            place = err.file if err.line is None else f"{err.file}:{err.line}"
            first = f" (the first: {place}: {err.reason})"
        raise console.fail(f"--strict: {result.skipped} record(s)/file(s) skipped{first}; "
                           "nothing was stored")
    if rejected:
        # Every record or file was rejected: that is bad input, not a successful run.
        hint = (f" with --format {fmt} (drop --format to detect each file's format)"
                if fmt != "auto" else "")
        raise console.fail(f"no request read{hint}: {result.skipped:,} record(s)/file(s) "
                           "skipped" + (f"; no store written at {path}" if created else ""))


def _remove_store(path: Path) -> None:
    """The store file (and DuckDB's write-ahead log) this run created and left empty."""
    for leftover in (path, path.with_name(path.name + ".wal")):
        leftover.unlink(missing_ok=True)
