"""prefixscope as a library (docs/api.md): its surface pinned, its examples run, one code
path with the command line, and a notebook session on the real data.

Oracles: hand arithmetic over hand-built captures (`report_scenarios.write_session`),
figures other people published about the real data (Gemini CLI's totals from its own
fixture, the OpenHands counts docs/store.md checked by hand), and sums computed here with
Polars over the store's raw rows. The command line's output for the same input is a
cross-check that both are one code path, never the only oracle of a number.
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import FIXTURES, REAL, ROOT, normalized_output
from report_scenarios import at, write_session
from typer.testing import CliRunner

import prefixscope as ps
from prefixscope import api
from prefixscope.cli.main import app
from prefixscope.findings.ledger import CAUSES
from prefixscope.views.html import findings_table, report_html

DOC = ROOT / "docs" / "api.md"
runner = CliRunner()

# The public surface. A change here is a change of the library's contract: edit this,
# docs/api.md and the CHANGELOG of the release together.
NAMES = ["Calls", "DiffReport", "Error", "IngestResult", "RenderResult", "Report",
         "SimulateReport", "Store", "bucket", "calls", "diff", "engine_log", "export",
         "export_bundle", "ingest", "open", "redact", "render", "report", "segments", "simulate",
         "sql"]
SIGNATURES = {  # parameters and defaults (annotations aside)
    "bucket": "(store, *, by=None, bins=20, block_size=None, price_per_mtok=None, "
              "explain=True, gateway='auto', tokenizer='auto', what_if=(), since=None, "
              "until=None, project=None)",
    "segments": "(store, *, by=None, tokens=True, show_text=False, gateway='auto', "
                "tokenizer='auto', what_if=(), workers=None, since=None, until=None, "
                "project=None, progress=None)",
    "engine_log": "(paths)",
    "sql": "(store, query)",
    "export": "(store, *, parquet=None, bundle=None, gateway='auto', tokenizer='auto', "
              "workers=None, progress=None)",
    "calls": "(store, *, session=None, engine='auto', block_size=None, capacity=None, "
             "bytes_per_token=None, gateway='auto', tokenizer='auto', workers=None, "
             "since=None, until=None, project=None, progress=None)",
    "diff": "(store, *requests, session=None, gateway='auto', tokenizer='auto', what_if=(), "
            "block_size=None, context=40, workers=None, runner='local', parquet_in=None, "
            "parquet_out=None, since=None, until=None, project=None, progress=None)",
    "ingest": "(paths, store='prefixscope.duckdb', *, format='auto', strict=False, "
              "session_gap=60.0, session_key=(), max_line_bytes=268435456, skip_missing=False, "
              "progress=None)",
    "export_bundle": "(store, directory, *, gateway='auto', tokenizer='auto', workers=None, "
                     "progress=None)",
    "open": "(path='prefixscope.duckdb')",
    "redact": "(patterns=(), *, defaults=True)",
    "render": "(store, request, *, gateway='auto', tokenizer='auto', what_if=())",
    "report": "(store, *, engine='auto', block_size=None, capacity=None, bytes_per_token=None, "
              "engine_logs=(), fail_under=None, max_volatile_before=None, baseline=None, "
              "by=None, price_per_mtok=None, what_if=(), gateway='auto', tokenizer='auto', "
              "workers=None, runner='local', since=None, until=None, project=None, progress=None)",
    "simulate": "(store, *, engine='auto', block_size=None, capacity=None, bytes_per_token=None, "
                "trace_block_size=None, cache_output=False, ttl=None, concurrent=False, "
                "fit=False, capacities=(), save=False, gateway='auto', tokenizer='auto', "
                "what_if=(), workers=None, since=None, until=None, project=None, "
                "progress=None)",
    "Error": "(message, *, usage=False, result=None)",
}
METHODS = {  # the public methods and properties of each type
    "Store": {"close": "(self)", "requests": "(self)", "sessions": "(self)", "path": "property",
              "temporary": "property"},
    "Report": {"to_dict": "(self)", "to_html": "(self)", "to_markdown": "(self, top=10)",
               "to_polars": "(self, table='findings')", "_repr_html_": "(self)"},
    "DiffReport": {"to_dict": "(self)", "to_polars": "(self, table='pairs')"},
    "SimulateReport": {"to_dict": "(self, *, per_request=False)",
                       "to_polars": "(self, table='requests')"},
    "RenderResult": {"to_dict": "(self, *, show_text=False)",
                     "to_polars": "(self, table='segments')"},
    "IngestResult": {"to_dict": "(self)"},
    "Calls": {"to_dict": "(self)", "to_polars": "(self, table='calls')"},
    "Error": {},
}
TABLES = {"Report": ("findings", "causes", "entries", "breakdown", "gate", "scenarios",
                     "what_ifs", "policy"),
          "DiffReport": ("pairs", "causes"),
          "SimulateReport": ("requests", "misses", "capacity_curve", "what_if"),
          "RenderResult": ("segments", "tokens"),
          "Calls": ("calls",)}
# Command-line parameters named otherwise in the library.
RENAMED = {"fmt": "format", "curve": "capacities", "engine_log": "engine_logs",
           "refs": "requests"}
HEAVY = ("polars", "duckdb", "numpy", "transformers", "matplotlib", "tokenizers", "tiktoken",
         "jinja2", "pyarrow")


def bare(function: Any) -> str:
    """A signature without its annotations."""
    sig = inspect.signature(function)
    return str(sig.replace(parameters=[p.replace(annotation=inspect.Parameter.empty)
                                       for p in sig.parameters.values()],
                           return_annotation=inspect.Signature.empty))


def chat_usage(prompt: list[int], cached: list[int]) -> Any:
    """OpenAI usage per turn: `prompt` tokens (cache reads included), `cached` of them read."""
    return lambda turn: {"prompt_tokens": prompt[turn], "completion_tokens": 7,
                         "total_tokens": prompt[turn] + 7,
                         "prompt_tokens_details": {"cached_tokens": cached[turn]}}


PROMPT = [2000, 2300, 2600]
CACHED = [0, 1920, 2176]


@pytest.fixture
def captures(tmp_path: Path) -> Path:
    """One three-turn session, its usage written by hand; its third turn reorders tools."""
    def reorder(request: dict[str, Any]) -> None:
        request["tools"].reverse()

    return write_session(tmp_path / "captures.jsonl", turns=3, session="s-1",
                         usage=chat_usage(PROMPT, CACHED), change=at(2, reorder))


@pytest.fixture
def store(captures: Path, tmp_path: Path) -> Any:
    with ps.ingest([captures], store=tmp_path / "s.duckdb") as st:
        yield st


def cli_error(args: list[str]) -> tuple[int, str]:
    """(exit code, the line after ``error: ``) of a failing command."""
    result = runner.invoke(app, args)
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, result.stderr
    return result.exit_code, lines[0].removeprefix("error: ")


class TestSurface:
    def test_the_package_exports_exactly_the_pinned_names(self) -> None:
        assert sorted(api.__all__) == NAMES
        assert sorted(ps.__all__) == sorted([*NAMES, "__version__"])
        assert all(getattr(ps, name) is getattr(api, name) for name in NAMES)

    def test_the_functions_signatures_are_pinned(self) -> None:
        assert {name: bare(getattr(ps, name)) for name in SIGNATURES} == SIGNATURES

    def test_the_types_public_methods_are_pinned(self) -> None:
        def public(cls: type) -> dict[str, str]:
            own = {n: v for k in reversed(cls.__mro__) if k.__module__.startswith(
                ("prefixscope.api", "prefixscope.views.results", "prefixscope.views.ingested",
             "prefixscope.views.diffed"))
                for n, v in vars(k).items()}
            return {n: "property" if isinstance(v, property) else bare(v)
                    for n, v in own.items() if callable(v) or isinstance(v, property)
                    if not n.startswith("_") or n == "_repr_html_"}

        assert {name: public(getattr(ps, name)) for name in METHODS} == METHODS
        assert {name: getattr(ps, name).TABLES for name in TABLES} == TABLES

    def test_the_result_types_are_the_core_values(self) -> None:
        from prefixscope.analyses.diff import DiffReport
        from prefixscope.analyses.prompt_spans import RenderResult
        from prefixscope.analyses.simulate import SimulateReport
        from prefixscope.findings.model import Report
        from prefixscope.store.load import IngestResult

        assert [issubclass(getattr(ps, t.__name__), t) for t in
                (Report, DiffReport, SimulateReport, RenderResult, IngestResult)] == [True] * 5

    def test_every_other_name_of_the_module_is_private(self) -> None:
        defined = {name for name, value in vars(api).items()
                   if getattr(value, "__module__", None) == "prefixscope.api"}
        assert sorted(n for n in defined if not n.startswith("_")) == sorted(
            n for n in NAMES if getattr(api, n).__module__ == "prefixscope.api")

    def test_every_public_name_has_its_section_in_api_md_with_an_example(self) -> None:
        sections = re.split(r"^(?=##)", DOC.read_text(), flags=re.M)
        named = {m.group(1): section for section in sections
                 if (m := re.match(r"### `ps\.(\w+)`", section))}
        assert sorted(named) == sorted([*NAMES, "__version__"])
        assert [n for n, section in named.items() if "```python" not in section] == []

    def test_the_store_cannot_be_built_but_by_open_or_ingest(self) -> None:
        with pytest.raises(TypeError, match="use prefixscope.open"):
            ps.Store()

    def test_importing_the_package_or_the_api_loads_no_heavy_library(self) -> None:
        code = ("import sys\nimport prefixscope as ps\nimport prefixscope.api\n"
                "ps.Error, ps.Store, ps.open\n"
                f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True)
        assert out.stdout.strip() == ""

    def test_the_ingest_subpackage_does_not_hide_the_function(self) -> None:
        import importlib

        readers = importlib.import_module("prefixscope.ingest")
        assert ps.ingest is api.ingest and readers.__name__ == "prefixscope.ingest"
        from prefixscope import ingest

        assert ingest is api.ingest


class TestOneCodePath:
    @pytest.mark.parametrize("command", ["ingest", "report", "calls", "diff", "simulate",
                                         "render", "bucket", "segments", "export"])
    def test_the_command_line_reads_its_defaults_from_the_library(self, command: str) -> None:
        import typer.main

        cli = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
        library = inspect.signature(getattr(api, command)).parameters
        shared = {}
        for param in cli.params:
            name = RENAMED.get(param.name, param.name)
            if name == "store":  # the command's None is the default store file
                continue
            if name in library and library[name].default is not inspect.Parameter.empty:
                cli_default = param.default
                lib_default = library[name].default
                # a repeatable option's "not given" is None there, () here
                shared[name] = cli_default == lib_default or (cli_default is None
                                                              and lib_default == ())
        assert all(shared.values()), shared
        from prefixscope.store import DEFAULT_STORE

        assert inspect.signature(api.open).parameters["path"].default == DEFAULT_STORE
        assert inspect.signature(api.ingest).parameters["store"].default == DEFAULT_STORE
        assert len(shared) >= {"ingest": 4, "report": 17, "calls": 11, "diff": 13,
                               "simulate": 18, "render": 3, "bucket": 10, "segments": 9,
                               "export": 4}[command]

    def test_bucket_segments_sql_and_engine_log_are_the_documents_printed(
            self, store: Any) -> None:
        engine_log = REAL / "engine_logs" / "vllm-43295-kv-pressure.log"
        query = "select id, prompt_tokens from requests order by id"
        for args, result in (
                (["bucket", "--by", "model", "--store", store.path],
                 ps.bucket(store, by="model").to_dict()),
                (["segments", "--store", store.path], ps.segments(store).to_dict()),
                (["sql", query, "--store", store.path], ps.sql(store, query).to_dict()),
                (["engine-log", str(engine_log)], None)):
            printed = runner.invoke(app, [*args, "--json"])
            assert printed.exit_code == 0, printed.stderr
            if result is None:  # engine-log: the analysis through the JSON view
                from prefixscope.views.json import engine_log_json

                result = json.loads(json.dumps(engine_log_json(ps.engine_log(engine_log)),
                                               default=str))
            assert result == json.loads(printed.stdout), args

    def test_export_writes_the_files_the_command_names(self, store: Any,
                                                       tmp_path: Path) -> None:
        written = ps.export(store, parquet=tmp_path / "pq")
        assert sorted(p.name for p in written) == sorted(
            p.name for p in (tmp_path / "pq").iterdir())
        assert pl.read_parquet(tmp_path / "pq" / "requests.parquet").height == \
            store.requests().height == 3
        with pytest.raises(ps.Error, match="give one of --parquet DIR or --bundle DIR"):
            ps.export(store)

    def test_a_report_is_the_document_the_command_prints(self, store: Any) -> None:
        printed = runner.invoke(app, ["report", "--store", store.path, "--json"])
        assert printed.exit_code == 0, printed.stderr
        assert ps.report(store).to_dict() == json.loads(printed.stdout)

    def test_diff_simulate_render_and_ingest_are_the_documents_printed(
            self, store: Any, captures: Path, tmp_path: Path) -> None:
        first = store.requests()["id"][0]
        for args, result in (
                (["diff", "--all"], ps.diff(store).to_dict()),
                (["simulate", "--engine", "vllm", "--no-save"],
                 ps.simulate(store, engine="vllm", save=False).to_dict()),
                (["render", first], ps.render(store, first).to_dict()),
                (["calls"], ps.calls(store).to_dict())):
            printed = runner.invoke(app, [*args, "--store", store.path, "--json"])
            assert printed.exit_code == 0, printed.stderr
            assert result == json.loads(printed.stdout), args
        printed = runner.invoke(app, ["ingest", str(captures), "--store",
                                      str(tmp_path / "other.duckdb"), "--json"])
        again = ps.ingest([captures], store=tmp_path / "third.duckdb")
        assert again.ingest_result.to_dict() == json.loads(printed.stdout)
        again.close()

    @pytest.mark.parametrize(("call", "args"), [
        (lambda st: ps.report(st, engine="vlm"), ["report", "--engine", "vlm"]),
        (lambda st: ps.report(st, what_if="ttl-2h"), ["report", "--what-if", "ttl-2h"]),
        (lambda st: ps.report(st, capacity="12 parsecs"), ["report", "--capacity", "12 parsecs"]),
        (lambda st: ps.report(st, capacity="8GiB"), ["report", "--capacity", "8GiB"]),
        (lambda st: ps.report(st, by="weekday"), ["report", "--by", "weekday"]),
        (lambda st: ps.report(st, since="yesterday"), ["report", "--since", "yesterday"]),
        (lambda st: ps.report(st, until="2001-01-01"), ["report", "--until", "2001-01-01"]),
        (lambda st: ps.report(st, baseline="missing.json"), ["report", "--baseline",
                                                            "missing.json"]),
        (lambda st: ps.calls(st, session=" "), ["calls", "--session", " "]),
        (lambda st: ps.calls(st, session="nope"), ["calls", "--session", "nope"]),
        (lambda st: ps.diff(st, gateway="nginx"), ["diff", "--all", "--gateway", "nginx"]),
        (lambda st: ps.diff(st, session=" "), ["diff", "--session", " "]),
        (lambda st: ps.diff(st, session="nope"), ["diff", "--session", "nope"]),
        (lambda st: ps.diff(st, "a"), ["diff", "a", "b", "c"]),
        (lambda st: ps.diff(st, runner="ray", session="s-1"), ["diff", "--session", "s-1",
                                                               "--runner", "ray"]),
        (lambda st: ps.simulate(st, engine="mooncake"), ["simulate", "--engine", "mooncake"]),
        (lambda st: ps.simulate(st, engine="deepseek", block_size=64),
         ["simulate", "--engine", "deepseek", "--block-size", "64"]),
        (lambda st: ps.render(st, "ffff"), ["render", "ffff"]),
        (lambda st: ps.render(st, "x", tokenizer="no-such-model"),
         ["render", "x", "--tokenizer", "no-such-model"]),
    ], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
    def test_a_bad_option_or_input_is_the_commands_line_and_exit_code(
            self, store: Any, call: Any, args: list[str]) -> None:
        with pytest.raises(ps.Error) as raised:
            call(store)
        code, line = cli_error([*args, "--store", store.path])
        assert (str(raised.value), 2 if raised.value.usage else 1) == (line, code)

    def test_nothing_is_written_to_stdout_or_stderr(self, captures: Path, tmp_path: Path,
                                                    capfd: pytest.CaptureFixture[str]) -> None:
        st = ps.ingest([captures, FIXTURES / "raw" / "bad.jsonl"], store=None)
        ps.report(st, since="2026-06-01")
        ps.diff(st)
        ps.simulate(st, save=False)
        ps.render(st, st.requests()["id"][0])
        st.close()
        assert capfd.readouterr() == ("", "")


class TestStore:
    def test_requests_hold_the_logged_usage_in_time_order(self, store: Any) -> None:
        calls = store.requests()
        assert calls["prompt_tokens"].to_list() == PROMPT
        assert calls["cached_tokens"].to_list() == CACHED
        assert calls["turn"].to_list() == [0, 1, 2]
        assert calls["session"].to_list() == ["s-1"] * 3
        assert calls["timestamp"].is_sorted()

    def test_a_sessions_hit_rate_is_token_weighted_over_its_usage(self, store: Any) -> None:
        (row,) = store.sessions().to_dicts()
        assert (row["session"], row["requests"], row["usage_requests"]) == ("s-1", 3, 3)
        assert (row["prompt_tokens"], row["cached_tokens"]) == (6900, 4096)
        assert row["hit_rate"] == 4096 / 6900
        assert row["first_request"] == store.requests()["id"][0]

    def test_open_reads_what_ingest_wrote(self, store: Any) -> None:
        with ps.open(store.path) as again:
            assert again.requests().equals(store.requests())
            assert again.ingest_result is None and not again.temporary

    def test_a_temporary_store_is_deleted_when_closed(self, captures: Path) -> None:
        st = ps.ingest(captures, store=None)
        file = Path(st.path)
        assert st.temporary and file.exists() and st.requests().height == 3
        st.close()
        assert not file.exists() and not file.parent.exists()

    def test_a_strict_ingest_stores_nothing_and_says_why(self, captures: Path,
                                                         tmp_path: Path) -> None:
        bad = FIXTURES / "raw" / "bad.jsonl"
        with pytest.raises(ps.Error) as raised:
            ps.ingest([captures, bad], store=tmp_path / "strict.duckdb", strict=True)
        assert not raised.value.usage and raised.value.result.failed
        assert raised.value.result.skipped == len(raised.value.result.errors) > 0
        code, line = cli_error(["ingest", str(captures), str(bad), "--strict", "--store",
                                str(tmp_path / "strict-cli.duckdb")])
        assert (code, line) == (1, str(raised.value))
        # nothing stored: the store file the ingest created is gone again (as the CLI's)
        assert not (tmp_path / "strict.duckdb").exists()
        assert not (tmp_path / "strict-cli.duckdb").exists()

    def test_a_missing_store_is_the_commands_line(self) -> None:
        with pytest.raises(ps.Error) as raised:
            ps.open("nowhere.duckdb")
        assert cli_error(["report", "--store", "nowhere.duckdb"]) == (1, str(raised.value))

    def test_a_simulation_saved_in_the_store_leaves_it_readable(self, store: Any) -> None:
        sim = ps.simulate(store, engine="vllm", save=True)
        assert store.requests().height == 3  # read-only again after the write
        rows = runner.invoke(app, ["sql", "select count(*) as n from simulated", "--store",
                                   store.path, "--json"])
        assert json.loads(rows.stdout) == [{"n": sim.requests}] == [{"n": 3}]


class TestResults:
    def test_the_ledger_tables_sum_to_the_logged_misses(self, store: Any) -> None:
        r = ps.report(store)
        missed = sum(PROMPT) - sum(CACHED)  # 6,900 - 4,096 by hand
        assert r.ledger.missed_tokens == missed == 2804
        causes = r.to_polars("causes")
        assert causes["cause"].to_list() == list(CAUSES)
        assert causes["tokens"].sum() == missed
        entries = r.to_polars("entries")
        assert entries["missed_tokens"].to_list() == [p - c for p, c in zip(PROMPT, CACHED,
                                                                            strict=True)]
        assert entries.select(pl.sum_horizontal(list(CAUSES))).to_series().to_list() == \
            entries["missed_tokens"].to_list()
        assert entries["cold"].to_list()[0] == PROMPT[0]  # a session's first turn is cold

    def test_the_findings_frame_is_the_ranked_findings(self, store: Any) -> None:
        r = ps.report(store)
        frame = r.to_polars()
        assert frame["rank"].to_list() == list(range(1, len(r.findings) + 1))
        assert frame["kind"].to_list() == [f.kind for f in r.findings]
        assert [json.loads(e) for e in frame["evidence"]] == \
            [f["evidence"] for f in r.to_dict()["findings"]]
        assert "tool-order" in frame["kind"].to_list()

    def test_the_breakdown_rows_sum_to_the_basis(self, store: Any) -> None:
        r = ps.report(store, by=["day", "session"])
        frame = r.to_polars("breakdown")
        assert frame.columns[:2] == ["day", "session"]
        assert frame["day"].dtype == pl.Date
        assert (frame["prompt_tokens"].sum(), frame["cached_tokens"].sum()) == (6900, 4096)

    def test_a_missing_table_or_breakdown_is_an_error(self, store: Any) -> None:
        r = ps.report(store)
        with pytest.raises(ps.Error, match=r"^the report has no breakdown: make it with by="):
            r.to_polars("breakdown")
        with pytest.raises(ps.Error) as raised:
            r.to_polars("ledger")
        assert raised.value.usage and str(raised.value) == (
            "no table 'ledger' (tables: findings, causes, entries, breakdown, gate, "
            "scenarios, what_ifs, policy)")

    def test_a_notebook_shows_the_pages_findings_table(self, store: Any) -> None:
        r = ps.report(store)
        table = "\n".join(findings_table(r))
        assert table in r._repr_html_() and table in report_html(r)
        assert r.to_html() == report_html(r)

    def test_the_diff_frame_has_the_divergence_of_the_reordered_turn(self, store: Any) -> None:
        pairs = ps.diff(store).to_polars()
        assert pairs["cause"].to_list() == ["append-only", "tool-order"]
        assert pairs["first_divergence"].null_count() == 1
        second = pairs.row(1, named=True)
        assert second["tokens_a"] < second["tokens_b"] and second["first_divergence"] > 0

    def test_the_tokens_spell_the_prompt_in_its_segments(self, store: Any) -> None:
        shown = ps.render(store, store.requests()["id"][2])
        tokens = shown.to_polars("tokens")
        assert "".join(tokens["text"]) == shown.text and tokens.height == shown.tokens
        for seg in shown.to_polars("segments").iter_rows(named=True):
            inside = tokens.slice(seg["token_start"], seg["token_end"] - seg["token_start"])
            assert set(inside["segment"]) <= {seg["segment"]}

    def test_the_capacity_curve_is_the_capacities_asked_for(self, store: Any) -> None:
        sim = ps.simulate(store, engine="vllm", capacities=["2 blocks", 4096, None], save=False)
        # 'N blocks' are the replay's blocks: inferred from the cached values (1,920 and
        # 2,176 tokens: 15 and 17 blocks of 128), as the replay's own block is
        assert sim.unit == 128 and sim.unit_source == "inferred from the cached values"
        curve = sim.to_polars("capacity_curve")
        assert curve["capacity_tokens"].to_list() == [2 * 128, 4096, None]
        assert sim.to_polars("misses")["tokens"].sum() == sum(sim.misses.values())


@pytest.mark.real
def test_every_example_in_api_md_runs_on_the_real_data(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Each ```python block, in order, in one namespace, from a directory where
    tests/data/real is the repository's; and all of them again in the same directory, as
    a reader who runs the page twice does (the stores the first run wrote are there)."""
    (tmp_path / "tests" / "data").mkdir(parents=True)
    (tmp_path / "tests" / "data" / "real").symlink_to(REAL)
    monkeypatch.chdir(tmp_path)
    text = DOC.read_text()
    blocks = [(text.count("\n", 0, m.start()) + 2, m.group(1))
              for m in re.finditer(r"```python\n(.*?)```", text, re.S)]
    assert len(blocks) >= 12
    for _run in range(2):
        namespace: dict[str, Any] = {}
        try:
            for line, code in blocks:
                exec(compile(code, f"{DOC}:{line}", "exec"), namespace)  # noqa: S102
        finally:
            ps.redact()
            if "store" in namespace:
                namespace["store"].close()


