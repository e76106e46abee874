"""The ``--json`` output shapes of every command, declared once.

Each command prints exactly one JSON document (docs/json.md). Its shape is declared
here as a `TypedDict`, nested objects as their own `TypedDict`; `SHAPES` maps a
command to its top-level one. docs/json.md carries one ``key | type | meaning`` table
per shape, and tests/test_json_shapes.py checks both ways that the tables and these
declarations agree (key names and types, recursively) and that each command's actual
output validates against its declaration.

Type conventions (as in docs/json.md, where ``None`` is spelled ``null``):

* ``int`` -- a JSON number without a fraction (never a bool);
* ``float`` -- a JSON number written with a fraction (``1.0``); a value that is a
  float or an int depending on the data (a median: odd counts give a whole number)
  is declared ``int | float``;
* ``X | None`` -- the value may be ``null``; nothing else is ever ``null``;
* ``NotRequired[X]`` -- the key may be absent (an option adds it);
* ``dict[str, X]`` -- an object with free keys (formats, causes, dimensions);
* ``object`` (spelled ``any`` in the docs) -- any JSON value: a finding's evidence, whose
  keys depend on its kind (docs/report.md lists them).

A leaf module: it imports nothing from prefixscope, so any module can import it.
"""

from typing import NotRequired, TypedDict

# ------------------------------------------------------------------ ingest


class IngestErrorJson(TypedDict):
    """One problem met while reading logs."""

    file: str  # as given / found
    line: int | None  # 1-based line, row or element; None for the whole file
    reason: str  # one line


class UsageSummaryJson(TypedDict):
    """What the store holds (per format, or every call once): each sum with its basis."""

    requests: int
    sessions: int
    with_body: int
    duplicates: int
    prompt_tokens: int | None
    prompt_requests: int
    cached_tokens: int | None
    cached_requests: int
    hit_rate: float | None
    rate_requests: int
    rate_prompt_tokens: int
    rate_cached_tokens: int


class IngestJson(TypedDict):
    """``prefixscope ingest --json``."""

    ingested: int
    already_present: int
    skipped: int
    by_format: dict[str, int]
    sessions: int
    duplicates: int
    files: int
    errors: list[IngestErrorJson]
    unrecognized: list[str]
    empty: list[str]
    engine_logs: list[str]
    formats: dict[str, UsageSummaryJson]
    totals: UsageSummaryJson


# ------------------------------------------------------------------ render


class RenderSegmentJson(TypedDict):
    """One segment span of the rendered prompt (ends exclusive)."""

    segment: str
    kind: str
    char_start: int
    char_end: int
    token_start: int
    token_end: int


class RenderJson(TypedDict):
    """``prefixscope render --json`` (``text`` with ``--show-text`` only)."""

    request: str
    gateway: str
    tokenizer: str
    tokens: int
    approximate: bool
    segments: list[RenderSegmentJson]
    text: NotRequired[str]


# ------------------------------------------------------------------ diff


class DivergenceJson(TypedDict):
    """Where two rendered prompts split."""

    token: int
    char_a: int
    char_b: int
    segment: str
    text_a: str
    text_b: str
    token_a: str | None
    token_b: str | None


class DiffPairJson(TypedDict):
    """One diffed pair of requests."""

    a: str
    b: str
    session: str | None
    tokens_a: int
    tokens_b: int
    first_divergence: DivergenceJson | None
    block_size: int
    reusable_tokens: int
    lost_tokens: int
    cause: str
    detail: str
    approximate: bool
    block_size_source: str
    observed_cached: int | None
    shortfall: int | None


class CauseTotalJson(TypedDict):
    """Pairs and lost tokens of one cause."""

    pairs: int
    lost_tokens: int


class DiffTotalsJson(TypedDict):
    """Sums over the diffed pairs."""

    pairs: int
    lost_tokens: int
    by_cause: dict[str, CauseTotalJson]
    skipped: int
    skipped_reasons: dict[str, int]


