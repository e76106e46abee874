"""Shared command-line options, defined once so every command spells them the same way."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from prefixscope.cli import console
from prefixscope.prompt.gateways import PROFILES
from prefixscope.prompt.whatif import WHAT_IFS
from prefixscope.tokenizers import BUNDLED

if TYPE_CHECKING:
    from prefixscope.store.scope import Scope


def defaults(function: Callable[..., object]) -> dict[str, Any]:
    """option -> the library's default of `function` (`prefixscope.api`): the one
    definition the command's options read too."""
    return {name: p.default for name, p in inspect.signature(function).parameters.items()}


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

By = Annotated[
    str | None, typer.Option("--by", help="Group by dimensions, comma-separated: endpoint, model, "
                                          "client, user, channel, day, source, session.",
                             show_default=False)]
Gateway = Annotated[
    str, typer.Option("--gateway", "-g", help="Gateway profile: auto (the log's, else the "
                                              "endpoint default), " + ", ".join(PROFILES) + ".")]
Tokenizer = Annotated[
    str, typer.Option("--tokenizer", "-t", help="auto (by each request's model family: "
                                                "deepseek*, qwen*, gpt-*/o*; other models use "
                                                f"a stand-in, marked approximate), a bundled name "
                                                f"({', '.join(BUNDLED)}), a local model "
                                                "directory, or a locally cached Hugging Face "
                                                "id.")]
WhatIf = Annotated[
    list[str] | None,
    typer.Option("--what-if", "-w", help="Transforms, comma-separated or repeated: "
                                         + ", ".join(WHAT_IFS) + ".", show_default=False)]
BlockSize = Annotated[
    int | None, typer.Option("--block-size", "-b", min=1, help="Cache block size in tokens "
                                                              "(default: inferred from the "
                                                              "store's cached-token values, "
                                                              "else 16).", show_default=False)]

Workers = Annotated[
    int | None, typer.Option("--workers", "-j", min=1, help="Processes rendering and "
                                                            "tokenizing whole sessions "
                                                            "(default: the machine's cores "
                                                            "on a large enough store; 1: "
                                                            "this process only). Results "
                                                            "do not depend on it.",
                             show_default=False)]


Since = Annotated[str | None, typer.Option(
    "--since", help="Only requests from this date on (YYYY-MM-DD, YYYYMMDD or an ISO time).",
    show_default=False)]
Until = Annotated[str | None, typer.Option(
    "--until", help="Only requests up to this date (a whole day when a date alone).",
    show_default=False)]
Project = Annotated[str | None, typer.Option(
    "--project", help="Only requests of this project: the agent's working directory (Claude "
    "Code / Codex `cwd`), whole or its last path components.", show_default=False)]


def scope(since: str | None, until: str | None, project: str | None) -> Scope | None:
    """The --since / --until / --project scope (None: the whole store); a bad date is a
    usage error (as the library says it)."""
    from prefixscope import api

    try:
        return api._scope(since, until, project)
    except api.Error as exc:
        raise console.api_error(exc) from None


def dimensions(by: str | None) -> tuple[str, ...]:
    """"endpoint, day" -> ("endpoint", "day"), as the library reads `by`."""
    from prefixscope import api

    return api._dimensions(by)


def what_if_tuple(values: list[str] | None) -> tuple[str, ...]:
    """--what-if a,b --what-if c -> ("a", "b", "c"); a drop:<regex> keeps its commas (as
    the library reads `what_if`)."""
    from prefixscope import api

    return api._what_ifs(values or ())