@pytest.mark.real
def test_the_documented_columns_are_the_frames(captures: Path, tmp_path: Path) -> None:
    rows = dict(re.findall(r"^\| `([\w()]+)` \| (.+) \|$", DOC.read_text(), re.M))

    def documented(name: str) -> list[str]:
        cells = rows[name]
        return re.findall(r"`([\w-]+)`", cells.split("then", 1)[-1] if "then" in cells
                          else cells)

    with ps.ingest([captures], store=tmp_path / "cols.duckdb") as st:
        r = ps.report(st, by="model")
        sim = ps.simulate(st, engine="vllm", save=False)
        shown = ps.render(st, st.requests()["id"][0])
        frames = {"requests()": st.requests(), "sessions()": st.sessions()}
        frames |= {t: r.to_polars(t) for t in ps.Report.TABLES}
        frames |= {t: sim.to_polars(t) for t in ps.SimulateReport.TABLES}
        frames |= {t: shown.to_polars(t) for t in ps.RenderResult.TABLES}
        frames |= {t: ps.calls(st).to_polars(t) for t in ps.Calls.TABLES}
        diffed = ps.diff(st)
        frames["pairs"] = diffed.to_polars("pairs")
        frames["diff causes"] = diffed.to_polars("causes")
    assert documented("breakdown") == frames["breakdown"].columns[1:]
    for name in ("requests()", "sessions()", "findings", "entries", "gate", "scenarios",
                 "what_ifs", "policy", "misses", "capacity_curve", "what_if", "segments",
                 "tokens",
                 "pairs", "calls"):
        assert documented(name) == frames[name].columns, name
    # two tables are named `causes` (the report's ledger, the diff's): each documented once
    causes = re.findall(r"^\| `causes` \| (.+) \|$", DOC.read_text(), re.M)
    assert [re.findall(r"`([\w-]+)`", c) for c in causes] == [
        frames["causes"].columns, frames["diff causes"].columns]
    assert documented("requests") == frames["requests"].columns  # the simulation's


