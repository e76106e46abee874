"""What a diff found, as the library returns it (`prefixscope.diff`), and the document
``prefixscope diff --json`` prints.

Apart from `views.results` and `views.json`, as `views.ingested` is: those two import every
command's analyses and findings (the report's ledger, simulate, segments, engine logs:
~0.05 s of CPU), and a diff reads none of them. `views.results` and `views.json` re-export
these names, so ``prefixscope.DiffReport`` and ``views.json.diff_json`` are these.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar

from prefixscope.analyses import diff as _diff

if TYPE_CHECKING:
    import polars as pl

    from prefixscope.views.jsonshapes import DiffJson, DiffPairJson, DivergenceJson


@dataclass(frozen=True, slots=True, repr=False)
class DiffReport(_diff.DiffReport):
    """`prefixscope.diff`'s result: each consecutive pair's first divergence and its cause.

    Tables (`to_polars`): ``pairs``, ``causes``.
    """

    # the names of `views.frames.DIFF_TABLES` (which imports what this module avoids);
    # tests/test_api.py holds the two equal
    TABLES: ClassVar[tuple[str, ...]] = ("pairs", "causes")

    @classmethod
    def _of(cls, report: _diff.DiffReport) -> DiffReport:
        return cls(**{f.name: getattr(report, f.name) for f in fields(report)})

    def to_dict(self) -> dict[str, Any]:
        """The document ``prefixscope diff --json`` prints."""
        return dict(diff_json(self))

    def to_polars(self, table: str = "pairs") -> pl.DataFrame:
        """One of `TABLES` as a frame (columns: docs/api.md).

        Raises:
            prefixscope.Error: an unknown table.
        """
        from prefixscope.views import frames

        return frames.table_of(frames.DIFF_TABLES, table, self)

    def __repr__(self) -> str:
        return (f"<prefixscope.DiffReport: {self.totals.pairs:,} pairs, "
                f"{self.totals.lost_tokens:,} lost tokens>")


def diff_json(report: _diff.DiffReport) -> DiffJson:
    """The documented JSON shape (docs/json.md)."""
    return {
        "pairs": [diff_pair_json(p) for p in report.pairs],
        "totals": {
            "pairs": report.totals.pairs,
            "lost_tokens": report.totals.lost_tokens,
            "by_cause": {c: {"pairs": t.pairs, "lost_tokens": t.lost_tokens}
                         for c, t in report.totals.by_cause.items()},
            "skipped": report.totals.skipped,
            "skipped_reasons": report.totals.skipped_reasons,
        },
        "gateway": report.options.gateway,
        "tokenizer": report.options.tokenizer,
        "what_if": list(report.options.what_if),
        "block_size_source": report.block_size_source,
    }


def diff_pair_json(p: _diff.PairDiff) -> DiffPairJson:
    fd = p.first_divergence
    return {
        "a": p.a, "b": p.b, "session": p.session, "tokens_a": p.tokens_a,
        "tokens_b": p.tokens_b,
        "first_divergence": None if fd is None else _divergence_json(fd),
        "block_size": p.block_size, "reusable_tokens": p.reusable_tokens,
        "lost_tokens": p.lost_tokens, "cause": p.cause, "detail": p.detail,
        "approximate": p.approximate, "block_size_source": p.block_size_source,
        "observed_cached": p.observed_cached, "shortfall": p.shortfall,
    }


def _divergence_json(fd: _diff.Divergence) -> DivergenceJson:
    text_a, text_b = fd.texts()
    return {"token": fd.token, "char_a": fd.char_a, "char_b": fd.char_b, "segment": fd.segment,
            "text_a": text_a, "text_b": text_b, "token_a": fd.token_a, "token_b": fd.token_b}
