"""Shared command-line options, defined once so every command spells them the same way."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from prefixscope.cli import console
from prefixscope.cli.exitcodes import ExitCode
from prefixscope.prompt.gateways import PROFILES
from prefixscope.prompt.whatif import WHAT_IFS
from prefixscope.tokenizers import BUNDLED

if TYPE_CHECKING:
    from prefixscope.prompt import RenderOptions
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
    usage error."""
    from prefixscope.store.scope import ScopeError, scope_of

    try:
        return scope_of(since, until, project)
    except ScopeError as exc:
        raise console.fail(str(exc), ExitCode.USAGE) from None


def dimensions(by: str | None) -> tuple[str, ...]:
    """"endpoint, day" -> ("endpoint", "day")."""
    return tuple(d.strip() for d in (by or "").split(",") if d.strip())


def what_if_tuple(values: list[str] | None) -> tuple[str, ...]:
    """--what-if a,b --what-if c -> ("a", "b", "c"); a drop:<regex> keeps its commas."""
    out: list[str] = []
    for value in values or []:
        if value.startswith("drop:"):
            out.append(value)
            continue
        out.extend(v.strip() for v in value.split(",") if v.strip())
    return tuple(out)


def checked_options(options: RenderOptions) -> RenderOptions:
    """`options` once its gateway and what-ifs are valid (else exit 2) and a tokenizer it
    names loads (else exit 1): checked before any log is read or pair rendered."""
    from prefixscope.prompt import RenderError, check_options
    from prefixscope.tokenizers import AUTO, TokenizerError, load_tokenizer

    try:
        check_options(options)
    except RenderError as exc:
        raise console.fail(str(exc).splitlines()[0], ExitCode.USAGE) from None
    if options.tokenizer == AUTO:
        # Each request's family picks a bundled tokenizer, loaded when first needed:
        # loading the default here would cost a load the requests may never use.
        return options
    try:
        load_tokenizer(options.tokenizer)
    except TokenizerError as exc:
        raise console.fail(str(exc).splitlines()[0]) from None
    return options


_UNITS = {"k": 10**3, "m": 10**6, "g": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30,
          "tib": 2**40, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


def capacity_tokens(text: str | None, block_size: int | None,
                    bytes_per_token: int | None) -> int | None:
    """A --capacity value in tokens: ``500000``, ``1e6``, ``2M`` (tokens), ``4096 blocks``,
    ``8GiB`` / ``500MB`` (bytes, with --bytes-per-token). None stays unlimited."""
    import re


    if text is None or text.strip().lower() in ("", "unlimited", "none"):
        return None
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-z]*)\s*", text.lower())
    if match is None:
        raise console.fail(f"--capacity {text!r}: expected N, 'N blocks' or N with a byte "
                           "unit (GiB, MB, ...)", ExitCode.USAGE)
    number, unit = float(match[1]), match[2]
    if unit in ("", "tokens", "token"):
        return int(number)
    if unit in ("k", "m", "g"):
        return int(number * _UNITS[unit])
    if unit in ("blocks", "block"):
        return int(number) * (block_size or 16)
    if unit in _UNITS or unit == "b":
        if bytes_per_token is None:
            raise console.fail(f"--capacity {text}: a size in bytes needs --bytes-per-token "
                               "(the KV cache bytes of one token of this model)",
                               ExitCode.USAGE)
        return int(number * _UNITS.get(unit, 1)) // bytes_per_token
    raise console.fail(f"--capacity {text!r}: unknown unit {unit!r}", ExitCode.USAGE)