class DiffJson(TypedDict):
    """``prefixscope diff --json`` (one pair, ``--session`` or ``--all``)."""

    pairs: list[DiffPairJson]
    totals: DiffTotalsJson
    gateway: str
    tokenizer: str
    what_if: list[str]
    block_size_source: str


# ------------------------------------------------------------------ bucket


class HistogramBinJson(TypedDict):
    """A bin of cached tokens per request: whole tokens, ``[lo, hi)``."""

    lo: int
    hi: int
    requests: int


class FractionBinJson(TypedDict):
    """A bin of cached / prompt tokens per request."""

    lo: float
    hi: float
    requests: int


class BoundaryJson(TypedDict):
    """The segment boundary a spike's constant corresponds to."""

    segment_before: str
    segment_after: str
    token: int
    requests: int
    rendered: int
    distinct_after: int  # always counted here (never None once a boundary is found)


class SpikeJson(TypedDict):
    """A cached-token value held by many requests of a group."""

    cached_tokens: int
    requests: int
    share: float
    blocks: float | None
    boundary: BoundaryJson | None
    explanation: str


class BucketGroupJson(TypedDict):
    """One ``--by`` group."""

    key: dict[str, str | None]
    requests: int
    prompt_tokens: int
    cached_tokens: int
    hit_rate: float | None
    mean_request_hit_rate: float | None
    zero_cached: int
    histogram: list[HistogramBinJson]
    fraction_histogram: list[FractionBinJson]
    block_size: int | None
    block_size_basis: str
    block_size_candidates: list[int]
    spikes: list[SpikeJson]
    notes: list[str]


class BucketTotalsJson(TypedDict):
    """Sums over every group."""

    requests: int
    prompt_tokens: int
    cached_tokens: int
    hit_rate: float | None
    without_usage: int


class BreakdownRowJson(TypedDict):
    key: dict[str, object]
    requests: int
    prompt_tokens: int
    cached_tokens: int
    hit_rate: float | None
    missed_tokens: int
    lost_tokens: int
    spend_usd: float | None
    lost_usd: float | None
    top_cause: str | None


class BreakdownJson(TypedDict):
    """The ledger by dimensions (report --by), or usage by them (bucket's `spend`)."""

    dimensions: list[str]
    basis: str
    rows: list[BreakdownRowJson]


class BucketJson(TypedDict):
    """``prefixscope bucket --json``."""

    groups: list[BucketGroupJson]
    totals: BucketTotalsJson
    by: list[str]
    block_size: int | None
    block_size_source: str
    block_size_candidates: list[int]
    spend: BreakdownJson | None
    notes: list[str]


# ------------------------------------------------------------------ segments


class SegmentRowJson(TypedDict):
    """One segment path of a census."""

    segment: str
    kind: str
    requests: int
    distinct: int
    pairs: int
    change_rate: float | None
    unique_per_request: bool
    change_kinds: dict[str, int]
    token_start_median: int | float | None  # a median: whole for an odd count
    tokens_after_median: int | float | None
    invalidated_tokens: float | None
    preview: str


class SegmentsTotalsJson(TypedDict):
    """Counts of one census."""

    requests: int
    pairs: int
    segments: int
    without_body: int
    hash_version: str


class SegmentsJson(TypedDict):
    """``prefixscope segments --json`` (without ``--by``): one census."""

    segments: list[SegmentRowJson]
    totals: SegmentsTotalsJson


class SegmentsGroupJson(TypedDict):
    """One ``--by`` group's census."""

    key: dict[str, str | None]
    segments: list[SegmentRowJson]
    totals: SegmentsTotalsJson


class SegmentsByTotalsJson(TypedDict):
    """Counts summed over the groups (no ``segments``: paths are per group)."""

    requests: int
    pairs: int
    without_body: int
    hash_version: str


class SegmentsByJson(TypedDict):
    """``prefixscope segments --by DIM --json``: one census per group."""

    groups: list[SegmentsGroupJson]
    by: list[str]
    totals: SegmentsByTotalsJson


