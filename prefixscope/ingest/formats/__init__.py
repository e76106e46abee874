"""The registry of ingest formats, in detection order: one module per source family.

Adding a format is one new module in this package and one line in `_MODULES`; the
shared pieces it needs are below it (`prefixscope.ingest.source` for the file and
its probe, `prefixscope.ingest.readers` for containers, `prefixscope.ingest.normalize`
for fields, usage, messages and streams). Every format module exposes:

* ``NAME`` -- the name users pass to ``--format`` and see in ``by_format``;
* ``DESCRIPTION`` -- one line for ``prefixscope ingest --help`` and docs;
* ``sniff(probe: Probe) -> bool`` -- True when the content is this format
  (decided from content: keys, columns, tables -- never from the file name alone);
* ``parse(source: Source, probe: Probe) -> Iterator[Record | Skip]`` -- every
  record of the file, each either a `Record` or a `Skip` with its place and
  reason; a parser never raises for one bad record;
* optionally ``is_companion(path: Path) -> bool`` -- True for a file that another
  file of this format reads along with it (a ``NN.response.json`` next to its
  ``NN.request.json``), so a directory walk does not ingest it twice;
* optionally ``prefer(new: Request, stored: Request) -> bool`` -- True when a record
  whose id is already stored (the same call read again: a grown file, a copy in another
  file) is more complete than the stored one and replaces it; without it the first
  stored copy stays.

Order matters: more specific formats are sniffed first.
"""

from __future__ import annotations

import importlib
from functools import cache
from types import ModuleType

# Module names under prefixscope.ingest.formats, in detection order.
_MODULES = (
    "bundle",
    "blocktrace",
    "lmcache_lookup",
    "tracelab",
    "openrouter",
    "otel",
    "langfuse",
    "newapi",
    "litellm",
    "bifrost",
    "claude_code",
    "codex",
    "gemini_cli",
    "cline",
    "aider",
    "swe_agent",
    "openhands",
    "openhands_completions",
    "mini_swe_agent",
    "raw",
)


@cache
def all_formats() -> tuple[ModuleType, ...]:
    return tuple(importlib.import_module(f"{__name__}.{m}") for m in _MODULES)


def format_names() -> tuple[str, ...]:
    return tuple(m.NAME for m in all_formats())


def get_format(name: str) -> ModuleType:
    for module in all_formats():
        if module.NAME == name:
            return module
    raise KeyError(name)
