"""OpenHands completion logs (`log_completions`): one JSON file per LLM call, the request as sent.

The real files (tests/data/real/openhands-completions/, OpenHands/software-agent-sdk's
fixtures) were counted by hand over the raw JSON (`response.usage`, `cost`, `timestamp`):
llm-logs/ 6 calls of claude-sonnet-4 through a LiteLLM proxy, prompt 35,428, cached 0,
output 804, cost $0.118344; nonfncall-llm-logs/ 4 calls of deepseek-chat with tool calls
mocked into the prompt, prompt 34,998, cached 33,792, output 302, cost $0.00302326. In both
folders each call's `messages` start with the whole `messages` of the call before (2, 4, 6,
... messages) and the file names' order is the `timestamp` order.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import FIXTURES, REAL
from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.ingest import read_requests
from prefixscope.ingest.formats import all_formats
from prefixscope.ingest.formats import openhands_completions as fmt
from prefixscope.ingest.probing import probe
from prefixscope.ingest.source import Source

runner = CliRunner()
CONV = FIXTURES / "openhands-completions" / "conv"
OK_1 = CONV / "gpt-4.1-1757000000.500-1a2b.json"
OK_2 = CONV / "gpt-4.1-1757000003.250-3c4d.json"
FAILED = CONV / "gpt-4.1-1757000009.000-5e6f-error.json"
REAL_DIR = REAL / "openhands-completions"

SYSTEM = {"role": "system", "content": "You are OpenHands agent, a helpful AI assistant that "
                                       "can interact with a computer to solve tasks."}
TOOLS = [{"type": "function", "function": {
    "name": "terminal", "description": "Run a bash command.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                   "required": ["command"]}}}]


def _write(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


def _call(**changes: object) -> dict:
    doc = json.loads(OK_1.read_text())
    doc.update(changes)
    return doc


def _ingest(*paths: Path, strict: bool = False) -> tuple[int, dict]:
    args = ["ingest", *map(str, paths), "--store", "s.duckdb", "--json"]
    result = runner.invoke(app, args + (["--strict"] if strict else []))
    return result.exit_code, json.loads(result.stdout) if result.stdout else {}


class TestOneFileIsOneRequest:
    def test_the_body_is_the_messages_the_tools_and_the_kwargs_sent(self) -> None:
        (request,), skips = read_requests(OK_2)
        assert skips == []
        assert request.source_format == "openhands-completions"
        assert request.endpoint == "openai-chat"
        assert request.body == {
            "messages": [
                SYSTEM, {"role": "user", "content": "Create hello.py that prints hello."},
                {"role": "assistant", "content": "I'll create it.", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {
                        "name": "terminal",
                        "arguments": "{\"command\": \"echo 'print(1)' > hello.py\"}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "name": "terminal",
                 "content": "done"}],
            "tools": TOOLS, "temperature": 0.0, "max_completion_tokens": 4096}

    def test_usage_model_id_cost_and_reply_come_from_the_response(self) -> None:
        (request,), _ = read_requests(OK_2)
        assert (request.usage.prompt_tokens, request.usage.cached_tokens,
                request.usage.output_tokens) == (1260, 1152, 5)
        assert (request.model, request.native_id) == ("gpt-4.1", "chatcmpl-2")
        assert request.metadata["cost"] == 0.000852
        assert request.metadata["extra_body"] == {"metadata": {"tags": ["agent:Agent"]}}
        assert request.output == {"role": "assistant", "content": "Done."}
        assert request.timestamp is not None and request.timestamp.isoformat() == \
            "2025-09-04T15:33:23.250000"

    def test_a_folder_is_one_session_keyed_by_its_first_call(self) -> None:
        keys = {read_requests(p)[0][0].session_key for p in (OK_1, OK_2)}
        assert keys == {"openhands-completions:conv:1757000000.500"}

    def test_tools_the_call_did_not_send_are_not_in_the_body(self, tmp_path: Path) -> None:
        kwargs = {"tools": None, "temperature": 0.0}
        (request,), _ = read_requests(_write(tmp_path / "c.json", _call(kwargs=kwargs)))
        assert "tools" not in request.body and "tools_missing" not in request.metadata

    def test_tools_logged_only_as_sdk_definitions_are_said_missing(self, tmp_path: Path) -> None:
        doc = _call(kwargs={"temperature": 0.0},
                    tools=[{"name": "terminal", "kind": "TerminalTool"}])
        (request,), _ = read_requests(_write(tmp_path / "c.json", doc))
        assert "tools" not in request.body
        assert request.metadata["tools_missing"] == \
            "the log holds the SDK's tool definitions, not the schemas sent"

    def test_top_level_openai_tools_are_sent_when_kwargs_dropped_them(self,
                                                                      tmp_path: Path) -> None:
        (request,), _ = read_requests(_write(tmp_path / "c.json",
                                             _call(kwargs={"temperature": 0.0})))
        assert request.body["tools"] == TOOLS


def _run(root: Path, *stamps: str) -> Path:
    """An evaluation run's instance folder `conv` holding the fixture's two calls, written
    under the file names the SDK gives calls made at `stamps` (their `timestamp` too), their
    response ids the run's."""
    folder = root / "conv"
    folder.mkdir(parents=True)
    for stamp, call in zip(stamps, (OK_1, OK_2), strict=True):
        doc = json.loads(call.read_text())
        doc["response"]["id"] = f"{root.name}-{doc['response']['id']}"
        doc["timestamp"] = float(stamp.split("-")[0])
        _write(folder / f"gpt-4.1-{stamp}.json", doc)
    return folder


