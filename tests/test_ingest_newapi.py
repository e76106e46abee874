"""new-api `logs` ingest: SQLite database in place, CSV / JSON / JSONL exports (formats.md §2)."""

from __future__ import annotations

import sqlite3
from datetime import datetime
from pathlib import Path

import pytest
from builders import make_newapi_db, newapi_consume_row
from conftest import FIXTURES

from prefixscope.ingest import read_requests
from prefixscope.ingest.formats import bifrost, litellm, newapi
from prefixscope.ingest.probing import probe
from prefixscope.ingest.source import Source

NEWAPI = FIXTURES / "newapi"

CLAUDE_OTHER = {"cache_tokens": 48211, "cache_ratio": 0.1, "cache_creation_tokens": 1520,
                "cache_creation_ratio": 1.25, "claude": True, "frt": 1840,
                "request_path": "/v1/messages", "admin_info": {"use_channel": ["12"]}}
CONVERTED_OTHER = {"cache_tokens": 17920, "cache_ratio": 0.1, "frt": 2950, "is_model_mapped": True,
                   "upstream_model_name": "deepseek-v4", "request_path": "/v1/messages",
                   "request_conversion": ["Claude Messages", "OpenAI Compatible"]}


def _db(tmp_path: Path, rows: list[dict], **kwargs) -> Path:
    return make_newapi_db(tmp_path / "one-api.db", rows, **kwargs)


def _counts(usage) -> tuple:
    return (usage.prompt_tokens, usage.cached_tokens, usage.cache_write_tokens, usage.output_tokens)


def _by_native(requests):
    return {r.native_id: r for r in requests}


@pytest.fixture
def mixed_db(tmp_path: Path) -> Path:
    """Claude-upstream rows, a converted Claude->OpenAI row, a top-up and an error row."""
    return _db(tmp_path, [
        newapi_consume_row(1, created_at=1760000000, prompt_tokens=3, completion_tokens=412,
                           request_id="req-claude-1", other=CLAUDE_OTHER),
        newapi_consume_row(2, created_at=1760000030, prompt_tokens=7, completion_tokens=96,
                           request_id="req-claude-2",
                           other={**CLAUDE_OTHER, "cache_tokens": 49731,
                                  "cache_creation_tokens": 0}),
        newapi_consume_row(3, created_at=1760000090, prompt_tokens=51478, completion_tokens=380,
                           channel_id=31, request_id="req-conv-3", other=CONVERTED_OTHER),
        {"id": 4, "user_id": 7, "created_at": 1760000100, "type": 1, "username": "alice",
         "content": "通过兑换码充值 $10.000000 额度", "quota": 5000000, "other": ""},
        newapi_consume_row(5, created_at=1760000120, prompt_tokens=0, completion_tokens=0, type=5,
                           content="status_code=429", request_id="req-err-5",
                           other={"error_type": "upstream_error", "status_code": 429}),
    ])


class TestNewApiSniff:
    def test_sqlite_logs_table_is_recognized(self, mixed_db: Path) -> None:
        assert newapi.sniff(probe(Source.from_path(mixed_db)))

    def test_gateway_formats_do_not_claim_a_newapi_db(self, mixed_db: Path) -> None:
        pr = probe(Source.from_path(mixed_db))
        assert not litellm.sniff(pr)
        assert not bifrost.sniff(pr)

    @pytest.mark.parametrize("name", ["logs.csv", "api_logs_page.json", "bad_rows.jsonl"])
    def test_exports_are_recognized(self, name: str) -> None:
        pr = probe(Source.from_path(NEWAPI / name))
        assert newapi.sniff(pr)
        assert not litellm.sniff(pr)
        assert not bifrost.sniff(pr)

    def test_sqlite_without_newapi_columns_is_not_claimed(self, tmp_path: Path) -> None:
        path = tmp_path / "other.db"
        con = sqlite3.connect(path)
        con.execute("CREATE TABLE logs (id integer, type integer, content text, model_name text)")
        con.commit()
        con.close()
        assert not newapi.sniff(probe(Source.from_path(path)))

    def test_auto_detection_picks_newapi(self, mixed_db: Path) -> None:
        requests, skips = read_requests(mixed_db)
        assert skips == []
        assert {r.source_format for r in requests} == {"new-api"}


