"""Serving-engine logs -> typed events: vLLM and SGLang server logs and Prometheus dumps.

These files hold no model calls (ingest counts them apart, `engine_log_kind`); what they
hold is the engine's own view of its cache, which the request logs cannot show (an L2
tier that stores and never loads, a KV cache full enough to preempt). Pure: text in,
values out; a line that looks like one of the lines below but does not parse is a
counted `EngineSkip` with its line number, never an exception.

The exact strings come from the engines' source:

* vLLM periodic stats, ``vllm/v1/metrics/loggers.py`` ``LoggingStatLogger.log()``. Newer
  trees join parts with ``", "`` after ``"Engine %03d: "`` (or ``"{N} Engines Aggregated: "``
  with data parallelism): ``Avg prompt throughput: %.1f tokens/s``, ``Avg generation
  throughput: %.1f tokens/s``, ``Running: %d reqs``, ``Waiting: %d reqs``, optional
  ``Deferred: %d reqs``, ``Preemptions: %d`` (only when > 0), ``GPU KV cache usage:
  %.1f%%``, ``Prefix cache hit rate: %.1f%%``, optional ``Corrupted: %d reqs``,
  ``External prefix cache hit rate: %.1f%%`` (only when a KV connector reported stats),
  ``MM cache hit rate: %.1f%%``. Mid-2025 trees had one fixed format string with the
  first six fields; the V0 engine (``vllm/engine/metrics.py`` ``LoggingStatLogger.log()``,
  removed in 0.11) printed ``Running``, ``Swapped``, ``Pending`` and ``GPU/CPU KV cache
  usage`` without ``Engine NNN:``, then a line of its own, ``Prefix cache hit rate: GPU:
  %.2f%%, CPU: %.2f%%``: the GPU and CPU tiers' rates, attached to the stats line before
  it. Every part is read by its own label, so any subset in any order parses.
* vLLM KV-connector stats, ``vllm/distributed/kv_transfer/kv_connector/v1/metrics.py``
  ``KVConnectorLogging.log()``: ``"KV Transfer metrics: %s"`` with ``k=v`` pairs joined by
  ``", "``, one interval's totals (reset after each line). The OffloadingConnector's
  ``reduce()`` (``.../v1/offloading_connector.py``, later ``.../offloading/metrics.py``)
  gives ``GPU_to_CPU_total_bytes`` / ``CPU_to_GPU_total_bytes`` (+ ``_total_time``) in
  older trees and the flat names ``vllm:kv_offload_store_bytes`` /
  ``vllm:kv_offload_load_bytes`` (+ ``_size_count`` operations) in newer ones.
* vLLM configuration: ``vLLM API server version X``, ``non-default args: {...}`` (a Python
  dict repr, ``vllm/entrypoints/utils.py`` ``log_non_default_args``), ``Initializing a V1
  LLM engine (vX) with config: ...``, and for hybrid models ``Setting attention block size
  to %d tokens to ensure that attention page size is >= mamba page size.``
  (``vllm/model_executor/models/config.py``), ``kv cache group sizes %s``
  (``vllm/v1/core/kv_cache_utils.py``: one size per KV-cache group, printed when there
  are several) and ``Creating v1 connector with name: %s and engine_id: %s``
  (``.../kv_connector/factory.py``). The connector's role is ``kv_role`` of
  ``KVTransferConfig`` (``vllm/config/kv_transfer.py``: ``kv_producer``, ``kv_consumer``,
  ``kv_both``). A start-up line after stats lines of the same process is a restart: the
  analysis starts a new series there. vLLM's record prefix is
  ``LEVEL MM-DD HH:MM:SS [file.py:NN]`` (no year), often after ``(APIServer pid=N)`` and
  after an ISO timestamp a container runtime adds.
* LMCache's vLLM connector, ``lmcache/integration/vllm/vllm_v1_adapter.py``: ``Reqid: %s,
  Total tokens %d, [Inference Engine computed tokens: %d, ]LMCache hit tokens: %d, need to
  load: %d`` (a lookup) and ``Storing KV cache for %d out of %d tokens
  [(skip_leading_tokens=%d)] for request %s`` (a store asked for). LMCache's engine,
  ``lmcache/v1/cache_engine.py``, says what it did: ``[[req_id=%s] ]Stored %d out of
  total %d tokens. size: ...`` (stored), ``[[req_id=%s] ]Retrieved %d out of %d required
  tokens (from %d total tokens). ...`` and, layerwise or older, ``Retrieved %d out of %d
  out of total %d tokens`` (loaded), and the warning ``The cache block is in the storage,
  but it can't be retrieved`` (a lookup said hit, the backend returned nothing). The
  multiprocess server (``v1/multiprocess/modules/engine_driven_transfer.py``) prints
  ``Stored %d tokens in %.3f seconds``.
* SGLang, ``python/sglang/srt/managers/scheduler_metrics_mixin.py`` ``log_prefill_stats``
  (earlier ``scheduler.py``): ``Prefill batch, #new-seq: %d, #new-token: %d,
  #cached-token: %d, token usage: %.2f, #running-req: %d, #queue-req: %d, `` (older:
  ``Prefill batch. #new-seq``, with ``cache hit rate: %.2f%%``; hybrid models print ``full
  token usage`` / ``swa token usage``), after ``[YYYY-MM-DD HH:MM:SS TP0]`` whose rank
  tags are any of `` DPn PPn ATTN_CPn MOE_DPn TPn EPn`` (``managers/scheduler.py``
  ``configure_scheduler_process``; older releases: ``[HH:MM:SS TP0]``, no date). ``#new-token``
  excludes the cached tokens: SGLang's own hit rate is cached / (new + cached).
* Prometheus text exposition (a saved ``/metrics``): samples ``name{labels} value
  [timestamp]``. Read by a small strict parser rather than ``prometheus_client``'s:
  that one stops at the first malformed line (a dump cut mid-line would lose
  everything after it), and the project keeps its dependency list short; here a bad line
  is one counted skip.
"""

