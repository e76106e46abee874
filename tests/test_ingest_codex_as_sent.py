"""Codex rollouts rebuilt as Codex sends them (issue 19): every item with text reaches the
rendered prompt, tool outputs as Codex re-renders them, calls paired with outputs, and
what the log cannot hold is said per request (`metadata.approximate`,
`Tokens.unrebuilt_tokens`).

Expected texts are written by hand from the Codex source (openai/codex,
`codex-rs/core/src/client_common.rs` `build_structured_output`,
`codex-rs/core/src/context_manager/normalize.rs`; docs/formats/codex.md names the
commits), never produced by the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prefixscope.ingest import read_requests
from prefixscope.prompt import RenderOptions, render
from prefixscope.tokenizers import load_tokenizer
from prefixscope.tokens import tokens

PATCH = "*** Begin Patch\n*** Add File: a.txt\n+hello\n*** End Patch\n"
PATCH_OUTPUT = json.dumps({"output": "Success. Updated the following files:\nA a.txt\n",
                           "metadata": {"exit_code": 0, "duration_seconds": 0.5}})
# build_structured_output: "Exit code: {}", "Wall time: {} seconds", "Output:", output
PATCH_SENT = ("Exit code: 0\nWall time: 0.5 seconds\nOutput:\n"
              "Success. Updated the following files:\nA a.txt\n")


def _line(t: int, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"timestamp": f"2026-02-01T10:00:{t:02d}Z", "type": kind, "payload": payload}


def _user(t: int, text: str) -> dict[str, Any]:
    return _line(t, "response_item", {"type": "message", "role": "user",
                                      "content": [{"type": "input_text", "text": text}]})


def _count(t: int, n: int) -> dict[str, Any]:
    return _line(t, "event_msg", {"type": "token_count", "info": {"last_token_usage": {
        "input_tokens": n, "cached_input_tokens": 0, "output_tokens": 10}}})


def _rollout(tmp_path: Path, *items: dict[str, Any]) -> list:
    lines = [_line(0, "session_meta", {"id": "sess-1", "cli_version": "0.60.1"}),
             _line(0, "turn_context", {"model": "gpt-5.1-codex-max"}), *items]
    path = tmp_path / "rollout-2026-02-01T10-00-00-sess-1.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    requests, skips = read_requests(path)
    assert skips == []
    return requests


def _patch_session(tmp_path: Path) -> list:
    return _rollout(
        tmp_path,
        _user(1, "add a.txt"),
        _count(2, 1000),
        _line(3, "response_item", {"type": "reasoning", "summary": [], "content": None,
                                   "encrypted_content": "gAAAA"}),
        _line(4, "response_item", {"type": "custom_tool_call", "status": "completed",
                                   "call_id": "call_p", "name": "apply_patch",
                                   "input": PATCH}),
        _count(5, 1200),
        _line(6, "response_item", {"type": "custom_tool_call_output", "call_id": "call_p",
                                   "output": PATCH_OUTPUT}),
        _count(7, 1400),
    )


class TestEveryItemIsRendered:
    def test_custom_tool_call_and_its_output_reach_the_prompt(self, tmp_path: Path) -> None:
        *_, last = _patch_session(tmp_path)
        text = render(last).text
        assert PATCH in text  # main dropped custom_tool_call items
        assert PATCH_SENT in text

    def test_the_custom_call_input_is_kept_as_text_not_parsed_as_json(
            self, tmp_path: Path) -> None:
        *_, last = _patch_session(tmp_path)
        text = render(last).text
        # the harmony stand-in: a freeform call has no <|constrain|>json
        assert "to=functions.apply_patch<|message|>" + PATCH + "<|call|>" in text

    def test_local_shell_and_web_search_calls_reach_the_prompt(self, tmp_path: Path) -> None:
        action = {"type": "exec", "command": ["ls", "-la"]}
        *_, last = _rollout(
            tmp_path,
            _user(1, "look"),
            _count(2, 100),
            _line(3, "response_item", {"type": "local_shell_call", "call_id": "call_s",
                                       "status": "completed", "action": action}),
            _line(4, "response_item", {"type": "web_search_call", "status": "completed",
                                       "action": {"type": "search", "query": "lichess"}}),
            _count(5, 200),
            _line(6, "response_item", {"type": "function_call_output", "call_id": "call_s",
                                       "output": "total 0"}),
            _count(7, 300),
        )
        text = render(last).text
        assert '"command":["ls","-la"]' in text.replace(", ", ",").replace(": ", ":")
        assert "lichess" in text
        assert "total 0" in text


class TestOutputsAsSent:
    def test_apply_patch_json_output_becomes_structured_text(self, tmp_path: Path) -> None:
        *_, last = _patch_session(tmp_path)
        (output,) = [i for i in last.body["input"] if i["type"] == "custom_tool_call_output"]
        assert output["output"] == PATCH_SENT

    def test_total_output_lines_header_is_its_own_section(self, tmp_path: Path) -> None:
        raw = json.dumps({"output": "Total output lines: 2\n\nx\ny",
                          "metadata": {"exit_code": 1, "duration_seconds": 1.25}})
        *_, last = _rollout(
            tmp_path,
            _user(1, "run"),
            _line(2, "response_item", {"type": "custom_tool_call", "call_id": "c0",
                                       "name": "apply_patch", "input": PATCH}),
            _count(3, 100),
            _line(4, "response_item", {"type": "custom_tool_call_output", "call_id": "c0",
                                       "output": PATCH_OUTPUT}),
            _line(5, "response_item", {"type": "function_call", "name": "shell",
                                       "arguments": "{}", "call_id": "c1"}),
            _count(6, 200),
            _line(7, "response_item", {"type": "function_call_output", "call_id": "c1",
                                       "output": raw}),
            _line(8, "response_item", {"type": "function_call", "name": "shell_command",
                                       "arguments": "{}", "call_id": "c2"}),
            _count(9, 300),
            _line(10, "response_item", {"type": "function_call_output", "call_id": "c2",
                                        "output": raw}),
            _user(11, "next"),
            _count(12, 500),
        )
        outputs = {i["call_id"]: i["output"] for i in last.body["input"]
                   if i["type"].endswith("_output")}
        assert outputs["c1"] == ("Exit code: 1\nWall time: 1.25 seconds\n"
                                 "Total output lines: 2\nOutput:\nx\ny")
        assert outputs["c2"] == raw  # shell_command is not a re-rendered tool name

    def test_without_the_freeform_patch_tool_outputs_stay_as_logged(
            self, tmp_path: Path) -> None:
        raw = json.dumps({"output": "ok", "metadata": {"exit_code": 0,
                                                       "duration_seconds": 0.0}})
        *_, last = _rollout(
            tmp_path,
            _user(1, "run"),
            _line(2, "response_item", {"type": "function_call", "name": "shell",
                                       "arguments": "{}", "call_id": "c1"}),
            _count(3, 100),
            _line(4, "response_item", {"type": "function_call_output", "call_id": "c1",
                                       "output": raw}),
            _count(5, 500),
        )
        assert last.body["input"][-1]["output"] == raw


class TestCallsPairedWithOutputs:
    def test_an_interrupted_call_is_sent_with_an_aborted_output(self, tmp_path: Path) -> None:
        calls = _rollout(
            tmp_path,
            _user(1, "do it"),
            _line(2, "response_item", {"type": "function_call", "name": "shell_command",
                                       "arguments": "{}", "call_id": "c1"}),
            _count(3, 100),
            _user(4, "stop, do this instead"),
            _count(5, 200),
        )
        assert [(i["type"], i.get("call_id"), i.get("output")) for i in calls[1].body["input"]
                if i["type"] != "message"] == [
            ("function_call", "c1", None), ("function_call_output", "c1", "aborted")]
        assert calls[1].body["input"][-1]["content"][0]["text"] == "stop, do this instead"

    def test_an_output_without_its_call_is_not_sent(self, tmp_path: Path) -> None:
        (call,) = _rollout(
            tmp_path,
            _user(1, "hi"),
            _line(2, "response_item", {"type": "custom_tool_call_output", "call_id": "gone",
                                       "output": "x"}),
            _user(3, "again"),
            _count(4, 100),
        )
        assert [i["type"] for i in call.body["input"]] == ["message", "message"]


    def test_a_damaged_call_id_is_left_as_logged(self, tmp_path: Path) -> None:
        *_, call = _rollout(
            tmp_path,
            _user(1, "hi"),
            _line(2, "response_item", {"type": "function_call", "name": "x",
                                       "arguments": "{}", "call_id": ["not", "an", "id"]}),
            _count(3, 50),
            _line(4, "response_item", {"type": "function_call_output", "call_id": {"a": 1},
                                       "output": "y"}),
            _user(5, "again"),
            _count(6, 100),
        )
        assert [i["type"] for i in call.body["input"]] == [
            "message", "function_call", "function_call_output", "message"]


class TestWhatTheLogLacks:
    def test_encrypted_reasoning_in_the_input_is_named(self, tmp_path: Path) -> None:
        first, second, third = _patch_session(tmp_path)
        assert first.metadata["approximate"] == ["tools", "instructions"]
        # call 2's input ends before its own output (the reasoning and the patch call)
        assert second.metadata["approximate"] == ["tools", "instructions"]
        assert third.metadata["approximate"] == ["tools", "instructions", "reasoning"]

    def test_unrebuilt_tokens_are_the_logged_tokens_the_render_lacks(
            self, tmp_path: Path) -> None:
        *_, last = _patch_session(tmp_path)
        tok = tokens(last)
        # an independent count: the whole rendered text through the tokenizer itself
        rendered = len(load_tokenizer("o200k-harmony").encode(render(last).text).ids)
        assert tok.logged_prompt_tokens == 1400
        assert tok.unrebuilt_tokens == 1400 - rendered
        assert 0 < rendered < 1400

    def test_a_render_longer_than_the_log_lacks_nothing(self, tmp_path: Path) -> None:
        *_, last = _rollout(tmp_path, _user(1, "word " * 200), _count(2, 5))
        assert tokens(last).unrebuilt_tokens == 0

    def test_no_logged_prompt_tokens_no_count(self, tmp_path: Path) -> None:
        *_, last = _patch_session(tmp_path)
        from dataclasses import replace

        from prefixscope.model import Usage
        blind = replace(last, usage=Usage())
        tok = tokens(blind, RenderOptions())
        assert tok.logged_prompt_tokens is None and tok.unrebuilt_tokens is None
