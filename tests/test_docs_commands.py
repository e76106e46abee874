"""Every command a code block in README.md or docs/ runs is run, and exits as shown.

A block's commands are its `$ prefixscope ...` lines (a transcript) or, in a ``sh`` /
``bash`` / ``console`` block, its lines that call prefixscope (also after ``&&``); a
block without a language and without ``$`` is a synopsis, not a command. The commands of
one page run in order in one fresh directory (a store one example makes, the next one
reads), where ``sample_logs/`` and ``tests/`` are the repository's. A command exits 0
unless its comment says ``exit N``.

A path that is the reader's own (``~/.claude/projects/``, ``one-api.db``, ...) runs on a
file of the same kind from the repository (`STAND_INS`); a store an example reads
without making it first is the sample logs' store. A command that needs what a test
cannot have (a Ray cluster) is listed in `NOT_RUN` with the reason. docs/cli.md is the
commands' own help (tests/test_cli_help.py checks it) and is not read here.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from typer.testing import CliRunner

from prefixscope.cli.main import app

pytestmark = pytest.mark.slow

PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md")
                                     if p.name != "cli.md")]
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```", re.M | re.S)
SHELL = ("sh", "bash", "console", "shell")
METRICS = "generated: a /metrics dump"  # made by sample_logs/make_engine_log.py

# The reader's own files, and the repository's file of the same kind each runs on.
STAND_INS = {
    "~/.claude/projects/": "tests/fixtures/claude-code",
    "~/.claude/projects/-home-me-work-repo/": "tests/data/real/claude-code-jsonl",
    "langfuse-export.jsonl": "sample_logs/langfuse-claude-code.events_full.jsonl",
    "one-api.db": "sample_logs/new-api-logs.db",
    "/tmp/one-api-copy.db": "sample_logs/new-api-logs.db",
    "logs.csv": "tests/fixtures/newapi/logs.csv",
    "vllm.log": "sample_logs/vllm-offload.log",
    "metrics.txt": METRICS,
    "logs/": "tests/data/real/engine_logs",
    "path/to/repo": "tests/data/real/aider",
    "/tmp/bifrost-logs.db": "tests/fixtures/bifrost/logs.csv",
    "conversation_trace.jsonl": "tests/fixtures/block-trace/mooncake_sample.jsonl",
    "~/.config/Code/User/globalStorage/saoudrizwan.claude-dev/tasks":
        "tests/fixtures/cline/Code/User/globalStorage/saoudrizwan.claude-dev/tasks",
    "~/.config/Code/User/globalStorage/rooveterinaryinc.roo-cline/tasks":
        "tests/fixtures/cline/Code/User/globalStorage/rooveterinaryinc.roo-cline/tasks",
    "~/.codex/sessions": "tests/fixtures/codex/handmade/sessions",
    "~/.codex/archived_sessions": "tests/fixtures/codex/ccusage/sessions",
    "~/.gemini/tmp": "tests/fixtures/gemini-cli/legacy",
    "observations.jsonl": "tests/fixtures/langfuse/batch-export.jsonl",
    "observations-page-*.json": "tests/fixtures/langfuse/v1-observations-page.json",
    "trace.json": "tests/fixtures/langfuse/trace-full-details.json",
    "./lf-observations/": "tests/fixtures/langfuse",
    "generations.jsonl": "tests/fixtures/langfuse/clickhouse-observations.jsonl",
    "spend.csv": "tests/fixtures/litellm/spend_logs.csv",
    "results/": "tests/data/real/mini-swe-agent",
    "logs/completions/": "tests/data/real/openhands-completions/llm-logs",
    "spans.jsonl": "tests/fixtures/otel/collector.jsonl",
    ".claude-trace/log-*.jsonl": "tests/fixtures/raw/claude_trace.jsonl",
    "capture.jsonl": "tests/fixtures/raw/claude_code_capture.jsonl",
    "trajectories/<user>/<run>/": "tests/data/real/swe-agent",
    "example_sessions/sanitized/round_trace.jsonl": "tests/fixtures/tracelab/rounds.jsonl",
    "recorded/": "sample_logs/bifrost-mcp-keyorder.jsonl",
    "LOGS...": "sample_logs/bifrost-mcp-keyorder.jsonl",
    "<request-id>": "ed91d1ab",  # a request of the Langfuse sample (docs/investigate.md)
    "/shared/cc": "shared-cc",
}
NOT_RUN = {"RAY_ADDRESS": "needs a Ray cluster (tests/test_distributed.py runs a local one)"}
WRITES_STORE = ("ingest",)


def page_commands(page: Path) -> list[tuple[list[str], int]]:
    """(argv after `prefixscope`, expected exit) of every command the page's blocks run."""
    out = []
    for match in FENCE.finditer(page.read_text(encoding="utf-8")):
        lang, body = match.group(1), match.group(2)
        if lang not in ("", *SHELL):
            continue
        logical: list[str] = []
        for line in body.splitlines():
            if logical and logical[-1].endswith("\\"):
                logical[-1] = logical[-1][:-1] + " " + line.strip()
            else:
                logical.append(line)
        transcript = any(line.startswith("$ ") for line in logical)
        for line in logical:
            text = line.strip()
            if transcript:
                if not text.startswith("$ "):
                    continue
                text = text[2:]
            elif lang == "":
                continue  # a synopsis
            if "prefixscope" not in text:
                continue
            comment = text.split(" #", 1)[1] if " #" in text else ""
            words = shlex.split(text, comments=True)
            exit_code = re.search(r"\bexit (\d+)", comment)
            segment: list[str] = []
            for word in [*words, "&&"]:
                if word != "&&":
                    segment.append(word)
                    continue
                program = next((n for n, w in enumerate(segment) if "=" not in w), None)
                if program is not None and segment[program].endswith("prefixscope"):
                    out.append((segment, int(exit_code[1]) if exit_code else 0))
                segment = []
    return out


