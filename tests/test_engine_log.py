"""`prefixscope engine-log`: vLLM / SGLang server logs and Prometheus dumps.

Expected values come from an independent oracle: sample_logs/make_engine_log.py (standard
library only, never prefixscope) prints each line with the upstream format strings and
returns the numbers it printed; the real excerpts in tests/data/real/engine_logs/ were
counted by hand (see each test).
"""

from __future__ import annotations

import ast
import gzip
import importlib.util
import json
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import ROOT
from typer.testing import CliRunner

from prefixscope.analyses.engine_cache import (
    KV_FULL,
    LOW_HIT_RATE,
    analyze_engine_logs,
    classify_engine_paths,
    find_engine_logs,
)
from prefixscope.cli.main import app
from prefixscope.ingest.engine_logs import engine_log_kind, parse_prom_line, parse_stats

SAMPLES = ROOT / "sample_logs"
runner = CliRunner()


def _generator():
    spec = importlib.util.spec_from_file_location("make_engine_log",
                                                  SAMPLES / "make_engine_log.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


gen = _generator()


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def kinds(analysis) -> list[str]:
    return [f.kind for f in analysis.findings]


def finding(analysis, kind: str, source: str | None = None):
    found = [f for f in analysis.findings if f.kind == kind
             and (source is None or f.evidence.get("source") == source)]
    assert len(found) == 1, kinds(analysis)
    return found[0]


# ------------------------------------------------------------------ vLLM logs


@pytest.fixture(scope="module")
def l2_run(tmp_path_factory):
    text, facts = gen.vllm_log()
    path = write(tmp_path_factory.mktemp("l2"), "vllm.log", text)
    return analyze_engine_logs([path]), facts


class TestWriteOnlyOffload:
    """The design's incident: stores every interval, never loads, external rate 0.0%."""

    @pytest.fixture
    def run(self, l2_run):
        return l2_run

    def test_every_line_of_each_kind_is_read(self, run):
        a, facts = run
        assert a.lines == facts.lines
        assert a.matched["stats"] == facts.stats_lines == 120
        assert a.matched["kv-transfer"] == facts.transfer_lines == 120
        assert a.matched["config"] == facts.config_lines
        assert a.skipped == 0

    def test_configuration_facts(self, run):
        a, _ = run
        assert a.block_size == 16
        assert a.config_value("kv_connector") == "OffloadingConnector"
        assert a.config_value("offload_target") == "CPU (vLLM native offload)"
        assert a.config_value("offload_block_size") == "64"  # the connector's, not the GPU's
        assert a.config_value("vllm_version") == "0.11.0"
        assert a.config_value("enable_prefix_caching") == "True"
        assert a.config_value("gpu_kv_cache_tokens") == "262144"

    def test_series_is_the_printed_values(self, run):
        a, facts = run
        assert [p.prefix_hit_rate for p in a.series] == facts.prefix_rates
        assert [p.kv_usage for p in a.series] == facts.kv_usages
        assert a.prefix_hit_rate.median == statistics.median(facts.prefix_rates)
        assert a.prefix_hit_rate.min == min(facts.prefix_rates)
        assert a.prefix_hit_rate.max == max(facts.prefix_rates)
        assert a.prefix_hit_rate.last == facts.prefix_rates[-1]
        assert a.external_hit_rate.points == 120 and a.external_hit_rate.max == 0.0
        assert a.series[0].time == facts.first_stats.replace(year=2000, tzinfo=UTC)
        assert not a.year_known

    def test_offload_counters(self, run):
        a, facts = run
        assert a.offload.store_bytes == facts.store_bytes
        assert a.offload.store_points == facts.store_points == 120
        assert a.offload.load_points == 0 and a.offload.load_bytes == 0

    def test_l2_write_only_with_its_evidence(self, run):
        a, facts = run
        f = finding(a, "l2-write-only")
        assert f.evidence["store_points"] == 120
        assert f.evidence["store_bytes"] == facts.store_bytes
        assert f.evidence["load_points"] == 0
        assert f.evidence["external_rate_lines"] == 120
        assert f.evidence["external_hit_rate_max"] == 0.0
        assert f.evidence["connector"] == "OffloadingConnector"
        assert f.evidence["duration_s"] == (facts.last_store - facts.first_stats).total_seconds()
        assert "0.0% in 120 stats lines" in f.title
        assert "PYTHONHASHSEED" in f.fix

    def test_low_local_hit_rate(self, run):
        a, facts = run
        f = finding(a, "low-prefix-hit-rate", "vllm-log")
        assert f.evidence["median"] == statistics.median(facts.prefix_rates) < LOW_HIT_RATE
        assert f.evidence["busy_lines"] == 120
        assert set(kinds(a)) == {"l2-write-only", "low-prefix-hit-rate"}


def test_a_tier_that_loads_is_no_finding(tmp_path):
    text, facts = gen.vllm_log(write_only=False, seed=3)
    a = analyze_engine_logs([write(tmp_path, "ok.log", text)])
    assert facts.load_points > 0
    assert a.offload.load_bytes == facts.load_bytes
    assert a.offload.load_points == facts.load_points
    assert a.external_hit_rate.min > 0
    assert "l2-write-only" not in kinds(a) and "external-cache-no-hits" not in kinds(a)


@pytest.mark.parametrize("write_only", [True, False], ids=["write-only", "loads"])
def test_lmcache_lookups_and_stores(tmp_path, write_only):
    """LMCache's own lines (its vLLM adapter's lookup and store lines, dated with a full
    date, which dates vLLM's year-less lines of the same file too)."""
    text, facts = gen.vllm_log(lmcache=True, write_only=write_only, seed=12, minutes=3)
    a = analyze_engine_logs([write(tmp_path, "lmcache.log", text)])
    lm = a.lmcache
    assert a.matched["lmcache"] == facts.lmcache_lookups + facts.lmcache_stores
    assert (lm.lookups, lm.lookup_tokens, lm.hit_tokens) == (
        facts.lmcache_lookups, facts.lmcache_lookup_tokens, facts.lmcache_hit_tokens)
    assert (lm.loading_lookups, lm.load_tokens) == (facts.lmcache_loads,
                                                   facts.lmcache_load_tokens)
    assert (lm.stores, lm.stored_tokens) == (facts.lmcache_stores, facts.lmcache_stored_tokens)
    assert a.config_value("kv_connector") == "LMCacheConnectorV1"
    assert a.year_known and a.series[0].time == facts.first_stats.replace(tzinfo=UTC)
    assert a.year_from == {str(tmp_path / "lmcache.log"): "file context"}  # said so
    if write_only:
        f = finding(a, "l2-write-only")
        assert f.evidence["lmcache_stored_tokens"] == facts.lmcache_stored_tokens
        assert f.evidence["lmcache_loading_lookups"] == 0
    else:
        assert facts.lmcache_loads > 0 and "l2-write-only" not in kinds(a)


def test_lmcache_lookup_wordings():
    from prefixscope.ingest.engine_logs import parse_engine_log

    lines = [  # lmcache/integration/vllm/vllm_v1_adapter.py, older and newer
        "[2025-04-23 08:49:57,479] LMCache INFO: Reqid: cmpl-1, Total tokens 261, LMCache hit "
        "tokens: 261, need to load: 4 (vllm_v1_adapter.py:505:lmcache)",
        "[2025-04-23 08:49:58,001] LMCache INFO: Reqid: cmpl-2, Total tokens 900, Inference "
        "Engine computed tokens: 0, LMCache hit tokens: 256, but need to load: 256 < "
        "min_retrieve 512, skip retrieve but record for save skip (vllm_v1_adapter.py:1:x)",
        "[2025-04-23 08:49:58,002] LMCache INFO: Storing KV cache for 644 out of 900 tokens "
        "for request cmpl-2 (vllm_v1_adapter.py:2:x)"]
    parsed = parse_engine_log("x", lines, "vllm")
    assert [(p.kind, p.tokens, p.hit_tokens, p.load_tokens) for p in parsed.lmcache] == [
        ("lookup", 261, 261, 4), ("lookup", 900, 256, 0), ("store", 644, 0, 0)]


def test_kv_pressure_counts_full_lines_with_a_queue(tmp_path):
    text, facts = gen.vllm_log(kv_full=True, seed=5, minutes=5)
    a = analyze_engine_logs([write(tmp_path, "full.log", text)])
    f = finding(a, "kv-pressure", "vllm-log")
    assert f.evidence["lines"] == facts.full_waiting_lines > 0
    assert f.evidence["preemptions"] == facts.preemptions > 0
    assert f.evidence["max_kv_usage"] == max(u for u in facts.kv_usages) >= KV_FULL


def test_without_a_connector_no_external_rate_and_no_l2(tmp_path):
    text, facts = gen.vllm_log(connector=False, seed=9, minutes=3)
    a = analyze_engine_logs([write(tmp_path, "plain.log", text)])
    assert a.external_hit_rate.points == 0
    assert a.matched.get("kv-transfer", 0) == 0
    assert a.config_value("kv_connector") is None
    assert "l2-write-only" not in kinds(a)
    assert a.matched["stats"] == facts.stats_lines == 18


def test_the_mid_2025_fixed_format_line(tmp_path):
    text, facts = gen.vllm_log(fixed_format=True, connector=False, seed=2, minutes=2)
    a = analyze_engine_logs([write(tmp_path, "old.log", text)])
    assert a.matched["stats"] == facts.stats_lines == 12
    assert [p.prefix_hit_rate for p in a.series] == facts.prefix_rates
    assert all(p.external_hit_rate is None and p.engine == "000" for p in a.series)


def test_cut_stats_lines_are_counted_skips_with_their_line(tmp_path):
    text, facts = gen.vllm_log(bad_lines=2, seed=4, minutes=2)
    path = write(tmp_path, "cut.log", text)
    a = analyze_engine_logs([path])
    assert a.skipped == facts.bad_lines == 2
    lines = text.splitlines()
    assert [s.line for s in a.skips] == [i + 1 for i, ln in enumerate(lines)
                                         if ln.endswith("tokens/s, Avg")]
    assert a.matched["stats"] == facts.stats_lines


def test_iso_prefixed_lines_carry_the_year(tmp_path):
    text, facts = gen.vllm_log(iso_prefix=True, seed=6, minutes=1)
    a = analyze_engine_logs([write(tmp_path, "k8s.log", text)])
    assert a.year_known
    assert a.first == facts.first_stats.replace(tzinfo=UTC)


def test_gzip_is_read(tmp_path):
    text, facts = gen.vllm_log(seed=8, minutes=2)
    path = tmp_path / "vllm.log.gz"
    path.write_bytes(gzip.compress(text.encode()))
    a = analyze_engine_logs(find_engine_logs([str(tmp_path)]))
    assert a.matched["stats"] == facts.stats_lines


def test_stats_parts_in_any_subset():
    """Every part is read by its own label: the aggregated prefix, preemptions, MM rate."""
    line = gen._stats_message(0, 12.5, 3.0, 4, 2, 7, 0.5, 0.25, 0.125, aggregated=4)
    assert line.startswith("4 Engines Aggregated: ")
    assert parse_stats(line) == {"prompt_throughput": 12.5, "generation_throughput": 3.0,
                                 "running": 4, "waiting": 2, "preemptions": 7,
                                 "kv_usage": 0.5, "prefix_hit_rate": 0.25,
                                 "external_hit_rate": 0.125}
    v0 = ("Avg prompt throughput: 6501.4 tokens/s, Avg generation throughput: 69.1 tokens/s, "
          "Running: 4 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 15.6%, "
          "CPU KV cache usage: 0.0%")  # vllm-project/vllm#6206, the V0 engine
    assert parse_stats(v0) == {"prompt_throughput": 6501.4, "generation_throughput": 69.1,
                               "running": 4, "waiting": 0, "kv_usage": 0.156}


# ------------------------------------------------------------------ Prometheus


def test_prometheus_counters_token_weighted_without_double_counting(tmp_path):
    """Deprecated names exported beside the new ones (vLLM 0.9-0.10) are not added twice."""
    text, facts = gen.prometheus_dump(engines=2, deprecated_too=True)
    a = analyze_engine_logs([write(tmp_path, "metrics.txt", text)])
    p = a.prometheus
    assert a.kinds == {str(tmp_path / "metrics.txt"): "prometheus"}
    assert p.samples == facts.samples
    assert (p.prefix_queries, p.prefix_hits) == (facts.queries, facts.hits)
    assert p.hit_rate == facts.hits / facts.queries
    assert (p.external_queries, p.external_hits) == (facts.external_queries, 0)
    assert p.external_hit_rate == 0.0
    assert (p.prompt_tokens, p.prompt_tokens_cached) == (facts.prompt_tokens,
                                                         facts.cached_tokens)
    assert p.kv_usage == facts.kv_usage_max
    assert (p.offload_store_bytes, p.offload_load_bytes) == (facts.store_bytes, 0)
    f = finding(a, "l2-write-only")
    assert f.evidence["prometheus_store_bytes"] == facts.store_bytes
    assert f.evidence["prometheus_load_bytes"] == 0
    assert "low-prefix-hit-rate" in kinds(a)  # hits are 5-15% of queries


def test_prometheus_old_labeled_offload_names_and_pressure(tmp_path):
    text, facts = gen.prometheus_dump(engines=1, loads=True, flat_offload=False,
                                      deprecated_too=False, kv_usage=0.97, preemptions=3)
    a = analyze_engine_logs([write(tmp_path, "metrics.prom", text)])
    p = a.prometheus
    assert (p.offload_store_bytes, p.offload_load_bytes) == (facts.store_bytes,
                                                             facts.load_bytes)
    assert p.external_hits == facts.external_hits > 0
    assert "l2-write-only" not in kinds(a)
    f = finding(a, "kv-pressure", "prometheus")
    assert (f.evidence["kv_usage"], f.evidence["preemptions"]) == (0.97, 3)


def test_prometheus_bad_lines_are_counted(tmp_path):
    text, facts = gen.prometheus_dump(engines=1)
    path = write(tmp_path, "metrics.txt", text + 'vllm:broken{engine="0" 12\nvllm:x 1.2.3\n')
    a = analyze_engine_logs([path])
    assert a.skipped == 2 and a.prometheus.samples == facts.samples
    assert [s.line for s in a.skips] == [len(text.splitlines()) + 1, len(text.splitlines()) + 2]


def test_prometheus_line_parser():
    assert parse_prom_line('vllm:a_total{engine="0",model_name="q\\"x"} 1.5e+03 1700000000') \
        == ("vllm:a_total", (("engine", "0"), ("model_name", 'q"x')), 1500.0)
    assert parse_prom_line("vllm:b 3") == ("vllm:b", (), 3.0)
    assert isinstance(parse_prom_line("vllm:c{a=b} 1"), str)


# ------------------------------------------------------------------ SGLang


@pytest.mark.parametrize("old", [False, True], ids=["prefill-batch-comma", "prefill-batch-dot"])
def test_sglang_cached_token_totals(tmp_path, old):
    text, facts = gen.sglang_log(old_wording=old, page_size=16, bad_lines=1)
    a = analyze_engine_logs([write(tmp_path, "sglang.log", text)])
    sg = a.sglang
    assert a.kinds[str(tmp_path / "sglang.log")] == "sglang"
    assert sg.prefill_lines == facts.prefill_lines == 39
    assert (sg.new_tokens, sg.cached_tokens) == (facts.new_tokens, facts.cached_tokens)
    assert sg.hit_rate == facts.cached_tokens / (facts.cached_tokens + facts.new_tokens)
    assert sg.max_token_usage == facts.max_usage and sg.max_queue == facts.max_queue
    assert a.block_size == 16
    assert a.skipped == facts.bad_lines == 1


def test_sglang_pressure(tmp_path):
    text, facts = gen.sglang_log(full=True, seed=11)
    a = analyze_engine_logs([write(tmp_path, "sglang.log", text)])
    assert finding(a, "kv-pressure", "sglang-log").evidence["lines"] == facts.full_queued_lines


# ------------------------------------------------------------------ real excerpts

REAL_LOGS = "engine_logs"


def test_real_vllm_kv_pressure_excerpt(real):
    """vllm-project/vllm#43295: 5 lines, Running 18-21, Waiting 43/42/33/23/23, usage
    95.9/95.5/87.7/95.9/98.4%, hit rate 0.0% throughout: 4 lines full with a queue."""
    a = analyze_engine_logs([real / REAL_LOGS / "vllm-43295-kv-pressure.log"])
    assert a.matched == {"stats": 5}
    assert [p.waiting for p in a.series] == [43, 42, 33, 23, 23]
    assert [p.kv_usage for p in a.series] == [0.959, 0.955, 0.877, 0.959, 0.984]
    f = finding(a, "kv-pressure")
    assert (f.evidence["lines"], f.evidence["max_waiting"], f.evidence["max_kv_usage"]) == (
        4, 43, 0.984)
    assert f.evidence["duration_s"] == 40.0
    low = finding(a, "low-prefix-hit-rate")
    assert (low.evidence["busy_lines"], low.evidence["median"]) == (5, 0.0)


def test_real_vllm_lines_behind_a_container_timestamp(real):
    """tenstorrent/tt-inference-server#3359: 4 lines with an RFC 3339 prefix, 10 s apart."""
    a = analyze_engine_logs([real / REAL_LOGS / "tt-inference-server-3359-iso.log"])
    assert a.matched == {"stats": 4} and a.year_known
    assert a.first == datetime(2026, 5, 12, 8, 1, 39, 331095, tzinfo=UTC)
    assert [p.prompt_throughput for p in a.series] == [6335.3, 0.0, 3411.1, 0.0]
    assert [p.running for p in a.series] == [9, 9, 10, 10]
    assert a.kv_usage.max == 0.799
    assert kinds(a) == ["low-prefix-hit-rate"]


def test_real_vllm_mm_and_spec_decoding(real):
    """Sandermage/genesis-vllm-patches#24: two idle stats lines with the MM cache part and a
    SpecDecoding metrics line between them; idle lines make no rate finding."""
    a = analyze_engine_logs([real / REAL_LOGS / "genesis-vllm-patches-24-mm-spec.log"])
    assert a.matched == {"spec-decoding": 1, "stats": 2}
    assert [p.mm_hit_rate for p in a.series] == [0.0, 0.0]
    assert a.config_value("speculative_decoding") == "active (SpecDecoding metrics)"
    assert a.findings == ()


def test_real_sglang_hybrid_prefill_lines(real):
    """sgl-project/sglang#30047: 5 prefill lines of a mamba hybrid (``full token usage``),
    #new-token 43008 + 43264 + 43008 + 43904 + 43008 = 216,192, #cached-token 0."""
    a = analyze_engine_logs([real / REAL_LOGS / "sglang-30047-hybrid-prefill.log"])
    sg = a.sglang
    assert (sg.prefill_lines, sg.new_tokens, sg.cached_tokens) == (5, 216_192, 0)
    assert (sg.max_token_usage, sg.max_queue) == (0.40, 97)
    assert finding(a, "low-prefix-hit-rate").evidence["hit_rate"] == 0.0


def test_real_sglang_swa_prefill_lines(real):
    """sgl-project/sglang#36081: ``[... TP0 EP0]`` prefixes, 3 prefill lines (256 + 8192 +
    8192 new tokens) and an access-log line."""
    a = analyze_engine_logs([real / REAL_LOGS / "sglang-36081-swa-prefill.log"])
    assert a.matched == {"other": 1, "prefill": 3}
    assert (a.sglang.new_tokens, a.sglang.cached_tokens) == (16_640, 0)
    assert a.first == datetime(2026, 8, 23, 9, 5, 54, tzinfo=UTC)
    assert a.findings[0].kind == "low-prefix-hit-rate"


# ------------------------------------------------------------------ sniffing, ingest, CLI


def test_sniffing_by_content(real):
    for name in ("vllm-43295-kv-pressure.log", "tt-inference-server-3359-iso.log"):
        assert engine_log_kind((real / REAL_LOGS / name).read_text()) == "vllm"
    assert engine_log_kind((real / REAL_LOGS / "sglang-30047-hybrid-prefill.log")
                           .read_text()) == "sglang"
    assert engine_log_kind(gen.prometheus_dump()[0]) == "prometheus"
    assert engine_log_kind('{"timestamp": "x", "request": {}}\n') is None
    assert engine_log_kind("just some text\nINFO: started\n") is None


def test_find_engine_logs_walks_directories(tmp_path):
    write(tmp_path, "vllm.log", gen.vllm_log(minutes=1)[0])
    write(tmp_path, "metrics.txt", gen.prometheus_dump()[0])
    write(tmp_path, "capture.jsonl", '{"request": {"model": "m", "messages": []}}\n')
    write(tmp_path, "notes.md", "# notes\n")
    assert sorted(p.name for p in find_engine_logs([str(tmp_path)])) == ["metrics.txt",
                                                                         "vllm.log"]
    found, problems = classify_engine_paths([str(tmp_path / "capture.jsonl")])
    assert found == [] and problems == [(str(tmp_path / "capture.jsonl"),
                                         "not a vLLM / SGLang server log or a Prometheus "
                                         "/metrics dump")]


def test_ingest_counts_engine_logs_apart(tmp_path):
    write(tmp_path, "vllm.log", gen.vllm_log(minutes=1)[0])
    capture = ROOT / "tests" / "fixtures" / "raw" / "claude_code_capture.jsonl"
    (tmp_path / "capture.jsonl").write_bytes(capture.read_bytes())
    result = runner.invoke(app, ["ingest", str(tmp_path), "--store", "s.duckdb", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["engine_logs"] == [str(tmp_path / "vllm.log")]
    assert out["unrecognized"] == [] and out["skipped"] == 0 and out["ingested"] > 0
    text = runner.invoke(app, ["ingest", str(tmp_path), "--store", "t.duckdb"])
    assert "1 engine log (" in text.stderr and "prefixscope engine-log" in text.stderr
    strict = runner.invoke(app, ["ingest", str(tmp_path / "vllm.log"), "--strict",
                                 "--store", "u.duckdb"])
    assert strict.exit_code == 0, strict.output


def test_cli_terminal_and_errors(tmp_path):
    path = write(tmp_path, "vllm.log", gen.vllm_log(minutes=2)[0])
    result = runner.invoke(app, ["engine-log", str(path)])
    assert result.exit_code == 0, result.output
    assert "l2-write-only" in result.stdout and "block size: 16" in result.stdout
    bad = runner.invoke(app, ["engine-log", str(ROOT / "README.md")])
    assert bad.exit_code == 1
    assert bad.stderr.strip().splitlines() == [
        f"error: {ROOT / 'README.md'}: not a vLLM / SGLang server log or a Prometheus "
        "/metrics dump"]
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "a.jsonl").write_text('{"request": {}}\n')
    none = runner.invoke(app, ["engine-log", str(empty)])
    assert none.exit_code == 1 and "no vLLM / SGLang server log" in none.stderr


def test_sample_log_shows_the_incident():
    a = analyze_engine_logs([SAMPLES / "vllm-offload.log"])
    f = finding(a, "l2-write-only")
    assert (f.evidence["store_points"], f.evidence["load_points"],
            f.evidence["external_rate_lines"]) == (120, 0, 120)
    assert f.evidence["duration_s"] == 1190.0  # 09:00:10 ... 09:20:00


# ------------------------------------------------------------------ the generator


def test_generator_reproduces_the_sample_and_imports_no_prefixscope(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c",
         "import runpy, sys\nsys.argv = sys.argv[1:]\n"
         "runpy.run_path(sys.argv[0], run_name='__main__')\n"
         "print(sorted(m for m in sys.modules if m.split('.')[0] == 'prefixscope'))\n",
         str(SAMPLES / "make_engine_log.py"), str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, check=True)
    assert ast.literal_eval(done.stdout.strip().splitlines()[-1]) == []
    assert (tmp_path / "vllm-offload.log").read_bytes() == \
        (SAMPLES / "vllm-offload.log").read_bytes()
    tree = ast.parse((SAMPLES / "make_engine_log.py").read_text(encoding="utf-8"))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names}
    imported |= {(n.module or "").split(".")[0] for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom)}
    assert "prefixscope" not in imported


