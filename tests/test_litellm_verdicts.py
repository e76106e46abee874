"""LiteLLM's spend log keeps the provider's response, and with it the provider's own verdict
on the cache (issue 35 item 3): an Anthropic message's ``diagnostics.cache_miss_reason``, a
Responses object's ``prompt_cache_diagnostics``. The reader puts it where Claude Code's
transcripts and raw captures put theirs (`metadata.cache_miss_reason`, ...), so the
report's reconciliation counts these calls too.

The rows are hand-built: the verdicts below are the values written into them."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.ingest import read_requests

KEYS = ("cache_miss_reason", "cache_missed_input_tokens", "cache_comparison_reusable_tokens",
        "cache_diagnostics")


def _row(request_id: str, when: str, response: dict, *, call_type: str = "anthropic_messages",
         model: str = "claude-sonnet-4-5-20250929", prompt: int = 6_904) -> dict:
    return {"request_id": request_id, "call_type": call_type, "api_key": "hash", "spend": 0.0,
            "total_tokens": prompt + 5, "prompt_tokens": prompt, "completion_tokens": 5,
            "startTime": when, "model": model, "model_group": model,
            "custom_llm_provider": "anthropic" if "claude" in model else "openai",
            "metadata": {}, "session_id": "sess-1", "messages": "{}",
            "response": json.dumps(response),
            "proxy_server_request": {"model": model, "max_tokens": 64,
                                     "messages": [{"role": "user", "content": "hi"}]}}


def _message(diagnostics: object) -> dict:
    message = {"id": "msg_1", "type": "message", "role": "assistant",
               "content": [{"type": "text", "text": "ok"}],
               "usage": {"input_tokens": 10, "output_tokens": 5,
                         "cache_creation_input_tokens": 6_894, "cache_read_input_tokens": 0}}
    if diagnostics is not None:
        message["diagnostics"] = diagnostics
    return message


def _log(tmp_path: Path) -> Path:
    rows = [
        _row("r1", "2026-06-01T10:00:00Z", _message(None)),
        _row("r2", "2026-06-01T10:01:00Z", _message(
            {"cache_miss_reason": {"type": "tools_changed", "cache_missed_input_tokens": 6_894}})),
        _row("r3", "2026-06-01T10:02:00Z", _message({"cache_miss_reason": None})),
        _row("r4", "2026-06-01T10:03:00Z", {
            "id": "resp_1", "object": "response", "output": [],
            "usage": {"input_tokens": 2_250, "output_tokens": 5,
                      "input_tokens_details": {"cached_tokens": 0}},
            "prompt_cache_diagnostics": {"type": "cache_miss", "reason": "input_changed",
                                         "cache_missed_tokens": 2_176,
                                         "comparison_reusable_tokens": 1_024}},
            call_type="aresponses", model="gpt-5", prompt=2_250),
        _row("r5", "2026-06-01T10:04:00Z", {
            "id": "chatcmpl-1", "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
            "usage": {"prompt_tokens": 2_250, "completion_tokens": 5}},
            call_type="acompletion", model="gpt-4o", prompt=2_250),
    ]
    path = tmp_path / "spend_logs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_stored_responses_verdicts_are_read_as_raw_captures_are(tmp_path: Path) -> None:
    requests, skips = read_requests(_log(tmp_path))
    assert skips == []
    got = {r.native_id: tuple(r.metadata.get(k) for k in KEYS) for r in requests}
    assert got == {
        "r1": (None, None, None, None),  # no diagnostics asked for
        "r2": ("tools_changed", 6_894, None, "anthropic"),
        "r3": (None, None, None, None),  # a null reason: nothing diverged
        "r4": ("input_changed", 2_176, 1_024, "openai"),
        "r5": (None, None, None, None),  # a Chat completion carries no diagnosis
    }


def test_the_report_counts_the_calls_that_carry_a_verdict(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["report", str(_log(tmp_path)), "--json"])
    assert result.exit_code == 0, result.output
    verdicts = json.loads(result.stdout)["ledger"]["provider_verdicts"]
    assert verdicts["calls"] == 2
