"""Check that a change left the answers as they were: `prefixscope report --json` (and
`calls --json`) of two source trees, byte for byte, on sample_logs/, every folder of
tests/data/real and any log given with ``--log`` (issue 37: "no answer changes").

Each tree runs as ``python -P`` with ``PYTHONPATH=TREE`` from this checkout's directory
(the same relative paths in both answers, and neither tree shadowed by the current
directory), one command after another (the machine is shared). Both trees share one
tokenizer cache directory, which changes the time only.

Run: ``python bench/same_answers.py --before /tmp/wt-old [--after .] [--log FILE ...]``
(``--before``: e.g. a worktree of the commit before the change, ``git worktree add``);
``--command "diff --all --json"`` (repeatable) compares that command instead (its first
word, the input, then the rest).
Prints one line per input and command, ``same`` or ``DIFFERENT`` (exit 1 if any is).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = (("report", "--json"), ("calls", "--json"))


def inputs(extra: list[Path]) -> list[str]:
    """sample_logs/, each folder of tests/data/real, then the logs given."""
    real = ROOT / "tests" / "data" / "real"
    folders = sorted(str(p.relative_to(ROOT)) + "/" for p in real.iterdir() if p.is_dir())
    return ["sample_logs/", *folders, *(str(p) for p in extra)]


def answer(tree: Path, argv: list[str], env: dict[str, str]) -> tuple[int, bytes, bytes]:
    """(exit code, stdout, stderr) of `prefixscope ARGV` run from `tree`'s sources."""
    done = subprocess.run([sys.executable, "-P", "-m", "prefixscope.cli.main", *argv],
                          env={**env, "PYTHONPATH": str(tree.resolve())}, cwd=ROOT,
                          capture_output=True)
    return done.returncode, done.stdout, done.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the tree before")
    parser.add_argument("--after", type=Path, default=ROOT, help="the tree after (this one)")
    parser.add_argument("--log", type=Path, action="append", default=[],
                        help="another log or folder to compare on (repeatable)")
    parser.add_argument("--command", action="append", default=[], metavar="CMD",
                        help="compare `prefixscope CMD` instead of report and calls --json "
                             "(repeatable; the input goes after its first word)")
    args = parser.parse_args()
    commands = [tuple(c.split()) for c in args.command] or list(COMMANDS)
    different = 0
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "PREFIXSCOPE_CACHE_DIR": cache}
        for path in inputs(args.log):
            for command in commands:
                argv = [command[0], path, *command[1:]]
                before = answer(args.before, argv, env)
                after = answer(args.after, argv, env)
                same = before[:2] == after[:2]
                different += not same
                print(f"{'same' if same else 'DIFFERENT':9} {' '.join(argv)} (exit "
                      f"{before[0]}, {len(before[1]):,} bytes)", flush=True)
                if not same:
                    sys.stderr.write(f"  before stderr: {before[2].decode()[-500:]}\n"
                                     f"  after stderr: {after[2].decode()[-500:]}\n")
    return 1 if different else 0


if __name__ == "__main__":
    raise SystemExit(main())