# ------------------------------------------------------------------ issue 21: real shapes


def test_real_vllm_v0_gpu_and_cpu_prefix_rates_stay_apart(real):
    """vllm-project/vllm#18674: the V0 engine (``vllm/engine/metrics.py``
    ``LoggingStatLogger.log()``) prints the stats line, then ``"Prefix cache hit rate:
    GPU: %.2f%%, CPU: %.2f%%"`` on a line of its own: GPU 0.00%, CPU 90.00% three times."""
    a = analyze_engine_logs([real / REAL_LOGS / "vllm-18674-v0-gpu-cpu.log"])
    assert a.matched == {"stats": 3, "stats-prefix": 3} and a.skipped == 0
    assert [p.engine for p in a.series] == ["v0"] * 3
    assert [p.prefix_hit_rate for p in a.series] == [0.0, 0.0, 0.0]
    assert [p.cpu_prefix_hit_rate for p in a.series] == [0.9, 0.9, 0.9]
    assert [p.kv_usage for p in a.series] == [0.0, 0.0, 0.0]
    assert (a.cpu_prefix_hit_rate.points, a.cpu_prefix_hit_rate.median) == (3, 0.9)
    low = finding(a, "low-prefix-hit-rate")
    assert (low.evidence["median"], low.evidence["cpu_median"]) == (0.0, 0.9)
    assert "the CPU tier's median is 90.0%" in low.title