# ------------------------------------------------------------------ index

# Command (with the option that changes the shape, if any) -> its top-level shape.
# `sql --json` is not here: its rows are the query's own columns (a list of objects).
# ------------------------------------------------------------------ simulate


class HitRatesJson(TypedDict):
    """Token-weighted hit rates: observed (over the requests whose log reports cached
    tokens), predicted by the engine model, ideal (unlimited capacity, no TTL)."""

    observed: float | None
    predicted: float | None
    ideal: float | None


# Uncached prompt tokens per class; `break` is a Python keyword, hence the functional form.
MissesJson = TypedDict("MissesJson", {  # noqa: UP013
    "new": int, "cold": int, "break": int, "eviction": int, "ttl": int, "compaction": int,
    "provider": int, "unexplained": int})


class WhatIfJson(TypedDict):
    transform: str
    hit_rate_ideal: float | None
    hit_rate_predicted: float | None
    gain_tokens: int


class CurvePointJson(TypedDict):
    capacity_tokens: int | None
    hit_rate: float | None
    within_tokens: int  # cached tokens its own session had sent before
    across_tokens: int  # cached tokens only another session had sent
    hit_rate_within: float | None
    hit_rate_across: float | None


class FitJson(TypedDict):
    block_size: int
    capacity_tokens: int | None
    agreement: float | None
    ttl_seconds: float | None


class SimulateRequestJson(TypedDict):
    id: str
    session: str | None
    prompt_tokens: int
    observed: int | None
    predicted: int
    ideal: int
    shortfall: int | None
    misses: dict[str, int]


class SimulateJson(TypedDict):
    """``prefixscope simulate --json``."""

    engine: str
    block_size: int
    capacity_tokens: int | None
    requests: int
    prompt_tokens: int
    hit_rate: HitRatesJson
    agreement: float | None
    misses: MissesJson
    what_if: list[WhatIfJson]
    capacity_curve: list[CurvePointJson]
    fit: FitJson | None
    skipped: dict[str, int]
    approximate_requests: int
    observed_above_ideal: int
    per_request: NotRequired[list[SimulateRequestJson]]


# ------------------------------------------------------------------ calls


class CallEventJson(TypedDict):
    """A session event the log records before a call."""

    kind: str  # one of model.EVENT_KINDS
    detail: str  # what changed, for a person
    time: str | None  # ISO 8601, UTC
    line: int | None  # the log line (or element) that records it


class CallVerdictJson(TypedDict):
    """The provider's own verdict on a call's miss, as the log kept it."""

    reason: str
    missed_tokens: int | None


class CallJson(TypedDict):
    """One request of the ledger's basis."""

    id: str
    time: str | None  # ISO 8601, UTC
    model: str | None
    prompt_tokens: int
    cached_tokens: int
    cache_write_tokens: int | None
    missed_tokens: int
    cause: str | None
    causes: dict[str, int]
    break_kind: str | None
    break_segment: str | None
    gap_seconds: float | None
    events: list[CallEventJson]
    recorded: str | None
    verdict: CallVerdictJson | None


class SessionCallsJson(TypedDict):
    """One session's calls, in time order."""

    session: str | None
    requests: int
    prompt_tokens: int
    cached_tokens: int
    cache_write_tokens: int | None
    missed_tokens: int
    hit_rate: float | None
    by_cause: dict[str, int]
    calls: list[CallJson]


class CallsJson(TypedDict):
    """``prefixscope calls --json``."""

    basis: str
    session: str | None
    requests: int
    prompt_tokens: int
    cached_tokens: int
    missed_tokens: int
    by_cause: dict[str, int]
    outside_requests: int
    sessions: list[SessionCallsJson]


# ------------------------------------------------------------------ report


