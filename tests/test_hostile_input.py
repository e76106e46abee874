"""Hostile and broken input (issue 12): the corpus in tests/fixtures/hostile/ through every command.

Each file of the corpus is ingested (format detected, and forced to each format that
reads it), then `bucket`, `segments`, `diff --all` and `simulate` run on the store. The
rule under test is the project's: never a traceback (CliRunner with
``catch_exceptions=False``, so one fails the test), a one-line error or counted skips with
file:line and reason, and every good record beside a bad one kept. What each file must
yield -- good records, bad lines, a file-level skip -- is in the corpus's manifest.json,
written by make_corpus.py (which imports nothing of prefixscope) from how it built the
file. The 50 MB line and the 10,000-deep JSON are made here, in tmp_path.
"""

from __future__ import annotations

import gzip
import json
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from prefixscope.cli.main import app

HOSTILE = FIXTURES / "hostile"
MANIFEST: dict[str, Any] = json.loads((HOSTILE / "manifest.json").read_text())
sys.path.insert(0, str(HOSTILE))
import make_corpus  # noqa: E402 - the corpus's own recipes (no prefixscope in it)

# not in the fast loop (`pytest -m "not slow"`): generated giant and damaged inputs
pytestmark = pytest.mark.slow

runner = CliRunner()
CASES = [(name, fmt) for name, entry in sorted(MANIFEST.items()) for fmt in entry["expect"]]
# What a terminal must never be sent from a logged prompt: ESC, BEL, NUL, backspace, CSI.
CONTROL = ("\x1b", "\x07", "\x00", "\x08", "\x9b")
ANALYSES = (("bucket",), ("segments",), ("diff", "--all"), ("simulate",), ("report",))


def invoke(*args: str | Path) -> Any:
    result = runner.invoke(app, [str(a) for a in args], catch_exceptions=False)
    assert "Traceback" not in result.output + result.stderr, result.stderr
    return result


def ingest(path: Path, fmt: str = "auto", *extra: str) -> tuple[Any, dict[str, Any]]:
    result = invoke("ingest", path, "--format", fmt, "--store", "s.duckdb", "--json", *extra)
    return result, json.loads(result.stdout)


def assert_one_line_or_success(result: Any, what: str) -> None:
    if result.exit_code != 0:
        lines = result.stderr.splitlines()
        assert result.exit_code == 1, (what, result.exit_code, result.stderr)
        assert lines and lines[-1].startswith("error: "), (what, result.stderr)
        assert sum(line.startswith("error: ") for line in lines) == 1, (what, result.stderr)


def assert_counted(out: dict[str, Any], name: str, good: int, bad_lines: list[int],
                   cut: bool) -> None:
    assert out["ingested"] == good, out["errors"]
    lines = sorted(e["line"] for e in out["errors"] if e["line"] is not None)
    assert lines == bad_lines, out["errors"]
    whole_file = [e for e in out["errors"] if e["line"] is None]
    assert len(whole_file) == (1 if cut else 0), out["errors"]
    assert out["skipped"] == len(bad_lines) + len(whole_file)
    for err in out["errors"]:
        assert err["file"].endswith(name) and err["reason"]
        assert "\n" not in err["reason"] and "Traceback" not in err["reason"]


@pytest.mark.parametrize(("name", "fmt"), CASES)
def test_ingest_counts_every_good_record_and_every_skip(name: str, fmt: str) -> None:
    entry = MANIFEST[name]
    good, bad_lines = entry["expect"][fmt]
    result, out = ingest(HOSTILE / name, fmt)
    assert_counted(out, name, good, bad_lines, entry["cut"])
    assert result.exit_code == (0 if good else 1), result.stderr
    assert out["by_format"] == ({entry["format"] if fmt == "auto" else fmt: good} if good
                                else {})
    for args in ANALYSES:
        analysis = invoke(*args, "--store", "s.duckdb")
        assert_one_line_or_success(analysis, args)
        assert not any(c in analysis.stdout for c in CONTROL), (args, analysis.stdout)


