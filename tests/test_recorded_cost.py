"""The log's own cost beside list prices: what a client or gateway says a call cost
(Claude Code's ``costUSD``, LiteLLM's ``cost`` in a mini-swe-agent trajectory) is summed over
the basis and set beside list prices over the same calls, never in their place.

Oracles: hand arithmetic from Claude Opus 4.5's list prices (input $5 / MTok, 5-minute
write $6.25, read $0.50, output $25) on hand-built transcripts; for the real DeepSeek run,
the raw file's own numbers read with `json` and genai-prices' `calc_price` per call."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from genai_prices import Usage, calc_price
from test_ttl_money import report
from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.findings.ledger import RecordedCost, RecordedModel

INPUT, W5, READ, OUTPUT = 5.0, 6.25, 0.50, 25.0


def transcript(path: Path, turns: list[tuple[int, int, int, Any]]) -> Path:
    """Claude Code assistant lines, one per (input_tokens, cache read, 5-minute write,
    costUSD or None), a minute apart, 100 output tokens each."""
    lines = []
    for n, (uncached, read, write, cost) in enumerate(turns):
        line: dict[str, Any] = {
            "type": "assistant", "timestamp": f"2026-03-02T10:0{n}:00Z", "sessionId": "s",
            "uuid": f"u{n}", "parentUuid": f"u{n - 1}" if n else None, "requestId": f"r{n}",
            "message": {"id": f"m{n}", "role": "assistant", "model": "claude-opus-4-5",
                        "content": [{"type": "text", "text": "ok"}],
                        "usage": {"input_tokens": uncached, "cache_read_input_tokens": read,
                                  "cache_creation_input_tokens": write,
                                  "output_tokens": 100}}}
        if cost is not None:
            line["costUSD"] = cost
        lines.append(json.dumps(line))
    path.write_text("\n".join(lines) + "\n")
    return path


def listed(uncached: int, read: int, write: int) -> float:
    return (uncached * INPUT + read * READ + write * W5 + 100 * OUTPUT) / 1e6


def test_a_cost_equal_to_list_prices_agrees(tmp_path: Path) -> None:
    turns = [(3, 0, 20_000), (3, 20_000, 4_001), (3, 24_001, 0)]
    costs = [listed(*t) for t in turns]  # 0.127515, 0.0375215, 0.0145155
    log = transcript(tmp_path / "s.jsonl", [(*t, c) for t, c in zip(turns, costs, strict=True)])
    recorded = report(str(log))["summary"]["money"]["recorded"]
    assert recorded["requests"] == recorded["compared_requests"] == 3
    assert recorded["usd"] == pytest.approx(sum(costs), abs=1e-6)
    assert recorded["compared_list_usd"] == pytest.approx(sum(costs), abs=1e-6)
    assert recorded["ratio"] == pytest.approx(1.0)
    out = CliRunner().invoke(app, ["report", str(log)]).stdout
    assert "the log's own cost $0.18 over 3 calls; list prices agree within 1% on the same " \
        "calls ($0.18)" in out, out


def test_a_gap_is_shown_by_model_and_only_the_calls_carrying_a_cost_are_compared(
        tmp_path: Path) -> None:
    # the first call records half its list price; the third records none; the fourth a
    # cost that is no amount of dollars (not read)
    log = transcript(tmp_path / "s.jsonl", [(3, 0, 20_000, listed(3, 0, 20_000) / 2),
                                            (3, 20_000, 4_001, listed(3, 20_000, 4_001)),
                                            (3, 24_001, 0, None),
                                            (3, 24_001, 0, "nan")])
    doc = report(str(log))
    money = doc["summary"]["money"]
    recorded = money["recorded"]
    first, second = listed(3, 0, 20_000), listed(3, 20_000, 4_001)  # 0.127515, 0.0375215
    assert recorded["requests"] == recorded["compared_requests"] == 2
    assert recorded["usd"] == pytest.approx(first / 2 + second, abs=1e-6)  # 0.1012790
    assert recorded["compared_list_usd"] == pytest.approx(first + second, abs=1e-6)
    assert recorded["ratio"] == pytest.approx((first + second) / (first / 2 + second), abs=1e-4)
    assert recorded["by_model"] == [{"model": "claude-opus-4-5", "requests": 2,
                                     "recorded_usd": pytest.approx(first / 2 + second, abs=1e-6),
                                     "list_usd": pytest.approx(first + second, abs=1e-6)}]
    assert money["spend_usd"] == pytest.approx(first + second + 2 * listed(3, 24_001, 0),
                                               abs=1e-6)  # list prices stay the report's
    out = CliRunner().invoke(app, ["report", str(log)]).stdout
    # 0.1012790 and 0.1650365 to the cent; 1.63x
    assert ("the log's own cost $0.10 over 2 calls; list prices make $0.17 of the same calls "
            "(1.63x: claude-opus-4-5 $0.17 against $0.10)") in out, out


def test_a_log_without_costs_has_none(tmp_path: Path) -> None:
    log = transcript(tmp_path / "s.jsonl", [(3, 0, 20_000, None), (3, 20_000, 0, None)])
    assert report(str(log))["summary"]["money"]["recorded"] is None
    assert "own cost" not in CliRunner().invoke(app, ["report", str(log)]).stdout


def test_a_real_deepseek_runs_litellm_cost_beside_list_prices(real: Path) -> None:
    path = next((real / "mini-swe-agent-deepseek").glob("*.traj.json"))
    doc = json.loads(path.read_text())
    recorded_usd, list_usd, calls = 0.0, 0.0, 0
    for m in doc["messages"]:
        extra = m.get("extra") or {}
        usage = (extra.get("response") or {}).get("usage")
        if m.get("role") != "assistant" or not usage:
            continue
        calls += 1
        recorded_usd += extra["cost"]
        when = datetime.fromtimestamp(extra["timestamp"], tz=UTC)
        list_usd += float(calc_price(
            Usage(input_tokens=usage["prompt_tokens"],
                  cache_read_tokens=usage["prompt_cache_hit_tokens"],
                  output_tokens=usage["completion_tokens"]),
            model_ref="deepseek-reasoner", provider_id="deepseek",
            genai_request_timestamp=when).total_price)
    result = CliRunner().invoke(app, ["report", str(path.parent), "--json"])
    money = json.loads(result.stdout)["summary"]["money"]
    recorded = money["recorded"]
    assert (recorded["requests"], recorded["compared_requests"]) == (calls, calls) == (15, 15)
    assert recorded["usd"] == pytest.approx(recorded_usd, abs=1e-6)
    assert recorded["compared_list_usd"] == pytest.approx(list_usd, abs=1e-6)
    assert recorded["compared_list_usd"] == pytest.approx(money["spend_usd"], abs=1e-6)
    assert recorded["by_model"][0]["model"] == "deepseek-reasoner"


def test_the_compared_figures_are_the_sums_of_the_models_compared() -> None:
    # 4 calls carry a cost ($0.75); 3 of them are priced: 2 of model a (the log $0.25, list
    # $0.50), 1 of model b ($0.125 both) -- so 3 calls, $0.375 recorded, $0.625 listed.
    cost = RecordedCost(4, 0.75, (RecordedModel("a", 2, 0.25, 0.5),
                                  RecordedModel("b", 1, 0.125, 0.125)))
    assert (cost.compared_requests, cost.compared_recorded_usd, cost.compared_list_usd) == \
        (3, 0.375, 0.625)
    assert cost.ratio == 0.625 / 0.375
    empty = RecordedCost(2, 0.5, ())
    assert (empty.compared_requests, empty.compared_list_usd, empty.ratio) == (0, 0, None)
