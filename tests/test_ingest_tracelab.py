"""TraceLab round traces: provider-reported usage per Claude Code / Codex round."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from conftest import FIXTURES

from prefixscope.ingest import read_requests
from prefixscope.ingest.formats import all_formats, tracelab
from prefixscope.ingest.probing import probe
from prefixscope.ingest.source import Source

ROUNDS = FIXTURES / "tracelab" / "rounds.jsonl"


def _counts(usage) -> tuple:
    return (usage.prompt_tokens, usage.cached_tokens, usage.cache_write_tokens, usage.output_tokens)


def _real_rounds(real: Path, variant: str) -> Path:
    return real / "tracelab" / "example_sessions" / variant / "round_trace.jsonl"


@pytest.fixture(scope="module")
def parsed():
    return read_requests(ROUNDS)


class TestTracelabDetection:
    def test_fixture_detected_only_as_tracelab(self) -> None:
        pr = probe(Source.from_path(ROUNDS))
        assert [m.NAME for m in all_formats() if m.sniff(pr)] == ["tracelab"]

    def test_other_jsonl_not_claimed(self, tmp_path: Path) -> None:
        path = tmp_path / "x.jsonl"
        path.write_text('{"session_id": "s", "round_id": "r", "input_tokens": 5}\n')
        assert not tracelab.sniff(probe(Source.from_path(path)))


class TestTracelabUsage:
    def test_claude_round_uses_provider_split(self, parsed) -> None:
        r = parsed[0][0]
        assert _counts(r.usage) == (32272, 27217, 2163, 931)
        assert r.usage.semantics == "tracelab:claude"

    def test_codex_round_has_no_cache_write(self, parsed) -> None:
        r = parsed[0][1]
        assert _counts(r.usage) == (10152, 3456, None, 233)
        assert r.usage.semantics == "tracelab:codex"
        assert r.metadata["reasoning_output_tokens"] == 26
        assert r.metadata["newly_append_tokens"] == 6696

    def test_unreported_counters_stay_none(self, parsed) -> None:
        r = parsed[0][2]
        assert _counts(r.usage) == (10500, None, None, None)
        assert r.timestamp is None


class TestTracelabFields:
    def test_session_round_model_client(self, parsed) -> None:
        r = parsed[0][0]
        assert (r.session_key, r.session_key_source, r.native_id) == (
            "claude:s-1", "tracelab.session_id", "msg_r0")
        assert (r.model, r.client, r.body, r.endpoint) == (
            "claude-opus-4-8", "claude", None, "unknown")
        assert r.timestamp == datetime(2026, 6, 1, 5, 40, 20, 151000)
        assert r.metadata["tool_names"] == ["Bash"]

    def test_bad_lines_are_skips(self, parsed) -> None:
        requests, skips = parsed
        assert len(requests) == 3
        assert [s.line for s in skips] == [3, 5, 6]
        assert skips[0].reason == "round without `session_id` or `round_id`"
        assert skips[1].reason.startswith("invalid JSON")
        assert skips[2].reason == "line is a JSON str, not a round record"


class TestTracelabRealFiles:
    @pytest.mark.parametrize("variant", ["derived", "sanitized"])
    def test_19_rounds_in_two_sessions(self, real: Path, variant: str) -> None:
        requests, skips = read_requests(_real_rounds(real, variant))
        assert (len(requests), skips) == (19, [])
        assert len({r.id for r in requests}) == 19
        by_provider = {p: [r for r in requests if r.client == p] for p in ("claude", "codex")}
        assert {p: len(v) for p, v in by_provider.items()} == {"claude": 10, "codex": 9}
        assert len({r.session_key for r in requests}) == 2

    def test_sanitized_claude_rounds_add_up(self, real: Path) -> None:
        requests, _ = read_requests(_real_rounds(real, "sanitized"))
        for r in requests:
            if r.client == "claude":
                uncached = r.metadata["claude_uncached_input_tokens"]
                assert r.usage.prompt_tokens == (uncached + r.usage.cached_tokens
                                                 + r.usage.cache_write_tokens)
        first = requests[0]
        assert _counts(first.usage) == (32272, 27217, 2163, 931)
        assert first.timestamp == datetime(2026, 6, 1, 5, 40, 20, 151000)
        codex = [r for r in requests if r.client == "codex"]
        assert [r.usage.cached_tokens for r in codex][:4] == [6912, 9600, 9856, 3456]
