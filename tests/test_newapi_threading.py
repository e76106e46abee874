"""Usage-only rows (new-api consume rows: no body, no session id) threaded by growing prompt
(prefixscope/sessions.py rule 5) and the causes the ledger then books, against hand
arithmetic on the rows.

Every row is a Claude-native relay (`other.claude`): the prompt is `prompt_tokens` (the
uncached input, 2 here) + the read (`cache_tokens`) + the write (`cache_creation_tokens`).
A call that continues its predecessor P' and reads `read` misses P' - 2 - read tokens of
that predecessor's prefix (Anthropic's warm read ends 2 tokens short); the rest of its
missed tokens are `new` and `rounding` (the 2), never a loss.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prefixscope import api

T0 = 1_772_442_000  # 2026-03-02T09:00:00Z, whole unix seconds as new-api's created_at
UNCACHED = 2


def row(n: int, minutes: float, user: str, read: int, write: int,
        split: str | None = "1h") -> dict[str, Any]:
    """One consume row; `split` the TTL of its writes ("1h", "5m") or None when the row
    does not split them."""
    other: dict[str, Any] = {"claude": True, "cache_tokens": read,
                             "cache_creation_tokens": write, "request_path": "/v1/messages"}
    if split is not None:
        other["cache_creation_tokens_1h"] = write if split == "1h" else 0
        other["cache_creation_tokens_5m"] = write if split == "5m" else 0
    return {"id": n, "user_id": sum(map(ord, user)), "created_at": T0 + round(minutes * 60),
            "type": 2, "username": user, "token_name": "claude-code",
            "model_name": "claude-sonnet-4-5-20250929", "quota": 1000,
            "prompt_tokens": UNCACHED, "completion_tokens": 60, "use_time": 3,
            "is_stream": False, "channel_id": 3, "group": "default",
            "other": json.dumps(other), "request_id": f"req-{n:04d}"}


def losses(tmp_path: Path, rows: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, int]]:
    """(HH:MM, prompt tokens) of each call -> the loss causes prefixscope books on it."""
    path = tmp_path / "logs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    store = api.ingest(path, tmp_path / "s.duckdb", format="new-api")
    out = {}
    for session in api.calls(store).to_dict()["sessions"]:
        for call in session["calls"]:
            out[(call["time"][11:16], call["prompt_tokens"])] = {
                k: v for k, v in call["causes"].items()
                if v and k not in ("new", "rounding")}
    return out


class TestTheGapCountsPastTheRetention:
    def test_a_pause_past_a_one_hour_entry_within_the_gap_is_that_entrys_expiry(
            self, tmp_path: Path) -> None:
        # alice writes 1-hour entries; 100 minutes after c2 is 40 past its hour, within the
        # 60-minute gap past it: c3 continues c2 and misses c2's prefix, 11,007 - 2 - 0;
        # c4 comes 125 minutes after c3, 65 past its hour: a session of its own
        got = losses(tmp_path, [
            row(1, 0, "alice", 0, 10_001),  # P 10,003
            row(2, 2, "alice", 10_001, 1_004),  # P 11,007, reads c1 back
            row(3, 102, "alice", 0, 11_503),  # P 11,505
            row(4, 227, "alice", 0, 12_001),  # P 12,003
        ])
        assert got[("09:00", 10_003)] == {"cold": 10_003}
        assert got[("09:02", 11_007)] == {}
        assert got[("10:42", 11_505)] == {"ttl": 11_005}
        assert got[("12:47", 12_003)] == {"cold": 12_003}

    def test_a_call_that_wrote_nothing_keeps_the_hour_of_the_entry_it_read(
            self, tmp_path: Path) -> None:
        # c2 reads c1's 1-hour entry and writes nothing: the entry keeps its hour, so c3,
        # 90 minutes later, continues c2 and misses 10,003 - 2 - 0
        got = losses(tmp_path, [
            row(1, 0, "alice", 0, 10_001),  # P 10,003
            row(2, 1, "alice", 10_001, 0),  # P 10,003: a repeat read, nothing written
            row(3, 91, "alice", 0, 10_401),  # P 10,403
        ])
        assert got[("09:01", 10_003)] == {}
        assert got[("10:31", 10_403)] == {"ttl": 10_001}

    def test_five_minute_writes_add_five_minutes_and_unsplit_writes_nothing(
            self, tmp_path: Path) -> None:
        # bob's rows split writes with none for the hour: 63 minutes is within 60 + 5, a
        # ttl of 10,006 - 2; carol's rows do not split writes: 61 minutes is past the gap
        got = losses(tmp_path, [
            row(1, 0, "bob", 0, 10_001, "5m"),  # P 10,003
            row(2, 1, "bob", 10_001, 3, "5m"),  # P 10,006, reads b1 back
            row(3, 64, "bob", 0, 10_503, "5m"),  # P 10,505
            row(4, 0, "carol", 0, 20_001, None),  # P 20,003
            row(5, 1, "carol", 20_001, 3, None),  # P 20,006, reads back
            row(6, 62, "carol", 0, 20_503, None),  # P 20,505
        ])
        assert got[("10:04", 10_505)] == {"ttl": 10_004}
        assert got[("10:02", 20_505)] == {"cold": 20_505}


class TestTheReadPicksTheRunItEndsClosestTo:
    def test_a_read_two_short_of_one_run_is_not_the_larger_runs_partial_read(
            self, tmp_path: Path) -> None:
        # two open runs of one user and model: a (last prompt 13,316) and b (13,113, a
        # shorter prompt after a, so a run of its own). b2 reads 13,111: b1's prompt less
        # the 2 of a warm read, and 205 short of a1's, within READ_REACH of both. It is b1
        # read back (an append-only turn, nothing lost), not a1 read short by 203
        got = losses(tmp_path, [
            row(1, 0, "dave", 0, 13_314, "5m"),  # a1: P 13,316
            row(2, 2, "dave", 9_213, 3_898, "5m"),  # b1: P 13,113
            row(3, 4, "dave", 13_111, 298, "5m"),  # b2: P 13,411
        ])
        assert got[("09:00", 13_316)] == {"cold": 13_316}
        assert got[("09:02", 13_113)] == {"cold": 13_113 - 9_213}
        assert got[("09:04", 13_411)] == {}