from __future__ import annotations

import io
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from prefixscope.ingest.probing import probe
from prefixscope.ingest.source import DECODE_ERRORS, Source

EngineKind = Literal["vllm", "sglang", "prometheus"]


@dataclass(frozen=True, slots=True)
class EngineLogInput:
    """An engine file already classified (by the ingest that passed it over, or by
    `engine-log`'s walk): read by the analysis as this kind, without sniffing it again."""

    path: Path
    kind: EngineKind

# ------------------------------------------------------------------ values


@dataclass(frozen=True, slots=True)
class StatsPoint:
    """One periodic stats line: vLLM's ``Engine NNN: ...`` (rates as fractions 0..1)."""

    file: str
    line: int
    time: datetime | None
    engine: str  # "000", "4 engines aggregated", "v0"
    prompt_throughput: float | None  # tokens/s over the last interval
    generation_throughput: float | None
    running: int | None
    waiting: int | None
    preemptions: int | None  # in the last interval; vLLM omits the part when 0
    kv_usage: float | None  # GPU KV cache usage
    prefix_hit_rate: float | None  # local (GPU) prefix cache, rolling window
    external_hit_rate: float | None  # KV connector (offload, LMCache, P/D)
    mm_hit_rate: float | None
    cpu_prefix_hit_rate: float | None = None  # V0's CPU tier (its own line after the stats)
    process: str | None = None  # vLLM's "(APIServer pid=1)" tag: "APIServer pid=1"
    server: int = 0  # its series (one server run and engine), set by the analysis


@dataclass(frozen=True, slots=True)
class TransferPoint:
    """One ``KV Transfer metrics:`` line: the interval's totals by name."""

    file: str
    line: int
    time: datetime | None
    values: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class PrefillPoint:
    """One SGLang ``Prefill batch`` line."""

    file: str
    line: int
    time: datetime | None
    new_seqs: int
    new_tokens: int  # computed this batch (cached tokens excluded)
    cached_tokens: int
    token_usage: float | None  # 0..1
    running: int | None
    queued: int | None
    ranks: str = ""  # the record's rank tags: "TP0", "DP1 ATTN_CP0 TP4 EP4", ...
    server: int = 0  # its series (one server run and rank), set by the analysis


LmcacheKind = Literal["lookup", "store", "stored", "retrieve", "retrieve-failed-block"]


@dataclass(frozen=True, slots=True)
class LmcachePoint:
    """One LMCache line: a lookup (``LMCache hit tokens``), a store the adapter asks for
    (``Storing KV cache``), a store the engine did (``Stored``), a retrieval
    (``Retrieved``) or a block the backend could not return (``can't be retrieved``)."""

    file: str
    line: int
    time: datetime | None
    kind: LmcacheKind
    tokens: int  # lookup, retrieve: the request's tokens; store, stored: the tokens stored
    hit_tokens: int  # lookup: LMCache's prefix hit; retrieve: the tokens required
    load_tokens: int  # lookup: tokens to load (need to load, >= 0); retrieve: retrieved


@dataclass(frozen=True, slots=True)
class ConfigFact:
    """A configuration value the log states, with where it says so."""

    key: str  # block_size, kv_connector, offload_target, ...
    value: str
    file: str
    line: int


