"""What a serving engine's own logs say about its cache: the answer request logs cannot give.

Request logs show what each call got; the engine log shows the tiers behind it. The
incident this exists for: vLLM's CPU offload stored 198,422 times and loaded 0 times
while ``External prefix cache hit rate`` stayed 0.0% for 11 days -- visible only here.
`analyze_engine_logs` reads vLLM / SGLang server logs and Prometheus dumps (parsed by
`prefixscope.ingest.engine_logs`, whose docstring cites the upstream format strings) into
one `EngineLogAnalysis`: the hit-rate series, configuration facts (block size, KV
connector, offload target, speculative decoding), offload store/load counters, the
Prometheus counters' token-weighted hit rates, SGLang's cached-token totals, and
findings with their evidence numbers and a fix.

Rules (thresholds are module constants, documented in docs/engine-log.md):

* ``l2-write-only``: something was stored to the offload / external tier (KV Transfer
  store bytes in the log, LMCache store lines, or ``vllm:kv_offload_*`` store counters),
  nothing was ever loaded back (no load bytes, no LMCache lookup that loads), and every
  ``External prefix cache hit rate`` seen (and the Prometheus external hits) is 0 -- for
  a tier that should serve reads: a P/D prefiller (``kv_role`` ``kv_producer``) stores
  for its decoder, which is its job. With vLLM's OffloadingConnector and a model with
  several KV-cache groups (sliding window, speculative decoding, hybrid) the finding
  names the known cause first: the connector's lookup needs a hit in every group.
  ``external-cache-no-hits``: a connector is configured and the external rate is 0.0%
  on every one of >= `MIN_LINES` busy lines, with no transfer counters to say more.
* ``lmcache-retrieve-failed``: LMCache retrieved fewer tokens than it required, or a
  block it found "can't be retrieved": a storage-backend fault behind a lookup hit.
* ``low-prefix-hit-rate``: the median local prefix-cache hit rate over busy stats lines
  (running > 0 or prompt throughput > 0; >= `MIN_LINES` of them) is below `LOW_HIT_RATE`;
  likewise the Prometheus hits / queries and SGLang's cached / (new + cached).
* ``kv-pressure``: stats lines with GPU KV cache usage >= `KV_FULL` while requests wait
  or are preempted (SGLang: token usage >= `KV_FULL` with a queue; Prometheus: usage >=
  `KV_FULL` with preemptions).
* ``prefix-caching-disabled``: the configuration says ``enable_prefix_caching`` False
  (SGLang: ``disable_radix_cache=True``): every prefix hit is 0 by configuration.

vLLM's ``Prefix cache hit rate`` is a rolling window over recent requests, not per
interval, so the series is summarized by min / median / max, never summed. Lines of
several server runs or engines in one log are separate series (`ServerSeries`), each
with its own trend; a finding's duration adds up the spans of its series. Prometheus
counters are cumulative: each dump is one snapshot of one server; counters of several
dumps are added (several servers), so give one dump per server.
"""

from __future__ import annotations

import bisect
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from prefixscope.analyses.bucket import BLOCK_SIZES
from prefixscope.ingest import Tally, expand_paths
from prefixscope.ingest.engine_logs import (
    PD_TRANSFER_CONNECTORS,
    ConfigFact,
    EngineLogFile,
    EngineLogInput,
    EngineSkip,
    LmcachePoint,
    PrefillPoint,
    PromSample,
    StatsPoint,
    TransferPoint,
    read_engine_source,
    sniff_source,
    stamp,
)
from prefixscope.ingest.source import Source

LOW_HIT_RATE = 0.20  # a median local prefix hit rate below this is a finding
KV_FULL = 0.95  # GPU KV cache usage at or above this counts as full
MIN_LINES = 3  # busy stats lines needed before a rate finding is stated
MAX_LISTED_SKIPS = 100

__all__ = [
    "EngineLogAnalysis", "EngineLogFinding", "OffloadCounters", "PrometheusSummary",
    "LmcacheSummary", "RateSummary", "ServerSeries", "SglangSummary", "StatsPoint",
    "analyze_engine_files", "stamp",
    "analyze_engine_logs", "classify_engine_paths", "find_engine_logs",
]


@dataclass(frozen=True)
class EngineLogFinding:
    """One thing the engine logs clearly show, with the numbers that show it."""

    kind: str  # l2-write-only, external-cache-no-hits, low-prefix-hit-rate, kv-pressure, ...
    title: str
    evidence: Mapping[str, object]  # JSON-able values only
    fix: str


@dataclass(frozen=True, slots=True)
class RateSummary:
    """A rate over the stats lines that report it (fractions 0..1)."""

    points: int
    min: float | None
    median: float | None
    max: float | None
    last: float | None


@dataclass(frozen=True, slots=True)
class OffloadCounters:
    """KV offload traffic from the log's ``KV Transfer metrics`` lines (interval totals)."""

    transfer_lines: int
    store_points: int  # lines whose store (GPU -> tier) bytes are > 0
    load_points: int  # lines whose load (tier -> GPU) bytes are > 0
    store_bytes: float
    load_bytes: float
    store_operations: int | None  # from ``..._size_count`` where the line has it
    load_operations: int | None


@dataclass(frozen=True, slots=True)
class PrometheusSummary:
    """Counters and gauges of the Prometheus dumps (summed over engines and dumps)."""

    files: int
    samples: int
    prefix_queries: float | None  # tokens queried against the local prefix cache
    prefix_hits: float | None
    hit_rate: float | None  # hits / queries
    external_queries: float | None
    external_hits: float | None
    external_hit_rate: float | None
    prompt_tokens: float | None
    prompt_tokens_cached: float | None  # local + external
    kv_usage: float | None  # the highest engine's vllm:kv_cache_usage_perc
    preemptions: float | None
    running: float | None
    waiting: float | None
    offload_store_bytes: float | None
    offload_load_bytes: float | None