def test_v0_prefix_line_without_its_stats_line_is_a_counted_skip():
    from prefixscope.ingest.engine_logs import parse_engine_log

    parsed = parse_engine_log("x", ["INFO 05-25 06:50:29 [metrics.py:502] Prefix cache hit "
                                    "rate: GPU: 0.00%, CPU: 90.00%"], "vllm")
    assert [(s.line, s.reason) for s in parsed.skips] == [
        (1, "V0 prefix cache hit rate line without the V0 stats line before it")]


def test_real_lmcache_stored_lines_count_as_stores(real):
    """LMCache/LMCache#2262: LMCache's engine (``lmcache/v1/cache_engine.py``: ``"Stored %d
    out of total %d tokens. size: ..."``) stored 2048 tokens three times; the adapter's
    ``Storing KV cache for 2048 out of 20480 / 22528 tokens`` lines between are the same
    stores asked for, not more: 3 stores, 3 x 2048 = 6,144 tokens."""
    a = analyze_engine_logs([real / REAL_LOGS / "lmcache-2262-stored.log"])
    lm = a.lmcache
    assert a.matched == {"lmcache": 5}
    assert (lm.stores, lm.stored_tokens, lm.stores_from) == (3, 6144, "engine")
    assert (lm.lookups, lm.retrievals) == (0, 0)
    # one cold request (chatcmpl-80d09d69db030a8b) storing within one second
    # (22:21:08.014 - .313): nothing could have loaded yet, so no write-only tier
    assert "l2-write-only" not in kinds(a)


