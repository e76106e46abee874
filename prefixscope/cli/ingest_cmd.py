"""`prefixscope ingest`: read logs of any supported format into the store."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from prefixscope import api
from prefixscope.cli import console
from prefixscope.cli.manual import INPUTS, Command
from prefixscope.cli.options import JsonOut, Quiet, SessionGap, SkipMissing, StoreOpt, defaults

if TYPE_CHECKING:
    from prefixscope.views.ingested import IngestResult

API = defaults(api.ingest)  # the library's defaults, read by the options below


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

    from prefixscope.api.names import ingest_formats

    columns = (width or shutil.get_terminal_size().columns) - 2
    lines = []
    for name, description in ingest_formats():
        lines += textwrap.wrap(f"{name:<15} {description}", max(40, columns),
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
                   ] = API["format"],
    store: StoreOpt = None,
    skip_missing: SkipMissing = False,
    strict: Annotated[bool, typer.Option(
        "--strict", rich_help_panel=INPUTS,
        help="Fail (exit 1, store nothing) if any record or file is skipped.")
    ] = API["strict"],
    session_gap: SessionGap = API["session_gap"],
    session_key: Annotated[list[str] | None, typer.Option(
        "--session-key", metavar="EXPR", rich_help_panel=INPUTS,
        help="Where else a session id is: header:NAME (a logged request header), "
             "body:dotted.path (the request body) or meta:dotted.path (the request's "
             "metadata). Repeatable; the first that matches wins over the log's own id.")
    ] = None,
    max_line_bytes: Annotated[int, typer.Option(
        "--max-line-bytes", min=1, metavar="N", rich_help_panel=INPUTS,
        help="A line of a log longer than N bytes is skipped (counted, with its place), "
             "read past without holding it: a decompression bomb cannot fill memory.")]
    = API["max_line_bytes"],
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
    from prefixscope.views.ingested import ingest_json
    from prefixscope.views.terminal.ingest import ingest_screen

    path = Path(store or API["store"])
    created = not path.exists()  # a run that stores nothing leaves no new file behind
    failure = None
    try:
        with console.byte_progress(console.show_progress(json_out, quiet), "ingest") as progress:
            # a store the library would create is made only when the run stores something
            st = api.ingest(paths, **({"store": store} if store is not None else {}),
                            format=fmt, strict=strict, session_gap=session_gap,
                            session_key=session_key or (), max_line_bytes=max_line_bytes,
                            skip_missing=skip_missing, progress=progress)
        st.close()
        result = st.ingest_result
    except api.Error as exc:
        if exc.result is None:  # nothing read: a bad option or store
            raise console.api_error(exc) from None
        failure, result = exc, cast("IngestResult", exc.result)
    assert result is not None
    if json_out:
        console.print_json(ingest_json(result))
    else:
        console.show(ingest_screen(result, str(path), console.screen()), quiet)
    if failure is not None:
        raise console.api_error(failure)
    _fail_if_rejected(result, fmt, path, created)


def _fail_if_rejected(result: IngestResult, fmt: str, path: Path, created: bool) -> None:
    """Every record or file was rejected: that is bad input, not a successful run."""
    if result.skipped and not result.ingested + result.already_present:
        hint = (f" with --format {fmt} (drop --format to detect each file's format)"
                if fmt != "auto" else "")
        raise console.fail(f"no request read{hint}: {result.skipped:,} record(s)/file(s) "
                           "skipped" + (f"; no store written at {path}" if created else ""))