class TestNewApiRequests:
    def test_only_consume_rows_are_requests(self, mixed_db: Path) -> None:
        requests, skips = read_requests(mixed_db, "new-api")
        assert [r.native_id for r in requests] == ["req-claude-1", "req-claude-2", "req-conv-3"]
        assert skips == []  # top-up and error rows are not requests and not errors

    def test_fields_map_from_columns(self, mixed_db: Path) -> None:
        first = read_requests(mixed_db)[0][0]
        assert first.timestamp == datetime(2025, 10, 9, 8, 53, 20)
        assert first.user == "alice"
        assert first.client == "claude-code"
        assert first.channel == "12"
        assert first.model == "claude-sonnet-4-5"
        assert first.body is None
        assert first.session_key is None
        assert first.source_line == 1
        assert first.metadata["log_id"] == 1
        assert first.metadata["frt_ms"] == 1840
        assert first.metadata["is_stream"] is True

    def test_ids_are_stable_across_reads(self, mixed_db: Path) -> None:
        ids_a = [r.id for r in read_requests(mixed_db)[0]]
        ids_b = [r.id for r in read_requests(mixed_db)[0]]
        assert ids_a == ids_b
        assert len(set(ids_a)) == 3

    def test_native_id_falls_back_to_log_id_without_request_id(self, tmp_path: Path) -> None:
        row = newapi_consume_row(42, other=CLAUDE_OTHER)
        del row["request_id"]
        requests, skips = read_requests(_db(tmp_path, [row], with_request_id=False))
        assert skips == []
        assert requests[0].native_id == "log:42"

    def test_daily_fork_tables_are_read_after_logs(self, tmp_path: Path) -> None:
        path = _db(tmp_path, [newapi_consume_row(1, request_id="r-main")])
        make_newapi_db(path, [newapi_consume_row(1, request_id="r-day")], table="logs_2025_10_09")
        requests, skips = read_requests(path)
        assert skips == []
        assert [r.native_id for r in requests] == ["r-main", "r-day"]
        assert requests[1].metadata["table"] == "logs_2025_10_09"

    def test_daily_tables_without_request_id_get_distinct_keys(self, tmp_path: Path) -> None:
        path = tmp_path / "fork.db"
        for table in ("logs_2025_10_09", "logs_2025_10_10"):
            row = newapi_consume_row(1)
            del row["request_id"]
            make_newapi_db(path, [row], table=table, with_request_id=False)
        requests, _ = read_requests(path)
        assert len({r.id for r in requests}) == 2

    def test_task_requota_rows_are_not_requests(self, tmp_path: Path) -> None:
        row = newapi_consume_row(9, other={"task_id": "task_abc", "quota_delta": -120,
                                           "pre_consumed": 1000, "actual_quota": 880})
        assert read_requests(_db(tmp_path, [row]))[0] == []


