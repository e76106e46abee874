"""simulate: replay the logged requests through a faithful cache model, and say why every
uncached prompt token missed.

"Before blaming eviction, reproduce the miss on an idle server." Each request is cut into
the engine's units (rendered and tokenized exactly as the upstream saw it, or the
block ids of a block-hash trace) and replayed in log order twice:

* **predicted**: the engine with the configured capacity (and, for hosted APIs, the
  requests' timestamps, so TTLs expire);
* **ideal**: the same engine with unlimited capacity and no clock (nothing is ever
  evicted or expires): the ceiling no cache configuration can beat.

A request's uncached prompt tokens (against what the log observed, else the
prediction) fall into classes, in this order of the prompt:

* tokens the ideal cache does not hold either: ``cold`` (the session's first request),
  ``compaction`` (the predecessor was compacted into a summary), ``break`` (the
  predecessor sent them, but its prefix changed earlier), ``new`` (never sent before:
  not a miss);
* tokens the ideal holds but the model does not: ``eviction`` (capacity) or ``ttl``
  (a hosted API's retention expired);
* tokens the model predicts cached but the log did not get: ``provider`` for a hosted
  API (an intact, live prefix missed: routing, overflow, best effort), ``unexplained``
  for a self-hosted engine (wrong parameters, or wrong usage semantics).

The classes partition each request's uncached tokens exactly. Cached tokens the log
reports beyond the ideal (reuse the model cannot see: another session's prefix, cached
outputs, other usage semantics) are not uncached tokens: they are totalled apart
(`SimulateReport.observed_above_ideal`).

Block-hash traces (Mooncake, Bailian) are replayed with the ``blocktrace`` engine whatever
``--engine`` says: their ids follow the Mooncake convention
(cached = ``min(matched_blocks * block_size, input_length)``).

With a hosted engine, logs without bodies (Claude Code session files, gateway billing
logs) are replayed from their usage: each request's prompt is its session predecessor's
prompt plus new tokens (``prompt_tokens`` says how many), i.e. the session is assumed
append-only -- usage
cannot show a prefix change, so such a replay finds no ``break``. The ``anthropic``
engine replays logged Anthropic bodies by their content blocks and their own
``cache_control`` marks (caching is opt-in); without a body it replays from usage with
a breakpoint at each prompt's end (automatic mode), reading ``ANTHROPIC_READ_LAG``
tokens short of the previous prompt, as Claude Code's warm turns do.
"""

from __future__ import annotations

import heapq
import multiprocessing
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime

import numpy as np
import xxhash

from prefixscope.engines import ENGINES, EngineSpec, get_engine
from prefixscope.engines.base import Admission, Engine, Units
from prefixscope.engines.sweep import BlocktraceSweep, Sweep, SweepResult
from prefixscope.model import Request
from prefixscope.prompt import RenderError, RenderOptions
from prefixscope.store import Store
from prefixscope.tokens import Tokens, common_prefix_length, tokens_many

MISS_CLASSES = ("new", "cold", "break", "eviction", "ttl", "compaction", "provider",
                "unexplained")
# A warm Claude Code turn reads exactly the previous request's input minus 2 tokens (7 of 9
# adjacent pairs of TraceLab's claude-opus sample; cache-semantics.md A.4).
ANTHROPIC_READ_LAG = 2
DEFAULT_TRACE_BLOCK = 512  # Mooncake's hash_ids block (the trace may say otherwise)
_RENDER_BATCH = 16
_FIT_UNITS = (16, 32, 64, 128, 256, 512)
# `--workers` not given: forked replay processes only for a log this large (a smaller one
# replays in less time than the processes take to start).
AUTO_MIN_REPLAY_REQUESTS = 500


@dataclass(frozen=True, slots=True)
class SimulateOptions:
    """What to replay the log through."""

    engine: str = "vllm"
    unit: int | None = None  # block / page / chunk / step size; None: the engine's default
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
    capacity_tokens: int | None
    hit_rate: float | None


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
    ids: np.ndarray | None  # prompt token ids not taken from `base` (None for a trace)
    output_ids: np.ndarray | None  # the logged output's token ids, after the prompt's
    trace: tuple[int, ...] | None  # block ids of a block-hash trace
    trace_tokens: int  # the trace's input length
    trace_block: int
    # From usage alone: (content key, token end) of each request of the session so far,
    # this one last (the prompt assumed append-only).
    segments: tuple[tuple[str, int], ...] | None = None
    model: str | None = None
    logged_prompt: int | None = None  # the log's own prompt tokens (its hit rate's basis)
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

    @property
    def n_tokens(self) -> int:
        if self.ids is not None:
            return self.shared + len(self.ids) + (self.resumed[2] if self.resumed else 0)
        if self.segments is not None:
            return self.segments[-1][1]
        return self.trace_tokens


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


def engine_unit(engine: str, unit: int | None) -> tuple[int, dict[str, int]]:
    """(unit, the engine's keyword for it) for `engine`; unit None takes the default."""
    spec = spec_of(engine)
    if spec.block_parameter is None and unit is not None:
        raise SimulateError(f"--engine {engine} has no block size to set")
    kwargs = spec.block_kwargs(unit)
    return (unit or spec.block_size), kwargs