@pytest.mark.parametrize("name", sorted(n for n in MANIFEST if MANIFEST[n]["expect"]["auto"][0]))
def test_json_of_every_analysis_is_one_document(name: str) -> None:
    ingest(HOSTILE / name)
    for args in ANALYSES:
        result = invoke(*args, "--store", "s.duckdb", "--json")
        assert_one_line_or_success(result, args)
        if result.exit_code == 0:
            json.loads(result.stdout)


@pytest.mark.parametrize("name", sorted(
    n for n, e in MANIFEST.items() if e["expect"]["auto"][1] or e["cut"]))
def test_strict_exits_1_naming_the_first_bad_record(name: str) -> None:
    entry = MANIFEST[name]
    result, out = ingest(HOSTILE / name, "auto", "--strict")
    assert result.exit_code == 1
    error = result.stderr.splitlines()[-1]
    bad_lines = entry["expect"]["auto"][1]
    first = f"{HOSTILE / name}:{bad_lines[0]}: " if bad_lines else f"{HOSTILE / name}: "
    assert error.startswith(f"error: --strict: {out['skipped']} record(s)/file(s) skipped "
                            f"(the first: {first}"), error
    assert error.endswith("; nothing was stored")
    assert not Path("s.duckdb").exists()  # the store it would have created holds nothing


def _sql(query: str) -> list[dict[str, Any]]:
    return json.loads(invoke("sql", query, "--store", "s.duckdb", "--json").stdout)


class TestNumbers:
    def test_impossible_counters_are_unreported_or_skip_the_call(self) -> None:
        """Regression: a 1e29 input count (orjson reads it as a float) crashed the store
        write with OverflowError; negative counts were stored as counts. A count over any
        context window (10M tokens) skips the call with the count named (issue 39)."""
        _, out = ingest(HOSTILE / "numbers.jsonl")
        assert out["ingested"] == 5 and out["skipped"] == 2
        rows = {r["line"]: r for r in _sql(
            "select source_line as line, prompt_tokens as p, cached_tokens as c, "
            "output_tokens as o from requests")}
        # line 2: input -5, read -100, output -1: unreported, the call kept
        assert (rows[2]["p"], rows[2]["c"], rows[2]["o"]) == (None, None, None)
        # line 4: 1e29 / 2^63 / 2^64; line 6: input 1e308 (output -1e308 is unreported)
        assert sorted(rows) == [1, 2, 3, 5, 7]
        reasons = {e["line"]: e["reason"] for e in out["errors"]}
        # Anthropic's prompt = input + cache read (1e29 as orjson reads it, 2^64)
        assert reasons[4].startswith("token counts no context window holds (prompt_tokens="
                                     f"{int(1e29) + 2**64:,}, cached_tokens={2**64:,}, "
                                     f"output_tokens={2**63:,}; the bound is 10,000,000")
        assert reasons[6].startswith("token counts no context window holds (prompt_tokens=")
        # line 1 (made by cc_line(1)): 4 uncached + 100 written + 2001 read, 7 out
        assert (rows[1]["p"], rows[1]["c"], rows[1]["o"]) == (2105, 2001, 7)

    def test_hit_rates_stay_in_0_1(self) -> None:
        ingest(HOSTILE / "numbers.jsonl")
        out = json.loads(invoke("bucket", "--store", "s.duckdb", "--json").stdout)
        rates = [v for v in _walk(out, "hit_rate") if v is not None]
        assert rates and all(0 <= r <= 1 for r in rates)


def _walk(value: Any, key: str) -> list[Any]:
    if isinstance(value, dict):
        return [v for k, v in value.items() if k == key] + [
            x for v in value.values() for x in _walk(v, key)]
    if isinstance(value, list):
        return [x for v in value for x in _walk(v, key)]
    return []


class TestBlockHashes:
    def test_a_hash_beyond_64_bits_is_a_skip_not_a_crash(self) -> None:
        """Regression: hash_ids of 2^63 crashed the store write (polars Int64)."""
        Path("t.jsonl").write_text(
            '{"timestamp":1,"input_length":600,"output_length":1,"hash_ids":[1,2]}\n'
            '{"timestamp":2,"input_length":600,"output_length":1,"hash_ids":[1,'
            + str(1 << 63) + ']}\n'
            '{"timestamp":3,"input_length":600,"output_length":1,"hash_ids":[-5,2]}\n')
        result, out = ingest(Path("t.jsonl"))
        assert result.exit_code == 0 and out["ingested"] == 2
        assert out["errors"] == [{"file": "t.jsonl", "line": 2, "reason":
                                  "`hash_ids` holds an integer outside the signed 64-bit range"}]
        assert_one_line_or_success(invoke("simulate", "--store", "s.duckdb"), "simulate")


