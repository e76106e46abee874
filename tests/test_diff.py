"""diff: divergence arithmetic, every cause on hand-built pairs, and real trajectories."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from factories import anthropic_body, conversation, make_request
from typer.testing import CliRunner

from prefixscope.analyses.diff import (
    diff_requests,
    first_divergence_index,
    lost_tokens,
    reusable_tokens,
)
from prefixscope.cli.main import app
from prefixscope.prompt import RenderOptions, render
from prefixscope.tokenizers import load_tokenizer

runner = CliRunner()
QWEN = RenderOptions(tokenizer="qwen3.6")
A2O = RenderOptions(gateway="anthropic-to-openai")


def ids(*xs: int) -> np.ndarray:
    return np.array(xs, dtype=np.uint32)


class TestDivergenceArithmetic:
    """Token-list scenarios in the style of vLLM's prefix-caching tests."""

    def test_append_only_has_no_divergence_and_loses_nothing(self):
        a, b = ids(*range(10)), ids(*range(12))
        assert first_divergence_index(a, b) is None
        assert reusable_tokens(len(a), len(b), 4) == 8
        assert lost_tokens(len(a), len(b), 8, 4) == 0

    def test_divergence_inside_second_block(self):
        a = ids(*range(20))
        b = ids(*range(5), 99, *range(6, 24))
        assert first_divergence_index(a, b) == 5
        assert reusable_tokens(5, len(b), 4) == 4
        assert lost_tokens(len(a), len(b), 4, 4) == 16

    def test_identical_prompt_recomputes_last_token(self):
        a = ids(*range(16))
        assert first_divergence_index(a, a) is None
        # the last prompt token is never reused, so a 16-token prompt keeps no full block
        assert reusable_tokens(16, 16, 16) == 0
        assert lost_tokens(16, 16, 0, 16) == 0

    def test_shorter_b_diverges_at_its_end(self):
        a, b = ids(*range(10)), ids(*range(6))
        assert first_divergence_index(a, b) == 6
        assert reusable_tokens(6, 6, 4) == 4
        assert lost_tokens(10, 6, 4, 4) == 0

    def test_divergence_at_token_zero(self):
        assert first_divergence_index(ids(1, 2, 3), ids(4, 2, 3)) == 0
        assert reusable_tokens(0, 3, 1) == 0


def naive_divergence(a, b, options) -> int | None:
    """Oracle: tokenize both rendered prompts whole and compare in a Python loop."""
    tok = load_tokenizer(options.tokenizer)
    ta = list(tok.encode(render(a, options).text).ids)
    tb = list(tok.encode(render(b, options).text).ids)
    for i, (x, y) in enumerate(zip(ta, tb, strict=False)):
        if x != y:
            return i
    return None if len(ta) <= len(tb) else len(tb)


def check(a_body, b_body, options=QWEN, endpoint="anthropic-messages", **kw):
    a = make_request("a", body=a_body, endpoint=endpoint, **kw)
    b = make_request("b", body=b_body, endpoint=endpoint, minutes=1, **kw)
    pair = diff_requests(a, b, options, block_size=16)
    expected = naive_divergence(a, b, options)
    got = pair.first_divergence.token if pair.first_divergence else None
    assert got == expected
    return pair


def openai_body(messages, tools=None, system="You are a careful agent."):
    body = {"model": "m", "messages": [{"role": "system", "content": system}] + messages}
    if tools is not None:
        body["tools"] = tools
    return body


