"""Benchmark: every command at corpus sizes up to GBs: wall time, peak RSS, s/GB, x floor.

Issue 11's targets are about scale: peak memory bounded by the largest session, not
by the log (<= 1 GB at every size), and time linear in the log (seconds per GB at
2 GB within 1.3x of 0.25 GB). This script generates the corpora with
`gen_corpus.py` (raw Anthropic captures built from the real material in
../shared/data/real/; the same session shape at every size, more sessions in a
bigger log), then runs each command as its own process (``prefixscope ingest``, then
``diff --all``, ``bucket``, ``segments``, ``simulate`` on the store it wrote) and
reads the peak RSS of each from ``wait4`` (``ru_maxrss`` of the child). The floor
is reading the same file line by line with ``orjson.loads`` (what any ingest must
do at least), in its own process too.

Nothing here asserts a time: it prints a table. Run:
``python bench/bench_scale.py --sizes 0.25,0.5`` (corpora go to --dir, default a
temporary directory; kept with --keep).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
COMMANDS: tuple[tuple[str, ...], ...] = (
    ("ingest",), ("diff", "--all"), ("bucket",), ("segments",), ("simulate",), ("report",))

FLOOR = """
import sys, orjson
n = 0
with open(sys.argv[1], 'rb') as fh:
    for line in fh:
        if line.strip():
            orjson.loads(line)
            n += 1
print(n)
"""


def timed(argv: list[str]) -> tuple[float, int, int]:
    """(wall seconds, peak RSS in bytes, exit status) of one child process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if proc.stderr is not None:
        err = proc.stderr.read().decode(errors="replace").strip()
        proc.stderr.close()
        if status and err:
            print(f"  {' '.join(argv[2:4])}: {err.splitlines()[-1]}", file=sys.stderr)
    return wall, usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status)


def run(sizes: list[float], work: Path, form: str) -> list[tuple[float, str, float, int, int]]:
    """(size GB, command, seconds, peak RSS, file bytes) for each size and command."""
    rows = []
    py = sys.executable
    for size in sizes:
        log = work / f"{form}-{size}.jsonl"
        if not log.exists():
            subprocess.run([py, str(HERE / "gen_corpus.py"), "--size", str(size), "--form", form,
                            "--out", str(log)], check=True)
        nbytes = log.stat().st_size
        store = work / f"{form}-{size}.duckdb"
        for stale in (store, store.with_name(store.name + ".wal")):
            stale.unlink(missing_ok=True)
        wall, rss, code = timed([py, "-c", FLOOR, str(log)])
        rows.append((size, "floor (orjson)", wall, rss, nbytes))
        for command in COMMANDS:
            target = [str(log)] if command[0] == "ingest" else []
            wall, rss, code = timed([py, "-m", "prefixscope", *command, *target,
                                     "--store", str(store), "-qq"])
            name = " ".join(command) + ("" if code == 0 else f" (exit {code})")
            rows.append((size, name, wall, rss, nbytes))
            print(f"  {size} GB {name}: {wall:.1f} s, {rss / 2**20:.0f} MB", file=sys.stderr,
                  flush=True)
    return rows


def table(rows: list[tuple[float, str, float, int, int]]) -> str:
    floor = {size: wall for size, name, wall, _, _ in rows if name.startswith("floor")}
    out = ["| size | file | command | wall s | peak RSS MB | s per GB | x floor |",
           "|---:|---:|---|---:|---:|---:|---:|"]
    for size, name, wall, rss, nbytes in rows:
        gb = nbytes / 2**30
        out.append(f"| {size} | {gb:.2f} GiB | {name} | {wall:.1f} | {rss / 2**20:.0f} | "
                   f"{wall / gb:.1f} | {wall / floor[size]:.1f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="0.25,0.5", help="corpus sizes in GB, comma-separated")
    ap.add_argument("--form", choices=("raw", "langfuse"), default="raw")
    ap.add_argument("--dir", type=Path, default=None, help="where corpora and stores go")
    ap.add_argument("--keep", action="store_true", help="keep the corpora and stores")
    args = ap.parse_args(argv)
    sizes = [float(s) for s in args.sizes.split(",") if s]
    work = args.dir or Path(tempfile.mkdtemp(prefix="prefixscope-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        rows = run(sizes, work, args.form)
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"machine: {os.cpu_count()} cores; corpus form: {args.form}")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