@dataclass(frozen=True, slots=True)
class LmcacheSummary:
    """LMCache connector lines added up (lookups and stores)."""

    lookups: int
    lookup_tokens: int  # the looked-up requests' tokens
    hit_tokens: int  # LMCache's prefix hits
    hit_rate: float | None  # hit / lookup tokens
    loading_lookups: int  # lookups that load something from LMCache (need to load > 0)
    load_tokens: int
    stores: int
    stored_tokens: int
    stores_from: str  # "engine" (LMCache's ``Stored``), "adapter" (``Storing``), "none"
    retrievals: int  # ``Retrieved N out of M`` lines
    required_tokens: int  # their M
    retrieved_tokens: int  # their N
    failed_retrievals: int  # retrievals that got fewer tokens than required
    lost_blocks: int  # ``can't be retrieved`` warnings: in the index, not readable
    retrieved_rate: float | None  # retrieved / lookup tokens (None without ``Retrieved``)


@dataclass(frozen=True, slots=True)
class SglangSummary:
    """SGLang ``Prefill batch`` lines added up."""

    prefill_lines: int
    new_tokens: int
    cached_tokens: int
    hit_rate: float | None  # cached / (new + cached), SGLang's own definition
    max_token_usage: float | None
    max_queue: int | None


@dataclass(frozen=True, slots=True)
class ServerSeries:
    """The periodic lines of one server run and one engine (vLLM ``Engine NNN`` of one
    process; SGLang one rank's prefill lines): a series with its own trend."""

    server: int  # 1, 2, ... in the order the series start
    file: str
    source: str  # vllm-log or sglang-log
    process: str | None  # vLLM's process tag ("APIServer pid=3646"), when printed
    engine: str  # vLLM "000" / "4 engines aggregated" / "v0"; SGLang's rank tags
    why: str  # why it is a series of its own: "first in the file", "another process", ...
    lines: int
    first_line: int
    last_line: int
    first: datetime | None
    last: datetime | None
    prefix_hit_rate: RateSummary  # vLLM lines (empty for SGLang)
    external_hit_rate: RateSummary
    kv_usage: RateSummary
    new_tokens: int | None  # SGLang: #new-token summed (None for vLLM)
    cached_tokens: int | None
    hit_rate: float | None  # SGLang: cached / (new + cached)


@dataclass(frozen=True)
class EngineLogAnalysis:
    """Everything `prefixscope engine-log` reports."""

    files: tuple[str, ...]
    kinds: Mapping[str, str]  # file -> vllm | sglang | prometheus
    lines: int
    matched: Mapping[str, int]  # lines per kind: stats, kv-transfer, config, prefill, sample...
    skipped: int
    skips: tuple[EngineSkip, ...]  # the first MAX_LISTED_SKIPS
    year_known: bool  # False: vLLM's MM-DD times (or SGLang's HH:MM:SS): no year
    undated: frozenset[str]  # the files whose times have no year
    year_from: Mapping[str, str]  # file -> "stamps", "file context" or "unknown"
    servers: tuple[ServerSeries, ...]  # one series per server run and engine
    block_size: int | None
    config: tuple[ConfigFact, ...]  # each (key, value) once, first place it is stated
    series: tuple[StatsPoint, ...]
    prefix_hit_rate: RateSummary
    external_hit_rate: RateSummary
    kv_usage: RateSummary
    cpu_prefix_hit_rate: RateSummary  # V0's CPU tier, apart from the GPU one
    first: datetime | None
    last: datetime | None
    offload: OffloadCounters
    prometheus: PrometheusSummary | None
    sglang: SglangSummary | None
    lmcache: LmcacheSummary | None
    findings: tuple[EngineLogFinding, ...]
    # the block size the log's own cached values support (SGLang's #cached-token, LMCache's
    # hit tokens) when it is not the one the log states (`block_size`); else None
    cached_block_size: int | None = None

    @property
    def effective_block_size(self) -> int | None:
        """The block size to replay with: the one the cached values support where they
        contradict the stated one, else the stated one."""
        return self.cached_block_size or self.block_size

    def config_value(self, key: str) -> str | None:
        """The last value the logs state for `key` (the effective one)."""
        values = [c.value for c in self.config if c.key == key]
        return values[-1] if values else None


# ------------------------------------------------------------------ finding files


def classify_engine_paths(paths: Sequence[str]
                          ) -> tuple[list[EngineLogInput], list[tuple[str, str]]]:
    """The engine files among `paths` (dirs walked, globs expanded like ingest), each with
    its kind (each file sniffed once: `analyze_engine_logs` reads it as that kind), and
    (path, reason) for each path given by name that is not one or cannot be read."""
    tally = Tally()
    found: list[EngineLogInput] = []
    problems: list[tuple[str, str]] = []
    given = set(paths)
    for source in expand_paths([p for p in paths if p != "-"], tally):
        try:
            kind = sniff_source(source)
        finally:
            source.close()
        if kind is not None and source.path is not None:
            found.append(EngineLogInput(source.path, kind))
        elif source.name in given:
            problems.append((source.name, "not a vLLM / SGLang server log or a Prometheus "
                                          "/metrics dump"))
    problems += [(e.file, e.reason) for e in tally.errors]
    if "-" in given:
        problems.append(("-", "engine logs are read from files, not stdin"))
    return found, problems


def find_engine_logs(paths: Sequence[str]) -> list[Path]:
    """The files under `paths` (files, directories recursively, globs) whose content
    sniffs as a vLLM / SGLang server log or a Prometheus dump."""
    return [found.path for found in classify_engine_paths(paths)[0]]


# ------------------------------------------------------------------ analysis