class BasisJson(TypedDict):
    """The requests every rate and total is over (docs/report.md#the-ledger)."""

    source: str  # observed | predicted | none
    requests: int
    prompt_tokens: int
    cached_tokens: int
    outside_requests: int
    outside_prompt_tokens: int
    outside_reason: str


class ReplayBasisJson(TypedDict):
    """The basis's requests the replay rebuilt: observed, predicted, ideal over them."""

    requests: int
    prompt_tokens: int
    cached_tokens: int
    replayed_prompt_tokens: int
    logged_prompt_tokens: int | None  # of the calls logging it whose body was rendered
    rebuilt_prompt_tokens: int  # those calls' rendered prompt tokens
    coverage: float | None
    partial: bool
    not_rebuilt: int  # requests whose prompt the log could not rebuild
    hit_rate_observed: float | None
    hit_rate_predicted: float | None
    hit_rate_ideal: float | None
    with_body: int
    above_ideal: str | None  # why observed is above ideal; None when it is not


class RecordedModelJson(TypedDict):
    model: str
    requests: int
    recorded_usd: float
    list_usd: float


class RecordedCostJson(TypedDict):
    """What the log itself says the basis's calls cost, beside list prices."""

    requests: int
    usd: float
    compared_requests: int
    compared_recorded_usd: float
    compared_list_usd: float
    ratio: float | None
    by_model: list[RecordedModelJson]


class MoneyJson(TypedDict):
    """The basis in dollars."""

    source: str
    priced_requests: int
    unpriced_requests: int
    unknown_models: list[str]
    spend_usd: float
    saved_usd: float
    write_premium_usd: float
    net_saved_usd: float
    lost_usd: float
    lost_usd_by_cause: dict[str, float]
    recorded: RecordedCostJson | None


class VerdictCallJson(TypedDict):
    """One call that carries a verdict: the provider's side beside prefixscope's."""

    id: str
    session: str | None
    reason: str  # the provider's reason
    provider_missed_tokens: int | None  # the verdict's cache_missed_input_tokens
    cause: str  # prefixscope's: the call's largest loss (break:<kind>), none
    kind: str | None  # the break's kind, when it broke
    segment: str | None  # the part the ledger blames, else where the diff located a change
    lost_tokens: int  # the ledger's lost tokens of the call
    cause_tokens: int  # of them, the cause's
    first_divergence_token: int | None  # the diff's first divergent token (rendered tokens)
    divergence_segment: str | None  # the segment that token lies in
    agrees: bool | None  # None: the reason says nothing prefixscope can compare
    diffed: bool  # both bodies rebuilt and diffed with the session predecessor's


class ProviderVerdictsJson(TypedDict):
    """prefixscope's cause x the provider's own cache-miss reason, over the calls that
    carry one (Claude Code's ``diagnostics.cache_miss_reason``)."""

    calls: int
    compared: int  # calls whose reason names a change (not ``unavailable``)
    agree: int  # of those, where prefixscope's cause says the same
    provider_missed_tokens: int  # the verdicts' cache_missed_input_tokens, summed
    lost_tokens: int  # the ledger's lost tokens of the same calls
    matrix: dict[str, dict[str, int]]  # our cause -> provider reason -> calls
    per_call: list[VerdictCallJson]  # each call that carries one


class LedgerJson(TypedDict):
    """Every missed token of the basis, by cause; the causes sum to missed_tokens."""

    basis: BasisJson
    missed_tokens: int
    by_cause: dict[str, object]  # cause -> tokens; "break" -> {tokens, by_kind, by_segment}
    lost_tokens: int  # the causes that are losses (not cold, new, rounding)
    lost_usd: dict[str, float] | None
    provider_verdicts: ProviderVerdictsJson


class PolicyOptionJson(TypedDict):
    """One way of keeping a kind's expired prefixes, priced over its calls."""

    name: str  # as-logged | ttl-1h | keep-warm | ttl-1h+keep-warm, each +move-volatile
    saved_usd: float
    cost_usd: float
    net_usd: float
    kept_requests: int
    kept_tokens: int
    pings: int
    ping_minutes: float | None
    moved_tokens: int  # the break tokens the move reads (0: the option does not move)
    moved_requests: int
    moved_usd: float  # their break dollars, part of saved_usd


