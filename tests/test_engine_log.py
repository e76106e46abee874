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

from prefixscope.analyses.engine_log import (
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
