"""Writes ``vllm-offload.log``: a vLLM server whose CPU offload tier stores and never loads.

Synthetic, deterministic (seeded), standard library only -- never prefixscope: the
numbers it returns are the expected values of prefixscope's engine-log tests, so they
come from this independent generator, not from the code under test. Run from the
project root:

    python sample_logs/make_engine_log.py            # rewrites vllm-offload.log here
    python sample_logs/make_engine_log.py OUT_DIR    # or writes it elsewhere

Every line is printed with the upstream format strings (vLLM's logger format
``%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s`` with datefmt
``%m-%d %H:%M:%S``, after the ``(APIServer pid=N)`` / ``(EngineCore_DP0 pid=N)`` process
tag of current releases):

* ``vllm/v1/metrics/loggers.py`` ``LoggingStatLogger.log()``: ``"Engine %03d: "`` and the
  parts ``Avg prompt throughput: %.1f tokens/s``, ``Avg generation throughput: %.1f
  tokens/s``, ``Running: %d reqs``, ``Waiting: %d reqs``, ``Preemptions: %d`` (only when
  > 0), ``GPU KV cache usage: %.1f%%``, ``Prefix cache hit rate: %.1f%%``, ``External
  prefix cache hit rate: %.1f%%`` joined by ``", "``;
* ``KVConnectorLogging.log()``: ``"KV Transfer metrics: %s"`` of the OffloadingConnector's
  ``reduce()`` (``GPU_to_CPU_total_bytes``, ``GPU_to_CPU_total_time`` per interval;
  ``CPU_to_GPU_*`` only when something was loaded);
* start-up: ``vLLM API server version %s``, ``non-default args: %s`` (a dict repr with
  the ``KVTransferConfig(...)`` repr), ``Initializing a V1 LLM engine (v%s) with config:
  ...``, ``GPU KV cache size: %s tokens``.

The scenario (design.md §1, "write-only L2"): Qwen3-32B with 16-token GPU blocks and the
native OffloadingConnector to CPU. Agent prompts change early (a volatile header), so
the GPU prefix cache hits ~10% and no offloaded block is ever asked for again: every
interval stores GPU->CPU bytes, nothing is loaded, ``External prefix cache hit rate``
stays 0.0% for the whole 20 minutes.

`vllm_log`, `prometheus_dump` and `sglang_log` are also the tests' generators (other
seeds and switches: a healthy control whose tier loads, a full KV cache, older wordings).
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
VLLM_OFFLOAD_FILE = "vllm-offload.log"
SEED = 20261130
START = datetime(2026, 11, 30, 9, 0, 0)  # vLLM prints it without the year
INTERVAL_S = 10
KV_BYTES_PER_TOKEN = 64 * 8 * 128 * 2 * 2  # Qwen3-32B: layers x kv heads x dim x (K, V) x bf16
MODEL = "Qwen/Qwen3-32B"


@dataclass
class VllmFacts:
    """What the generator wrote: the expected values of the engine-log tests."""

    lines: int = 0
    stats_lines: int = 0
    transfer_lines: int = 0
    config_lines: int = 0
    bad_lines: int = 0
    store_points: int = 0
    load_points: int = 0
    store_bytes: int = 0
    load_bytes: int = 0
    prefix_rates: list[float] = field(default_factory=list)  # as printed, / 100
    external_rates: list[float] = field(default_factory=list)
    kv_usages: list[float] = field(default_factory=list)
    preemptions: int = 0
    full_waiting_lines: int = 0  # KV usage >= 95% with waiting or preemptions
    first_stats: datetime | None = None
    last_stats: datetime | None = None
    first_store: datetime | None = None
    last_store: datetime | None = None
    block_size: int = 16
    lmcache_lookups: int = 0
    lmcache_lookup_tokens: int = 0
    lmcache_hit_tokens: int = 0
    lmcache_loads: int = 0
    lmcache_load_tokens: int = 0
    lmcache_stores: int = 0
    lmcache_stored_tokens: int = 0


def _record(when: datetime, src: str, message: str, *, proc: str = "APIServer pid=1",
            level: str = "INFO") -> str:
    stamp = when.strftime("%m-%d %H:%M:%S")
    return f"({proc}) {level} {stamp} [{src}] {message}"


def _stats_message(engine: int, prompt_tp: float, gen_tp: float, running: int, waiting: int,
                   preemptions: int, kv_usage: float, hit_rate: float,
                   external_rate: float | None, *, aggregated: int = 0,
                   fixed_format: bool = False) -> str:
    """``LoggingStatLogger.log()``'s message, built as upstream builds it."""
    if fixed_format:  # mid-2025: one format string, six fields
        return ("Engine %03d: "  # noqa: UP031 - upstream's own format string
                "Avg prompt throughput: %.1f tokens/s, "
                "Avg generation throughput: %.1f tokens/s, "
                "Running: %d reqs, Waiting: %d reqs, "
                "GPU KV cache usage: %.1f%%, "
                "Prefix cache hit rate: %.1f%%") % (engine, prompt_tp, gen_tp, running,
                                                     waiting, kv_usage * 100, hit_rate * 100)
    log_parts = ["Avg prompt throughput: %.1f tokens/s",
                 "Avg generation throughput: %.1f tokens/s", "Running: %d reqs",
                 "Waiting: %d reqs"]
    log_args: list[float | int] = [prompt_tp, gen_tp, running, waiting]
    if preemptions > 0:
        log_parts.append("Preemptions: %d")
        log_args.append(preemptions)
    log_parts += ["GPU KV cache usage: %.1f%%", "Prefix cache hit rate: %.1f%%"]
    log_args += [kv_usage * 100, hit_rate * 100]
    if external_rate is not None:
        log_parts.append("External prefix cache hit rate: %.1f%%")
        log_args.append(external_rate * 100)
    prefix = f"{aggregated} Engines Aggregated: " if aggregated else f"Engine {engine:03d}: "
    return (prefix + ", ".join(log_parts)) % tuple(log_args)


