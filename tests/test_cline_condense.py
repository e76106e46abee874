"""Cline's condense and the second call of a task, read as Cline logs them (issue 35).

* A condense -- the model's ``summarize_task`` call (auto-compact: Cline shows a ``say:
  "tool"`` whose text is ``{"tool": "summarizeTask", ...}``) or ``/smol``'s ``ask:
  "condense"`` -- is a compaction of the request after it: the tool handler sets
  `conversationHistoryDeletedRange` to everything after the first user / assistant pair
  while the summarizing request's answer is handled (cline/cline
  `SummarizeTaskHandler` / `CondenseHandler`, keep ``none``), so the first message that
  shows the new range is stamped after that request (often the next request's own
  ``api_req_started``), and the next request is the first sent without the history. A
  truncation, by contrast, is applied while a request is set up, after its own
  ``api_req_started``.
* A Cline body lacks the system prompt and the tools (``metadata.approximate``): its
  rendered prompt is the messages alone, so a second call's small uncached input
  (``tokensIn`` 10) matching the short rendered history says nothing of whether
  ``input_tokens`` held the reads. The fixture's task (the public Cline 3.51 task of
  tests/test_ingest_cline.py) was read with prompt 10 for its second call, its reads and
  writes taken for a converting gateway's double count.

Every expected number is hand arithmetic from the usage below, under Anthropic's rules (a
warm read ends at what the predecessor read plus wrote: its ``tokensIn`` were never
written).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.ingest import read_requests

runner = CliRunner()
CLINE_TASK = (FIXTURES / "cline" / "Code" / "User" / "globalStorage" / "saoudrizwan.claude-dev"
              / "tasks" / "1769064454592")
MODEL = {"providerId": "anthropic", "modelId": "claude-sonnet-4-5-20250929", "mode": "act"}


def _json(*args: str) -> dict:
    result = runner.invoke(app, [*args, "--json", "-q"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_real_tasks_second_call_keeps_its_logged_prompt() -> None:
    # tokensIn 10, cacheWrites 3,454, cacheReads 8,972: prompt 12,436 (Cline's convention),
    # not 10. Ledger by hand: call 1 cold 8,982; call 2 X = 0 + 8,972 (call 1's read +
    # write), read 8,972: rounding 10 (call 1's tokensIn), new 3,454; call 3 X = 8,972 +
    # 3,454 = 12,426 = its read: rounding 10, new 983.
    calls = _json("calls", str(CLINE_TASK))
    assert [(c["prompt_tokens"], c["cached_tokens"]) for s in calls["sessions"]
            for c in s["calls"]] == [(8_982, 0), (12_436, 8_972), (13_419, 12_426)]
    by = {k: v for k, v in calls["by_cause"].items() if v}
    assert by == {"cold": 8_982, "new": 3_454 + 983, "rounding": 20}


def _condensed_task(tmp_path: Path, condense: dict) -> Path:
    """Four calls of a Cline task: the first (10,000 written), one more, the one whose answer
    condenses (`condense`: the UI message Cline writes for it) with the history [u0, a1,
    u2, a3, u4], and the one after it (reads only the 8,096-token system prompt). Keep
    ``none`` over five messages: remove 5 - 2 = 3 from index 2, end 4 is a user message:
    the range is [2, 3]."""
    task = tmp_path / "tasks" / "1770000000000"
    task.mkdir(parents=True)

    def started(ts: int, index: int, writes: int, reads: int, **extra: object) -> dict:
        text = {"request": "...", "tokensIn": 4, "tokensOut": 200, "cacheWrites": writes,
                "cacheReads": reads, "cost": 0.01}
        return {"ts": ts, "type": "say", "say": "api_req_started", "text": json.dumps(text),
                "modelInfo": MODEL, "conversationHistoryIndex": index, **extra}

    def tool(ts: int, index: int) -> dict:
        return {"ts": ts, "type": "say", "say": "tool", "partial": False,
                "text": json.dumps({"tool": "readFile", "path": "a.py"}), "modelInfo": MODEL,
                "conversationHistoryIndex": index}

    ui = [
        {"ts": 1770000000010, "type": "say", "say": "text", "text": "Refactor the module",
         "modelInfo": MODEL, "conversationHistoryIndex": -1},
        started(1770000000700, -1, 10_000, 0),
        tool(1770000005000, 0),
        started(1770000006000, 1, 1_000, 10_000),
        tool(1770000008000, 2),
        started(1770000009000, 3, 2_000, 11_000),
        {**condense, "ts": 1770000011000, "modelInfo": MODEL, "conversationHistoryIndex": 4},
        # the handler set the range: the next message Cline writes is the next request's,
        # stamped with it
        started(1770000012000, 5, 2_500, 8_096, conversationHistoryDeletedRange=[2, 3]),
        {"ts": 1770000015000, "type": "say", "say": "completion_result", "text": "Done.",
         "modelInfo": MODEL, "conversationHistoryIndex": 6,
         "conversationHistoryDeletedRange": [2, 3]},
    ]
    (task / "ui_messages.json").write_text(json.dumps(ui))
    return task


SUMMARIZE = {"type": "say", "say": "tool", "partial": False,
             "text": json.dumps({"tool": "summarizeTask", "content": "We refactored a.py."})}
SMOL = {"type": "ask", "ask": "condense", "text": "We refactored a.py."}


@pytest.mark.parametrize(("condense", "said"), [
    (SUMMARIZE, "summarize_task (auto-compact)"), (SMOL, "condense (/smol)")])
def test_a_condense_is_a_compaction_of_the_request_after_it(tmp_path: Path, condense: dict,
                                                            said: str) -> None:
    task = _condensed_task(tmp_path, condense)
    requests, skips = read_requests(task / "ui_messages.json")
    assert skips == []
    assert [[(e.kind, e.detail, e.source_line) for e in r.events] for r in requests] == [
        [], [], [], [("compaction",
                      f"{said}: conversationHistoryDeletedRange none -> [2, 3]", 8)]]
    # Ledger by hand: call 1 cold 10,004; call 2 (11,004) X = 0 + 10,000 = its read:
    # rounding 4, new 1,000; call 3 (13,004) X = 10,000 + 1,000 = its read: rounding 4,
    # new 2,000; call 4 (10,600 = 4 + 2,500 + 8,096) after the condense: every missed token
    # compaction, 10,600 - 8,096 = 2,504 -- not a truncation of call 3 (4 tokens on an
    # append-only turn) and an unexplained shrink of call 4
    by = {k: v for k, v in _json("calls", str(task))["by_cause"].items() if v}
    assert by == {"cold": 10_004, "rounding": 8, "new": 3_000, "compaction": 2_504}


def test_a_condense_answered_with_feedback_drops_nothing(tmp_path: Path) -> None:
    # /smol's ask answered with feedback keeps the history: no range follows; a truncation
    # later in the task is the request's that set it up, as ever
    task = _condensed_task(tmp_path, SMOL)
    ui = json.loads((task / "ui_messages.json").read_text())
    for message in ui[7:]:
        message.pop("conversationHistoryDeletedRange")
    ui.insert(7, {"ts": 1770000011500, "type": "say", "say": "user_feedback",
                  "text": "keep the tests", "conversationHistoryIndex": 4})
    ui.append({"ts": 1770000016000, "type": "say", "say": "text", "text": "Trimmed.",
               "modelInfo": MODEL, "conversationHistoryIndex": 6,
               "conversationHistoryDeletedRange": [2, 3]})
    (task / "ui_messages.json").write_text(json.dumps(ui))
    requests, _ = read_requests(task / "ui_messages.json")
    assert [[e.kind for e in r.events] for r in requests] == [[], [], [], ["truncation"]]
