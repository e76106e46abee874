"""`prefixscope ingest`: read logs of any supported format into the store."""

from __future__ import annotations

from typing import Annotated

import typer

from prefixscope.cli import console
from prefixscope.cli.exitcodes import ExitCode
from prefixscope.cli.options import JsonOut, Quiet, SessionGap, StoreOpt
from prefixscope.ingest.source import MAX_LINE_BYTES


def register(app: typer.Typer) -> None:
    app.command("ingest")(ingest)


def ingest(
    paths: Annotated[list[str], typer.Argument(help="Log files, directories (recursive), globs, "
                                                    "or - for stdin; gzip is read transparently.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="Force a format instead of "
                                                            "detecting it from content.")] = "auto",
    store: StoreOpt = None,
    strict: Annotated[bool, typer.Option("--strict", help="Fail (exit 1, store nothing) if any "
                                                          "record or file is skipped.")] = False,
    session_gap: SessionGap = 60.0,
    session_key: Annotated[list[str] | None, typer.Option(
        "--session-key", metavar="EXPR",
        help="Where else a session id is: header:NAME (a logged request header), "
             "body:dotted.path (the request body) or meta:dotted.path (the request's "
             "metadata). Repeatable; the first that matches wins over the log's own id.")
    ] = None,
    max_line_bytes: Annotated[int, typer.Option(
        "--max-line-bytes", min=1, metavar="N",
        help="A line of a log longer than N bytes is skipped (counted, with its place), "
             "read past without holding it: a decompression bomb cannot fill memory.")]
    = MAX_LINE_BYTES,
    json_out: JsonOut = False,
    quiet: Quiet = 0,
) -> None:
    """Normalize logs into the store (a DuckDB file) and thread them into sessions.

    Formats (detected from content; --format NAME forces one): raw request/response
    captures, Langfuse exports, new-api logs (SQLite or export), LiteLLM SpendLogs,
    Bifrost logs, OpenTelemetry GenAI spans (OTLP/JSON), Claude Code session JSONL,
    Codex CLI rollouts,
    SWE-agent / OpenHands / mini-swe-agent trajectories, Mooncake/Bailian block-hash
    traces, TraceLab round traces.

    Example:
        prefixscope ingest ~/.claude/projects/ langfuse-export.jsonl --store cc.duckdb
        prefixscope ingest proxy.jsonl --session-key header:x-run-id
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
    try:
        st = Store.open(store or DEFAULT_STORE)
    except StoreError as exc:
        raise console.fail(str(exc)) from None
    try:
        with console.byte_progress(console.show_progress(json_out, quiet), "ingest") as progress:
            result = ingest_paths(paths, st, fmt=fmt, strict=strict,
                                  session_gap_s=session_gap * 60, progress=progress,
                                  session_rules=rules, max_line_bytes=max_line_bytes)
    except StoreError as exc:  # the disk is full
        raise console.fail(str(exc)) from None
    finally:
        st.close()
    result = console.redacted(result)  # secrets masked before any view cuts text
    if json_out:
        console.print_json(ingest_json(result))
    else:
        console.show(ingest_screen(result, str(store or DEFAULT_STORE),
                                   console.screen()), quiet)
    if result.failed:
        first = ""
        if result.errors:
            err = result.errors[0]
            place = err.file if err.line is None else f"{err.file}:{err.line}"
            first = f" (the first: {place}: {err.reason})"
        raise console.fail(f"--strict: {result.skipped} record(s)/file(s) skipped{first}; "
                           "nothing was stored")
    if result.skipped and result.ingested + result.already_present == 0:
        # Every record or file was rejected: that is bad input, not a successful run.
        hint = (f" with --format {fmt} (drop --format to detect each file's format)"
                if fmt != "auto" else "")
        raise console.fail(f"no request read{hint}: {result.skipped:,} record(s)/file(s) "
                           "skipped")
