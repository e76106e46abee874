"""`prefixscope ingest`: read logs of any supported format into the store."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import typer

from . import console
from .options import JsonOut, Quiet, SessionGap, StoreOpt


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
    json_out: JsonOut = False,
    quiet: Quiet = 0,
) -> None:
    """Normalize logs into the store (a DuckDB file) and thread them into sessions.

    Formats (detected from content; --format NAME forces one): raw request/response
    captures, Langfuse exports, new-api logs (SQLite or export), LiteLLM SpendLogs,
    Bifrost logs, OpenTelemetry GenAI spans (OTLP/JSON), Claude Code session JSONL,
    SWE-agent / OpenHands / mini-swe-agent trajectories, Mooncake/Bailian block-hash
    traces, TraceLab round traces.

    Example:
        prefixscope ingest ~/.claude/projects/ langfuse-export.jsonl --store cc.duckdb
    """
    from ..ingest import ingest_paths
    from ..ingest.formats import format_names
    from ..store import DEFAULT_STORE, Store, StoreError

    if fmt != "auto" and fmt not in format_names():
        raise console.fail(f"unknown format {fmt!r}; formats: {', '.join(format_names())}", 2)
    try:
        st = Store.open(store or DEFAULT_STORE)
    except StoreError as exc:
        raise console.fail(str(exc)) from None
    try:
        with console.byte_progress(console.show_progress(json_out, quiet), "ingest") as progress:
            result = ingest_paths(paths, st, fmt=fmt, strict=strict,
                                  session_gap_s=session_gap * 60, progress=progress)
    finally:
        st.close()
    if json_out:
        console.print_json({
            "ingested": result.ingested, "already_present": result.already_present,
            "skipped": result.skipped, "by_format": result.by_format,
            "sessions": result.sessions, "files": result.files,
            "errors": [asdict(e) for e in result.errors],
            "unrecognized": list(result.unrecognized),
        })
    else:
        _render(result, str(store or DEFAULT_STORE), quiet)
    if result.failed:
        raise console.fail(f"--strict: {result.skipped} record(s)/file(s) skipped; "
                           "nothing was stored")
    if result.files == 0 and result.skipped:
        raise typer.Exit(code=1)


def _render(result, store: str, quiet: int) -> None:  # type: ignore[no-untyped-def]
    from rich.table import Table

    table = Table(title=None, show_edge=False, pad_edge=False)
    table.add_column("format")
    table.add_column("requests", justify="right")
    for name, count in result.by_format.items():
        table.add_row(name, f"{count:,}")
    if result.by_format:
        console.out.print(table)
    console.out.print(
        f"{result.ingested:,} new request(s) in {store} ({result.already_present:,} already "
        f"there) from {result.files:,} file(s); {result.sessions:,} session(s); "
        f"{result.skipped:,} skipped")
    for e in result.errors[:20]:
        place = f"{e.file}:{e.line}" if e.line is not None else e.file
        console.warn(f"skipped {place}: {e.reason}", quiet)
    if len(result.errors) > 20 or result.skipped > len(result.errors):
        console.warn(f"... {result.skipped - min(20, len(result.errors)):,} more skipped "
                     "(see --json for the first 100)", quiet)