def test_lmcache_stores_over_several_seconds_with_no_load_are_write_only(real, tmp_path):
    """The same LMCache lines, the three stores moved to 22:21:08, 22:21:19 and 22:21:31:
    three distinct seconds of stores and still nothing loaded, 3 x 2048 = 6,144 tokens."""
    lines = (real / REAL_LOGS / "lmcache-2262-stored.log").read_text().splitlines()
    stamps = iter(["22:21:08", "22:21:19", "22:21:31"])
    moved = [line.replace("22:21:08", next(stamps)) if "] LMCache INFO: Stored " in line
             else line for line in lines]
    a = analyze_engine_logs([write(tmp_path, "lmcache.log", "\n".join(moved) + "\n")])
    f = finding(a, "l2-write-only")
    assert f.evidence["lmcache_stored_tokens"] == 6144
    assert "3 LMCache stores, 6,144 tokens stored" in f.title
    assert f.evidence["duration_s"] == 23.0  # 22:21:08.014 ... 22:21:31.313, whole seconds


def test_lmcache_store_and_retrieve_wordings():
    """``lmcache/v1/cache_engine.py`` (0.5.6): ``"[req_id=%s] Stored %d out of total %d
    tokens. ..."`` (l. 589), ``"[req_id=%s] Retrieved %d out of %d required tokens (from %d
    total tokens). ..."`` (l. 986), ``"[req_id=%s] Retrieved %d out of %d out of total %d
    tokens"`` (l. 1147); ``v1/multiprocess/modules/engine_driven_transfer.py``: ``"Stored %d
    tokens in %.3f seconds"``."""
    from prefixscope.ingest.engine_logs import parse_engine_log

    head = "[2026-11-30 09:00:10,001] LMCache INFO: "
    lines = [
        head + "[req_id=r1] Stored 512 out of total 700 tokens. size: 0.0700 GB, cost 1.0000 "
        "ms, throughput: 70.0000 GB/s; offload_time: 0.9000 ms, put_time: 0.1000 ms "
        "(cache_engine.py:589:lmcache.v1.cache_engine)",
        head + "[req_id=r2] Retrieved 256 out of 512 required tokens (from 700 total tokens)."
        " size: 0.0350 gb, cost 0.5000 ms, throughput: 70.0000 GB/s; (cache_engine.py:986:x)",
        head + "[req_id=r3] Retrieved 768 out of 768 out of total 1000 tokens "
        "(cache_engine.py:1147:x)",
        head + "Stored 2816 tokens in 0.285 seconds (engine_driven_transfer.py:471:x)"]
    parsed = parse_engine_log("x", lines, "vllm")
    assert [(p.kind, p.tokens, p.hit_tokens, p.load_tokens) for p in parsed.lmcache] == [
        ("stored", 512, 0, 0), ("retrieve", 700, 512, 256), ("retrieve", 1000, 768, 768),
        ("stored", 2816, 0, 0)]


