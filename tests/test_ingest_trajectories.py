"""Agent trajectories rebuilt into requests: SWE-agent, OpenHands, mini-swe-agent."""

from __future__ import annotations

import json
import shutil
from datetime import datetime
from pathlib import Path

import pytest
from conftest import FIXTURES

from prefixscope.ingest import read_requests
from prefixscope.ingest.formats import all_formats, mini_swe_agent, openhands, swe_agent
from prefixscope.ingest.probing import probe
from prefixscope.ingest.source import Source
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths

SWE = FIXTURES / "swe-agent"
OH = FIXTURES / "openhands"
MINI = FIXTURES / "mini-swe-agent"
FROM_SOURCE = ("replay__marshmallow-code__marshmallow-1867__function_calling_replace_from_source"
               "__marshmallow-code__marshmallow-1867.traj")
OH_EVAL = "evaluation__benchmarks__multi_swe_bench__examples__output.jsonl"


def _counts(usage) -> tuple:
    return (usage.prompt_tokens, usage.cached_tokens, usage.cache_write_tokens, usage.output_tokens)


def _detected(path: Path) -> list[str]:
    pr = probe(Source.from_path(path))
    return [m.NAME for m in all_formats() if m.sniff(pr)]


def _messages(request) -> list[dict]:
    return request.body["messages"]


def _extends(later, earlier) -> bool:
    a, b = _messages(earlier), _messages(later)
    return b[: len(a)] == a


# --- SWE-agent -------------------------------------------------------------------------------

class TestSweAgentDetection:
    @pytest.mark.parametrize("name", ["query_steps.traj", "demonstration_history.traj",
                                      "function_calling_elided.traj", "retry_attempts.traj"])
    def test_fixtures_detected(self, name: str) -> None:
        assert _detected(SWE / name) == ["swe-agent"]

    def test_mini_and_openhands_files_not_claimed(self) -> None:
        for path in (MINI / "v1_usage.traj.json", OH / "parallel_calls.json"):
            assert not swe_agent.sniff(probe(Source.from_path(path)))


class TestSweAgentQuerySteps:
    def test_each_step_query_is_its_request(self) -> None:
        requests, skips = read_requests(SWE / "query_steps.traj")
        assert skips == []
        assert [len(_messages(r)) for r in requests] == [2, 4, 6]
        assert _messages(requests[1]) == [
            {"role": "system", "content": "You are a programmer."},
            {"role": "user", "content": "Fix the bug."},
            {"role": "assistant", "content": "List files.\n\n```\nls\n```"},
            {"role": "user", "content": "OBSERVATION:\na.py",
             "cache_control": {"type": "ephemeral"}},
        ]

    def test_cache_control_move_makes_history_non_append_only(self) -> None:
        requests, _ = read_requests(SWE / "query_steps.traj")
        assert _extends(requests[1], requests[0])
        assert not _extends(requests[2], requests[1])

    def test_run_fields_from_replay_config_json_string(self) -> None:
        requests, _ = read_requests(SWE / "query_steps.traj")
        r = requests[0]
        assert r.model == "claude-sonnet-4-20250514"
        assert r.session_key.startswith("swe-agent:demo__repo-1:")
        assert r.session_key_source == "swe-agent.file"
        assert (r.endpoint, r.client, r.timestamp) == ("openai-chat", "swe-agent", None)
        assert r.metadata["body_from"] == "swe-agent trajectory[].query"
        assert r.output == {"role": "assistant", "content": "List files.\n\n```\nls\n```"}

    def test_usage_unknown_totals_in_first_request(self) -> None:
        requests, _ = read_requests(SWE / "query_steps.traj")
        assert all(not r.usage.reported for r in requests)
        assert requests[0].metadata["model_stats"]["api_calls"] == 3
        assert "model_stats" not in requests[1].metadata


