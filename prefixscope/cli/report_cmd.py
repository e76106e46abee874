"""`prefixscope report`: every analysis over the logs, as ranked findings with their fixes,
in the terminal, as JSON / Markdown / HTML / JUnit files, and as a CI gate (exit 3)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from prefixscope import api
from prefixscope.api import names
from prefixscope.cli import console
from prefixscope.cli.exitcodes import ExitCode
from prefixscope.cli.manual import ENGINE, GATE, INPUTS, MODEL, OUTPUT, Command
from prefixscope.cli.options import (
    BlockSize,
    BytesPerToken,
    Capacity,
    Engine,
    Gateway,
    Logs,
    Project,
    Quiet,
    Runner,
    Since,
    SkipMissing,
    StoreOpt,
    Tokenizer,
    Until,
    Workers,
    defaults,
)

if TYPE_CHECKING:
    from prefixscope.views.results import Report

# gather's steps, at most: engine logs, usage, bucket, diff, segments, usage lint, replay,
# ledger (findings/evidence.py `gather`; diff runs in one of two places, once)
_STEPS = 8
# what --what-if prices: the ledger's what-ifs (findings.ttl_choice, findings.pinning) and
# the render transforms
_LEDGER_HELP = {"ttl-1h": "1-hour cache writes", "keep-warm": "pings through pauses",
                "pin-backend": "each session on one backend",
                "policy": "the cheapest choice per kind of request"}
_WHAT_IF_HELP = ("What-ifs to price, comma-separated or repeated: "
                 + ", ".join(f"{name} ({_LEDGER_HELP[name]})"
                             for name in names.LEDGER_PRICED_WHAT_IFS)
                 + ", and the render transforms ("
                 + ", ".join(names.RENDER_WHAT_IFS).replace("<regex>", "REGEX") + ").")

API = defaults(api.report)  # the library's defaults, read by the options below
RUNNER = Runner(API["runner"])


def register(app: typer.Typer) -> None:
    app.command("report", cls=Command)(report)


def report(
    logs: Logs = None,
    store: StoreOpt = None,
    skip_missing: SkipMissing = False,
    engine_log: Annotated[list[Path] | None, typer.Option(
        "--engine-log", metavar="FILE", rich_help_panel=INPUTS,
        help="A vLLM / SGLang log or /metrics dump to read too (LOGS directories are "
             "searched for them).", show_default=False)] = None,
    engine: Engine = API["engine"],
    block_size: BlockSize = None,
    capacity: Capacity = None,
    bytes_per_token: BytesPerToken = None,
    price_per_mtok: Annotated[float | None, typer.Option(
        "--price-per-mtok", metavar="USD", min=0.0, rich_help_panel=ENGINE,
        help="Dollars per million uncached prompt tokens of a self-hosted engine (its "
             "compute; its cache reads cost nothing). Hosted APIs are priced at their list "
             "prices (genai-prices) either way.", show_default=False)] = None,
    html_out: Annotated[Path | None, typer.Option(
        "--html", metavar="FILE", rich_help_panel=OUTPUT,
        help="Write a self-contained HTML report (plots inline, no network).",
        show_default=False)] = None,
    md_out: Annotated[Path | None, typer.Option(
        "--md", metavar="FILE", rich_help_panel=OUTPUT,
        help="Write the report as Markdown (a pull-request comment).",
        show_default=False)] = None,
    json_out: Annotated[bool, typer.Option(
        "--json", rich_help_panel=OUTPUT,
        help="Print the documented JSON shape (docs/json.md) on stdout (then nothing else "
             "goes there).")] = False,
    json_file: Annotated[Path | None, typer.Option(
        "--json-file", metavar="FILE", rich_help_panel=OUTPUT,
        help="Write the documented JSON shape to a file.", show_default=False)] = None,
    by: Annotated[str | None, typer.Option(
        "--by", metavar="DIM,...", rich_help_panel=OUTPUT,
        help="Also the ledger by these dimensions, comma-separated (day, session, project, "
             "model, ...): tokens, hit rate, spend and lost dollars per row.",
        show_default=False)] = None,
    top: Annotated[int, typer.Option("--top", metavar="N", min=0, rich_help_panel=OUTPUT,
                                     help="Findings shown in the terminal and the "
                                          "Markdown.")] = 10,
    fail_under: Annotated[float | None, typer.Option(
        "--fail-under", metavar="RATE", min=0.0, max=1.0, rich_help_panel=GATE,
        help="Fail (exit 3) unless the token-weighted hit rate (observed, else predicted) "
             "is at least RATE, from 0 to 1.", show_default=False)] = None,
    max_volatile_before: Annotated[int | None, typer.Option(
        "--max-volatile-before", metavar="TOKEN", min=0, rich_help_panel=GATE,
        help="Fail (exit 3) if consecutive turns diverge before this token.",
        show_default=False)] = None,
    baseline: Annotated[Path | None, typer.Option(
        "--baseline", metavar="FILE", rich_help_panel=GATE,
        help="Fail (exit 3) if a scenario's stable prefix shrank against this baseline "
             "file.", show_default=False)] = None,
    write_baseline: Annotated[Path | None, typer.Option(
        "--write-baseline", metavar="FILE", rich_help_panel=GATE,
        help="Save each scenario's stable prefix as a baseline file.",
        show_default=False)] = None,
    junit_out: Annotated[Path | None, typer.Option(
        "--junit", metavar="FILE", rich_help_panel=GATE,
        help="Write the gate's checks as JUnit XML, one test case per check.",
        show_default=False)] = None,
    what_if: Annotated[list[str] | None, typer.Option(
        "--what-if", "-w", metavar="NAME,...", rich_help_panel=MODEL,
        help=_WHAT_IF_HELP,
        show_default=False)] = None,
    gateway: Gateway = API["gateway"],
    tokenizer: Tokenizer = API["tokenizer"],
    workers: Workers = None,
    runner: Annotated[Runner, typer.Option(
        "--runner", metavar="local|ray", rich_help_panel=OUTPUT,
        help="Where the per-session stage runs (render, tokenize, diff, each cache domain's "
             "replay input): local, or ray (Ray tasks, with the package's ray extra; "
             "docs/scale.md). The report is the same.")] = RUNNER,
    since: Since = None,
    until: Until = None,
    project: Project = None,
    quiet: Quiet = 0,
) -> None:
    """What is breaking the cache, what it costs and what to change: every analysis as
    findings ranked by the prompt tokens they cost, each with its evidence and fix.

    Exit 3 when a gate option (--fail-under, --max-volatile-before, --baseline) fails.

    Example:
        prefixscope report sample_logs/ --html report.html
        prefixscope report --store cc.duckdb --fail-under 0.8 --junit gate.xml

    More: docs/report.md, docs/ci.md.
    """
    from prefixscope.cli.storeopen import input_store

    # the engine logs among LOGS: the ingest classifies each file once and hands them on
    with console.api_errors(), \
            input_store(logs, store, quiet=quiet, json_mode=json_out,
                        allow_empty=bool(engine_log), allow_engine_logs=True,
                        skip_missing=skip_missing) as st, \
            console.steps(json_out, quiet, "report", _STEPS) as progress, \
            console.api_notes(quiet):
        result = api.report(
            st, engine=engine, block_size=block_size, capacity=capacity,
            bytes_per_token=bytes_per_token, engine_logs=engine_log or (),
            fail_under=fail_under, max_volatile_before=max_volatile_before,
            baseline=baseline, by=by, price_per_mtok=price_per_mtok,
            what_if=what_if or (), gateway=gateway, tokenizer=tokenizer, workers=workers,
            runner=runner.value, since=since, until=until, project=project, progress=progress)
    _write_outputs(result, ((html_out, _html), (md_out, _markdown), (junit_out, _junit),
                            (write_baseline, _baseline), (json_file, _json)),
                   {"tokenizer": tokenizer, "gateway": gateway}, quiet, top)
    if json_out:
        from prefixscope.views.json import report_json

        console.print_json(report_json(result))
    else:
        from prefixscope.views.terminal.report import report_screen

        console.show(report_screen(result, console.screen(), top=top), quiet)
    _gate_exit(result, quiet)


def _gate_exit(result: Report, quiet: int) -> None:
    """A failed gate: its checks named on stderr, exit 3."""
    if not result.gate.passed:
        failed = [c.name for c in result.gate.checks if not c.passed]
        console.warn(f"gate failed: {', '.join(failed)}", quiet)
        raise typer.Exit(int(ExitCode.GATE_FAILED))


# What a file option writes: the result (with what the baseline says it was made with, and
# --top) -> the file's text.
_Text = Callable[["Report", dict[str, str], int], str]


def _write_outputs(result: Report, files: tuple[tuple[Path | None, _Text], ...],
                   about: dict[str, str], quiet: int, top: int) -> None:
    """Every file the options ask for (its path, how its text is made), each made before
    any is written, and each written whole or not at all."""
    from prefixscope.api.files import write_text

    texts = [(path, text(result, about, top)) for path, text in files if path is not None]
    for path, content in texts:
        try:
            write_text(path, content)
        except OSError as exc:
            raise console.fail(f"cannot write {path}: {exc.strerror or exc}") from None
        console.wrote(path, quiet)


def _html(result: Report, about: dict[str, str], top: int) -> str:
    from prefixscope.views.html import report_html

    return report_html(result)


def _markdown(result: Report, about: dict[str, str], top: int) -> str:
    from prefixscope.views.markdown import report_markdown

    return report_markdown(result, top=top)


def _junit(result: Report, about: dict[str, str], top: int) -> str:
    from prefixscope.views.junit import report_junit

    return report_junit(result)


def _baseline(result: Report, about: dict[str, str], top: int) -> str:
    from prefixscope.api.files import baseline

    return _json_text(baseline(result, about))


def _json(result: Report, about: dict[str, str], top: int) -> str:
    from prefixscope.views.json import report_json

    return _json_text(report_json(result))


def _json_text(document: object) -> str:
    """A JSON file's text: indented, non-ASCII as is, invisible characters escaped."""
    import json

    from prefixscope.views.invisible import json_escaped

    return json_escaped(json.dumps(document, indent=2, ensure_ascii=False)) + "\n"