def analyze_engine_logs(files: Sequence[Path | EngineLogInput]) -> EngineLogAnalysis:
    """Read and analyze engine files: paths (each sniffed for its kind) or files already
    classified (an ingest's `engine_inputs`, `classify_engine_paths`: read as their kind).

    Raises:
        ValueError: a file is not an engine log (its name and why, one line).
        OSError: a file cannot be read.
    """
    parsed: list[EngineLogFile] = []
    for file in files:
        path = file.path if isinstance(file, EngineLogInput) else Path(file)
        source = Source.from_path(path)
        try:
            kind = file.kind if isinstance(file, EngineLogInput) else sniff_source(source)
            if kind is None:
                raise ValueError(f"{path}: not a vLLM / SGLang server log or a Prometheus "
                                 "/metrics dump")
            parsed.append(read_engine_source(source, kind))
        finally:
            source.close()
    return analyze_engine_files(parsed)


def analyze_engine_files(parsed: Sequence[EngineLogFile]) -> EngineLogAnalysis:
    """`analyze_engine_logs` over already parsed files."""
    matched: Counter[str] = Counter()
    skips: list[EngineSkip] = []
    config: list[ConfigFact] = []
    seen_facts: set[tuple[str, str]] = set()
    series: list[StatsPoint] = []
    transfers: list[TransferPoint] = []
    prefills: list[PrefillPoint] = []
    lmc: list[LmcachePoint] = []
    prom_files: list[EngineLogFile] = []
    servers: list[ServerSeries] = []
    for f in parsed:
        matched.update(f.matched)
        skips.extend(f.skips)
        for fact in f.config:
            if (fact.key, fact.value) not in seen_facts:
                seen_facts.add((fact.key, fact.value))
                config.append(fact)
        stats, file_prefills = _split_servers(f, servers)
        series.extend(stats)
        transfers.extend(f.transfers)
        prefills.extend(file_prefills)
        lmc.extend(f.lmcache)
        if f.kind == "prometheus":
            prom_files.append(f)
    timed: list[Timed] = [*series, *transfers, *prefills, *lmc]
    dated = {f.file for f in parsed if f.year_known}
    # Placeholder years do not compare with real ones: with both, span the dated files only.
    times = [p.time for p in timed if p.time is not None
             and (p.file in dated or len(dated) in (0, len(parsed)))]
    offload = _offload(transfers)
    prom = _prometheus(prom_files) if prom_files else None
    sglang = _sglang(prefills) if prefills else None
    analysis = EngineLogAnalysis(
        files=tuple(f.file for f in parsed), kinds={f.file: f.kind for f in parsed},
        lines=sum(f.lines for f in parsed), matched=dict(sorted(matched.items())),
        skipped=len(skips), skips=tuple(skips[:MAX_LISTED_SKIPS]),
        year_known=all(f.year_known for f in parsed),
        undated=frozenset(f.file for f in parsed if not f.year_known),
        year_from={f.file: f.year_from for f in parsed}, servers=tuple(servers),
        block_size=_block_size(config),
        config=tuple(config), series=tuple(series),
        prefix_hit_rate=_rates(p.prefix_hit_rate for p in series),
        external_hit_rate=_rates(p.external_hit_rate for p in series),
        kv_usage=_rates(p.kv_usage for p in series),
        cpu_prefix_hit_rate=_rates(p.cpu_prefix_hit_rate for p in series),
        first=min(times) if times else None, last=max(times) if times else None,
        offload=offload, prometheus=prom, sglang=sglang,
        lmcache=_lmcache(lmc) if lmc else None, findings=())
    supported, values = _cached_block_size(analysis.block_size, prefills, lmc)
    analysis = replace(analysis, cached_block_size=supported)
    findings = (_block_mismatch(analysis, values)
                + _l2(analysis, transfers, lmc) + _lmcache_failed(analysis, lmc)
                + _low_hit(analysis, one_copy_per_batch(prefills))
                + _kv_pressure(analysis, one_copy_per_batch(prefills))
                + _caching_off(analysis))
    return replace(analysis, findings=tuple(findings))


Periodic = StatsPoint | PrefillPoint


def _split_servers(f: EngineLogFile, servers: list[ServerSeries]
                   ) -> tuple[list[StatsPoint], list[PrefillPoint]]:
    """`f`'s stats and prefill lines with their `server` set, each new series appended to
    `servers`. A series is one (process, engine) of vLLM or one rank of SGLang; the same
    one starts again after a start-up line (a restart: the pid may be 1 again in a
    container) or when its time goes back (several runs pasted one after another)."""
    startups = sorted(f.startups)
    out: dict[str, list[Periodic]] = {"stats": [], "prefill": []}
    for source, points in (("vllm-log", f.stats), ("sglang-log", f.prefills)):
        current: dict[tuple[str | None, str], tuple[int, Periodic]] = {}
        members: dict[int, list[Periodic]] = {}
        whys: dict[int, str] = {}
        for p in points:
            if isinstance(p, StatsPoint):
                key: tuple[str | None, str] = (p.process, p.engine)
            else:
                key = (None, p.ranks)
            held = current.get(key)
            why = None
            if held is None:
                why = _why_new(key, current)
            else:
                last = held[1]
                restart = next((n for n in startups if last.line < n < p.line), None)
                if restart is not None:
                    why = f"a restart (start-up line {restart})"
                elif p.time is not None and last.time is not None and p.time < last.time:
                    why = f"its time goes back at line {p.line}"
            if why is not None:
                server = len(servers) + len(whys) + 1
                whys[server] = why
                members[server] = []
            else:
                assert held is not None
                server = held[0]
            p = replace(p, server=server)
            current[key] = (server, p)
            members[server].append(p)
            out["stats" if source == "vllm-log" else "prefill"].append(p)
        for server, group in members.items():
            servers.append(_server(server, f.file, source, group, whys[server]))
    return ([p for p in out["stats"] if isinstance(p, StatsPoint)],
            [p for p in out["prefill"] if isinstance(p, PrefillPoint)])


def _why_new(key: tuple[str | None, str],
             current: Mapping[tuple[str | None, str], object]) -> str:
    if not current:
        return "first in the file"
    process, engine = key
    if process is not None and all(k[0] != process for k in current):
        return f"another process ({process})"
    return f"another engine ({engine})" if engine else "another process"