class TestTruncatedGzipTranscript:
    """Regression: a gzip'd Claude Code transcript cut short lost ALL its records."""

    def _transcript(self, calls: int) -> bytes:
        return "".join(json.dumps(make_corpus.cc_line(i)) + "\n" for i in range(calls)).encode()

    def test_calls_before_the_cut_are_kept_and_the_cut_is_one_skip(self) -> None:
        whole = gzip.compress(self._transcript(600), mtime=0)
        cut = whole[: len(whole) // 2]
        Path("t.jsonl.gz").write_bytes(cut)
        readable = zlib.decompressobj(wbits=31).decompress(cut).count(b"\n")  # whole lines
        result, out = ingest(Path("t.jsonl.gz"))
        assert result.exit_code == 0
        assert out["ingested"] == readable and readable > 100
        assert out["errors"] == [{"file": "t.jsonl.gz", "line": None, "reason":
                                  "read failed part-way, the rest of the file is lost: "
                                  "Compressed file ended before the end-of-stream marker was "
                                  "reached"}]

    def test_a_cut_within_the_first_64_kib_says_read_failed_part_way_too(self) -> None:
        whole = gzip.compress(self._transcript(5), mtime=0)
        cut = whole[:-30]
        Path("t.jsonl.gz").write_bytes(cut)
        readable = zlib.decompressobj(wbits=31).decompress(cut).count(b"\n")
        _, out = ingest(Path("t.jsonl.gz"))
        assert out["ingested"] == readable >= 1
        assert [e["reason"].split(":")[0] for e in out["errors"]] == [
            "read failed part-way, the rest of the file is lost"]

    def test_a_cut_before_any_whole_record_cannot_be_read(self) -> None:
        Path("t.jsonl.gz").write_bytes(gzip.compress(self._transcript(5), mtime=0)[:60])
        result, out = ingest(Path("t.jsonl.gz"))
        assert result.exit_code == 1 and out["ingested"] == 0
        assert out["errors"][0]["reason"].startswith("cannot read: Compressed file ended")


class TestGeneratedGiants:
    def test_a_50_mb_single_line_is_one_request(self, tmp_path: Path) -> None:
        make_corpus.big_line(tmp_path / "big.jsonl")
        result, out = ingest(tmp_path / "big.jsonl")
        assert result.exit_code == 0 and out["ingested"] == 2 and out["skipped"] == 0
        # segments and simulate tokenize the 50 MB prompt (minutes): see the report.
        for args in (("bucket",), ("diff", "--all")):
            assert_one_line_or_success(invoke(*args, "--store", "s.duckdb"), args)

    def test_json_nested_10000_deep_is_a_skip_beside_a_kept_line(self, tmp_path: Path) -> None:
        make_corpus.deep_json(tmp_path / "deep.jsonl")
        result, out = ingest(tmp_path / "deep.jsonl")
        assert result.exit_code == 0 and out["ingested"] == 1
        assert [e["line"] for e in out["errors"]] == [1]
        assert out["errors"][0]["reason"].startswith("invalid JSON: ")
        for args in ANALYSES:
            assert_one_line_or_success(invoke(*args, "--store", "s.duckdb"), args)

    def test_a_deep_document_forced_to_each_json_format_is_no_crash(self, tmp_path: Path) -> None:
        path = tmp_path / "deep.json"
        path.write_text("[" * 10_000 + "]" * 10_000)
        for fmt in ("auto", "raw", "langfuse", "litellm", "otel", "openhands"):
            result, out = ingest(path, fmt)
            assert result.exit_code == 1 and out["ingested"] == 0, fmt
            assert_counted(out, "deep.json", 0, [], True)
