"""`prefixscope engine-log`: what vLLM / SGLang server logs and /metrics dumps say about
the cache (write-only offload tiers, the hit-rate series, KV pressure, the block size)."""

from __future__ import annotations

from typing import Annotated

import typer

from prefixscope.cli import console
from prefixscope.cli.manual import Command
from prefixscope.cli.options import JsonOut, Quiet


def register(app: typer.Typer) -> None:
    app.command("engine-log", cls=Command)(engine_log)


def engine_log(
    paths: Annotated[list[str], typer.Argument(
        metavar="FILES",
        help="vLLM / SGLang server logs, saved Prometheus /metrics dumps, or directories "
             "(walked recursively; other files in them are passed over); gzip is read "
             "transparently.")],
    json_out: JsonOut = False,
    quiet: Quiet = 0,
) -> None:
    """What vLLM / SGLang server logs and /metrics dumps say about the cache: the hit-rate
    series, the configuration, offload stores vs loads, and findings.

    Read: the periodic stats lines (prefix / external prefix cache hit rate, KV cache
    usage, queue), the configuration (block size, KV connector, offload target,
    speculative decoding), KV offload store/load metrics, Prometheus counters and SGLang's
    #cached-token lines. Findings include an offload tier that stores and never loads
    (l2-write-only) and KV pressure.

    Example:
        prefixscope engine-log vllm.log metrics.txt
        prefixscope engine-log logs/ --json

    More: docs/engine-log.md.
    """
    from prefixscope import api
    from prefixscope.views.json import engine_log_json
    from prefixscope.views.terminal.engine_log import engine_log_screen

    with console.api_errors():
        analysis = api.engine_log(paths)
    if json_out:
        console.print_json(engine_log_json(analysis))
    else:
        console.show(engine_log_screen(analysis, console.screen()), quiet)
