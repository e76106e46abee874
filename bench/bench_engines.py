"""Benchmark: cache-engine replay speed and hit rates on the Mooncake traces, with peers.

Replays both Mooncake FAST'25 traces (tests/data/real/mooncake/, 512-token
``hash_ids``) through prefixscope's engines at several capacities (in 512-token
blocks; "inf" = unlimited) and prints, per run, the token-weighted hit rate over
the whole trace and over its second half (the window kvcache.ai's simulator and
llmtrafficlens measure by default: the first half only warms the cache), the
replay time and the replay speed in trace blocks per second. The `vllm` rows
are the speed figure asked for; the others are there for comparison.

Side by side, when installed (``pip install kvcache-simulator llmtrafficlens``;
neither is a dependency of prefixscope):

* kvcache-simulator (kvcache.ai): its ``lru`` policy (an LRU over the leaves of
  a trie of the ids, the running request's path protected) and its ``ceiling``,
  through its Python backend (``kvcache_sim.policies.simulate_policy``) and its
  C++ backend (``run_cpp_sweep``, one run for all capacities, compile excluded).
  It reports 0 ("underfilled") when the cache was not full before the window.
* llmtrafficlens: ``metrics.replay`` (an OrderedDict of ids touched head to
  tail). It counts every cached block of a request, not only the leading run,
  and a partial last block as 512 tokens, so it can exceed the others.

Semantics of prefixscope's rows: `blocktrace` is the trace publishers' rule
(leading ids, a partial last block counts its tokens, no last-token rule);
`vllm`, `sglang` and `lmcache` apply their engines' rules at 512 tokens per unit
(full blocks only, the last prompt token always computed).

Nothing here asserts a time. Run: ``python bench/bench_engines.py`` (about a
minute on 2 cores) or ``--quick`` (one capacity, no Python-backend peer).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
REAL = Path(os.environ.get("PREFIXSCOPE_REAL_DATA", ROOT / "tests" / "data" / "real"))

from prefixscope.engines import Units, get_engine  # noqa: E402

BLOCK = 512
WARMUP = 0.5
TRACES = ("conversation", "synthetic")
ENGINES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("vllm", {"block_size": BLOCK}),
    ("blocktrace", {"block_size": BLOCK}),
    ("sglang", {"page_size": BLOCK}),
    ("lmcache", {"chunk_size": BLOCK}),
)

Row = tuple[str, str, str, str, str, str, str]


def pct(hit: int, total: int) -> str:
    return f"{100 * hit / total:.2f}" if total else "-"


def cap_label(capacity: int | None) -> str:
    return "inf" if capacity is None else f"{capacity:,}"


def speed(blocks: int, seconds: float) -> str:
    return f"{blocks / seconds / 1e6:.2f}M" if seconds > 0 else "-"


def prefixscope_rows(name: str, rows: list[dict], capacities: list[int | None]) -> list[Row]:
    units = [Units.blocks(r["hash_ids"], r["input_length"], BLOCK) for r in rows]
    lengths = [r["input_length"] for r in rows]
    start = int(len(rows) * WARMUP)
    blocks = sum(len(r["hash_ids"]) for r in rows)
    out: list[Row] = []
    for engine_name, params in ENGINES:
        for capacity in capacities:
            engine = get_engine(engine_name, capacity_blocks=capacity, **params)
            step = engine.step
            t0 = time.perf_counter()
            hits = [step(u).cached_tokens for u in units]
            seconds = time.perf_counter() - t0
            out.append((name, cap_label(capacity), f"prefixscope {engine_name}",
                        pct(sum(hits), sum(lengths)),
                        pct(sum(hits[start:]), sum(lengths[start:])),
                        f"{seconds:.3f}", speed(blocks, seconds)))
    return out


def kvcache_simulator_rows(name: str, path: Path, blocks: int, capacities: list[int | None],
                           python_backend: bool) -> list[Row]:
    label = "kvcache-simulator"
    try:
        from kvcache_sim.cpp_backend import ensure_cpp_simulator, run_cpp_sweep
        from kvcache_sim.plan import build_execution_plan
        from kvcache_sim.policies import simulate_ceiling, simulate_policy
        from kvcache_sim.trace import parse_trace_lines
    except ImportError as err:
        return [(name, "-", label, f"not installed ({err.name}); "
                 "pip install kvcache-simulator", "", "", "")]
    out: list[Row] = []

    def result(capacity: str, tool: str, res: Any, seconds: float) -> Row:
        window = pct(res.hitTokens, res.totalTokens)
        if res.measurementMode == "underfilled_at_window":
            window = "underfilled"
        return (name, capacity, tool, "-", window, f"{seconds:.3f}", speed(blocks, seconds))

    try:
        with path.open(encoding="utf-8") as f:
            trace = parse_trace_lines(f, block_size=BLOCK)
        plan = build_execution_plan(trace, WARMUP)
        t0 = time.perf_counter()
        ceiling = simulate_ceiling(plan)
        out.append(result("inf", f"{label} ceiling (py)", ceiling, time.perf_counter() - t0))
        limited = [c for c in capacities if c is not None]
        if python_backend:
            for capacity in limited:
                t0 = time.perf_counter()
                res = simulate_policy(plan, "lru", capacity)
                out.append(result(cap_label(capacity), f"{label} lru (py)", res,
                                  time.perf_counter() - t0))
        try:
            ensure_cpp_simulator()
            t0 = time.perf_counter()
            sweep = run_cpp_sweep(trace, capacities=limited, policies=["lru"],
                                  warmup_requests=plan.warmup_requests)
            seconds = time.perf_counter() - t0
            for capacity in limited:
                row = result(cap_label(capacity), f"{label} lru (c++, all caps)",
                             sweep.results[("lru", capacity)], seconds)
                # one run replays the trace once per capacity
                out.append((*row[:6], speed(blocks * len(limited), seconds)))
        except (OSError, RuntimeError) as err:
            out.append((name, "-", f"{label} (c++)", f"could not run: {err}", "", "", ""))
    except Exception as err:  # noqa: BLE001 -- a peer failing is a line of output
        out.append((name, "-", label, f"could not run: {type(err).__name__}: {err}",
                    "", "", ""))
    return out


def llmtrafficlens_rows(name: str, path: Path, blocks: int,
                        capacities: list[int | None]) -> list[Row]:
    label = "llmtrafficlens"
    try:
        from llmtrafficlens.adapters import read_hashed_jsonl
        from llmtrafficlens.metrics import replay
    except ImportError as err:
        return [(name, "-", label, f"not installed ({err.name}); pip install llmtrafficlens",
                 "", "", "")]
    out: list[Row] = []
    try:
        requests = read_hashed_jsonl(path, BLOCK)
        for capacity in capacities:
            tokens = None if capacity is None else capacity * BLOCK
            t0 = time.perf_counter()
            res = replay(requests, BLOCK, tokens, WARMUP)
            seconds = time.perf_counter() - t0
            out.append((name, cap_label(capacity), f"{label} replay", "-",
                        f"{100 * res['hit_rate']:.2f}", f"{seconds:.3f}", speed(blocks, seconds)))
    except Exception as err:  # noqa: BLE001 -- a peer failing is a line of output
        out.append((name, "-", label, f"could not run: {type(err).__name__}: {err}",
                    "", "", ""))
    return out


def hashing_row() -> Row:
    """block_keys on 1M random token ids (what simulate pays per prompt token)."""
    import numpy as np

    from prefixscope.engines import block_keys

    tokens = np.random.default_rng(0).integers(0, 150_000, 1_000_000)
    t0 = time.perf_counter()
    block_keys(tokens, 16)
    seconds = time.perf_counter() - t0
    return ("1M tokens", "-", "prefixscope block_keys(bs=16)", "-", "-", f"{seconds:.3f}",
            f"{1_000_000 / seconds / 1e6:.1f}M tok/s")


def print_table(rows: list[Row]) -> None:
    header: Row = ("trace", "capacity (blocks)", "engine / tool", "hit % all", "hit % 2nd half",
                   "replay s", "blocks/s")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="one capacity and no Python-backend peer run")
    args = parser.parse_args(argv)
    capacities: list[int | None] = [4_000, None] if args.quick else [1_000, 4_000, 16_000, None]
    rows: list[Row] = []
    runners: list[Callable[[], list[Row]]] = []
    for name in TRACES:
        path = REAL / "mooncake" / f"{name}_trace.jsonl"
        trace = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        blocks = sum(len(r["hash_ids"]) for r in trace)
        print(f"{name}: {len(trace):,} requests, {blocks:,} blocks of {BLOCK} tokens",
              file=sys.stderr)
        runners += [
            lambda name=name, trace=trace: prefixscope_rows(name, trace, capacities),
            lambda name=name, path=path, blocks=blocks: kvcache_simulator_rows(
                name, path, blocks, capacities, python_backend=not args.quick),
            lambda name=name, path=path, blocks=blocks: llmtrafficlens_rows(
                name, path, blocks, capacities),
        ]
    for run in runners:
        rows += run()
    rows.append(hashing_row())
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