def _metrics(folder: Path) -> str:
    spec = importlib.util.spec_from_file_location("make_engine_log",
                                                  ROOT / "sample_logs" / "make_engine_log.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    text, _ = module.prometheus_dump(engines=1)
    (folder / "metrics.txt").write_text(text)
    return "metrics.txt"


def _store_option(argv: list[str]) -> str | None:
    for flag in ("--store", "-s"):
        if flag in argv and argv.index(flag) + 1 < len(argv):
            return argv[argv.index(flag) + 1]
    return None


def test_every_page_has_commands_to_run() -> None:
    counted = {page.relative_to(ROOT).as_posix(): len(page_commands(page)) for page in PAGES}
    assert counted["README.md"] >= 13 and counted["docs/investigate.md"] >= 7
    assert sum(counted.values()) >= 65


# pages with nothing to run (a reference table, a design note) are not test cases
RUNNABLE = [page for page in PAGES if page_commands(page)]


@pytest.mark.parametrize("page", RUNNABLE,
                         ids=[p.relative_to(ROOT).as_posix() for p in RUNNABLE])
def test_each_documented_command_runs_and_exits_as_shown(page: Path, tmp_path: Path) -> None:
    commands = page_commands(page)
    for name in ("sample_logs", "tests"):
        (tmp_path / name).symlink_to(ROOT / name)
    runner = CliRunner()
    failures = []
    # the README's commands twice in a row, as a reader who runs them again does (its
    # ingest then finds every call already in the store)
    rounds = 2 if page.name == "README.md" else 1
    for words, expected in commands * rounds:
        reason = next((why for prefix, why in NOT_RUN.items() if words[0].startswith(prefix)),
                      None)
        if reason is not None:
            continue
        argv = [_metrics(tmp_path) if STAND_INS.get(w) == METRICS else STAND_INS.get(w, w)
                for w in words[words.index(next(w for w in words if w.endswith("prefixscope")))
                               + 1:]]
        store = _store_option(argv)
        if store and argv[0] not in WRITES_STORE and not (tmp_path / store).exists():
            # a store the example assumes the reader has: the sample logs'
            made = runner.invoke(app, ["ingest", "sample_logs", "--store", store, "-q"])
            assert made.exit_code == 0, made.output
        result = runner.invoke(app, argv)
        if result.exit_code != expected:
            tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
            failures.append(f"prefixscope {shlex.join(argv)}: exit {result.exit_code}, "
                            f"shown {expected}: {' / '.join(tail)}")
    assert failures == []


def test_the_readme_shows_what_report_prints() -> None:
    """README.md's report output block is what `report sample_logs/ --top 5` prints."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    intro = "(`--top 5` here; the default is 10):\n\n```\n"
    shown = text[text.index(intro) + len(intro):]
    shown = shown[:shown.index("```")]
    result = CliRunner().invoke(app, ["report", str(ROOT / "sample_logs"), "--top", "5"])
    assert result.exit_code == 0, result.output
    printed = "\n".join(line.rstrip() for line in result.stdout.splitlines()) + "\n"
    assert printed == shown
