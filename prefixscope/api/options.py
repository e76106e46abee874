"""The option assembly the functions share: one value or a list, "a,b" lists, dimensions, and
render options checked before any log is read."""

from __future__ import annotations

import os
from collections.abc import Sequence
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

from prefixscope.model.errors import Error

if TYPE_CHECKING:
    from prefixscope.prompt import RenderOptions


def strings(values: str | PathLike[str] | Sequence[str | PathLike[str]]) -> list[str]:
    """One value or several, as strings."""
    if isinstance(values, str | os.PathLike):
        return [os.fspath(values)]
    return [os.fspath(v) for v in values]


def is_file(ref: str) -> bool:
    """A request reference that names a file (``-``: stdin), not a store id."""
    return ref == "-" or Path(ref).is_file()


def what_ifs(values: str | Sequence[str]) -> tuple[str, ...]:
    """``"a,b"`` or ``["a,b", "c"]`` -> ("a", "b", "c"); a drop:<regex> keeps its commas."""
    out: list[str] = []
    for value in [values] if isinstance(values, str) else values:
        if value.startswith("drop:"):
            out.append(value)
            continue
        out.extend(v.strip() for v in value.split(",") if v.strip())
    return tuple(out)


def dimensions(by: str | Sequence[str] | None) -> tuple[str, ...]:
    """"endpoint, day" (or a list of names) -> ("endpoint", "day")."""
    if by is None:
        return ()
    names = by.split(",") if isinstance(by, str) else by
    return tuple(d.strip() for d in names if d.strip())


def checked(options: RenderOptions) -> RenderOptions:
    """`options` once its gateway and what-ifs are valid (``usage`` error) and a tokenizer
    it names loads: checked before any log is read or pair rendered."""
    from prefixscope.prompt import RenderError, check_options
    from prefixscope.tokenizers import AUTO, TokenizerError, load_tokenizer

    try:
        check_options(options)
    except RenderError as exc:
        raise Error(str(exc).splitlines()[0], usage=True) from None
    if options.tokenizer == AUTO:
        # Each request's family picks a bundled tokenizer, loaded when first needed:
        # loading the default here would cost a load the requests may never use.
        return options
    try:
        load_tokenizer(options.tokenizer)
    except TokenizerError as exc:
        raise Error(str(exc).splitlines()[0]) from None
    return options