def _server(server: int, file: str, source: str, group: Sequence[Periodic],
            why: str) -> ServerSeries:
    stats = [p for p in group if isinstance(p, StatsPoint)]
    prefills = [p for p in group if isinstance(p, PrefillPoint)]
    times = [p.time for p in group if p.time is not None]
    first = group[0]
    engine = first.engine if isinstance(first, StatsPoint) else first.ranks
    new = sum(p.new_tokens for p in prefills) if prefills else None
    cached = sum(p.cached_tokens for p in prefills) if prefills else None
    return ServerSeries(
        server=server, file=file, source=source,
        process=first.process if isinstance(first, StatsPoint) else None, engine=engine,
        why=why, lines=len(group), first_line=group[0].line, last_line=group[-1].line,
        first=min(times) if times else None, last=max(times) if times else None,
        prefix_hit_rate=_rates(p.prefix_hit_rate for p in stats),
        external_hit_rate=_rates(p.external_hit_rate for p in stats),
        kv_usage=_rates(p.kv_usage for p in stats), new_tokens=new, cached_tokens=cached,
        hit_rate=cached / (new + cached) if new is not None and cached is not None
        and new + cached else None)


def _block_size(config: Sequence[ConfigFact]) -> int | None:
    """The last block size the logs state (a hybrid model's raise comes after the args)."""
    sizes = [int(c.value) for c in config if c.key == "block_size" and c.value.isdigit()]
    return sizes[-1] if sizes else None


def _rates(values: Iterable[float | None]) -> RateSummary:
    seen = [v for v in values if v is not None]
    if not seen:
        return RateSummary(0, None, None, None, None)
    return RateSummary(len(seen), min(seen), statistics.median(seen), max(seen), seen[-1])


_STORE_KEYS = ("vllm:kv_offload_store_bytes", "GPU_to_CPU_total_bytes")
_LOAD_KEYS = ("vllm:kv_offload_load_bytes", "CPU_to_GPU_total_bytes")
_STORE_OPS = ("vllm:kv_offload_store_size_count",)
_LOAD_OPS = ("vllm:kv_offload_load_size_count",)


def _first_key(values: Mapping[str, float], keys: tuple[str, ...]) -> float | None:
    for key in keys:
        if key in values:
            return values[key]
    return None


def _offload(transfers: Sequence[TransferPoint]) -> OffloadCounters:
    store_bytes = load_bytes = 0.0
    store_points = load_points = 0
    store_ops: int | None = None
    load_ops: int | None = None
    for t in transfers:
        stored = _first_key(t.values, _STORE_KEYS) or 0.0
        loaded = _first_key(t.values, _LOAD_KEYS) or 0.0
        store_bytes += stored
        load_bytes += loaded
        store_points += stored > 0
        load_points += loaded > 0
        if (ops := _first_key(t.values, _STORE_OPS)) is not None:
            store_ops = (store_ops or 0) + int(ops)
        if (ops := _first_key(t.values, _LOAD_OPS)) is not None:
            load_ops = (load_ops or 0) + int(ops)
    return OffloadCounters(len(transfers), store_points, load_points, store_bytes, load_bytes,
                           store_ops, load_ops)


# Prometheus names as exposed (counters carry _total); the first name present wins, so a
# metric exported under its new and its deprecated name is not counted twice.
_P_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
_P_HITS = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
_P_EXT_QUERIES = ("vllm:external_prefix_cache_queries_total",)
_P_EXT_HITS = ("vllm:external_prefix_cache_hits_total",)
_P_PROMPT = ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total")
_P_CACHED = ("vllm:prompt_tokens_cached_total", "sglang:cached_tokens_total")
_P_KV = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")
_P_PREEMPT = ("vllm:num_preemptions_total",)
_P_RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs")
_P_WAITING = ("vllm:num_requests_waiting", "sglang:num_queue_reqs")


def _prom_value(samples: Sequence[PromSample], names: tuple[str, ...], *,
                label: tuple[str, str] | None = None, reduce: str = "sum") -> float | None:
    for name in names:
        values = [s.value for s in samples if s.name == name
                  and (label is None or label in s.labels)]
        if values:
            return max(values) if reduce == "max" else sum(values)
    return None


def _ratio(hits: float | None, queries: float | None) -> float | None:
    return hits / queries if hits is not None and queries else None


def _prometheus(files: Sequence[EngineLogFile]) -> PrometheusSummary:
    def total(names: tuple[str, ...], label: tuple[str, str] | None = None,
              reduce: str = "sum") -> float | None:
        values = [_prom_value(f.samples, names, label=label, reduce=reduce) for f in files]
        present = [v for v in values if v is not None]
        if not present:
            return None
        return max(present) if reduce == "max" else sum(present)

    queries, hits = total(_P_QUERIES), total(_P_HITS)
    ext_q, ext_h = total(_P_EXT_QUERIES), total(_P_EXT_HITS)
    store = total(("vllm:kv_offload_store_bytes_total",))
    if store is None:
        store = total(("vllm:kv_offload_total_bytes_total",), label=("transfer_type",
                                                                      "GPU_to_CPU"))
    load = total(("vllm:kv_offload_load_bytes_total",))
    if load is None:
        load = total(("vllm:kv_offload_total_bytes_total",), label=("transfer_type",
                                                                     "CPU_to_GPU"))
    return PrometheusSummary(
        files=len(files), samples=sum(len(f.samples) for f in files),
        prefix_queries=queries, prefix_hits=hits, hit_rate=_ratio(hits, queries),
        external_queries=ext_q, external_hits=ext_h, external_hit_rate=_ratio(ext_h, ext_q),
        prompt_tokens=total(_P_PROMPT), prompt_tokens_cached=total(_P_CACHED),
        kv_usage=total(_P_KV, reduce="max"), preemptions=total(_P_PREEMPT),
        running=total(_P_RUNNING), waiting=total(_P_WAITING),
        offload_store_bytes=store, offload_load_bytes=load)


