"""`prefixscope ingest`: read logs of any supported format into the store."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, cast

import typer

from prefixscope import api
from prefixscope.cli import console
from prefixscope.cli.options import JsonOut, Quiet, SessionGap, StoreOpt, defaults

if TYPE_CHECKING:
    from prefixscope.views.ingested import IngestResult

API = defaults(api.ingest)  # the library's defaults, read by the options below


def register(app: typer.Typer) -> None:
    app.command("ingest")(ingest)


def ingest(
    paths: Annotated[list[str], typer.Argument(help="Log files, directories (recursive), globs, "
                                                    "or - for stdin; gzip is read transparently.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="Force a format instead of "
                                                            "detecting it from content.")]
    = API["format"],
    store: StoreOpt = None,
    strict: Annotated[bool, typer.Option("--strict", help="Fail (exit 1, store nothing) if any "
                                                          "record or file is skipped.")]
    = API["strict"],
    session_gap: SessionGap = API["session_gap"],
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
    = API["max_line_bytes"],
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
    from prefixscope.views.json import ingest_json
    from prefixscope.views.terminal.ingest import ingest_screen

    failure = None
    try:
        with console.byte_progress(console.show_progress(json_out, quiet), "ingest") as progress:
            st = api.ingest(paths, **({"store": store} if store is not None else {}),
                            format=fmt, strict=strict, session_gap=session_gap,
                            session_key=session_key or (), max_line_bytes=max_line_bytes,
                            progress=progress)
        st.close()
        result = st.ingest_result
    except api.Error as exc:
        if exc.result is None:  # nothing read: a bad option or store
            raise console.api_error(exc) from None
        failure, result = exc, cast("IngestResult", exc.result)
    assert result is not None
    where = str(store or API["store"])
    if json_out:
        console.print_json(ingest_json(result))
    else:
        console.show(ingest_screen(result, where, console.screen()), quiet)
    if failure is not None:
        raise console.api_error(failure)
    if result.skipped and result.ingested + result.already_present == 0:
        # Every record or file was rejected: that is bad input, not a successful run.
        hint = (f" with --format {fmt} (drop --format to detect each file's format)"
                if fmt != "auto" else "")
        raise console.fail(f"no request read{hint}: {result.skipped:,} record(s)/file(s) "
                           "skipped")
