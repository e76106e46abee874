"""How `--help` reads: like a manual page, the same for every command.

Typer prints a type beside every parameter (``<bool>`` on a flag, ``<int>`` on a counted
flag, ``<list[str]>``, ``{paths}`` for a required argument). prefixscope's commands are
built with `Command` (and the app with `Group`), which show instead what the reader
types: an option's metavar (``FILE``, ``N``, ``RATE``, set where the option is declared),
nothing after a flag, and arguments as click spells them (``LOGS...``, ``[LOGS]...``).
Options sit in the panels below, in that order, so the inputs come first and the gate
last; the app's privacy options (``--redact``, ``--no-default-redaction``) are shown in
every command's Output panel, since they may be written after any command name
(`cli.privacy`). A command's one-line summary in ``prefixscope --help`` is its docstring's
first paragraph, whole.

Only the presentation changes: parsing, defaults and validation are Typer's (a value is
coerced by `cli.coercion` as Typer would, without a pydantic adapter per option).
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

INPUTS = "Inputs"  # the logs or the store, and how they are read
SCOPE = "Scope"  # which requests: dates, project, session
MODEL = "Model"  # how a request becomes the upstream prompt: gateway, tokenizer, what-ifs
ENGINE = "Engine"  # the cache model a replay uses
OUTPUT = "Output"  # what is printed or written, and how much
GATE = "Gate"  # report's CI thresholds
PANELS = (INPUTS, SCOPE, MODEL, ENGINE, OUTPUT, GATE)

PRIVACY_OPTIONS = ("redact", "no_default_redaction")  # the app's own, shown per command


def _runtime_param(param: Any) -> Any:
    """A manual parameter's value coercion: `cli.coercion`'s plain one (typer's own, with
    its pydantic adapter, only for a value it is unsure of), built once."""
    if param._runtime_param is None:
        from prefixscope.cli.coercion import fast_runtime_param

        param._runtime_param = fast_runtime_param(param.type_descriptor)
    if param._runtime_param is None:
        return TyperOption.get_runtime_param(param)
    return param._runtime_param


class ManualOption(TyperOption):
    """An option shown by its metavar, a flag by its name alone."""

    def get_runtime_param(self) -> Any:
        return _runtime_param(self)

    def display_type_rich(self, ctx: Any) -> str | None:
        if self.is_flag or self.count:
            return None
        return self.metavar or self.name.upper() if self.name else self.metavar

    def _get_number_range_help_str(self) -> str | None:
        return None  # the help text says the range in words where it matters


class ManualArgument(TyperArgument):
    """An argument shown as click spells it: ``LOGS...`` when required, ``[LOGS]...`` not."""

    def get_runtime_param(self) -> Any:
        return _runtime_param(self)

    def _base_name(self) -> str:
        return self.metavar or ""

    @property
    def display_name_raw(self) -> str:
        return self._base_name() + ("..." if self.nargs != 1 else "")

    def display_type_rich(self, ctx: Any) -> str | None:
        return None

    def _usage_display_name(self) -> str:
        name = self._base_name() if self.required else f"[{self._base_name()}]"
        return name + ("..." if self.nargs != 1 else "")

    def _get_number_range_help_str(self) -> str | None:
        return None


def manual(param: Any, panel: str | None = None) -> Any:
    """`param` presented as a manual's parameter (the same object, its class narrowed)."""
    # NOTE: Typer builds its own parameter classes and takes no class to build; the
    # subclasses above add no state, so narrowing an instance's class is safe.
    if type(param) is TyperOption:
        param.__class__ = ManualOption
    elif type(param) is TyperArgument:
        param.__class__ = ManualArgument
        param.metavar = param.metavar or (param.name or "").upper()
    if panel is not None and getattr(param, "rich_help_panel", None) is None:
        param.rich_help_panel = panel
    return param


def one_line(help_text: str | None) -> str | None:
    """The first paragraph of a docstring, on one line (the command list's summary)."""
    if not help_text:
        return None
    return " ".join(inspect.cleandoc(help_text).split("\n\n")[0].split())


def reflowed(help_text: str | None) -> str | None:
    """A docstring whose prose paragraphs are each one line, so the terminal wraps them at
    its own width; indented blocks (``Example:``) keep their lines."""
    if not help_text:
        return help_text
    paragraphs = inspect.cleandoc(help_text).split("\n\n")
    out = []
    for paragraph in paragraphs:
        lines = paragraph.splitlines()
        if any(line.startswith(" ") for line in lines[1:]):
            out.append(paragraph)
        else:
            out.append(" ".join(line.strip() for line in lines))
    return "\n\n".join(out)


def _ordered(params: list[Any]) -> list[Any]:
    rank = {name: n for n, name in enumerate(PANELS)}
    return sorted(params, key=lambda p: rank.get(getattr(p, "rich_help_panel", None) or "",
                                                  len(PANELS)))


class Command(TyperCommand):
    """A prefixscope command: manual-style help (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = reflowed(self.help)
        self.short_help = self.short_help or one_line(self.help)
        self.params = _ordered([manual(p) for p in self.params])
        self._showing_help = False

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        return None if option is None else manual(option, OUTPUT)

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)
        if not self._showing_help:
            return params
        root = ctx.find_root().command
        shown = []
        for param in root.params:
            if param.name in PRIVACY_OPTIONS:
                # A copy for the help page only: the app parses these (cli.privacy).
                twin = copy.copy(manual(param))
                twin.rich_help_panel = OUTPUT
                shown.append(twin)
        return _ordered([*params[:-1], *shown, params[-1]] if params else shown)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._showing_help = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._showing_help = False


class Group(TyperGroup):
    """The app: manual-style help for its own options, commands listed in the order added."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params = [manual(p) for p in self.params]

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)
        return None if option is None else manual(option, OUTPUT)
