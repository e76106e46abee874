"""Shared command-line options, defined once so every command spells them the same way."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from prefixscope.api import names
from prefixscope.cli.manual import ENGINE, INPUTS, MODEL, OUTPUT, SCOPE


def defaults(function: Callable[..., object]) -> dict[str, Any]:
    """option -> the library's default of `function` (`prefixscope.api`): the one
    definition the command's options read too."""
    return {name: p.default for name, p in inspect.signature(function).parameters.items()}


class Runner(StrEnum):
    """Where `report`'s per-session stage and `diff --all` run."""

    local = "local"
    ray = "ray"


Logs = Annotated[
    list[str] | None,
    typer.Argument(metavar="LOGS", help="Log files, directories, globs or - for stdin "
                                        "(ingested into a temporary store). Omit to use "
                                        "--store.", show_default=False),
]
SkipMissing = Annotated[
    bool, typer.Option("--skip-missing", rich_help_panel=INPUTS,
                       help="A LOGS path that does not exist (or a glob that matches "
                            "nothing) is a counted skip and the rest are read; without it, "
                            "it is an error (exit 2) before anything is read.")]
StoreOpt = Annotated[
    Path | None,
    typer.Option("--store", "-s", metavar="FILE", rich_help_panel=INPUTS,
                 help="DuckDB store file (default: prefixscope.duckdb).", show_default=False),
]
JsonOut = Annotated[bool, typer.Option("--json", rich_help_panel=OUTPUT,
                                       help="Print the documented JSON shape (docs/json.md) "
                                            "on stdout.")]
Quiet = Annotated[int, typer.Option("--quiet", "-q", count=True, rich_help_panel=OUTPUT,
                                    show_default=False,
                                    help="-q: no progress or notes; -qq: no warnings either.")]
SessionGap = Annotated[
    float, typer.Option("--session-gap", metavar="MINUTES", min=0.0, rich_help_panel=INPUTS,
                        help="Longest pause between two turns of one threaded session "
                        "(no session id), counted past the cache retention the usage shows "
                        "(an hour after 1-hour writes).")]

By = Annotated[
    str | None, typer.Option("--by", metavar="DIM,...", rich_help_panel=OUTPUT,
                             help="Group by dimensions, comma-separated: "
                                  + ", ".join(names.BY_DIMENSIONS) + ".", show_default=False)]
Gateway = Annotated[
    str, typer.Option("--gateway", "-g", metavar="PROFILE", rich_help_panel=MODEL,
                      help="Gateway profile: auto (the log's, else the endpoint default), "
                           + ", ".join(names.GATEWAYS) + ".")]
Tokenizer = Annotated[
    str, typer.Option("--tokenizer", "-t", metavar="NAME|DIR", rich_help_panel=MODEL,
                      help="auto (by each request's model family: deepseek*, qwen*, gpt-*/o*; "
                           "other models use a stand-in, marked approximate), a bundled name "
                           f"({', '.join(names.TOKENIZERS)}), a local model directory, or a "
                           "locally cached Hugging Face id.")]
WhatIf = Annotated[
    list[str] | None,
    typer.Option("--what-if", "-w", metavar="NAME,...", rich_help_panel=MODEL,
                 help="Render transforms, comma-separated or repeated: "
                      + ", ".join(names.RENDER_WHAT_IFS).replace("<regex>", "REGEX") + ".",
                 show_default=False)]

# --engine, --block-size and --capacity mean the same wherever they appear: the cache
# model, its unit and its size, each chosen from the log unless given (and said so).
Engine = Annotated[
    str, typer.Option("--engine", "-e", metavar="NAME", rich_help_panel=ENGINE,
                      help="Cache model: auto (from the log: cached values on block "
                           "multiples -> vllm at that block, else the models' hosted API, "
                           "else vllm when the log has prompts; simulate replays a log of "
                           "usage alone with its models' hosted API), "
                           + ", ".join(names.engines())
                           + ".")]
BlockSize = Annotated[
    int | None, typer.Option("--block-size", "-b", metavar="N", min=1, rich_help_panel=ENGINE,
                             help="Cache block size in tokens (vLLM block, SGLang page, "
                                  "LMCache chunk, OpenAI step). Default: inferred from the "
                                  "log's cached-token values; a replay fits it when they do "
                                  "not tell; else the engine's own (vLLM 16).",
                             show_default=False)]
Capacity = Annotated[
    str | None, typer.Option("--capacity", metavar="SIZE", rich_help_panel=ENGINE,
                             help="Cache size of a replay: N tokens, 'N blocks', 'unlimited', "
                                  "or NGiB with --bytes-per-token. Default: fitted to the "
                                  "log's cached tokens when a self-hosted engine got less "
                                  "than an unlimited cache predicts, else unlimited.",
                             show_default=False)]
BytesPerToken = Annotated[
    int | None, typer.Option("--bytes-per-token", metavar="N", min=1, rich_help_panel=ENGINE,
                             help="KV bytes per token, for a --capacity in GiB/MiB.",
                             show_default=False)]

Workers = Annotated[
    int | None, typer.Option("--workers", "-j", metavar="N", min=1, rich_help_panel=OUTPUT,
                             help="Processes rendering and tokenizing whole sessions "
                                  "(default: the machine's cores on a large enough store; "
                                  "1: this process only). Results do not depend on it.",
                             show_default=False)]


Since = Annotated[str | None, typer.Option(
    "--since", metavar="DATE", rich_help_panel=SCOPE,
    help="Only requests from this date on (YYYY-MM-DD, YYYYMMDD or an ISO time; UTC unless "
         "the time carries an offset such as +02:00).",
    show_default=False)]
Until = Annotated[str | None, typer.Option(
    "--until", metavar="DATE", rich_help_panel=SCOPE,
    help="Only requests up to this date (a whole UTC day when a date alone; a time is UTC "
         "unless it carries an offset).",
    show_default=False)]
Project = Annotated[str | None, typer.Option(
    "--project", metavar="DIR", rich_help_panel=SCOPE,
    help="Only requests of this project: the agent's working directory (Claude Code / Codex "
         "`cwd`), whole or its last path components.", show_default=False)]

