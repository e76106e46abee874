"""prefixscope as a library: the functions a notebook calls, and the command line too.

``import prefixscope as ps`` re-exports this package's names (lazily: `import prefixscope`
stays fast). Every command parses its options and calls the function here of the same
name, so the library and the command line are one code path: the same options with the
same defaults (the command line reads each default from these signatures), the same
checks in the same order, the same typed results (`views.results`: the core's frozen
dataclasses with ``to_dict()`` -- the command's ``--json`` -- and ``to_polars(table)``),
and the same one-line messages, raised here as `Error`.

Nothing here writes to stdout or stderr. What the command line prints as a note on
stderr (the replay the engine ``auto`` chose, a scope's size) is logged at INFO on the
``prefixscope`` logger (`api.notes`); progress goes to the ``progress`` callback a
function takes. Results are masked as the command line's output is (`api.masking`:
the built-in secret patterns, and what `redact` adds).

This file is the public surface, ``__all__`` (pinned by tests/test_api.py and listed in
docs/api.md); the code lives beneath it, one module by concern:

- `handle`: the `Store` handle and `open` (and a store named before it is opened);
- `ingesting`: ``ingest``; `reporting`: ``report``, ``calls``, ``export_bundle``;
  `prompts`: ``diff``, ``render``; `replaying`: ``simulate``; `investigating`:
  ``bucket``, ``segments``; `engine_logs`: ``engine_log``; `tables`: ``sql``, ``export``;
- what they share: `options` (option assembly), `capacity` (capacity parsing), `scope`
  (``since`` / ``until`` / ``project``), `masking` (``redact``), `notes` (INFO notes).

Every function here names ``prefixscope.api`` as its module, as before the split.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prefixscope.api.engine_logs import engine_log
from prefixscope.api.handle import Store, open
from prefixscope.api.ingesting import ingest
from prefixscope.api.investigating import bucket, segments
from prefixscope.api.masking import redact
from prefixscope.api.prompts import diff, render
from prefixscope.api.replaying import simulate
from prefixscope.api.reporting import calls, export_bundle, report
from prefixscope.api.tables import export, sql
from prefixscope.model.errors import Error

if TYPE_CHECKING:
    from prefixscope.views.ingested import IngestResult
    from prefixscope.views.results import Calls, DiffReport, RenderResult, Report, SimulateReport

__all__ = ["Calls", "DiffReport", "Error", "IngestResult", "RenderResult", "Report",
           "SimulateReport", "Store", "bucket", "calls", "diff", "engine_log", "export",
           "export_bundle", "ingest", "open", "redact", "render", "report", "segments",
           "simulate", "sql"]

# The result types live with their views (`views.results`, `views.ingested`); imported
# on first use.
_RESULT_TYPES = ("Calls", "DiffReport", "RenderResult", "Report", "SimulateReport")

for _value in (Store, bucket, calls, diff, engine_log, export, export_bundle, ingest, open,
               redact, render, report, segments, simulate, sql):
    _value.__module__ = __name__  # what help() and reprs say: the library, not its parts
del _value


def __getattr__(name: str) -> Any:
    if name == "IngestResult":
        from prefixscope.views.ingested import IngestResult

        return IngestResult
    if name in _RESULT_TYPES:
        from prefixscope.views import results

        return getattr(results, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