def simulate_store(store: Store, options: SimulateOptions, *, what_if: Sequence[str] = (),
                   capacity_curve: Sequence[int | None] = (), fit: bool = False,
                   fit_units: Sequence[int] | None = None,
                   progress: Callable[[int, int], None] | None = None,
                   workers: int = 1) -> SimulateReport:
    """Replay a store's requests; see the module docstring.

    Raises:
        SimulateError: unknown engine or parameters.
        RenderError, TokenizerError: a bad render option (a request that cannot be
            rendered is counted in `skipped` instead).
    """
    engine_unit(options.engine, options.unit)  # a bad engine or unit fails before any render
    prepared, skipped = prepare(store, options, progress=progress)
    return replay_prepared(store, prepared, skipped, options, what_if=what_if,
                           capacity_curve=capacity_curve, fit=fit, fit_units=fit_units,
                           workers=workers)


def replay_prepared(store: Store, prepared: Sequence[_Prepared], skipped: dict[str, int],
                    options: SimulateOptions, *, what_if: Sequence[str] = (),
                    capacity_curve: Sequence[int | None] = (), fit: bool = False,
                    fit_units: Sequence[int] | None = None, workers: int = 1
                    ) -> SimulateReport:
    """`simulate_store` on requests `prepare` already rendered for `options`' engine: the
    unit and capacity may differ from the ones they were prepared with (they only matter to
    the replay), so one render serves an unlimited replay, a fit and the fitted replay.
    `store` is read again only for what-ifs, which render the log differently.
    `workers` > 1: independent replays (predicted and ideal, a fit's candidates, the
    capacity curve's points) run in that many processes; the report is the same."""
    unit, _ = engine_unit(options.engine, options.unit)
    report = replay_report(prepared, options, skipped, workers=workers)
    if fit:
        report = replace(report, fit=fit_parameters(prepared, options, fit_units,
                                                     workers=workers))
    if capacity_curve:
        cached = _at_capacities(prepared, options, capacity_curve, workers)
        report = replace(report, capacity_curve=tuple(
            CurvePoint(c, _hit_rate(prepared, hits))
            for c, hits in zip(capacity_curve, cached, strict=True)))
    if what_if:
        report = replace(report, what_if=tuple(
            _what_if(store, options, t, report, workers) for t in what_if))
    assert report.unit == unit
    return report


def prepare(store: Store, options: SimulateOptions,
            progress: Callable[[int, int], None] | None = None
            ) -> tuple[list[_Prepared], dict[str, int]]:
    """Every replayable request of the store, in log order, rendered and tokenized."""
    session_of = store.session_of()
    pairs = store.session_pairs()
    prev_of = {b: (a, compaction) for a, b, _, compaction in pairs}
    # A rendered prompt's ids are held only while a later request of its session may
    # still extend it: memory bounded by the sessions running at once, not by the log.
    successors = Counter(a for a, _, _, _ in pairs)
    live: dict[str, np.ndarray] = {}

    def done(request_id: str) -> None:
        prev = prev_of.get(request_id, (None, False))[0]
        if prev is not None and prev in successors:
            successors[prev] -= 1
            if not successors[prev]:
                del successors[prev]
                live.pop(prev, None)
    skipped: dict[str, int] = {}
    out: list[_Prepared] = []
    pending: list[Request] = []
    total = store.count()
    seen = 0

    def flush() -> None:
        nonlocal seen
        for request, tok in _render(pending, options.render, skipped):
            prev, compacted = prev_of.get(request.id, (None, False))
            blocks, breakpoints = (_anthropic_blocks(tok, request.body or {})
                                   if by_blocks else (None, ()))
            ids, base, shared, resumed = tok.ids, None, 0, None
            if prev is not None and prev in live:
                base = prev
                shared, resumed, ids = _compact(live[prev], ids)
            if request.id in successors:
                live[request.id] = tok.ids
            out.append(_Prepared(
                request.id, session_of.get(request.id), prev, compacted,
                _seconds(request.timestamp), request.usage.cached_tokens, ids,
                _output_ids(request, options), None, 0, 0,
                logged_prompt=request.usage.prompt_tokens, approximate=tok.prompt.approximate,
                blocks=blocks, breakpoints=breakpoints, duration=_duration(request),
                base=base, shared=shared, resumed=resumed, namespace=_namespace(request)))
        for request in pending:
            done(request.id)
        seen += len(pending)
        pending.clear()
        if progress is not None:
            progress(seen, total)

    chains: dict[str, tuple[tuple[str, int], ...]] = {}  # request id -> its segments
    spec = spec_of(options.engine)
    by_blocks = spec.replays == "segments"

    def from_usage(request: Request) -> None:
        prev, compacted = prev_of.get(request.id, (None, False))
        n = request.usage.prompt_tokens or 0
        before = chains.get(prev) if prev is not None and not compacted else None
        if before is not None and before[-1][1] <= n:
            segments = (*before, (request.id, n))
        else:
            segments = ((request.id, n),)
        chains[request.id] = segments
        out.append(_Prepared(
            request.id, session_of.get(request.id), prev, compacted, _seconds(request.timestamp),
            request.usage.cached_tokens, None, None, None, 0, 0, segments, request.model,
            logged_prompt=request.usage.prompt_tokens))

    copies = store.duplicate_count() if options.source_files is None else 0
    if copies:  # a call two sources logged is replayed once, through the copy kept
        skipped["a second log of a call another source logged (replayed once)"] = copies
    for request in store.iter_requests(source_files=options.source_files):
        anthropic_body = request.body is not None and request.endpoint == "anthropic-messages"
        if (by_blocks and not anthropic_body) or (request.body is None
                                                  and request.block_hashes is None):
            flush()
            seen += 1
            done(request.id)
            if request.usage.prompt_tokens and (by_blocks or spec.hosted):
                from_usage(request)
            else:
                reason = ("no prompt in the log (no body, no block ids): a hosted engine "
                          "replays such logs from their usage" if request.usage.prompt_tokens
                          else "no prompt in the log (no body, no block ids, no prompt tokens)")
                skipped[reason] = skipped.get(reason, 0) + 1
        elif request.block_hashes is not None:
            flush()
            done(request.id)
            prev, compacted = prev_of.get(request.id, (None, False))
            n_tokens = request.usage.prompt_tokens or 0
            block = options.trace_block_size or request.block_size or DEFAULT_TRACE_BLOCK
            out.append(_Prepared(
                request.id, session_of.get(request.id), prev, compacted,
                _seconds(request.timestamp), request.usage.cached_tokens, None, None,
                request.block_hashes, n_tokens, block, logged_prompt=request.usage.prompt_tokens))
            seen += 1
        else:
            pending.append(request)
            if len(pending) >= _RENDER_BATCH:
                flush()
    flush()
    return out, skipped


