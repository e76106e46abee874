"""Every command's `--help` reads like a manual: no type noise, arguments as click spells
them, an example per command, options in the shared panels, `report` first, the privacy
options everywhere, the format registry listed whole; and docs/cli.md is that help."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest
from conftest import ROOT
from typer.testing import CliRunner

from prefixscope.cli.main import app

runner = CliRunner()
COMMANDS = ["report", "calls", "ingest", "diff", "segments", "bucket", "simulate", "render",
            "engine-log", "sql", "export"]
# The panels a reader finds in every command, in this order (docs/cli.md says so too).
PANELS = ["Arguments", "Inputs", "Scope", "Model", "Engine", "Output", "Gate"]


def help_of(*args: str) -> str:
    result = runner.invoke(app, [*args, "--help"], env={"COLUMNS": "100"},
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def panels_of(text: str) -> list[str]:
    return re.findall(r"╭─ (\w+) ─", text)


def rows_of(text: str) -> list[str]:
    """The first cell of every panel row: `--store  -s  FILE`, `LOGS...`."""
    return [line[1:].strip() for line in text.splitlines()
            if line.startswith("│ ") and line[2:4].strip().startswith(("-", "*"))
            or re.match(r"│ [* ] +[A-Z]", line)]


class TestEveryHelpPage:
    @pytest.mark.parametrize("command", ["", *COMMANDS])
    def test_no_type_noise(self, command: str) -> None:
        text = help_of(*([command] if command else []))
        for noise in ("<bool>", "<int>", "<str>", "<path>", "<float", "<list", "range]",
                      "[x>=", "TEXT", "INTEGER"):
            assert noise not in text, (command, noise)
        assert not re.search(r"\s<[a-z_\[\], ]+>(\.\.\.)?\s", text), command  # a type column
        usage = next(line for line in text.splitlines() if "Usage:" in line)
        assert "{" not in usage and "<" not in usage, usage

    @pytest.mark.parametrize("command", COMMANDS)
    def test_an_example_line_that_runs_this_command(self, command: str) -> None:
        text = help_of(command)
        assert "Example:" in text
        example = text.split("Example:", 1)[1].splitlines()[1]
        assert example.strip().startswith(f"prefixscope {command} "), example

    @pytest.mark.parametrize("command", COMMANDS)
    def test_options_sit_in_the_shared_panels_in_order(self, command: str) -> None:
        panels = panels_of(help_of(command))
        assert "Options" not in panels
        assert panels == [p for p in PANELS if p in panels], panels
        assert "Output" in panels

    @pytest.mark.parametrize("command", COMMANDS)
    def test_the_privacy_options_are_shown(self, command: str) -> None:
        text = help_of(command)
        assert "--redact" in text and "REGEX" in text and "--no-default-redaction" in text

    @pytest.mark.parametrize("command", COMMANDS)
    def test_flags_carry_no_value_and_values_a_metavar(self, command: str) -> None:
        from typer.main import get_command

        click_command = get_command(app).commands[command]  # type: ignore[attr-defined]
        for param in click_command.params:
            if param.param_type_name != "option":
                continue
            shown = param.display_type_rich(None)
            if param.is_flag or param.count:
                assert shown is None, param.name
            else:
                assert shown and shown == shown.upper() or "|" in shown, (param.name, shown)


class TestUsageLines:
    def test_arguments_are_spelled_as_click_does(self) -> None:
        assert "Usage: prefixscope ingest [OPTIONS] LOGS..." in help_of("ingest")
        assert "Usage: prefixscope report [OPTIONS] [LOGS]..." in help_of("report")
        assert "Usage: prefixscope sql [OPTIONS] QUERY [LOGS]..." in help_of("sql")
        assert "Usage: prefixscope render [OPTIONS] REQUEST [LOGS]..." in help_of("render")
        assert "LOGS..." in help_of("report")  # in the Arguments panel too

    def test_a_missing_argument_is_named_as_in_the_usage(self) -> None:
        result = runner.invoke(app, ["ingest"])
        assert result.exit_code == 2
        assert "Missing argument 'LOGS...'" in result.output


class TestCommandList:
    def test_report_is_listed_first_and_every_command_once(self) -> None:
        text = help_of().split("Commands", 1)[1]
        listed = re.findall(r"│ ([a-z-]+) {2,}", text)
        assert listed == COMMANDS

    def test_each_summary_is_its_docstring_first_paragraph_whole(self) -> None:
        from typer.main import get_command

        group = get_command(app)
        for name in COMMANDS:
            command = group.commands[name]  # type: ignore[attr-defined]
            doc = command.callback.__doc__
            first = " ".join(doc.split("\n\n")[0].split())
            assert command.short_help == first, name
            assert first.endswith("."), name


class TestTheCommandRunAlone:
    """`prefixscope NAME ...` runs in an app holding that command alone (`main.app_for`:
    typer makes the group from every command it holds at each run); the oracle is `app`."""

    def test_each_command_alone_has_the_help_it_has_in_the_app(self) -> None:
        from prefixscope.cli.main import app_for

        for name in COMMANDS:
            for before in ([], ["--redact", "report", "--no-default-redaction"],
                           ["--redact=sql"]):
                one = app_for([*before, name, "--help"])
                assert [c.name for c in one.registered_commands] == [name]
                alone = runner.invoke(one, [*before, name, "--help"], env={"COLUMNS": "100"})
                assert alone.exit_code == 0, alone.output
                assert alone.stdout == help_of(*before, name), name

    def test_the_app_answers_what_names_no_command_first(self) -> None:
        from prefixscope.cli.main import app_for

        for args in ([], ["--help"], ["--help", "report"], ["reprot", "LOGS"], ["--redact"],
                     ["--redact", "report"], ["--bogus", "sql", "select 1"], ["--", "sql"]):
            assert app_for(args) is app, args

    def test_a_command_alone_hoists_the_privacy_options_after_its_name(self) -> None:
        from prefixscope.cli.main import app_for

        # (the error names the store given: masked by the option written after it)
        args = ["sql", "select 1", "--store", "ACME-1234.duckdb", "--redact", "ACME-[0-9]+"]
        alone = runner.invoke(app_for(args), args)
        whole = runner.invoke(app, args)
        assert alone.exit_code == whole.exit_code == 1
        assert "no store at " + "•" * 9 + ".duckdb" in alone.stderr
        assert (alone.stdout, alone.stderr) == (whole.stdout, whole.stderr)


class TestIngestHelp:
    def test_lists_every_format_module_of_the_registry(self) -> None:
        # The oracle: the format modules on disk, each read for its NAME without importing.
        names = []
        for path in sorted((ROOT / "prefixscope" / "ingest" / "formats").glob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in tree.body:
                if isinstance(node, ast.Assign) and any(
                        getattr(t, "id", None) == "NAME" for t in node.targets):
                    names.append(ast.literal_eval(node.value))
        text = help_of("ingest")
        assert len(names) >= 17
        for name in names:
            assert re.search(rf"^ +{re.escape(name)} +\S", text, re.M), name
        for detected in ("gemini-cli", "cline", "aider"):
            assert detected in names


class TestSqlTakesLogs:
    def test_sql_reads_log_paths_like_the_other_analysis_commands(self, tmp_path: Path
                                                                  ) -> None:
        result = runner.invoke(app, ["sql", "select source_format, count(*) AS n from "
                                     "requests group by 1 order by 1",
                                     str(ROOT / "sample_logs" / "bifrost-mcp-keyorder.jsonl"),
                                     "--json"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        lines = (ROOT / "sample_logs" / "bifrost-mcp-keyorder.jsonl").read_text().splitlines()
        assert result.stdout.count('"source_format"') == 1
        assert f'"n": {len([x for x in lines if x.strip()])}' in result.stdout


def _generator():
    spec = importlib.util.spec_from_file_location("cli_reference",
                                                  ROOT / "scripts" / "cli_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TestReferencePage:
    def test_docs_cli_md_is_the_commands_help(self) -> None:
        text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
        assert text == _generator().render(), \
            "docs/cli.md is out of date: run python scripts/cli_reference.py"

    def test_it_holds_every_command(self) -> None:
        text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
        for name in COMMANDS:
            assert f"## prefixscope {name}\n" in text
            assert f"Usage: prefixscope {name} [OPTIONS]" in text
