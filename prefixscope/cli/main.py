"""The `prefixscope` command: composes one Typer sub-module per command.

Start-up must stay fast: nothing here (or in the command modules at import time)
imports polars, duckdb, transformers or matplotlib; commands import the core
lazily inside their callbacks. A test enforces this for `prefixscope --help`.
"""

from __future__ import annotations

import typer

from ..exitcodes import EXIT_CODES_HELP
from . import export_cmd, ingest_cmd, sql_cmd

app = typer.Typer(
    name="prefixscope",
    help="Offline forensics for prompt (prefix) caching: where do consecutive turns diverge, "
         "what breaks the cache, and what a fix would gain.\n\n" + EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode="rich",
)

for module in (ingest_cmd, sql_cmd, export_cmd):
    module.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