class TestNewApiUsage:
    def test_claude_upstream_adds_cache_to_prompt(self, mixed_db: Path) -> None:
        usage = _by_native(read_requests(mixed_db)[0])["req-claude-1"].usage
        assert usage.prompt_tokens == 3 + 48211 + 1520
        assert usage.cached_tokens == 48211
        assert usage.cache_write_tokens == 1520
        assert usage.output_tokens == 412
        assert usage.semantics == "new-api:claude"

    def test_claude_upstream_zero_write_is_reported_zero(self, mixed_db: Path) -> None:
        usage = _by_native(read_requests(mixed_db)[0])["req-claude-2"].usage
        assert usage.prompt_tokens == 7 + 49731
        assert usage.cache_write_tokens == 0

    def test_openai_upstream_prompt_already_includes_cache(self, mixed_db: Path) -> None:
        usage = _by_native(read_requests(mixed_db)[0])["req-conv-3"].usage
        assert usage.prompt_tokens == 51478
        assert usage.cached_tokens == 17920
        assert usage.cache_write_tokens is None
        assert usage.semantics == "new-api:openai"

    def test_claude_write_from_5m_1h_split_when_total_missing(self, tmp_path: Path) -> None:
        other = {"claude": True, "cache_tokens": 100, "cache_creation_tokens_5m": 64,
                 "cache_creation_tokens_1h": 128}
        row = newapi_consume_row(1, prompt_tokens=2, other=other)
        usage = read_requests(_db(tmp_path, [row]))[0][0].usage
        assert usage.cache_write_tokens == 192
        assert usage.prompt_tokens == 2 + 100 + 192

    def test_claude_one_hour_writes_are_kept_apart(self, tmp_path: Path) -> None:
        # the row the accuracy corpus found misread: every write a 1-hour one
        other = {"claude": True, "cache_tokens": 8714, "cache_creation_tokens": 952,
                 "cache_creation_tokens_5m": 0, "cache_creation_tokens_1h": 952}
        row = newapi_consume_row(1, prompt_tokens=2, other=other)
        usage = read_requests(_db(tmp_path, [row]))[0][0].usage
        assert (usage.prompt_tokens, usage.cached_tokens, usage.cache_write_tokens,
                usage.cache_write_1h_tokens) == (2 + 8714 + 952, 8714, 952, 952)

    def test_a_split_of_five_minute_writes_says_none_were_for_the_hour(
            self, tmp_path: Path) -> None:
        other = {"claude": True, "cache_tokens": 10, "cache_creation_tokens": 300,
                 "cache_creation_tokens_5m": 300}
        row = newapi_consume_row(1, prompt_tokens=2, other=other)
        assert read_requests(_db(tmp_path, [row]))[0][0].usage.cache_write_1h_tokens == 0

    def test_no_split_is_no_ttl_said(self, mixed_db: Path) -> None:
        usage = _by_native(read_requests(mixed_db)[0])["req-claude-1"].usage
        assert usage.cache_write_1h_tokens is None

    def test_invalid_other_keeps_logged_tokens_unknown_convention(self, tmp_path: Path) -> None:
        row = newapi_consume_row(1, prompt_tokens=900, completion_tokens=10,
                                 other='{"cache_tokens": 12')
        request = read_requests(_db(tmp_path, [row]))[0][0]
        assert request.usage.prompt_tokens == 900
        assert request.usage.cached_tokens is None
        assert request.usage.semantics == "new-api:unknown"
        assert request.metadata["other_error"] == "`other` is not valid JSON"
        assert request.endpoint == "unknown"

    def test_bucket_builder_rows_keep_exact_cached_constant(self, tmp_path: Path) -> None:
        rows = [newapi_consume_row(i, created_at=1760000000 + 30 * i, prompt_tokens=60000 + i,
                                   other={**CONVERTED_OTHER, "cache_tokens": 17920})
                for i in range(1, 41)]
        requests, _ = read_requests(_db(tmp_path, rows))
        assert len(requests) == 40
        assert {r.usage.cached_tokens for r in requests} == {17920}
        assert sum(r.usage.prompt_tokens for r in requests) == 40 * 60000 + sum(range(1, 41))


class TestNewApiGatewayAndEndpoint:
    def test_claude_to_openai_conversion_is_the_gateway(self, mixed_db: Path) -> None:
        request = _by_native(read_requests(mixed_db)[0])["req-conv-3"]
        assert request.gateway == "anthropic-to-openai"
        assert request.endpoint == "anthropic-messages"
        assert request.metadata["request_conversion"] == ["Claude Messages", "OpenAI Compatible"]
        assert request.metadata["upstream_model_name"] == "deepseek-v4"
        assert request.channel == "31"

    def test_no_conversion_no_gateway(self, mixed_db: Path) -> None:
        assert _by_native(read_requests(mixed_db)[0])["req-claude-1"].gateway is None

    @pytest.mark.parametrize(("path", "endpoint"), [
        ("/v1/messages", "anthropic-messages"),
        ("/v1/messages?beta=true", "anthropic-messages"),
        ("/v1/chat/completions", "openai-chat"),
        ("/pg/chat/completions", "openai-chat"),
        ("/v1/responses", "openai-responses"),
        ("/v1/embeddings", "unknown"),
    ])
    def test_endpoint_from_request_path(self, tmp_path: Path, path: str, endpoint: str) -> None:
        row = newapi_consume_row(1, other={"cache_tokens": 0, "request_path": path})
        assert read_requests(_db(tmp_path, [row]))[0][0].endpoint == endpoint


