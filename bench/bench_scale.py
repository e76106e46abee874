"""Benchmark: every command at corpus sizes up to GBs: wall time, peak RSS, s/GB, x floor.

Issue 11's targets are about scale: peak memory bounded by the largest session, not
by the log (<= 1 GB at every size), and time linear in the log (seconds per GB at
2 GB within 1.3x of 0.25 GB). Issue 37 asks the same of every shape users have. This
script generates the corpora with `gen_corpus.py` from the real material in
../shared/data/real/ (the same session shape at every size, more sessions in a bigger
log), in each shape given to ``--forms``:

* ``raw``: raw Anthropic Messages captures; ``openai``: the same traffic as OpenAI Chat raw
  captures of a converting gateway's upstream (the gateway-converted shape); ``langfuse``:
  a Langfuse batch export; each one file;
* ``claude-code``: a ~/.claude/projects folder of session transcripts (usage per call, no
  request bodies); ``codex``: a ~/.codex/sessions folder of rollouts (usage, the history to
  rebuild bodies from). An agent writes each message once where a capture resends the
  history every call, so a GB of these holds 13 to 18 times the calls (at these sessions: 40k
  and 58k calls a GiB against 3.1k).

A size is the log's bytes as the user has it (the folder's, for the agent logs). Each
command runs as its own process (``prefixscope ingest``, then ``diff --all``, ``bucket``,
``segments``, ``simulate``, ``report`` on the store it wrote) and the peak RSS of each is
read from ``wait4`` (``ru_maxrss`` of the child) or the sampled memory of its process
tree. The floor is reading the same file(s) line by line with ``orjson.loads`` (what any
ingest must do at least), in its own process too.

Baselines in the same run, on the same files:

* **naive** (``naive_diff.py``): transformers' ``apply_chat_template`` + a whole-prompt
  encode per request and a Python loop against the session's previous request, timed on
  ``--naive`` requests spread over the log and extrapolated to the file by bytes (said so in the
  table). The naive `report` is that render three times (the log as it is and the two
  what-ifs report prices), the loop once, and 13 plain replays (vLLM's sha256 block chain
  against a set: predicted + ideal, a 7-point capacity curve, two what-ifs x 2), the
  replays the report runs on these logs. Not for a log without request bodies.
* **peers** (``--peers``; ``pip install llmtrafficlens==0.13.4 promptcachelint==0.1.0
  prefixcash==0.2.1``): llmtrafficlens ``profile``,
  promptcachelint ``report``, prefixcash ``report`` and ``diagnose``, each on the same
  traffic converted to its own format by ``peer_feeds.py`` (its own process, timed: the
  "conversion" column beside the peer's row). A shape a peer cannot read after any
  conversion (a Claude Code transcript holds no request body) is a "cannot read" row; a
  converted input past ``--peer-max-gb`` is not run (an agent log as requests is many
  times its size), and the row says so.

Nothing here asserts a time: it prints a table. Run:
``python bench/bench_scale.py --sizes 0.25,0.5`` (corpora go to --dir, default a
temporary directory; kept with --keep), or every shape with the peers:
``python bench/bench_scale.py --forms raw,openai,langfuse,claude-code,codex --sizes 0.25
--commands report --naive 0 --peers``. Issue 37's long sessions, `diff --all` against the
naive way on every request and the floor: ``python bench/bench_scale.py --sessions 6
--turns 40 --commands "diff --all" --naive 240 --repeat 5`` (``--sessions``: a corpus of
that many sessions instead of ``--sizes``).
"""

from __future__ import annotations

import argparse
import importlib.util
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
sys.path.insert(0, str(HERE))
from peer_feeds import CANNOT_READ, TOO_LARGE  # noqa: E402

FORMS = ("raw", "langfuse", "openai", "claude-code", "codex")  # gen_corpus.py --form
FOLDER_FORMS = ("claude-code", "codex")  # written as the client's folder of session files
COMMANDS: tuple[tuple[str, ...], ...] = (
    ("ingest",), ("diff", "--all"), ("bucket",), ("segments",), ("simulate",), ("report",))