class PolicyTurnJson(TypedDict):
    """A kind's pauses before one turn kind's calls, under the kind's choice."""

    turn: str  # user turn | tool loop | turn unknown
    requests: int
    expired_requests: int
    ttl_tokens: int
    kept_requests: int
    kept_tokens: int
    saved_usd: float
    pings: int
    ping_usd: float
    moved_tokens: int
    moved_usd: float


class PolicyPartJson(TypedDict):
    """One kind of request: its options priced, the cheapest chosen."""

    agent: str  # main | sub-agent | compaction
    project: str | None
    model: str | None
    requests: int
    expired_requests: int
    ttl_tokens: int
    choice: str
    pin_backend: bool
    net_usd: float
    options: list[PolicyOptionJson]
    turns: list[PolicyTurnJson]
    routing_tokens: int
    pin_usd: float | None
    reused_share: float | None
    break_even_share: float | None
    payback_pause_minutes: float | None
    volatile_tokens: int  # the break tokens a moved volatile part would not break
    move: str  # "applicable" (its options priced), or why not
    detail: str


class PolicyJson(TypedDict):
    """`--what-if policy`: the kinds' choices; their nets sum to `net_usd`."""

    net_usd: float
    pinning: str
    parts: list[PolicyPartJson]


class ReportWhatIfJson(TypedDict):
    """A what-if priced over the log."""

    name: str
    detail: str
    gain_tokens: int | None
    hit_rate_predicted: float | None
    saved_usd: float | None
    cost_usd: float | None
    net_usd: float | None
    policy: PolicyJson | None


class ReportSummaryJson(TypedDict):
    """The whole log in numbers, over one stated basis."""

    requests: int
    sessions: int
    prompt_tokens: int
    cached_tokens: int
    hit_rate: float | None
    hit_rate_predicted: float | None
    hit_rate_ideal: float | None
    engine: str | None
    replayed_requests: int
    replayed_prompt_tokens: int
    basis: BasisJson | None
    replay: ReplayBasisJson | None
    money: MoneyJson | None


class FindingJson(TypedDict):
    """One thing costing cache."""

    kind: str
    severity: str
    title: str
    segment: str | None
    lost_tokens: int
    share: float
    lost_usd: float | None
    evidence: dict[str, object]
    fix: str
    fix_hit_rate: float | None


class GateCheckJson(TypedDict):
    name: str
    passed: bool
    value: int | float | None
    threshold: int | float | None
    detail: str


class GateJson(TypedDict):
    passed: bool
    checks: list[GateCheckJson]


class ScenarioJson(TypedDict):
    scenario: str
    turns: int
    stable_prefix_tokens: int


class ReportJson(TypedDict):
    """`prefixscope report --json`."""

    summary: ReportSummaryJson
    ledger: LedgerJson | None
    what_if: list[ReportWhatIfJson]
    by: BreakdownJson | None
    findings: list[FindingJson]
    gate: GateJson
    scenarios: list[ScenarioJson]
    notes: list[str]
# ------------------------------------------------------------------ engine-log


class EngineFileJson(TypedDict):
    """One file read, and what it is."""

    file: str
    kind: str  # vllm | sglang | prometheus
    year_from: str  # stamps | file context | unknown


class EngineSkipJson(TypedDict):
    """A line that looked like an engine line and did not parse."""

    file: str
    line: int
    reason: str


class EngineConfigJson(TypedDict):
    """A configuration fact, where the log first states it."""

    key: str
    value: str
    file: str
    line: int


class EngineRateJson(TypedDict):
    """A rate over the stats lines that report it (fractions 0..1)."""

    points: int
    min: float | None
    median: float | None
    max: float | None
    last: float | None