def _render(requests: list[Request], options: RenderOptions, skipped: dict[str, int]
            ) -> Iterable[tuple[Request, Tokens]]:
    if not requests:
        return []
    try:
        return list(zip(requests, tokens_many(requests, options), strict=True))
    except RenderError:
        pass
    out = []
    for request in requests:
        try:
            out.append((request, tokens_many([request], options)[0]))
        except RenderError as exc:
            reason = f"cannot render: {str(exc).splitlines()[0]}"
            skipped[reason] = skipped.get(reason, 0) + 1
    return out


def _namespace(request: Request) -> str | None:
    """The block-hash namespace of a logged request: vLLM's ``cache_salt`` (a body field
    of its OpenAI-compatible API; `generate_block_hash_extra_keys` puts it on the first
    block), None when the body has none."""
    salt = (request.body or {}).get("cache_salt")
    return f"cache_salt:{salt}" if isinstance(salt, str) and salt else None


def _duration(request: Request) -> float | None:
    """Seconds the request ran, from what the log recorded (Bifrost ``latency``, LiteLLM
    ``request_duration_ms`` or ``endTime``)."""
    meta = request.metadata
    for key, scale in (("latency_ms", 1e-3), ("request_duration_ms", 1e-3)):
        value = meta.get(key)
        if isinstance(value, (int, float)) and value >= 0:
            return float(value) * scale
    end = meta.get("end_time")
    if isinstance(end, str) and request.timestamp is not None:
        try:
            return max(0.0, (datetime.fromisoformat(end) - request.timestamp).total_seconds())
        except ValueError:
            return None
    return None


_PROBE = 32  # tokens of a prompt looked for in its base after they differ
_PROBE_AT = (0, 16, 64, 256, 1024, 4096, 16384, 65536)  # tokens after the shared prefix
_MIN_RUN = 64  # a shorter run found again is kept in the prompt's own ids


def _compact(base: np.ndarray, ids: np.ndarray
             ) -> tuple[int, tuple[int, int, int] | None, np.ndarray]:
    """`ids` as (tokens shared with `base` from the start, one more run of `base` found
    after them as (at, start, length), the rest of `ids` as a new array): see
    `_Prepared`. The run is the longest found by looking up a few probes of `ids` in
    `base`, each extended both ways (reordered tools match in short runs, the history
    after them in a long one); any run found is exact, so `_Expander.full_ids` rebuilds
    `ids`."""
    shared = common_prefix_length(base, ids)
    resumed = None
    if shared < len(ids):
        hay = base.tobytes()
        for offset in _PROBE_AT:
            at = shared + offset
            if at + _PROBE > len(ids):
                break
            if resumed is not None and resumed[0] <= at < resumed[0] + resumed[2]:
                continue  # inside the run already found
            start = _find(hay, ids[at: at + _PROBE].tobytes(), base.itemsize)
            if start < 0:
                continue
            back = common_prefix_length(base[:start][::-1], ids[shared:at][::-1])
            length = back + common_prefix_length(base[start:], ids[at:])
            if length >= _MIN_RUN and (resumed is None or length > resumed[2]):
                resumed = (at - back, start - back, length)
    if resumed is None:
        return shared, None, ids[shared:].copy()  # a copy: the whole array can go
    at, _, length = resumed
    return shared, resumed, np.concatenate((ids[shared:at], ids[at + length:]))


def _find(hay: bytes, needle: bytes, itemsize: int) -> int:
    """Index of the first whole item where `needle` occurs in `hay`, or -1."""
    pos = hay.find(needle)
    while pos >= 0 and pos % itemsize:
        pos = hay.find(needle, pos + 1)
    return -1 if pos < 0 else pos // itemsize


def _output_ids(request: Request, options: SimulateOptions) -> np.ndarray | None:
    """The logged output's text tokenized, to follow the prompt (for --cache-output)."""
    if not options.cache_output or request.output is None:
        return None
    from prefixscope.tokenizers import choose_tokenizer, load_tokenizer

    text = _output_text(request.output)
    if not text:
        return None
    tok = load_tokenizer(choose_tokenizer(options.render.tokenizer, request.model).spec)
    return np.asarray(tok.encode(text).ids)


def _output_text(output: object) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, dict):
        content = output.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "".join(p.get("text", "") for p in content
                           if isinstance(p, dict) and isinstance(p.get("text"), str))
    if isinstance(output, list):
        return "".join(_output_text(o) for o in output)
    return ""


def _seconds(ts: datetime | None) -> float | None:
    return None if ts is None else ts.timestamp()


# -- replay -------------------------------------------------------------------------


