"""`--engine`, `--block-size` and `--capacity` default the same way in `simulate` as in
`report`: the engine and block from the log, the capacity fitted when a self-hosted engine
got less than an unlimited cache predicts; the output says which was chosen and why, and
an error that has a fix names it."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import orjson
from conftest import ROOT
from typer.testing import CliRunner

from prefixscope.cli.main import app

runner = CliRunner()
EVICTION = str(ROOT / "sample_logs" / "vllm-agents-eviction.jsonl.gz")
NEW_API = ROOT / "sample_logs" / "new-api-logs.db"


def capture(path: Path, cached: list[int]) -> Path:
    """Raw Anthropic captures of one growing conversation, reading `cached` tokens."""
    lines = []
    for n, read in enumerate(cached, 1):
        msgs = []
        for i in range(n):
            msgs.append({"role": "user", "content": f"question {i} " * 40})
            if i < n - 1:
                msgs.append({"role": "assistant", "content": f"answer {i} " * 40})
        lines.append(orjson.dumps({
            "request": {"model": "claude-sonnet-4-5", "system": "be brief", "messages": msgs},
            "response": {"id": f"msg_{n}", "usage": {"input_tokens": 50,
                                                     "cache_read_input_tokens": read,
                                                     "output_tokens": 5}},
            "endpoint": "/v1/messages", "timestamp": f"2026-08-01T12:0{n}:00Z"}).decode())
    path.write_text("\n".join(lines) + "\n")
    return path


def simulate_json(*args: str) -> tuple[dict, str]:
    result = runner.invoke(app, ["simulate", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result.stderr


class TestBlockSize:
    def test_an_explicit_self_hosted_engine_infers_the_block_from_the_cached_values(
            self, tmp_path: Path) -> None:
        # 128, 256 and 384 cached tokens: 128 is the largest block dividing them all
        log = capture(tmp_path / "cap.jsonl", [0, 128, 256, 384])
        data, _ = simulate_json(str(log), "--engine", "vllm", "--capacity", "unlimited")
        assert data["block_size"] == 128

    def test_a_given_block_size_wins(self, tmp_path: Path) -> None:
        log = capture(tmp_path / "cap.jsonl", [0, 128, 256, 384])
        data, _ = simulate_json(str(log), "--engine", "vllm", "--block-size", "32",
                                "--capacity", "unlimited")
        assert data["block_size"] == 32

    def test_the_terminal_says_where_the_block_came_from(self, tmp_path: Path) -> None:
        log = capture(tmp_path / "cap.jsonl", [0, 128, 256, 384])
        result = runner.invoke(app, ["simulate", str(log), "--engine", "vllm", "--capacity",
                                     "unlimited"])
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines()[0] == (
            "vllm · block 128 (inferred from the cached values) · capacity unlimited (given)")


class TestCapacity:
    def test_fitted_by_default_when_the_log_got_less_than_an_unlimited_cache(self) -> None:
        # the sample's four sessions evict each other (sample_logs/README.md): the log's
        # cached tokens fall short of an unlimited cache, so the capacity is fitted
        data, _ = simulate_json(EVICTION)
        assert data["fit"] is not None and data["fit"]["capacity_tokens"] is not None
        assert data["capacity_tokens"] == data["fit"]["capacity_tokens"]
        assert data["block_size"] == data["fit"]["block_size"] == 16
        result = runner.invoke(app, ["simulate", EVICTION])
        assert (f"capacity {data['capacity_tokens']:,} tokens (fitted to the log's cached "
                "tokens)") in result.stdout.splitlines()[0]

    def test_a_given_capacity_is_replayed_as_given(self) -> None:
        data, _ = simulate_json(EVICTION, "--capacity", "unlimited")
        assert data["capacity_tokens"] is None and data["fit"] is None
        data, _ = simulate_json(EVICTION, "--capacity", "4000")
        assert data["capacity_tokens"] == 4000 and data["fit"] is None

    def test_fit_replays_at_the_fit_it_announces(self) -> None:
        data, _ = simulate_json(EVICTION, "--fit")
        fit = data["fit"]
        assert (data["block_size"], data["capacity_tokens"]) == (fit["block_size"],
                                                                 fit["capacity_tokens"])
        assert data["agreement"] == fit["agreement"]
        result = runner.invoke(app, ["simulate", EVICTION, "--fit"])
        assert (f"best fit: block {fit['block_size']}, capacity {fit['capacity_tokens']:,} "
                "tokens") in result.stdout


class TestEngine:
    def test_a_usage_only_log_replays_with_its_models_hosted_api_and_says_so(self) -> None:
        # the oracle: the database's own models -- DeepSeek's the only hosted family in it
        models = dict(sqlite3.connect(NEW_API).execute(
            "select model_name, count(*) from logs group by 1").fetchall())
        assert models == {"deepseek-v4-flash-0731": 60, "llm-prime": 62}
        data, stderr = simulate_json(str(NEW_API))
        assert data["engine"] == "deepseek" and data["requests"] > 0
        assert ("replaying with deepseek: a usage-only log (no bodies, no block ids): "
                "replaying with `--engine deepseek`, its models' hosted API") in stderr

    def test_agreement_is_explained_where_it_is_printed(self) -> None:
        result = runner.invoke(app, ["simulate", EVICTION])
        lines = result.stdout.splitlines()
        header = next(n for n, line in enumerate(lines) if "┃ agreement" in line)
        # the legend line under the table ends with what agreement means
        assert lines[header + 3].startswith("observed: the cache the log reports")
        assert lines[header + 3].endswith("agreement: the share of the requests whose log "
                                          "reports cached tokens that the replay predicts "
                                          "within one block")