def _lmcache(points: Sequence[LmcachePoint]) -> LmcacheSummary:
    lookups = [p for p in points if p.kind == "lookup"]
    # One store is one ``Storing`` line of the adapter and, when the engine logs at INFO,
    # one ``Stored`` line: a file with ``Stored`` lines is counted by them (what was
    # stored), another by its ``Storing`` lines.
    engine_files = {p.file for p in points if p.kind == "stored"}
    stores = [p for p in points if p.kind == "stored"
              or (p.kind == "store" and p.file not in engine_files)]
    adapter = any(p.kind == "store" for p in stores)
    retrievals = [p for p in points if p.kind == "retrieve"]
    tokens = sum(p.tokens for p in lookups)
    hits = sum(p.hit_tokens for p in lookups)
    retrieved = sum(p.load_tokens for p in retrievals)
    return LmcacheSummary(
        lookups=len(lookups), lookup_tokens=tokens, hit_tokens=hits,
        hit_rate=hits / tokens if tokens else None,
        loading_lookups=sum(p.load_tokens > 0 for p in lookups),
        load_tokens=sum(p.load_tokens for p in lookups), stores=len(stores),
        stored_tokens=sum(p.tokens for p in stores),
        stores_from="engine" if engine_files else "adapter" if adapter else "none",
        retrievals=len(retrievals), required_tokens=sum(p.hit_tokens for p in retrievals),
        retrieved_tokens=retrieved,
        failed_retrievals=sum(p.load_tokens < p.hit_tokens for p in retrievals),
        lost_blocks=sum(p.kind == "retrieve-failed-block" for p in points),
        retrieved_rate=retrieved / tokens if retrievals and tokens else None)


_PP_RANK = re.compile(r"(?:^| )PP(\d+)(?: |$)")
_CP_RANK = re.compile(r"(?:^| )ATTN_CP(\d+)(?: |$)")
# Rank tags whose schedulers all report the same batch: every pipeline stage (PP) runs the
# batches all stages run, every attention context-parallel rank (ATTN_CP) holds a slice of
# the same sequences. DP ranks schedule requests of their own: their lines add up.
_REPEATING_RANKS = (_PP_RANK, _CP_RANK)


def one_copy_per_batch(prefills: Sequence[PrefillPoint]) -> list[PrefillPoint]:
    """The prefill lines that count each batch once: of each rank kind that repeats a
    batch (`_REPEATING_RANKS`), the lines of the lowest rank of each file."""
    kept = list(prefills)
    for rank in _REPEATING_RANKS:
        lowest: dict[str, int] = {}
        for p in kept:
            if m := rank.search(p.ranks):
                lowest[p.file] = min(lowest.get(p.file, int(m.group(1))), int(m.group(1)))
        kept = [p for p in kept if p.file not in lowest
                or (m := rank.search(p.ranks)) is None or int(m.group(1)) == lowest[p.file]]
    return kept


def _sglang(prefills: Sequence[PrefillPoint]) -> SglangSummary:
    # the lines of one pipeline stage and one context-parallel rank count, the others
    # repeat them
    prefills = one_copy_per_batch(prefills)
    new = sum(p.new_tokens for p in prefills)
    cached = sum(p.cached_tokens for p in prefills)
    usages = [p.token_usage for p in prefills if p.token_usage is not None]
    queues = [p.queued for p in prefills if p.queued is not None]
    return SglangSummary(len(prefills), new, cached,
                         cached / (new + cached) if new + cached else None,
                         max(usages) if usages else None, max(queues) if queues else None)


# ------------------------------------------------------------------ findings


def _iso(t: datetime | None) -> str | None:
    return stamp(t)


Timed = StatsPoint | TransferPoint | PrefillPoint | LmcachePoint


def _span(points: Sequence[Timed],
          undated: frozenset[str] = frozenset()) -> dict[str, object]:
    """First and last time of `points`, the series they come from (`ServerSeries`; other
    lines by file) and the seconds they cover: each series' span added up, not the time
    from the first series' start to the last one's end; no duration across files one of
    which has only year-less stamps (`undated`)."""
    # A transfer or LMCache line belongs to the series of the stats line before it.
    anchors: dict[str, list[tuple[int, int]]] = {}
    for p in points:
        if getattr(p, "server", 0):
            anchors.setdefault(p.file, []).append((p.line, getattr(p, "server", 0)))
    for marks in anchors.values():
        marks.sort()
    groups: dict[tuple[str, object], list[datetime]] = {}
    for p in points:
        server = getattr(p, "server", 0)
        if not server and p.file in anchors:
            marks = anchors[p.file]
            at = bisect.bisect_right(marks, (p.line, 1 << 62)) - 1
            server = marks[max(at, 0)][1]
        key: tuple[str, object] = ("server", server) if server else ("file", p.file)
        if p.time is not None:
            groups.setdefault(key, []).append(p.time)
    if not groups:
        return {"first": None, "last": None, "duration_s": None, "series": 0}
    files = {p.file for p in points}
    mixed = len(files) > 1 and bool(files & undated) and bool(files - undated)
    # Placeholder years do not compare with real ones: with both, span the dated files.
    times = [p.time for p in points if p.time is not None
             and (not mixed or p.file not in undated)]
    covered = sum((max(ts) - min(ts)).total_seconds() for ts in groups.values())
    return {"first": _iso(min(times)), "last": _iso(max(times)),
            "duration_s": None if mixed else round(covered, 3), "series": len(groups)}


def _busy(p: StatsPoint) -> bool:
    return bool(p.running) or bool(p.prompt_throughput)


