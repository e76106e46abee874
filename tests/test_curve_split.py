"""The capacity curve split into reuse within a conversation and across conversations
(docs/simulate.md, "Within and across conversations").

Oracle: a block-hash trace written by hand, two conversations sharing a two-block system
prompt, replayed in the head by the blocktrace rules (an LRU of block ids, a request's
blocks moved to the front head first, cached = matched blocks x 16); the expected values
are worked out below line by line, never read off the code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import prefixscope as ps
from prefixscope.cli.main import app

runner = CliRunner()

# Bailian lines (16-token blocks): blocks 1, 2 are the system prompt both conversations send.
#   A1 [1, 2, 10, 11]           64 tokens   conversation A
#   B1 [1, 2, 20, 21]           64 tokens   conversation B
#   A2 [1, 2, 10, 11, 12, 13]   96 tokens   A's next turn
#   B2 [1, 2, 20, 21, 22]       80 tokens   B's next turn
LINES = [
    {"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.0, "input_length": 64,
     "output_length": 4, "type": "text", "turn": 1, "hash_ids": [1, 2, 10, 11]},
    {"chat_id": 2, "parent_chat_id": -1, "timestamp": 1.0, "input_length": 64,
     "output_length": 4, "type": "text", "turn": 1, "hash_ids": [1, 2, 20, 21]},
    {"chat_id": 3, "parent_chat_id": 1, "timestamp": 2.0, "input_length": 96,
     "output_length": 4, "type": "text", "turn": 2, "hash_ids": [1, 2, 10, 11, 12, 13]},
    {"chat_id": 4, "parent_chat_id": 2, "timestamp": 3.0, "input_length": 80,
     "output_length": 4, "type": "text", "turn": 2, "hash_ids": [1, 2, 20, 21, 22]},
]
PROMPT = 64 + 64 + 96 + 80  # 304

# Within reach (each conversation alone, unlimited): A1 0, B1 0 (B sent nothing before),
# A2 64 (A1 sent [1, 2, 10, 11]), B2 64 (B1 sent [1, 2, 20, 21]).
#
# Unlimited: A1 0; B1 reads [1, 2] = 32 (A's blocks: across); A2 reads 4 blocks = 64 and B2
# 4 blocks = 64 (their own: within). Cached 160 = within 128 + across 32.
#
# 4 blocks (64 tokens), the list newest first:
#   A1 misses;                       list 1 2 10 11
#   B1 reads 1, 2 (32, across);      list 1 2 20 21 | 10 11 evicted
#   A2 reads 1, 2, not 10 (32);      within min(32, 64) = 32; list 1 2 10 11 | 12 13 20 21
#   B2 reads 1, 2, not 20 (32);      within 32
#   cached 96 = within 64 + across 32.
# 6 blocks (96 tokens):
#   A1 misses;                       list 1 2 10 11
#   B1 reads 1, 2 (32, across);      list 1 2 20 21 10 11
#   A2 reads 1 2 10 11 (64, within); list 1 2 10 11 12 13 | 20 21 evicted
#   B2 reads 1, 2, not 20 (32);      within 32
#   cached 128 = within 96 + across 32.
EXPECTED = [
    # capacity, cached, within, across
    (64, 96, 64, 32),
    (96, 128, 96, 32),
    (None, 160, 128, 32),
]


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "qwen_two_chats_blksz_16.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in LINES))
    return path


def simulate_json(trace: Path, *args: str) -> Any:
    result = runner.invoke(app, ["simulate", str(trace), "--capacity-curve",
                                 "64,96,unlimited", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_two_conversations_are_threaded_apart(trace: Path, tmp_path: Path) -> None:
    store = str(tmp_path / "s.duckdb")
    assert runner.invoke(app, ["ingest", str(trace), "--store", store]).exit_code == 0
    rows = json.loads(runner.invoke(app, [
        "sql", "select native_id, session from turns order by timestamp", "--store", store,
        "--json"]).stdout)
    session = {r["native_id"]: r["session"] for r in rows}
    assert session["1"] == session["3"] != session["2"] == session["4"]


def test_each_point_splits_its_cached_tokens_within_and_across(trace: Path) -> None:
    out = simulate_json(trace)
    assert out["prompt_tokens"] == PROMPT
    got = [(c["capacity_tokens"], c["within_tokens"] + c["across_tokens"], c["within_tokens"],
            c["across_tokens"]) for c in out["capacity_curve"]]
    assert got == EXPECTED
    for point, (_, cached, within, across) in zip(out["capacity_curve"], EXPECTED,
                                                  strict=True):
        assert point["hit_rate"] == pytest.approx(cached / PROMPT)
        assert point["hit_rate_within"] == pytest.approx(within / PROMPT)
        assert point["hit_rate_across"] == pytest.approx(across / PROMPT)
    assert out["hit_rate"]["ideal"] == pytest.approx(160 / PROMPT)


def test_the_terminal_shows_both_columns(trace: Path) -> None:
    result = runner.invoke(app, ["simulate", str(trace), "--capacity-curve", "64,unlimited"])
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[0].strip(): [c.strip() for c in line.split("│")[1:]]
            for line in result.stdout.splitlines() if "│" in line}
    # 96 / 304 = 31.58% = 64 / 304 (21.05%) within + 32 / 304 (10.53%) across
    assert rows["64"] == ["31.58%", "21.05%", "10.53%"]
    assert rows["unlimited"] == ["52.63%", "42.11%", "10.53%"]
    assert "within a conversation" in result.stdout and "across conversations" in result.stdout


def test_the_library_frame_holds_the_split(trace: Path) -> None:
    with ps.ingest([trace], store=None) as st:
        sim = ps.simulate(st, capacities=[64, 96, None])
    curve = sim.to_polars("capacity_curve")
    assert curve.select("capacity_tokens", "within_tokens", "across_tokens").rows() == [
        (c, w, a) for c, _, w, a in EXPECTED]
    assert curve["hit_rate_within"].to_list() == pytest.approx(
        [w / PROMPT for _, _, w, _ in EXPECTED])


def test_reports_eviction_finding_carries_the_split_simulate_prints() -> None:
    """The report's eviction finding replays its own curve (around the fitted capacity):
    each point's split is simulate's at the same capacity, and the two parts add up to the
    point's hit rate."""
    log = str(Path(__file__).parent.parent / "sample_logs" / "vllm-agents-eviction.jsonl.gz")
    result = runner.invoke(app, ["report", log, "--json"])
    assert result.exit_code == 0, result.output
    found = [f for f in json.loads(result.stdout)["findings"]
             if f["kind"] == "eviction-pressure"]
    assert len(found) == 1
    evidence = found[0]["evidence"]
    rates = dict(map(tuple, evidence["capacity_curve"]))
    split = {c: (w, a) for c, w, a in evidence["capacity_curve_split"]}
    assert split.keys() == rates.keys() and None in split
    for capacity, (within, across) in split.items():
        assert within + across == pytest.approx(rates[capacity])
    finite = [c for c in split if c is not None]
    sim = runner.invoke(app, ["simulate", log, "--capacity", str(evidence["capacity_tokens"]),
                              "--capacity-curve",
                              ",".join(map(str, finite)) + ",unlimited", "--json"])
    assert sim.exit_code == 0, sim.output
    assert {c["capacity_tokens"]: (c["hit_rate_within"], c["hit_rate_across"])
            for c in json.loads(sim.stdout)["capacity_curve"]} == split


def test_the_plot_draws_the_within_part_under_the_curve(trace: Path) -> None:
    from prefixscope.views.plots import capacity_figure, pyplot

    with ps.ingest([trace], store=None) as st:
        sim = ps.simulate(st, capacities=[64, 96, None])
    fig = capacity_figure(sim)
    lines = {line.get_label(): list(line.get_ydata()) for line in fig.axes[0].get_lines()}
    pyplot().close(fig)
    within = [y for label, y in lines.items() if "within a conversation" in label]
    assert within == [pytest.approx([64 / PROMPT, 96 / PROMPT])]
    predicted = [y for label, y in lines.items() if label.endswith("predicted")]
    assert predicted == [pytest.approx([96 / PROMPT, 128 / PROMPT])]