@pytest.mark.slow  # every call of a notebook on the whole real folder: ~22 s
@pytest.mark.real
def test_a_notebook_session_on_the_real_data(tmp_path: Path) -> None:
    """ingest -> report -> frames over every real log, as a person would in a notebook."""
    store = ps.ingest([REAL], store=tmp_path / "real.duckdb")
    calls = store.requests()
    # codex-desktop: 485 calls; mini-swe-agent-deepseek: its 15 assistant messages (its 16th API
    # call failed before any reply); openhands-completions: 6 + 4 files, one call each
    assert calls.height == store.ingest_result.ingested == 16_378 + 485 + 15 + 10

    # Gemini CLI's own fixture totals (tests/data/real/README.md): flash 113,397 input
    # tokens besides 48,951 cache reads, 1,886 output + 1,689 thoughts; pro 40,238 / 0 /
    # 266 + 452. prefixscope's prompt tokens hold the cache reads, its output the thoughts.
    gemini = (calls.filter(pl.col("source_format") == "gemini-cli").group_by("model")
              .agg(pl.len(), (pl.col("prompt_tokens") - pl.col("cached_tokens")).sum(),
                   pl.col("cached_tokens").sum(), pl.col("output_tokens").sum())
              .sort("model"))
    assert gemini.rows() == [("gemini-3-flash-preview", 5, 113_397, 48_951, 1_886 + 1_689),
                             ("gemini-3.1-pro-preview", 1, 40_238, 0, 266 + 452)]
    # docs/store.md, counted by hand: 116 of the 145 OpenHands calls report 1,956,072
    # prompt tokens, 11 report cached tokens.
    openhands = calls.filter(pl.col("source_format") == "openhands")
    assert (openhands.height, openhands["prompt_tokens"].count(),
            openhands["prompt_tokens"].sum(), openhands["cached_tokens"].count()) == (
        145, 116, 1_956_072, 11)

    r = ps.report(store)
    # The basis, summed here over the raw rows: every call reporting both, each once.
    basis = calls.filter(pl.col("prompt_tokens").is_not_null()
                         & pl.col("cached_tokens").is_not_null()
                         & pl.col("duplicate_of").is_null())
    s = r.summary
    assert (s.basis.requests, s.prompt_tokens, s.cached_tokens) == (
        basis.height, basis["prompt_tokens"].sum(), basis["cached_tokens"].sum())
    assert s.hit_rate == basis["cached_tokens"].sum() / basis["prompt_tokens"].sum()

    causes = r.to_polars("causes")
    entries = r.to_polars("entries")
    findings = r.to_polars("findings")
    assert causes["tokens"].sum() == s.prompt_tokens - s.cached_tokens == r.ledger.missed_tokens
    assert entries["id"].sort().to_list() == basis["id"].sort().to_list()
    assert (entries.select(pl.sum_horizontal(list(CAUSES))).to_series()
            == entries["missed_tokens"]).all()
    assert causes.filter("loss")["tokens"].sum() == r.ledger.lost_tokens \
        >= findings["lost_tokens"].sum()
    assert findings["kind"].to_list() == [f.kind for f in r.findings]
    assert r.to_polars("scenarios").height == len(r.scenarios) > 0

    # One code path: the document the command printed for this store (tests/golden).
    printed = json.dumps(r.to_dict(), ensure_ascii=False, indent=2, default=str) + "\n"
    golden = (ROOT / "tests" / "golden" / "real-report.json").read_text()
    assert normalized_output(printed) == golden
    table = "\n".join(findings_table(r))
    assert table in r._repr_html_()
    store.close()


def test_the_library_reads_the_engine_logs_among_the_ingested_paths(tmp_path: Path,
                                                                    monkeypatch) -> None:
    """`ps.report(ps.ingest(DIR, store=None))` is `prefixscope report DIR`, a vLLM log in
    DIR included (the ingest passes the log over; the report reads it)."""
    (tmp_path / "logs").mkdir()
    for name in ("vllm-offload.log", "bifrost-mcp-keyorder.jsonl"):
        (tmp_path / "logs" / name).write_bytes((ROOT / "sample_logs" / name).read_bytes())
    monkeypatch.chdir(tmp_path)
    printed = runner.invoke(app, ["report", "logs", "--json"])
    assert printed.exit_code == 0, printed.output
    with ps.ingest(["logs"], store=None) as st:
        assert st.ingest_result.engine_logs == ("logs/vllm-offload.log",)
        library = ps.report(st)
    kinds = [f.kind for f in library.findings]
    assert "l2-write-only" in kinds and "engine-log" in kinds
    assert json.loads(printed.stdout) == json.loads(
        json.dumps(library.to_dict(), ensure_ascii=False, default=str))
