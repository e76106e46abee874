"""Rendering: exact text, a segment map covering every character once, profiles and what-ifs."""

from __future__ import annotations

import pytest
from _render_helpers import anthropic_bodies, conversations, fixture, make_request, reference_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefixscope.prompt import RenderError, RenderOptions, render
from prefixscope.tokenizers import BUNDLED, TokenizerError

HEADER = "x-anthropic-billing-header: cc_version=2.1.37.0d9; cc_entrypoint=cli; cch=fa690;"
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_partition(prompt):
    """Segments are sorted, contiguous, non-empty and cover the text exactly."""
    pos = 0
    for seg in prompt.segments:
        assert seg.char_start == pos and seg.char_end > seg.char_start
        pos = seg.char_end
    assert pos == len(prompt.text)


def spans(prompt):
    out = {}
    for seg in prompt.segments:
        out.setdefault(seg.path, []).append(prompt.text[seg.char_start:seg.char_end])
    return out


class TestSegmentMap:
    @pytest.mark.parametrize("tokenizer", BUNDLED)
    @pytest.mark.parametrize("gateway", ["auto", "hoist-system-messages"])
    @FAST
    @given(body=conversations())
    def test_openai_render_equals_transformers_and_is_partitioned(self, tokenizer, gateway, body):
        request = make_request(body, endpoint="openai-chat")
        options = RenderOptions(gateway=gateway, tokenizer=tokenizer)
        prompt = render(request, options)
        assert prompt.text == reference_text(request, options)
        assert_partition(prompt)
        assert prompt.attribution in ("exact", "none")

    @pytest.mark.parametrize("tokenizer", BUNDLED)
    @pytest.mark.parametrize("gateway", ["auto", "anthropic-to-openai"])
    @FAST
    @given(body=anthropic_bodies())
    def test_anthropic_render_equals_transformers_and_is_partitioned(self, tokenizer, gateway,
                                                                     body):
        request = make_request(body, endpoint="anthropic-messages")
        options = RenderOptions(gateway=gateway, tokenizer=tokenizer,
                                what_if=("strip-billing-header",))
        prompt = render(request, options)
        assert prompt.text == reference_text(request, options)
        assert_partition(prompt)
        assert prompt.approximate == (gateway == "auto")

    def test_openai_paths_and_kinds(self):
        prompt = render(make_request(fixture("openai_chat.json")),
                        RenderOptions(tokenizer="qwen2.5"))
        got = spans(prompt)
        kinds = {s.path: s.kind for s in prompt.segments}
        assert got["messages[0]"] == ["You are a coding agent."]
        assert got["messages[5].content[0]"] == ["Continue."]
        assert got["messages[2].tool_calls[0].function.arguments"] == \
            ['{"command": "ls", "cwd": "/repo"}']
        assert got["messages[3]"] == ["setup.py\nsrc/"]
        assert kinds["messages[0]"] == "system" and kinds["messages[3]"] == "tool_result"
        assert kinds["messages[2].tool_calls[0].function"] == "tool_call"
        assert kinds["template"] == "template"

    def test_every_template_glue_char_is_template(self):
        prompt = render(make_request({"messages": [{"role": "user", "content": "hi"}]}),
                        RenderOptions(tokenizer="qwen2.5"))
        assert [(s.path, prompt.text[s.char_start:s.char_end]) for s in prompt.segments] == [
            ("template", "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a "
                         "helpful assistant.<|im_end|>\n<|im_start|>user\n"),
            ("messages[0]", "hi"),
            ("template", "<|im_end|>\n<|im_start|>assistant\n")]


class TestApproximateAnthropic:
    def test_hosted_claude_renders_tools_then_system_then_messages(self):
        prompt = render(make_request(fixture("claude_code.json")))
        assert prompt.approximate and prompt.gateway == "passthrough"
        text = prompt.text
        assert text.index('{"name": "Bash"') < text.index(HEADER) < text.index("list the files")
        assert spans(prompt)["tools[1]"][0].startswith('{"name": "Read"')
        assert "thinking" not in spans(prompt).get("messages[1].content[0]", [""])[0]
        assert "I should run ls." not in text  # earlier thinking is not in Claude's prompt

    def test_converted_requests_are_exact(self):
        prompt = render(make_request(fixture("claude_code.json"), model="deepseek-v4-flash"),
                        RenderOptions(gateway="anthropic-to-openai"))
        assert not prompt.approximate