_L2_FIX = (
    "Every store is a GPU->CPU copy that nothing reads back. Likely causes: (1) the prompt "
    "prefix changes before the offloaded blocks are reused (a volatile header or reordered "
    "JSON early in the prompt: run `prefixscope report` / `diff` on the request logs to find "
    "the segment); (2) block hashes differ between the process that stored and the one "
    "that looks up (a restart or another instance with a random hash seed: set "
    "PYTHONHASHSEED and a sha256 prefix_caching_hash_algo); (3) the connector's load path "
    "is off (the connector's retrieve disabled) or its block size does not match. Fix the "
    "cause, or drop the offload tier to save the copies.")

# vLLM's OffloadingConnector and a model whose KV cache has several groups: the known
# cause of a tier that stores and never loads (the incident of design.md §1).
_GROUPS_CAUSE = (
    "Known cause, first: vLLM's OffloadingConnector answers a lookup only with a hit in "
    "every KV-cache group (vllm/distributed/kv_transfer/kv_connector/v1/offloading/"
    "scheduler.py, OffloadingConnectorScheduler._lookup_complete_chunks in vLLM 0.33.0: "
    "a group with no hit chunk returns 0 for the whole request). The sliding-window and "
    "speculative-decoding (MTP / EAGLE) groups of a hybrid model do not keep their tail "
    "blocks offloaded, so every lookup returns 0 and the offloaded full-attention prefix "
    "is never brought back. No setting changes that lookup (--kv-offloading-size is the "
    "same connector): it needs a vLLM change (or a release that fixes it); until then "
    "the tier only costs its copies. Other causes, if the model has a single group: ")
_GROUP_FACTS = ("sliding_window", "kv_cache_groups", "hybrid_kv_cache", "speculative_decoding")
_READING_ROLES = ("kv_both", "kv_consumer")


def _groups_cause(a: EngineLogAnalysis, connector: str | None) -> list[ConfigFact]:
    """The facts that show a model with several KV-cache groups behind an OffloadingConnector
    ([] when the connector is another or the logs show a single group)."""
    if connector is None or not (connector.startswith("OffloadingConnector")
                                 or "OffloadingConnector" in connector):
        return []
    return [c for c in a.config if c.key in _GROUP_FACTS
            and not (c.key == "kv_cache_groups" and c.value == "1")]


def _enough_stores(points: Sequence[Timed], prom_store: float | None) -> bool:
    """Enough evidence that a tier stores and never loads: a Prometheus store counter, or
    store points at `MIN_LINES` distinct seconds at least (undated: `MIN_LINES` points) --
    not one cold request's stores within a second, which nothing could have loaded yet."""
    if prom_store:
        return True
    seconds = {p.time.replace(microsecond=0) for p in points if p.time is not None}
    undated = sum(p.time is None for p in points)
    return len(seconds) + undated >= MIN_LINES


def _l2(a: EngineLogAnalysis, transfers: Sequence[TransferPoint],
        lmc: Sequence[LmcachePoint]) -> list[EngineLogFinding]:
    ext_lines = [p for p in a.series if p.external_hit_rate is not None]
    ext_max = max((p.external_hit_rate or 0.0 for p in ext_lines), default=None)
    prom = a.prometheus
    prom_store = prom.offload_store_bytes if prom else None
    prom_load = prom.offload_load_bytes if prom else None
    prom_ext_hits = prom.external_hits if prom else None
    connector = a.config_value("kv_connector")
    role = a.config_value("kv_role")
    lm = a.lmcache
    stored = a.offload.store_bytes > 0 or bool(prom_store) or bool(lm and lm.stored_tokens)
    loaded = (a.offload.load_bytes > 0 or bool(prom_load)
              or bool(lm and (lm.retrieved_tokens if lm.retrievals else lm.loading_lookups)))
    ext_zero = (ext_max is None or ext_max == 0.0) and not prom_ext_hits
    if role is not None and role not in _READING_ROLES:
        # A P/D prefiller (kv_producer) stores for the decoder: loading is not its job.
        return []
    common: dict[str, object] = {
        "connector": connector, "kv_role": role,
        "offload_target": a.config_value("offload_target"),
        "external_rate_lines": len(ext_lines), "external_hit_rate_max": ext_max}
    store_points: list[Timed] = [t for t in transfers
                                 if (_first_key(t.values, _STORE_KEYS) or 0.0) > 0]
    store_points += [p for p in lmc if p.kind in ("store", "stored") and p.tokens > 0]
    if stored and not loaded and ext_zero and _enough_stores(store_points, prom_store):
        lmc_evidence: dict[str, object] = {} if lm is None else {
            "lmcache_stores": lm.stores, "lmcache_stored_tokens": lm.stored_tokens,
            "lmcache_lookups": lm.lookups, "lmcache_hit_tokens": lm.hit_tokens,
            "lmcache_loading_lookups": lm.loading_lookups}
        cause = _groups_cause(a, connector)
        evidence = {
            **common,
            "store_points": a.offload.store_points, "store_bytes": a.offload.store_bytes,
            "store_operations": a.offload.store_operations,
            "load_points": a.offload.load_points, "load_bytes": a.offload.load_bytes,
            "prometheus_store_bytes": prom_store, "prometheus_load_bytes": prom_load,
            "prometheus_external_hits": prom_ext_hits, **lmc_evidence,
            "known_cause": "offloading-lookup-needs-every-kv-cache-group" if cause else None,
            "known_cause_evidence": "; ".join(f"{c.key}={c.value} ({c.file}:{c.line})"
                                              for c in cause) or None,
            **_span([*store_points, *ext_lines], a.undated)}
        if a.offload.store_points:
            where = f"{a.offload.store_points:,} store points, {_bytes(a.offload.store_bytes)}"
        elif lm is not None and lm.stored_tokens:
            where = f"{lm.stores:,} LMCache stores, {lm.stored_tokens:,} tokens"
        else:
            where = f"{_bytes(prom_store or 0.0)} (Prometheus)"
        rate = (f"; external prefix cache hit rate 0.0% in {len(ext_lines):,} stats lines"
                if ext_lines else "")
        why = (" (vLLM's offload lookup needs a hit in every KV-cache group; this model has "
               "several)" if cause else "")
        return [EngineLogFinding(
            "l2-write-only",
            f"offload tier{f' ({connector})' if connector else ''} stores and never loads: "
            f"{where} stored, 0 loaded{rate}{why}", evidence,
            _GROUPS_CAUSE + _L2_FIX if cause else _L2_FIX)]
    busy_ext = [p for p in ext_lines if _busy(p)]
    if (connector and not stored and not loaded and ext_zero
            and len(busy_ext) >= MIN_LINES):
        evidence = {**common, "busy_lines": len(busy_ext), "transfer_lines":
                    a.offload.transfer_lines, **_span(busy_ext, a.undated)}
        pd = connector.split(" ", 1)[0] in PD_TRANSFER_CONNECTORS
        return [EngineLogFinding(
            "external-cache-no-hits",
            f"external KV cache ({connector}{f', {role}' if role else ''}) never hit: "
            f"external prefix cache hit rate 0.0% in all {len(busy_ext):,} busy stats lines"
            + (" (a P/D transfer connector: expected on a prefill instance)" if pd else ""),
            evidence,
            f"{connector} answers no lookup with a hit. Check that it stores at all (KV "
            "Transfer metrics lines, vllm:kv_offload_* counters) and, if it does, the causes "
            "of a write-only tier: a prefix that changes before reuse, hash seeds that "
            "differ between processes (PYTHONHASHSEED), a disabled load path.")]
    return []


