"""A real mini-swe-agent 2.2.7 run on DeepSeek's API nobody here wrote
(tests/data/real/mini-swe-agent-deepseek/): SWE-bench's pvlib-python-1072 under
`deepseek/deepseek-reasoner` through LiteLLM, 15 calls whose usage is DeepSeek's own
(`prompt_cache_hit_tokens` / `prompt_cache_miss_tokens`), every cache hit a multiple of 64
tokens, and a 16th call that failed (`InternalServerError`) before any usage.

Counted by hand over the raw file (the assistant messages' `extra.response.usage`): prompt
92,817, cached 83,392; against what the call before sent, cut to whole 64-token units: cold
1,798 (the first call), new 7,229, rounding 270, and 128 short of the predecessor's whole
units on calls 6 and 7 (5,184 -> 5,120 and 6,080 -> 6,016: the bodies grow append-only).
Before the usage's own fields were read as DeepSeek's API, the 64-token steps were taken for
a self-hosted server's blocks: replayed with vLLM, the 128 tokens `unexplained` and no call
priced.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from prefixscope.cli.main import app

runner = CliRunner()


def _report(real: Path) -> dict:
    result = runner.invoke(app, ["report", str(real / "mini-swe-agent-deepseek"), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_deepseeks_own_usage_fields_replay_with_deepseeks_api_not_a_servers_blocks(real):
    report = _report(real)
    summary = report["summary"]
    assert (summary["requests"], summary["prompt_tokens"], summary["cached_tokens"]) == \
        (15, 92_817, 83_392)
    assert summary["engine"] == "deepseek"
    assert report["notes"][0] == ("replayed with deepseek: the usage has DeepSeek's API's own "
                                  "cache fields")
    assert summary["money"]["priced_requests"] == 15  # a hosted API's calls have list prices


def test_the_ledger_is_the_hand_count_and_the_two_short_reads_are_the_providers(real):
    report = _report(real)
    causes = {k: v for k, v in report["ledger"]["by_cause"].items()
              if k != "break" and v}
    assert causes == {"cold": 1_798, "new": 7_229, "rounding": 270, "provider": 128}
    assert [(f["kind"], f["lost_tokens"]) for f in report["findings"]] == \
        [("provider-miss", 128)]
