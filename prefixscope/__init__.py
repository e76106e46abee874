"""prefixscope: offline forensics for prompt (prefix) caching.

``import prefixscope as ps`` gives the library (`prefixscope.api`, docs/api.md):
``ps.ingest``, ``ps.open``, ``ps.report``, ``ps.calls``, ``ps.diff``, ``ps.simulate``,
``ps.render``, ``ps.redact``, ``ps.Store``, ``ps.Error`` and the result types. They are
imported on first use, so importing the package costs nothing (the command line's
start-up depends on it).
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from prefixscope.api import (
        Calls,
        DiffReport,
        Error,
        IngestResult,
        RenderResult,
        Report,
        SimulateReport,
        Store,
        bucket,
        calls,
        diff,
        engine_log,
        export,
        export_bundle,
        ingest,
        open,
        redact,
        render,
        report,
        segments,
        simulate,
        sql,
    )

__all__ = ["Calls", "DiffReport", "Error", "IngestResult", "RenderResult", "Report",
           "SimulateReport", "Store", "__version__", "bucket", "calls", "diff", "engine_log",
           "export", "export_bundle", "ingest", "open", "redact", "render", "report",
           "segments", "simulate", "sql"]


class _Package(types.ModuleType):
    """This package's module type. ``prefixscope.ingest`` names both the library's function
    and the subpackage of log readers: importing the subpackage sets it as the package's
    attribute, which would hide the function. It is left out here, so the attribute stays
    the function; the subpackage is reached through `sys.modules` (``from
    prefixscope.ingest import ...``, `importlib.import_module`)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in __all__ and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    if name in __all__:
        from prefixscope import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
