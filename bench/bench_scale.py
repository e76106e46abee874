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

Baselines in the same run, on the same files:

* **naive** (``naive_diff.py``): transformers' ``apply_chat_template`` + a whole-prompt
  encode per request and a Python loop against the session's previous request, timed on
  ``--naive`` requests spread over the log and extrapolated to the file by bytes (said so in the
  table). The naive `report` is that render three times (the log as it is and the two
  what-ifs report prices), the loop once, and 13 plain replays (vLLM's sha256 block chain
  against a set: predicted + ideal, a 7-point capacity curve, two what-ifs x 2), the
  replays the report runs on these logs.
* **peer**: ``llmtrafficlens profile`` (prefix reuse, hit-rate ceiling and curve) on the
  same traffic written as its gateway CSV (``request_json`` per row; the conversion is
  not timed), when installed (``pip install llmtrafficlens``).

Nothing here asserts a time: it prints a table. Run:
``python bench/bench_scale.py --sizes 0.25,0.5`` (corpora go to --dir, default a
temporary directory; kept with --keep).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

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

# The capacity fit `report` runs (block size known): one sweep of every capacity (the
# chosen one's hits read off it too), against a replay per candidate capacity and a
# confirming replay (the fit before the sweep);
# prints the seconds of the fit alone (not the render before it) and the fit found.
FIT = """
import json, sys, time
from prefixscope.analyses.simulate import SimulateOptions, fit_parameters, prepare
from prefixscope.store import Store
options = SimulateOptions(engine="vllm", unit=16)
prepared, _ = prepare(Store.open(sys.argv[1], read_only=True), options)
start, cpu = time.perf_counter(), time.process_time()
fit = fit_parameters(prepared, options, (16,), sweep=sys.argv[2] == "sweep")
print(json.dumps({"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu,
                  "fit": None if fit is None else [fit.unit, fit.capacity_tokens, fit.agreement]}))
"""


def _tree_rss(pid: int) -> int:
    """Memory of `pid` and its descendants now: the sum of their proportional set sizes
    (``Pss`` of /proc/PID/smaps_rollup: a page shared by forked workers counts once in
    the total, where summing their RSS would count it in each); 0 where unreadable."""
    total = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as fh:
                total += next(int(line.split()[1]) * 1024 for line in fh
                              if line.startswith("Pss:"))
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo += [int(c) for c in fh.read().split()]
        except (OSError, ValueError):
            continue
    return total


class Row(NamedTuple):
    size: float  # the corpus size asked for, GB
    name: str  # what ran
    wall: float  # seconds
    rss: int  # peak resident bytes (0: not measured)
    nbytes: int  # the log's size
    cpu: float = 0.0  # user + sys seconds of the process and its workers (0: not measured)


# How often the memory of the process tree is read (a thread reads it while the wait for
# the child ends the wall time).
SAMPLE_SECONDS = 0.1


def timed(argv: list[str], cwd: Path | None = None) -> tuple[float, int, int, float]:
    """(wall seconds, peak memory in bytes, exit status, CPU seconds) of one child process:
    its own peak RSS (``ru_maxrss``) or, when larger, the peak of its and its worker
    processes' summed proportional set sizes, sampled every `SAMPLE_SECONDS` by a thread
    while this one waits for the child; CPU is user + sys of it and the children it waited
    for (its workers)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                            cwd=cwd)
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(SAMPLE_SECONDS):
            peak[0] = max(peak[0], _tree_rss(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)  # the wall time ends when the child does
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    if proc.stderr is not None:
        err = proc.stderr.read().decode(errors="replace").strip()
        proc.stderr.close()
        if status and err:
            print(f"  {' '.join(argv[2:4])}: {err.splitlines()[-1]}", file=sys.stderr)
    return (wall, max(usage.ru_maxrss * 1024, peak[0]), os.waitstatus_to_exitcode(status),
            usage.ru_utime + usage.ru_stime)


NAIVE_RENDERS, NAIVE_REPLAYS = 3, 13  # the naive report's work; see the docstring


def naive_rows(log: Path, size: float, nbytes: int, requests: int) -> list[Row]:
    """The naive diff --all and report, timed on the first `requests` and extrapolated."""
    done = subprocess.run([sys.executable, str(HERE / "naive_diff.py"), str(log),
                           "--requests", str(requests)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode:
        print(f"  naive: {done.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return []
    got = json.loads(done.stdout)
    scale = nbytes / got["sample_bytes"]
    label = f"naive, {got['requests']} requests extrapolated"
    diff = (got["render_seconds"] + got["loop_seconds"]) * scale
    report = (NAIVE_RENDERS * got["render_seconds"] + got["loop_seconds"]
              + NAIVE_REPLAYS * got["replay_seconds"]) * scale
    return [Row(size, f"diff --all ({label})", diff, 0, nbytes),
            Row(size, f"report ({label})", report, 0, nbytes)]


def gateway_csv(log: Path, target: Path) -> None:
    """The raw captures of `log` as llmtrafficlens' gateway CSV (one row per request)."""
    csv.field_size_limit(sys.maxsize)
    with log.open("rb") as src, target.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(["timestamp", "request_json", "response_json"])
        for line in src:
            if line.strip():
                record = json.loads(line)
                writer.writerow([record.get("timestamp", ""),
                                 json.dumps(record.get("request"), ensure_ascii=False),
                                 json.dumps(record.get("response"), ensure_ascii=False)])


