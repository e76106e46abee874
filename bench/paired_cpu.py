"""Paired CPU seconds of one command from two source trees, run alternately in the same
minutes: the way to see a change of a tenth of a second on a shared machine, where one
run each moves by 25% with the load (docs/scale.md, issue 37).

Each run is ``python -P -m prefixscope.cli.main ARGV`` with ``PYTHONPATH=TREE``, from
this checkout's directory, its user + sys CPU (with any worker processes) read from
``getrusage``; the order alternates (before, after, after, before, ...) so that a drift
in the load falls on both. One untimed run of each tree first (bytecode, the tokenizer
cache). Both trees share one tokenizer cache directory. Nothing asserts time.

Run: ``python bench/paired_cpu.py --before /tmp/wt-old [--after .] [--runs 6] -- report
sample_logs/ --json``. Prints every run, then each tree's median and the change.
``--fresh FILE`` deletes FILE (and its ``.wal``) before every run: an ``ingest --store
FILE`` then writes a new store each time instead of finding every call already there.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cpu(tree: Path, argv: list[str], env: dict[str, str], fresh: list[Path]) -> float:
    """User + sys CPU seconds of one `prefixscope ARGV` run from `tree`'s sources, the
    `fresh` files deleted first."""
    for path in fresh:
        for gone in (path, path.with_name(path.name + ".wal")):
            gone.unlink(missing_ok=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-P", "-m", "prefixscope.cli.main", *argv],
                          env={**env, "PYTHONPATH": str(tree.resolve())}, cwd=ROOT,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 2):
        sys.stderr.write(done.stderr.decode(errors="replace")[-2000:])
        raise SystemExit(f"{tree}: prefixscope {' '.join(argv)} failed: {done.returncode}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, default=ROOT)
    parser.add_argument("--runs", type=int, default=6, help="timed runs of each tree")
    parser.add_argument("--fresh", type=Path, action="append", default=[],
                        help="a file to delete before every run (an ingest's --store)")
    parser.add_argument("argv", nargs="+", help="the prefixscope command line")
    args = parser.parse_args()
    trees = {"before": args.before, "after": args.after}
    times: dict[str, list[float]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "PREFIXSCOPE_CACHE_DIR": cache}
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: bytecode is kept
        for tree in trees.values():
            cpu(tree, args.argv, env, args.fresh)  # untimed
        for i in range(args.runs):
            order = ("before", "after") if i % 2 == 0 else ("after", "before")
            for name in order:
                times[name].append(cpu(trees[name], args.argv, env, args.fresh))
            print(f"pair {i + 1}: before {times['before'][-1]:.2f} s, after "
                  f"{times['after'][-1]:.2f} s (load {os.getloadavg()[0]:.1f})", flush=True)
    old, new = statistics.median(times["before"]), statistics.median(times["after"])
    print(f"median CPU: before {old:.2f} s, after {new:.2f} s ({(new - old) / old:+.1%}); "
          f"before {' / '.join(f'{t:.2f}' for t in times['before'])}, after "
          f"{' / '.join(f'{t:.2f}' for t in times['after'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
