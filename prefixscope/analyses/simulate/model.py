"""What simulate's parts share: its options, results, the prepared request, and
the engine lookups they all make."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from prefixscope.engines import ENGINES, EngineSpec
from prefixscope.parallel import tokenizer_threads
from prefixscope.prompt import RenderOptions

if TYPE_CHECKING:
    from prefixscope.analyses.simulate.spill import SpilledIds

MISS_CLASSES = ("new", "cold", "break", "eviction", "ttl", "compaction", "provider",
                "unexplained")
# A warm Claude Code turn reads exactly the previous request's input minus 2 tokens (7 of 9
# adjacent pairs of TraceLab's claude-opus sample; cache-semantics.md A.4): the engine's
# registry entry holds it, which the ledger reads too.
ANTHROPIC_READ_LAG = ENGINES["anthropic"].read_lag
DEFAULT_TRACE_BLOCK = 512  # Mooncake's hash_ids block (the trace may say otherwise)
# Block-hash trace formats whose ids follow an engine's own rules, not Mooncake's.
TRACE_ENGINES = {"lmcache-lookup": "lmcache"}
_RENDER_BATCH = 16  # requests tokenized together where the tokenizer has threads to spread them
_RENDER_BATCH_ONE_THREAD = 4  # ... where it has one: fewer rendered prompts held at once


def render_batch() -> int:
    """How many requests to render before tokenizing their new pieces together."""
    return _RENDER_BATCH if tokenizer_threads() > 1 else _RENDER_BATCH_ONE_THREAD
_FIT_UNITS = (16, 32, 64, 128, 256, 512)
# `--workers` not given: forked replay processes only for a log this large (a smaller one
# replays in less time than the processes take to start).
AUTO_MIN_REPLAY_REQUESTS = 500


@dataclass(frozen=True, slots=True)
class SimulateOptions:
    """What to replay the log through."""

    engine: str = "vllm"
    # The block size (vLLM block, SGLang page, LMCache chunk, OpenAI step); None: the
    # engine's default. Named `unit` as in the JSON and the results (`SimulateReport.unit`).
    unit: int | None = None
    capacity_tokens: int | None = None  # None: unlimited
    trace_block_size: int | None = None  # block-hash traces; None: the trace's own, else 512
    cache_output: bool = False  # also cache the logged output's tokens (self-hosted engines)
    render: RenderOptions = field(default_factory=RenderOptions)
    # Replay overlapping requests as overlapping: a request's blocks stay pinned (not
    # evictable) from its start until start + its logged duration. Default: one after
    # another, each released before the next starts.
    concurrent: bool = False
    ttl_seconds: float | None = None  # hosted engines' retention; None: the engine's default
    # Replay only the requests of these log files (one cache domain: one server's traffic);
    # None: every request.
    source_files: tuple[str, ...] | None = None
    # Anthropic: a breakpoint at the end of every prompt that has none (the API's automatic
    # mode, as Claude Code's own marks put it there) -- for logs whose bodies lost their
    # cache_control marks but whose usage reports cache reads.
    automatic_breakpoints: bool = False

    def with_what_if(self, transform: str) -> SimulateOptions:
        """These options rendering with `transform` too (a what-if replay's)."""
        return replace(self, render=replace(self.render,
                                            what_if=(*self.render.what_if, transform)))


@dataclass(frozen=True, slots=True)
class RequestSim:
    """One replayed request."""

    id: str
    session: str | None
    prompt_tokens: int  # as replayed (rendered tokens, or the trace's input length)
    observed: int | None  # cached tokens the log reports
    predicted: int
    ideal: int
    misses: dict[str, int]  # uncached prompt tokens per class (MISS_CLASSES)
    # tokens per unit it was replayed in when not the report's `unit`: a block-hash
    # trace's blocks (its ids are the cache's keys, whatever the engine's block size)
    unit: int | None = None

    @property
    def shortfall(self) -> int | None:
        """predicted − observed: how much less the log got than the model says it could."""
        return None if self.observed is None else self.predicted - self.observed


@dataclass(frozen=True, slots=True)
class WhatIfResult:
    transform: str
    hit_rate_ideal: float | None
    hit_rate_predicted: float | None
    gain_tokens: int  # predicted cached tokens gained over the log as it is


@dataclass(frozen=True, slots=True)
class CurvePoint:
    """The replay at one capacity: its hit rate, and its cached tokens split by where they
    come from (`replay._within_sessions`): reuse within a conversation (its own session
    had sent them) and across conversations (only another session had: a shared system
    prompt, shared tools). ``within_tokens + across_tokens`` is the cached tokens."""

    capacity_tokens: int | None
    hit_rate: float | None
    within_tokens: int = 0
    across_tokens: int = 0
    prompt_tokens: int = 0  # the rates' basis (the replayed prompt tokens)

    @property
    def hit_rate_within(self) -> float | None:
        return self.within_tokens / self.prompt_tokens if self.prompt_tokens else None

    @property
    def hit_rate_across(self) -> float | None:
        return self.across_tokens / self.prompt_tokens if self.prompt_tokens else None


@dataclass(frozen=True, slots=True)
class FitResult:
    unit: int
    capacity_tokens: int | None
    agreement: float | None
    ttl_seconds: float | None = None  # hosted engines: the retention that fits best


@dataclass(frozen=True, slots=True)
class SimulateReport:
    engine: str
    unit: int
    capacity_tokens: int | None
    requests: int
    prompt_tokens: int
    hit_rate_observed: float | None  # over the requests whose log reports cached tokens
    hit_rate_predicted: float | None
    hit_rate_ideal: float | None
    agreement: float | None  # share of observed requests predicted within one unit
    misses: dict[str, int]
    per_request: tuple[RequestSim, ...]
    what_if: tuple[WhatIfResult, ...] = ()
    capacity_curve: tuple[CurvePoint, ...] = ()
    fit: FitResult | None = None
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> requests not replayed
    approximate_requests: int = 0  # rendered with a stand-in tokenizer (counts estimated)
    observed_above_ideal: int = 0  # cached tokens the log reports beyond the model's ceiling
    # where the replay's parameters came from, in the words the output says them in
    # (`analyses.simulate.defaults`; "" when the caller chose them itself)
    unit_source: str = ""  # the block size: given / inferred / fitted / the engine's default
    capacity_source: str = ""  # the capacity: given / fitted / why unlimited


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A request ready to replay: its tokens (or trace ids) and its place in its session.

    Compact: a prompt that starts like an earlier one (an agent resends its whole
    conversation every turn) keeps only its own token ids and where the rest is in that
    earlier prompt (`base`): its first `shared` tokens, and (`resumed`) one more run of
    it after a change early in the prompt (a volatile header, reordered tools).
    `_Expander` rebuilds the whole prompt while replaying. A log then costs memory for
    its distinct tokens, not for the sum of its prompts."""

    id: str
    session: str | None
    prev: str | None  # the session's previous request
    compacted: bool  # the link from `prev` is a compaction
    seconds: float | None  # timestamp, for TTLs
    observed: int | None
    # prompt token ids not taken from `base` (None for a trace); `SpilledIds`: on disk,
    # read back as an array by `np.asarray` (`spill`)
    ids: np.ndarray | SpilledIds | None
    # the logged output's token ids, after the prompt's
    output_ids: np.ndarray | SpilledIds | None
    trace: tuple[int, ...] | None  # block ids of a block-hash trace
    trace_tokens: int  # the trace's input length
    trace_block: int
    # From usage alone: (content key, token end) of each request of the session so far,
    # this one last (the prompt assumed append-only).
    segments: tuple[tuple[str, int], ...] | None = None
    model: str | None = None
    logged_prompt: int | None = None  # the log's own prompt tokens (its hit rate's basis)
    trace_engine: str = "blocktrace"  # the cache model that replays `trace`
    # Anthropic bodies: (content block key, token end) per block, and the breakpoints
    # (block index -> TTL seconds) of their cache_control marks.
    blocks: tuple[tuple[str, int], ...] | None = None
    breakpoints: tuple[tuple[int, float], ...] = ()
    duration: float | None = None  # seconds the request ran, when the log says
    approximate: bool = False  # rendered with a stand-in tokenizer: counts are estimates
    # The earlier request (id) whose prompt's first `shared` token ids are this one's.
    base: str | None = None
    shared: int = 0
    # (at, start, length): the prompt's tokens [at, at + length) are base[start:+length]
    resumed: tuple[int, int, int] | None = None
    # What vLLM adds to the first block's hash (a request's ``cache_salt``): requests of
    # different namespaces never share a block.
    namespace: str | None = None
    # How many of the prompt's ids spell its head, the template splitting there
    # (`Turns.head_tokens`): a what-if that edits the head alone keeps the ids after them
    head: int | None = None
    # From usage alone, Anthropic: the TTL of the entry the request leaves, as its usage
    # shows it (`EngineSpec.write_ttl`; None: the log does not say, the engine's own)
    write_ttl: float | None = None
    # From usage alone: the log records a change before it (`Links.changed`): a new chain,
    # and what the predecessor sent is `break`, not `new`
    changed: bool = False

    @property
    def n_tokens(self) -> int:
        if self.ids is not None:
            return self.shared + len(self.ids) + (self.resumed[2] if self.resumed else 0)
        if self.segments is not None:
            return self.segments[-1][1]
        return self.trace_tokens

    def whole_ids(self, base_ids: np.ndarray | None) -> np.ndarray:
        """The prompt's whole token ids, given its `base`'s whole ids (None: no base)."""
        assert self.ids is not None
        if base_ids is None:
            return np.asarray(self.ids)  # read back once, when spilled
        return np.concatenate(self.whole_parts(base_ids))

    def whole_parts(self, base_ids: np.ndarray, own: np.ndarray | None = None
                    ) -> tuple[np.ndarray, ...]:
        """The arrays `whole_ids(base_ids)` concatenates (`own`: the own ids, read
        already)."""
        assert self.ids is not None
        if own is None:
            own = np.asarray(self.ids)  # read back once, when spilled
        if self.resumed is None:
            return base_ids[: self.shared], own
        at, start, length = self.resumed
        return (base_ids[: self.shared], own[: at - self.shared],
                base_ids[start: start + length], own[at - self.shared:])


class SimulateError(ValueError):
    """The simulation cannot run as asked (one line, for a person)."""


def spec_of(engine: str) -> EngineSpec:
    """The registry's spec of `engine`, one that replays logged requests.

    Raises:
        SimulateError: not a registered engine, or one that replays traces only.
    """
    spec = ENGINES.get(engine)
    if spec is None:
        raise SimulateError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    if spec.replays == "traces":
        others = ", ".join(n for n, s in ENGINES.items() if s.replays != "traces")
        raise SimulateError(f"--engine {engine} replays block-hash traces only; use one of "
                            f"{others}")
    return spec


def engine_block_size(engine: str, block_size: int | None) -> tuple[int, dict[str, int]]:
    """(block size, the engine's keyword for it) for `engine`; None takes the default."""
    spec = spec_of(engine)
    if spec.block_parameter is None and block_size is not None:
        raise SimulateError(f"--engine {engine} has no block size to set")
    kwargs = spec.block_kwargs(block_size)
    return (block_size or spec.block_size), kwargs