def test_real_lmcache_lookup_hit_whose_retrieval_fails_is_a_finding(real):
    """LMCache/LMCache#1690 (also kvcache-ai/Mooncake#888): the lookup says 32 of 32 tokens
    hit (need to load 31), the backend warns the block "can't be retrieved" and LMCache
    retrieves 0 of 32: a storage fault, not a 100% hit."""
    a = analyze_engine_logs([real / REAL_LOGS / "lmcache-1690-retrieve-failed.log"])
    lm = a.lmcache
    assert (lm.lookups, lm.lookup_tokens, lm.hit_tokens, lm.hit_rate) == (1, 32, 32, 1.0)
    assert (lm.retrievals, lm.required_tokens, lm.retrieved_tokens) == (1, 32, 0)
    assert (lm.failed_retrievals, lm.lost_blocks, lm.retrieved_rate) == (1, 1, 0.0)
    f = finding(a, "lmcache-retrieve-failed")
    assert f.title == ("LMCache lookups hit but loads fail: 1 of 1 retrievals got fewer "
                       "tokens than required (32 tokens short), 1 blocks in the storage that "
                       "can't be retrieved")
    assert (f.evidence["first"], f.evidence["last"]) == ("2025-09-25T00:42:06+00:00",
                                                         "2025-09-25T00:42:06+00:00")
    assert "storage" in f.fix and "l2-write-only" not in kinds(a)
    # Every timed line here is LMCache's, with its own full date.
    assert a.year_known and a.year_from[str(real / REAL_LOGS /
                                             "lmcache-1690-retrieve-failed.log")] == "stamps"


def test_real_sglang_time_only_stamps_are_kept_as_printed(real):
    """sgl-project/sglang#1612: an older SGLang printed ``[16:43:29 TP0]``, no date.
    #new-token 2062 + 6 x 8192 = 51,214; #cached-token 291 + 2753 + 897 + 523 + 632 + 1832
    = 6,928; the times stay ``16:43:29`` ... ``16:43:33``, never a year."""
    path = real / REAL_LOGS / "sglang-1612-time-only.log"
    assert engine_log_kind(path.read_text()) == "sglang"
    a = analyze_engine_logs([path])
    assert a.matched == {"other": 2, "prefill": 7}
    assert (a.sglang.new_tokens, a.sglang.cached_tokens) == (51_214, 6_928)
    assert a.sglang.hit_rate == 6_928 / (51_214 + 6_928)
    assert not a.year_known and a.year_from[str(path)] == "unknown"
    out = json.loads(runner.invoke(app, ["engine-log", str(path), "--json"]).stdout)
    assert (out["first"], out["last"], out["year_known"]) == ("16:43:29", "16:43:33", False)
    assert out["files"][0]["year_from"] == "unknown"
    low = finding(a, "low-prefix-hit-rate")
    assert (low.evidence["first"], low.evidence["duration_s"]) == ("16:43:29", 4.0)


def test_vllm_year_less_times_never_show_a_placeholder_year(real):
    path = real / REAL_LOGS / "vllm-43295-kv-pressure.log"
    out = json.loads(runner.invoke(app, ["engine-log", str(path), "--json"]).stdout)
    assert (out["first"], out["last"]) == ("05-19 10:13:11", "05-19 10:13:51")
    assert [s["time"] for s in out["series"]][:2] == ["05-19 10:13:11", "05-19 10:13:21"]
    evidence = [f["evidence"] for f in out["findings"]]
    assert all(e["first"].startswith("05-19 ") for e in evidence)
    assert "2000" not in json.dumps(out)


# SGLang 0.5.23's record prefix (python/sglang/srt/managers/scheduler.py
# configure_scheduler_process: " DP{n}", " PP{n}", " ATTN_CP{n}", " MOE_DP{n}", " TP{n}",
# " EP{n}" in that order; utils/common.py configure_logger: "[%(asctime)s{prefix}] ") and
# its prefill line (managers/scheduler_components/metrics_reporter.py
# report_prefill_stats: "Prefill batch, #new-seq: ..., #new-token: ..., #cached-token:
# ..., <usage parts>, #running-req: ..., #queue-req: ..., #pending-token: ..., ").
def _sg_prefill(ranks: str, new: int, cached: int, queue: int = 0) -> str:
    return (f"[2026-10-02 11:04:05{ranks}] Prefill batch, #new-seq: 1, #new-token: {new}, "
            f"#cached-token: {cached}, full token usage: 0.02, swa token usage: 0.01, "
            f"#running-req: 0, #queue-req: {queue}, #pending-token: 0, cuda graph: False, "
            "input throughput (token/s): 9000.00")


