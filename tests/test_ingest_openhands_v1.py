"""OpenHands V1 (software-agent-sdk) output rows (issue 13, item 4), and recognized files that
hold no model call.

Fixtures (tests/fixtures/openhands/v1/README.md): the real event stream of the SDK's own
test fixture wrapped in an `EvalOutput` row, and a complete small run written by hand in
the SDK's serialized shapes. Expected values are read off the fixtures by hand: one call
per distinct `llm_response_id`, each request the messages of the events before it
(`events_to_messages`), usage from `metrics.token_usages` by response id.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.ingest import detect, read_requests
from prefixscope.ingest.source import Source

V1 = FIXTURES / "openhands" / "v1"
SDK_EVENTS = V1 / "sdk_goal_events_output.jsonl"
RUN = V1 / "complete_run_output.jsonl"


@pytest.fixture(scope="module")
def run():
    requests, skips = read_requests(RUN)
    assert skips == []
    return requests


class TestDetection:
    @pytest.mark.parametrize("path", [SDK_EVENTS, RUN])
    def test_v1_rows_are_openhands(self, path: Path) -> None:
        module, _ = detect(Source.from_path(path))
        assert module is not None and module.NAME == "openhands"


class TestCompleteRun:
    def test_one_request_per_llm_response_id(self, run) -> None:
        assert [r.native_id for r in run] == ["chatcmpl-A", "chatcmpl-B", "chatcmpl-C"]
        assert [r.metadata["actions"] for r in run] == [
            ["TerminalAction", "FileEditorAction"], ["FileEditorAction"], ["message"]]

    def test_first_request_is_system_and_user(self, run) -> None:
        system, user = run[0].body["messages"]
        assert system == {"role": "system", "content": [
            {"type": "text", "text": "You are OpenHands agent, a helpful AI assistant."},
            {"type": "text", "text": "<RUNTIME_INFORMATION>Today's date is 2026-06-20 (UTC)."
                                     "</RUNTIME_INFORMATION>"}]}
        assert user == {"role": "user", "content": [
            {"type": "text", "text": "Fix the failing test in calc.py"},
            {"type": "text", "text": "<REPOSITORY_INFO>repo at /workspace/calc</REPOSITORY_INFO>"}]}

    def test_parallel_actions_are_one_assistant_message_then_tool_results(self, run) -> None:
        messages = run[1].body["messages"]
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool"]
        assistant = messages[2]
        assert assistant["content"] == [{"type": "text",
                                         "text": "Run the tests, and look at calc.py."}]
        assert [(c["id"], c["function"]["name"]) for c in assistant["tool_calls"]] == [
            ("call_a1", "terminal"), ("call_a2", "file_editor")]
        assert json.loads(assistant["tool_calls"][1]["function"]["arguments"]) == {
            "command": "view", "path": "/workspace/calc/calc.py"}
        assert [(m["tool_call_id"], m["content"]) for m in messages[3:]] == [
            ("call_a1", "1 failed: test_add expected 3 got 4"),
            ("call_a2", "def add(a, b):\n    return a + b + 1")]

    def test_requests_only_append(self, run) -> None:
        for earlier, later in zip(run, run[1:], strict=False):
            n = len(earlier.body["messages"])
            assert later.body["messages"][:n] == earlier.body["messages"]
        assert len(run[2].body["messages"]) == 7

    def test_usage_from_metrics_token_usages(self, run) -> None:
        assert [(r.usage.prompt_tokens, r.usage.cached_tokens, r.usage.cache_write_tokens,
                 r.usage.output_tokens) for r in run] == [
            (9400, 0, 9390, 120), (9950, 9300, 640, 60), (10180, 9900, 270, 25)]
        assert {r.usage.semantics for r in run} == {"openhands"}

    def test_tools_and_what_is_approximate(self, run) -> None:
        assert [t["function"]["name"] for t in run[0].body["tools"]] == ["terminal",
                                                                           "file_editor"]
        assert run[0].metadata["approximate"] == [
            "tools are logged without their parameter schemas"]
        assert "system_missing" not in run[0].metadata

    def test_session_model_and_cost(self, run) -> None:
        assert {r.session_key_source for r in run} == {"openhands.instance_id"}
        assert run[0].session_key.startswith("openhands:calc__calc-1:")
        assert {r.model for r in run} == {"litellm_proxy/claude-sonnet-4-5-20250929"}
        assert [r.metadata["cost"] for r in run] == [0.0362, 0.0031, 0.0019]


class TestSdkEventStream:
    """The SDK's real events: two model calls, no system prompt, no usage per call."""

    def test_two_calls_rebuilt_and_marked_approximate(self) -> None:
        requests, skips = read_requests(SDK_EVENTS)
        assert skips == []
        assert [r.native_id for r in requests] == ["0680149d625114e6a97f54b158714212",
                                                   "068014ab9c72170b40bca7fa74f68a89"]
        assert requests[0].body["messages"] == []
        assert [m["role"] for m in requests[1].body["messages"]] == [
            "assistant", "tool", "tool"]
        first_result = requests[1].body["messages"][1]["content"]
        assert first_result.startswith("[An error occurred during execution.]\n"
                                       "Cannot execute multiple commands at once.")
        assert all(r.metadata["approximate"] == [
            "no SystemPromptEvent: the system prompt and tools are not in the log"]
            for r in requests)
        assert all(not r.usage.reported for r in requests)


runner = CliRunner()


def _no_call_row(path: Path) -> Path:
    row = {"instance_id": "errored", "attempt": 1, "test_result": {}, "metrics": None,
           "history": [
               {"id": "1", "timestamp": "2026-06-20T09:00:00", "source": "environment",
                "key": "execution_status", "value": "running",
                "kind": "ConversationStateUpdateEvent"},
               {"id": "2", "timestamp": "2026-06-20T09:00:01", "source": "user",
                "llm_message": {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                "kind": "MessageEvent"}],
           "error": "runtime failed to start"}
    path.write_text(json.dumps(row) + "\n")
    return path


class TestRecognizedButEmpty:
    def test_reported_with_the_reason_and_strict_fails(self, tmp_path: Path) -> None:
        log = _no_call_row(tmp_path / "output.jsonl")
        result = runner.invoke(app, ["ingest", str(log), "--store", "s.duckdb", "--strict"])
        assert result.exit_code == 1
        assert "no event is a model call" in result.stderr

    def test_without_strict_the_other_files_are_stored(self, tmp_path: Path) -> None:
        log = _no_call_row(tmp_path / "output.jsonl")
        out = json.loads(runner.invoke(app, ["ingest", str(log), str(RUN), "--store",
                                             "s.duckdb", "--json"]).stdout)
        assert out["ingested"] == 3 and out["skipped"] == 1
        assert out["empty"] == [f"{log} (openhands)"]
        assert out["errors"][0]["file"] == str(log) and out["errors"][0]["line"] is None

    def test_any_format_gets_a_reason(self, tmp_path: Path) -> None:
        # a Claude Code transcript of metadata records only: recognized, no call
        log = tmp_path / "s.jsonl"
        log.write_text('{"type":"permission-mode","permissionMode":"default","sessionId":"s"}\n'
                       '{"type":"custom-title","customTitle":"x","sessionId":"s"}\n')
        result = runner.invoke(app, ["ingest", str(log), "--store", "s.duckdb", "--strict"])
        assert result.exit_code == 1
        assert "recognized as claude-code but holds no model call" in result.stderr