class TestGatewayResolution:
    def test_the_log_wins_over_the_flag(self):
        request = make_request(fixture("claude_code.json"), gateway="anthropic-to-openai")
        prompt = render(request, RenderOptions(gateway="passthrough"))
        assert (prompt.gateway, prompt.gateway_source) == ("anthropic-to-openai", "log")
        assert any("ignored" in n for n in prompt.notes)

    def test_flag_then_default(self):
        body = fixture("openai_chat.json")
        flagged = render(make_request(body), RenderOptions(gateway="hoist-system-messages"))
        default = render(make_request(body))
        assert (flagged.gateway, flagged.gateway_source) == ("hoist-system-messages", "flag")
        assert (default.gateway, default.gateway_source) == ("passthrough", "default")

    def test_logged_conversion_of_an_already_converted_body_renders_it_as_is(self):
        prompt = render(make_request(fixture("openai_chat.json"), gateway="anthropic-to-openai"))
        assert prompt.gateway == "passthrough" and prompt.notes

    def test_unknown_logged_gateway_is_noted(self):
        prompt = render(make_request(fixture("openai_chat.json"), gateway="gemini-to-openai"))
        assert prompt.gateway == "passthrough"
        assert any("gemini-to-openai" in n for n in prompt.notes)

    def test_bad_flags_are_errors(self):
        with pytest.raises(RenderError, match="unknown gateway profile"):
            render(make_request(fixture("openai_chat.json")), RenderOptions(gateway="nope"))
        with pytest.raises(RenderError, match="needs an anthropic-messages body"):
            render(make_request(fixture("openai_chat.json")),
                   RenderOptions(gateway="anthropic-to-openai"))

    def test_no_body_is_an_error(self):
        with pytest.raises(RenderError, match="no body"):
            render(make_request(None))

    def test_unknown_tokenizer_is_an_error(self):
        with pytest.raises(TokenizerError, match="never downloads"):
            render(make_request(fixture("openai_chat.json")),
                   RenderOptions(tokenizer="nobody/no-such-model"))


