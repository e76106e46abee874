"""`prefixscope report`: every analysis over the logs, as ranked findings with their fixes,
in the terminal, as JSON / Markdown / HTML / JUnit files, and as a CI gate (exit 3)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from prefixscope import api
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
from prefixscope.model.whatifs import LEDGER_WHAT_IFS
from prefixscope.prompt.whatif import WHAT_IFS

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
                 + ", ".join(f"{name} ({_LEDGER_HELP[name]})" for name in LEDGER_WHAT_IFS)
                 + ", and the render transforms ("
                 + ", ".join(WHAT_IFS).replace("<regex>", "REGEX") + ").")

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
    try:
        with input_store(logs, store, quiet=quiet, json_mode=json_out,
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
    except api.Error as exc:
        raise console.api_error(exc) from None
    _write_outputs(result, html_out, md_out, json_file, junit_out, write_baseline,
                   {"tokenizer": tokenizer, "gateway": gateway}, quiet, top)
    if json_out:
        from prefixscope.views.json import report_json

        console.print_json(report_json(result))
    if not json_out:
        from prefixscope.views.terminal.report import report_screen

        console.show(report_screen(result, console.screen(), top=top), quiet)
    if not result.gate.passed:
        failed = [c.name for c in result.gate.checks if not c.passed]
        console.warn(f"gate failed: {', '.join(failed)}", quiet)
        raise typer.Exit(int(ExitCode.GATE_FAILED))


def _write_outputs(result: Report, html_out: Path | None, md_out: Path | None,
                   json_file: Path | None, junit_out: Path | None, write_baseline: Path | None,
                   about: dict[str, str], quiet: int, top: int) -> None:
    """Every file the options ask for."""
    import json

    from prefixscope.findings.gate import baseline_document
    from prefixscope.model.atomic import write_atomic
    from prefixscope.views.invisible import json_escaped

    outputs: list[tuple[Path, str]] = []
    if html_out is not None:
        from prefixscope.views.html import report_html

        outputs.append((html_out, report_html(result)))
    if md_out is not None:
        from prefixscope.views.markdown import report_markdown

        outputs.append((md_out, report_markdown(result, top=top)))
    if junit_out is not None:
        from prefixscope.views.junit import report_junit

        outputs.append((junit_out, report_junit(result)))
    if write_baseline is not None:
        outputs.append((write_baseline, json_escaped(json.dumps(
            baseline_document(result.scenarios, about), indent=2, ensure_ascii=False)) + "\n"))
    if json_file is not None:
        from prefixscope.views.json import report_json

        outputs.append((json_file, json_escaped(json.dumps(report_json(result), indent=2,
                                                           ensure_ascii=False)) + "\n"))
    for path, text in outputs:
        try:
            write_atomic(path, text)
        except OSError as exc:
            raise console.fail(f"cannot write {path}: {exc.strerror or exc}") from None
        console.wrote(path, quiet)
