"""Serving-engine logs (vLLM / SGLang server logs, /metrics dumps): ``engine_log``, and which
engine logs a report reads."""

from __future__ import annotations

import os
from collections.abc import Sequence
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

from prefixscope.api.masking import masked
from prefixscope.api.options import strings
from prefixscope.model.errors import Error

if TYPE_CHECKING:
    from prefixscope.analyses.engine_cache import EngineLogAnalysis
    from prefixscope.ingest.engine_logs import EngineLogInput
    from prefixscope.views.ingested import IngestResult


def engine_log(paths: str | PathLike[str] | Sequence[str | PathLike[str]]
               ) -> EngineLogAnalysis:
    """What vLLM / SGLang server logs and Prometheus /metrics dumps say about the cache:
    the hit-rate series, the configuration, offload stores vs loads, and findings
    (``prefixscope engine-log``, docs/engine-log.md).

    Args:
        paths: engine logs, /metrics dumps, or directories (walked; other files passed
            over); gzip is read transparently.

    Raises:
        Error: a path that does not exist (``usage``), a file named that is not an engine
            log or cannot be read, or no engine log among `paths`.
    """
    from prefixscope.analyses.engine_cache import analyze_engine_logs, classify_engine_paths
    from prefixscope.ingest import missing_paths

    names = strings(paths)
    missing = missing_paths(names)
    if missing:  # a typo'd path is a usage error, as for every command that reads logs
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise Error(f"no such file or directory: {missing[0]}{more}", usage=True)
    files, problems = classify_engine_paths(names)
    if problems:
        place, reason = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise Error(f"{place}: {reason}{more}")
    if not files:
        raise Error(f"no vLLM / SGLang server log or Prometheus dump in {', '.join(names)}")
    try:
        analysis = analyze_engine_logs(files)
    except (OSError, ValueError) as exc:
        raise Error(str(exc)) from None
    return masked(analysis)


def report_engine_logs(given: Sequence[str | PathLike[str] | EngineLogInput],
                       ingested: IngestResult | None) -> tuple[Path | EngineLogInput, ...]:
    """The engine logs a report reads, each file once however it is spelled (``logs/a.log``
    and its absolute path are one file): those the ingest of a temporary store found among
    its paths (each read as the kind it sniffed as: no file is sniffed twice), then those
    `given` (``--engine-log``), sniffed when read."""
    found: list[Path | EngineLogInput] = []
    known: set[str] = set()
    for file in [*(ingested.engine_inputs if ingested else ()), *given]:
        # a path given, or an ingest's EngineLogInput (read as its kind)
        chosen = Path(file) if isinstance(file, str | PathLike) else file
        path = chosen if isinstance(chosen, Path) else chosen.path
        if os.path.realpath(path) not in known:
            known.add(os.path.realpath(path))
            found.append(chosen)
    return tuple(found)
