"""OpenAI's in-memory retention is a range ("5-10 minutes of inactivity, up to 1 hour"
off-peak; cache-semantics.md), and the ledger reads a pause against it (docs/report.md's
`ttl` row; docs/accuracy.md, miss 3).

An idle expiry takes a session's own prefix at once (every step of it was last used by the
same call); what is left is what other traffic kept warm. So past the range's top, 10
minutes, a read no more than what the replay of every session's traffic keeps warm is an
expiry even when that is most of the prefix (a long system prompt other sessions send),
and a read beyond it (tokens only this session had sent) says the prefix outlived the pause.

The capture: session B sends the shared 3,000-word system prompt and a short question
every 5 minutes; session A sends the same system prompt and its own 1,000 words, pauses 15
minutes (B keeps the system prompt warm), then 40 minutes (A's own turns are read again:
the prefix outlived the pause). Every number below is the log's, by hand:

* A1 (cold): prompt 4,100, read 0.
* A2, 900 s later: prompt 4,600, read 2,944 (23 steps: the system prompt B kept warm);
  X = floor(4,100 / 128) * 128 = 4,096; ttl [2,944, 4,096) = 1,152 (more than half of X was
  read: the old half rule booked it provider); new [4,096, 4,600) = 504 less the read...
  the read ends before X, so new = 4,600 - 4,100 = 500 and rounding [4,096, 4,100) = 4.
* A3, 2,400 s later: prompt 5,100, read 4,480 (35 steps: A's own turns);
  X = floor(4,600 / 128) * 128 = 4,480: no shortfall; rounding 120, new 500.
* A4, 2,400 s after A3: prompt 5,600, read 4,864; X = floor(5,100 / 128) * 128 = 4,992;
  the read is past what B kept warm (A's own tokens were read): provider 128, rounding
  108, new 500.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.findings.ledger import hosted_rules

runner = CliRunner()
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
MODEL = "gpt-4.1-2025-04-14"
SYSTEM = "alpha " * 3000


def _line(sid: str, n: int, seconds: float, user: list[str], prompt: int,
          read: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for i, text in enumerate(user):
        if i:
            messages.append({"role": "assistant", "content": "done"})
        messages.append({"role": "user", "content": text})
    at = T0 + timedelta(seconds=seconds)
    return {"timestamp": at.isoformat().replace("+00:00", "Z"),
            "url": "https://api.openai.com/v1/chat/completions",
            "headers": {"Content-Type": "application/json", "x-litellm-session-id": sid},
            "request": {"model": MODEL, "messages": messages},
            "response": {"id": f"msg_{sid}{n}", "object": "chat.completion",
                         "created": int(at.timestamp()), "model": MODEL,
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": "done"}}],
                         "usage": {"prompt_tokens": prompt, "completion_tokens": 1,
                                   "total_tokens": prompt + 1,
                                   "prompt_tokens_details": {"cached_tokens": read}}}}


def _capture(tmp_path: Path) -> Path:
    own = ["beta " * 1000, "gamma " * 495, "delta " * 495, "eps " * 495]
    lines = [_line("A", 1, 0, own[:1], 4_100, 0),
             _line("A", 2, 900, own[:2], 4_600, 2_944),
             _line("A", 3, 3_300, own[:3], 5_100, 4_480),
             _line("A", 4, 5_700, own[:4], 5_600, 4_864)]
    # B: the system prompt and a short question of its own, every 5 minutes (a new
    # session each time: its own turns never extend)
    lines += [_line(f"B{k}", 1, 1 + 300 * k, [f"question {k} " * 20], 3_050, 2_944 if k else 0)
              for k in range(20)]
    lines.sort(key=lambda x: x["timestamp"])
    path = tmp_path / "openai-capture.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _session_a(path: Path) -> list[dict[str, int]]:
    """The ledger's causes of session A's calls, in time order (`calls --json`)."""
    result = runner.invoke(app, ["calls", str(path), "--json"])
    assert result.exit_code == 0, result.output
    sessions = {s["session"]: s for s in json.loads(result.stdout)["sessions"]}
    return [c["causes"] for c in sessions["A"]["calls"]]


def test_a_pause_past_ten_minutes_read_to_what_others_kept_warm_is_an_expiry(
        tmp_path: Path) -> None:
    assert _session_a(_capture(tmp_path)) == [
        {"cold": 4_100},
        {"ttl": 1_152, "new": 500, "rounding": 4},
        {"rounding": 120, "new": 500},
        {"provider": 128, "rounding": 108, "new": 500}]


def test_the_retention_range_by_hand() -> None:
    openai = hosted_rules("openai", MODEL)
    assert (openai.ttl_low, openai.ttl) == (300, 600)
    # past 10 minutes: a read no more than what other traffic kept warm, or nearer it than
    # X, expired (midway: (2,944 + 4,096) / 2 = 3,520); nearer X, the prefix outlived it
    assert openai.expired(900, 2_944, 4_096, warm=2_944)
    assert openai.expired(900, 0, 4_096, warm=2_944)
    assert openai.expired(900, 3_519, 4_096, warm=2_944)
    assert not openai.expired(900, 3_520, 4_096, warm=2_944)
    # other traffic kept the whole prefix warm: no expiry explains a shortfall
    assert not openai.expired(900, 0, 4_096, warm=4_096)
    # without a replay, the half rule: under half of X read
    assert openai.expired(900, 2_047, 4_096) and not openai.expired(900, 2_048, 4_096)
    # within the documented 5-10 minutes the half rule decides, warm or not
    assert openai.expired(301, 0, 4_096, warm=0)
    assert not openai.expired(301, 2_944, 4_096, warm=2_944)
    assert openai.expired(600, 2_047, 4_096) and not openai.expired(600, 2_048, 4_096)
    # at most 5 minutes: kept, whatever was read
    assert not openai.expired(300, 0, 4_096, warm=0)
    # the 24-hour retention has no documented range below its day
    day = hosted_rules("openai", MODEL, extended=True)
    assert day.ttl_low is None and not day.expired(3_600, 0, 4_096)