class TestWhatIfs:
    def test_strip_billing_header_drops_the_block_and_keeps_paths(self):
        prompt = render(make_request(fixture("claude_code.json")),
                        RenderOptions(gateway="anthropic-to-openai",
                                      what_if=("strip-billing-header",)))
        assert "x-anthropic-billing-header" not in prompt.text
        assert "system[0]" not in spans(prompt)
        assert spans(prompt)["system[1]"] == [
            "You are Claude Code, Anthropic's official CLI for Claude."]

    def test_strip_billing_header_cuts_the_first_line_of_a_string_system(self):
        body = {"system": HEADER + "\nYou are Claude Code.", "messages": [
            {"role": "user", "content": "hi"}]}
        prompt = render(make_request(body), RenderOptions(gateway="anthropic-to-openai",
                                                          what_if=("strip-billing-header",)))
        assert spans(prompt)["system"] == ["You are Claude Code."]

    def test_strip_billing_header_in_an_openai_system_message(self):
        body = {"messages": [{"role": "system", "content": HEADER + "Rules."},
                             {"role": "user", "content": "hi"}]}
        prompt = render(make_request(body), RenderOptions(what_if=("strip-billing-header",)))
        assert spans(prompt)["messages[0]"] == ["Rules."]

    def test_drop_regex_removes_text_from_system_content_only(self):
        body = {"messages": [{"role": "system", "content": "Time: 12:30:01. Be kind."},
                             {"role": "user", "content": "Time: 12:30:01"}]}
        prompt = render(make_request(body), RenderOptions(what_if=(r"drop:Time: [\d:]+\. ",)))
        assert spans(prompt)["messages[0]"] == ["Be kind."]
        assert spans(prompt)["messages[1]"] == ["Time: 12:30:01"]

    def test_sort_json_keys_sorts_tool_schemas(self):
        body = fixture("openai_chat.json")
        body["tools"][0]["function"]["parameters"] = {"type": "object", "required": ["command"],
                                                      "properties": {"command": {"type": "string"}}}
        prompt = render(make_request(body), RenderOptions(tokenizer="qwen3.6",
                                                          what_if=("sort-json-keys",)))
        assert '"parameters": {"properties": {"command": {"type": "string"}}, "required": ' \
               '["command"], "type": "object"}' in prompt.text

    def test_what_ifs_compose_in_order(self):
        body = {"system": [{"type": "text", "text": HEADER}, {"type": "text", "text": "A1 B2"}],
                "messages": [{"role": "user", "content": "hi"}]}
        prompt = render(make_request(body), RenderOptions(
            gateway="anthropic-to-openai", what_if=("strip-billing-header", r"drop:\d")))
        assert spans(prompt)["system[1]"] == ["A B"]

    def test_no_hoist_only_matters_under_the_hoist_profile(self):
        body = fixture("openai_chat.json")
        hoisted = render(make_request(body), RenderOptions(gateway="hoist-system-messages",
                                                           tokenizer="qwen2.5"))
        kept = render(make_request(body), RenderOptions(gateway="hoist-system-messages",
                                                        tokenizer="qwen2.5", what_if=("no-hoist",)))
        plain = render(make_request(body), RenderOptions(tokenizer="qwen2.5"))
        assert hoisted.text.startswith("<|im_start|>system\nYou are a coding agent.\n\n"
                                       "Note: 3 steps left.\n\n# Tools")
        assert kept.text == plain.text

    @pytest.mark.parametrize(("what_if", "message"), [
        ("sort-keys", "unknown what-if"), ("drop:(", "invalid regex")])
    def test_bad_what_ifs_are_errors(self, what_if, message):
        with pytest.raises(RenderError, match=message):
            render(make_request(fixture("openai_chat.json")), RenderOptions(what_if=(what_if,)))

    def test_what_if_string_is_split_on_commas(self):
        assert RenderOptions(what_if="no-hoist, sort-json-keys").what_if == \
            ("no-hoist", "sort-json-keys")