def test_sglang_rank_tags_beyond_tp_ep(tmp_path):
    text = "\n".join([_sg_prefill(" DP0 ATTN_CP0 TP0 EP0", 8192, 4096),
                      _sg_prefill(" DP1 ATTN_CP0 TP4 EP4", 4096, 0),
                      _sg_prefill(" DP0 ATTN_CP0 TP0 EP0", 8192, 8192)]) + "\n"
    path = write(tmp_path, "cp.log", text)
    assert engine_log_kind(text) == "sglang"
    a = analyze_engine_logs([path])
    assert a.matched == {"prefill": 3}
    # DP ranks schedule their own requests: they add up. 4096 + 0 + 8192 cached of
    # (8192 + 4096 + 8192) new + cached.
    assert (a.sglang.new_tokens, a.sglang.cached_tokens) == (20_480, 12_288)
    assert [(v.engine, v.lines, v.cached_tokens) for v in a.servers] == [
        ("DP0 ATTN_CP0 TP0 EP0", 2, 12_288), ("DP1 ATTN_CP0 TP4 EP4", 1, 0)]


def test_sglang_pipeline_stages_repeat_one_batch(tmp_path):
    text = "\n".join([_sg_prefill(" PP0 TP0", 8192, 1024), _sg_prefill(" PP1 TP0", 8192, 1024),
                      _sg_prefill(" PP0 TP0", 512, 0), _sg_prefill(" PP1 TP0", 512, 0)]) + "\n"
    a = analyze_engine_logs([write(tmp_path, "pp.log", text)])
    assert (a.sglang.prefill_lines, a.sglang.new_tokens, a.sglang.cached_tokens) == (
        2, 8704, 1024)


def test_sglang_context_parallel_ranks_repeat_one_batch(tmp_path):
    # attn_cp_size 5: every ATTN_CP rank's scheduler prints the batch it shares with the
    # others (the real log: 5 lines of #new-token 150,144 at one second, summed as
    # 750,720). Two batches: 150,144 new; then 2,048 new on 148,096 cached.
    ranks = [f" ATTN_CP{i} TP{i}" for i in range(5)]
    text = "\n".join([*(_sg_prefill(r, 150_144, 0) for r in ranks),
                      *(_sg_prefill(r, 2_048, 148_096) for r in ranks)]) + "\n"
    a = analyze_engine_logs([write(tmp_path, "cp5.log", text)])
    assert a.matched == {"prefill": 10}
    assert (a.sglang.prefill_lines, a.sglang.new_tokens, a.sglang.cached_tokens) == (
        2, 150_144 + 2_048, 148_096)
    # SGLang's own rate: cached / (new + cached) = 148,096 / 300,288
    assert a.sglang.hit_rate == 148_096 / 300_288


def test_a_stated_block_size_the_cached_values_contradict_is_stated_with_theirs(tmp_path):
    # a DeepSeek-V4 SGLang run states page_size=256 (its server_args line), yet its
    # batches cached 4,160 = 65 x 64, 8,256 = 129 x 64, 12,352 = 193 x 64 and
    # 16,384 = 256 x 64 tokens: 1 of 4 a multiple of 256 (16,384), none of 4,160 / 8,256 /
    # 12,352 of 128, all of 64 -- the cache matches in 64-token units
    args = ("[2026-05-15 08:39:19] server_args=ServerArgs(model_path='/root/workspace/models/"
            "DeepSeek-V4-Flash-Base', tp_size=8, pp_size=1, dp_size=1, ep_size=1, "
            "mem_fraction_static=0.88, kv_cache_dtype='bf16', cuda_graph_max_bs=320, "
            "page_size=256)")
    text = "\n".join([args, *(_sg_prefill(" TP0", 512, cached)
                             for cached in (4_160, 8_256, 12_352, 16_384))]) + "\n"
    path = write(tmp_path, "dsv4.log", text)
    a = analyze_engine_logs([path])
    assert (a.block_size, a.cached_block_size, a.effective_block_size) == (256, 64, 64)
    f = finding(a, "block-size-mismatch")
    assert f.evidence == {"stated_block_size": 256, "stated_at": f"{path}:1",
                          "cached_values_block_size": 64, "cached_values": 4,
                          "multiples_of_stated": 1}
    assert f.title == (f"the log states block size 256 ({path}:1), but its cached values are "
                       "multiples of 64: 1 of 4 are multiples of 256; the cache matches in "
                       "64-token units")
    out = runner.invoke(app, ["engine-log", str(path)]).stdout
    assert ("block size: 64 (the log's cached values are multiples of it); stated: 256 (the "
            "configuration above)") in " ".join(out.split())


def test_a_stated_block_size_the_cached_values_agree_with_is_the_one(tmp_path):
    args = ("[2026-05-15 08:39:19] server_args=ServerArgs(model_path='m', page_size=64)")
    text = "\n".join([args, *(_sg_prefill(" TP0", 512, cached)
                             for cached in (4_160, 8_256, 12_352))]) + "\n"
    a = analyze_engine_logs([write(tmp_path, "ok.log", text)])
    assert (a.block_size, a.cached_block_size, a.effective_block_size) == (64, None, 64)
    assert "block-size-mismatch" not in kinds(a)


def test_rank_tagged_sglang_log_is_an_engine_log_in_ingest_and_report(tmp_path):
    """Before: refused by engine-log, and report skipped it as an "invalid JSON document"."""
    logs = tmp_path / "logs"
    logs.mkdir()
    write(logs, "sglang.log", "\n".join(_sg_prefill(" PP0 ATTN_CP0 TP0", 100 * i, 0)
                                        for i in range(1, 4)) + "\n")
    capture = ROOT / "tests" / "fixtures" / "raw" / "claude_code_capture.jsonl"
    (logs / "capture.jsonl").write_bytes(capture.read_bytes())
    out = json.loads(runner.invoke(app, ["ingest", str(logs), "--store", "s.duckdb",
                                         "--json"]).stdout)
    assert out["engine_logs"] == [str(logs / "sglang.log")] and out["skipped"] == 0
    assert find_engine_logs([str(logs)]) == [logs / "sglang.log"]


def test_a_bracketed_text_file_skip_names_json_as_what_it_was_read_as(tmp_path):
    path = write(tmp_path, "notes.log", "[build 12] started\n[build 12] done\n")
    out = json.loads(runner.invoke(app, ["ingest", str(path), "--store", "s.duckdb",
                                         "--json"]).stdout)
    [error] = out["errors"]
    assert error["reason"].startswith("invalid JSON document: ")
    assert error["reason"].endswith("(read as JSON: the file starts with '[')")


# ------------------------------------------------------------------ one series per server


