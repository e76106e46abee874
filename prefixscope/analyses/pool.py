"""The process pool analyses run their per-session work in (`prefixscope.parallel`), with
what a spawned worker does not inherit from this process: the active secret patterns
(`--redact`, `PREFIXSCOPE_REDACT`) that excerpts are masked with; and the piece cache of
a worker, which walks runs of a few sessions at a time, held smaller than one process's
that walks a whole log in time order (every session open at once)."""

from __future__ import annotations

from prefixscope.model.redaction import Redactor, activate, active
from prefixscope.parallel import Pool
from prefixscope.tokens.tokenize import limit_piece_caches

# A worker's piece-cache capacity: a run holds a few sessions (`onepass.SESSIONS_PER_RUN`;
# ~150k tokens of pieces each on the bench corpus), and a worker walks several runs;
# 2.09 GiB report, summed memory 1,401 -> 1,223 MB with it, the same time.
WORKER_PIECE_TOKENS = 6_000_000


def worker_pool(workers: int) -> Pool:
    """A pool of `workers` processes masking secrets as this process does (none: 1)."""
    return Pool(workers, initializer=_start_worker, initargs=(active(),))


def _start_worker(redactor: Redactor) -> None:
    activate(redactor)
    limit_piece_caches(WORKER_PIECE_TOKENS)