class TestNewApiExports:
    def test_csv_export(self) -> None:
        requests, skips = read_requests(NEWAPI / "logs.csv")
        assert skips == []
        assert [r.native_id for r in requests] == [
            "20251009123456789abcdef", "20251009123527001abcdef", "20251009123630555abcdef",
            "20251009124000777abcdef", "20251009124100888abcdef"]
        assert [r.source_line for r in requests] == [1, 2, 3, 6, 7]
        claude, claude2, converted, plain, broken = requests
        assert _counts(claude.usage) == (49734, 48211, 1520, 412)
        assert claude2.usage.prompt_tokens == 49736
        assert converted.gateway == "anthropic-to-openai"
        assert (converted.usage.prompt_tokens, converted.usage.cached_tokens) == (51478, 17920)
        assert (plain.user, plain.client, plain.channel, plain.endpoint) \
            == ("bob", "ci-bot", "5", "openai-chat")
        assert plain.usage.cached_tokens == 0
        assert plain.metadata["is_stream"] is False
        assert broken.usage.semantics == "new-api:unknown"

    def test_api_page_json_with_channel_key_and_no_request_id(self) -> None:
        requests, skips = read_requests(NEWAPI / "api_logs_page.json")
        assert skips == []
        assert [r.native_id for r in requests] == ["log:203", "log:202", "log:200"]
        opus, responses, deepseek = requests
        assert opus.channel == "2"
        assert opus.metadata["channel_name"] == "anthropic-direct"
        assert (opus.usage.prompt_tokens, opus.usage.cached_tokens, opus.usage.cache_write_tokens) \
            == (12 + 30000 + 2048, 30000, 2048)
        assert responses.endpoint == "openai-responses"
        assert responses.gateway == "openai-responses-to-openai"
        assert (deepseek.usage.prompt_tokens, deepseek.usage.cached_tokens) == (4000, 3968)
        assert deepseek.timestamp == datetime(2025, 10, 10, 12, 40)


class TestNewApiBadInput:
    def test_bad_rows_are_skipped_with_reasons(self) -> None:
        requests, skips = read_requests(NEWAPI / "bad_rows.jsonl")
        assert [r.native_id for r in requests] == ["req-301", "req-306"]
        assert [s.line for s in skips] == [2, 3, 4, 5]
        assert skips[0].reason.startswith("invalid JSON")
        assert skips[1].reason == "log row has no numeric `type` (got None)"
        assert skips[2].reason == "log row is a list, not an object"
        assert skips[3].reason == "consume row has neither `id` nor `request_id`"

    def test_other_that_is_not_an_object_is_noted(self) -> None:
        requests, _ = read_requests(NEWAPI / "bad_rows.jsonl")
        assert requests[1].metadata["other_error"] == "`other` is a JSON list, not an object"
        assert requests[1].usage.prompt_tokens == 700

    def test_claude_row_in_jsonl(self) -> None:
        request = read_requests(NEWAPI / "bad_rows.jsonl")[0][0]
        assert request.usage.prompt_tokens == 10 + 4000 + 64
        assert request.usage.semantics == "new-api:claude"


class TestNewApiOnRealData:
    def test_no_real_file_is_claimed(self, real: Path) -> None:
        for path in sorted(p for p in real.rglob("*") if p.is_file() and p.suffix != ".md"):
            pr = probe(Source.from_path(path))
            assert not newapi.sniff(pr), path