class _Expander:
    """The whole token ids and units of compact `_Prepared` prompts, in log order: a
    prompt's are kept only while a later prompt still extends it (its `base`), so a
    replay holds about one prompt per running session. A prompt that extends its base
    reuses the base's block keys for the shared blocks (`Engine.units_extending`)."""

    def __init__(self, prepared: Sequence[_Prepared], engine: Engine) -> None:
        self._engine = engine
        self._left = Counter(p.base for p in prepared if p.base is not None)
        self._held: dict[str, tuple[np.ndarray, Units | None]] = {}
        self._namespace: dict[str, str | None] = {}  # a held prompt's namespace
        self._base_namespace: str | None = None  # that of the base `full_ids` last used

    def full_ids(self, p: _Prepared) -> tuple[np.ndarray, Units | None]:
        """`p`'s whole prompt token ids, and its base's units when it has a base (call
        once per request, in order)."""
        assert p.ids is not None
        ids, base = p.ids, None
        if p.base is not None:
            if p.base not in self._held:
                raise ValueError(f"request {p.id} extends {p.base}, not replayed before it")
            base_ids, base = self._held[p.base]
            self._base_namespace = self._namespace.get(p.base)
            if p.resumed is None:
                ids = np.concatenate((base_ids[: p.shared], ids))
            else:
                at, start, length = p.resumed
                ids = np.concatenate((base_ids[: p.shared], ids[: at - p.shared],
                                      base_ids[start: start + length], ids[at - p.shared:]))
            self._left[p.base] -= 1
            if not self._left[p.base]:
                del self._held[p.base], self._left[p.base]
                self._namespace.pop(p.base, None)
        if self._left.get(p.id):
            self._held[p.id] = (ids, None)
            self._namespace[p.id] = p.namespace
        return ids, base

    def _salted(self, ids: np.ndarray, base: Units | None, p: _Prepared) -> Units:
        """`p`'s units with its namespace on the first block, where the engine's units are
        chained blocks (raw token ids and content blocks carry no namespace)."""
        engine = self._engine
        plain = engine.units(ids[:0])
        if not plain.chained or plain.ends is not None:
            return engine.units(ids)
        prefix = None
        if base is not None and self._base_namespace == p.namespace:
            prefix = base.keys[: min(p.shared // engine.unit, base.n_full)]
        return Units.chain(ids, engine.unit, namespace=p.namespace, prefix_keys=prefix)

    def units(self, p: _Prepared, output: bool) -> tuple[Units, Units | None]:
        """(prompt, prompt + output when `output` and the log has one) of `p`."""
        engine = self._engine
        if p.trace is not None:
            return Units.blocks(p.trace, p.trace_tokens, p.trace_block), None
        if p.segments is not None:
            if ENGINES[engine.name].replays == "segments":
                ends = [max(0, end - ANTHROPIC_READ_LAG) for _, end in p.segments[:-1]]
                ends.append(p.segments[-1][1])
                return Units.segments([key for key, _ in p.segments], ends,
                                      breakpoints={len(ends) - 1: _ttl(engine)}), None
            return engine.units(_synthetic_ids(p.segments)), None
        ids, base = self.full_ids(p)
        if p.blocks is not None:
            keys = [xxhash.xxh3_64_hexdigest(ids[start:end].tobytes())
                    for start, end in zip([0] + [e for _, e in p.blocks[:-1]],
                                          [e for _, e in p.blocks], strict=True)]
            return Units.segments(keys, [e for _, e in p.blocks], n_tokens=len(ids),
                                  breakpoints=dict(p.breakpoints)), None
        if p.namespace is not None:
            prompt = self._salted(ids, base, p)
        else:
            prompt = (engine.units(ids) if base is None or self._base_namespace is not None
                      else engine.units_extending(ids, base, p.shared))
        if p.id in self._held:
            self._held[p.id] = (ids, prompt)
        if output and p.output_ids is not None:
            return prompt, engine.units_extending(np.concatenate((ids, p.output_ids)), prompt,
                                                  len(ids))
        return prompt, None


# A content block's path in the rendered prompt: a tool, a system block, a message or one
# of its content blocks (Anthropic caches at these boundaries).
_BLOCK = re.compile(r"^(tools\[\d+\]|system(?:\[\d+\])?|messages\[\d+\](?:\.content\[\d+\])?)")


def _anthropic_blocks(tok: Tokens, body: dict[str, object]
                      ) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[int, float], ...]]:
    """The content blocks of a rendered Anthropic request (template glue joins the block
    before it) and the breakpoints its ``cache_control`` marks set: on a tool, a system
    block or a message content block, or (top-level ``cache_control``, automatic mode)
    on the last block. TTL: "1h" -> 3600 s, else 300 s. No mark: nothing is cached --
    Anthropic caching is opt-in."""
    blocks: list[tuple[str, int]] = []
    for segment, (_, end) in zip(tok.prompt.segments, tok.segment_token_spans(), strict=True):
        match = _BLOCK.match(segment.path)
        key = match.group(1) if match else None
        if blocks and (key is None or key == blocks[-1][0]):
            blocks[-1] = (blocks[-1][0], max(blocks[-1][1], end))
        else:
            blocks.append((key or "template", end))
    breakpoints: dict[int, float] = {}
    for index, (key, _) in enumerate(blocks):
        mark = _cache_control(body, key)
        if mark is not None:
            breakpoints[index] = mark
    automatic = body.get("cache_control")
    if isinstance(automatic, dict) and blocks:
        breakpoints[len(blocks) - 1] = _ttl_of(automatic)
    return tuple(blocks), tuple(sorted(breakpoints.items()))


def _cache_control(body: dict[str, object], key: str) -> float | None:
    node: object = body
    for name, index in re.findall(r"(\w+)(?:\[(\d+)\])?", key):
        node = node.get(name) if isinstance(node, dict) else None
        if index:
            node = node[int(index)] if isinstance(node, list) and int(index) < len(node) \
                else None
    mark = node.get("cache_control") if isinstance(node, dict) else None
    return _ttl_of(mark) if isinstance(mark, dict) else None


