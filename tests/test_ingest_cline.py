"""Cline / Roo Code task logs: one request per api_req_started, bodies from the API history.

Expected values: hand arithmetic, and an oracle independent of the reader: Cline's own
logged `cost` of each request equals Anthropic's list prices applied to (`tokensIn`,
`cacheWrites`, `cacheReads`, `tokensOut`) only if `tokensIn` excludes the cache reads and
writes -- the convention the reader assumes. The Cline fixture's token counts and costs
are those of the first three requests of a public Cline 3.51 task
(gmfstu/Online-Card-Architecture exported_task_1769064454592, claude-opus-4-5; not
copied: the repository has no licence); its texts are written here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import FIXTURES

from prefixscope.ingest import read_requests
from prefixscope.ingest.formats import all_formats, cline
from prefixscope.ingest.probing import probe
from prefixscope.ingest.source import Source
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths

STORAGE = FIXTURES / "cline" / "Code" / "User" / "globalStorage"
CLINE_TASK = STORAGE / "saoudrizwan.claude-dev" / "tasks" / "1769064454592"
ROO_TASK = STORAGE / "rooveterinaryinc.roo-cline" / "tasks" / "0a1b2c3d-roo"
# claude-opus-4-5 list prices, USD per million tokens: input, output, cache write, cache read
OPUS = (5.0, 25.0, 6.25, 0.5)


def _unmarked(message: dict) -> dict:
    """A message without the cache breakpoints the reader adds."""
    return {**message, "content": [{k: v for k, v in b.items() if k != "cache_control"}
                                   for b in message["content"]]}


def _read(path: Path):
    requests, skips = read_requests(path)
    assert skips == []
    return requests


class TestCline:
    def test_detected_as_cline_only(self) -> None:
        pr = probe(Source.from_path(CLINE_TASK / "ui_messages.json"))
        assert [m.NAME for m in all_formats() if m.sniff(pr)] == ["cline"]
        assert cline.is_companion(CLINE_TASK / "api_conversation_history.json")
        assert cline.is_companion(CLINE_TASK / "task_metadata.json")
        assert not cline.is_companion(CLINE_TASK / "ui_messages.json")

    def test_one_request_per_api_req_started(self) -> None:
        calls = _read(CLINE_TASK / "ui_messages.json")
        assert [r.source_line for r in calls] == [3, 6, 8, 9]
        u = [(r.usage.prompt_tokens, r.usage.cached_tokens, r.usage.cache_write_tokens,
              r.usage.output_tokens) for r in calls]
        # prompt = tokensIn + cacheWrites + cacheReads
        assert u == [(10 + 8972, 0, 8972, 814), (10 + 3454 + 8972, 8972, 3454, 572),
                     (10 + 983 + 12426, 12426, 983, 369), (None, None, None, None)]
        assert {r.usage.semantics for r in calls[:3]} == {"cline"}
        assert {r.session_key for r in calls} == {"1769064454592"}
        assert {r.session_key_source for r in calls} == {"cline.task-dir"}
        assert {r.client for r in calls} == {"cline"}
        assert {r.model for r in calls} == {"claude-opus-4-5-20251101"}
        assert calls[0].metadata["provider"] == "anthropic"

    def test_logged_cost_is_list_price_of_exclusive_input(self) -> None:
        for r in _read(CLINE_TASK / "ui_messages.json")[:3]:
            u = r.usage
            uncached = u.prompt_tokens - u.cached_tokens - u.cache_write_tokens
            cost = (uncached * OPUS[0] + u.output_tokens * OPUS[1]
                    + u.cache_write_tokens * OPUS[2] + u.cached_tokens * OPUS[3]) / 1e6
            assert abs(cost - r.metadata["cost"]) < 1e-12

    def test_bodies_from_the_api_history(self) -> None:
        first, second, third, failed = _read(CLINE_TASK / "ui_messages.json")
        assert first.endpoint == "anthropic-messages"
        assert [m["role"] for m in first.body["messages"]] == ["user"]
        assert first.metadata["approximate"] == ["system", "tools", "cache-control"]
        # conversationHistoryIndex 3: the history's first 5 messages (u a u a u)
        assert [m["role"] for m in third.body["messages"]] == [
            "user", "assistant", "user", "assistant", "user"]
        # Cline's breakpoints: the last block of the last two user messages (2 and 4)
        marked = [(i, j) for i, m in enumerate(third.body["messages"])
                  for j, block in enumerate(m["content"]) if "cache_control" in block]
        assert marked == [(2, 0), (4, 0)]
        assert [_unmarked(m) for m in third.body["messages"][:3]] == \
            [_unmarked(m) for m in second.body["messages"]]
        assert set(third.body["messages"][1]) == {"role", "content"}  # metrics dropped
        assert second.output["content"][0]["name"] == "write_to_file"
        assert failed.output is None and len(failed.body["messages"]) == 7

    def test_without_companion_no_body(self, tmp_path: Path) -> None:
        shutil.copy(CLINE_TASK / "ui_messages.json", tmp_path / "ui_messages.json")
        calls = _read(tmp_path / "ui_messages.json")
        assert [r.body for r in calls] == [None] * 4
        assert calls[0].usage.prompt_tokens == 8982

    def test_bad_elements_are_skips(self, tmp_path: Path) -> None:
        path = tmp_path / "ui_messages.json"
        path.write_text(json.dumps([
            {"ts": 1, "type": "say", "say": "text", "text": "hi"},
            {"ts": 2, "type": "say", "say": "api_req_started", "text": "not json"},
            ["x"],
            {"ts": 3, "type": "say", "say": "api_req_started",
             "text": json.dumps({"tokensIn": 5, "tokensOut": 1})}]))
        requests, skips = read_requests(path)
        assert [s.line for s in skips] == [2, 3]
        assert [(r.usage.prompt_tokens, r.usage.cached_tokens) for r in requests] == [(5, None)]


class TestRooCode:
    def test_tokens_in_is_the_total_input(self) -> None:
        first, second = _read(ROO_TASK / "ui_messages.json")
        assert (first.usage.prompt_tokens, first.usage.cache_write_tokens) == (12010, 12000)
        assert (second.usage.prompt_tokens, second.usage.cached_tokens) == (13000, 12000)
        assert {r.usage.semantics for r in (first, second)} == {"roo"}
        assert {r.client for r in (first, second)} == {"roo-code"}
        assert [r.metadata["apiProtocol"] for r in (first, second)] == ["anthropic", "openai"]
        # no conversationHistoryIndex: the n-th request sent the history to its n-th user turn
        assert [len(r.body["messages"]) for r in (first, second)] == [1, 3]
        assert first.metadata["approximate"] == ["system", "tools"]  # model unknown
        assert first.output["role"] == "assistant"


def test_directory_walk_reads_tasks_not_companions(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "cline", tmp_path / "cline")
    with Store.open(tmp_path / "s.duckdb") as store:
        result = ingest_paths([str(tmp_path / "cline")], store)
        rows = store.run("SELECT session_key, count(*), sum(prompt_tokens), "
                         "sum(cached_tokens) FROM requests GROUP BY 1 ORDER BY 1")
    assert result.skipped == 0
    assert rows == [("0a1b2c3d-roo", 2, 25010, 12000),
                    ("1769064454592", 4, 8982 + 12436 + 13419, 8972 + 12426)]
