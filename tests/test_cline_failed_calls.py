"""A Cline task whose calls failed before any usage arrived, and that switched from a model
prefixscope has no cache model of (xAI's Grok) to Claude.

Shaped as a real public Cline task (haram-333/fineye `ui_messages.json`, Cline's own
provider, `x-ai/grok-code-fast-1` then `anthropic/claude-sonnet-4.5`; not copied: the
repository has no licence): a call whose stream failed is an `api_req_started` whose text
holds `"tokensIn":0,"tokensOut":0,"cacheWrites":0,"cacheReads":0,"cost":0,
"cancelReason":"streaming_failed"`, followed by `error_retry`, `api_req_failed` and
`resume_task` messages; the model switch is the next call's `modelInfo.modelId`. On the
real task prefixscope read the seven failed calls as prompts of 0 tokens, so the call after
the switch had a predecessor of 0 tokens and its 40,959 tokens sent before under Grok were
`new`, and an 9.8-minute pause on Claude was `unexplained` (no engine for a log most of
whose calls went to Grok).

Every expected number is worked out by hand from the usage below (Cline: prompt =
tokensIn + cacheReads + cacheWrites; Anthropic holds at most what the predecessor read
and wrote, the rest of its prompt is rounding; another model has a cache of its own).
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.ingest import read_requests

runner = CliRunner()
T0 = 1767644912730
GROK = "x-ai/grok-code-fast-1"
SONNET = "anthropic/claude-sonnet-4.5"


def _started(ts: int, model: str, tokens_in: int, reads: int, *, failed: bool = False
             ) -> dict:
    info: dict = {"request": "<task>...</task>", "tokensIn": tokens_in,
                  "tokensOut": 0 if failed else 120, "cacheWrites": 0, "cacheReads": reads,
                  "cost": 0 if failed else 0.001}
    if failed:
        info["cancelReason"] = "streaming_failed"
        info["streamingFailedMessage"] = json.dumps({
            "message": "Failed to create stream: inference request failed",
            "code": "stream_initialization_failed", "modelId": model, "providerId": "cline"})
    return {"ts": ts, "type": "say", "say": "api_req_started", "text": json.dumps(info),
            "modelInfo": {"providerId": "cline", "modelId": model, "mode": "act"},
            "conversationHistoryIndex": 3}


def _say(ts: int, say: str, text: str = "") -> dict:
    return {"ts": ts, "type": "say", "say": say, "text": text}


def _ask(ts: int, ask: str, text: str = "") -> dict:
    return {"ts": ts, "type": "ask", "ask": ask, "text": text}


def _task(tmp_path: Path) -> Path:
    s = 1000  # ms
    messages = [
        _say(T0 - 10, "text", "make the API script work"),
        _started(T0, GROK, 11_495, 512),                      # 1: P 12,007, cold
        _say(T0 + 2 * s, "text", "done"),
        _started(T0 + 43 * s, GROK, 349, 12_352),             # 2: P 12,701
        _say(T0 + 45 * s, "completion_result", "Done"),
        _started(T0 + 300 * s, GROK, 0, 0, failed=True),      # 3: no usage
        _say(T0 + 304 * s, "error_retry", '{"attempt":1,"maxAttempts":3,"delaySeconds":2}'),
        _say(T0 + 306 * s, "api_req_retried"),
        _ask(T0 + 310 * s, "api_req_failed", '{"message":"Failed to create stream"}'),
        _ask(T0 + 400 * s, "resume_task"),
        _started(T0 + 420 * s, GROK, 0, 0, failed=True),      # 4: no usage
        _say(T0 + 423 * s, "error_retry", '{"attempt":1,"maxAttempts":3,"delaySeconds":2}'),
        _ask(T0 + 580 * s, "resume_task"),
        _started(T0 + 600 * s, SONNET, 50_868, 0),            # 5: P 50,868, model switch
        _say(T0 + 610 * s, "text", "let me look"),
        _started(T0 + 646 * s, SONNET, 545, 50_858),          # 6: P 51,403, 46 s later
        _say(T0 + 650 * s, "text", "here"),
        _started(T0 + 1232 * s, SONNET, 52_197, 0),           # 7: P 52,197, 586 s later
        _say(T0 + 1240 * s, "text", "again"),
    ]
    task = tmp_path / "saoudrizwan.claude-dev" / "tasks" / str(T0)
    task.mkdir(parents=True)
    (task / "ui_messages.json").write_text(json.dumps(messages))
    return task


def test_a_call_that_failed_before_any_usage_has_none(tmp_path: Path) -> None:
    requests, skips = read_requests(_task(tmp_path) / "ui_messages.json")
    assert skips == []
    usage = [(r.usage.prompt_tokens, r.usage.cached_tokens, r.usage.cache_write_tokens,
              r.usage.output_tokens) for r in requests]
    assert usage == [(12_007, 512, 0, 120), (12_701, 12_352, 0, 120),
                     (None, None, None, None), (None, None, None, None),
                     (50_868, 0, 0, 120), (51_403, 50_858, 0, 120), (52_197, 0, 0, 120)]
    assert requests[2].metadata["cancelReason"] == "streaming_failed"
    # the switch is recorded on the first call under the new model
    assert [[e.kind for e in r.events] for r in requests] == [[], [], [], [], [
        "model-change"], [], []]


def test_the_switch_and_the_pause_are_named_across_the_failed_calls(tmp_path: Path) -> None:
    result = runner.invoke(app, ["calls", str(_task(tmp_path)), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    calls = out["sessions"][0]["calls"]
    causes = [(c["prompt_tokens"], c["causes"], c["break_kind"]) for c in calls]
    assert causes == [
        (12_007, {"cold": 11_495}, None),
        (12_701, {"new": 12_701 - 12_352}, None),
        # another model's cache: all that call 2 sent (12,701) is the switch's; the rest new
        (50_868, {"break": 12_701, "new": 50_868 - 12_701}, "model-change"),
        # 50,868 sent, 50,858 read: the 10 tokens after Claude's last breakpoint
        (51_403, {"new": 51_403 - 50_868, "rounding": 10}, None),
        # a 586 s pause over Anthropic's 5 minutes: what call 6 read and wrote expired;
        # its unwritten tail is rounding, the rest new
        (52_197, {"ttl": 50_858, "rounding": 51_403 - 50_858, "new": 52_197 - 51_403}, None),
    ]
    # the pause is measured from the last call with usage
    assert calls[2]["gap_seconds"] == 600 - 43
    # the two failed calls are outside the basis (no usage), not prompts of 0 tokens
    assert (out["requests"], out["outside_requests"]) == (5, 2)
    assert out["by_cause"]["unexplained"] == 0
    assert out["by_cause"]["provider"] == 0


def test_the_failed_calls_are_outside_the_basis_for_having_no_usage(tmp_path: Path) -> None:
    # the real task's report said the seven failed calls had "no cache field in their
    # usage" and advised making the source report cached tokens: they report nothing
    result = runner.invoke(app, ["report", str(_task(tmp_path)), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    basis = doc["summary"]["basis"]
    assert (basis["requests"], basis["outside_requests"], basis["outside_reason"]) == (
        5, 2, "no usage logged")
    assert not [f for f in doc["findings"] if f["kind"] == "usage-semantics"
                and f["evidence"].get("check") == "missing-vs-zero"]
