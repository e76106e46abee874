"""`engine-log` for a person: what was read, the configuration, the hit-rate series in
three numbers, the offload and Prometheus counters, and each finding with its evidence
and fix."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from prefixscope.analyses.engine_cache import EngineLogAnalysis, RateSummary, stamp
from prefixscope.views.terminal import Screen, count, percent, visible

MAX_WARNED_SKIPS = 20


def _when(a: EngineLogAnalysis) -> str:
    if a.first is None or a.last is None:
        return "no timestamps"
    if not a.year_known:
        return f"{stamp(a.first)} … {stamp(a.last)}"
    fmt = "%Y-%m-%d %H:%M:%S"
    return f"{a.first.strftime(fmt)} … {a.last.strftime(fmt)}"


def _rate_row(name: str, r: RateSummary) -> list[str]:
    return [name, f"{r.points:,}", percent(r.min), percent(r.median), percent(r.max),
            percent(r.last)]


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def engine_log_screen(a: EngineLogAnalysis, screen: Screen) -> Screen:
    """Summary, configuration facts, series summary, counters, findings."""
    kinds = sorted(set(a.kinds.values()))
    matched = ", ".join(f"{k} {v:,}" for k, v in a.matched.items() if k != "other")
    screen.print(f"[bold]{count(len(a.files), 'file')}[/] ({', '.join(kinds)}) · "
                 f"{count(a.lines, 'line')} · matched: {matched or 'nothing'} · "
                 f"{a.skipped:,} unparsed · {_when(a)}")
    if a.config:
        table = Table(title="configuration the logs state", show_edge=False,
                      title_justify="left")
        for col in ("fact", "value", "where"):
            table.add_column(col)
        for c in a.config:
            table.add_row(c.key, escape(visible(c.value)), escape(f"{c.file}:{c.line}"))
        screen.print(table)
    block = f"block size: {a.block_size if a.block_size is not None else 'not stated'}"
    if a.cached_block_size is not None:  # the cached values contradict the stated one
        block = (f"block size: {a.cached_block_size} (the log's cached values are multiples "
                 f"of it); stated: {a.block_size} (the configuration above)")
    screen.print(block)
    if a.series:
        rates = Table(title=f"{count(len(a.series), 'stats line')} (vLLM's prefix hit rate is "
                            "a rolling window over recent requests)",
                      show_edge=False, title_justify="left")
        for col in ("rate", "lines", "min", "median", "max", "last"):
            rates.add_column(col, justify="left" if col == "rate" else "right")
        rates.add_row(*_rate_row("prefix cache hit rate", a.prefix_hit_rate))
        if a.external_hit_rate.points:
            rates.add_row(*_rate_row("external prefix cache hit rate", a.external_hit_rate))
        if a.cpu_prefix_hit_rate.points:
            rates.add_row(*_rate_row("CPU prefix cache hit rate (V0)", a.cpu_prefix_hit_rate))
        rates.add_row(*_rate_row("GPU KV cache usage", a.kv_usage))
        screen.print(rates)
    if len(a.servers) > 1:
        screen.print(f"{len(a.servers):,} series, each its own trend: "
                     + "; ".join(f"#{v.server} {escape(v.engine or '-')} "
                                 f"{escape(v.process or '')} lines {v.first_line}-"
                                 f"{v.last_line} ({escape(v.why)})" for v in a.servers),
                     soft_wrap=True)
    o = a.offload
    if o.transfer_lines:
        ops = (f" in {o.store_operations:,} operations" if o.store_operations is not None
               else "")
        screen.print(f"KV offload ({count(o.transfer_lines, 'KV Transfer metrics line')}): "
                     f"stored {o.store_bytes:,.0f} bytes in {count(o.store_points, 'interval')}"
                     f"{ops}; loaded {o.load_bytes:,.0f} bytes in "
                     f"{count(o.load_points, 'interval')}")
    p = a.prometheus
    if p is not None:
        screen.print(
            f"Prometheus ({count(p.files, 'dump')}, {count(p.samples, 'sample')}): prefix "
            f"cache {_num(p.prefix_hits)} hit / {_num(p.prefix_queries)} queried tokens = "
            f"{percent(p.hit_rate)}; external {_num(p.external_hits)} / "
            f"{_num(p.external_queries)} = {percent(p.external_hit_rate)}; prompt tokens "
            f"{_num(p.prompt_tokens)}, cached {_num(p.prompt_tokens_cached)}; KV usage "
            f"{percent(p.kv_usage)}; preemptions {_num(p.preemptions)}; offload stored "
            f"{_num(p.offload_store_bytes)} / loaded {_num(p.offload_load_bytes)} bytes")
    sg = a.sglang
    if sg is not None:
        screen.print(f"SGLang ({count(sg.prefill_lines, 'prefill line')}): {sg.cached_tokens:,} "
                     f"cached of {sg.cached_tokens + sg.new_tokens:,} prefill tokens = "
                     f"{percent(sg.hit_rate)}; max token usage {percent(sg.max_token_usage)}, "
                     f"max queue {sg.max_queue if sg.max_queue is not None else '-'}")
    lm = a.lmcache
    if lm is not None:
        screen.print(f"LMCache: {count(lm.lookups, 'lookup')}, {lm.hit_tokens:,} hit of "
                     f"{lm.lookup_tokens:,} tokens = {percent(lm.hit_rate)}, "
                     f"{count(lm.loading_lookups, 'load')} ({lm.load_tokens:,} tokens); "
                     f"{count(lm.stores, 'store')} ({lm.stored_tokens:,} tokens)"
                     + (f"; {count(lm.retrievals, 'retrieval')}: {lm.retrieved_tokens:,} of "
                        f"{lm.required_tokens:,} required tokens loaded"
                        if lm.retrievals else ""))
    if not a.findings:
        screen.print("[green]no findings[/]: nothing in these logs crosses a threshold")
    for f in a.findings:
        screen.print(f"\n[bold magenta]{escape(f.kind)}[/] {escape(visible(f.title))}",
                     soft_wrap=True)
        evidence = ", ".join(f"{k}={v}" for k, v in f.evidence.items() if v is not None)
        screen.print(f"  evidence: {escape(visible(evidence))}", soft_wrap=True)
        screen.print(f"  fix: {escape(f.fix)}", soft_wrap=True)
    if not a.year_known and a.first is not None:
        screen.note("note: the log's times carry no year; they are shown as the log prints "
                    "them")
    for s in a.skips[:MAX_WARNED_SKIPS]:
        screen.warn(f"unparsed {s.file}:{s.line}: {s.reason}")
    if a.skipped > MAX_WARNED_SKIPS:
        screen.warn(f"... {a.skipped - MAX_WARNED_SKIPS:,} more unparsed lines "
                    "(see --json for the first 100)")
    return screen
