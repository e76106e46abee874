"""Block-hash traces (Mooncake, Alibaba Bailian): block ids instead of bodies."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest
from conftest import FIXTURES

from prefixscope.ingest import read_requests
from prefixscope.ingest.formats import all_formats, blocktrace
from prefixscope.ingest.probing import probe
from prefixscope.ingest.source import Source
from prefixscope.model.keys import prefix_chain

BT = FIXTURES / "block-trace"
EPOCH = datetime(1970, 1, 1)


def _detected(path: Path) -> list[str]:
    pr = probe(Source.from_path(path))
    return [m.NAME for m in all_formats() if m.sniff(pr)]


class TestBlockTraceDetection:
    @pytest.mark.parametrize("name", ["qwen_chain_blksz_16.jsonl", "mooncake_sample.jsonl",
                                      "bailian_no_size_in_name.jsonl"])
    def test_fixtures_detected(self, name: str) -> None:
        assert _detected(BT / name) == ["block-trace"]

    def test_json_array_not_claimed(self, tmp_path: Path) -> None:
        path = tmp_path / "arr.json"
        path.write_text('[{"timestamp": 0, "input_length": 1, "output_length": 1, '
                        '"hash_ids": [1]}]')
        assert not blocktrace.sniff(probe(Source.from_path(path)))

    def test_first_line_longer_than_probe_window(self, tmp_path: Path) -> None:
        ids = list(range(20000))
        path = tmp_path / "long_blksz_16.jsonl"
        path.write_text('{"chat_id": 1, "parent_chat_id": -1, "timestamp": 1.5, '
                        '"input_length": 320000, "output_length": 2, "type": "file", "turn": 1, '
                        f'"hash_ids": {ids}}}\n'
                        '{"chat_id": 2, "parent_chat_id": 1, "timestamp": 9.0, "input_length": 16, '
                        '"output_length": 2, "type": "text", "turn": 2, "hash_ids": [0]}\n')
        pr = probe(Source.from_path(path))
        assert (pr.kind, pr.first["chat_id"]) == ("jsonl", 1)
        assert blocktrace.sniff(pr)
        requests, skips = read_requests(path)
        assert skips == [] and [len(r.block_hashes) for r in requests] == [20000, 1]


@pytest.fixture(scope="module")
def parsed():
    return read_requests(BT / "qwen_chain_blksz_16.jsonl")


class TestBailianChain:
    def test_chat_ids_and_parent_links(self, parsed) -> None:
        requests, _ = parsed
        assert [(r.native_id, r.parent_key) for r in requests] == [
            ("10", None), ("20", None), ("11", "10"), ("12", "11")]
        assert all(r.session_key is None for r in requests)

    def test_block_size_and_hashes(self, parsed) -> None:
        requests, _ = parsed
        assert {r.block_size for r in requests} == {16}
        assert requests[3].block_hashes == (1, 2, 3, 4, 5, 6)

    def test_timestamps_are_second_offsets(self, parsed) -> None:
        requests, _ = parsed
        assert requests[2].timestamp == EPOCH + timedelta(seconds=61.114)
        assert requests[2].metadata == {"trace_timestamp": 61.114, "trace": "bailian", "turn": 2}

    def test_usage_and_client(self, parsed) -> None:
        r = parsed[0][1]
        assert (r.usage.prompt_tokens, r.usage.cached_tokens, r.usage.cache_write_tokens,
                r.usage.output_tokens, r.usage.semantics) == (33, None, None, 7, "trace")
        assert (r.client, r.body, r.endpoint) == ("search", None, "unknown")

    def test_bad_lines(self, parsed) -> None:
        _, skips = parsed
        assert [(s.line, s.reason) for s in skips if not s.reason.startswith("invalid JSON")] == [
            (5, "no `hash_ids` list"), (7, "no integer `input_length`")]
        assert [s.line for s in skips if s.reason.startswith("invalid JSON")] == [6]

    def test_bailian_without_size_in_name_defaults_to_16(self) -> None:
        requests, _ = read_requests(BT / "bailian_no_size_in_name.jsonl")
        assert (requests[0].block_size, requests[0].parent_key) == (16, "55")

    def test_prefix_chain_uses_full_blocks_only(self, parsed) -> None:
        chain, length = prefix_chain(parsed[0][2])  # 70 tokens / 16 = 4 full blocks
        assert (chain, length) == ([1, 2, 3, 4], 4)


class TestMooncake:
    def test_ms_offsets_and_512_blocks(self) -> None:
        requests, skips = read_requests(BT / "mooncake_sample.jsonl")
        assert len(requests) == 3
        assert requests[0].timestamp == EPOCH + timedelta(milliseconds=27482)
        assert {r.block_size for r in requests} == {512}
        assert requests[0].block_hashes[-2:] == (2353, 2354)
        first = requests[0]
        assert (first.native_id, first.parent_key, first.client) == (None, None, None)
        assert [(s.line, s.reason) for s in skips] == [
            (4, "`hash_ids` holds a value that is not an integer"),
            (5, "line is a JSON list, not a trace record")]

    def test_identical_lines_get_distinct_stable_ids(self) -> None:
        a, _ = read_requests(BT / "mooncake_sample.jsonl")
        b, _ = read_requests(BT / "mooncake_sample.jsonl")
        assert len({r.id for r in a}) == 3
        assert [r.id for r in a] == [r.id for r in b]


class TestBlockTraceRealFiles:
    @pytest.mark.parametrize(("name", "count", "last_offset_ms"), [
        ("conversation_trace.jsonl", 12031, 3536999), ("synthetic_trace.jsonl", 3993, 1022025)])
    def test_mooncake_ingests_fully(self, real: Path, name: str, count: int,
                                    last_offset_ms: int) -> None:
        requests, skips = read_requests(real / "mooncake" / name)
        assert (len(requests), skips) == (count, [])
        assert len({r.id for r in requests}) == count
        assert requests[-1].timestamp == EPOCH + timedelta(milliseconds=last_offset_ms)
        assert {r.block_size for r in requests} == {512}
        assert {r.source_format for r in requests} == {"block-trace"}

    def test_mooncake_first_requests(self, real: Path) -> None:
        requests, _ = read_requests(real / "mooncake" / "conversation_trace.jsonl")
        first = requests[0]
        assert (first.usage.prompt_tokens, first.usage.output_tokens) == (6758, 500)
        assert first.block_hashes == tuple(range(14))
        assert requests[1].block_hashes[:2] == (0, 14)