def test_real_runs_pasted_one_after_another_are_separate_series(real, tmp_path):
    """vllm-project/vllm#43295 (pid 3646, 05-19, hit rate 0.0%) then
    torch-spyre/sendnn-inference#1030 (pid 5150, 07-14, hit rate rising 0.0 -> 77.5%):
    two series; the finding covers 40 s + 950 s (10:13:11-10:13:51, 21:33:52-21:49:42),
    not the 56 days between them."""
    text = ((real / REAL_LOGS / "vllm-43295-kv-pressure.log").read_text()
            + (real / REAL_LOGS / "sendnn-inference-1030-rising-hit-rate.log").read_text())
    a = analyze_engine_logs([write(tmp_path, "pasted.log", text)])
    assert [(v.server, v.process, v.lines, v.why) for v in a.servers] == [
        (1, "APIServer pid=3646", 5, "first in the file"),
        (2, "APIServer pid=5150", 5, "another process (APIServer pid=5150)")]
    second = a.servers[1].prefix_hit_rate
    assert (second.min, second.median, second.max, second.last) == (0.0, 0.646, 0.775, 0.775)
    assert a.servers[0].prefix_hit_rate.max == 0.0
    assert [p.server for p in a.series] == [1] * 5 + [2] * 5
    low = finding(a, "low-prefix-hit-rate")
    assert (low.evidence["series"], low.evidence["duration_s"]) == (2, 990.0)
    pressure = finding(a, "kv-pressure")
    assert (pressure.evidence["series"], pressure.evidence["duration_s"]) == (1, 40.0)
    out = json.loads(runner.invoke(app, ["engine-log", str(tmp_path / "pasted.log"),
                                         "--json"]).stdout)
    assert [(s["server"], s["process"]) for s in out["servers"]] == [
        (1, "APIServer pid=3646"), (2, "APIServer pid=5150")]
    assert {s["server"] for s in out["series"]} == {1, 2}


def test_same_pid_whose_time_goes_back_is_a_new_series(real, tmp_path):
    """tenstorrent/tt-inference-server#3359 pasted twice: pid 1 both times (a container),
    the second copy's time goes back to 08:01:39."""
    text = (real / REAL_LOGS / "tt-inference-server-3359-iso.log").read_text() * 2
    a = analyze_engine_logs([write(tmp_path, "twice.log", text)])
    assert [(v.lines, v.why) for v in a.servers] == [
        (4, "first in the file"), (4, "its time goes back at line 5")]
    # 08:01:39.331095 -> 08:02:09.334253 is 30.003158 s, twice: 60.006316 (3 decimals)
    assert finding(a, "low-prefix-hit-rate").evidence["duration_s"] == 60.006


def test_engines_and_restarts_are_series_of_their_own(tmp_path):
    """``Engine %03d: `` of ``vllm/v1/metrics/loggers.py`` with two engines, and a
    ``vLLM API server version`` start-up line (``vllm/entrypoints/...``) between two runs
    of the same pid."""
    def stats(engine: int, hms: str) -> str:
        return (f"(APIServer pid=1) INFO 11-30 {hms} [loggers.py:271] "
                + gen._stats_message(engine, 10.0, 1.0, 1, 0, 0, 0.5, 0.25, None))

    lines = [stats(0, "09:00:00"), stats(1, "09:00:00"), stats(0, "09:00:10"),
             stats(1, "09:00:10"),
             "(APIServer pid=1) INFO 11-30 09:05:00 [api_server.py:1]"
             " vLLM API server version 0.11.0",
             stats(0, "09:05:10")]
    a = analyze_engine_logs([write(tmp_path, "dp.log", "\n".join(lines) + "\n")])
    assert [(v.engine, v.lines, v.why) for v in a.servers] == [
        ("000", 2, "first in the file"), ("001", 2, "another engine (001)"),
        ("000", 1, "a restart (start-up line 5)")]


# ------------------------------------------------------------------ connectors and roles

# vLLM's non-default args line (vllm/entrypoints/common/startup.py: "non-default args: %s")
# holds KVTransferConfig's repr (vllm/config/kv_transfer.py: kv_connector, kv_role in
# KVProducer = "kv_producer" | "kv_both", KVConsumer = "kv_consumer" | "kv_both").
def _connector_log(connector: str, role: str, *, extra: str = "", store_bytes: int = 1 << 20,
                   external: bool = True, lines: int = 4) -> str:
    out = [f"(APIServer pid=1) INFO 11-30 09:00:00 [utils.py:253] non-default args: "
           f"{{'model': 'm', 'kv_transfer_config': KVTransferConfig(kv_connector="
           f"'{connector}', engine_id='e', kv_buffer_device='cuda', kv_role='{role}'){extra}}}"]
    for i in range(lines):
        out.append(f"(APIServer pid=1) INFO 11-30 09:00:{10 + i:02d} [loggers.py:271] "
                   + gen._stats_message(0, 5000.0, 10.0, 4, 0, 0, 0.3, 0.4,
                                        0.0 if external else None))
        if store_bytes:
            out.append(f"(APIServer pid=1) INFO 11-30 09:00:{10 + i:02d} [loggers.py:271] "
                       f"KV Transfer metrics: GPU_to_CPU_total_bytes={store_bytes}, "
                       "GPU_to_CPU_total_time=0.01")
    return "\n".join(out) + "\n"


def test_a_prefiller_that_stores_and_never_loads_is_not_write_only(tmp_path):
    a = analyze_engine_logs([write(tmp_path, "p.log", _connector_log("LMCacheConnectorV1",
                                                                     "kv_producer"))])
    assert (a.config_value("kv_role"), a.config_value("kv_connector")) == (
        "kv_producer", "LMCacheConnectorV1")
    assert a.offload.store_points == 4
    assert "l2-write-only" not in kinds(a) and "external-cache-no-hits" not in kinds(a)


def test_a_tier_that_should_serve_reads_is_write_only(tmp_path):
    a = analyze_engine_logs([write(tmp_path, "b.log", _connector_log("OffloadingConnector",
                                                                     "kv_both"))])
    f = finding(a, "l2-write-only")
    assert (f.evidence["connector"], f.evidence["kv_role"]) == ("OffloadingConnector",
                                                                "kv_both")
    assert f.evidence["known_cause"] is None and "pure overhead" not in f.fix


def test_external_rate_zero_names_the_connector(tmp_path):
    a = analyze_engine_logs([write(tmp_path, "c.log", _connector_log(
        "MooncakeStoreConnector", "kv_consumer", store_bytes=0))])
    f = finding(a, "external-cache-no-hits")
    assert f.title == ("external KV cache (MooncakeStoreConnector, kv_consumer) never hit: "
                       "external prefix cache hit rate 0.0% in all 4 busy stats lines")
    assert f.fix.startswith("MooncakeStoreConnector answers no lookup")