def _ttl_of(mark: dict[str, object]) -> float:
    return 3600.0 if mark.get("ttl") == "1h" else 300.0


def _ttl(engine: Engine) -> float:
    return float(getattr(engine, "ttl", 300.0))


def _synthetic_ids(segments: Sequence[tuple[str, int]]) -> np.ndarray:
    """Stand-in token ids for a prompt known only by its length: each request's new tokens
    are a sequence derived from its id, so prompts of one session share their prefix."""
    parts, start = [], 0
    for key, end in segments:
        seed = int.from_bytes(key.encode()[:8].ljust(8, b"\0"), "little") % (1 << 31)
        parts.append((seed + np.arange(max(0, end - start), dtype=np.int64)) % (1 << 31))
        start = max(start, end)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _engine(options: SimulateOptions, unlimited: bool) -> Engine:
    """The engine `options` name, configured (`unlimited`: no capacity)."""
    _, params = engine_unit(options.engine, options.unit)
    capacity = None if unlimited else options.capacity_tokens
    kwargs: dict[str, float | int | bool] = dict(params)
    if capacity is not None:
        kwargs["capacity_tokens"] = capacity
    spec = ENGINES[options.engine]
    if spec.cache_output:
        kwargs["cache_output"] = options.cache_output
    if options.ttl_seconds is not None:
        if spec.ttl_parameter is None:
            raise SimulateError(f"--engine {options.engine} has no retention time to set")
        kwargs[spec.ttl_parameter] = options.ttl_seconds
    if capacity is None and spec.unlimited is not None:
        return spec.unlimited(**kwargs)
    return spec.factory(**kwargs)


def _replay(prepared: Sequence[_Prepared], options: SimulateOptions, *,
            unlimited: bool = False) -> list[int]:
    """Cached tokens of each request: predicted (or, `unlimited`, the ideal: no capacity
    limit, no clock)."""
    engine = _engine(options, unlimited)
    traces: dict[int, Engine] = {}  # one blocktrace engine per trace block size
    capacity = None if unlimited else options.capacity_tokens
    out = []
    # (end time, order, admission, sequence) of the requests still running (--concurrent)
    running: list[tuple[float, int, Admission, Units | None]] = []
    expander = _Expander(prepared, engine)
    for p in prepared:
        if p.trace is not None:
            trace_engine = traces.get(p.trace_block)
            if trace_engine is None:
                trace_engine = traces[p.trace_block] = get_engine(
                    "blocktrace", block_size=p.trace_block, capacity_tokens=capacity)
            prompt, _ = expander.units(p, False)
            out.append(trace_engine.step(prompt).cached_tokens)
            continue
        prompt, sequence = expander.units(p, options.cache_output)
        now = None if unlimited else p.seconds
        if not (options.concurrent and not unlimited and p.seconds is not None):
            out.append(engine.step(prompt, sequence=sequence, now=now).cached_tokens)
            continue
        while running and running[0][0] <= p.seconds:  # finished before this one starts
            end, _, admission, done = heapq.heappop(running)
            engine.release(admission, sequence=done, now=end)
        admission = engine.admit(prompt, now=now)
        out.append(admission.lookup.cached_tokens)
        if p.duration:
            heapq.heappush(running, (p.seconds + p.duration, len(out), admission, sequence))
        else:
            engine.release(admission, sequence=sequence, now=now)
    while running:
        end, _, admission, done = heapq.heappop(running)
        engine.release(admission, sequence=done, now=end)
    return out


_IDEAL = None  # a run of `_replays`: the ideal replay (unlimited, no clock)
# The requests the worker processes replay: set before they fork (copy-on-write).
_SHARED: Sequence[_Prepared] = ()


def _replays(prepared: Sequence[_Prepared], runs: Sequence[SimulateOptions | None],
             workers: int) -> list[list[int]]:
    """`_replay(prepared, run)` of each run (None: the ideal replay of the first run's
    engine), in up to `workers` forked processes: each replay is independent of the
    others, so the results are the same as one after another."""
    base = next(run for run in runs if run is not None)
    jobs = [(base, True) if run is None else (run, False) for run in runs]
    if workers <= 1 or len(jobs) < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return [_replay(prepared, run, unlimited=unlimited) for run, unlimited in jobs]
    global _SHARED
    _SHARED = prepared
    try:
        with ProcessPoolExecutor(min(workers, len(jobs)),
                                 mp_context=multiprocessing.get_context("fork")) as pool:
            return list(pool.map(_replay_shared, jobs))
    finally:
        _SHARED = ()


def _replay_shared(job: tuple[SimulateOptions, bool]) -> list[int]:
    return _replay(_SHARED, job[0], unlimited=job[1])


@dataclass(frozen=True, slots=True)
class _Swept:
    """Every capacity's cached tokens of a sequential replay, from one pass (`_sweep`): the
    engine's requests in one sweep, each block-trace size's in its own."""

    streams: tuple[SweepResult, ...]
    stream: np.ndarray  # per request (log order): its stream
    index: np.ndarray  # ... and its place in that stream

    def cached(self, capacity_tokens: int | None) -> list[int] | None:
        """Each request's cached tokens at `capacity_tokens` (None: unlimited), or None
        where the sweep does not follow that capacity (replay it instead)."""
        out = np.zeros(len(self.stream), dtype=np.int64)
        for i, result in enumerate(self.streams):
            units = None if capacity_tokens is None else capacity_tokens // result.unit
            if not result.follows(units):
                return None
            mine = self.stream == i
            out[mine] = np.asarray(result.cached_tokens(units), dtype=np.int64)[self.index[mine]]
        return out.tolist()