def _printed(rate: float) -> float:
    """A rate as the log shows it (``%.1f%%``), back as a fraction."""
    return round(float("%.1f" % (rate * 100)) / 100, 6)


def vllm_log(*, seed: int = SEED, minutes: int = 20, write_only: bool = True,
             kv_full: bool = False, connector: bool = True, fixed_format: bool = False,
             bad_lines: int = 0, iso_prefix: bool = False,
             lmcache: bool = False) -> tuple[str, VllmFacts]:
    """A vLLM server log and the facts it holds.

    write_only: the offload tier stores every interval and never loads (else it loads in
    some intervals and the external rate is > 0); kv_full: the KV cache runs at 95-99%
    with a queue and preemptions; connector: with the OffloadingConnector at all;
    fixed_format: the mid-2025 six-field stats line; bad_lines: stats lines cut short;
    iso_prefix: a container runtime's ISO timestamp before each line; lmcache: the
    LMCacheConnectorV1 instead, logging LMCache's own lookup and store lines (its logger:
    ``[%(asctime)s] LMCache %(levelname)s: %(message)s (%(filename)s:%(lineno)d:%(name)s)``)
    and no KV Transfer metrics.
    """
    rng = random.Random(seed)
    facts = VllmFacts()
    out: list[str] = []

    def emit(line: str, when: datetime) -> None:
        if iso_prefix:
            line = when.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z " + line
        out.append(line)

    boot = START - timedelta(seconds=79)
    name = "LMCacheConnectorV1" if lmcache else "OffloadingConnector"
    kv_cfg = (f"KVTransferConfig(kv_connector='{name}', engine_id="
              "'1f0c7d3a-5be2-4c4e-9d51-6a3c2f0e9b11', kv_buffer_device='cuda', "
              "kv_buffer_size=1000000000.0, kv_role='kv_both', kv_rank=None, "
              "kv_parallel_size=1, kv_ip='127.0.0.1', kv_port=14579, "
              "kv_connector_extra_config="
              + ("{}, " if lmcache else "{'num_cpu_blocks': 65536, 'block_size': 64}, ") +
              "kv_connector_module_path=None, enable_permute_local_kv=False)")
    args = (f"{{'model_tag': '{MODEL}', 'host': '0.0.0.0', 'model': '{MODEL}', "
            f"'max_model_len': 65536, 'block_size': {facts.block_size}, "
            "'enable_prefix_caching': True"
            + (f", 'kv_transfer_config': {kv_cfg}" if connector else "") + "}")
    startup = [
        (boot, "api_server.py:1896", "vLLM API server version 0.11.0", "APIServer pid=1"),
        (boot, "utils.py:233", f"non-default args: {args}", "APIServer pid=1"),
        (boot + timedelta(seconds=9), "core.py:77",
         f"Initializing a V1 LLM engine (v0.11.0) with config: model='{MODEL}', "
         f"speculative_config=None, tokenizer='{MODEL}', skip_tokenizer_init=False, "
         "tokenizer_mode=auto, revision=None, trust_remote_code=False, dtype=torch.bfloat16, "
         "max_seq_len=65536, download_dir=None, load_format=auto, tensor_parallel_size=2, "
         "pipeline_parallel_size=1, quantization=None, enforce_eager=False, "
         "kv_cache_dtype=auto, seed=0, served_model_name=" + MODEL + ", "
         "enable_prefix_caching=True, chunked_prefill_enabled=True",
         "EngineCore_DP0 pid=250"),
        (boot + timedelta(seconds=61), "kv_cache_utils.py:1087",
         "GPU KV cache size: 262,144 tokens", "EngineCore_DP0 pid=250"),
        (boot + timedelta(seconds=61), "kv_cache_utils.py:1091",
         "Maximum concurrency for 65,536 tokens per request: 4.00x", "EngineCore_DP0 pid=250"),
        (boot + timedelta(seconds=78), "launcher.py:44",
         "Route: /v1/chat/completions, Methods: POST", "APIServer pid=1"),
    ]
    for when, src, message, proc in startup:
        emit(_record(when, src, message, proc=proc), when)
    facts.config_lines = 4  # version, args, engine config, KV cache size
    out.append("INFO:     Started server process [1]")
    out.append("INFO:     Application startup complete.")
    hit = 0.11
    for i in range(1, minutes * 60 // INTERVAL_S + 1):
        when = START + timedelta(seconds=i * INTERVAL_S)
        for _ in range(rng.randint(0, 2)):
            out.append(f"(APIServer pid=1) INFO:     10.0.3.{rng.randint(2, 250)}:"
                       f"{rng.randint(30000, 60000)} - \"POST /v1/chat/completions HTTP/1.1\""
                       " 200 OK")
        prompt_tokens = rng.randint(20_000, 90_000)
        gen_tokens = rng.randint(300, 1_500)
        hit = min(0.16, max(0.05, hit + rng.uniform(-0.015, 0.015)))
        running = rng.randint(3, 12)
        if kv_full:
            usage = rng.uniform(0.95, 0.995)
            waiting = rng.randint(1, 9)
            preempt = rng.choice((0, 0, 1, 2, 4))
        else:
            usage = rng.uniform(0.30, 0.85)
            waiting = 0
            preempt = 0
        ext = 0.0 if write_only else rng.uniform(0.2, 0.6)
        if i in range(3, 3 + bad_lines):
            tput = prompt_tokens / INTERVAL_S
            cut = f"Engine 000: Avg prompt throughput: {tput:.1f} tokens/s, Avg"
            emit(_record(when, "loggers.py:271", cut), when)
            facts.bad_lines += 1
            continue
        message = _stats_message(0, prompt_tokens / INTERVAL_S, gen_tokens / INTERVAL_S,
                                 running, waiting, preempt, usage, hit,
                                 ext if connector else None, fixed_format=fixed_format)
        emit(_record(when, "loggers.py:271", message), when)
        facts.stats_lines += 1
        facts.prefix_rates.append(_printed(hit))
        facts.kv_usages.append(_printed(usage))
        if connector and not fixed_format:
            facts.external_rates.append(_printed(ext))
        facts.preemptions += preempt if not fixed_format else 0
        if _printed(usage) >= 0.95 and (waiting > 0 or (preempt > 0 and not fixed_format)):
            facts.full_waiting_lines += 1
        facts.first_stats = facts.first_stats or when
        facts.last_stats = when
        if not connector:
            continue
        if lmcache:
            _lmcache_lines(rng, out, when, prompt_tokens, hit, write_only, facts)
            continue
        computed = int(prompt_tokens * (1 - hit))
        stored = (computed // facts.block_size) * facts.block_size * KV_BYTES_PER_TOKEN
        reduce: dict[str, int | float] = {
            "GPU_to_CPU_total_bytes": stored,
            "GPU_to_CPU_total_time": round(stored / 24e9, 6)}
        loaded = 0
        if not write_only and rng.random() < 0.5:
            loaded = rng.randint(64, 2_048) * 16 * KV_BYTES_PER_TOKEN
            reduce["CPU_to_GPU_total_bytes"] = loaded
            reduce["CPU_to_GPU_total_time"] = round(loaded / 24e9, 6)
        xfer = ", ".join(f"{k}={v}" for k, v in reduce.items())
        emit(_record(when, "metrics.py:126", "KV Transfer metrics: " + xfer), when)
        facts.transfer_lines += 1
        facts.store_bytes += stored
        facts.load_bytes += loaded
        facts.store_points += stored > 0
        facts.load_points += loaded > 0
        if stored:
            facts.first_store = facts.first_store or when
            facts.last_store = when
    facts.lines = len(out)
    return "\n".join(out) + "\n", facts


LMCACHE_CHUNK = 256


def _lmcache_lines(rng: random.Random, out: list[str], when: datetime, prompt_tokens: int,
                   hit: float, write_only: bool, facts: VllmFacts) -> None:
    """One interval's requests as LMCache's vLLM adapter logs them
    (``lmcache/integration/vllm/vllm_v1_adapter.py``)."""
    left = prompt_tokens
    k = 0
    while left > 0:
        total = min(left, rng.randint(4_000, 30_000))
        left -= total
        k += 1
        computed = int(total * hit) // 16 * 16  # vLLM's own GPU prefix hit
        lmc_hit = 0 if write_only else rng.randint(computed // LMCACHE_CHUNK,
                                                   total // LMCACHE_CHUNK) * LMCACHE_CHUNK
        need = max(lmc_hit - computed, 0)
        stamp = f"[{when:%Y-%m-%d %H:%M:%S},{k:03d}]"
        req = f"chatcmpl-{rng.getrandbits(64):016x}"
        out.append(f"{stamp} LMCache INFO: Reqid: {req}, Total tokens {total}, Inference Engine "
                   f"computed tokens: {computed}, LMCache hit tokens: {lmc_hit}, need to load: "
                   f"{need} (vllm_v1_adapter.py:1256:lmcache.integration.vllm.vllm_v1_adapter)")
        skip = lmc_hit // LMCACHE_CHUNK * LMCACHE_CHUNK
        stored = total - skip
        out.append(f"{stamp} LMCache INFO: Storing KV cache for {stored} out of {total} tokens "
                   f"(skip_leading_tokens={skip}) for request {req} "
                   "(vllm_v1_adapter.py:1141:lmcache.integration.vllm.vllm_v1_adapter)")
        facts.lmcache_lookups += 1
        facts.lmcache_lookup_tokens += total
        facts.lmcache_hit_tokens += lmc_hit
        facts.lmcache_loads += need > 0
        facts.lmcache_load_tokens += need
        facts.lmcache_stores += 1
        facts.lmcache_stored_tokens += stored


@dataclass
class PromFacts:
    """What a generated Prometheus dump holds (summed over its engines)."""

    queries: int
    hits: int
    external_queries: int
    external_hits: int
    prompt_tokens: int
    cached_tokens: int
    kv_usage_max: float
    preemptions: int
    store_bytes: int
    load_bytes: int
    samples: int


def prometheus_dump(*, seed: int = SEED, engines: int = 2, loads: bool = False,
                    flat_offload: bool = True, deprecated_too: bool = True,
                    kv_usage: float = 0.62, preemptions: int = 0) -> tuple[str, PromFacts]:
    """A ``/metrics`` text exposition as prometheus_client writes it (``_total`` on counters,
    ``_created`` samples beside them), with the deprecated names exported alongside."""
    rng = random.Random(seed)
    lines: list[str] = []
    samples = 0

    def metric(name: str, kind: str, doc: str, values: list[tuple[str, float]]) -> None:
        nonlocal samples
        lines.append(f"# HELP {name} {doc}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in values:
            lines.append(f"{name}{{{labels}}} {float(value)!r}")
            samples += 1

    def engine_labels(e: int, extra: str = "") -> str:
        return f'engine="{e}",model_name="{MODEL}"' + extra

    q = [rng.randint(1_000_000, 9_000_000) for _ in range(engines)]
    h = [int(x * rng.uniform(0.05, 0.15)) for x in q]
    eq = [x - y for x, y in zip(q, h, strict=True)]
    eh = [int(x * rng.uniform(0.2, 0.4)) if loads else 0 for x in eq]
    stored = [rng.randint(10, 90) * (1 << 30) for _ in range(engines)]
    loaded = [rng.randint(1, 9) * (1 << 30) if loads else 0 for _ in range(engines)]
    usage = [kv_usage - 0.1 * e for e in range(engines)]

    def counter(name: str, doc: str, vals: list[int], extra: str = "") -> None:
        metric(name + "_total", "counter", doc,
               [(engine_labels(e, extra), v) for e, v in enumerate(vals)])
        metric(name + "_created", "gauge", doc,
               [(engine_labels(e, extra), 1.7644968e9) for e in range(engines)])

    metric("vllm:num_requests_running", "gauge", "Number of requests in model execution "
           "batches.", [(engine_labels(e), 4.0) for e in range(engines)])
    metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
           [(engine_labels(e), 0.0) for e in range(engines)])
    metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
           [(engine_labels(e), usage[e]) for e in range(engines)])
    if deprecated_too:
        metric("vllm:gpu_cache_usage_perc", "gauge", "GPU KV-cache usage. DEPRECATED",
               [(engine_labels(e), usage[e]) for e in range(engines)])
        counter("vllm:gpu_prefix_cache_queries", "DEPRECATED", q)
        counter("vllm:gpu_prefix_cache_hits", "DEPRECATED", h)
    counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of "
            "queried tokens.", q)
    counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached "
            "tokens.", h)
    counter("vllm:external_prefix_cache_queries", "External prefix cache queries.", eq)
    counter("vllm:external_prefix_cache_hits", "External prefix cache hits.", eh)
    prompt = [x + rng.randint(0, 100) for x in q]
    cached = [x + y for x, y in zip(h, eh, strict=True)]
    counter("vllm:prompt_tokens", "Number of prefill tokens processed.", prompt)
    counter("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).",
            cached)
    pre = [preemptions] + [0] * (engines - 1)
    counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", pre)
    if flat_offload:
        counter("vllm:kv_offload_store_bytes", "Total bytes stored from GPU to offload "
                "storage.", stored)
        counter("vllm:kv_offload_load_bytes", "Total bytes loaded from offload storage to "
                "GPU.", loaded)
    if deprecated_too or not flat_offload:
        counter("vllm:kv_offload_total_bytes", "Number of bytes offloaded by KV connector",
                stored, ',transfer_type="GPU_to_CPU"')
        counter("vllm:kv_offload_total_bytes", "Number of bytes offloaded by KV connector",
                loaded, ',transfer_type="CPU_to_GPU"')
    facts = PromFacts(sum(q), sum(h), sum(eq), sum(eh), sum(prompt), sum(cached), max(usage),
                      preemptions, sum(stored), sum(loaded), samples)
    return "\n".join(lines) + "\n", facts


