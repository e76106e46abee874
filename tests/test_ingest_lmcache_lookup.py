"""LMCache lookup-hash logs (``lmcache server --lookup-hash-log-dir``) as a block-hash trace.

The record shape is LMCache 0.5.6's own (``lmcache/v1/mp_observability/subscribers/
logging/lookup_hash.py`` ``LookupHashLoggingSubscriber._on_lookup_hashes``: ``timestamp``,
``request_id``, ``model_name``, ``chunk_size``, ``seq_len``, ``dtypes``, ``shapes``,
``chunk_hashes`` as ``"0x" + bytes.hex()``; ``v1/multiprocess/token_hasher.py``
``compute_chunk_hashes``: full chunks only). Expected hits are worked out by hand below
under LMCache's rules (``lmcache`` engine: prefix-contiguous chunk hits, the whole-prompt
hit minus the last token, LRU with lookups touching head-newest and stores appended).
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.ingest import read_requests

runner = CliRunner()
A, B, C, D = ("0x" + c * 64 for c in "abcd")  # 32-byte sha256_cbor digests, hex


def _line(request_id: str, seq_len: int, hashes: list[str], ts: float) -> str:
    return json.dumps({"timestamp": ts, "request_id": request_id, "model_name": "m",
                       "chunk_size": 256, "seq_len": seq_len, "dtypes": ["bfloat16"],
                       "shapes": [[2, 256, 8]], "chunk_hashes": hashes})


def _log(tmp_path: Path) -> Path:
    path = tmp_path / "lookup_hashes_20261130_090000_000000.jsonl"
    path.write_text("\n".join([
        _line("r1", 600, [A, B], 1_795_000_000.0),      # 2 full chunks, 88 tokens partial
        _line("r2", 512, [A, B], 1_795_000_001.0),      # the whole prompt cached
        _line("r3", 800, [A, C, D], 1_795_000_002.0),
        _line("r4", 600, [A, B], 1_795_000_003.0),
    ]) + "\n")
    return path


def test_records_become_chunk_hash_requests(tmp_path):
    requests, skips = read_requests(_log(tmp_path))
    assert skips == []
    r1 = requests[0]
    assert (r1.source_format, r1.native_id, r1.model) == ("lmcache-lookup", "r1", "m")
    assert (r1.usage.prompt_tokens, r1.block_size, r1.usage.cached_tokens) == (600, 256, None)
    # The first 8 bytes of 0xaaaa...: 0xaaaaaaaaaaaaaaaa as a signed 64-bit integer.
    assert r1.block_hashes == (0xAAAAAAAAAAAAAAAA - (1 << 64), 0xBBBBBBBBBBBBBBBB - (1 << 64))
    assert r1.timestamp.isoformat() == "2026-11-18T11:06:40+00:00"  # date -u -d @1795000000


def test_bad_lines_are_skips_naming_the_format(tmp_path):
    path = tmp_path / "lookup_hashes_x.jsonl"
    path.write_text(_line("r1", 600, [A], 1.0) + "\n"
                    + json.dumps({"chunk_hashes": ["zz"], "seq_len": 1, "chunk_size": 256})
                    + "\n" + json.dumps({"chunk_hashes": [A], "seq_len": 1, "chunk_size": 0})
                    + "\n")
    _, skips = read_requests(path)
    assert [(s.line, s.reason) for s in skips] == [
        (2, "lmcache-lookup: `chunk_hashes` holds 'zz', not a hex number"),
        (3, "lmcache-lookup: no integer `chunk_size` >= 1")]


def test_simulate_replays_lookups_with_lmcache_chunk_rules(tmp_path):
    """Ideal: r1 0; r2 matches A, B = 512 = its whole prompt, so 511 (the last token is
    recomputed); r3 matches A = 256; r4 matches A, B = 512 of 600. 0+511+256+512 = 1279 of
    600+512+800+600 = 2512 tokens. With 512 tokens (2 chunks): r3's store of C, D evicts
    B and A (LRU order after r2's lookup: B, A), so r4 hits nothing: 767 of 2512."""
    path = _log(tmp_path)
    out = json.loads(runner.invoke(app, ["simulate", str(path), "--capacity", "512",
                                         "--per-request", "--json"]).stdout)
    rows = {r["prompt_tokens"]: r for r in out["per_request"]}
    assert [(r["ideal"], r["predicted"]) for r in out["per_request"]] == [
        (0, 0), (511, 511), (256, 256), (512, 0)]
    assert out["prompt_tokens"] == 2512 and rows[800]["ideal"] == 256
    curve = json.loads(runner.invoke(app, ["simulate", str(path), "--capacity-curve",
                                           "512,1024", "--json"]).stdout)["capacity_curve"]
    assert [(c["capacity_tokens"], c["hit_rate"]) for c in curve] == [
        (512, 767 / 2512), (1024, 1279 / 2512)]


def test_report_reads_lookup_logs_like_traces(tmp_path):
    path = _log(tmp_path)
    result = runner.invoke(app, ["report", str(path), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["summary"]["requests"] == 4
