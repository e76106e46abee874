"""render_report returns everything `prefixscope render` prints, in the documented JSON shape."""

from __future__ import annotations

from _render_helpers import fixture, make_request

from prefixscope.analyses.prompt_spans import render_report
from prefixscope.prompt import RenderOptions
from prefixscope.views.json import render_json


class TestRenderReport:
    def test_json_shape_is_exactly_the_documented_one(self):
        result = render_report(make_request(fixture("claude_code.json"), id="req-1",
                                            model="deepseek-v4-flash"),
                               RenderOptions(gateway="anthropic-to-openai"))
        data = render_json(result)
        assert list(data) == ["request", "gateway", "tokenizer", "tokens", "approximate",
                              "segments"]
        assert (data["request"], data["gateway"], data["tokenizer"], data["approximate"]) == \
            ("req-1", "anthropic-to-openai", "deepseek-v4", False)
        assert list(data["segments"][0]) == ["segment", "kind", "char_start", "char_end",
                                             "token_start", "token_end"]
        assert "text" in render_json(result, show_text=True)

    def test_token_spans_partition_the_token_count(self):
        result = render_report(make_request(fixture("openai_chat.json")),
                               RenderOptions(tokenizer="qwen3.6"))
        rows = result.segments
        assert rows[0].token_start == 0 and rows[-1].token_end == result.tokens
        assert all(a.token_end == b.token_start and a.char_end == b.char_start
                   for a, b in zip(rows, rows[1:], strict=False))
        assert rows[-1].char_end == len(result.text)

    def test_hosted_anthropic_is_reported_approximate_with_a_note(self):
        result = render_report(make_request(fixture("claude_code.json")))
        assert result.approximate and result.gateway == "passthrough"
        assert result.gateway_source == "default"
        assert any("stand-in tokenizer" in n for n in result.notes)

    def test_what_ifs_are_recorded(self):
        result = render_report(make_request(fixture("claude_code.json")),
                               RenderOptions(what_if=("strip-billing-header",)))
        assert result.what_if == ("strip-billing-header",)
        assert "x-anthropic-billing-header" not in result.text

    def test_a_bare_body_file_becomes_a_request(self):
        from prefixscope.store.lookup import request_from_body

        request = request_from_body(fixture("claude_code.json"), id="body.json")
        assert (request.endpoint, request.id) == ("anthropic-messages", "body.json")
        assert render_report(request).request == "body.json"