def _sweep(prepared: Sequence[_Prepared], options: SimulateOptions) -> _Swept | None:
    """`_replay(prepared, options)` at every capacity in one pass (None: the engine's policy
    is not a stack algorithm, or the replay overlaps requests; docs/simulate.md)."""
    make = ENGINES[options.engine].sweep
    if options.concurrent or make is None:
        return None
    engine = _engine(replace(options, capacity_tokens=None), True)  # cuts the units
    sweeps: dict[int | None, Sweep] = {None: make(
        block_size=engine.unit, cache_output=options.cache_output)}  # trace block -> sweep
    stream, index = [], []
    seen: Counter[int | None] = Counter()
    expander = _Expander(prepared, engine)
    for p in prepared:
        key = p.trace_block if p.trace is not None else None
        if key not in sweeps:
            sweeps[key] = BlocktraceSweep(block_size=p.trace_block)
        stream.append(list(sweeps).index(key))
        index.append(seen[key])
        seen[key] += 1
        prompt, sequence = expander.units(p, options.cache_output and p.trace is None)
        sweeps[key].step(prompt, sequence=sequence)
    return _Swept(tuple(sweep.result() for sweep in sweeps.values()),
                  np.array(stream, dtype=np.int64), np.array(index, dtype=np.int64))


def _sweeps(prepared: Sequence[_Prepared], runs: Sequence[SimulateOptions],
            workers: int) -> list[_Swept | None]:
    """`_sweep(prepared, run)` of each run, in up to `workers` forked processes."""
    if workers <= 1 or len(runs) < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return [_sweep(prepared, run) for run in runs]
    global _SHARED
    _SHARED = prepared
    try:
        with ProcessPoolExecutor(min(workers, len(runs)),
                                 mp_context=multiprocessing.get_context("fork")) as pool:
            return list(pool.map(_sweep_shared, runs))
    finally:
        _SHARED = ()


def _sweep_shared(run: SimulateOptions) -> _Swept | None:
    return _sweep(_SHARED, run)


def _at_capacities(prepared: Sequence[_Prepared], options: SimulateOptions,
                   capacities: Sequence[int | None], workers: int,
                   swept: _Swept | None = None, sweep: bool = True) -> list[list[int]]:
    """Cached tokens of each request at each capacity: from one sweep where it follows
    (`swept`, else made here), the other capacities replayed one by one."""
    if swept is None and sweep:
        swept = _sweep(prepared, options)
    out: list[list[int] | None] = [None if swept is None else swept.cached(c)
                                   for c in capacities]
    todo = [i for i, cached in enumerate(out) if cached is None]
    replayed = _replays(prepared, [replace(options, capacity_tokens=capacities[i])
                                   for i in todo], workers) if todo else []
    for i, cached in zip(todo, replayed, strict=True):
        out[i] = cached
    return [cached for cached in out if cached is not None]


def replay_report(prepared: Sequence[_Prepared], options: SimulateOptions,
                  skipped: dict[str, int], *, workers: int = 1) -> SimulateReport:
    """Predicted and ideal replays, the miss classes and the totals."""
    unit, _ = engine_unit(options.engine, options.unit)
    predicted, ideal = _replays(prepared, [options, _IDEAL], workers)
    hosted = ENGINES[options.engine].hosted
    length = {p.id: p.n_tokens for p in prepared}
    per_request = tuple(
        RequestSim(p.id, p.session, p.n_tokens, p.observed, pred, ide,
                   _classify(p, pred, ide, length.get(p.prev) if p.prev else None, hosted,
                             unit if p.trace is None else p.trace_block))
        for p, pred, ide in zip(prepared, predicted, ideal, strict=True))
    misses = dict.fromkeys(MISS_CLASSES, 0)
    for r in per_request:
        for name, n in r.misses.items():
            misses[name] += n
    observed = [(r, p) for r, p in zip(per_request, prepared, strict=True)
                if r.observed is not None]
    prompt_tokens = sum(r.prompt_tokens for r in per_request)
    within = [abs(r.predicted - (r.observed or 0)) <= (unit if p.trace is None else p.trace_block)
              for r, p in observed]
    # The observed rate is the log's own: its cached over its prompt tokens (as bucket).
    logged = [(r.observed or 0, p.logged_prompt) for r, p in observed if p.logged_prompt]
    return SimulateReport(
        engine=options.engine, unit=unit, capacity_tokens=options.capacity_tokens,
        requests=len(per_request), prompt_tokens=prompt_tokens,
        hit_rate_observed=_rate(sum(c for c, _ in logged), sum(n or 0 for _, n in logged)),
        hit_rate_predicted=_rate(sum(predicted), prompt_tokens),
        hit_rate_ideal=_rate(sum(ideal), prompt_tokens),
        agreement=(sum(within) / len(within)) if within else None,
        approximate_requests=sum(p.approximate for p in prepared),
        observed_above_ideal=sum(max(0, (r.observed or 0) - r.ideal) for r, _ in observed),
        misses=misses, per_request=per_request, skipped=dict(skipped))


