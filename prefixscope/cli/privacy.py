"""The options every command shares for what its output may show: ``--redact REGEX``
(repeatable), ``--no-default-redaction`` and ``PREFIXSCOPE_REDACT``.

They are the app's own options (``prefixscope --redact RE report ...``) and are also
accepted after the command name (``prefixscope report ... --redact RE``): `Group` moves
them in front of the command before click parses, so no command declares them and a
command added later has them too. They set the run's redactor (`model.redaction`),
which every output sink in `cli.console` applies.
"""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer

from prefixscope.cli import manual

ENV = "PREFIXSCOPE_REDACT"
_FLAG = "--no-default-redaction"
_OPTION = "--redact"


def options(
    redact: Annotated[list[str] | None, typer.Option(
        _OPTION, metavar="REGEX", rich_help_panel=manual.OUTPUT,
        help="Mask every match of REGEX in all output (repeatable; "
        f"also after the command name, and one per line in ${ENV}). API keys, bearer "
        "tokens, Authorization headers and private keys are masked by default.",
        show_default=False)] = None,
    no_default_redaction: Annotated[bool, typer.Option(
        _FLAG, rich_help_panel=manual.OUTPUT,
        help="Do not mask the built-in secret patterns (only the --redact ones).")]
    = False,
) -> None:
    """Offline forensics for prompt (prefix) caching."""
    from prefixscope import api
    from prefixscope.cli import console

    env = [line for line in os.environ.get(ENV, "").splitlines() if line.strip()]
    try:
        api.redact([*env, *(redact or [])], defaults=not no_default_redaction)
    except api.Error as exc:
        raise console.api_error(exc) from None


def hoisted(args: list[str], commands: Any) -> list[str]:
    """`args` with the privacy options that follow the command name moved before it
    (everything after a ``--`` is left alone)."""
    at, i = None, 0
    while i < len(args):
        if args[i] == _OPTION:
            i += 2
            continue
        if args[i] in commands:
            at = i
            break
        i += 1
    if at is None:
        return args
    moved: list[str] = []
    rest: list[str] = []
    i = at + 1
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest.extend(args[i:])
            break
        if arg == _OPTION and i + 1 < len(args):
            moved += args[i:i + 2]
            i += 2
            continue
        if arg.startswith(_OPTION + "=") or arg == _FLAG:
            moved.append(arg)
        else:
            rest.append(arg)
        i += 1
    return args[:at] + moved + [args[at]] + rest


def command_at(args: list[str], commands: Any) -> int | None:
    """Where in `args` the command name is when only privacy options come before it (None:
    no name of `commands`, or something else first: the app's help, an unknown option)."""
    i = 0
    while i < len(args):
        if args[i] in commands:
            return i
        if args[i] == _OPTION:
            i += 2
        elif args[i] == _FLAG or args[i].startswith(_OPTION + "="):
            i += 1
        else:
            return None
    return None


class Group(manual.Group):
    """The app's command group: privacy options are global wherever they are written."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, hoisted(list(args), self.commands))