def peer_rows(log: Path, size: float, nbytes: int, work: Path) -> list[Row]:
    """llmtrafficlens profile on the same traffic as its gateway CSV, when installed."""
    try:
        import llmtrafficlens  # noqa: F401
    except ImportError:
        print("  llmtrafficlens not installed: no peer row", file=sys.stderr)
        return []
    table = work / f"{log.stem}.csv"
    if not table.exists():
        gateway_csv(log, table)
    wall, rss, code, cpu = timed([sys.executable, "-m", "llmtrafficlens.cli", "profile",
                                  str(table), "-o", str(work / f"ltl-{size}")], cwd=work)
    name = "llmtrafficlens profile (gateway CSV)" + ("" if code == 0 else f" (exit {code})")
    return [Row(size, name, wall, rss, nbytes, cpu)]


PARALLEL = {"diff", "segments", "simulate", "report"}  # the commands with --workers


def fit_rows(store: Path, size: float, nbytes: int, timeout: float | None = None
             ) -> list[Row]:
    """The capacity fit alone: one sweep per unit (now) against a replay per candidate
    capacity (before), each in its own process on the same store. `timeout`: the replay
    per candidate is stopped after that many seconds (it takes tens of minutes per GB),
    its row then a lower bound ("stopped after")."""
    rows = []
    found = {}
    for how, label in (("sweep", "fit: one sweep"),
                       ("replays", "fit: a replay per candidate (before the sweep)")):
        try:
            done = subprocess.run([sys.executable, "-c", FIT, str(store), how],
                                  capture_output=True, text=True,
                                  env={**os.environ, "PYTHONPATH": str(ROOT)},
                                  timeout=timeout if how == "replays" else None)
        except subprocess.TimeoutExpired:
            assert timeout is not None
            rows.append(Row(size, f"{label}, stopped after {timeout:.0f} s", timeout, 0,
                            nbytes))
            print(f"  {size} GB {label}: stopped after {timeout:.0f} s", file=sys.stderr,
                  flush=True)
            continue
        if done.returncode:
            print(f"  {label}: {done.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
            continue
        got = json.loads(done.stdout)
        found[how] = got["fit"]
        rows.append(Row(size, label, got["seconds"], 0, nbytes, got["cpu"]))
        print(f"  {size} GB {label}: {got['seconds']:.1f} s ({got['cpu']:.1f} s CPU), fit "
              f"{got['fit']}", file=sys.stderr, flush=True)
    if len(found) == 2 and found["sweep"] != found["replays"]:
        print(f"  fits differ: {found}", file=sys.stderr)
    return rows


def run(sizes: list[float], work: Path, form: str, naive: int = 0, peers: bool = False,
        commands: tuple[tuple[str, ...], ...] = COMMANDS, workers: tuple[int, ...] = (),
        fit: bool = False, fit_timeout: float | None = None, repeat: int = 1) -> list[Row]:
    """(size GB, command, seconds, peak RSS, file bytes) for each size and command;
    `repeat`: each command but ingest runs that many times, its row the median run (the
    peak memory the largest), and the floor is the fastest of as many reads (at least
    two): on a machine whose speed drifts, one run says little."""
    rows: list[Row] = []
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
        # the floor is parsing, not the disk: the faster of two reads (the first one
        # brings a file the page cache no longer holds back into it)
        wall, rss, code, cpu = min(timed([py, "-c", FLOOR, str(log)])
                                   for _ in range(max(2, repeat)))
        rows.append(Row(size, "floor (orjson)", wall, rss, nbytes, cpu))
        for base in commands:
            variants = ([(*base, "--workers", str(n)) for n in workers]
                        if workers and base[0] in PARALLEL else [base])
            for command in variants:
                target = [str(log)] if command[0] == "ingest" else []
                runs = sorted(timed([py, "-m", "prefixscope", *command, *target,
                                     "--store", str(store), "-qq"])
                              for _ in range(1 if command[0] == "ingest" else repeat))
                wall, _, code, cpu = runs[len(runs) // 2]
                rss = max(r[1] for r in runs)
                if len(runs) > 1:
                    print(f"  {size} GB {' '.join(command)}: runs "
                          f"{', '.join(f'{r[0]:.1f}' for r in runs)} s", file=sys.stderr)
                name = " ".join(command) + ("" if code == 0 else f" (exit {code})")
                rows.append(Row(size, name, wall, rss, nbytes, cpu))
                print(f"  {size} GB {name}: {wall:.1f} s ({cpu:.1f} s CPU), "
                      f"{rss / 2**20:.0f} MB; load {os.getloadavg()[0]:.1f}",
                      file=sys.stderr, flush=True)
        if fit:
            rows.extend(fit_rows(store, size, nbytes, fit_timeout))
        if naive:
            rows.extend(naive_rows(log, size, nbytes, naive))
        if peers and form == "raw":
            rows.extend(peer_rows(log, size, nbytes, work))
    return rows


def ratios(rows: list[Row]) -> str:
    """prefixscope against the naive way, the peer and the floor, per size (prefixscope's
    fastest run of a command when it ran with several --workers values)."""
    out = ["| size | comparison | ratio |", "|---:|---|---:|"]

    def ours(size: float, command: str) -> float | None:
        walls = [r.wall for r in rows if r.size == size and (
            r.name == command or r.name.startswith(f"{command} --workers"))]
        return min(walls) if walls else None

    def other(size: float, prefix: str) -> float | None:
        return next((r.wall for r in rows if r.size == size and r.name.startswith(prefix)),
                    None)

    for size in sorted({r.size for r in rows}):
        for command in ("diff --all", "report"):
            naive, mine = other(size, f"{command} (naive"), ours(size, command)
            if naive and mine:
                out.append(f"| {size} | {command}: naive / prefixscope | {naive / mine:.1f}x |")
        mine = ours(size, "report")
        peer = other(size, "llmtrafficlens")
        if mine and peer:
            out.append(f"| {size} | report / llmtrafficlens profile | {mine / peer:.2f}x |")
        floor = other(size, "floor")
        if mine and floor:
            out.append(f"| {size} | report / floor (orjson) | {mine / floor:.1f}x |")
        sweep, replays = other(size, "fit: one sweep"), other(size, "fit: a replay per")
        if sweep and replays:
            stopped = any(r.size == size and r.name.startswith("fit: a replay per")
                          and "stopped after" in r.name for r in rows)
            out.append(f"| {size} | fit: replay per candidate / one sweep | "
                       f"{'> ' if stopped else ''}{replays / sweep:.1f}x |")
    return "\n".join(out)


def table(rows: list[Row]) -> str:
    floor = {r.size: r.wall for r in rows if r.name.startswith("floor")}
    out = ["| size | file | command | wall s | CPU s | peak RSS MB | s per GB | x floor |",
           "|---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        gb = r.nbytes / 2**30
        memory = f"{r.rss / 2**20:.0f}" if r.rss else "-"
        cpu = f"{r.cpu:.1f}" if r.cpu else "-"
        out.append(f"| {r.size} | {gb:.2f} GiB | {r.name} | {r.wall:.1f} | {cpu} | {memory} | "
                   f"{r.wall / gb:.1f} | {r.wall / floor[r.size]:.1f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="0.25,0.5", help="corpus sizes in GB, comma-separated")
    ap.add_argument("--form", choices=("raw", "langfuse"), default="raw")
    ap.add_argument("--dir", type=Path, default=None, help="where corpora and stores go")
    ap.add_argument("--keep", action="store_true", help="keep the corpora and stores")
    ap.add_argument("--naive", type=int, default=40, metavar="N",
                    help="time the naive way on N requests spread over the log (0: not at all)")
    ap.add_argument("--commands", default=",".join(" ".join(c) for c in COMMANDS),
                    help="which commands, comma-separated (ingest always runs first)")
    ap.add_argument("--peers", action="store_true",
                    help="also time llmtrafficlens on the same traffic (its gateway CSV)")
    ap.add_argument("--workers", default="", metavar="N,M",
                    help="run diff --all, segments, simulate and report once per --workers value "
                         "(e.g. 1,2; default: each once, with the command's default)")
    ap.add_argument("--fit", action="store_true",
                    help="also time report's capacity fit alone: one sweep against a replay per "
                         "candidate (the fit before the sweep; minutes per GB)")
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="run each command but ingest N times: its row is the median run, "
                         "the floor the fastest of N reads")
    ap.add_argument("--fit-timeout", type=float, default=None, metavar="S",
                    help="stop the replay-per-candidate fit after S seconds (its row is then a "
                         "lower bound)")
    args = ap.parse_args(argv)
    sizes = [float(s) for s in args.sizes.split(",") if s]
    work = args.dir or Path(tempfile.mkdtemp(prefix="prefixscope-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        wanted = {c.strip() for c in args.commands.split(",")} | {"ingest"}
        commands = tuple(c for c in COMMANDS if " ".join(c) in wanted)
        workers = tuple(int(n) for n in args.workers.split(",") if n)
        rows = run(sizes, work, args.form, args.naive, args.peers, commands, workers, args.fit,
                   args.fit_timeout, max(1, args.repeat))
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"machine: {os.cpu_count()} cores; corpus form: {args.form}; load average at the "
          f"end {os.getloadavg()[0]:.1f}" + (f"; each command but ingest: the median of "
                                              f"{args.repeat} runs" if args.repeat > 1 else ""))
    print(table(rows))
    print()
    print(ratios(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
