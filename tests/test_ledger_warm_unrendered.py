"""What other traffic kept warm, in the log's tokens, when the log lacks part of the prompt
(issue 35; docs/accuracy.md, the Codex corpus's miss).

Past OpenAI's 10 minutes a pause is an expiry when the read is no more than what the
replay of every session's traffic keeps warm (tests/test_ledger_openai_retention.py). The
replay counts rendered tokens; a log that lacks part of the prompt -- a Codex rollout's
tools, a Cline or gateway body's system prompt and tools, all before the messages and so
inside the prefix other sessions share -- renders short of the logged prompt. Scaling the
warm prefix by the two lengths spread the missing tokens over the whole prompt and put
the warm prefix short of the read: every expiry that read the shared prefix was booked
`provider` (69 of 87 in the Codex corpus). The missing tokens are added instead.

The capture is test_ledger_openai_retention's, each call also sending 1,024 tokens of
tools the log does not show: every logged prompt and every read of the shared prefix is
1,024 more than the rendered one. By hand:

* A1 (cold): prompt 5,124, read 0.
* A2, 900 s later: prompt 5,624, read 3,968 (the system prompt and tools B kept warm);
  warm = 2,944 rendered + 1,024 = 3,968 (scaled it was 2,944 * 5,624 / 4,600 = 3,599, and
  the read past it by more than a step was provider); X = floor(5,124 / 128) * 128 =
  5,120: ttl 1,152, rounding 4, new 500.
* A3, 2,400 s later: prompt 6,124, read 5,504 = X = floor(5,624 / 128) * 128: rounding
  120, new 500.
* A4, 2,400 s after A3: prompt 6,624, read 5,888, X = floor(6,124 / 128) * 128 = 6,016; the
  read is past the warm 3,968 (A's own tokens were read: the prefix outlived the pause):
  provider 128, rounding 108, new 500.
"""

from __future__ import annotations

import json
from pathlib import Path

from test_ledger_openai_retention import _line, _session_a

TOOLS = 1_024  # tokens the provider counted that the log's bodies do not show


def _capture(tmp_path: Path) -> Path:
    own = ["beta " * 1000, "gamma " * 495, "delta " * 495, "eps " * 495]
    lines = [_line("A", 1, 0, own[:1], 4_100 + TOOLS, 0),
             _line("A", 2, 900, own[:2], 4_600 + TOOLS, 2_944 + TOOLS),
             _line("A", 3, 3_300, own[:3], 5_100 + TOOLS, 4_480 + TOOLS),
             _line("A", 4, 5_700, own[:4], 5_600 + TOOLS, 4_864 + TOOLS)]
    lines += [_line(f"B{k}", 1, 1 + 300 * k, [f"question {k} " * 20], 3_050 + TOOLS,
                    2_944 + TOOLS if k else 0) for k in range(20)]
    lines.sort(key=lambda x: x["timestamp"])
    path = tmp_path / "openai-capture.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_a_shared_prefix_the_log_lacks_part_of_is_still_what_others_kept_warm(
        tmp_path: Path) -> None:
    assert _session_a(_capture(tmp_path)) == [
        {"cold": 4_100 + TOOLS},
        {"ttl": 1_152, "new": 500, "rounding": 4},
        {"rounding": 120, "new": 500},
        {"provider": 128, "rounding": 108, "new": 500}]
