"""bench/accuracy.py cannot rot silently: its generator's answer key agrees with a hand
computation on a tiny corpus, it never imports prefixscope, its scoring counts what
docs/accuracy.md says, and a small run goes end to end through the CLI.

The expected numbers below come from the generator's cache rules (docs/accuracy.md), worked
out by hand; none is prefixscope's output.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import accuracy as acc  # noqa: E402


def chunk(cid: str, tokens: int, part: str = "messages") -> acc.Chunk:
    return acc.Chunk(cid, tokens, part, ())


TOOLS, SYSTEM = chunk("tools", 1000, "tools"), chunk("system", 500, "system")
M = [chunk(f"m{i}", n) for i, n in enumerate((300, 200, 100, 100, 100))]
OPUS, SONNET = acc.MODELS[1], acc.MODELS[0]


def call(session: str, index: int, time: float, kind: str, model: str, n: int,
         first: acc.Chunk | None = None) -> acc.Call:
    messages = ([first] if first else []) + M[:n]
    return acc.Call(session, index, time, kind, model, "2.1.150", acc.FIVE_MIN,
                    [TOOLS, SYSTEM, *messages])


@pytest.fixture(scope="module")
def calls() -> dict[str, acc.Call]:
    made = {
        "a0": call("a", 0, 0, "cold", SONNET, 1),
        "b0": call("b", 0, 30, "cold", SONNET, 0, chunk("b-m0", 700)),
        "a1": call("a", 1, 60, "append", SONNET, 2),
        "a2": call("a", 2, 460, "ttl", SONNET, 3),
        "a3": call("a", 3, 470, "model-change", OPUS, 4),
        "a4": call("a", 4, 480, "provider", OPUS, 5),
    }
    acc.simulate(list(made.values()), random.Random(0))
    return made


class TestHostedKeyByHand:
    """Session a: tools 1,000, system 500, messages of 300, 200, 100, 100, 100 tokens;
    session b shares the tools and system. Entries sit at 1,000, 1,500 and the prompt
    minus 2; 5-minute TTL from the last write or read."""

    def test_usage_and_key(self, calls: dict[str, acc.Call]) -> None:
        got = {k: (c.prompt, c.read, c.write, c.true_tokens) for k, c in calls.items()}
        # a0 cold: nothing cached; writes all but the 2 tail tokens; every missed token cold
        assert got["a0"] == (1_800, 0, 1_798, 1_800)
        # b0 cold: a0's tools + system entry (1,500, written at 0 s) is live at 30 s
        assert got["b0"] == (2_200, 1_500, 698, 700)
        # a1 extends a0 within 5 min: reads a0's entry, 1,800 - 2
        assert got["a1"] == (2_000, 1_798, 200, 0)
        # a2 400 s after a1: every entry expired (b0 refreshed 1,500 to 330 s; a1 wrote all
        # three to 360 s); the key: what the warm prefix would have served, 2,000 - 2
        assert got["a2"] == (2_100, 0, 2_098, 1_998)
        # a3 another model: its own cache (empty); min(2,200, 2,100) - 0
        assert got["a3"] == (2_200, 0, 2_198, 2_100)

    def test_provider_miss_serves_a_shorter_live_entry(self, calls: dict[str, acc.Call]
                                                       ) -> None:
        a4 = calls["a4"]
        # a3 wrote opus entries at 1,000, 1,500 and 2,198: the provider serves one of the
        # shorter ones, or nothing; the key is the rest of the warm prefix
        assert a4.prompt == 2_300
        assert a4.read in (0, 1_000, 1_500)
        assert a4.true_tokens == 2_198 - a4.read

    def test_claude_code_lines(self, calls: dict[str, acc.Call], tmp_path: Path) -> None:
        calls["a3"].records.append({"type": "system", "subtype": "compact_boundary"})
        paths = acc.write_claude_code([c for k, c in calls.items() if k[0] == "a"],
                                      tmp_path)
        lines = [json.loads(x) for x in paths[0].read_text().splitlines()]
        assistant = [x for x in lines if x["type"] == "assistant"]
        usage = assistant[3]["message"]["usage"]
        # prompt = input + cache read + cache creation (Anthropic's)
        assert (usage["input_tokens"], usage["cache_read_input_tokens"],
                usage["cache_creation_input_tokens"]) == (2, 0, 2_198)
        assert usage["cache_creation"] == {"ephemeral_5m_input_tokens": 2_198,
                                           "ephemeral_1h_input_tokens": 0}
        assert assistant[3]["message"]["model"] == OPUS
        # the record is written before the call it precedes
        kinds = [x.get("subtype") or x["type"] for x in lines]
        assert kinds.index("compact_boundary") < kinds.index("assistant", 7)


def test_self_hosted_eviction_by_hand() -> None:
    """Block 16, a 4-block cache: session x's 64-token prompt is evicted by y's before x
    returns with 16 tokens more; the unlimited cache would have served all 4 of its blocks."""
    def text(cid: str, n: int) -> acc.Chunk:
        words = " ".join(f"{cid}w{i}" for i in range(n - 3))  # role + 2 delimiters
        return acc.Chunk(cid, n, "messages", ({"role": "user", "content": [
            {"type": "text", "text": words}]},))
    system = acc.Chunk("s", 0, "system", ())
    tools = acc.Chunk("t", 0, "tools", ())
    acc._VTOKENS.update({"s": [], "t": []})
    x1, y1, x2 = text("x1", 64), text("y1", 64), text("x2", 16)
    calls = [acc.Call("x", 0, 0, "cold", acc.SELF_HOSTED_MODEL, "v", 0, [system, tools, x1]),
             acc.Call("y", 0, 10, "cold", acc.SELF_HOSTED_MODEL, "v", 0, [system, tools, y1]),
             acc.Call("x", 1, 20, "append", acc.SELF_HOSTED_MODEL, "v", 0,
                      [system, tools, x1, x2])]
    acc.simulate_self_hosted(calls, capacity_tokens=4 * acc.BLOCK)
    assert [(c.prompt, c.read, c.kind, c.true_tokens) for c in calls] == [
        (64, 0, "cold", 64), (64, 0, "cold", 64), (80, 0, "eviction", 64)]


def test_the_generator_never_imports_prefixscope(tmp_path: Path) -> None:
    code = ("import sys; sys.path.insert(0, 'bench'); import accuracy as a; "
            "c = a.generate(3, 2, 'raw-anthropic'); a.write_raw_anthropic(c, "
            f"__import__('pathlib').Path({str(tmp_path)!r})); "
            "assert not [m for m in sys.modules if m.startswith('prefixscope')], 'imported'")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "raw-anthropic" / "capture-00.jsonl").exists()


def test_scoring_rules() -> None:
    key = [{"session": "s", "time": "2026-03-02T09:00:00.000Z", "prompt": 100, "cause": "cold",
            "tokens": 100, "request": "r0"},
           {"session": "s", "time": "2026-03-02T09:01:00.000Z", "prompt": 200, "cause": "none",
            "tokens": 0, "request": "r1"},
           {"session": "s", "time": "2026-03-02T09:02:00.000Z", "prompt": 300, "cause": "ttl",
            "tokens": 190, "request": "r2"},
           {"session": "s", "time": "2026-03-02T09:03:00.000Z", "prompt": 400,
            "cause": "break:tool-order", "tokens": 300, "request": "r3"}]
    found = {"sessions": [{"session": "s", "calls": [
        {"time": "2026-03-02T09:00:00", "prompt_tokens": 100, "causes": {"cold": 100}},
        # a loss booked on an append-only turn
        {"time": "2026-03-02T09:01:00", "prompt_tokens": 200,
         "causes": {"new": 100, "provider": 98, "rounding": 2}},
        {"time": "2026-03-02T09:02:00", "prompt_tokens": 300,
         "causes": {"new": 100, "ttl": 200}},
        {"time": "2026-03-02T09:03:00", "prompt_tokens": 400,
         "causes": {"break": 300, "new": 100}, "break_kind": "tool-order"}]}]}
    result = acc.score(key, found)
    rows = result["causes"]
    assert rows["cold"]["recall"] == rows["cold"]["precision"] == 1.0
    assert rows["ttl"]["token_error"] == pytest.approx(10 / 190)
    assert rows["none"]["recall"] == 0.0
    assert rows["provider"]["precision"] == 0.0
    assert rows["break:tool-order"]["recall"] == 1.0
    assert (result["append_calls"], result["append_with_cause"]) == (1, 1)
    assert acc.check(result, 0.99, 0.01)


def test_a_small_run_end_to_end(tmp_path: Path) -> None:
    """Two sessions per corpus through the CLI: every call of the key is found, and on the
    Claude Code transcripts (the client's changes recorded) every cause is named."""
    status = acc.main(["--seed", "7", "--sessions", "2", "--out", str(tmp_path),
                       "--formats", "claude-code,openai-vllm"])
    assert status == 0
    for fmt in ("claude-code", "openai-vllm"):
        result = json.loads((tmp_path / f"score.{fmt}.json").read_text())
        assert result["unmatched"] == 0
        assert result["calls"] > 20
    cc = json.loads((tmp_path / "score.claude-code.json").read_text())
    assert acc.check(cc, 0.99, 0.01) == []
