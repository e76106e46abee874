"""The naive way of `diff --all`, timed on a sample of a log, for bench_scale.py.

What a person writes without prefixscope: for every request, transformers'
``apply_chat_template(..., tokenize=False)`` and a whole-prompt ``encode`` (the same
template and tokenizer prefixscope uses for these requests: DeepSeek-V4's, via
`bench_tokenize.Naive`), then a Python loop for the first token that differs from the
session's previous request. For `report`, the naive way adds a cache replay: vLLM's
block hashing written plainly (``hashlib.sha256`` of the parent hash and each 16-token
block, as vLLM's ``hash_block_tokens``) against an unbounded dict, a hit count per
request. Only that work is timed; reading the file and building each
request's template input (prefixscope's parser and gateway conversion) is not, so the
naive side is flattered.

It runs on ``--requests`` lines spread evenly over the log and prints one JSON line: the
seconds of each part (render + encode, the divergence loop, the replay), wall and CPU
(``process_time``: every thread of the process; on a shared machine the wall time says
more of the others than of the work), the sample's
bytes and requests, so the caller extrapolates to the whole
file by bytes (a request's render and encode cost grows with its size).
Run: ``python bench/naive_diff.py LOG --requests 40``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from bench_tokenize import Naive  # noqa: E402

from prefixscope.ingest import read_requests  # noqa: E402
from prefixscope.prompt import RenderOptions  # noqa: E402

SPEC = "deepseek-v4"
BLOCK = 16


def first_divergence(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def replay(ids: list[int], cache: set[bytes]) -> int:
    """Cached tokens of one request against `cache` (then the request's blocks added)."""
    parent, hit, missed = b"", 0, False
    for start in range(0, len(ids) - len(ids) % BLOCK, BLOCK):
        parent = hashlib.sha256(parent + repr(ids[start:start + BLOCK]).encode()).digest()
        if not missed and parent in cache:
            hit += BLOCK
        else:
            missed = True
            cache.add(parent)
    return hit


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", type=Path)
    ap.add_argument("--requests", type=int, default=40)
    args = ap.parse_args(argv)
    # Spread over the file (every k-th line): the first lines are the sessions' first,
    # shortest turns, whose fixed per-request cost would inflate a by-bytes extrapolation.
    with args.log.open("rb") as fh:
        count = sum(1 for _ in fh)
    every = max(1, count // max(1, args.requests))
    with args.log.open("rb") as fh:
        lines = [line for i, line in enumerate(fh) if i % every == 0][: args.requests]
    sample_bytes = sum(len(line) for line in lines)
    with tempfile.TemporaryDirectory() as tmp:
        part = Path(tmp) / "sample.jsonl"
        part.write_bytes(b"".join(lines))
        requests, _ = read_requests(part)
    naive = Naive(SPEC)
    options = RenderOptions(tokenizer=SPEC)
    last: dict[str, list[int]] = {}
    seconds = loop_seconds = replay_seconds = 0.0
    cpu = loop_cpu = replay_cpu = 0.0  # the same parts in CPU seconds (a shared machine)
    pairs = 0
    cache: set[bytes] = set()
    for request in requests:
        messages, tools = naive.inputs(request, options)
        session = request.session_key or "-"
        start, start_cpu = time.perf_counter(), time.process_time()
        ids = naive.ids(messages, tools).tolist()
        rendered, rendered_cpu = time.perf_counter(), time.process_time()
        previous = last.get(session)
        if previous is not None:
            first_divergence(previous, ids)
            pairs += 1
        seconds += rendered - start
        cpu += rendered_cpu - start_cpu
        loop_seconds += time.perf_counter() - rendered
        loop_cpu += time.process_time() - rendered_cpu
        last[session] = ids
        start, start_cpu = time.perf_counter(), time.process_time()
        replay(ids, cache)
        replay_seconds += time.perf_counter() - start
        replay_cpu += time.process_time() - start_cpu
    print(json.dumps({"render_seconds": seconds, "loop_seconds": loop_seconds,
                      "replay_seconds": replay_seconds,
                      "render_cpu": cpu, "loop_cpu": loop_cpu, "replay_cpu": replay_cpu,
                      "sample_bytes": sample_bytes,
                      "requests": len(requests), "pairs": pairs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
