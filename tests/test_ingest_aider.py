"""Aider LLM history: one request per TO LLM block, messages as sent, no usage.

Expected values: counted in the real file with other tools (`grep -n '^TO LLM'` for the
header lines, an awk count of the ``-------`` separators of each block for the message
counts); the handmade cases by hand.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from prefixscope.ingest import read_requests
from prefixscope.ingest.formats import aider, all_formats
from prefixscope.ingest.probing import probe
from prefixscope.ingest.source import Source
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths

REAL_FILE = "aider/friendly_names.aider.llm.history"
HEADERS = [1, 148, 360, 887, 1504, 1793, 2310, 2639, 3101, 3555, 4158, 4834, 5394, 6129,
           6937, 7522, 8374, 8956, 9963, 11026, 12115, 12685, 13817, 14443, 15648, 16293,
           17254, 17571, 18114, 18732, 19142, 19581, 20025]
MESSAGES = [6, 8, 10, 12, 6, 4, 10, 4, 14, 4, 20, 4, 24, 26, 4, 32, 4, 42, 44, 46, 4, 50, 4,
            54, 4, 58, 4, 6, 10, 6, 6, 6, 8]


def _read(path: Path):
    requests, skips = read_requests(path)
    assert skips == []
    return requests


class TestRealHistory:
    def test_detected_as_aider_only(self, real: Path) -> None:
        pr = probe(Source.from_path(real / REAL_FILE))
        assert [m.NAME for m in all_formats() if m.sniff(pr)] == ["aider"]

    def test_one_request_per_to_llm_block(self, real: Path) -> None:
        calls = _read(real / REAL_FILE)
        assert [r.source_line for r in calls] == HEADERS
        assert [len(r.body["messages"]) for r in calls] == MESSAGES
        assert {r.client for r in calls} == {"aider"}
        assert {r.usage.reported for r in calls} == {False}
        assert {r.model for r in calls} == {None}
        assert {r.session_key for r in calls} == {None}

    def test_messages_as_sent(self, real: Path) -> None:
        first = _read(real / REAL_FILE)[0]
        system = first.body["messages"][0]
        assert system["role"] == "system"
        assert system["content"].startswith("Act as an expert code analyst.\n"
                                            "Answer questions about the supplied code.\n")
        # an empty content line is written as "SYSTEM " and read back as an empty line
        assert "same language they are using.\n\nDescribe code changes" in system["content"]
        assert [m["role"] for m in first.body["messages"]] == [
            "system", "user", "assistant", "user", "assistant", "user"]
        assert first.output["content"].startswith("I notice that while the project")
        assert first.metadata["approximate"] == ["line-endings", "model"]
        assert first.metadata["response_time"] == "2025-01-31T11:21:41"
        assert first.timestamp.isoformat() == "2025-01-31T11:21:36"

    def test_hidden_file_found_in_a_walk(self, real: Path, tmp_path: Path) -> None:
        repo = tmp_path / "repo"
        repo.mkdir()
        shutil.copy(real / REAL_FILE, repo / ".aider.llm.history")
        (repo / ".aider.chat.history.md").write_text("# aider chat started\n")
        with Store.open(tmp_path / "s.duckdb") as store:
            result = ingest_paths([str(repo)], store)
            rows = store.run("SELECT count(*), count(body_hash) FROM requests")
        assert rows == [(33, 33)]
        assert result.skipped == 0


class TestHandmade:
    def test_blocks_without_response_and_bad_lines(self, tmp_path: Path) -> None:
        path = tmp_path / "h.history"
        path.write_text(
            "TO LLM 2025-01-01T10:00:00\n-------\nSYSTEM be brief\n-------\nUSER hi\nUSER \n"
            "TO LLM 2025-01-01T10:00:05\n-------\nUSER again\n"
            "LLM RESPONSE 2025-01-01T10:00:07\nASSISTANT ok\nASSISTANT done\n"
            "TO LLM 2025-01-01T10:01:00\nnot a role line\n")
        requests, skips = read_requests(path)
        assert [(s.line, s.reason[:12]) for s in skips] == [(13, "TO LLM block")]
        first, second = requests
        assert first.body["messages"] == [{"role": "system", "content": "be brief"},
                                          {"role": "user", "content": "hi\n"}]
        assert first.output is None
        assert second.output == {"role": "assistant", "content": "ok\ndone"}

    def test_sniff_needs_a_to_llm_header(self, tmp_path: Path) -> None:
        other = tmp_path / "x.history"
        other.write_text("LLM RESPONSE 2025-01-01T10:00:07\nASSISTANT ok\n")
        assert not aider.sniff(probe(Source.from_path(other)))
