"""`prefixscope diff`: where two consecutive turns first diverge, and why."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from prefixscope.cli import console
from prefixscope.cli.options import (
    BlockSize,
    Gateway,
    JsonOut,
    Quiet,
    StoreOpt,
    Tokenizer,
    WhatIf,
    what_if_tuple,
)


def register(app: typer.Typer) -> None:
    app.command("diff")(diff)


def diff(
    refs: Annotated[list[str] | None, typer.Argument(
        help="Two requests A B (store ids, id prefixes, or files holding one request body); "
             "with --session/--all: log files to ingest (else --store).",
        show_default=False)] = None,
    session: Annotated[str | None, typer.Option("--session", help="Diff every consecutive "
                                                                  "pair of this session.")]
    = None,
    all_sessions: Annotated[bool, typer.Option("--all", help="Diff every consecutive pair of "
                                                             "every session.")] = False,
    store: StoreOpt = None,
    gateway: Gateway = "auto",
    tokenizer: Tokenizer = "deepseek-v4",
    what_if: WhatIf = None,
    block_size: BlockSize = None,
    context: Annotated[int, typer.Option("--context", "-C", min=0, help="Characters of text "
                                                                        "shown around the "
                                                                        "divergence.")] = 40,
    worst: Annotated[int, typer.Option("--worst", min=0, help="Worst pairs listed with "
                                                              "--session/--all.")] = 10,
    json_out: JsonOut = False,
    quiet: Quiet = 0,
) -> None:
    """Find the first divergent token of consecutive requests, its segment and its cause.

    Example:
        prefixscope diff 3f2a 9c1d --store cc.duckdb --gateway anthropic-to-openai
        prefixscope diff --all sample_logs/ --what-if strip-billing-header
    """
    from prefixscope.analyses.diff import (
        DEFAULT_BLOCK_SIZE,
        diff_pairs,
        diff_tokens,
        totals,
    )
    from prefixscope.cli.storeopen import open_store
    from prefixscope.prompt import RenderError, RenderOptions
    from prefixscope.store.lookup import LookupError_, resolve_request
    from prefixscope.tokenizers import TokenizerError
    from prefixscope.tokens.tokenize import tokens_many
    from prefixscope.views.json import diff_json

    options = checked_options(RenderOptions(gateway=gateway, tokenizer=tokenizer,
                                            what_if=what_if_tuple(what_if)))
    refs = refs or []
    if session is not None and not session.strip():
        raise console.fail("--session needs a session id (see: prefixscope sql \"select "
                           "distinct session from sessions\")", 2)
    if session is None and not all_sessions:
        if len(refs) != 2:
            raise console.fail("give two requests A B, or --session S, or --all", 2)
        st_cm = _maybe_store(store)
        with st_cm as st:
            try:
                a, b = (resolve_request(r, st) for r in refs)
            except LookupError_ as exc:
                raise console.fail(str(exc)) from None
            bs, source = _block_size(block_size, st, DEFAULT_BLOCK_SIZE)
        try:
            ta, tb = tokens_many([a, b], options)
        except (RenderError, TokenizerError) as exc:
            raise console.fail(str(exc).splitlines()[0]) from None
        pair = diff_tokens(ta, tb, a, b, block_size=bs, context=context)
        from prefixscope.analyses.diff import DiffReport
        report = DiffReport((pair,), totals([pair]), options, bs, source)
        if json_out:
            console.print_json(diff_json(report))
        else:
            _print_pair(pair, source)
        return

    with open_store(refs or None, store, quiet=quiet, json_mode=json_out) as st:
        bs, source = _block_size(block_size, st, DEFAULT_BLOCK_SIZE)
        count, pairs = _pairs(st, session)
        try:
            with console.count_progress(console.show_progress(json_out, quiet), "diff",
                                        count) as progress:
                report = diff_pairs(pairs, options, block_size=bs, context=context,
                                    block_size_source=source, progress=progress)
        except (RenderError, TokenizerError) as exc:
            raise console.fail(str(exc).splitlines()[0]) from None
    if json_out:
        console.print_json(diff_json(report))
    else:
        _print_summary(report, worst, quiet)


def checked_options(options: Any) -> Any:
    """`options` once its gateway and what-ifs are valid (else exit 2) and its tokenizer
    loads (else exit 1): checked before any log is read or pair rendered."""
    from prefixscope.cli.exitcodes import ExitCode
    from prefixscope.prompt import RenderError, check_options
    from prefixscope.tokenizers import TokenizerError, load_tokenizer

    try:
        check_options(options)
    except RenderError as exc:
        raise console.fail(str(exc).splitlines()[0], ExitCode.USAGE) from None
    try:
        load_tokenizer(options.tokenizer)
    except TokenizerError as exc:
        raise console.fail(str(exc).splitlines()[0]) from None
    return options


class _NoStore:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _maybe_store(store: Path | None) -> Any:
    """The store when one is named or the default exists; else nothing (files only)."""
    from prefixscope.store import DEFAULT_STORE, Store, StoreError

    path = store or Path(DEFAULT_STORE)
    if store is None and not path.exists():
        return _NoStore()
    try:
        return Store.open(path, read_only=True)
    except StoreError as exc:
        raise console.fail(str(exc)) from None


def _block_size(flag: int | None, st: Any, default: int) -> tuple[int, str]:
    if flag:
        return flag, "flag"
    if st is not None:
        from prefixscope.analyses.bucket import infer_block_size

        inferred = infer_block_size(st.positive_cached_values())
        if inferred:
            return inferred, "inferred"
    return default, "default"


_PAIRS_PER_LOAD = 64  # pairs whose requests are loaded from the store in one query


def _pairs(st: Any, session: str | None) -> tuple[int, Any]:
    """(number of pairs, a generator of PairRef loading each request once, in pair order)."""
    from prefixscope.analyses.diff import PairRef

    if session is not None:
        matches = st.sessions_matching(session)
        if not matches:
            raise console.fail(f"no session {session!r} in the store")
        if len(matches) > 1:
            raise console.fail(f"session {session!r} is ambiguous: {', '.join(matches)}")
        session = matches[0]
    rows = st.session_pairs(session)

    def generate() -> Any:
        # One query per chunk of pairs (a query per request is ~5 ms on a big store);
        # a chunk holds at most 2 * _PAIRS_PER_LOAD requests with their bodies.
        for start in range(0, len(rows), _PAIRS_PER_LOAD):
            chunk = rows[start:start + _PAIRS_PER_LOAD]
            loaded = st.get_many(rid for a, b, _, _ in chunk for rid in (a, b))
            for a, b, s, comp in chunk:  # threading only links stored requests
                yield PairRef(loaded[a], loaded[b], s, comp)

    return len(rows), generate()


def _highlight(text_a: str, text_b: str, first: int) -> tuple[str, str]:
    """Rich markup of both context texts with the differing middle highlighted."""
    from rich.markup import escape

    suffix = 0
    while (suffix < min(len(text_a), len(text_b)) - first
           and text_a[len(text_a) - 1 - suffix] == text_b[len(text_b) - 1 - suffix]):
        suffix += 1

    def mark(t: str) -> str:
        end = len(t) - suffix
        return (escape(t[:first]) + "[bold reverse]" + escape(t[first:end]) + "[/]"
                + escape(t[end:]))
    return mark(text_a), mark(text_b)


def _print_pair(p: Any, block_source: str) -> None:
    from rich.markup import escape

    out = console.out
    out.print(f"[bold]A[/] {escape(p.a[:12])}  →  [bold]B[/] {escape(p.b[:12])}"
              + (f"   session {escape(p.session)}" if p.session else "")
              + f"   tokens {p.tokens_a:,} → {p.tokens_b:,}")
    fd = p.first_divergence
    if fd is None:
        out.print(f"[green]no divergence[/]: {p.cause}")
    else:
        out.print(f"first divergence at token {fd.token:,} (char {fd.char_b:,}) in "
                  f"[bold cyan]{escape(' › '.join(fd.segment.split('.')))}[/]")
        a_text, b_text = _highlight(fd.text_a.replace("\n", "⏎"), fd.text_b.replace("\n", "⏎"),
                                    fd.first_char - fd.context_start)
        out.print(f"  A: …{a_text}…")
        out.print(f"  B: …{b_text}…")
        out.print(f"  tokens at the split: {escape(repr(fd.token_a))} | "
                  f"{escape(repr(fd.token_b))}")
    out.print(f"reusable {p.reusable_tokens:,} · lost [bold]{p.lost_tokens:,}[/] tokens "
              f"(block {p.block_size}, {block_source})"
              + ("  [yellow](approximate: proxy tokenizer)[/]" if p.approximate else ""))
    out.print(f"cause: [bold]{p.cause}[/] — {escape(p.detail)}")


def _print_summary(report: Any, worst: int, quiet: int) -> None:
    from rich.markup import escape
    from rich.table import Table

    t = report.totals
    table = Table(title=f"{t.pairs:,} pairs · {t.lost_tokens:,} tokens lost "
                        f"(block {report.block_size}, {report.block_size_source})",
                  show_edge=False, title_justify="left")
    table.add_column("cause")
    table.add_column("pairs", justify="right")
    table.add_column("lost tokens", justify="right")
    table.add_column("share of lost", justify="right")
    for cause, c in sorted(t.by_cause.items(), key=lambda kv: -kv[1].lost_tokens):
        share = c.lost_tokens / t.lost_tokens if t.lost_tokens else 0.0
        table.add_row(cause, f"{c.pairs:,}", f"{c.lost_tokens:,}", f"{share:.1%}")
    console.out.print(table)
    bad = sorted((p for p in report.pairs if p.lost_tokens), key=lambda p: -p.lost_tokens)
    if bad and worst:
        w = Table(title="worst pairs", show_edge=False, title_justify="left")
        for col in ("a", "b", "token", "segment", "lost", "cause", "detail"):
            w.add_column(col, overflow="fold")
        for p in bad[:worst]:
            fd = p.first_divergence
            w.add_row(escape(p.a[:10]), escape(p.b[:10]), "-" if fd is None else f"{fd.token:,}",
                      "-" if fd is None else escape(fd.segment), f"{p.lost_tokens:,}", p.cause,
                      escape(p.detail))
        console.out.print(w)
    for reason, n in t.skipped_reasons.items():
        console.warn(f"{n} pair(s) not diffed: {reason}", quiet)