_LMC_FAILED_FIX = (
    "LMCache's index says the chunks are there and its storage backend does not return "
    "them: a storage fault, not a miss (the lookup counted them as hits, so LMCache's hit "
    "rate overstates what was loaded; vLLM recomputes them). Check the backend the "
    "lookup trusts: a remote store (Mooncake master with no data behind the key, a "
    "restarted or evicting Redis / store), a local disk whose files were removed, a "
    "CPU pool evicted between lookup and load. LMCache/LMCache#1690 is this case with "
    "Mooncake; restarting the store only hides it.")


def _lmcache_failed(a: EngineLogAnalysis,
                    lmc: Sequence[LmcachePoint]) -> list[EngineLogFinding]:
    lm = a.lmcache
    if lm is None or not (lm.failed_retrievals or lm.lost_blocks):
        return []
    failed = [p for p in lmc if p.kind == "retrieve" and p.load_tokens < p.hit_tokens]
    lost = [p for p in lmc if p.kind == "retrieve-failed-block"]
    short = lm.required_tokens - lm.retrieved_tokens
    return [EngineLogFinding(
        "lmcache-retrieve-failed",
        f"LMCache lookups hit but loads fail: {lm.failed_retrievals:,} of "
        f"{lm.retrievals:,} retrievals got fewer tokens than required ({short:,} tokens "
        f"short), {lm.lost_blocks:,} blocks in the storage that can't be retrieved",
        {"lookups": lm.lookups, "hit_tokens": lm.hit_tokens, "retrievals": lm.retrievals,
         "required_tokens": lm.required_tokens, "retrieved_tokens": lm.retrieved_tokens,
         "failed_retrievals": lm.failed_retrievals, "lost_blocks": lm.lost_blocks,
         "hit_rate": lm.hit_rate, "retrieved_rate": lm.retrieved_rate,
         **_span([*failed, *lost], a.undated)}, _LMC_FAILED_FIX)]


def _low_hit(a: EngineLogAnalysis, prefills: Sequence[PrefillPoint]) -> list[EngineLogFinding]:
    out: list[EngineLogFinding] = []
    fix = ("The engine reuses little of each prompt. Before blaming capacity, find what "
           "changes early in the prompt: `prefixscope report` / `bucket` / `diff` on the "
           "request logs (a volatile header, reordered tools or JSON keys, a template that "
           "re-renders history); then `simulate` says how much is eviction.")
    busy = [p for p in a.series if _busy(p) and p.prefix_hit_rate is not None]
    if len(busy) >= MIN_LINES:
        rates = [p.prefix_hit_rate or 0.0 for p in busy]
        median = statistics.median(rates)
        cpu = [p.cpu_prefix_hit_rate for p in busy if p.cpu_prefix_hit_rate is not None]
        cpu_median = statistics.median(cpu) if cpu else None
        if median < LOW_HIT_RATE:
            out.append(EngineLogFinding(
                "low-prefix-hit-rate",
                f"local prefix cache hit rate {median:.1%} (median of {len(busy):,} busy "
                "stats lines)" + ("" if cpu_median is None else
                                  f"; GPU tier only, the CPU tier's median is {cpu_median:.1%}"),
                {"source": "vllm-log", "busy_lines": len(busy), "median": median,
                 "cpu_median": cpu_median,
                 "min": min(rates), "max": max(rates), "last_rate": rates[-1],
                 "threshold": LOW_HIT_RATE, **_span(busy, a.undated)}, fix))
    prom = a.prometheus
    if prom and prom.hit_rate is not None and prom.hit_rate < LOW_HIT_RATE:
        out.append(EngineLogFinding(
            "low-prefix-hit-rate",
            f"prefix cache hits / queries {prom.hit_rate:.1%} over "
            f"{prom.prefix_queries or 0:,.0f} queried tokens (Prometheus)",
            {"source": "prometheus", "queries": prom.prefix_queries, "hits": prom.prefix_hits,
             "hit_rate": prom.hit_rate, "threshold": LOW_HIT_RATE}, fix))
    sg = a.sglang
    if (sg and sg.hit_rate is not None and sg.prefill_lines >= MIN_LINES
            and sg.hit_rate < LOW_HIT_RATE):
        out.append(EngineLogFinding(
            "low-prefix-hit-rate",
            f"SGLang radix cache hit rate {sg.hit_rate:.1%}: {sg.cached_tokens:,} cached of "
            f"{sg.cached_tokens + sg.new_tokens:,} prefill tokens",
            {"source": "sglang-log", "prefill_lines": sg.prefill_lines,
             "cached_tokens": sg.cached_tokens, "new_tokens": sg.new_tokens,
             "hit_rate": sg.hit_rate, "threshold": LOW_HIT_RATE,
             **_span(prefills, a.undated)}, fix))
    return out


