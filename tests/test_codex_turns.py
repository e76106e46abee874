"""Codex rollouts: what each turn drops from the input, and Codex's own records of a change
(issue 35). The Responses API keeps only the current turn's reasoning: at a new user
message the reasoning items of the turns before it leave the input, so the prompt shrinks
and the cache restarts where the first of them sat (codex-rs
`ContextManager::get_non_last_reasoning_items_tokens`, ``is_user_turn_boundary``).
A ``compacted`` line (and its ``context_compacted`` event), a ``turn_context`` naming
another model and a resume by another Codex release (``session_meta.cli_version``) are
recorded session events, booked by the ledger as the Claude Code reader's are.

The fixture tests/fixtures/codex/handmade/turns/ is hand-built in the shape of real rollout
lines. Every expected number is worked out by hand from its usage under OpenAI's rules
(128-token steps, a hit at most floor((P - 1) / 128) * 128 of an intact predecessor P, a
shortfall under 128 tokens is rounding, a retention of 10 minutes idle):

call  line  prompt  cached  gap        what
1     7     20,000       0             cold
2     11    24,000  19,968  4 s        X = floor(20,000/128)*128 = 19,968: rounding 32, new 4,000
3     14    21,500   3,968  12 min 24 s a user turn: the reasoning call 2 sent is dropped
                                       (recorded history-rewrite, D = C = 3,968): break 17,532
4     17    23,000  21,248  40 min 5 s intact: X = floor(21,500/128)*128 = 21,376; the read
                                       after the pause is most of X, so no expiry:
                                       provider 128, rounding 124, new 1,500
5     20    24,000       0  67 min 24 s X = floor(23,000/128)*128 = 22,912 and nothing read:
                                       ttl 22,912, rounding 88, new 1,000
6     25    25,000       0  30 min 1 s resumed by Codex 0.50.0 with model gpt-5: model-change
                                       decides (D = 0): break 24,000, new 1,000
7     30     6,000       0  10 min     after a compaction: compaction 6,000
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import FIXTURES
from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.ingest import read_requests
from prefixscope.ingest.formats.codex import is_turn_boundary

runner = CliRunner()
TURNS = next((FIXTURES / "codex" / "handmade" / "turns").glob("rollout-*.jsonl"))


def _read(path: Path = TURNS) -> list:
    requests, skips = read_requests(path)
    assert skips == []
    return requests


def _json(*args: str) -> dict:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


class TestWhatEachTurnDrops:
    def test_reasoning_of_earlier_turns_leaves_the_input(self) -> None:
        calls = _read()
        kinds = [[i["type"] for i in c.body["input"]] for c in calls[:3]]
        # call 2: the turn's own reasoning (call 1's output) is sent back
        assert kinds[1] == ["message", "message", "reasoning", "function_call",
                            "function_call_output"]
        assert calls[1].metadata["approximate"] == ["tools", "reasoning"]
        # call 3: a new user message: calls 1 and 2's reasoning are gone, the rest stays
        assert kinds[2] == ["message", "message", "function_call", "function_call_output",
                            "message", "message"]
        assert calls[2].metadata["approximate"] == ["tools"]
        assert calls[2].body["input"][-1]["content"][0]["text"] == "now run the linter"

    def test_context_codex_injects_is_no_turn_boundary(self) -> None:
        def user(text: str) -> dict:
            return {"type": "message", "role": "user",
                    "content": [{"type": "input_text", "text": text}]}
        assert is_turn_boundary(user("fix the failing test"))
        assert not is_turn_boundary(user("<environment_context>\n  <cwd>/r</cwd>"))
        assert not is_turn_boundary(user("# AGENTS.md instructions for /repo\n..."))
        assert not is_turn_boundary(user("<user_instructions>\nbe brief"))
        assert not is_turn_boundary({"type": "message", "role": "developer",
                                     "content": [{"type": "input_text", "text": "x"}]})


class TestRecordedEvents:
    def test_each_call_carries_what_was_recorded_before_it(self) -> None:
        events = [[(e.kind, e.detail, e.source_line) for e in c.events] for c in _read()]
        assert events == [
            [], [],
            [("history-rewrite", "a user turn began: the Responses API dropped 1 reasoning "
              "item of the turns before it", 12)],
            [], [],
            [("client-upgrade", "0.46.0 -> 0.50.0", 21),
             ("model-change", "gpt-5-codex -> gpt-5", 22)],
            # the compacted line (26) and its context_compacted event (27): one compaction
            [("compaction", "compacted (local: summary message)", 26)],
        ]

    def test_the_resumed_calls_carry_the_new_version(self) -> None:
        assert [c.metadata["cli_version"] for c in _read()] == ["0.46.0"] * 5 + ["0.50.0"] * 2

    def test_a_context_compacted_event_alone_is_a_compaction(self, tmp_path: Path) -> None:
        lines = [json.loads(x) for x in TURNS.read_text().splitlines()]
        kept = [x for x in lines if x["type"] != "compacted"]
        path = tmp_path / TURNS.name
        path.write_text("".join(json.dumps(x) + "\n" for x in kept))
        last = _read(path)[-1]
        assert [(e.kind, e.detail, e.source_line) for e in last.events] == [
            ("compaction", "context_compacted event", 26)]


class TestDiff:
    def test_a_shrinking_prompt_is_not_append_only(self) -> None:
        pairs = _json("diff", "--all", str(TURNS))["pairs"]
        assert [p["cause"] for p in pairs] == [
            "append-only", "history-rewrite", "append-only", "append-only", "model-change",
            "compaction"]
        assert pairs[1]["detail"].startswith(
            "the log's prompt shrank (24,000 → 21,500 tokens) while the rebuilt body extends A")


# Codex 0.60 logs a call's `token_count` before the call's own output items (as the real
# rollout of docs/formats/codex.md does): the output joins the history at the next input.
def _v060(tmp_path: Path) -> Path:
    def at(s: int) -> str:
        return f"2025-11-22T20:{45 + s // 60:02d}:{s % 60:02d}.000Z"

    def item(s: int, payload: dict) -> dict:
        return {"timestamp": at(s), "type": "response_item", "payload": payload}

    def user(s: int, text: str) -> dict:
        return item(s, {"type": "message", "role": "user",
                        "content": [{"type": "input_text", "text": text}]})

    def reasoning(s: int, enc: str) -> dict:
        return item(s, {"type": "reasoning", "summary": [{"type": "summary_text",
                                                          "text": "**Planning**"}],
                        "content": None, "encrypted_content": enc})

    def call(s: int, cid: str) -> dict:
        return item(s, {"type": "function_call", "name": "shell_command",
                        "arguments": '{"command":"ls"}', "call_id": cid})

    def output(s: int, cid: str) -> dict:
        return item(s, {"type": "function_call_output", "call_id": cid,
                        "output": "Exit code: 0\nWall time: 0.1 seconds\nOutput:\na.txt\n"})

    totals = [0, 0, 0]

    def count(s: int, prompt: int, cached: int) -> dict:
        totals[0] += prompt
        totals[1] += cached
        totals[2] += 10
        usage = {"input_tokens": totals[0], "cached_input_tokens": totals[1],
                 "output_tokens": totals[2], "reasoning_output_tokens": 0,
                 "total_tokens": totals[0] + totals[2]}
        last = {"input_tokens": prompt, "cached_input_tokens": cached, "output_tokens": 10,
                "reasoning_output_tokens": 0, "total_tokens": prompt + 10}
        return {"timestamp": at(s), "type": "event_msg", "payload": {
            "type": "token_count", "info": {"total_token_usage": usage,
                                            "last_token_usage": last,
                                            "model_context_window": 258400},
            "rate_limits": None}}

    lines = [
        {"timestamp": at(0), "type": "session_meta", "payload": {
            "id": "019aad50-a7e6-7422-b7a8-0b384290624f", "timestamp": at(0), "cwd": "/r",
            "originator": "codex_cli_rs", "cli_version": "0.60.1", "instructions": None,
            "source": "cli", "model_provider": "openai"}},                      # 1
        user(0, "<environment_context>\n  <cwd>/r</cwd>\n</environment_context>"),  # 2
        user(1, "build it"),                                                    # 3
        {"timestamp": at(1), "type": "turn_context", "payload": {
            "cwd": "/r", "approval_policy": "on-request", "model": "gpt-5.1-codex-max",
            "effort": "medium", "summary": "auto"}},                            # 4
        count(5, 4_000, 0),                                                     # 5  call 1
        reasoning(5, "gAAAArA"), call(5, "c1"), output(6, "c1"),                # 6-8
        count(8, 4_500, 3_968),                                                 # 9  call 2
        reasoning(8, "gAAAArB"), call(8, "c2"), output(9, "c2"),                # 10-12
        count(11, 5_200, 4_480),                                                # 13 call 3
        reasoning(11, "gAAAArC"), call(11, "c3"), output(12, "c3"),             # 14-16
        count(14, 5_800, 5_120),                                                # 17 call 4
        reasoning(14, "gAAAArD"),                                               # 18
        item(15, {"type": "message", "role": "assistant",
                  "content": [{"type": "output_text", "text": "done"}]}),       # 19
        user(315, "now test it"),                                               # 20
        count(318, 4_300, 3_072),                                               # 21 call 5
    ]
    path = tmp_path / "rollout-2025-11-22T20-45-35-019aad50-a7e6-7422-b7a8-0b384290624f.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


class TestTokenCountBeforeOutput:
    def test_each_call_holds_the_outputs_logged_after_the_previous_count(
            self, tmp_path: Path) -> None:
        calls = _read(_v060(tmp_path))
        kinds = [[i["type"] for i in c.body["input"]] for c in calls]
        assert kinds[1] == ["message", "message", "reasoning", "function_call",
                            "function_call_output"]
        assert kinds[3][-3:] == ["reasoning", "function_call", "function_call_output"]
        assert len(kinds[3]) == 11
        # call 5: the new user message is in; rA, rB, rC (and rD, never sent) are dropped
        assert kinds[4] == ["message", "message"] + ["function_call",
                                                     "function_call_output"] * 3 + [
            "message", "message"]
        assert calls[4].body["input"][-1]["content"][0]["text"] == "now test it"
        assert [(e.kind, e.detail, e.source_line) for e in calls[4].events] == [
            ("history-rewrite", "a user turn began: the Responses API dropped 3 reasoning "
             "items of the turns before it", 20)]
        assert [c.source_line for c in calls] == [5, 9, 13, 17, 21]


def test_a_remote_compaction_is_recorded_once(tmp_path: Path) -> None:
    # newer Codex: a compacted line with the replacement history (an encrypted compaction
    # item and the user message kept), then its context_compacted event
    lines = [
        {"timestamp": "2026-01-01T00:00:00Z", "type": "session_meta",
         "payload": {"id": "s1", "cli_version": "0.80.0"}},
        {"timestamp": "2026-01-01T00:00:01Z", "type": "compacted",
         "payload": {"message": "", "replacement_history": [
             {"type": "message", "role": "user",
              "content": [{"type": "input_text", "text": "hi"}]},
             {"type": "compaction", "encrypted_content": "gAAA"},
             {"type": "ghost_snapshot", "ghost_commit": {"id": "x"}}]}},
        {"timestamp": "2026-01-01T00:00:01Z", "type": "event_msg",
         "payload": {"type": "context_compacted"}},
        {"timestamp": "2026-01-01T00:00:02Z", "type": "event_msg",
         "payload": {"type": "token_count", "info": {"last_token_usage": {
             "input_tokens": 10, "cached_input_tokens": 0, "output_tokens": 1}}}},
    ]
    path = tmp_path / "rollout-2026-01-01T00-00-00-s1.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    (call,) = _read(path)
    # the ghost snapshot is not history: 2 items
    assert [(e.kind, e.detail, e.source_line) for e in call.events] == [
        ("compaction", "compacted (remote: replacement_history of 2 items)", 2)]