class EngineSeriesSummaryJson(TypedDict):
    """The series' rates summarized."""

    prefix_hit_rate: EngineRateJson
    external_hit_rate: EngineRateJson
    kv_usage: EngineRateJson
    cpu_prefix_hit_rate: EngineRateJson


class EngineServerJson(TypedDict):
    """One series: one server run and engine (vLLM) or rank (SGLang)."""

    server: int
    file: str
    source: str
    process: str | None
    engine: str
    why: str
    lines: int
    first_line: int
    last_line: int
    first: str | None
    last: str | None
    prefix_hit_rate: EngineRateJson
    external_hit_rate: EngineRateJson
    kv_usage: EngineRateJson
    new_tokens: int | None
    cached_tokens: int | None
    hit_rate: float | None


class EngineStatsJson(TypedDict):
    """One periodic stats line."""

    time: str | None
    file: str
    line: int
    engine: str
    prompt_throughput: float | None
    generation_throughput: float | None
    running: int | None
    waiting: int | None
    preemptions: int | None
    kv_usage: float | None
    prefix_hit_rate: float | None
    external_hit_rate: float | None
    mm_hit_rate: float | None
    cpu_prefix_hit_rate: float | None
    process: str | None
    server: int


class EngineOffloadJson(TypedDict):
    """KV offload traffic from the KV Transfer metrics lines."""

    transfer_lines: int
    store_points: int
    load_points: int
    store_bytes: float
    load_bytes: float
    store_operations: int | None
    load_operations: int | None


class EnginePrometheusJson(TypedDict):
    """The Prometheus dumps' counters and gauges."""

    files: int
    samples: int
    prefix_queries: float | None
    prefix_hits: float | None
    hit_rate: float | None
    external_queries: float | None
    external_hits: float | None
    external_hit_rate: float | None
    prompt_tokens: float | None
    prompt_tokens_cached: float | None
    kv_usage: float | None
    preemptions: float | None
    running: float | None
    waiting: float | None
    offload_store_bytes: float | None
    offload_load_bytes: float | None


class EngineSglangJson(TypedDict):
    """SGLang prefill lines added up."""

    prefill_lines: int
    new_tokens: int
    cached_tokens: int
    hit_rate: float | None
    max_token_usage: float | None
    max_queue: int | None


class EngineLmcacheJson(TypedDict):
    """LMCache connector lines added up."""

    lookups: int
    lookup_tokens: int
    hit_tokens: int
    hit_rate: float | None
    loading_lookups: int
    load_tokens: int
    stores: int
    stored_tokens: int
    stores_from: str
    retrievals: int
    required_tokens: int
    retrieved_tokens: int
    failed_retrievals: int
    lost_blocks: int
    retrieved_rate: float | None


class EngineFindingJson(TypedDict):
    """One finding with its evidence numbers."""

    kind: str
    title: str
    evidence: dict[str, int | float | str | None]
    fix: str


class EngineLogJson(TypedDict):
    """``prefixscope engine-log --json``."""

    files: list[EngineFileJson]
    lines: int
    matched: dict[str, int]
    skipped: int
    skips: list[EngineSkipJson]
    year_known: bool
    block_size: int | None
    config: list[EngineConfigJson]
    first: str | None
    last: str | None
    series_summary: EngineSeriesSummaryJson
    servers: list[EngineServerJson]
    series: list[EngineStatsJson]
    offload: EngineOffloadJson
    prometheus: EnginePrometheusJson | None
    sglang: EngineSglangJson | None
    lmcache: EngineLmcacheJson | None
    findings: list[EngineFindingJson]


SHAPES: dict[str, type] = {
    "ingest": IngestJson,
    "render": RenderJson,
    "diff": DiffJson,
    "bucket": BucketJson,
    "segments": SegmentsJson,
    "segments --by": SegmentsByJson,
    "simulate": SimulateJson,
    "report": ReportJson,
    "calls": CallsJson,
    "engine-log": EngineLogJson,
}