_KV_FIX = ("The KV cache is full while work waits: blocks of earlier turns are evicted "
           "before they are reused, and preempted requests recompute. Give the cache more "
           "room (gpu-memory-utilization, an fp8 KV cache, more GPUs) or admit less "
           "(max-num-seqs, the router's concurrency); `prefixscope simulate --fit` tells "
           "how many misses are eviction.")


def _kv_pressure(a: EngineLogAnalysis,
                 prefills: Sequence[PrefillPoint]) -> list[EngineLogFinding]:
    out: list[EngineLogFinding] = []
    full = [p for p in a.series if p.kv_usage is not None and p.kv_usage >= KV_FULL
            and (bool(p.waiting) or bool(p.preemptions))]
    if full:
        out.append(EngineLogFinding(
            "kv-pressure",
            f"GPU KV cache >= {KV_FULL:.0%} full with requests waiting or preempted in "
            f"{len(full):,} of {len(a.series):,} stats lines",
            {"source": "vllm-log", "lines": len(full), "of_lines": len(a.series),
             "max_kv_usage": max(p.kv_usage or 0.0 for p in full),
             "preemptions": sum(p.preemptions or 0 for p in a.series),
             "max_waiting": max(p.waiting or 0 for p in full), "threshold": KV_FULL,
             **_span(full, a.undated)}, _KV_FIX))
    sg_full = [p for p in prefills if p.token_usage is not None and p.token_usage >= KV_FULL
               and bool(p.queued)]
    if sg_full:
        out.append(EngineLogFinding(
            "kv-pressure",
            f"SGLang token usage >= {KV_FULL:.0%} with a queue in {len(sg_full):,} of "
            f"{len(prefills):,} prefill lines",
            {"source": "sglang-log", "lines": len(sg_full), "of_lines": len(prefills),
             "max_token_usage": max(p.token_usage or 0.0 for p in sg_full),
             "max_queue": max(p.queued or 0 for p in sg_full), "threshold": KV_FULL,
             **_span(sg_full, a.undated)}, _KV_FIX))
    prom = a.prometheus
    if prom and prom.kv_usage is not None and prom.kv_usage >= KV_FULL and prom.preemptions:
        out.append(EngineLogFinding(
            "kv-pressure",
            f"KV cache usage {prom.kv_usage:.1%} with {prom.preemptions:,.0f} preemptions "
            "(Prometheus)",
            {"source": "prometheus", "kv_usage": prom.kv_usage, "preemptions": prom.preemptions,
             "waiting": prom.waiting, "threshold": KV_FULL}, _KV_FIX))
    return out


# Of the log's non-zero cached values, this share at least must be multiples of a block size
# for the values to support it (as `bucket` infers one).
_ALIGNED_SHARE = 0.9


def _cached_block_size(stated: int | None, prefills: Sequence[PrefillPoint],
                       lmc: Sequence[LmcachePoint]) -> tuple[int | None, list[int]]:
    """(the block size the log's own cached values support, those values) when the log
    states a block size that fewer than 90% of them are multiples of (else None): SGLang's
    ``#cached-token`` (one copy of each batch) and LMCache's lookup hit tokens. At least
    `MIN_LINES` values are needed to say so."""
    values = [p.cached_tokens for p in one_copy_per_batch(prefills) if p.cached_tokens > 0]
    values += [p.hit_tokens for p in lmc if p.kind == "lookup" and p.hit_tokens > 0]
    if stated is None or len(values) < MIN_LINES or \
            sum(v % stated == 0 for v in values) >= _ALIGNED_SHARE * len(values):
        return None, values
    fits = [bs for bs in BLOCK_SIZES
            if sum(v % bs == 0 for v in values) >= _ALIGNED_SHARE * len(values)]
    return (max(fits) if fits else None), values


def _block_mismatch(a: EngineLogAnalysis, values: Sequence[int]) -> list[EngineLogFinding]:
    """The stated block size and the one the cached values support, both with their
    sources, when they differ."""
    if a.cached_block_size is None or a.block_size is None:
        return []
    stated = [c for c in a.config if c.key == "block_size"][-1]
    aligned = sum(v % a.block_size == 0 for v in values)
    return [EngineLogFinding(
        "block-size-mismatch",
        f"the log states block size {a.block_size} ({stated.file}:{stated.line}), but its "
        f"cached values are multiples of {a.cached_block_size}: {aligned} of {len(values)} "
        f"are multiples of {a.block_size}; the cache matches in {a.cached_block_size}-token "
        "units",
        {"stated_block_size": a.block_size, "stated_at": f"{stated.file}:{stated.line}",
         "cached_values_block_size": a.cached_block_size, "cached_values": len(values),
         "multiples_of_stated": aligned},
        f"Read hits in {a.cached_block_size}-token units (the replay uses "
        f"{a.cached_block_size}); pass --block-size to replay with another.")]


def _caching_off(a: EngineLogAnalysis) -> list[EngineLogFinding]:
    off = [c for c in a.config if c.key == "enable_prefix_caching" and c.value == "False"]
    if not off:
        return []
    c = off[-1]
    return [EngineLogFinding(
        "prefix-caching-disabled",
        "prefix caching is off: every prompt is computed from its first token",
        {"file": c.file, "line": c.line, "setting": "enable_prefix_caching=False"},
        "Turn it on (vLLM: drop --no-enable-prefix-caching; SGLang: drop "
        "--disable-radix-cache) unless the workload never repeats a prefix.")]


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} TiB"
