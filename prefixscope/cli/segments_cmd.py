"""`prefixscope segments`: which parts of the request change between turns, and what it costs."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from prefixscope.cli import console
from prefixscope.cli.options import (
    By,
    Gateway,
    JsonOut,
    Logs,
    Quiet,
    StoreOpt,
    Tokenizer,
    WhatIf,
    dimensions,
    what_if_tuple,
)


def register(app: typer.Typer) -> None:
    app.command("segments")(segments)


def segments(
    logs: Logs = None,
    store: StoreOpt = None,
    by: By = None,
    gateway: Gateway = "auto",
    tokenizer: Tokenizer = "deepseek-v4",
    what_if: WhatIf = None,
    no_tokens: Annotated[bool, typer.Option("--no-tokens", help="Do not render: change rates "
                                                                "only, no token positions.")]
    = False,
    top: Annotated[int, typer.Option("--top", min=1, help="Segments shown per group.")] = 15,
    show_text: Annotated[bool, typer.Option("--show-text", help="Longer, unredacted "
                                                                "previews.")] = False,
    json_out: JsonOut = False,
    quiet: Quiet = 0,
) -> None:
    """Census of every request segment: how often it changes between turns, and how many
    tokens a change there invalidates.

    Example:
        prefixscope segments langfuse-export.jsonl --gateway anthropic-to-openai
    """
    from prefixscope.analyses.segments import segments_store
    from prefixscope.cli.storeopen import open_store
    from prefixscope.prompt import RenderOptions
    from prefixscope.tokenizers import TokenizerError
    from prefixscope.views.json import segments_json

    dims = dimensions(by)
    options = RenderOptions(gateway=gateway, tokenizer=tokenizer, what_if=what_if_tuple(what_if))
    with open_store(logs, store, quiet=quiet, json_mode=json_out) as st:
        try:
            total = st.body_count()
            with console.count_progress(console.show_progress(json_out, quiet), "segments",
                                        total) as progress:
                reports = segments_store(st, dims, options=options, with_tokens=not no_tokens,
                                         show_text=show_text, progress=progress)
        except (ValueError, TokenizerError) as exc:
            raise console.fail(str(exc), 2 if isinstance(exc, ValueError) else 1) from None
    if json_out:
        console.print_json(segments_json(reports, dims))
        return
    if not reports:
        console.out.print("no requests in the store: nothing to census")
    for report in reports:
        _print(report, top, quiet)


def _fmt(v: Any, spec: str = ",.0f") -> str:
    return "-" if v is None else format(v, spec)


def _print(report: Any, top: int, quiet: int) -> None:
    from rich.markup import escape
    from rich.table import Table

    t = report.totals
    key = ", ".join(f"{k}={v}" for k, v in report.group.items())
    label = escape(f"[{key}] ") if key else ""
    if not t.requests:
        console.out.print(f"{label}no request with a body: nothing to census")
        if t.without_body:
            console.warn(f"{label}{t.without_body:,} request(s) have no request body in the "
                         "log (billing logs like new-api's and Claude Code transcripts store "
                         "none): ingest a log with bodies (Langfuse, raw captures) for the same "
                         "traffic", quiet)
        return
    table = Table(title=f"{label}{t.requests:,} requests with a body · {t.pairs:,} consecutive "
                        "same-session pairs · ranked by invalidated tokens",
                  show_edge=False, title_justify="left")
    rows = []
    for s in report.segments[:top]:
        how = ", ".join(f"{k} {v}" for k, v in s.change_kinds.items())
        if s.unique_per_request:
            how = (how + "; unique per request") if how else "unique per request"
        rows.append((escape(s.segment), f"{s.distinct:,}/{s.requests:,}",
                     _fmt(s.change_rate, ".1%"), how, _fmt(s.token_start_median),
                     _fmt(s.tokens_after_median), _fmt(s.invalidated_tokens), escape(s.preview)))
    headers = ("segment", "distinct/held", "changed", "how", "at token", "after",
               "invalidated", "preview")
    widest = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    # Fit the terminal: numbers never wrap, "how" wraps if it must, the preview takes the
    # rest -- or is left out (it stays in --json) when fewer than 20 columns are left for it.
    fixed = sum(w for h, w in zip(headers, widest, strict=True) if h not in ("how", "preview"))
    room = console.out.width - fixed - 3 * len(headers)
    how_width = min(widest[3], 30)
    with_preview = room - how_width >= 20
    if not with_preview:
        headers, rows = headers[:-1], [r[:-1] for r in rows]
        how_width = max(10, min(widest[3], room + 3))
    for header, width in zip(headers, widest, strict=False):
        if header == "how":
            table.add_column(header, width=how_width)
        elif header == "preview":
            table.add_column(header, no_wrap=True, overflow="ellipsis",
                             width=min(widest[7], room - how_width))
        else:
            table.add_column(header, no_wrap=True, min_width=width,
                             justify="left" if header == "segment" else "right")
    for row in rows:
        table.add_row(*row)
    console.out.print(table)
    headline = _headline(report.segments[0]) if report.segments else None
    if headline:
        console.out.print(headline, soft_wrap=True)
    if len(report.segments) > top:
        console.note(f"... {len(report.segments) - top} more segment(s) (--top, --json)", quiet)
    if t.without_body:
        console.warn(f"{label}{t.without_body:,} request(s) without a body in the log were not "
                     "censused", quiet)


def _headline(top: Any) -> str | None:
    """One sentence on the top-ranked segment, when it changes in most pairs."""
    from rich.markup import escape

    if top.change_rate is None or top.change_rate < 0.5:
        return None
    how = "is unique per request and " if top.unique_per_request else ""
    kinds = ", ".join(k for k, _ in sorted(top.change_kinds.items(), key=lambda kv: -kv[1]))
    where = ""
    if top.token_start_median is not None and top.tokens_after_median is not None:
        where = (f": from token {top.token_start_median:,.0f} on, a median "
                 f"{top.tokens_after_median:,.0f} tokens are recomputed each time")
    return (f"→ [bold]{escape(top.segment)}[/] ({escape(top.preview)}) {how}changes in "
            f"{top.change_rate:.0%} of consecutive pairs ({kinds}){where}")
