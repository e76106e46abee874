"""The process pool analyses run their per-session work in (`prefixscope.parallel`), with
what a worker needs from this process: the active secret patterns (`--redact`,
`PREFIXSCOPE_REDACT`) that excerpts are masked with; and the piece cache of a worker,
which walks runs of a few sessions at a time, held smaller than one process's that walks
a whole log in time order (every session open at once).

The workers are forked where that is safe (`parallel.forks`: Linux), after this process
loaded the tokenizers they will use: each worker then starts with the package imported
and the tokenizers loaded, in pages it shares with this process, instead of importing and
loading them again in a spawned interpreter (report of 0.27 GiB of raw captures, two
workers: 2 x (0.3 + 0.35) s of CPU and a tokenizer's memory per worker). A pool is forked
where this process holds no pending store result (`parallel.Pool._forking`: a DuckDB
query streaming in this process would be half-done in the child): every caller creates
it between queries."""

from __future__ import annotations

from collections.abc import Iterable

from prefixscope.model.redaction import Redactor, activate, active
from prefixscope.parallel import Pool, forks
from prefixscope.tokens.tokenize import limit_piece_caches

# A worker's piece-cache capacity: a run holds a few sessions (`onepass.SESSIONS_PER_RUN`;
# ~150k tokens of pieces each on the bench corpus), and a worker walks several runs;
# 2.09 GiB report, summed memory 1,401 -> 1,223 MB with it, the same time. 6M -> 3M tokens
# (48 -> 24 MB a worker): a worker meets most pieces once (its runs' sessions' own
# messages), so half the cache encodes 1.4% more tokens on the raw captures and 2.5% more
# on Codex rollouts (half a worker's runs at 1 GiB each).
WORKER_PIECE_TOKENS = 3_000_000


def worker_pool(workers: int, tokenizers: Iterable[str] = ()) -> Pool:
    """A pool of `workers` processes masking secrets as this process does (none: 1),
    forked after `tokenizers` (specs, as `load_tokenizer` takes them) are loaded here,
    their chat templates compiled (`template.compile_both`) and their lazily built parts
    built (`HFTokenizer.warm`).

    A tokenizer that cannot be loaded is left to the workers, which raise its error where
    a request needs it, as a spawned worker would."""
    if workers > 1 and forks():
        from prefixscope.prompt.template import compile_both
        from prefixscope.tokenizers import load_tokenizer
        from prefixscope.tokenizers.hf import HFTokenizer

        for spec in sorted(set(tokenizers)):
            try:
                tok = load_tokenizer(spec)
                compile_both(tok.chat_template)
                if isinstance(tok, HFTokenizer):
                    tok.warm()
            except (ValueError, OSError):  # TokenizerError is a ValueError
                pass  # (the walk says so, request by request, as without a pool)
    return Pool(workers, initializer=_start_worker, initargs=(active(),), fork=True)


def _start_worker(redactor: Redactor) -> None:
    activate(redactor)
    limit_piece_caches(WORKER_PIECE_TOKENS)