@dataclass
class SglangFacts:
    """What a generated SGLang log holds."""

    prefill_lines: int = 0
    new_tokens: int = 0
    cached_tokens: int = 0
    max_usage: float = 0.0
    max_queue: int = 0
    full_queued_lines: int = 0
    page_size: int = 1
    bad_lines: int = 0


def sglang_log(*, seed: int = SEED, batches: int = 40, old_wording: bool = False,
               full: bool = False, page_size: int = 1,
               bad_lines: int = 0) -> tuple[str, SglangFacts]:
    """An SGLang server log with ``log_prefill_stats`` lines (newer ``Prefill batch, ``;
    old_wording: ``Prefill batch. `` with ``cache hit rate: %.2f%%``)."""
    rng = random.Random(seed)
    facts = SglangFacts(page_size=page_size)
    start = datetime(2026, 11, 30, 9, 0, 0)
    out = [f"[{start:%Y-%m-%d %H:%M:%S}] server_args=ServerArgs(model_path='{MODEL}', "
           f"tokenizer_path='{MODEL}', tp_size=2, page_size={page_size}, "
           "disable_radix_cache=False, enable_hierarchical_cache=False, "
           "speculative_algorithm=None, chunked_prefill_size=8192)",
           f"[{start:%Y-%m-%d %H:%M:%S} TP0] max_total_num_tokens=444500, "
           "chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=2049, "
           "context_len=131072"]
    for i in range(batches):
        when = start + timedelta(seconds=5 * (i + 1))
        stamp = f"[{when:%Y-%m-%d %H:%M:%S} TP0]"
        seqs = rng.randint(1, 4)
        new = rng.randint(50, 8_000)
        cached = rng.choice((0, rng.randint(0, 40_000)))
        usage = rng.uniform(0.95, 0.99) if full else rng.uniform(0.0, 0.6)
        queue = rng.randint(1, 20) if full else rng.randint(0, 2)
        running = rng.randint(0, 30)
        if i < bad_lines:
            out.append(f"{stamp} Prefill batch, #new-seq: {seqs}, #new-token")
            facts.bad_lines += 1
            continue
        if old_wording:
            rate = cached / (new + cached) * 100 if new + cached else 0.0
            out.append(f"{stamp} Prefill batch. #new-seq: {seqs}, #new-token: {new}, "
                       f"#cached-token: {cached}, cache hit rate: {rate:.2f}%, "
                       f"token usage: {usage:.2f}, #running-req: {running}, "
                       f"#queue-req: {queue}")
        else:
            out.append(f"{stamp} Prefill batch, #new-seq: {seqs}, #new-token: {new}, "
                       f"#cached-token: {cached}, token usage: {usage:.2f}, "
                       f"#running-req: {running}, #queue-req: {queue}, ")
        out.append(f"{stamp} Decode batch, #running-req: {running}, #token: {new + cached}, "
                   f"token usage: {usage:.2f}, cuda graph: True, gen throughput (token/s): "
                   f"{rng.uniform(20, 900):.2f}, #queue-req: {queue}, ")
        printed_usage = float(f"{usage:.2f}")
        facts.prefill_lines += 1
        facts.new_tokens += new
        facts.cached_tokens += cached
        facts.max_usage = max(facts.max_usage, printed_usage)
        facts.max_queue = max(facts.max_queue, queue)
        facts.full_queued_lines += printed_usage >= 0.95 and queue > 0
    return "\n".join(out) + "\n", facts


def build(out_dir: Path = HERE) -> dict[str, Path]:
    """Write the sample engine log into `out_dir`; returns its path by name."""
    out_dir.mkdir(parents=True, exist_ok=True)
    text, _ = vllm_log()
    path = out_dir / VLLM_OFFLOAD_FILE
    path.write_text(text, encoding="utf-8")
    return {"vllm-offload": path}


def main(argv: list[str]) -> None:
    out = Path(argv[1]) if len(argv) > 1 else HERE
    for name, path in build(out).items():
        print(f"{name}: {path} ({path.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main(sys.argv)
