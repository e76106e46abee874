"""Run every benchmark in bench/ and print their ratios (not a test: nothing asserts time)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    quick = "--quick" in sys.argv[1:]
    status = 0
    for script, args in (("bench_ingest.py", []),
                         ("bench_tokenize.py", ["--quick"] if quick else []),
                         ("bench_engines.py", []),
                         ("bench_startup.py", ["--repeat", "1"] if quick else [])):
        print(f"== {script} {' '.join(args)}", flush=True)
        status |= subprocess.call([sys.executable, str(HERE / script), *args])
    return status


if __name__ == "__main__":
    sys.exit(main())