class TestTemplates:
    def test_deepseek_puts_tools_first_then_gathers_every_system_message(self):
        prompt = render(make_request(fixture("openai_chat.json")))
        assert prompt.text.startswith("<｜begin▁of▁sentence｜>## Tools\n")
        head, _, rest = prompt.text.partition("several calls follow each other with no "
                                              "separator\n\n")
        assert rest.startswith("You are a coding agent.\n\nNote: 3 steps left.<｜User｜>")

    def test_qwen3_keeps_reasoning_only_after_the_last_user_turn(self):
        body = {"messages": [
            {"role": "user", "content": "q1"},
            {"role": "assistant", "content": "a1", "reasoning": "old thoughts"},
            {"role": "user", "content": "q2"},
            {"role": "assistant", "content": "", "reasoning": "new thoughts",
             "tool_calls": [{"id": "c", "type": "function",
                             "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "r"}]}
        prompt = render(make_request(body), RenderOptions(tokenizer="qwen3.6"))
        assert "old thoughts" not in prompt.text
        assert "<think>\nnew thoughts\n</think>\n\n<tool_call>" in prompt.text

    def test_renderer_id_depends_on_everything_that_changes_the_text(self):
        request = make_request(fixture("openai_chat.json"))
        a = render(request).renderer
        assert a == render(request).renderer
        assert a != render(request, RenderOptions(what_if=("sort-json-keys",))).renderer
        assert a != render(request, RenderOptions(tokenizer="qwen2.5")).renderer


class TestLoggedPrivateUseText:
    def test_text_made_of_mark_characters_renders_verbatim_without_a_map(self):
        odd = "a\U0010f000b\U0010e001\U0010f001c"
        call = {"id": "c", "type": "function",
                "function": {"name": "f", "arguments": '{"x": "' + odd + '"}'}}
        body = {"messages": [{"role": "user", "content": odd},
                             {"role": "assistant", "content": "", "tool_calls": [call]}]}
        prompt = render(make_request(body), RenderOptions(tokenizer="qwen2.5"))
        assert prompt.attribution == "none"
        assert prompt.text.count(odd) == 2
        assert [s.path for s in prompt.segments] == ["template"]


def test_reserved_character_spelled_as_escape_in_tool_arguments():
    """Found by Hypothesis: arguments the engine JSON-parses may spell a character of the
    marks' private-use range as a surrogate escape; the render must still equal the plain one."""
    from prefixscope.prompt import RenderOptions, render

    body = {"messages": [
        {"role": "user", "content": ""},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c0", "type": "function",
             "function": {"name": "bash", "arguments": '{"cmd": "\\udbfc\\udc00"}'}}]},
        {"role": "tool", "tool_call_id": "c0", "content": ""},
        {"role": "system", "content": ""}]}
    request = make_request(body)
    options = RenderOptions(gateway="hoist-system-messages")
    assert render(request, options).text == reference_text(request, options)


def test_a_body_whose_messages_is_not_a_list_is_a_render_error_not_a_crash():
    request = make_request({"model": "gpt-4o", "messages": 5}, endpoint="openai-chat")
    with pytest.raises(RenderError, match="messages is a int, not a list"):
        render(request, RenderOptions())


_TRICKY = st.sampled_from(["", "a", "\\udbf8", "\\uDBFC\\udc00", "\\ud83d", "\\\\udbf8",
                           "\U0010e001", "\U0010f0ff", "\U0010e000x", "\U0010d000", "é\\uD"])
_TEXTS = st.lists(_TRICKY, max_size=4).map("".join)
_VALUES = st.recursive(st.none() | st.integers(-2**63, 2**63 - 1) | _TEXTS,
                       lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(_TEXTS, inner, max_size=3), max_leaves=8)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(rest=st.dictionaries(_TEXTS.filter(lambda k: k != "messages"), _VALUES, max_size=3),
       messages=st.lists(_VALUES, max_size=4))
def test_scanning_the_body_in_its_two_parts_finds_what_the_whole_scan_finds(rest, messages):
    """render scans the body's JSON as it cuts it for the splice (the rest, the history)
    instead of dumping it whole again: the same answer as the whole body's scan."""
    from prefixscope.prompt.pipeline import _raw_parts, _scan_body

    body = {**rest, "messages": messages}
    parts = _raw_parts(body, "messages")
    assert parts is not None
    assert _scan_body(body, parts) == _scan_body(body)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(rest=st.dictionaries(_TEXTS.filter(lambda k: k != "messages"), _VALUES, max_size=3),
       messages=st.lists(_VALUES, max_size=4), more=st.lists(_VALUES, max_size=3),
       other_rest=st.none() | st.dictionaries(_TEXTS.filter(lambda k: k != "messages"),
                                              _VALUES, max_size=2))
def test_a_turn_scans_only_what_its_clean_previous_turn_did_not(rest, messages, more,
                                                                  other_rest):
    """A body after a clean one (a session's next turn: history appended, the rest the
    same or not) scanned from where the previous JSON stops is scanned as a whole."""
    from types import SimpleNamespace

    from hypothesis import assume

    from prefixscope.prompt.pipeline import _raw_parts, _scan_body

    before = {**rest, "messages": messages}
    after = {**(rest if other_rest is None else other_rest), "messages": messages + more}
    old, new = _raw_parts(before, "messages"), _raw_parts(after, "messages")
    assert old is not None and new is not None
    assume(_scan_body(before) == (False, False))  # a Turn is made of a clean body only
    clean = SimpleNamespace(rest=old[0], items=old[1])
    assert _scan_body(after, new, clean) == _scan_body(after)  # type: ignore[arg-type]