class TestSweAgentHistoryRebuild:
    def test_demonstration_is_sent_and_bookkeeping_dropped(self) -> None:
        requests, _ = read_requests(SWE / "demonstration_history.traj")
        assert len(requests) == 2
        first = _messages(requests[0])
        assert [m["role"] for m in first] == ["system", "user", "user"]
        assert first[1]["content"].startswith("Here is a demonstration")
        assert all(set(m) == {"role", "content"} for m in first)
        assert [len(_messages(r)) for r in requests] == [3, 5]
        assert _extends(requests[1], requests[0])
        assert [r.source_line for r in requests] == [4, 6]

    def test_last_n_observations_elides_old_outputs(self) -> None:
        requests, _ = read_requests(SWE / "function_calling_elided.traj")
        assert len(requests) == 4
        tool_contents = [[m["content"] for m in _messages(r) if m["role"] == "tool"]
                         for r in requests]
        assert tool_contents == [
            [],
            ["1\nline two"],
            ["Old environment output: (2 lines omitted)", "2"],
            ["Old environment output: (2 lines omitted)",
             "Old environment output: (1 lines omitted)", "3"],
        ]
        assert _extends(requests[1], requests[0])
        assert not _extends(requests[2], requests[1])

    def test_tool_messages_and_system_to_user(self) -> None:
        requests, _ = read_requests(SWE / "function_calling_elided.traj")
        msgs = _messages(requests[1])
        # convert_system_to_user is set in the model config
        assert msgs[0] == {"role": "user", "content": "You are a programmer."}
        assert msgs[2]["tool_calls"][0]["id"] == "call_1"
        assert msgs[3] == {"role": "tool", "content": "1\nline two", "tool_call_id": "call_1"}

    def test_function_calling_tools_reported_missing(self) -> None:
        requests, _ = read_requests(SWE / "function_calling_elided.traj")
        assert "tools" not in requests[0].body
        assert requests[0].metadata["tools_missing"] == (
            "function-calling tool schemas are not in the trajectory"
            " (tool bundles: tools/registry)")

    def test_retry_attempts_are_separate_sessions(self) -> None:
        requests, skips = read_requests(SWE / "retry_attempts.traj")
        assert [s.line for s in skips] == [2]
        assert skips[0].reason == "attempt 2 is not an object"
        assert len(requests) == 2
        keys = [r.session_key for r in requests]
        assert keys[0].startswith("swe-agent:retry_attempts:attempt-1:")
        assert keys[1].startswith("swe-agent:retry_attempts:attempt-3:")
        assert len({r.id for r in requests}) == 2

    def test_not_an_object_document_is_a_skip(self, tmp_path: Path) -> None:
        path = tmp_path / "list.traj"
        path.write_text('[{"role": "user", "content": "x"}]')
        requests, skips = read_requests(path, fmt="swe-agent")
        assert requests == []
        assert [s.reason for s in skips] == [
            "not a SWE-agent trajectory: the file is not one JSON object"]


