"""`prefixscope calls`: the report's ledger one request at a time, a session at a time
(in / read / write / missed / cause), the view a person scans for a pattern."""

from __future__ import annotations

from typing import Annotated

import typer

from prefixscope import api
from prefixscope.cli import console
from prefixscope.cli.manual import SCOPE, Command
from prefixscope.cli.options import (
    BlockSize,
    BytesPerToken,
    Capacity,
    Engine,
    Gateway,
    JsonOut,
    Logs,
    Project,
    Quiet,
    Since,
    SkipMissing,
    StoreOpt,
    Tokenizer,
    Until,
    Workers,
    defaults,
)

_STEPS = 7  # the report's steps (report_cmd._STEPS): calls are its ledger
API = defaults(api.calls)  # the library's defaults, read by the options below


def register(app: typer.Typer) -> None:
    app.command("calls", cls=Command)(calls)


def calls(
    logs: Logs = None,
    store: StoreOpt = None,
    skip_missing: SkipMissing = False,
    session: Annotated[str | None, typer.Option(
        "--session", metavar="ID", rich_help_panel=SCOPE,
        help="Only this session's calls (an id, or the start of one: every session it "
             "starts).", show_default=False)] = None,
    since: Since = None,
    until: Until = None,
    project: Project = None,
    gateway: Gateway = API["gateway"],
    tokenizer: Tokenizer = API["tokenizer"],
    engine: Engine = API["engine"],
    block_size: BlockSize = None,
    capacity: Capacity = None,
    bytes_per_token: BytesPerToken = None,
    workers: Workers = None,
    json_out: JsonOut = False,
    quiet: Quiet = 0,
) -> None:
    """The report's ledger a call at a time, a session at a time: in / read / write /
    missed tokens and the cause of each.

    One row per request with its time (UTC), model, prompt tokens (in), cached (read),
    cache writes where the log has them (write), missed tokens and the ledger's causes, so
    a pattern shows by eye (calls reading the same count, a break at the same segment every
    turn). The numbers are report's ledger: the same replay and session threading, and the
    missed tokens sum to report's.

    Example:
        prefixscope calls sample_logs/
        prefixscope calls --store cc.duckdb --session 4f2a

    More: docs/report.md#calls.
    """
    from prefixscope.cli.storeopen import input_store

    with console.api_errors():
        with input_store(logs, store, quiet=quiet, json_mode=json_out,
                         skip_missing=skip_missing) as st, \
                console.steps(json_out, quiet, "calls", _STEPS) as progress, \
                console.api_notes(quiet):
            result = api.calls(st, session=session, engine=engine, block_size=block_size,
                               capacity=capacity, bytes_per_token=bytes_per_token,
                               gateway=gateway, tokenizer=tokenizer, workers=workers,
                               since=since, until=until, project=project, progress=progress)
    if json_out:
        from prefixscope.views.json import calls_json

        console.print_json(calls_json(result))
        return
    from prefixscope.views.terminal.calls import calls_screen

    console.show(calls_screen(result, console.screen()), quiet)
