"""A command line's values, coerced without building a pydantic adapter per option.

Typer turns each option's text into its annotated type through a pydantic `TypeAdapter`
that it builds when the option is first parsed: on `report` that is 30 adapters and
pydantic's import, ~0.07 s of CPU before any work (issue 37: start-up budgeted; the
in-process sampler and `bench/paired_cpu.py`, docs/scale.md). prefixscope's options are
plain types -- text, flags, whole numbers and decimals with a lower or upper bound,
paths, an enum's choices, lists of those -- and a well-formed value of one of them needs
no schema: `plain` reads it the way the adapter would (typer's own helpers for paths and
choices). Anything else -- a value that is not well formed (``--top abc``), out of its
bound, a type not listed, a bytes value -- goes to typer's own runtime coercion, built
then, so every error is typer's, word for word, and no value is read differently
(tests/test_cli_coercion.py compares both on every option of every command).

`fast_runtime_param` is what `cli.manual`'s parameter classes build instead of typer's;
it relies on typer's `typer._coercion.RuntimeParam` (typer 0.29), and with a typer that
has none the parameters keep typer's own coercion.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, get_args, get_origin

try:  # typer's runtime coercion (typer >= 0.29); without it typer's own is kept
    from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param
    from typer._param_types import coerce_cli_choice, coerce_cli_path, routes_to_path
except ImportError:  # pragma: no cover - another typer
    RuntimeParam = None  # type: ignore[assignment,misc]

# Values pydantic reads as these numbers in its lax mode and Python reads the same way:
# ASCII digits, an optional minus, no leading zero, no underscore, no exponent, no space.
_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")
_DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]{0,17})(?:\.[0-9]{1,17})?")


class Unsure(Exception):
    """A value `plain` does not read: typer's own coercion decides (its value or error)."""


def plain(annotation: Any, info: Any, value: Any, ctx: Any = None, param: Any = None) -> Any:
    """`value` coerced to `annotation` as typer's adapter would, or `Unsure`."""
    if get_origin(annotation) is list:
        if not isinstance(value, (list, tuple)):
            raise Unsure
        (item,) = get_args(annotation)
        return [plain(item, info, one, ctx, param) for one in value]
    if info.parser is not None or getattr(info, "clamp", False):
        raise Unsure
    if annotation is str:
        if type(value) is not str:
            raise Unsure
        return value
    if annotation is bool:
        if type(value) is not bool:
            raise Unsure
        return value
    if annotation is int or annotation is float:
        if type(value) is str and (_INT if annotation is int else _DECIMAL).fullmatch(value):
            number = annotation(value)
        elif type(value) is int or (annotation is float and type(value) is float):
            number = annotation(value)  # a default: pydantic's lax int -> float too
        else:
            raise Unsure
        if (info.min is not None and number < info.min) or (info.max is not None
                                                             and number > info.max):
            raise Unsure  # typer's error, with its wording
        return number
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        if type(value) is not str and not isinstance(value, annotation):
            raise Unsure
        try:
            return coerce_cli_choice(value, choices=list(annotation),
                                     case_sensitive=info.case_sensitive, ctx=ctx)
        except Exception:  # noqa: BLE001 - typer's coercion says why, as it would
            raise Unsure from None
    if annotation is Path and routes_to_path(annotation, info) and info.path_type is None:
        if not (type(value) is str and value) and not isinstance(value, Path):
            raise Unsure
        try:
            # typer reads the text as pydantic's Path does (`Path(text)`), then checks it
            return coerce_cli_path(Path(value), info, path_type=Path, param=param, ctx=ctx)
        except Exception:  # noqa: BLE001 - typer's coercion says why, as it would
            raise Unsure from None
    raise Unsure


if RuntimeParam is not None:
    @dataclass(frozen=True)
    class PlainRuntimeParam(RuntimeParam):
        """`plain` first; typer's own coercion (built on first need) when it is unsure."""

        descriptor: TypeDescriptor

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            try:
                return plain(self.annotation, self.parameter_info, value, ctx, param)
            except Unsure:
                pass
            return build_runtime_param(self.descriptor)._coerce_value(value, param=param,
                                                                      ctx=ctx)


def fast_runtime_param(descriptor: Any) -> Any:
    """The runtime coercion of a parameter typer described by `descriptor` (None: typer's
    own, for a file parameter or with a typer this module does not know)."""
    if RuntimeParam is None or descriptor.file_annotation is not None:
        return None
    return PlainRuntimeParam(parameter_info=descriptor.parameter_info,
                             annotation=descriptor.annotation, descriptor=descriptor)
