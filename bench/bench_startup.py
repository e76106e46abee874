"""Benchmark: whole-process seconds of each command on a small input, against the 1 s target.

A person runs prefixscope on one file to look at two requests; the answer must come in
about a second, so start-up (imports, tokenizer load, template compile, the temporary
store) is the whole cost there. This script runs each command as its own process on
the first two requests of the bundled Langfuse sample and prints, per command:

* cold -- the first run with an empty prefixscope cache directory (the tokenizer's
  derived data is built and written there; Python's bytecode too, as after an install);
* warm -- the best of ``--repeat`` later runs (what every run after the first costs);
* and, with ``--baseline REF``, the warm time of the code at git ref REF (its tree
  extracted with ``git archive``; run from a git checkout) for a before/after.

Nothing asserts time (not a test). Wall time is the best of the repeats because other
processes share the machine; user+sys CPU of that run is printed too.
Run: ``python bench/bench_startup.py [--repeat N] [--baseline REF]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_logs" / "langfuse-claude-code.events_full.jsonl"
TARGET = 1.0


def commands(tmp: Path) -> list[tuple[str, list[str]]]:
    """(label, argv) of each command on the two-request log (or a store made from it)."""
    log = tmp / "two.jsonl"
    log.write_bytes(b"".join(SAMPLE.read_bytes().splitlines(keepends=True)[:2]))
    source_id = "17a459d3a53a9f01"  # the first request's Langfuse span id
    store = str(tmp / "store.duckdb")
    return [
        ("--help", ["--help"]),
        ("ingest", ["ingest", str(log), "--store", "{fresh}"]),
        ("sql", ["sql", "select count(*) from requests", "--store", store]),
        ("render", ["render", source_id, str(log)]),
        ("diff --all", ["diff", "--all", str(log)]),
        ("segments", ["segments", str(log)]),
        ("bucket", ["bucket", str(log)]),
        ("simulate", ["simulate", str(log)]),
        ("report", ["report", str(log)]),
        ("engine-log", ["engine-log", str(ROOT / "sample_logs" / "vllm-offload.log")]),
    ]


def run(tree: Path, argv: list[str], env: dict[str, str], tmp: Path) -> tuple[float, float]:
    """(wall seconds, user+sys CPU seconds) of one `prefixscope ARGV` process."""
    argv = [str(tmp / f"fresh-{time.perf_counter_ns()}.duckdb") if a == "{fresh}" else a
            for a in argv]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # cwd: `python -m` puts the working directory first on sys.path.
    done = subprocess.run([sys.executable, "-m", "prefixscope.cli.main", *argv],
                          env={**env, "PYTHONPATH": str(tree)}, capture_output=True, cwd=tree)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 2):  # 2: a gate or a finding, still an answer
        sys.stderr.write(done.stderr.decode(errors="replace"))
        raise SystemExit(f"{' '.join(argv)} failed with exit code {done.returncode}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def prepare(tree: Path, tmp: Path) -> dict[str, str]:
    """An environment with its own empty cache directory, and the store `sql` reads."""
    cache = Path(tempfile.mkdtemp(dir=tmp, prefix="cache-"))
    env = {**os.environ, "PREFIXSCOPE_CACHE_DIR": str(cache)}
    # As installed: Python keeps compiled bytecode (pip writes it; a run writes the rest).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([sys.executable, "-m", "prefixscope.cli.main", "ingest",
                    str(tmp / "two.jsonl"), "--store", str(tmp / "store.duckdb")],
                   env={**env, "PYTHONPATH": str(tree)}, capture_output=True, check=True,
                   cwd=tree)
    return env


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline", metavar="REF", help="also time the code at git ref REF")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        cmds = commands(tmp)
        trees = {"now": ROOT}
        if args.baseline:
            tree = trees["before"] = tmp / "baseline"
            tree.mkdir()
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.baseline],
                                     capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        envs = {key: prepare(tree, tmp) for key, tree in trees.items()}
        head = f"{'command':12} {'cold s':>7} {'warm s':>7} {'cpu s':>6}  vs {TARGET:.0f} s"
        print(head + (f"  {'before s':>8} {'cpu s':>6}  speed-up" if args.baseline else ""),
              flush=True)
        for label, argv in cmds:
            cold = run(ROOT, argv, envs["now"], tmp)[0]
            if args.baseline:
                run(trees["before"], argv, envs["before"], tmp)
            # Alternate the two trees so that load from other processes hits both alike.
            warm: dict[str, list[tuple[float, float]]] = {key: [] for key in trees}
            for _ in range(args.repeat):
                for key, tree in trees.items():
                    warm[key].append(run(tree, argv, envs[key], tmp))
            wall, cpu = min(warm["now"])
            line = (f"{label:12} {cold:7.2f} {wall:7.2f} {cpu:6.2f}  "
                    f"{'ok  ' if wall <= TARGET else 'OVER'}")
            if args.baseline:
                b_wall, b_cpu = min(warm["before"])
                line += f"  {b_wall:8.2f} {b_cpu:6.2f}  {b_wall / wall:6.1f}x"
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