OAI_TOOLS = [
    {"type": "function", "function": {"name": "read", "description": "Read a file.",
                                      "parameters": {"type": "object", "properties": {
                                          "path": {"type": "string"},
                                          "content": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "bash", "description": "Run a command.",
                                      "parameters": {"type": "object", "properties": {
                                          "command": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "grep", "description": "Search.",
                                      "parameters": {"type": "object", "properties": {
                                          "pattern": {"type": "string"}}}}},
]


class TestCauses:
    def test_identical(self):
        body = openai_body(conversation(2), OAI_TOOLS)
        pair = check(body, copy.deepcopy(body), endpoint="openai-chat")
        assert (pair.cause, pair.lost_tokens) == ("identical", 0)

    def test_append_only(self):
        pair = check(openai_body(conversation(2), OAI_TOOLS),
                     openai_body(conversation(3), OAI_TOOLS), endpoint="openai-chat")
        assert pair.cause == "append-only" and pair.first_divergence is None
        assert pair.lost_tokens == 0

    def test_json_key_order_in_tool_schema(self):
        shuffled = copy.deepcopy(OAI_TOOLS)
        props = shuffled[0]["function"]["parameters"]["properties"]
        shuffled[0]["function"]["parameters"]["properties"] = {
            "content": props["content"], "path": props["path"]}
        pair = check(openai_body(conversation(2), OAI_TOOLS),
                     openai_body(conversation(3), shuffled), endpoint="openai-chat")
        assert pair.cause == "json-key-order"
        assert pair.first_divergence.segment.startswith("tools[0].function.parameters")
        assert "[path, content] → [content, path]" in pair.detail
        assert pair.lost_tokens > 0

    def test_json_key_order_in_an_old_message(self):
        # design §4: json-key-order comes before history-rewrite for any segment
        def turn(tool_input):
            return [{"role": "user", "content": "write it"},
                    {"role": "assistant", "content": [
                        {"type": "tool_use", "id": "t1", "name": "Write", "input": tool_input}]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}]
        later = turn({"content": "x", "path": "/a"}) + [
            {"role": "assistant", "content": "done"}, {"role": "user", "content": "next"}]
        pair = check(anthropic_body(turn({"path": "/a", "content": "x"})),
                     anthropic_body(later))
        assert pair.cause == "json-key-order"
        assert pair.first_divergence.segment == "messages[1].content[0].input"
        assert pair.detail == "messages[1].content[0].input keys [path, content] → [content, path]"
        assert pair.lost_tokens > 0

    def test_tool_order(self):
        swapped = [OAI_TOOLS[1], OAI_TOOLS[0], OAI_TOOLS[2]]
        pair = check(openai_body(conversation(2), OAI_TOOLS),
                     openai_body(conversation(3), swapped), endpoint="openai-chat")
        assert pair.cause == "tool-order"
        assert pair.first_divergence.segment.startswith("tools[0]")
        assert pair.detail == "tool order [read, bash, grep] → [bash, read, grep]"

    def test_tool_set(self):
        extra = {"type": "function", "function": {"name": "edit", "description": "Edit.",
                                                  "parameters": {"type": "object"}}}
        pair = check(openai_body(conversation(2), OAI_TOOLS),
                     openai_body(conversation(3), [OAI_TOOLS[0], extra, *OAI_TOOLS[1:]]),
                     endpoint="openai-chat")
        assert pair.cause == "tool-set" and pair.detail == "tools +edit"
        assert pair.first_divergence.segment.startswith("tools[1]")

    def test_tool_set_with_a_duplicated_definition(self):
        pair = check(openai_body(conversation(2), OAI_TOOLS[:2]),
                     openai_body(conversation(3), [*OAI_TOOLS[:2], OAI_TOOLS[1]]),
                     endpoint="openai-chat")
        assert pair.cause == "tool-set" and pair.detail == "tools +bash"
        assert pair.first_divergence.segment.startswith("tools[2]")

    def test_volatile_billing_header_behind_anthropic_to_openai(self):
        pair = check(anthropic_body(conversation(2), cch="8c7f0"),
                     anthropic_body(conversation(3), cch="7ee55"), options=A2O)
        assert pair.cause == "volatile-value"
        assert pair.first_divergence.segment == "system[0]"
        assert pair.detail == "system[0]: cch=8c7f0 → cch=7ee55"

    def test_billing_header_stripped_is_append_only(self):
        options = RenderOptions(gateway="anthropic-to-openai", what_if=("strip-billing-header",))
        pair = check(anthropic_body(conversation(2), cch="8c7f0"),
                     anthropic_body(conversation(3), cch="7ee55"), options=options)
        assert pair.cause == "append-only" and pair.lost_tokens == 0

    def test_compaction(self):
        summary = [{"role": "user", "content": "Summary: we fixed the parser."}]
        pair = check(openai_body(conversation(4), OAI_TOOLS), openai_body(summary, OAI_TOOLS),
                     endpoint="openai-chat")
        assert pair.cause == "compaction"
        assert pair.first_divergence.segment.startswith("messages[1]")
        assert pair.detail.startswith("history of 7 messages replaced by 1")

    def test_history_rewrite_of_old_tool_output(self):
        def body(output):
            return openai_body([
                {"role": "user", "content": "fix it"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": output},
                {"role": "user", "content": "next"}], OAI_TOOLS)
        a = body("a.py\nb.py\nc.py\n" * 20)
        b = body("Old environment output: (60 lines omitted)")
        b["messages"] += [{"role": "assistant", "content": "ok"},
                          {"role": "user", "content": "go"}]
        pair = check(a, b, endpoint="openai-chat")
        assert pair.cause == "history-rewrite"
        assert pair.first_divergence.segment.startswith("messages[3]")
        assert pair.detail == ("messages[3] tool output replaced by "
                               "'Old environment output: (60 lines omitted)'")

    def test_template_divergence_when_reasoning_is_dropped(self):
        turn = [{"role": "user", "content": "look"},
                {"role": "assistant", "content": "", "reasoning": "I should grep.",
                 "tool_calls": [{"id": "c1", "type": "function",
                                 "function": {"name": "grep",
                                              "arguments": "{\"pattern\": \"x\"}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "x found"}]
        later = turn + [{"role": "assistant", "content": "Found it."},
                        {"role": "user", "content": "thanks"}]
        pair = check(openai_body(turn, OAI_TOOLS), openai_body(later, OAI_TOOLS),
                     endpoint="openai-chat")
        assert pair.cause == "template-divergence"

    def test_whitespace(self):
        pair = check(openai_body(conversation(2), OAI_TOOLS, system="Be careful.  Be brief."),
                     openai_body(conversation(3), OAI_TOOLS, system="Be careful. Be brief."),
                     endpoint="openai-chat")
        assert pair.cause == "whitespace"
        assert pair.first_divergence.segment.startswith("messages[0]")

    def test_content_change(self):
        pair = check(openai_body(conversation(2), OAI_TOOLS, system="Be careful."),
                     openai_body(conversation(3), OAI_TOOLS, system="Be reckless."),
                     endpoint="openai-chat")
        assert pair.cause == "content-change"


class TestCli:
    def test_two_files_json_shape(self, tmp_path):
        a = tmp_path / "a.json"
        b = tmp_path / "b.json"
        a.write_text(json.dumps(anthropic_body(conversation(2), cch="8c7f0")))
        b.write_text(json.dumps(anthropic_body(conversation(3), cch="7ee55")))
        result = runner.invoke(app, ["diff", str(a), str(b), "--gateway", "anthropic-to-openai",
                                     "--json", "--block-size", "64"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        out = json.loads(result.stdout)
        assert set(out) >= {"pairs", "totals"}
        pair = out["pairs"][0]
        assert set(pair) >= {"a", "b", "session", "tokens_a", "tokens_b", "first_divergence",
                             "block_size", "reusable_tokens", "lost_tokens", "cause", "detail"}
        assert set(pair["first_divergence"]) >= {"token", "char_a", "char_b", "segment",
                                                 "text_a", "text_b"}
        assert pair["cause"] == "volatile-value" and pair["block_size"] == 64
        assert out["totals"]["by_cause"] == {
            "volatile-value": {"pairs": 1, "lost_tokens": pair["lost_tokens"]}}
        human = runner.invoke(app, ["diff", str(a), str(b), "--gateway", "anthropic-to-openai"])
        assert "system[0]" in human.stdout and "volatile-value" in human.stdout

    def test_needs_two_requests(self):
        result = runner.invoke(app, ["diff", "only-one"])
        assert result.exit_code == 2

    def test_unknown_request_is_one_line(self, tmp_path):
        runner.invoke(app, ["ingest", str(tmp_path), "--store", "s.duckdb"])
        result = runner.invoke(app, ["diff", "nope1", "nope2", "--store", "s.duckdb"])
        assert result.exit_code == 1 and "Traceback" not in result.output


@pytest.mark.slow
class TestRealTrajectories:
    def test_swe_agent_replay_rewrites_history_from_elision(self, real):
        traj = next((real / "swe-agent").glob(
            "replay__*function_calling_replace_from_source*.traj"))
        result = runner.invoke(app, ["diff", "--all", str(traj), "--json"],
                               catch_exceptions=False)
        assert result.exit_code == 0, result.output
        pairs = json.loads(result.stdout)["pairs"]
        causes = [p["cause"] for p in pairs]
        assert len(pairs) == 12
        # calls 0-5 extend each other; from call 6 on last_n_observations elides old outputs
        assert causes[:5] == ["append-only"] * 5
        assert causes[5:] == ["history-rewrite"] * 7
        for p in pairs[5:]:
            assert p["first_divergence"]["segment"].startswith("messages[")
            assert p["lost_tokens"] > 0

    def test_openhands_resolver_rows_thread_in_call_order(self, real):
        """Every call of an output.jsonl row shares the row's file and line and has no
        timestamp: only its position in the row orders it. The two runs hold 4 and 22 calls
        (one assistant message and one observation more each time: 1, 3, 5, ... history
        messages), so 3 + 21 pairs, every one append-only."""
        log = real / "openhands" / "tests__unit__resolver__mock_output__output.jsonl"
        assert runner.invoke(app, ["ingest", str(log), "--store", "r.duckdb"]).exit_code == 0
        result = runner.invoke(app, ["diff", "--all", "--json", "--store", "r.duckdb",
                                     "--tokenizer", "deepseek-v4"], catch_exceptions=False)
        out = json.loads(result.stdout)
        assert out["totals"]["by_cause"] == {"append-only": {"pairs": 24, "lost_tokens": 0}}
        rows = json.loads(runner.invoke(app, [
            "sql", "select session, list(message_count order by turn) counts, "
                   "list(link order by turn) links from turns group by 1 order by 1",
            "--store", "r.duckdb", "--json"]).stdout)
        assert sorted(r["counts"] for r in rows) == [
            list(range(1, 8, 2)), list(range(1, 44, 2))]
        assert {link for r in rows for link in r["links"][1:]} == {"extends"}

    def test_openhands_runs_are_append_only(self, real):
        log = real / "openhands" / "evaluation__benchmarks__multi_swe_bench__examples__output.jsonl"
        result = runner.invoke(app, ["diff", "--all", str(log), "--json"],
                               catch_exceptions=False)
        out = json.loads(result.stdout)
        assert out["totals"]["pairs"] == 22 + 32 + 48
        assert out["totals"]["by_cause"] == {
            "append-only": {"pairs": 102, "lost_tokens": 0}}


@pytest.mark.parametrize("what_if,cause", [((), "volatile-value"),
                                           (("strip-billing-header",), "append-only")])
def test_claude_code_capture_behind_gateway(what_if, cause):
    from conftest import FIXTURES

    args = ["diff", "--all", str(FIXTURES / "raw" / "claude_code_capture.jsonl"),
            "--gateway", "anthropic-to-openai", "--json"]
    for w in what_if:
        args += ["--what-if", w]
    out = json.loads(runner.invoke(app, args, catch_exceptions=False).stdout)
    assert {p["cause"] for p in out["pairs"]} == {cause}
    if cause == "volatile-value":
        assert {p["first_divergence"]["segment"] for p in out["pairs"]} == {"system[0]"}


class TestVolatileValue:

    @staticmethod
    def vc(a: str, b: str):
        from prefixscope.analyses.causes import volatile_change

        start = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
        return volatile_change(a, b, start, len(a), len(b))

    def test_billing_nonce_is_reported_with_its_key(self):
        assert self.vc("cc_entrypoint=cli; cch=8c7f0;You are", "cc_entrypoint=cli; cch=7ee55;You "
                       "are") == ("cch=8c7f0", "cch=7ee55")

    def test_timestamp_uuid_and_counter_are_volatile(self):
        assert self.vc("at 2026-08-01T10:00:00Z ok", "at 2026-08-02T11:30:00Z ok") == \
            ("2026-08-01T10:00:00Z", "2026-08-02T11:30:00Z")
        assert self.vc("id 123e4567-e89b-12d3-a456-426614174000 x",
                       "id 9b2e4567-e89b-12d3-a456-426614174000 x")[1].startswith("9b2e")
        assert self.vc("step 41 of", "step 42 of") == ("41", "42")

    def test_hex_nonce_without_a_digit_on_one_side(self):
        assert self.vc("cch=defdb;You", "cch=0b7e2;You") == ("cch=defdb", "cch=0b7e2")

    def test_words_are_not_volatile(self):
        assert self.vc("the cat sat", "the dog sat") is None
        assert self.vc("Be careful.", "Be reckless.") is None

    def test_long_changes_are_not_volatile(self):
        assert self.vc("x=" + "a1" * 40 + ";", "x=" + "b2" * 40 + ";") is None


class TestKeyOrder:
    def test_first_reordered_object_is_named(self):
        from prefixscope.analyses.causes import key_order_change

        a = {"type": "object", "properties": {"path": 1, "content": 2}}
        b = {"type": "object", "properties": {"content": 2, "path": 1}}
        assert key_order_change(a, b, "tools[3].input_schema") == \
            "tools[3].input_schema.properties keys [path, content] → [content, path]"

    def test_equal_order_names_nothing(self):
        from prefixscope.analyses.causes import key_order_change

        assert key_order_change({"a": [{"b": 1}]}, {"a": [{"b": 1}]}, "x") is None


class TestDivergenceProperties:
    from hypothesis import given
    from hypothesis import strategies as st

    @given(st.lists(st.integers(0, 5), max_size=40), st.lists(st.integers(0, 5), max_size=40))
    def test_matches_a_python_loop(self, xs, ys):
        a, b = ids(*xs), ids(*ys)
        naive = next((i for i, (x, y) in enumerate(zip(xs, ys, strict=False)) if x != y), None)
        if naive is None and len(xs) > len(ys):
            naive = len(ys)
        assert first_divergence_index(a, b) == naive

    @given(st.lists(st.integers(0, 5), min_size=1, max_size=40), st.sampled_from([1, 4, 16]))
    def test_a_prompt_never_diverges_from_itself_or_its_extension(self, xs, bs):
        a = ids(*xs)
        assert first_divergence_index(a, a) is None
        assert first_divergence_index(a, ids(*xs, 7)) is None
        assert lost_tokens(len(a), len(a) + 1, reusable_tokens(len(a), len(a) + 1, bs), bs) == 0


def test_a_pair_that_got_less_cache_than_its_intact_prefix_shows_a_shortfall():
    from prefixscope.analyses.diff import diff_requests
    from prefixscope.model import Usage

    first = {"messages": [{"role": "system", "content": "You are terse. " * 40},
                          {"role": "user", "content": "hello"}]}
    second = {"messages": [*first["messages"], {"role": "assistant", "content": "hi"},
                           {"role": "user", "content": "more"}]}
    kw = {"endpoint": "openai-chat", "model": "deepseek-chat"}
    a = make_request("a", body=first, **kw)
    b = make_request("b", body=second, minutes=1, usage=Usage(prompt_tokens=200,
                                                               cached_tokens=0), **kw)
    pair = diff_requests(a, b, RenderOptions(), block_size=16)
    assert pair.cause == "append-only" and pair.reusable_tokens > 0
    # The log got nothing of an intact prefix: the whole reusable part is missing.
    assert (pair.observed_cached, pair.shortfall) == (0, pair.reusable_tokens)
    no_usage = diff_requests(a, make_request("c", body=second, minutes=1, **kw),
                             RenderOptions(), block_size=16)
    assert no_usage.shortfall is None