class TestSweAgentRealFiles:
    @pytest.mark.parametrize(("prefix", "count"), [
        ("ctf__web", 21), ("function_calling_simple", 5), ("gpt4__swe-agent__test-repo", 5),
        ("gpt4__swe-bench-dev-easy", 12),
        ("replay__marshmallow-code__marshmallow-1867__default", 14),
        ("replay__marshmallow-code__marshmallow-1867__function_calling_replace__", 11),
        ("replay__marshmallow-code__marshmallow-1867__function_calling_replace_from", 13),
    ])
    def test_one_request_per_model_call(self, real: Path, prefix: str, count: int) -> None:
        [path] = sorted((real / "swe-agent").glob(prefix + "*.traj"))
        requests, skips = read_requests(path)
        assert (len(requests), skips) == (count, [])
        assert {r.source_format for r in requests} == {"swe-agent"}

    def test_from_source_steps_hold_next_request(self, real: Path) -> None:
        requests, _ = read_requests(real / "swe-agent" / FROM_SOURCE)
        assert [len(_messages(r)) for r in requests] == list(range(2, 27, 2))
        assert requests[0].model == "replay"
        assert requests[0].metadata["body_from"] == (
            "swe-agent trajectory[].messages (step k holds call k+1's request)")

    def test_from_source_diverges_in_the_middle_from_step_5(self, real: Path) -> None:
        requests, _ = read_requests(real / "swe-agent" / FROM_SOURCE)
        extends = [_extends(requests[k + 1], requests[k]) for k in range(len(requests) - 1)]
        assert extends[:5] == [True] * 5
        assert extends[5:] == [False] * 7
        # the change is an old tool output replaced by the elision note, not the tail
        assert _messages(requests[6])[3]["content"] == "Old environment output: (7 lines omitted)"
        assert _messages(requests[5])[3]["content"].startswith("AUTHORS.rst")

    def test_history_rebuild_reproduces_logged_step_messages(self, real: Path) -> None:
        """last_n_observations applied to `history` gives exactly what the steps logged."""
        import json
        doc = json.loads((real / "swe-agent" / FROM_SOURCE).read_text())
        logged, _ = read_requests(real / "swe-agent" / FROM_SOURCE)
        del doc["trajectory"]
        rebuilt_path = Path("history_only.traj")
        rebuilt_path.write_text(json.dumps(doc))
        rebuilt, _ = read_requests(rebuilt_path)
        assert [_messages(r) for r in rebuilt] == [_messages(r) for r in logged]

    def test_same_instance_in_two_files_gets_two_sessions(self, real: Path) -> None:
        keys = set()
        for path in (real / "swe-agent").glob("replay__marshmallow*function_calling*.traj"):
            requests, _ = read_requests(path)
            keys |= {r.session_key for r in requests}
        assert len(keys) == 2
        assert all(k.startswith("swe-agent:marshmallow-code__marshmallow-1867:") for k in keys)


class TestSweAgentBadSteps:
    def test_non_object_message_in_query_is_a_skip(self, tmp_path: Path) -> None:
        path = tmp_path / "bad.traj"
        path.write_text(
            '{"trajectory": [{"action": "ls", "observation": "", "response": "r", "thought": "t",'
            ' "query": [{"role": "system", "content": "s"}, "oops"]},'
            ' {"action": "ls", "observation": "", "response": "r", "thought": "t",'
            ' "query": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]}],'
            ' "history": [], "info": {}}')
        requests, skips = read_requests(path)
        assert [(s.line, s.reason) for s in skips] == [
            (1, "call 1: a message of its request is not an object")]
        assert [r.metadata["call_index"] for r in requests] == [1]


# --- OpenHands -------------------------------------------------------------------------------

class TestOpenHandsDetection:
    def test_fixtures_detected(self) -> None:
        assert _detected(OH / "parallel_calls.json") == ["openhands"]
        assert _detected(OH / "runs_output.jsonl") == ["openhands"]

    def test_real_eval_output_with_long_first_line(self, real: Path) -> None:
        pr = probe(Source.from_path(real / "openhands" / OH_EVAL))
        assert (pr.kind, pr.first["instance_id"]) == ("jsonl", "ponylang__ponyc-4595")
        assert openhands.sniff(pr)

    @pytest.mark.parametrize("name", ["tests__runtime__trajs__basic.json",
                                      "tests__runtime__trajs__basic_gui_mode.json",
                                      "tests__unit__resolver__mock_output__output.jsonl"])
    def test_real_event_files_detected(self, real: Path, name: str) -> None:
        assert _detected(real / "openhands" / name) == ["openhands"]


