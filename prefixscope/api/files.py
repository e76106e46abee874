"""Files a caller writes from a result: a report's baseline (``--write-baseline``, read
back by ``report(baseline=...)``) and any output written whole or not at all, as every
file prefixscope writes is (`model.atomic`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prefixscope.views.results import Report


def baseline(result: Report, about: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The baseline document of `result` (each scenario's stable prefix), the JSON that
    ``report(baseline=FILE)`` compares a later report with; `about` adds fields that say
    how it was made (the command line writes its tokenizer and gateway)."""
    from prefixscope.findings.gate import baseline_document

    return baseline_document(result.scenarios, about or {})


def write_text(path: Path, text: str) -> None:
    """`text` written to `path` atomically: a reader sees the old file or the whole new one,
    never a file cut short by a full disk or a kill.

    Raises:
        OSError: the file cannot be written (nothing is left behind).
    """
    from prefixscope.model.atomic import write_atomic

    write_atomic(path, text)