class TestSessionsAcrossRuns:
    def _summary(self) -> dict:
        result = runner.invoke(app, ["report", "--store", "s.duckdb", "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)["summary"]

    def test_two_runs_with_the_same_instance_folder_are_two_sessions(self,
                                                                     tmp_path: Path) -> None:
        first = _run(tmp_path / "run-1", "1757000000.500", "1757000003.250")
        second = _run(tmp_path / "run-2", "1757100000.125-9f9f", "1757100004.000")
        assert _ingest(first)[0] == 0
        assert _ingest(second)[0] == 0
        summary = self._summary()
        assert (summary["requests"], summary["sessions"]) == (4, 2)

    def test_one_run_read_twice_is_one_session(self, tmp_path: Path) -> None:
        run = _run(tmp_path / "run-1", "1757000000.500", "1757000003.250")
        code, out = _ingest(run)
        assert (code, out["ingested"]) == (0, 2)
        code, out = _ingest(run)
        assert (code, out["ingested"], out["already_present"]) == (0, 0, 2)
        summary = self._summary()
        assert (summary["requests"], summary["sessions"]) == (2, 1)

    def test_a_later_call_of_a_run_joins_the_session_of_its_first(self,
                                                                  tmp_path: Path) -> None:
        run = _run(tmp_path / "run-1", "1757000000.500", "1757000003.250")
        later = run / "gpt-4.1-1757000003.250.json"
        later.rename(tmp_path / "later.json")
        assert _ingest(run)[0] == 0
        (tmp_path / "later.json").rename(later)
        assert _ingest(later)[0] == 0
        assert self._summary()["sessions"] == 1


    def test_a_folder_is_listed_once_for_all_its_calls(self, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
        # a long session's folder holds thousands of calls: listed once a call, its read
        # took the square of its size
        run = _run(tmp_path / "run-1", "1757000000.500", "1757000003.250")
        calls = sorted(run.iterdir())
        listed: list[Path] = []
        listdir = os.listdir
        monkeypatch.setattr(os, "listdir", lambda p: listed.append(Path(p)) or listdir(p))
        keys = {read_requests(p)[0][0].session_key for p in calls}
        assert keys == {"openhands-completions:conv:1757000000.500"}
        assert listed.count(run.resolve()) == 1


class TestCountedSkips:
    def test_a_failed_call_is_one_skip_with_its_error(self) -> None:
        requests, skips = read_requests(FAILED)
        assert requests == []
        assert [(s.line, s.reason) for s in skips] == [
            (None, "OpenHands completion log of a failed call (RateLimitError): no response, "
                   "no usage")]

    def test_a_malformed_file_is_one_clear_line_and_strict_fails(self, tmp_path: Path) -> None:
        bad = _write(tmp_path / "bad.json", _call(messages="not a list"))
        code, out = _ingest(bad, OK_1)
        assert code == 0 and (out["ingested"], out["skipped"]) == (1, 1)
        assert [(e["file"], e["line"]) for e in out["errors"]] == [(str(bad), None)]
        result = runner.invoke(app, ["ingest", str(bad), "--store", "t.duckdb", "--strict"])
        assert result.exit_code == 1
        assert "OpenHands completion log without a `messages` list and a `response` object" \
            in result.stderr

    def test_the_responses_api_path_is_a_skip_not_a_wrong_request(self, tmp_path: Path) -> None:
        doc = {"llm_path": "responses", "instructions": "be brief", "input": [], "tools": [],
               "kwargs": {}, "context_window": 0, "response": {"id": "resp_1"}, "cost": 0.0}
        requests, skips = read_requests(_write(tmp_path / "r.json", doc))
        assert requests == []
        assert [s.reason for s in skips] == [
            "OpenHands completion log of the Responses API path: not read yet"]


class TestDetection:
    @pytest.mark.parametrize("path", [OK_1, FAILED, *sorted(REAL_DIR.rglob("*.json"))],
                             ids=lambda p: p.name)
    def test_its_files_are_detected_by_no_earlier_format(self, path: Path) -> None:
        probed = probe(Source.from_path(path))
        claims = [m.NAME for m in all_formats() if m.sniff(probed)]
        assert claims[0] == "openhands-completions"

    def test_no_other_real_or_fixture_file_is_claimed(self) -> None:
        others = [p for root in (REAL, FIXTURES) for p in sorted(root.rglob("*"))
                  if p.is_file() and "openhands-completions" not in p.parts]
        claimed = []
        for path in others:
            try:
                probed = probe(Source.from_path(path))
            except (OSError, ValueError):
                continue
            if fmt.sniff(probed):
                claimed.append(path)
        assert claimed == []


@pytest.mark.real
class TestRealLogs:
    def _report(self, folder: Path) -> dict:
        result = runner.invoke(app, ["report", str(folder), "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    @pytest.mark.parametrize(("folder", "counts", "cost"), [
        ("llm-logs", (6, 35_428, 0), 0.118344),
        ("nonfncall-llm-logs", (4, 34_998, 33_792), 0.00302326),
    ])
    def test_counts_and_cost_are_the_hand_counts(self, folder: str, counts: tuple,
                                                 cost: float) -> None:
        summary = self._report(REAL_DIR / folder)["summary"]
        assert (summary["requests"], summary["prompt_tokens"],
                summary["cached_tokens"]) == counts
        assert summary["sessions"] == 1
        requests = [read_requests(p)[0][0] for p in sorted((REAL_DIR / folder).glob("*.json"))]
        assert sum(r.metadata["cost"] for r in requests) == pytest.approx(cost, abs=1e-12)
        assert [r.timestamp for r in requests] == sorted(r.timestamp for r in requests)

    def test_consecutive_calls_diff_append_only(self) -> None:
        result = runner.invoke(app, ["diff", "--all", "--json", str(REAL_DIR)])
        assert result.exit_code == 0, result.output
        pairs = json.loads(result.stdout)["pairs"]
        assert sorted((p["session"], p["cause"]) for p in pairs) == sorted(
            [("openhands-completions:llm-logs:1757015025.972", "append-only")] * 5
            + [("openhands-completions:nonfncall-llm-logs:1757015054.055", "append-only")] * 3)
