"""simulate's usage-only replay reads what the log records and what the predecessor
wrote, as report's ledger does (docs/simulate.md, "What the log records").

The hand-built Claude Code session tests/fixtures/claude-code/recorded_events.jsonl (every
call 1 minute apart at most: no expiry; usage per call as its lines log it):

  call  prompt  read    write   recorded before it
  1     20,000       0  19,997  -
  2     24,000  19,998   3,999  -
  3      6,000   4,000   1,997  compaction (compact_boundary, line 5)
  4      7,000       0   6,997  model change sonnet-4-5 -> opus-4-5 (line 9)
  5      9,000   2,500   6,497  client upgrade 2.1.92 -> 2.1.101 (line 11)
  6     10,000   8,000   1,997  tool-set delta (line 12)
  7     11,000   9,000   1,997  -
  8     10,500   9,000   1,497  -

Predicted cached tokens by hand: a read reaches min(predecessor's prompt - 2, its read +
write), and nothing across a recorded change (the prefix changed where the log cannot
say; another model has a cache of its own):

  1: 0 (cold)                           5: 0 (client upgrade: a new chain)
  2: min(20,000 - 2, 0 + 19,997) = 19,997   6: 0 (tool-set delta: a new chain)
  3: 0 (compaction: a new chain)        7: min(10,000 - 2, 8,000 + 1,997) = 9,997
  4: 0 (model change)                   8: 0 (shorter than call 7: a new chain)

Before: 2 read 19,998 (the 2-token lag alone), 5 read 6,998 and 6 read 8,998 across the
recorded changes, 7 read 9,998. The miss classes then equal report's ledger: break
6,000 + 4,500 + 1,000 (calls 4-6: what the predecessor sent, less what the log read),
provider 997 (call 7: 9,997 allowed, 9,000 read).
"""

from __future__ import annotations

from conftest import FIXTURES

import prefixscope as ps

LOG = FIXTURES / "claude-code" / "recorded_events.jsonl"


def _simulated() -> ps.SimulateReport:
    return ps.simulate(ps.ingest(str(LOG), store=None), engine="anthropic")


def test_the_usage_only_replay_predicts_the_hand_counts() -> None:
    report = _simulated()
    assert [r.predicted for r in report.per_request] == [
        0, 19_997, 0, 0, 0, 0, 9_997, 0]
    assert [r.ideal for r in report.per_request] == [0, 19_997, 0, 0, 0, 0, 9_997, 0]


def test_its_miss_classes_are_the_ledgers() -> None:
    report = _simulated()
    assert report.misses["break"] == 6_000 + 4_500 + 1_000
    assert report.misses["provider"] == 997
    assert report.misses["compaction"] == 2_000
    ledger = ps.report(ps.ingest(str(LOG), store=None)).ledger
    assert ledger.by_cause["break"] == report.misses["break"]
    assert ledger.by_cause["provider"] == report.misses["provider"]
    assert [r.misses.get("break", 0) for r in report.per_request] == [
        0, 0, 0, 6_000, 4_500, 1_000, 0, 0]