class TestOpenHandsCallGrouping:
    def test_actions_of_one_response_are_one_request(self) -> None:
        requests, skips = read_requests(OH / "parallel_calls.json")
        assert skips == []
        assert [r.native_id for r in requests] == ["chatcmpl-R1", "chatcmpl-R3"]
        first = requests[0]
        assert first.metadata["actions"] == ["run", "run"]
        assert first.metadata["event_ids"] == [3, 4]
        assert first.metadata["total_calls_in_response"] == 2
        assert _counts(first.usage) == (2100, 1920, None, 40)
        assert first.timestamp == datetime(2026, 2, 10, 10, 0, 2)

    def test_system_prompt_and_tools_from_event_zero(self) -> None:
        requests, _ = read_requests(OH / "parallel_calls.json")
        body = requests[0].body
        assert body["messages"] == [{"role": "system", "content": "You are OpenHands agent."},
                                    {"role": "user", "content": "List two dirs"}]
        assert [t["function"]["name"] for t in body["tools"]] == ["execute_bash"]
        assert requests[0].metadata["openhands_version"] == "0.40.0"

    def test_tool_results_follow_their_call_in_call_order(self) -> None:
        requests, _ = read_requests(OH / "parallel_calls.json")
        msgs = _messages(requests[1])
        assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "tool", "user"]
        assert msgs[2]["tool_calls"] == [
            {"function": {"arguments": '{"command": "ls a"}', "name": "execute_bash"},
             "id": "call_a", "type": "function"},
            {"function": {"arguments": '{"command": "ls b"}', "name": "execute_bash"},
             "id": "call_b", "type": "function"}]
        assert [m["tool_call_id"] for m in msgs[3:5]] == ["call_a", "call_b"]
        assert msgs[3]["content"] == ("a.txt\n[The command completed with exit code 0.]\n"
                                      "[Current working directory: /workspace]\n"
                                      "[Command finished with exit code 0]")
        assert msgs[5]["content"] == (
            "Parameter 'command' is expected to be one of ['view', 'create']."
            "\n[Error occurred in processing last action]")
        assert _extends(requests[1], requests[0])

    def test_plain_agent_message_is_a_call_and_output_truncated(self) -> None:
        requests, skips = read_requests(OH / "runs_output.jsonl")
        assert [r.native_id for r in requests] == ["msg-A", None]
        second = requests[1]
        assert not second.usage.reported
        assert second.metadata["actions"] == ["message"]
        tool = _messages(second)[3]
        assert tool["content"] == (
            "0123456789\n[... Observation truncated due to length ...]\nit code 1]")
        assert [r.model for r in requests] == ["litellm_proxy/claude-sonnet-4"] * 2
        assert requests[0].metadata["response_model"] == "claude-sonnet-4-20250514"
        assert _counts(requests[0].usage) == (5000, 0, 4990, 30)
        assert requests[0].session_key.startswith("openhands:demo__repo-7:")
        assert requests[0].session_key_source == "openhands.instance_id"

    def test_bad_lines_are_skips(self) -> None:
        _, skips = read_requests(OH / "runs_output.jsonl")
        assert [s.line for s in skips] == [2, 3]
        assert skips[0].reason.startswith("invalid JSON")
        assert skips[1].reason == "line has no `history` event list"


