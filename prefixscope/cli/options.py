"""Shared command-line options, defined once so every command spells them the same way."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

Logs = Annotated[
    list[str] | None,
    typer.Argument(help="Log files, directories, globs or - for stdin (ingested into a "
                        "temporary store). Omit to use --store.", show_default=False),
]
StoreOpt = Annotated[
    Path | None,
    typer.Option("--store", "-s", help="DuckDB store file (default: prefixscope.duckdb).",
                 show_default=False),
]
JsonOut = Annotated[bool, typer.Option("--json", help="Print the documented JSON shape "
                                                      "(docs/json.md) on stdout.")]
Quiet = Annotated[int, typer.Option("--quiet", "-q", count=True,
                                    help="-q: no progress or notes; -qq: no warnings either.")]
SessionGap = Annotated[
    float, typer.Option("--session-gap", help="Longest pause between two turns of one threaded "
                                              "session, in minutes.", min=0.0)]
