"""Run every benchmark in bench/ and print their ratios (not a test: nothing asserts time).

``python bench/run.py [--quick] [--sizes 0.25,0.5]``: --sizes are the scale bench's
corpus sizes in GB (bench_scale.py; --quick leaves it out).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    argv = sys.argv[1:]
    quick = "--quick" in argv
    # --sizes 0.25,0.5: the scale bench's corpus sizes in GB (default 0.25; --quick skips it)
    sizes = argv[argv.index("--sizes") + 1] if "--sizes" in argv[:-1] else "0.25"
    status = 0
    scripts: list[tuple[str, list[str]]] = [
        ("bench_ingest.py", []),
        ("bench_tokenize.py", ["--quick"] if quick else []),
        ("bench_engines.py", []),
        ("bench_startup.py", ["--repeat", "1"] if quick else [])]
    if not quick:
        scripts.append(("bench_scale.py", ["--sizes", sizes]))
    for script, args in scripts:
        print(f"== {script} {' '.join(args)}", flush=True)
        status |= subprocess.call([sys.executable, str(HERE / script), *args])
    return status


if __name__ == "__main__":
    sys.exit(main())
