"""The per-session stage of `diff --all`: one session's pairs in, their diffs out, as Arrow.

A pure function of its input table (rows of `store.export.pairs_schema()`) and a
`DiffSetup`, so a Ray worker, a test or any other map over sessions can run it. It
rebuilds the `Request` values the store would have loaded and hands them to
`analyses.diff.diff_pairs`: the values are the ones the local runner computes, not a copy
of its logic. `report_from_tables` turns the stage's output tables back into the
`DiffReport` the local runner returns.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from prefixscope.analyses.diff import (
    BlockSizes,
    DiffReport,
    Divergence,
    PairDiff,
    PairRef,
    assemble_report,
    diff_pairs,
)
from prefixscope.model import Request
from prefixscope.model.redaction import Redactor, activate, active
from prefixscope.prompt import RenderOptions
from prefixscope.store.export import request_from_json

_DIVERGENCE = ("token", "char_a", "char_b", "segment", "text_a", "text_b", "context_start",
               "first_char", "token_a", "token_b")
_INT_FIELDS = {"token", "char_a", "char_b", "context_start", "first_char"}

RESULT_SCHEMA = pa.schema([
    # a pair's place in `diff --all` order; a skip row: its session's first pair
    ("pair", pa.int64()),
    ("skip_order", pa.int64()),  # 0: a diffed pair; n: a session's n-th skip reason
    ("skip_reason", pa.string()),  # null: a diffed pair
    ("skipped", pa.int64()),  # pairs skipped for skip_reason (0 on a diffed pair)
    ("a", pa.string()),
    ("b", pa.string()),
    ("session", pa.string()),
    ("tokens_a", pa.int64()),
    ("tokens_b", pa.int64()),
    ("block_size", pa.int64()),
    ("reusable_tokens", pa.int64()),
    ("lost_tokens", pa.int64()),
    ("cause", pa.string()),
    ("detail", pa.string()),
    ("approximate", pa.bool_()),
    ("block_size_source", pa.string()),
    ("observed_cached", pa.int64()),
    ("breakpoints_a", pa.list_(pa.int64())),
    # first_divergence, flattened; all null when the pair has none
    *[(f"div_{name}", pa.int64() if name in _INT_FIELDS else pa.string())
      for name in _DIVERGENCE],
])


@dataclass(frozen=True, slots=True)
class DiffSetup:
    """What every session's diff shares (picklable: it travels to the workers)."""

    options: RenderOptions
    sizes: BlockSizes
    context: int
    redactor: Redactor


def diff_stage(table: pa.Table, setup: DiffSetup) -> pa.Table:
    """The diffs of one session's pairs (`pairs_schema` rows, any order) as `RESULT_SCHEMA`
    rows: one per diffed pair, one per reason pairs were skipped for.

    Raises:
        RenderError, TokenizerError: a bad option (`diff_pairs`).
    """
    rows = sorted(table.to_pylist(), key=lambda row: row["pair"])
    if not rows:
        return RESULT_SCHEMA.empty_table()
    refs = _pair_refs(rows)
    previous = active()
    activate(setup.redactor)  # the run's masking, in whatever process this runs in
    try:
        report = diff_pairs(refs, setup.options, block_size=setup.sizes,
                             context=setup.context)
    finally:
        activate(previous)
    out = []
    pending = iter(zip(rows, refs, strict=True))
    for result in report.pairs:  # in pair order; skipped pairs are left out
        row, ref = next(pending)
        while (ref.a.id, ref.b.id) != (result.a, result.b):
            row, ref = next(pending)
        out.append(_pair_row(row["pair"], result))
    first = rows[0]["pair"]
    for order, (reason, count) in enumerate(report.totals.skipped_reasons.items(), 1):
        out.append({"pair": first, "skip_order": order, "skip_reason": reason,
                    "skipped": count})
    return pa.Table.from_pylist(out, schema=RESULT_SCHEMA)


def _pair_refs(rows: list[dict[str, Any]]) -> list[PairRef]:
    known: dict[str, Request] = {}
    refs = []
    for row in rows:
        a = (known[row["a_id"]] if row["a_request"] is None
             else request_from_json(row["a_request"]))
        b = request_from_json(row["b_request"])
        known[b.id] = b
        refs.append(PairRef(a, b, row["session"], bool(row["compaction"])))
    return refs


def _pair_row(pair: int, result: PairDiff) -> dict[str, Any]:
    row: dict[str, Any] = {"pair": pair, "skip_order": 0, "skip_reason": None, "skipped": 0}
    for name in PairDiff.__slots__:
        if name != "first_divergence":
            row[name] = getattr(result, name)
    divergence = result.first_divergence
    for name in _DIVERGENCE:
        row[f"div_{name}"] = None if divergence is None else getattr(divergence, name)
    return row


def report_from_tables(tables: Iterable[pa.Table], options: RenderOptions,
                       sizes: BlockSizes) -> DiffReport:
    """The `DiffReport` of the stage's output (any number of tables, rows in any order),
    as `diff_pairs` over all the pairs at once returns it."""
    rows = [row for table in tables for row in table.to_pylist()]
    diffed = sorted((r for r in rows if r["skip_reason"] is None), key=lambda r: r["pair"])
    skips = sorted((r for r in rows if r["skip_reason"] is not None),
                   key=lambda r: (r["pair"], r["skip_order"]))
    skipped: dict[str, int] = {}
    for row in skips:  # first occurrence in pair order, as diff_pairs counts them
        skipped[row["skip_reason"]] = skipped.get(row["skip_reason"], 0) + row["skipped"]
    return assemble_report([_pair_diff(row) for row in diffed], skipped, options, sizes)


def _pair_diff(row: dict[str, Any]) -> PairDiff:
    divergence = None if row["div_token"] is None else Divergence(
        **{name: row[f"div_{name}"] for name in _DIVERGENCE})
    fields: dict[str, Any] = {name: row[name] for name in PairDiff.__slots__
                              if name != "first_divergence"}
    fields["breakpoints_a"] = tuple(row["breakpoints_a"] or ())  # a list in the table
    return PairDiff(first_divergence=divergence, **fields)