@dataclass(frozen=True, slots=True)
class PromSample:
    """One Prometheus sample."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float
    line: int


@dataclass(frozen=True, slots=True)
class EngineSkip:
    """A line that looked like an engine line and did not parse."""

    file: str
    line: int
    reason: str


@dataclass(frozen=True)
class EngineLogFile:
    """Everything read from one engine log or Prometheus dump."""

    file: str
    kind: EngineKind
    lines: int
    matched: Mapping[str, int]  # lines read per kind (stats, kv-transfer, config, ...)
    skips: tuple[EngineSkip, ...]
    stats: tuple[StatsPoint, ...] = ()
    transfers: tuple[TransferPoint, ...] = ()
    prefills: tuple[PrefillPoint, ...] = ()
    config: tuple[ConfigFact, ...] = ()
    samples: tuple[PromSample, ...] = ()
    lmcache: tuple[LmcachePoint, ...] = ()
    year_known: bool = True  # False: vLLM's MM-DD stamps, year taken as YEAR_UNKNOWN
    # Where the year of the times comes from: "stamps" (each line's own), "file context"
    # (a full date elsewhere in the file dates vLLM's year-less lines), "unknown".
    year_from: str = "stamps"
    startups: tuple[int, ...] = ()  # lines that start a server (version, args): restarts


# vLLM's record time has no year: it is kept with this placeholder year (2000 is a leap
# year, so 02-29 parses) and shown without one (`stamp`); an old SGLang time without a
# date gets the placeholder date NO_DATE.
YEAR_UNKNOWN = 2000
NO_DATE = datetime(1900, 1, 1, tzinfo=UTC)


def stamp(when: datetime | None) -> str | None:
    """A line's time as text: ISO 8601 when the log gives the year; otherwise as the log
    prints it (``MM-DD HH:MM:SS``, or ``HH:MM:SS`` without a date): never a placeholder."""
    if when is None:
        return None
    if when.year == YEAR_UNKNOWN:
        return when.strftime("%m-%d %H:%M:%S")
    if when.year == NO_DATE.year:
        return when.strftime("%H:%M:%S")
    return when.isoformat()

# ------------------------------------------------------------------ sniffing

_VLLM_RECORD = re.compile(
    r"(?:^|\s)(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(?P<md>\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)(?:\.\d+)? \[(?P<src>[^\]\s]+:\d+)\] ")
# SGLang's record prefix: ``[%(asctime)s{.msecs}{ DPn}{ PPn}{ ATTN_CPn}{ MOE_DPn}{ TPn}{ EPn}]``
# (``configure_scheduler_process`` in ``managers/scheduler.py`` builds the rank tags);
# releases before 0.4 printed the time without the date (``[16:43:29 TP0]``).
_SGLANG_RECORD = re.compile(
    r"^(?:[\w.-]+\s+\|\s+)?\[(?P<ts>(?:\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d)(?:[ ,.]\d+)?"
    r"(?P<ranks>(?: [A-Z][A-Z_]*\d+)*)\] ")
_ISO = re.compile(r"(?:^|[\s\[])(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?)")
_STATS_MARK = "Avg prompt throughput:"
_PROM_META = re.compile(r"^# (?:HELP|TYPE) (?:vllm|sglang|lmcache)[:_]", re.MULTILINE)
_PROM_SAMPLE_HEAD = re.compile(r"^(?:vllm|sglang|lmcache)[:_][a-zA-Z0-9_:]*(?:\{| )",
                               re.MULTILINE)


def engine_log_kind(text: str) -> EngineKind | None:
    """What engine file `text` (the head of a file) is, or None.

    A Prometheus dump has ``# HELP``/``# TYPE`` lines or samples of ``vllm:``/``sglang:``
    metrics; a vLLM log has a vLLM record prefix or a stats line; an SGLang log has
    SGLang's ``[YYYY-MM-DD HH:MM:SS TPn]`` prefix on a scheduler line.
    """
    head = text.lstrip("\ufeff")
    if _PROM_META.search(head) or _PROM_SAMPLE_HEAD.search(head):
        return "prometheus"
    lines = head.splitlines()
    if any(_VLLM_RECORD.search(ln) for ln in lines[:2000]) or any(
            ("Engine " in ln and _STATS_MARK in ln) or "LMCache INFO" in ln for ln in lines):
        return "vllm"
    sglang = [ln for ln in lines if _SGLANG_RECORD.match(ln)]
    if sglang and any(("batch" in ln and "#" in ln) or "server_args=ServerArgs(" in ln
                      or "sglang" in ln for ln in sglang):
        return "sglang"
    return None


# ------------------------------------------------------------------ times


class _Clock:
    """Line times: ISO stamps where present, else vLLM's ``MM-DD HH:MM:SS`` (the year from
    a full date earlier in the file, else unknown) or an old SGLang ``HH:MM:SS``."""

    def __init__(self) -> None:
        self.placeholders = False  # some MM-DD time got YEAR_UNKNOWN
        self.no_date = False  # some time had no date at all
        self.from_context = False  # some MM-DD time took the year of another line
        self.year: int | None = None  # of the last full date seen in the file

    def time(self, text: str) -> datetime | None:
        iso = _ISO.search(text[:80])
        if iso:
            when = _parse_iso(iso.group(1))
            if when is not None:
                self.year = when.year
            return when
        record = _VLLM_RECORD.search(text)
        if record:
            year = self.year if self.year is not None else YEAR_UNKNOWN
            try:
                when = datetime.strptime(f"{year}-{record.group('md')} "
                                         f"{record.group('hms')}", "%Y-%m-%d %H:%M:%S")
            except ValueError:
                return None
            self.placeholders |= self.year is None
            self.from_context |= self.year is not None
            return when.replace(tzinfo=UTC)
        sg = _SGLANG_RECORD.match(text)
        if sg:
            ts = sg.group("ts")
            if len(ts) == 8:  # HH:MM:SS: no date at all
                self.no_date = True
                try:
                    return datetime.strptime(ts, "%H:%M:%S").replace(
                        year=NO_DATE.year, tzinfo=UTC)
                except ValueError:
                    return None
            when = _parse_iso(ts)
            if when is not None:
                self.year = when.year
            return when
        return None


def _parse_iso(text: str) -> datetime | None:
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


# ------------------------------------------------------------------ vLLM lines

_FLOAT = r"(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|nan|inf)"
_ENGINE = re.compile(r"(?:Engine (\d++)|(?<!\d)(\d++) Engines Aggregated): ")
_PARTS = {
    "prompt_throughput": re.compile(r"Avg prompt throughput: " + _FLOAT + r" tokens/s"),
    "generation_throughput": re.compile(r"Avg generation throughput: " + _FLOAT + r" tokens/s"),
    "running": re.compile(r"Running: (\d+) reqs"),
    "waiting": re.compile(r"(?:Waiting|Pending): (\d+) reqs"),
    "preemptions": re.compile(r"Preemptions: (\d+)"),
    "kv_usage": re.compile(r"GPU KV cache usage: " + _FLOAT + "%"),
    "prefix_hit_rate": re.compile(r"(?<!External )(?<!MM )Prefix cache hit rate: "
                                  + _FLOAT + "%"),
    "external_hit_rate": re.compile(r"External prefix cache hit rate: " + _FLOAT + "%"),
    "mm_hit_rate": re.compile(r"MM cache hit rate: " + _FLOAT + "%"),
}
_PERCENT = {"kv_usage", "prefix_hit_rate", "external_hit_rate", "mm_hit_rate"}
_INTS = {"running", "waiting", "preemptions"}
_V0_PREFIX = re.compile(r"Prefix cache hit rate: GPU: " + _FLOAT + "%(?:, CPU: " + _FLOAT
                        + "%)?")
_PROCESS = re.compile(r"\((\w+ pid=\d+)\) ")

_TRANSFER = re.compile(r"KV Transfer metrics: (.*)$")
_PAIR = re.compile(r"(?:^|, |\{|')([^=,{}']+?)(?:=|': )" + _FLOAT + r"(?=,|\}|$)")

_VERSION = re.compile(r"vLLM API server version (\S+)")
# A line is hostile text too (one 2.3 MB ``non-default args`` line took 111 s when each
# marker in it started a scan to its end): a pattern that reads to the end of the line
# reads from the line's first marker only (``^(?>.*?MARKER)``, atomic: that marker, no
# other), and a repetition a later part can fail after is bounded, so every pattern here
# runs in linear time (tests/test_linear_time.py).
_ENGINE_VERSION = re.compile(r"^(?>.*?Initializing a V\d LLM engine \()(v[^)]++)\) "
                             r"with config: (.*)$")
_NON_DEFAULT = re.compile(r"^(?>.*?non-default args: (?=\{))(\{.*\})\s*$")
_HYBRID_BLOCK = re.compile(r"Setting attention block size to (\d+) tokens")
_KV_CACHE_TOKENS = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
_KV_GROUPS = re.compile(r"kv cache group sizes \(([\d, ]*)\)")
_CREATING_CONNECTOR = re.compile(r"Creating v1 connector with name: (\w+)")
_SPEC = re.compile(r"SpecDecoding metrics: ")
# Substrings of the lines `_config_facts` / `_sglang_config` read: other lines skip them.
_CONFIG_MARKERS = ("vLLM API server version", "non-default args: ", "LLM engine (v",
                   "Setting attention block size", "GPU KV cache size: ", "ServerArgs(",
                   "kv cache group sizes", "Creating v1 connector with name")
# The lines that start a server: one after stats lines of the same process is a restart.
_STARTUP_MARKERS = ("vLLM API server version", "non-default args: ", "server_args=ServerArgs(")
# LMCache's vLLM connector (lmcache/integration/vllm/vllm_v1_adapter.py).
_LMC_LOOKUP = re.compile(r"Reqid: \S+, Total tokens (\d+), (?:Inference Engine computed tokens: "
                         r"\d+, )?LMCache hit tokens: (\d+),( but)? need to load: (-?\d+)")
_LMC_STORE = re.compile(r"Storing KV cache for (\d+) out of (\d+) tokens")
# LMCache's engine (lmcache/v1/cache_engine.py) and its multiprocess server.
_LMC_STORED = re.compile(r"\bStored (\d+) (?:out of total \d+ tokens|tokens in )")
_LMC_RETRIEVED = re.compile(r"\bRetrieved (\d+) out of (\d+)(?: required tokens \(from (\d+) "
                            r"total tokens\)| out of total (\d+) tokens)")
_LMC_BLOCK_LOST = "The cache block is in the storage, but it can't be retrieved"

_CONNECTOR = re.compile(r"""kv_connector['"]?\s*[=:]\s*['"]([\w.-]+)['"]""")
_ROLE = re.compile(r"""kv_role['"]?\s*[=:]\s*['"](kv_\w+)['"]""")
_SLIDING = re.compile(r"""sliding_window['"]?\s*[=:]\s*(\d+)""")
_BLOCK = re.compile(r"""['"]block_size['"]\s*:\s*(\d+)""")
_EXTRA_CONFIG = re.compile(r"""kv_connector_extra_config['"]?\s*[=:]\s*\{[^{}]*\}""")
_OFFLOAD_SIZE = re.compile(r"""['"]kv_offloading_size['"]\s*:\s*([\d.]+)""")
_OFFLOAD_BACKEND = re.compile(r"""['"]kv_offloading_backend['"]\s*:\s*['"](\w+)['"]""")
_PREFIX_CACHING = re.compile(r"""['"]?enable_prefix_caching['"]?\s*[=:]\s*(True|False|None)""")
_SPEC_METHOD = re.compile(r"""speculative_config['"]?\s*[=:]\s*[^,]{0,200}?"""
                          r"""['"]?method['"]?\s*[=:]\s*['"]([\w-]+)['"]""")
_SPEC_NONE = re.compile(r"speculative_config=None")
_MODEL = re.compile(r"""(?:^|[\s{,(])['"]?model['"]?\s*[=:]\s*['"]([^'"]+)['"]""")
_HASH_ALGO = re.compile(r"""prefix_caching_hash_algo['"]?\s*[=:]\s*['"](\w+)['"]""")

# Where a connector keeps what it offloads.
_OFFLOAD_TARGET = {
    "OffloadingConnector": "CPU (vLLM native offload)",
    "SimpleCPUOffloadConnector": "CPU (vLLM native offload)",
    "CPUOffloadingConnector": "CPU",
    "LMCacheConnectorV1": "LMCache (CPU / disk / remote per its config)",
    "LMCacheConnector": "LMCache (CPU / disk / remote per its config)",
    "LMCacheMPConnector": "LMCache server (shared CPU pool)",
    "NixlConnector": "another vLLM instance (P/D transfer over NIXL)",
    "NixlPullConnector": "another vLLM instance (P/D transfer over NIXL)",
    "NixlPushConnector": "another vLLM instance (P/D transfer over NIXL)",
    "P2pNcclConnector": "another vLLM instance (P/D transfer over NCCL)",
    "MoRIIOConnector": "another vLLM instance (P/D transfer over MoRI-IO)",
    "MooncakeConnector": "another vLLM instance (P/D transfer over Mooncake)",
    "MooncakeStoreConnector": "Mooncake store",
}
# Connectors that move a prefill's KV to a decode instance: no tier that serves reads.
PD_TRANSFER_CONNECTORS = frozenset({"NixlConnector", "NixlPullConnector", "NixlPushConnector",
                                    "P2pNcclConnector", "MoRIIOConnector", "MooncakeConnector"})
_OFFLOAD_BACKENDS = {"native": "OffloadingConnector", "lmcache": "LMCacheConnectorV1"}
# A connector's own source file (``vllm/distributed/kv_transfer/kv_connector/v1/mooncake/
# mooncake_connector.py``: ``MooncakeConnectorScheduler`` / ``MooncakeConnectorWorker``)
# in an INFO record names the connector a run uses: ``Delaying free of 1 blocks for
# request ...``, ``KVCacheSendingThread started listening ...``. Its import warnings
# (``Mooncake not available, MooncakeOmniConnector will not work``, at WARNING in runs
# without it) do not.
_CONNECTOR_SOURCES = {"mooncake_connector": "MooncakeConnector"}
_CONNECTOR_SOURCE = re.compile(r"\bINFO \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? "
                               r"\[(?:[\w/.-]*/)?(mooncake_connector)\.py:\d+\] ")


def _num(text: str) -> float:
    return float(text)


def _fraction(percent: float) -> float:
    """A printed percentage as a fraction, without float noise (12.3 -> 0.123)."""
    return round(percent / 100, 6)


def parse_stats(text: str) -> dict[str, float | int] | None:
    """The labelled parts of a vLLM stats line (None when it has no throughput part)."""
    if _STATS_MARK not in text:
        return None
    out: dict[str, float | int] = {}
    for key, pattern in _PARTS.items():
        found = pattern.search(text)
        if not found:
            continue
        if key in _INTS:
            out[key] = int(found.group(1))
        else:
            value = _num(found.group(1))
            out[key] = _fraction(value) if key in _PERCENT else value
    v0 = _V0_PREFIX.search(text)
    if v0 and "prefix_hit_rate" not in out:
        out["prefix_hit_rate"] = _fraction(_num(v0.group(1)))
        if v0.group(2) is not None:
            out["cpu_prefix_hit_rate"] = _fraction(_num(v0.group(2)))
    return out


def parse_transfer(text: str) -> dict[str, float] | None:
    """The numeric ``k=v`` pairs of a ``KV Transfer metrics:`` line (nested dicts too)."""
    found = _TRANSFER.search(text)
    if not found:
        return None
    return {k.strip(): _num(v) for k, v in _PAIR.findall(found.group(1).rstrip())}


def _config_facts(text: str) -> list[tuple[str, str]]:
    """(key, value) configuration facts one vLLM line states."""
    facts: list[tuple[str, str]] = []
    if m := _VERSION.search(text):
        facts.append(("vllm_version", m.group(1)))
    body = ""
    if m := _ENGINE_VERSION.search(text):
        facts.append(("vllm_version", m.group(1).lstrip("v")))
        body = m.group(2)
    elif m := _NON_DEFAULT.search(text):
        body = m.group(1)
    if m := _HYBRID_BLOCK.search(text):
        facts += [("block_size", m.group(1)), ("hybrid_kv_cache", "attention + mamba groups")]
    if m := _KV_CACHE_TOKENS.search(text):
        facts.append(("gpu_kv_cache_tokens", m.group(1).replace(",", "")))
    if (m := _KV_GROUPS.search(text)) and len(sizes := re.findall(r"\d+", m.group(1))) > 1:
        facts.append(("kv_cache_groups", str(len(sizes))))
    if m := _CREATING_CONNECTOR.search(text):
        facts += _connector_facts(m.group(1))
    if not body:
        return facts
    if m := _MODEL.search(body):
        facts.append(("model", m.group(1)))
    # The connector's own options (an offloaded block size) are not the GPU block size.
    extra = _EXTRA_CONFIG.search(body)
    if extra and (m := _BLOCK.search(extra.group(0))):
        facts.append(("offload_block_size", m.group(1)))
    if m := _BLOCK.search(_EXTRA_CONFIG.sub("", body)):
        facts.append(("block_size", m.group(1)))
    connector = None
    if m := _CONNECTOR.search(body):
        connector = m.group(1)
        inner = list(dict.fromkeys(_CONNECTOR.findall(body)[1:]))
        if connector == "MultiConnector" and inner:
            connector = f"MultiConnector ({' + '.join(inner)})"
    elif m := _OFFLOAD_BACKEND.search(body):
        connector = _OFFLOAD_BACKENDS.get(m.group(1), m.group(1))
        facts.append(("kv_offloading_backend", m.group(1)))
    if m := _OFFLOAD_SIZE.search(body):
        facts.append(("kv_offloading_size_gib", m.group(1)))
        connector = connector or "OffloadingConnector"
    if connector:
        facts += _connector_facts(connector)
    if m := _ROLE.search(body):
        facts.append(("kv_role", m.group(1)))
    if m := _SLIDING.search(body):
        facts.append(("sliding_window", m.group(1)))
    if m := _PREFIX_CACHING.search(body):
        facts.append(("enable_prefix_caching", m.group(1)))
    if m := _SPEC_METHOD.search(body):
        facts.append(("speculative_decoding", m.group(1)))
    elif "speculative_config" in body and not _SPEC_NONE.search(body):
        facts.append(("speculative_decoding", "configured"))
    if m := _HASH_ALGO.search(body):
        facts.append(("prefix_caching_hash_algo", m.group(1)))
    return facts


def _connector_facts(connector: str) -> list[tuple[str, str]]:
    name = connector.split(" ", 1)[0]
    return [("kv_connector", connector),
            ("offload_target", _OFFLOAD_TARGET.get(name, f"external ({connector})"))]


# ------------------------------------------------------------------ SGLang lines

_PREFILL = re.compile(r"Prefill batch(?: \[\d+\])?[.,] ")
_SG_FIELDS = {
    "new_seqs": re.compile(r"#new-seq: (\d+)"),
    "new_tokens": re.compile(r"#new-token: (\d+)"),
    "cached_tokens": re.compile(r"#cached-token: (\d+)"),
    "running": re.compile(r"#running-req: (\d+)"),
    "queued": re.compile(r"#queue-req: (\d+)"),
}
_SG_USAGE = re.compile(r"(?<![\w-])(?:full )?token usage: " + _FLOAT)
_SG_ARGS = re.compile(r"^(?>.*?server_args=ServerArgs\()(.*)\)\s*$")
_SG_PAGE = re.compile(r"(?:^|, )page_size=(\d+)")
_SG_MODEL = re.compile(r"(?:^|, )model_path='([^']+)'")
_SG_RADIX_OFF = re.compile(r"(?:^|, )disable_radix_cache=(True|False)")
_SG_HICACHE = re.compile(r"(?:^|, )enable_hierarchical_cache=(True|False)")
_SG_SPEC = re.compile(r"(?:^|, )speculative_algorithm='?([\w-]+)'?")


def _sglang_config(text: str) -> list[tuple[str, str]]:
    m = _SG_ARGS.search(text)
    if not m:
        return []
    body = m.group(1)
    facts: list[tuple[str, str]] = []
    if p := _SG_MODEL.search(body):
        facts.append(("model", p.group(1)))
    if p := _SG_PAGE.search(body):
        facts.append(("block_size", p.group(1)))
    if p := _SG_RADIX_OFF.search(body):
        facts.append(("enable_prefix_caching", "False" if p.group(1) == "True" else "True"))
    if (p := _SG_HICACHE.search(body)) and p.group(1) == "True":
        facts += [("kv_connector", "HiCache"), ("offload_target", "host memory (HiCache)")]
    if (p := _SG_SPEC.search(body)) and p.group(1) != "None":
        facts.append(("speculative_decoding", p.group(1)))
    return facts


# ------------------------------------------------------------------ Prometheus

_PROM_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_PROM_LINE = re.compile(r"^(" + _PROM_NAME + r")(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+-?\d+)?[ \t]*$")
_PROM_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_PROM_SPECIAL = {"+Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}


def parse_prom_line(text: str) -> tuple[str, tuple[tuple[str, str], ...], float] | str:
    """A sample line -> (name, labels, value), or the reason it is not one."""
    m = _PROM_LINE.match(text)
    if not m:
        return "not a Prometheus sample (name{labels} value)"
    name, label_text, raw = m.groups()
    labels: list[tuple[str, str]] = []
    if label_text:
        pos = 0
        while pos < len(label_text):
            lm = _PROM_LABEL.match(label_text, pos)
            if not lm or lm.end() == pos:
                return f"bad label set {{{label_text[:60]}}}"
            labels.append((lm.group(1), lm.group(2).replace('\\"', '"').replace("\\n", "\n")
                           .replace("\\\\", "\\")))
            pos = lm.end()
    try:
        value = _PROM_SPECIAL[raw] if raw in _PROM_SPECIAL else float(raw)
    except ValueError:
        return f"bad sample value {raw[:40]!r}"
    return name, tuple(labels), value


# ------------------------------------------------------------------ files


@dataclass
class _Acc:
    matched: Counter[str] = field(default_factory=Counter)
    skips: list[EngineSkip] = field(default_factory=list)
    stats: list[StatsPoint] = field(default_factory=list)
    transfers: list[TransferPoint] = field(default_factory=list)
    prefills: list[PrefillPoint] = field(default_factory=list)
    config: list[ConfigFact] = field(default_factory=list)
    samples: list[PromSample] = field(default_factory=list)
    lmcache: list[LmcachePoint] = field(default_factory=list)
    startups: list[int] = field(default_factory=list)


def parse_engine_log(name: str, lines: Iterable[str], kind: EngineKind) -> EngineLogFile:
    """Read every line of one engine file (`kind` from `engine_log_kind`)."""
    acc = _Acc()
    clock = _Clock()
    n = 0
    for n, raw in enumerate(lines, 1):
        text = raw.rstrip("\r\n")
        if kind == "prometheus":
            _prom_line(name, n, text, acc)
        else:
            _log_line(name, n, text, acc, clock)
    if clock.placeholders and clock.year is not None:
        # A full date later in the file (LMCache's own lines, a restart behind a container
        # stamp) dates the year-less lines before it too.
        _date_placeholders(acc, clock.year)
        clock.placeholders, clock.from_context = False, True
    year_known = not (clock.placeholders or clock.no_date)
    year_from = ("unknown" if not year_known else "file context" if clock.from_context
                 else "stamps")
    return EngineLogFile(
        file=name, kind=kind, lines=n, matched=dict(acc.matched), skips=tuple(acc.skips),
        stats=tuple(acc.stats), transfers=tuple(acc.transfers), prefills=tuple(acc.prefills),
        config=tuple(acc.config), samples=tuple(acc.samples), lmcache=tuple(acc.lmcache),
        year_known=year_known, year_from=year_from, startups=tuple(acc.startups))


def _date_placeholders(acc: _Acc, year: int) -> None:
    def fix(t: datetime | None) -> datetime | None:
        if t is None or t.year != YEAR_UNKNOWN:
            return t
        try:
            return t.replace(year=year)
        except ValueError:  # 02-29 in a year without one
            return None

    acc.stats = [replace(p, time=fix(p.time)) for p in acc.stats]
    acc.prefills = [replace(p, time=fix(p.time)) for p in acc.prefills]
    acc.transfers = [replace(p, time=fix(p.time)) for p in acc.transfers]
    acc.lmcache = [replace(p, time=fix(p.time)) for p in acc.lmcache]


def _prom_line(name: str, n: int, text: str, acc: _Acc) -> None:
    stripped = text.strip()
    if not stripped or stripped.startswith("#"):
        return
    parsed = parse_prom_line(stripped)
    if isinstance(parsed, str):
        acc.skips.append(EngineSkip(name, n, parsed))
        return
    acc.matched["sample"] += 1
    acc.samples.append(PromSample(parsed[0], parsed[1], parsed[2], n))


def _log_line(name: str, n: int, text: str, acc: _Acc, clock: _Clock) -> None:
    if "_connector.py:" in text and (m := _CONNECTOR_SOURCE.search(text)) and not any(
            c.key == "kv_connector" for c in acc.config):
        # the connector's own worker lines name it where the log states no configuration
        acc.config.extend(ConfigFact(k, v, name, n)
                          for k, v in _connector_facts(_CONNECTOR_SOURCES[m.group(1)]))
    if _STATS_MARK in text:
        parts = parse_stats(text)
        if not parts or "prefix_hit_rate" not in parts and "kv_usage" not in parts:
            acc.skips.append(EngineSkip(name, n, "stats line without GPU KV cache usage or "
                                                 "Prefix cache hit rate"))
            return
        engine = _ENGINE.search(text)
        label = ("v0" if engine is None else engine.group(1) if engine.group(1) is not None
                 else f"{engine.group(2)} engines aggregated")
        process = _PROCESS.search(text)
        acc.matched["stats"] += 1
        acc.stats.append(StatsPoint(
            file=name, line=n, time=clock.time(text), engine=label,
            prompt_throughput=_f(parts.get("prompt_throughput")),
            generation_throughput=_f(parts.get("generation_throughput")),
            running=_i(parts.get("running")), waiting=_i(parts.get("waiting")),
            preemptions=_i(parts.get("preemptions")) if "preemptions" in parts else (
                0 if engine is not None else None),
            kv_usage=_f(parts.get("kv_usage")), prefix_hit_rate=_f(parts.get("prefix_hit_rate")),
            external_hit_rate=_f(parts.get("external_hit_rate")),
            mm_hit_rate=_f(parts.get("mm_hit_rate")),
            cpu_prefix_hit_rate=_f(parts.get("cpu_prefix_hit_rate")),
            process=process.group(1) if process else None))
        return
    if m := _V0_PREFIX.search(text):
        _v0_prefix_line(name, n, m, acc)
        return
    if "KV Transfer metrics:" in text:
        values = parse_transfer(text)
        if not values:
            acc.skips.append(EngineSkip(name, n, "KV Transfer metrics line without k=number "
                                                 "pairs"))
            return
        acc.matched["kv-transfer"] += 1
        acc.transfers.append(TransferPoint(name, n, clock.time(text), values))
        return
    if _PREFILL.search(text):
        _prefill_line(name, n, text, acc, clock)
        return
    if "LMCache" in text or "Storing KV cache for" in text:
        if _lmcache_line(name, n, text, acc, clock):
            return
    if _SPEC.search(text):
        acc.matched["spec-decoding"] += 1
        acc.config.append(ConfigFact("speculative_decoding", "active (SpecDecoding metrics)",
                                     name, n))
        return
    if any(marker in text for marker in _STARTUP_MARKERS):
        acc.startups.append(n)
    facts = (_config_facts(text) + _sglang_config(text)
             if any(marker in text for marker in _CONFIG_MARKERS) else [])
    if facts:
        acc.matched["config"] += 1
        acc.config.extend(ConfigFact(k, v, name, n) for k, v in facts)
        return
    acc.matched["other"] += 1


def _v0_prefix_line(name: str, n: int, found: re.Match[str], acc: _Acc) -> None:
    """V0's ``Prefix cache hit rate: GPU: x%, CPU: y%``: the rates of the stats line the
    same ``log()`` call printed just before it."""
    last = acc.stats[-1] if acc.stats and acc.stats[-1].file == name else None
    if last is None or last.engine != "v0" or last.prefix_hit_rate is not None:
        acc.skips.append(EngineSkip(name, n, "V0 prefix cache hit rate line without the V0 "
                                             "stats line before it"))
        return
    cpu = found.group(2)
    acc.matched["stats-prefix"] += 1
    acc.stats[-1] = replace(last, prefix_hit_rate=_fraction(_num(found.group(1))),
                            cpu_prefix_hit_rate=None if cpu is None
                            else _fraction(_num(cpu)))


def _lmcache_line(name: str, n: int, text: str, acc: _Acc, clock: _Clock) -> bool:
    if m := _LMC_LOOKUP.search(text):
        acc.matched["lmcache"] += 1
        skipped = m.group(3) is not None  # "but need to load: N < min_retrieve": not loaded
        acc.lmcache.append(LmcachePoint(name, n, clock.time(text), "lookup", int(m.group(1)),
                                        int(m.group(2)), 0 if skipped else max(int(m.group(4)), 0)))
        return True
    if m := _LMC_STORE.search(text):
        acc.matched["lmcache"] += 1
        acc.lmcache.append(LmcachePoint(name, n, clock.time(text), "store", int(m.group(1)),
                                        0, 0))
        return True
    if m := _LMC_STORED.search(text):
        acc.matched["lmcache"] += 1
        acc.lmcache.append(LmcachePoint(name, n, clock.time(text), "stored", int(m.group(1)),
                                        0, 0))
        return True
    if m := _LMC_RETRIEVED.search(text):
        acc.matched["lmcache"] += 1
        total = m.group(3) or m.group(4)
        acc.lmcache.append(LmcachePoint(name, n, clock.time(text), "retrieve", int(total),
                                        int(m.group(2)), int(m.group(1))))
        return True
    if _LMC_BLOCK_LOST in text:
        acc.matched["lmcache"] += 1
        acc.lmcache.append(LmcachePoint(name, n, clock.time(text), "retrieve-failed-block",
                                        0, 0, 0))
        return True
    return False


def _prefill_line(name: str, n: int, text: str, acc: _Acc, clock: _Clock) -> None:
    got: dict[str, int] = {}
    for key, pattern in _SG_FIELDS.items():
        found = pattern.search(text)
        if found:
            got[key] = int(found.group(1))
    if not {"new_seqs", "new_tokens", "cached_tokens"} <= got.keys():
        acc.skips.append(EngineSkip(name, n, "Prefill batch line without #new-seq, "
                                             "#new-token and #cached-token"))
        return
    usage = _SG_USAGE.search(text)
    record = _SGLANG_RECORD.match(text)
    acc.matched["prefill"] += 1
    acc.prefills.append(PrefillPoint(
        file=name, line=n, time=clock.time(text), new_seqs=got["new_seqs"],
        new_tokens=got["new_tokens"], cached_tokens=got["cached_tokens"],
        token_usage=float(usage.group(1)) if usage else None,
        running=got.get("running"), queued=got.get("queued"),
        ranks=record.group("ranks").strip() if record else ""))


def _f(v: float | int | None) -> float | None:
    return None if v is None else float(v)


def _i(v: float | int | None) -> int | None:
    return None if v is None else int(v)


def sniff_source(source: Source) -> EngineKind | None:
    """`engine_log_kind` of a file's head; None for JSON, SQLite and binary content."""
    try:
        pr = probe(source)
    except DECODE_ERRORS:
        return None
    # A log whose first line starts with "[" (SGLang's time stamp) probes as JSON that
    # fails to parse: its text is still there to sniff.
    if pr.kind not in ("text", "csv"):
        return None
    return engine_log_kind(pr.text)


def read_engine_source(source: Source, kind: EngineKind) -> EngineLogFile:
    """Parse a whole engine file (gzip read transparently; bad bytes replaced)."""
    with source.open_binary() as fh:
        text = io.TextIOWrapper(fh, encoding="utf-8", errors="replace", newline=None)
        return parse_engine_log(source.name, text, kind)