class TestOpenHandsRealFiles:
    def test_eval_runs_have_23_33_49_calls(self, real: Path) -> None:
        requests, skips = read_requests(real / "openhands" / OH_EVAL)
        assert skips == []
        by_instance: dict[str, list] = {}
        for r in requests:
            by_instance.setdefault(r.metadata["instance_id"], []).append(r)
        assert {k: len(v) for k, v in by_instance.items()} == {
            "ponylang__ponyc-4595": 23, "ponylang__ponyc-4593": 33, "ponylang__ponyc-4588": 49}

    def test_eval_runs_are_append_only(self, real: Path) -> None:
        requests, _ = read_requests(real / "openhands" / OH_EVAL)
        by_session: dict[str, list] = {}
        for r in requests:
            by_session.setdefault(r.session_key, []).append(r)
        assert len(by_session) == 3
        for runs in by_session.values():
            assert all(_extends(runs[i + 1], runs[i]) for i in range(len(runs) - 1))

    def test_eval_first_request_and_usage(self, real: Path) -> None:
        requests, _ = read_requests(real / "openhands" / OH_EVAL)
        first = requests[0]
        msgs = _messages(first)
        assert [m["role"] for m in msgs] == ["system", "user", "user"]
        assert "Today's date is 2025-04-30 (UTC)." in msgs[2]["content"]
        assert len(first.body["tools"]) == 4
        assert first.native_id == "gen-1746001974-alxKxkQSJ8j9QsfNTvnX"
        assert _counts(first.usage) == (5920, None, None, 128)
        assert first.model == "openai/openrouter-llama-4-maverick"
        assert first.timestamp == datetime(2025, 4, 30, 8, 32, 54)
        assert first.source_line == 1

    def test_usage_matches_run_metrics_per_response(self, real: Path) -> None:
        import json
        line = json.loads((real / "openhands" / OH_EVAL).read_text().splitlines()[0])
        expected = {u["response_id"]: u["prompt_tokens"] for u in line["metrics"]["token_usages"]}
        requests, _ = read_requests(real / "openhands" / OH_EVAL)
        got = {r.native_id: r.usage.prompt_tokens for r in requests
               if r.metadata["instance_id"] == "ponylang__ponyc-4595"}
        assert got == expected

    @pytest.mark.parametrize(("name", "count"), [
        ("tests__runtime__trajs__basic.json", 2), ("tests__runtime__trajs__basic_gui_mode.json", 5),
        ("tests__runtime__trajs__basic_interactions.json", 3),
        ("tests__runtime__trajs__wrong_initial_state.json", 4),
    ])
    def test_event_lists(self, real: Path, name: str, count: int) -> None:
        requests, skips = read_requests(real / "openhands" / name)
        assert (len(requests), skips) == (count, [])
        assert requests[0].metadata["system_missing"].startswith("no system event")
        assert all(_extends(requests[i + 1], requests[i]) for i in range(count - 1))

    def test_anthropic_cache_counts_through_litellm(self, real: Path) -> None:
        requests, _ = read_requests(real / "openhands" / "tests__runtime__trajs__basic.json")
        assert _counts(requests[1].usage) == (4646, 3482, 1158, 177)

    def test_legacy_resolver_histories(self, real: Path) -> None:
        name = "tests__unit__resolver__mock_output__output.jsonl"
        requests, skips = read_requests(real / "openhands" / name)
        assert skips == []
        counts: dict[str, int] = {}
        for r in requests:
            run = r.session_key.rsplit(":", 1)[0]
            counts[run] = counts.get(run, 0) + 1
        assert counts == {"openhands:neubig/pr-viewer#5": 4, "openhands:neubig/pr-viewer#1": 22}
        first = requests[0]
        assert first.metadata["cost"] == 0.015396
        assert _messages(requests[1])[1]["content"].endswith(
            "\n<execute_bash>\ntouch LICENSE\n</execute_bash>")
        assert _messages(requests[1])[2]["content"].startswith("OBSERVATION:\n")


# --- mini-swe-agent --------------------------------------------------------------------------

class TestMiniSweAgentDetection:
    def test_fixtures_detected(self) -> None:
        assert _detected(MINI / "v1_usage.traj.json") == ["mini-swe-agent"]
        assert _detected(MINI / "v2_tool_calls.traj.json") == ["mini-swe-agent"]

    def test_list_with_foreign_keys_not_claimed(self) -> None:
        assert not mini_swe_agent.sniff(probe(Source.from_path(MINI / "not_messages.json")))

    def test_swe_agent_history_not_claimed(self) -> None:
        assert not mini_swe_agent.sniff(probe(Source.from_path(SWE / "demonstration_history.traj")))


