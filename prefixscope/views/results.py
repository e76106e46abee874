"""The results the public API returns: each core result with its views attached.

`prefixscope.report()` returns a `Report`, which *is* the `findings.model.Report` the
command line renders (a subclass adding methods, no fields), so a notebook holds the same
typed values the terminal, JSON and HTML views read. Each result adds:

* ``to_dict()`` -- the documented JSON document the command's ``--json`` prints
  (docs/json.md);
* ``to_polars(table)`` -- each table the result shows (`views.frames`; docs/api.md);
* a short ``repr`` (a report holds every request's evidence), and for a report
  ``_repr_html_``: the HTML page's findings table, for a notebook.

`views.ingested.IngestResult` (what an ingest did) is apart: an ingest imports none of
the analyses. So is `views.diffed.DiffReport` (a diff imports none of the findings), named
here too.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from prefixscope.analyses import prompt_spans as _spans
from prefixscope.analyses import simulate as _simulate
from prefixscope.findings import calls as _calls
from prefixscope.findings import model as _model
from prefixscope.views import frames, wording
from prefixscope.views.diffed import DiffReport as DiffReport
from prefixscope.views.html import findings_table

if TYPE_CHECKING:
    import polars as pl

    from prefixscope.analyses.bucket import BucketReport
    from prefixscope.analyses.segments import SegmentsReport
    from prefixscope.findings.breakdown import Breakdown

T = TypeVar("T")


def as_subclass(cls: type[T], value: object) -> T:
    """`value` (a core result) as `cls`, its subclass holding the same fields."""
    return cls(**{f.name: getattr(value, f.name) for f in fields(value)})  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True, repr=False)
class Report(_model.Report):
    """`prefixscope.report`'s result: the summary, the ledger, the ranked findings, the gate.

    Tables (`to_polars`): ``findings``, ``causes`` (the ledger by cause), ``entries`` (the
    ledger per request), ``breakdown`` (with ``by=``), ``gate``, ``scenarios``, ``what_ifs``.
    """

    TABLES: ClassVar[tuple[str, ...]] = tuple(frames.REPORT_TABLES)

    @classmethod
    def _of(cls, report: _model.Report) -> Report:
        return as_subclass(cls, report)

    def to_dict(self) -> dict[str, Any]:
        """The document ``prefixscope report --json`` prints."""
        from prefixscope.views.json import report_json

        return dict(report_json(self))

    def to_html(self) -> str:
        """The self-contained page ``prefixscope report --html`` writes."""
        from prefixscope.views.html import report_html

        return report_html(self)

    def to_markdown(self, top: int = 10) -> str:
        """The Markdown ``prefixscope report --md`` writes (`top` findings in full)."""
        from prefixscope.views.markdown import report_markdown

        return report_markdown(self, top=top)

    def to_polars(self, table: str = "findings") -> pl.DataFrame:
        """One of `TABLES` as a frame (columns: docs/api.md).

        Raises:
            prefixscope.Error: an unknown table, or ``breakdown`` of a report without ``by``.
        """
        return frames.table_of(frames.REPORT_TABLES, table, self)

    def _repr_html_(self) -> str:
        """The basis, the ledger line and the HTML page's findings table."""
        lines = [wording.basis_line(self.summary)]
        ledger = wording.ledger_line(self.ledger)
        if ledger is not None:
            lines.append(ledger)
        out = [f"<p>{html.escape(line, quote=True)}.</p>" for line in lines]
        if self.findings:
            out += findings_table(self)
        else:
            out.append(f"<p>{html.escape(wording.no_findings_line(self), quote=True)}.</p>")
        return "\n".join(["<div>", *out, "</div>"])

    def __repr__(self) -> str:
        s = self.summary
        rate = "-" if s.hit_rate is None else f"{s.hit_rate:.2%}"
        gate = "passed" if self.gate.passed else "FAILED"
        return (f"<prefixscope.Report: {s.requests:,} requests, hit rate {rate}, "
                f"{len(self.findings)} findings, gate {gate}>")


