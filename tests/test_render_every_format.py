"""`render` works on a request of every body-carrying format, under every profile that
applies and every bundled tokenizer (issue 3's definition of done)."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from prefixscope.analyses.prompt_spans import render_report
from prefixscope.ingest import read_requests
from prefixscope.prompt import RenderError, RenderOptions
from prefixscope.tokenizers import BUNDLED

# One log per format that carries request bodies.
LOGS = {
    "raw (anthropic)": FIXTURES / "raw" / "claude_code_capture.jsonl",
    "raw (openai chat)": FIXTURES / "raw" / "openai_chat_capture.jsonl",
    "raw (responses)": FIXTURES / "raw" / "openai_responses_capture.json",
    "langfuse": FIXTURES / "langfuse" / "claude-code-gateway.events_full.jsonl",
    "litellm": FIXTURES / "litellm" / "spend_logs.json",
    "bifrost": FIXTURES / "bifrost" / "api_logs.json",
    "otel": FIXTURES / "otel" / "genai_trace.json",
    "swe-agent": FIXTURES / "swe-agent" / "function_calling_elided.traj",
    "openhands": FIXTURES / "openhands" / "runs_output.jsonl",
    "mini-swe-agent": FIXTURES / "mini-swe-agent" / "v2_tool_calls.traj.json",
    "openhands-completions": FIXTURES / "openhands-completions" / "conv"
                             / "gpt-4.1-1757000000.500-1a2b.json",
}
# diff --all reads a folder of the formats that log one call per file.
DIFF_LOGS = {**LOGS, "openhands-completions": FIXTURES / "openhands-completions" / "conv"}
PROFILES = ("auto", "passthrough", "anthropic-to-openai", "hoist-system-messages")


def first_with_body(path):
    requests, _ = read_requests(path)
    return next(r for r in requests if r.body is not None)


@pytest.mark.parametrize("tokenizer", sorted(BUNDLED))
@pytest.mark.parametrize("name", sorted(LOGS))
def test_every_body_format_renders(name, tokenizer):
    request = first_with_body(LOGS[name])
    rendered = 0
    for gateway in PROFILES:
        try:
            result = render_report(request, RenderOptions(gateway=gateway, tokenizer=tokenizer))
        except RenderError as exc:
            # a profile that cannot apply to this protocol says so in one line
            assert "\n" not in str(exc) and gateway != "auto"
            continue
        rendered += 1
        assert result.tokens > 0
        covered = sum(s.char_end - s.char_start for s in result.segments)
        assert covered == len(result.text)
        assert any(s.segment != "template" for s in result.segments)
    assert rendered >= 2


@pytest.mark.parametrize("name", sorted(DIFF_LOGS))
def test_diff_all_works_on_every_body_format(name):
    import json

    from typer.testing import CliRunner

    from prefixscope.cli.main import app

    result = CliRunner().invoke(app, ["diff", "--all", str(DIFF_LOGS[name]), "--json"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["totals"]["pairs"] + out["totals"]["skipped"] >= 1
    for pair in out["pairs"]:
        assert pair["cause"] in ("identical", "append-only") or pair["first_divergence"]
