"""Engines as whole registry entries: one `EngineSpec` per engine is all simulate, report
and the command line read, so an engine registered in one line runs through both; the
CLI's 'N blocks' are the engine's blocks; a logged ``cache_salt`` separates the requests'
blocks as vLLM's extra keys do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prefixscope.analyses.simulate import SimulateOptions, simulate_store
from prefixscope.cli.main import app
from prefixscope.engines import ENGINES, EngineSpec, register
from prefixscope.engines.base import Admission, BaseEngine, Lookup, Units
from prefixscope.findings.evidence import ReportOptions, gather
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths

runner = CliRunner()


class Forgetful(BaseEngine):
    """Never caches anything: every prediction is 0, whatever the log."""

    name = "forgetful"

    def __init__(self, *, block_size: int = 8, capacity_tokens: int | None = None,
                 cache_output: bool = False) -> None:
        self.unit = block_size

    def lookup(self, prompt: Units, *, now: float | None = None) -> Lookup:
        return Lookup(0, 0, self.unit)

    def admit(self, prompt: Units, *, now: float | None = None) -> Admission:
        return Admission(self.lookup(prompt), prompt)

    def release(self, admission: Admission, *, sequence: Units | None = None,
                now: float | None = None) -> None:
        admission.finish()


def _log(path: Path, salts: list[str | None]) -> Path:
    """Raw captures of one chat resent as is, each with its ``cache_salt`` (None: none)."""
    messages = [{"role": "system", "content": "You review code. " * 60},
                {"role": "user", "content": "Is this loop correct? " * 10}]
    lines = []
    for i, salt in enumerate(salts):
        body: dict[str, object] = {"model": "qwen3.6-35b-a3b", "messages": messages}
        if salt is not None:
            body["cache_salt"] = salt
        lines.append({"timestamp": f"2026-05-04T09:00:{i:02d}Z",
                      "url": "http://vllm.internal:8000/v1/chat/completions", "request": body,
                      "response": {"id": f"r{i}", "object": "chat.completion",
                                   "usage": {"prompt_tokens": 700, "completion_tokens": 3}}})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def forgetful(monkeypatch: pytest.MonkeyPatch) -> EngineSpec:
    monkeypatch.setitem(ENGINES, "forgetful", ENGINES["vllm"])  # restored after the test
    return register(EngineSpec("forgetful", Forgetful, "never caches", "block_size", 8))


def test_an_engine_registered_in_one_line_runs_through_simulate_and_report(
        tmp_path: Path, forgetful: EngineSpec) -> None:
    store = Store.open(tmp_path / "s.duckdb")
    ingest_paths([str(_log(tmp_path / "log.jsonl", [None, None, None]))], store)
    report = simulate_store(store, SimulateOptions(engine="forgetful"), fit=True,
                            capacity_curve=(64, None))
    assert (report.engine, report.unit, report.requests) == ("forgetful", 8, 3)
    assert [r.predicted for r in report.per_request] == [0, 0, 0]
    assert [r.ideal for r in report.per_request] == [0, 0, 0]
    assert [p.hit_rate for p in report.capacity_curve] == [0.0, 0.0]
    evidence = gather(store, ReportOptions(engine="forgetful"))
    assert evidence.simulate is not None and evidence.simulate.engine == "forgetful"
    assert evidence.simulate.hit_rate_predicted == 0.0


def test_n_blocks_are_the_engines_blocks(tmp_path: Path) -> None:
    log = str(_log(tmp_path / "log.jsonl", [None, None]))
    for args, tokens in ((["--engine", "lmcache", "--capacity", "4 blocks"], 4 * 256),
                         (["--engine", "vllm", "--capacity", "4 blocks"], 4 * 16),
                         (["--block-size", "64", "--capacity", "3 blocks"], 3 * 64)):
        result = runner.invoke(app, ["simulate", log, *args, "--json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["capacity_tokens"] == tokens


def test_a_cache_salt_separates_identical_prompts(tmp_path: Path) -> None:
    """The same prompt four times: salts a, b, a, none. vLLM puts the salt on the first
    block's hash, so only the third (salt a again) hits what the first cached; the
    fourth (no salt) hits nothing either."""
    store = Store.open(tmp_path / "s.duckdb")
    ingest_paths([str(_log(tmp_path / "log.jsonl", ["a", "b", "a", None]))], store)
    report = simulate_store(store, SimulateOptions(engine="vllm"))
    n = report.per_request[0].prompt_tokens
    full = (n - 1) // 16 * 16  # the whole prompt hits but its last token
    assert [r.ideal for r in report.per_request] == [0, 0, full, 0]
