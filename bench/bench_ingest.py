"""Benchmark: `prefixscope ingest` against the I/O floor and a naive row-at-a-time store.

Ingest must keep up with the logs people have (the Mooncake traces alone are 16k
requests; a gateway's SQLite log holds millions of rows). This script times, on the
real data in tests/data/real/:

* floor  -- reading every file and parsing each JSON line / document with orjson
  (what any ingest must at least do);
* ingest -- `prefixscope.ingest.ingest_paths` into a fresh DuckDB store (detection,
  normalization, stable ids, batched Arrow inserts, session threading);
* naive  -- the same parsed requests inserted one row at a time with
  ``INSERT ... VALUES`` (how a first script would do it), without threading.

and prints the times, ingest/floor (the overhead we pay over raw parsing) and
naive/ingest (what batching buys). Run: ``python bench/bench_ingest.py``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT.parent / "shared" / "data" / "real"


def floor(paths: list[Path]) -> tuple[float, int]:
    start = time.perf_counter()
    records = 0
    for path in paths:
        data = path.read_bytes()
        try:
            doc = orjson.loads(data)
            records += len(doc) if isinstance(doc, list) else 1
        except orjson.JSONDecodeError:
            for line in data.splitlines():
                if line.strip():
                    try:
                        orjson.loads(line)
                        records += 1
                    except orjson.JSONDecodeError:
                        pass
    return time.perf_counter() - start, records


def ingest(paths: list[Path], tmp: Path) -> tuple[float, int]:
    from prefixscope.store import Store
    from prefixscope.store.load import ingest_paths

    start = time.perf_counter()
    with Store.open(tmp / "bench.duckdb") as store:
        result = ingest_paths([str(p) for p in paths], store)
    return time.perf_counter() - start, result.ingested


def naive(paths: list[Path], tmp: Path) -> tuple[float, int]:
    import duckdb

    from prefixscope.ingest import read_requests

    requests = []
    for path in paths:
        try:
            requests.extend(read_requests(path)[0])
        except ValueError:  # not a log (JSON Schema files)
            continue
    start = time.perf_counter()
    con = duckdb.connect(str(tmp / "naive.duckdb"))
    con.execute("CREATE TABLE requests (id VARCHAR PRIMARY KEY, source_format VARCHAR, "
                "timestamp TIMESTAMP, prompt_tokens BIGINT, cached_tokens BIGINT, "
                "body VARCHAR)")
    for r in requests:
        con.execute("INSERT OR IGNORE INTO requests VALUES (?, ?, ?, ?, ?, ?)",
                    [r.id, r.source_format, r.timestamp, r.usage.prompt_tokens,
                     r.usage.cached_tokens,
                     orjson.dumps(r.body).decode() if r.body is not None else None])
    con.close()
    return time.perf_counter() - start, len(requests)


def main() -> int:
    if not REAL.is_dir():
        print(f"real data not found at {REAL}", file=sys.stderr)
        return 1
    paths = sorted(p for p in REAL.rglob("*") if p.is_file() and p.suffix in
                   (".jsonl", ".json", ".traj"))
    size = sum(p.stat().st_size for p in paths)
    with tempfile.TemporaryDirectory() as tmp:
        t_floor, records = floor(paths)
        t_ingest, stored = ingest(paths, Path(tmp))
        t_naive, naive_rows = naive(paths, Path(tmp))
    print(f"real data: {len(paths)} files, {size / 1e6:.1f} MB, {records:,} JSON records, "
          f"{stored:,} requests stored")
    print(f"floor  (orjson parse)        {t_floor:8.2f} s")
    print(f"ingest (prefixscope)         {t_ingest:8.2f} s   {stored / t_ingest:,.0f} req/s")
    print(f"naive  (row-at-a-time insert) {t_naive:7.2f} s   (insert only, {naive_rows:,} rows)")
    print(f"ingest / floor = {t_ingest / t_floor:.1f}x   naive insert / ingest = "
          f"{t_naive / t_ingest:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
