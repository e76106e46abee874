"""The process pool analyses run their per-session work in (`prefixscope.parallel`), with
what a spawned worker does not inherit from this process: the active secret patterns
(`--redact`, `PREFIXSCOPE_REDACT`) that excerpts are masked with."""

from __future__ import annotations

from prefixscope.model.redaction import activate, active
from prefixscope.parallel import Pool


def worker_pool(workers: int) -> Pool:
    """A pool of `workers` processes masking secrets as this process does (none: 1)."""
    return Pool(workers, initializer=activate, initargs=(active(),))