FLOOR = """
import sys, orjson
from pathlib import Path
path = Path(sys.argv[1])
n = 0
for name in sorted(path.rglob('*.jsonl')) if path.is_dir() else [path]:
    with open(name, 'rb') as fh:
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
    form: str = "raw"  # the corpus's shape (gen_corpus.py --form)
    convert: tuple[float, float] | None = None  # a peer's conversion: (wall, CPU) seconds
    note: str = ""  # why nothing was timed (a peer that cannot read the shape)


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
    # as installed: bytecode is kept (bench_small, paired_cpu). With PYTHONDONTWRITEBYTECODE
    # set, each command of a clean checkout compiled the package again: ~0.15 s of CPU a run
    env.pop("PYTHONDONTWRITEBYTECODE", None)
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
    label = (f"naive, all {got['requests']} requests" if got["sample_bytes"] == nbytes
             else f"naive, {got['requests']} requests extrapolated")

    def diff(kind: str) -> float:
        return (got[f"render_{kind}"] + got[f"loop_{kind}"]) * scale

    def report(kind: str) -> float:
        return (NAIVE_RENDERS * got[f"render_{kind}"] + got[f"loop_{kind}"]
                + NAIVE_REPLAYS * got[f"replay_{kind}"]) * scale

    return [Row(size, f"diff --all ({label})", diff("seconds"), 0, nbytes, diff("cpu")),
            Row(size, f"report ({label})", report("seconds"), 0, nbytes, report("cpu"))]


# Each peer's runs: (row label, the feed it reads (a peer_feeds.py writer), argv after the
# interpreter, whether it needs the request bodies); {feed} is the converted file, {out} a
# folder for the peer's output.
PEER_RUNS: dict[str, tuple[tuple[str, str, tuple[str, ...], bool], ...]] = {
    "llmtrafficlens": (("llmtrafficlens profile (gateway CSV)", "llmtrafficlens",
                        ("-m", "llmtrafficlens.cli", "profile", "{feed}", "-o", "{out}"), True),),
    "promptcachelint": (("promptcachelint report (its trace)", "promptcachelint",
                         ("-m", "promptcachelint.cli", "report", "{feed}", "--json"), True),),
    "prefixcash": (("prefixcash report (its call log, usage)", "prefixcash-usage",
                    ("-c", "from prefixcash.cli.main import cli; cli()", "report", "--file",
                     "{feed}", "--format", "json"), False),
                   ("prefixcash diagnose (its call log, messages)", "prefixcash",
                    ("-c", "from prefixcash.cli.main import cli; cli()", "diagnose", "--file",
                     "{feed}", "--json"), True)),
}
# forms whose log holds no request bodies, and what that means for a run that needs them
BODILESS = {"claude-code": "no request bodies in a Claude Code transcript"}
# A peer's converted input larger than this is not made whole nor run (--peer-max-gb):
# promptcachelint reads its trace whole into memory, llmtrafficlens keeps every request's
# block hashes, on a machine others share.
PEER_MAX_GB = 2.0
# the releases measured (llmtrafficlens is also in the test extra)
PEER_PINS = {"llmtrafficlens": "llmtrafficlens==0.13.4",
             "promptcachelint": "promptcachelint==0.1.0", "prefixcash": "prefixcash==0.2.1"}


def _installed(peer: str) -> bool:
    return importlib.util.find_spec(peer) is not None


def peer_rows(log: Path, form: str, size: float, nbytes: int, work: Path,
              max_gb: float = PEER_MAX_GB) -> list[Row]:
    """Each peer on the same traffic in its own format: the conversion (`peer_feeds.py`, its
    own process) timed, then each of the peer's runs; a row saying so where a peer cannot
    read the shape, is not installed, or its converted input passes `max_gb` (the
    conversion is then stopped there and the peer not run)."""
    rows: list[Row] = []
    for peer, runs in PEER_RUNS.items():
        for label, kind, argv, bodies in runs:
            why = CANNOT_READ.get((peer, form)) or (BODILESS.get(form) if bodies else None)
            if why:
                rows.append(Row(size, label, 0.0, 0, nbytes, form=form,
                                note=f"cannot read: {why}"))
                continue
            if not _installed(peer):
                rows.append(Row(size, label, 0.0, 0, nbytes, form=form,
                                note=f"not installed (pip install {PEER_PINS[peer]})"))
                continue
            rows.append(peer_run(log, form, size, nbytes, work, max_gb, label, kind, argv))
    return rows


def peer_run(log: Path, form: str, size: float, nbytes: int, work: Path, max_gb: float,
             label: str, kind: str, argv: tuple[str, ...]) -> Row:
    """One peer run: its feed converted (timed), then the peer on it."""
    suffix = ".csv" if kind == "llmtrafficlens" else ".jsonl"
    feed = work / f"{kind}-{form}-{size}{suffix}"
    wall, _, code, cpu = timed([sys.executable, str(HERE / "peer_feeds.py"), kind, form,
                                str(log), str(feed), "--max-gb", str(max_gb)])
    print(f"  {form} {size} GB {kind} conversion: {wall:.1f} s ({cpu:.1f} s CPU)"
          + (f", stopped at {max_gb:g} GiB" if code == TOO_LARGE else ""),
          file=sys.stderr, flush=True)
    if code == TOO_LARGE:
        feed.unlink(missing_ok=True)
        return Row(size, label, 0.0, 0, nbytes, form=form, convert=(wall, cpu),
                   note=f"not run: its converted input passes {max_gb:g} GiB (each call "
                        "resends its history)")
    if code:
        return Row(size, label, 0.0, 0, nbytes, form=form,
                   note=f"conversion failed (exit {code})")
    out = work / f"{kind}-{form}-{size}-out"
    args = [a.format(feed=feed, out=out) for a in argv]
    run_wall, rss, run_code, run_cpu = timed([sys.executable, *args], cwd=work)
    feed.unlink(missing_ok=True)
    name = label + ("" if run_code == 0 else f" (exit {run_code})")
    print(f"  {form} {size} GB {name}: {run_wall:.1f} s ({run_cpu:.1f} s CPU), "
          f"{rss / 2**20:.0f} MB", file=sys.stderr, flush=True)
    return Row(size, name, run_wall, rss, nbytes, run_cpu, form, (wall, cpu))


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


def corpus(work: Path, form: str, size: float, shape: tuple[int, int] | None = None
           ) -> tuple[Path, int]:
    """The `form` corpus of `size` GB under `work` (generated when missing) and its bytes;
    `shape` (sessions, turns): that many sessions of that many turns instead of a size."""
    name = f"{form}-{shape[0]}x{shape[1]}" if shape else f"{form}-{size}"
    log = work / (name if form in FOLDER_FORMS else f"{name}.jsonl")
    if not log.exists():
        how = (["--sessions", str(shape[0]), "--turns", str(shape[1])] if shape
               else ["--size", str(size)])
        subprocess.run([sys.executable, str(HERE / "gen_corpus.py"), *how,
                        "--form", form, "--out", str(log)], check=True)
    files = sorted(log.rglob("*.jsonl")) if log.is_dir() else [log]
    return log, sum(f.stat().st_size for f in files)


def run(sizes: list[float], work: Path, form: str | tuple[str, ...], naive: int = 0,
        peers: bool = False, commands: tuple[tuple[str, ...], ...] = COMMANDS,
        workers: tuple[int, ...] = (), fit: bool = False, fit_timeout: float | None = None,
        repeat: int = 1, peer_max_gb: float = PEER_MAX_GB,
        shape: tuple[int, int] | None = None) -> list[Row]:
    """(size GB, command, seconds, peak RSS, file bytes) for each form, size and command;
    `repeat`: each command but ingest runs that many times, its row the median run (the
    peak memory the largest), and the floor is the fastest of as many reads (at least
    two): on a machine whose speed drifts, one run says little. `shape` (sessions,
    turns): one corpus of that many sessions per form instead of `sizes`."""
    rows: list[Row] = []
    for one in (form,) if isinstance(form, str) else form:
        for size in [0.0] if shape else sizes:
            rows += form_rows(one, size, work, naive, peers, commands, workers, fit,
                              fit_timeout, repeat, peer_max_gb, shape)
    return rows


def form_rows(form: str, size: float, work: Path, naive: int, peers: bool,
              commands: tuple[tuple[str, ...], ...], workers: tuple[int, ...], fit: bool,
              fit_timeout: float | None, repeat: int, peer_max_gb: float = PEER_MAX_GB,
              shape: tuple[int, int] | None = None) -> list[Row]:
    """The rows of one corpus: the floor, each command, the fit, the naive way, the peers.
    With `shape` the corpus is that many (sessions, turns) and its size is what it holds."""
    rows: list[Row] = []
    py = sys.executable
    log, nbytes = corpus(work, form, size, shape)
    if shape:
        size = round(nbytes / 2**30, 3)
    store = work / f"{log.name.removesuffix('.jsonl')}.duckdb"
    for stale in (store, store.with_name(store.name + ".wal")):
        stale.unlink(missing_ok=True)
    # the floor is parsing, not the disk: the faster of two reads (the first one
    # brings a file the page cache no longer holds back into it)
    wall, rss, code, cpu = min(timed([py, "-c", FLOOR, str(log)])
                               for _ in range(max(2, repeat)))
    rows.append(Row(size, "floor (orjson)", wall, rss, nbytes, cpu, form))
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
                print(f"  {form} {size} GB {' '.join(command)}: runs "
                      f"{', '.join(f'{r[0]:.1f}' for r in runs)} s", file=sys.stderr)
            name = " ".join(command) + ("" if code == 0 else f" (exit {code})")
            rows.append(Row(size, name, wall, rss, nbytes, cpu, form))
            print(f"  {form} {size} GB {name}: {wall:.1f} s ({cpu:.1f} s CPU), "
                  f"{rss / 2**20:.0f} MB; load {os.getloadavg()[0]:.1f}",
                  file=sys.stderr, flush=True)
    if fit:
        rows.extend(r._replace(form=form) for r in fit_rows(store, size, nbytes, fit_timeout))
    if naive and form in BODILESS:
        print(f"  {form}: no naive rows (the log holds no request bodies)", file=sys.stderr)
    elif naive:
        rows.extend(r._replace(form=form) for r in naive_rows(log, size, nbytes, naive))
    if peers:
        rows.extend(peer_rows(log, form, size, nbytes, work, peer_max_gb))
    return rows


def ratios(rows: list[Row]) -> str:
    """prefixscope against the naive way, each peer and the floor, per form and size
    (prefixscope's fastest run of a command when it ran with several --workers values);
    against a peer, wall over wall and CPU over CPU, and over the peer with its conversion."""
    out = ["| form | size | comparison | ratio |", "|---|---:|---|---:|"]

    def ours(of: list[Row], command: str) -> Row | None:
        runs = [r for r in of if r.name == command or r.name.startswith(f"{command} --workers")]
        return min(runs, key=lambda r: r.wall) if runs else None

    def other(of: list[Row], prefix: str) -> Row | None:
        return next((r for r in of if r.name.startswith(prefix) and not r.note), None)

    forms = list(dict.fromkeys(r.form for r in rows))
    for form in forms:
        for size in sorted({r.size for r in rows if r.form == form}):
            of = [r for r in rows if r.form == form and r.size == size]
            at = f"| {form} | {size} |"
            for command in ("diff --all", "report"):
                naive, mine = other(of, f"{command} (naive"), ours(of, command)
                if naive and mine:
                    cpu = (f" (CPU {naive.cpu / mine.cpu:.1f}x)" if naive.cpu and mine.cpu
                           else "")
                    out.append(f"{at} {command}: naive / prefixscope | "
                               f"{naive.wall / mine.wall:.1f}x{cpu} |")
            mine = ours(of, "report")
            for peer in (r for r in of if r.convert is not None and not r.note):
                if mine is None or not peer.wall:
                    continue
                conv_wall, conv_cpu = peer.convert or (0.0, 0.0)
                cpu = (f", CPU {mine.cpu / peer.cpu:.2f}x ({mine.cpu / (peer.cpu + conv_cpu):.2f}x"
                       " with its conversion)" if mine.cpu and peer.cpu else "")
                out.append(f"{at} report / {peer.name} | wall {mine.wall / peer.wall:.2f}x "
                           f"({mine.wall / (peer.wall + conv_wall):.2f}x with its conversion)"
                           f"{cpu} |")
            for peer in (r for r in of if r.note):
                out.append(f"{at} report / {peer.name} | {peer.note} |")
            floor = other(of, "floor")
            if mine and floor:
                out.append(f"{at} report / floor (orjson) | {mine.wall / floor.wall:.1f}x |")
            diff = ours(of, "diff --all")
            if diff and floor:
                cpu = (f" (CPU {diff.cpu / floor.cpu:.1f}x)" if diff.cpu and floor.cpu
                       else "")
                out.append(f"{at} diff --all / floor (orjson) | "
                           f"{diff.wall / floor.wall:.1f}x{cpu} |")
            sweep, replays = other(of, "fit: one sweep"), other(of, "fit: a replay per")
            if sweep and replays:
                stopped = "stopped after" in replays.name
                out.append(f"{at} fit: replay per candidate / one sweep | "
                           f"{'> ' if stopped else ''}{replays.wall / sweep.wall:.1f}x |")
    return "\n".join(out)


def table(rows: list[Row]) -> str:
    floor = {(r.form, r.size): r.wall for r in rows if r.name.startswith("floor")}
    out = ["| form | size | file | command | wall s | CPU s | peak RSS MB | s per GB | x floor "
           "| conversion s (CPU) |",
           "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        gb = r.nbytes / 2**30
        head = f"| {r.form} | {r.size} | {gb:.2f} GiB | {r.name} |"
        conv = f"{r.convert[0]:.1f} ({r.convert[1]:.1f})" if r.convert else "-"
        if r.note:
            out.append(f"{head} {r.note} | - | - | - | - | {conv} |")
            continue
        memory = f"{r.rss / 2**20:.0f}" if r.rss else "-"
        cpu = f"{r.cpu:.1f}" if r.cpu else "-"
        out.append(f"{head} {r.wall:.1f} | {cpu} | {memory} | {r.wall / gb:.1f} | "
                   f"{r.wall / floor[r.form, r.size]:.1f} | {conv} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="0.25,0.5", help="corpus sizes in GB, comma-separated")
    ap.add_argument("--forms", default=None, metavar="F,G",
                    help=f"corpus shapes, comma-separated, each run in turn: {', '.join(FORMS)}")
    ap.add_argument("--form", choices=FORMS, default="raw", help="one shape (--forms wins)")
    ap.add_argument("--dir", type=Path, default=None, help="where corpora and stores go")
    ap.add_argument("--keep", action="store_true", help="keep the corpora and stores")
    ap.add_argument("--naive", type=int, default=40, metavar="N",
                    help="time the naive way on N requests spread over the log (0: not at all)")
    ap.add_argument("--commands", default=",".join(" ".join(c) for c in COMMANDS),
                    help="which commands, comma-separated (ingest always runs first)")
    ap.add_argument("--peers", action="store_true",
                    help="also time the peers (llmtrafficlens, promptcachelint, prefixcash) on "
                         "the same traffic, each after its conversion to the peer's format")
    ap.add_argument("--peer-max-gb", type=float, default=PEER_MAX_GB, metavar="G",
                    help="a peer whose converted input passes G GiB is not run (its row says "
                         "so; the conversion is timed up to there)")
    ap.add_argument("--workers", default="", metavar="N,M",
                    help="run diff --all, segments, simulate and report once per --workers value "
                         "(e.g. 1,2; default: each once, with the command's default)")
    ap.add_argument("--fit", action="store_true",
                    help="also time report's capacity fit alone: one sweep against a replay per "
                         "candidate (the fit before the sweep; minutes per GB)")
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="run each command but ingest N times: its row is the median run, "
                         "the floor the fastest of N reads")
    ap.add_argument("--sessions", type=int, default=None, metavar="N",
                    help="a corpus of N sessions (of --turns turns) instead of --sizes: "
                         "issue 37's long sessions are --sessions 6 --turns 40")
    ap.add_argument("--turns", type=int, default=50, metavar="T",
                    help="turns per session with --sessions (gen_corpus.py's default: 50)")
    ap.add_argument("--fit-timeout", type=float, default=None, metavar="S",
                    help="stop the replay-per-candidate fit after S seconds (its row is then a "
                         "lower bound)")
    args = ap.parse_args(argv)
    start_load = os.getloadavg()[0]
    sizes = [float(s) for s in args.sizes.split(",") if s]
    work = args.dir or Path(tempfile.mkdtemp(prefix="prefixscope-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        wanted = {c.strip() for c in args.commands.split(",")} | {"ingest"}
        commands = tuple(c for c in COMMANDS if " ".join(c) in wanted)
        workers = tuple(int(n) for n in args.workers.split(",") if n)
        forms = tuple(f.strip() for f in (args.forms or args.form).split(",") if f.strip())
        unknown = [f for f in forms if f not in FORMS]
        if unknown:
            ap.error(f"unknown form(s) {', '.join(unknown)}; forms: {', '.join(FORMS)}")
        shape = (args.sessions, args.turns) if args.sessions else None
        rows = run(sizes, work, forms, args.naive, args.peers, commands, workers, args.fit,
                   args.fit_timeout, max(1, args.repeat), args.peer_max_gb, shape)
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"machine: {os.cpu_count()} cores; corpus forms: {', '.join(forms)}"
          + (f" ({args.sessions} sessions x {args.turns} turns)" if args.sessions else "")
          + f"; load average "
          f"at the start {start_load:.1f}, at the end {os.getloadavg()[0]:.1f}"
          + (f"; each command but ingest: the median of {args.repeat} runs"
             if args.repeat > 1 else ""))
    print(table(rows))
    print()
    print(ratios(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