@dataclass(frozen=True, slots=True, repr=False)
class SimulateReport(_simulate.SimulateReport):
    """`prefixscope.simulate`'s result: observed, predicted and ideal hit rates, each
    uncached token's class, the capacity curve and the what-ifs.

    Tables (`to_polars`): ``requests``, ``misses``, ``capacity_curve``, ``what_if``.
    """

    TABLES: ClassVar[tuple[str, ...]] = tuple(frames.SIMULATE_TABLES)

    @classmethod
    def _of(cls, report: _simulate.SimulateReport) -> SimulateReport:
        return as_subclass(cls, report)

    def to_dict(self, *, per_request: bool = False) -> dict[str, Any]:
        """The document ``prefixscope simulate --json`` prints (``per_request``: with
        ``--per-request``)."""
        from prefixscope.views.json import simulate_json

        return dict(simulate_json(self, per_request=per_request))

    def to_polars(self, table: str = "requests") -> pl.DataFrame:
        """One of `TABLES` as a frame (columns: docs/api.md).

        Raises:
            prefixscope.Error: an unknown table.
        """
        return frames.table_of(frames.SIMULATE_TABLES, table, self)

    def __repr__(self) -> str:
        rate = "-" if self.hit_rate_predicted is None else f"{self.hit_rate_predicted:.2%}"
        return (f"<prefixscope.SimulateReport: {self.engine}, {self.requests:,} requests, "
                f"predicted hit rate {rate}>")


@dataclass(frozen=True, slots=True, repr=False)
class RenderResult(_spans.RenderResult):
    """`prefixscope.render`'s result: the prompt the upstream model saw, its tokens and
    the segment spans that cover it.

    Tables (`to_polars`): ``segments``, ``tokens``.
    """

    TABLES: ClassVar[tuple[str, ...]] = tuple(frames.RENDER_TABLES)

    @classmethod
    def _of(cls, result: _spans.RenderResult) -> RenderResult:
        return as_subclass(cls, result)

    def to_dict(self, *, show_text: bool = False) -> dict[str, Any]:
        """The document ``prefixscope render --json`` prints (``show_text``: with
        ``--show-text``)."""
        from prefixscope.views.json import render_json

        return dict(render_json(self, show_text=show_text))

    def to_polars(self, table: str = "segments") -> pl.DataFrame:
        """One of `TABLES` as a frame (columns: docs/api.md).

        Raises:
            prefixscope.Error: an unknown table.
        """
        return frames.table_of(frames.RENDER_TABLES, table, self)

    def __repr__(self) -> str:
        return (f"<prefixscope.RenderResult: {self.request}, {self.tokens:,} tokens, "
                f"{len(self.segments)} segments>")


@dataclass(frozen=True, slots=True, repr=False)
class Calls(_calls.Calls):
    """`prefixscope.calls`' result: the ledger one request at a time, a session at a time
    (``sessions``, each with its ``calls``: in / read / write / missed and the ledger's
    causes).

    Tables (`to_polars`): ``calls``.
    """

    TABLES: ClassVar[tuple[str, ...]] = tuple(frames.CALLS_TABLES)

    @classmethod
    def _of(cls, calls: _calls.Calls) -> Calls:
        return as_subclass(cls, calls)

    def to_dict(self) -> dict[str, Any]:
        """The document ``prefixscope calls --json`` prints."""
        from prefixscope.views.json import calls_json

        return dict(calls_json(self))

    def to_polars(self, table: str = "calls") -> pl.DataFrame:
        """One of `TABLES` as a frame (columns: docs/api.md).

        Raises:
            prefixscope.Error: an unknown table.
        """
        return frames.table_of(frames.CALLS_TABLES, table, self)

    def __repr__(self) -> str:
        return (f"<prefixscope.Calls: {self.requests:,} calls in {len(self.sessions):,} "
                f"sessions, {self.missed_tokens:,} missed tokens>")


@dataclass(frozen=True, slots=True)
class BucketResult:
    """What ``prefixscope bucket`` shows (`prefixscope.bucket`): the hit rate, histogram,
    spikes and constants per group (`report`), and with `by` the report's ledger by the
    same dimensions (`spend`: usage, dollars and the top loss per group)."""

    report: BucketReport
    spend: Breakdown | None
    by: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """The ``bucket --json`` document (docs/json.md)."""
        from prefixscope.views.json import bucket_json

        return dict(bucket_json(self.report, self.spend))


@dataclass(frozen=True, slots=True)
class SegmentsResult:
    """What ``prefixscope segments`` shows (`prefixscope.segments`): one census of the
    request segments, or one per group of `by`."""

    reports: tuple[SegmentsReport, ...]
    by: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """The ``segments --json`` document (docs/json.md)."""
        from prefixscope.views.json import segments_json

        return dict(segments_json(list(self.reports), self.by))


@dataclass(frozen=True, slots=True)
class SqlResult:
    """The rows of a query's last statement (`prefixscope.sql`): BLOBs as text, column
    names made unique (`renamed`: each (old, new)), secrets masked."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    statements: int  # statements in the query (rows are the last one's)
    renamed: tuple[tuple[str, str], ...]

    def to_dict(self) -> list[dict[str, Any]]:
        """The ``sql --json`` document: one object per row."""
        from prefixscope.views.sqlrows import rows_json

        return rows_json(self.columns, self.rows)
