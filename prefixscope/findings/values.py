"""The report's options and a cache domain's replay: the small values the modules that
gather the evidence (`findings.evidence`, `domains`, `ledgering`) pass between them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from prefixscope.analyses.simulate import SimulateReport
from prefixscope.engines.choose import AUTO
from prefixscope.ingest.engine_logs import EngineLogInput
from prefixscope.prompt import RenderOptions

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ReportOptions:
    """What the report analyses with."""

    render: RenderOptions = field(default_factory=RenderOptions)
    engine: str = AUTO  # a cache model name, or "auto" (chosen from the log)
    block_size: int | None = None  # None: inferred from the cached values
    capacity_tokens: int | None = None  # None: fitted when the log has cached tokens
    # vLLM / SGLang logs and /metrics dumps: paths (sniffed when read), or files an ingest
    # classified (read as their kind)
    engine_logs: tuple[Path | EngineLogInput, ...] = ()
    # Dollars per million uncached prompt tokens of a self-hosted engine (its compute);
    # None: hosted models at their list prices (genai-prices), self-hosted unpriced.
    price_per_mtok: float | None = None
    # What-ifs to price (--what-if): render transforms (replayed) and TTL choices (priced
    # from the ledger); the ones the diff's causes call for are priced anyway.
    what_if: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Replay:
    """One cache domain's replay: the log file whose requests share one server's cache."""

    domain: str
    report: SimulateReport
