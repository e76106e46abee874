"""The `prefixscope` command: composes one Typer sub-module per command.

Start-up must stay fast: nothing here (or in the command modules at import time)
imports polars, duckdb, transformers or matplotlib; commands import the core
lazily inside their callbacks. A test enforces this for `prefixscope --help`.
"""

from __future__ import annotations

import os

import typer

from ..exitcodes import EXIT_CODES_HELP
from . import bucket_cmd, diff_cmd, export_cmd, ingest_cmd, render_cmd, segments_cmd, sql_cmd

# transformers announces on import that PyTorch is absent; prefixscope only needs its
# tokenizers and chat templates, so the advice is noise on stderr.
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

app = typer.Typer(
    name="prefixscope",
    help="Offline forensics for prompt (prefix) caching: where do consecutive turns diverge, "
         "what breaks the cache, and what a fix would gain.\n\n" + EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode="rich",
)

for module in (ingest_cmd, render_cmd, diff_cmd, segments_cmd, bucket_cmd, sql_cmd,
               export_cmd):
    module.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
