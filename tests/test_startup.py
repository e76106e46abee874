"""prefixscope starts fast: `--help` imports none of the heavy libraries, and a command
imports only what its work needs (never transformers for a bundled tokenizer). Whole-
process times are measured, not asserted, by bench/bench_startup.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from factories import run_main

# not in the fast loop (`pytest -m "not slow"`): a fresh interpreter per command
pytestmark = pytest.mark.slow

HEAVY = ("polars", "duckdb", "transformers", "matplotlib", "tokenizers", "tiktoken")


def test_help_does_not_import_heavy_libraries():
    """Not even numpy (issue 37: start-up budgeted): the help lists engines, tokenizers and
    gateway profiles by name, from registries that import their modules when first used."""
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from prefixscope.cli.main import app\n"
        "result = CliRunner().invoke(app, ['--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        f"print(','.join(m for m in {HEAVY + ('numpy', 'jinja2')!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def imported_by(argv: list[str], tmp_path) -> set[str]:
    """The heavy libraries in sys.modules after `prefixscope ARGV` ran in a fresh process."""
    return run_main(argv, tmp_path, HEAVY + ("jinja2", "pyarrow"))[0]


def two_requests(tmp_path):
    from conftest import ROOT

    sample = ROOT / "sample_logs" / "langfuse-claude-code.events_full.jsonl"
    log = tmp_path / "two.jsonl"
    log.write_bytes(b"".join(sample.read_bytes().splitlines(keepends=True)[:2]))
    return str(log)


def test_rendering_with_a_bundled_tokenizer_never_imports_transformers(tmp_path):
    log = two_requests(tmp_path)
    for argv in (["render", "17a459d3a53a9f01", log, "--tokenizer", "qwen3.6"],
                 ["diff", "--all", log], ["segments", log]):
        loaded = imported_by(argv, tmp_path)
        assert "jinja2" in loaded and "transformers" not in loaded, (argv, loaded)


def test_a_json_report_imports_no_rich_and_builds_no_pydantic_adapter(tmp_path):
    """issue 37: start-up budgeted. `report --json` prints no table and no warning here, so
    rich is not imported (`cli.console` makes its consoles on first use), and its options
    are read without a pydantic adapter each (`cli.coercion`): typer's adapter module is
    never imported. The first run prices the log's model with genai-prices (pydantic); the
    second finds the prices in the cache directory (`analyses.prices`) and imports neither."""
    from conftest import REAL

    log = str(REAL / "langfuse" / "openai-agents-2025-09-30.trace.json")  # priced models
    code = (
        "import sys\n"
        "from prefixscope.cli.main import main\n"
        f"sys.argv = ['prefixscope', 'report', {log!r}, '--json', '--top', '3']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exit:\n"
        "    assert exit.code in (0, 2, None), exit.code\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in ('rich',"
        " 'pydantic', 'genai_prices') or m == 'typer._adapters')), file=sys.stderr)\n"
    )
    env = {**os.environ, "PREFIXSCOPE_CACHE_DIR": str(tmp_path / "cache")}
    loaded = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             cwd=tmp_path, env=env)
        assert out.returncode == 0, out.stderr
        assert out.stdout.lstrip().startswith("{")  # the report was made
        loaded.append(set(filter(None, out.stderr.strip().splitlines()[-1:][0].split(",")))
                      if out.stderr.strip() else set())
    assert "genai_prices" in loaded[0]  # the log's model was priced
    assert not any(m.startswith("rich") or m == "typer._adapters" for m in loaded[0])
    assert loaded[1] == set()


def test_a_diff_imports_the_view_it_shows_only(tmp_path):
    """issue 37 item 4: `diff --all --json` prints no table, so neither the terminal view
    nor rich is imported (0.055 s of CPU); nor, either way, the other commands' result
    types, JSON shapes and wording, which import every analysis and the findings (~0.05
    s), nor the simulate package (~0.02 s: `analyses.breakpoints` is apart from it)."""
    log = two_requests(tmp_path)
    views = ("rich", "prefixscope.views.terminal.diff", "prefixscope.views.results",
             "prefixscope.views.json", "prefixscope.views.wording", "prefixscope.findings",
             "prefixscope.analyses.simulate")
    loaded = {shown: run_main(["diff", "--all", log, shown], tmp_path, views)[0]
              for shown in ("--json", "-q")}
    assert loaded["--json"] == set()
    assert loaded["-q"] == {"rich", "prefixscope.views.terminal.diff"}


def test_a_diff_of_a_store_imports_no_log_format(tmp_path):
    """issue 37 item 4: `diff --all --store S` reads the store only, so nothing of `ingest`
    (every log format's module, ~0.03 s of CPU) is imported: not through the library's
    ``ingest`` signature (its line bound is `model.records`'), nor through the lookup of a
    request given as a file, which only a two-request diff makes."""
    log = two_requests(tmp_path)
    subprocess.run([sys.executable, "-m", "prefixscope", "ingest", log, "--store", "s.duckdb",
                    "-qq"], check=True, cwd=tmp_path)
    # a package is in sys.modules whenever any module of it is
    loaded, stdout = run_main(["diff", "--all", "--store", "s.duckdb", "--json"], tmp_path,
                              ("prefixscope.ingest", "prefixscope.store.lookup"))
    assert stdout.lstrip().startswith("{")  # the diff was made
    assert loaded == set()


def test_an_ingest_imports_no_analysis_nor_numpy(tmp_path):
    """issue 37, start-up: `ingest` prints its own shape (`views.ingested`), not through
    `views.json`, which imports every command's analyses, the findings and numpy (~0.16 s
    of an `ingest` of sample_logs/); on this log nothing else needs numpy either."""
    log = two_requests(tmp_path)
    unwanted = ("numpy", "prefixscope.views.json", "prefixscope.views.results",
                "prefixscope.findings", "prefixscope.analyses.bucket")
    for shown, store in (("--json", "j.duckdb"), ("-q", "q.duckdb")):
        loaded, _ = run_main(["ingest", log, "--store", store, shown], tmp_path, unwanted)
        assert (tmp_path / store).exists()
        assert loaded == set(), shown


def test_what_a_command_writes_is_closed_before_exit(tmp_path):
    """`cli.main` freezes the collector at exit (the interpreter's last searches for cycles
    cost a small report 0.07-0.2 s of CPU): what is left in a cycle then is not finalized,
    so whatever a command writes must be closed by the command itself. A store closed by
    its connection holds no write-ahead log; the temporary store of `report LOGS` is gone;
    a report file is whole."""
    log = two_requests(tmp_path)
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp), "PREFIXSCOPE_CACHE_DIR": str(tmp_path / "c")}
    for argv in (["ingest", log, "--store", "s.duckdb", "-qq"],
                 ["report", log, "--html", "r.html", "-qq"]):
        out = subprocess.run([sys.executable, "-m", "prefixscope", *argv], cwd=tmp_path,
                             env=env, capture_output=True, text=True)
        assert out.returncode in (0, 2), out.stderr
    assert (tmp_path / "s.duckdb").exists() and not (tmp_path / "s.duckdb.wal").exists()
    assert list(temp.iterdir()) == []
    assert (tmp_path / "r.html").read_text().rstrip().endswith("</html>")


def test_sql_on_a_store_imports_no_tokenizer_template_or_plot_library(tmp_path):
    log = two_requests(tmp_path)
    # A small ingest's writes give DuckDB their rows as parameters, no frame (store._binds:
    # neither polars nor pyarrow); a large one's go through polars frames (Arrow C stream).
    assert imported_by(["ingest", log, "--store", "s.duckdb"], tmp_path) == {"duckdb"}
    loaded = imported_by(["sql", "select count(*) from requests", "--store", "s.duckdb"],
                         tmp_path)
    assert loaded == {"duckdb"}


def test_every_command_has_help_text():
    from typer.testing import CliRunner

    from prefixscope.cli.main import app

    runner = CliRunner()
    for command in app.registered_commands:
        name = command.name or command.callback.__name__
        result = runner.invoke(app, [name, "--help"])
        assert result.exit_code == 0, name
        assert (command.callback.__doc__ or "").strip(), name


def test_a_bug_is_one_line_not_a_traceback():
    code = (
        "import sys\n"
        "import prefixscope.store as store\n"
        "def boom(*a, **k):\n"
        "    raise RuntimeError('kaboom')\n"
        "store.Store.open = classmethod(boom)\n"
        "from prefixscope.cli.main import main\n"
        "sys.argv = ['prefixscope', 'sql', 'select 1']\n"
        "main()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 1
    assert out.stderr.strip() == ("error: internal error: RuntimeError: kaboom (a bug: rerun "
                                  "with PREFIXSCOPE_DEBUG=1 and report it)")