class TestMiniSweAgentRequests:
    def test_request_is_every_message_before_the_reply_without_extra(self) -> None:
        requests, skips = read_requests(MINI / "v1_usage.traj.json")
        assert skips == []
        assert [len(_messages(r)) for r in requests] == [2, 4]
        assert _messages(requests[1])[2] == {"role": "assistant",
                                             "content": "THOUGHT: look.\n\n```bash\nls\n```"}
        assert _extends(requests[1], requests[0])

    def test_usage_from_response_dump(self) -> None:
        requests, _ = read_requests(MINI / "v1_usage.traj.json")
        assert [_counts(r.usage) for r in requests] == [(1200, 0, 1195, 15), (1260, 1195, 60, 20)]
        assert [r.native_id for r in requests] == ["chatcmpl-m1", "chatcmpl-m2"]
        assert requests[0].model == "anthropic/claude-sonnet-4-5-20250929"
        assert requests[0].metadata["model_stats"] == {"instance_cost": 0.0042, "api_calls": 2}

    def test_tool_calls_kept_exit_dropped_timestamp_from_extra(self) -> None:
        requests, _ = read_requests(MINI / "v2_tool_calls.traj.json")
        assert len(requests) == 2
        last = _messages(requests[1])
        assert [m["role"] for m in last] == ["system", "user", "assistant", "tool"]
        assert last[2]["tool_calls"][0]["id"] == "call_1" and "extra" not in last[2]
        assert last[3] == {"role": "tool", "tool_call_id": "call_1", "content": "a.py"}
        assert requests[0].timestamp == datetime(2025, 10, 9, 8, 55, 2, 250000)
        assert _counts(requests[0].usage) == (800, 768, None, 9)
        assert not requests[1].usage.reported
        assert requests[0].metadata["tools_missing"]
        assert requests[0].model == "openai/gpt-5-mini"

    def test_session_per_file(self) -> None:
        requests, _ = read_requests(MINI / "v1_usage.traj.json")
        assert {r.session_key_source for r in requests} == {"mini-swe-agent.file"}
        assert len({r.session_key for r in requests}) == 1
        assert requests[0].session_key.startswith("mini-swe-agent:v1_usage:")

    def test_non_message_entry_is_a_skip(self, tmp_path: Path) -> None:
        path = tmp_path / "broken.traj.json"
        path.write_text('{"trajectory_format": "mini-swe-agent-1", "info": {}, "messages": '
                        '[{"role": "system", "content": "s"}, 7, '
                        '{"role": "assistant", "content": "a"}]}')
        requests, skips = read_requests(path)
        assert [(s.line, s.reason) for s in skips] == [(2, "message 2 is not a role message")]
        assert [len(_messages(r)) for r in requests] == [1]


def test_a_batch_runs_preds_json_is_passed_over_not_an_unrecognized_file(tmp_path: Path) -> None:
    # mini-swe-agent's batch run writes `preds.json` (each instance's patch) beside the
    # instances' folders; a real DeepSeek run's folder warned "not a recognized log format"
    run = tmp_path / "run"
    (run / "i1").mkdir(parents=True)
    shutil.copy(MINI / "v1_usage.traj.json", run / "i1" / "i1.traj.json")
    (run / "preds.json").write_text('{"i1": {"instance_id": "i1", "model_patch": ""}}')
    result = ingest_paths([str(run)], Store.open(":memory:"))
    assert (result.ingested, result.skipped, result.unrecognized) == (2, 0, ())
    assert result.ignored == (str(run / "preds.json"),)
    # without trajectories beside it, a preds.json is a file like any other: reported
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "preds.json").write_text('{"i1": {"instance_id": "i1", "model_patch": ""}}')
    assert not mini_swe_agent.is_companion(alone / "preds.json")
    assert ingest_paths([str(alone)], Store.open(":memory:")).unrecognized != ()


class TestMiniSweAgentRealFiles:
    @pytest.mark.parametrize(("name", "count"), [("github_issue.traj.json", 10),
                                                 ("local.traj.json", 2)])
    def test_one_request_per_assistant_message(self, real: Path, name: str, count: int) -> None:
        requests, skips = read_requests(real / "mini-swe-agent" / name)
        assert (len(requests), skips) == (count, [])
        assert [len(_messages(r)) for r in requests] == list(range(2, 2 * count + 1, 2))
        assert all(_extends(requests[i + 1], requests[i]) for i in range(count - 1))
        assert all(not r.usage.reported for r in requests)



def test_an_openhands_run_with_and_without_response_times_keeps_its_order(real):
    """tests__runtime__trajs__basic_gui_mode.json: some calls carry the response's UTC
    `created`, one only its event's local time; one clock per run keeps the calls in
    their event order, so every consecutive pair is append-only."""
    from typer.testing import CliRunner

    from prefixscope.cli.main import app

    path = real / "openhands" / "tests__runtime__trajs__basic_gui_mode.json"
    result = CliRunner().invoke(app, ["diff", "--all", str(path), "--json"])
    assert result.exit_code == 0, result.output
    pairs = json.loads(result.stdout)["pairs"]
    assert pairs and {p["cause"] for p in pairs} == {"append-only"}