def _classify(p: _Prepared, predicted: int, ideal: int, prev_tokens: int | None,
              hosted: bool, unit: int) -> dict[str, int]:
    """Uncached prompt tokens of one request, per class (see the module docstring)."""
    n = p.n_tokens
    out: dict[str, int] = {}

    def add(name: str, tokens: int) -> None:
        if tokens > 0:
            out[name] = out.get(name, 0) + tokens

    got = predicted if p.observed is None else min(p.observed, n)
    # The classes partition the request's uncached tokens, n - got: those beyond what
    # the ideal cache (or the log, when it got more) holds, those the ideal holds but
    # this capacity / TTL lost, and those the model predicts cached but the log missed.
    beyond = n - max(ideal, got)
    if p.prev is None:
        add("cold", beyond)
    elif p.compacted:
        add("compaction", beyond)
    else:
        # What the predecessor already sent, as whole units this prompt could reuse.
        sent = (min(prev_tokens or 0, max(n - 1, 0)) // unit) * unit
        # A replay from usage assumes the session append-only: it cannot see a break.
        broken = 0 if p.segments is not None else max(0, sent - max(ideal, got))
        add("break", min(broken, beyond))
        add("new", beyond - min(broken, beyond))
    add("ttl" if hosted else "eviction", ideal - max(predicted, got))
    if p.observed is not None:
        add("provider" if hosted else "unexplained", min(predicted, ideal) - got)
    return out


def _rate(cached: int, prompt: int) -> float | None:
    return cached / prompt if prompt else None


def _hit_rate(prepared: Sequence[_Prepared], cached: Sequence[int]) -> float | None:
    return _rate(sum(cached), sum(p.n_tokens for p in prepared))


# -- what-ifs and fitting -------------------------------------------------------------


def _what_if(store: Store, options: SimulateOptions, transform: str,
             base: SimulateReport, workers: int = 1) -> WhatIfResult:
    render = replace(options.render, what_if=(*options.render.what_if, transform))
    changed = replace(options, render=render)
    prepared, _ = prepare(store, changed)
    predicted, ideal = _replays(prepared, [changed, _IDEAL], workers)
    base_cached = sum(r.predicted for r in base.per_request)
    return WhatIfResult(transform, _hit_rate(prepared, ideal), _hit_rate(prepared, predicted),
                        sum(predicted) - base_cached)


def fit_parameters(prepared: Sequence[_Prepared], options: SimulateOptions,
                   units_to_try: Sequence[int] | None = None, *,
                   workers: int = 1, sweep: bool = True) -> FitResult | None:
    """The unit and capacity whose replay reproduces the observed cached tokens best.

    Score: the share of observed requests predicted exactly, then the smaller mean
    absolute error (a coarser unit is "within one unit" of anything, so that alone would
    pick the largest). Units: the engine's candidates (16…512 tokens), or `units_to_try`.
    Capacities: unlimited and halvings of the log's prompt tokens, then a search between
    the best one's neighbours, coarse, then narrowing 8x per pass down to single blocks.
    Ties go to the smaller unit and the larger capacity. Each unit's candidates come from
    one sweep of the log (`engines.sweep`; every capacity at once), then the chosen one is
    replayed; `sweep=False` replays every candidate instead (the same result, ~100 replays:
    for the bench). `workers` > 1: the units' sweeps (or a step's replays) run in that many
    processes (same result).
    """
    observed = [p.observed for p in prepared if p.observed is not None]
    if not observed:
        return None  # nothing to fit to
    spec = ENGINES[options.engine]
    if spec.ttl_parameter is not None:
        return _fit_ttl(prepared, options, workers)
    # `units_to_try`: the unit is known (the caller inferred it): fit the capacity alone.
    units: Sequence[int | None] = (
        (units_to_try or _FIT_UNITS) if spec.block_parameter is not None
        else (None,))
    total = sum(p.n_tokens for p in prepared) or 1
    # every capacity of a unit from one pass (a unit's capacities replayed one by one where
    # its policy has no exact sweep)
    swept = dict(zip(units, _sweeps(prepared, [replace(options, unit=unit) for unit in units],
                                    workers) if sweep else [None] * len(units), strict=True))

    def scores(unit: int | None, capacities: Sequence[int | None],
               into: dict[int | None, tuple[float, float]]) -> None:
        todo = [c for c in dict.fromkeys(capacities) if c not in into]
        cached = _at_capacities(prepared, replace(options, unit=unit), todo, workers,
                                swept[unit], sweep=False)
        for c, hits in zip(todo, cached, strict=True):
            into[c] = _score(prepared, hits)

    best: tuple[tuple[float, float], int | None, int | None] | None = None
    for unit in units:
        size = unit or 1
        grid: list[int | None] = [None, *(max(size, total >> k) for k in range(12))]
        scored: dict[int | None, tuple[float, float]] = {}
        scores(unit, grid, scored)
        # Capacity matters between the largest capacity that scores below unlimited and
        # the smallest that scores like it: search that interval in whole blocks, coarse
        # then block by block around the best.
        finite = [c for c in grid if c is not None]
        knee = min((c for c in finite if scored[c] == scored[None]), default=None)
        below = max((c for c in finite if knee is not None and c < knee), default=None)
        if knee is not None and below is not None:
            lo, hi = below // size, knee // size
            step = max(1, (hi - lo) // 48)
            scores(unit, [blocks * size for blocks in range(lo, hi + 1, step)], scored)
            # then narrow around the best, each pass 8 times finer, down to single blocks:
            # a bounded number of replays however wide the interval (the exhaustive
            # block-by-block pass was 2 * step replays: thousands on a GB log)
            while step > 1:
                around = max((c for c in scored if c is not None), key=lambda c: scored[c])
                step = max(1, step // 8)
                scores(unit, [blocks * size for blocks in range(
                    max(1, around // size - 8 * step), around // size + 8 * step + 1, step)],
                    scored)
        for capacity, value in scored.items():
            candidate = (value, unit, capacity)
            if best is None or value > best[0] or (
                    value == best[0] and capacity is None and best[2] is not None):
                best = candidate
    assert best is not None
    _, unit, capacity = best
    chosen = replace(options, unit=unit, capacity_tokens=capacity)
    fitted_unit = engine_unit(options.engine, unit)[0]
    return FitResult(fitted_unit, capacity,
                     _agreement(prepared, _replay(prepared, chosen), fitted_unit))


def stored_rows(report: SimulateReport) -> list[tuple[str, str | None, int, int | None, int,
                                                       int, int | None, dict[str, int]]]:
    """The per-request results as `Store.save_simulation` takes them."""
    return [(r.id, r.session, r.prompt_tokens, r.observed, r.predicted, r.ideal, r.shortfall,
             dict(r.misses)) for r in report.per_request]


# Retention times tried for hosted engines: 1 minute to 1 day (Anthropic 5 min / 1 h,
# OpenAI in-memory "5-10 minutes" and 24 h extended retention).
_FIT_TTLS = (60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0)


def _fit_ttl(prepared: Sequence[_Prepared], options: SimulateOptions,
             workers: int = 1) -> FitResult:
    """A hosted engine's retention time that reproduces the observed values best (exact
    matches first, then the smaller mean error; ties go to the shorter TTL)."""
    unit = engine_unit(options.engine, options.unit)[0]
    best: tuple[tuple[float, float], float, float] | None = None
    runs: list[SimulateOptions | None] = [replace(options, ttl_seconds=ttl)
                                          for ttl in _FIT_TTLS]
    for ttl, cached in zip(_FIT_TTLS, _replays(prepared, runs, workers), strict=True):
        score = _score(prepared, cached)
        if best is None or score > best[0]:
            best = (score, ttl, _agreement(prepared, cached, unit))
    assert best is not None
    return FitResult(unit, None, best[2], best[1])


def _errors(prepared: Sequence[_Prepared], cached: Sequence[int]) -> list[int]:
    """|predicted − observed| of every request whose log reports cached tokens."""
    return [abs(c - p.observed) for p, c in zip(prepared, cached, strict=True)
            if p.observed is not None]


def _score(prepared: Sequence[_Prepared], cached: Sequence[int]) -> tuple[float, float]:
    """(share predicted exactly, − mean absolute error): what a fit maximises."""
    errors = _errors(prepared, cached)
    return sum(e == 0 for e in errors) / len(errors), -sum(errors) / len(errors)


def _agreement(prepared: Sequence[_Prepared], cached: Sequence[int], unit: int) -> float:
    errors = _errors(prepared, cached)
    return sum(e <= unit for e in errors) / len(errors)


def merge_replays(reports: Sequence[SimulateReport]) -> SimulateReport:
    """Replays of separate cache domains (`SimulateOptions.source_files`) as one report:
    counts and miss classes summed, hit rates token-weighted over all of them, each what-if's
    gain summed; the per-domain fit and capacity curve stay with each domain's report."""
    if len(reports) == 1:
        return reports[0]
    per_request = tuple(r for report in reports for r in report.per_request)
    prompt = sum(report.prompt_tokens for report in reports)
    predicted = sum(r.predicted for r in per_request)
    misses = dict.fromkeys(MISS_CLASSES, 0)
    for report in reports:
        for name, n in report.misses.items():
            misses[name] += n
    # Each domain's observed rate is over its log's own prompt tokens: weighted by those.
    observed_prompt = sum(_observed_basis(report) for report in reports
                          if report.hit_rate_observed is not None)
    observed = sum((report.hit_rate_observed or 0.0) * _observed_basis(report)
                   for report in reports if report.hit_rate_observed is not None)
    agreed = [(report.agreement, sum(r.observed is not None for r in report.per_request))
              for report in reports if report.agreement is not None]
    what_if = []
    for transform in dict.fromkeys(w.transform for report in reports for w in report.what_if):
        results = [w for report in reports for w in report.what_if if w.transform == transform]
        gain = sum(w.gain_tokens for w in results)
        ideal = [(w.hit_rate_ideal, report.prompt_tokens) for report in reports
                 for w in report.what_if if w.transform == transform]
        what_if.append(WhatIfResult(
            transform, _weighted(ideal), _rate(predicted + gain, prompt), gain))
    skipped: dict[str, int] = {}
    for report in reports:
        for reason, n in report.skipped.items():
            skipped[reason] = skipped.get(reason, 0) + n
    units = {report.unit for report in reports}
    largest = max(reports, key=lambda report: report.prompt_tokens)
    return SimulateReport(
        engine=largest.engine, unit=largest.unit if len(units) > 1 else units.pop(),
        capacity_tokens=None, requests=len(per_request), prompt_tokens=prompt,
        hit_rate_observed=_rate(round(observed), observed_prompt) if observed_prompt else None,
        hit_rate_predicted=_rate(predicted, prompt),
        hit_rate_ideal=_rate(sum(r.ideal for r in per_request), prompt),
        agreement=(sum(a * n for a, n in agreed) / sum(n for _, n in agreed)
                   if agreed and sum(n for _, n in agreed) else None),
        misses=misses, per_request=per_request, what_if=tuple(what_if), skipped=skipped,
        approximate_requests=sum(report.approximate_requests for report in reports),
        observed_above_ideal=sum(report.observed_above_ideal for report in reports))


def _observed_basis(report: SimulateReport) -> int:
    """The weight of a domain's observed hit rate: its observed requests' prompt tokens."""
    return sum(r.prompt_tokens for r in report.per_request if r.observed is not None)


def _weighted(pairs: Sequence[tuple[float | None, int]]) -> float | None:
    known = [(v, w) for v, w in pairs if v is not None]
    total = sum(w for _, w in known)
    return sum(v * w for v, w in known) / total if total else None