def test_a_pd_run_whose_worker_lines_come_from_mooncake_connector_names_it(tmp_path):
    """A P/D prefill instance's log in the shape of published ones (no ``kv_transfer_config``
    printed, every KV line from ``mooncake_connector.py``: ``KVCacheSendingThread started
    listening ...``, ``Delaying free of 1 blocks for request ...``): MooncakeConnector, a P/D
    transfer to another instance, named from its first INFO line (line 2); the import
    warning on line 1 does not name it."""
    stats = ("(APIServer pid=2756696) INFO 12-10 03:25:{:02d} [loggers.py:271] "
             + gen._stats_message(0, 5000.0, 10.0, 4, 0, 0, 0.3, 0.4, 0.0))
    log = "\n".join([
        "WARNING 12-10 03:20:01 [mooncake_connector.py:18] Mooncake not available, "
        "MooncakeOmniConnector will not work",
        "(EngineCore_DP0 pid=2757272) INFO 12-10 03:20:05 [mooncake_connector.py:301] "
        "KVCacheSendingThread started listening on path: tcp://172.16.210.194:20001. "
        "Thread: tp_rank=0, pp_rank=0, pcp_rank=0",
        *(stats.format(10 * i) for i in range(4)),
        "(EngineCore_DP0 pid=2757272) INFO 12-10 03:25:54 [mooncake_connector.py:834] "
        "Delaying free of 1 blocks for request cmpl-09be0283-e039-40ce-aefa-da0f36c8cd46-0",
    ]) + "\n"
    path = write(tmp_path, "prefill0.log", log)
    a = analyze_engine_logs([path])
    assert [(c.key, c.value, c.line) for c in a.config] == [
        ("kv_connector", "MooncakeConnector", 2),
        ("offload_target", "another vLLM instance (P/D transfer over Mooncake)", 2)]
    f = finding(a, "external-cache-no-hits")
    assert f.title == ("external KV cache (MooncakeConnector) never hit: external prefix "
                       "cache hit rate 0.0% in all 4 busy stats lines (a P/D transfer "
                       "connector: expected on a prefill instance)")


def test_mooncakes_import_warning_alone_names_no_connector(tmp_path):
    log = ("WARNING 01-23 13:48:43 [mooncake_connector.py:18] Mooncake not available, "
           "MooncakeOmniConnector will not work\n"
           "(APIServer pid=79770) INFO 01-23 13:48:44 [api_server.py:1272] vLLM API server "
           "version 0.14.0\n")
    a = analyze_engine_logs([write(tmp_path, "omni.log", log)])
    assert a.config_value("kv_connector") is None


def test_connector_named_by_its_start_up_line_and_multiconnector(tmp_path):
    """``.../kv_connector/factory.py``: ``"Creating v1 connector with name: %s and
    engine_id: %s"``; a MultiConnector's ``kv_connector_extra_config`` lists its own."""
    from prefixscope.ingest.engine_logs import parse_engine_log

    parsed = parse_engine_log("x", [
        "(EngineCore_DP0 pid=7) INFO 11-30 09:00:00 [factory.py:62] Creating v1 connector "
        "with name: NixlConnector and engine_id: 9c1d",
        "(APIServer pid=1) INFO 11-30 09:00:00 [utils.py:253] non-default args: {'kv_transfer"
        "_config': KVTransferConfig(kv_connector='MultiConnector', kv_role='kv_both', "
        "kv_connector_extra_config={'connectors': [{'kv_connector': 'NixlConnector', "
        "'kv_role': 'kv_both'}, {'kv_connector': 'OffloadingConnector', 'kv_role': "
        "'kv_both'}]})}"], "vllm")
    assert [(c.key, c.value) for c in parsed.config] == [
        ("kv_connector", "NixlConnector"),
        ("offload_target", "another vLLM instance (P/D transfer over NIXL)"),
        ("kv_connector", "MultiConnector (NixlConnector + OffloadingConnector)"),
        ("offload_target", "external (MultiConnector (NixlConnector + OffloadingConnector))"),
        ("kv_role", "kv_both")]


# ------------------------------------------------------------------ the write-only cause


def test_write_only_offload_of_a_model_with_several_groups_names_the_lookup_cause(tmp_path):
    """The seed incident: OffloadingConnector, a speculative config and several KV-cache
    groups (``vllm/v1/core/kv_cache_utils.py``: ``"kv cache group sizes %s"``); the lookup
    (``OffloadingConnectorScheduler._lookup_complete_chunks``) returns 0 when any group has
    no hit chunk."""
    log = _connector_log("OffloadingConnector", "kv_both",
                         extra=", 'speculative_config': {'method': 'mtp', "
                               "'num_speculative_tokens': 3}")
    log += ("(EngineCore_DP0 pid=7) INFO 11-30 09:01:00 [kv_cache_utils.py:865] kv cache "
            "group sizes (256, 256, 256)\n")
    a = analyze_engine_logs([write(tmp_path, "seed.log", log)])
    assert a.config_value("kv_cache_groups") == "3"
    f = finding(a, "l2-write-only")
    assert f.evidence["known_cause"] == "offloading-lookup-needs-every-kv-cache-group"
    assert f.evidence["known_cause_evidence"] == (
        f"speculative_decoding=mtp ({tmp_path / 'seed.log'}:1); "
        f"kv_cache_groups=3 ({tmp_path / 'seed.log'}:10)")  # 1 args + 4 x 2 lines
    assert f.fix.startswith("Known cause, first: vLLM's OffloadingConnector")
    assert "_lookup_complete_chunks" in f.fix and "needs a vLLM change" in f.fix
    assert "needs a hit in every KV-cache group" in f.title


def test_a_single_group_model_gets_no_lookup_cause(tmp_path):
    log = _connector_log("OffloadingConnector", "kv_both")
    log += ("(EngineCore_DP0 pid=7) INFO 11-30 09:01:00 [kv_cache_utils.py:865] kv cache "
            "group sizes (16,)\n")
    f = finding(analyze_engine_logs([write(tmp_path, "one.log", log)]), "l2-write-only")
    assert f.evidence["known_cause"] is None


def test_year_less_and_dated_files_together_span_the_dated_ones(real):
    """vllm#43295 (05-19, no year) beside tt-inference-server#3359 (2026-05-12, ISO): the
    year-less times do not compare with dated ones, so first / last are the dated file's
    and there is no duration across the two."""
    a = analyze_engine_logs([real / REAL_LOGS / "vllm-43295-kv-pressure.log",
                             real / REAL_LOGS / "tt-inference-server-3359-iso.log"])
    low = finding(a, "low-prefix-hit-rate", "vllm-log")
    assert (low.evidence["first"], low.evidence["last"], low.evidence["duration_s"]) == (
        "2026-05-12T08:01:39.331095+00:00", "2026-05-12T08:02:09.334253+00:00", None)
    assert low.evidence["series"] == 2


def test_the_report_states_both_block_sizes_when_the_request_logs_cached_values_differ(
        tmp_path):
    # the request log's cached values are multiples of 64 (gen_vllm_log: 64-token blocks);
    # the engine log (SGLang, page_size=256, its own batches cached in multiples of 256)
    # states 256: the replay uses 64, and a note says both with their sources
    from gen_vllm_log import generate

    requests = tmp_path / "vllm.jsonl"
    generate(requests, block_size=64, capacity_blocks=150)
    args = "[2026-05-15 08:39:19] server_args=ServerArgs(model_path='m', page_size=256)"
    engine = write(tmp_path, "sglang.log", "\n".join(
        [args, *(_sg_prefill(" TP0", 512, 256 * k) for k in (1, 2, 3))]) + "\n")
    out = runner.invoke(app, ["report", str(requests), "--engine-log", str(engine), "--json"])
    assert out.exit_code == 0, out.output
    notes = json.loads(out.stdout)["notes"]
    assert (f"block size 64: {requests}'s cached values are multiples of 64 (the replay uses "
            f"it); the engine log states 256 ({engine}:1)") in notes
