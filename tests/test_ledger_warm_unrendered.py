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


# The tokens the provider counts of session A's own text fewer than the rendering does
# (framing and tokenizer): the logged prompt less the rendered one then falls short of the
# lacked tools by this much, and the warm prefix mapped by that difference with it.
FRAMING = 500


def _framed_capture(tmp_path: Path) -> Path:
    own = ["beta " * 3000, "gamma " * 495, "delta " * 495, "eps " * 495]
    lines = [_line("A", 1, 0, own[:1], 6_100 + TOOLS - FRAMING, 0),
             _line("A", 2, 900, own[:2], 6_600 + TOOLS - FRAMING, 2_944 + TOOLS),
             _line("A", 3, 3_300, own[:3], 7_100 + TOOLS - FRAMING, 7_040),
             _line("A", 4, 5_700, own[:4], 7_600 + TOOLS - FRAMING, 7_424)]
    lines += [_line(f"B{k}", 1, 1 + 300 * k, [f"question {k} " * 20], 3_050 + TOOLS,
                    2_944 + TOOLS if k else 0) for k in range(20)]
    lines.sort(key=lambda x: x["timestamp"])
    path = tmp_path / "openai-capture.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_a_read_of_what_others_kept_warm_past_its_mapped_end_is_still_an_expiry(
        tmp_path: Path) -> None:
    """The Codex corpus's five misses left after 587d2f6 (docs/accuracy.md), by hand.

    Session A's prompts render 6,100 / 6,600 / 7,100 / 7,600 tokens; the provider counts
    1,024 tokens of tools more and 500 of A's own text fewer. B keeps the system prompt
    and tools warm: 2,944 rendered, 3,968 in the provider's count.

    * A1 (cold): prompt 6,624.
    * A2, 900 s later: prompt 7,124, read 3,968 (what B kept warm). The warm prefix mapped
      to the log's tokens is 2,944 + (7,124 - 6,600) = 3,468, and the read is 500 past
      it: more than a step, so it was booked provider. It is 2,560 short of X =
      floor(6,624 / 128) * 128 = 6,528, nearer the warm prefix: an expiry. ttl
      [3,968, 6,528) = 2,560, rounding [6,528, 6,624) = 96, new 500.
    * A3, 2,400 s later: read 7,040 = X = floor(7,124 / 128) * 128 (the prefix outlived
      the pause): rounding 84, new 500.
    * A4, 2,400 s later: read 7,424, X = floor(7,624 / 128) * 128 = 7,552; nearer X than
      the warm prefix (A's own tokens were read): provider 128, rounding 72, new 500.
    """
    assert _session_a(_framed_capture(tmp_path)) == [
        {"cold": 6_624},
        {"ttl": 2_560, "new": 500, "rounding": 96},
        {"rounding": 84, "new": 500},
        {"provider": 128, "rounding": 72, "new": 500}]
