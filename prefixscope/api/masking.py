"""Masking what the library hands out: ``redact`` sets the patterns, and every result,
frame and message is masked once, here, before any view sees it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from prefixscope.api.options import strings
from prefixscope.model.errors import Error

if TYPE_CHECKING:
    import polars as pl


def redact(patterns: str | Sequence[str] = (), *, defaults: bool = True) -> None:
    """Mask every match of these regular expressions in everything the library returns
    from now on, besides the built-in secret patterns (API keys, bearer tokens,
    Authorization headers, private keys) unless ``defaults=False``: the command line's
    ``--redact`` and ``--no-default-redaction``. Masking keeps lengths (``•``).

    Raises:
        Error: a pattern that is not a regular expression (``usage``).
    """
    from prefixscope.model.redaction import RedactionError, activate, redactor

    try:
        activate(redactor(strings(patterns), defaults=defaults))
    except RedactionError as exc:
        raise Error(str(exc).splitlines()[0], usage=True) from None


def masked(value: Any) -> Any:
    """`value` with its strings masked by the run's redactor (`redact`)."""
    from prefixscope.model.redaction import active

    return active().value(value)


def masked_text(text: str) -> str:
    """`text` (a message, a line of a log, raw output) with the run's secrets masked, its
    length kept."""
    from prefixscope.model.redaction import active

    return active().text(text)


def masked_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with its text columns masked as `masked` masks a result (each distinct
    value once)."""
    import polars as pl

    from prefixscope.model.redaction import active

    redactor = active()
    if not redactor.rules:
        return frame
    for name, dtype in frame.schema.items():
        if dtype != pl.Utf8:
            continue
        values = [v for v in frame[name].unique().to_list() if v is not None]
        changed = {v: m for v in values if (m := redactor.text(v)) != v}
        if changed:
            frame = frame.with_columns(pl.col(name).replace(changed))
    return frame
