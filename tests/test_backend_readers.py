"""The backend that served each call, read from every format that records it (issue 40
item 2), so that a session a gateway spread over backends hops between them in the
ledger (``routing``, tests/test_routing.py):

* a raw capture of OpenRouter: its Chat completion's top-level ``provider`` (also on each
  chunk of a stream), where the capture's host (``openrouter.ai``) names one backend;
* new-api: on a multi-key channel, the key that served the call
  (``other.admin_info.is_multi_key`` + ``multi_key_index``; a direct relay's
  ``other.multi_key_index``): each key is an account of its own upstream;
* Langfuse generations LiteLLM's callback logged: the deployment in
  ``metadata.hidden_params.model_id`` (and ``api_base``);
* Bifrost: the provider key its weighted key selection chose (``selected_key_name``,
  else ``selected_key_id``);
* OpenRouter's generation records (``GET /api/v1/generation``, saved one per call):
  ``provider_name``.

Each sample is small and shaped as the product writes it (OpenRouter's response fields,
new-api's ``GenerateTextOtherInfo`` keys, LiteLLM's ``StandardLoggingPayload``
``hidden_params``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.findings.bundle import backend
from prefixscope.ingest import read_requests
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths

runner = CliRunner()

SYSTEM = "You are a careful code reviewer. Answer briefly and cite line numbers. " * 40
TURNS = ["Review utils.py: is parse_date correct?", "And the timezone handling?",
         "Suggest a test for it."]


def _messages(n: int) -> list[dict]:
    """The conversation as the n-th call (0-based) sends it: append-only."""
    out: list[dict] = [{"role": "system", "content": SYSTEM}]
    for i in range(n + 1):
        out.append({"role": "user", "content": TURNS[i]})
        if i < n:
            out.append({"role": "assistant", "content": f"Answer {i}."})
    return out


def _usage(prompt: int, cached: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": 40, "total_tokens": prompt + 40,
            "cost": 0.0031, "is_byok": False,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0}}


def _completion(i: int, provider: str, prompt: int, cached: int) -> dict:
    return {"id": f"gen-1764921600-or{i}", "provider": provider, "model": "openai/gpt-5",
            "object": "chat.completion", "created": 1764921600 + 60 * i,
            "choices": [{"index": 0, "logprobs": None, "finish_reason": "stop",
                         "native_finish_reason": "completed",
                         "message": {"role": "assistant", "content": f"Answer {i}.",
                                     "refusal": None, "reasoning": None}}],
            "usage": _usage(prompt, cached)}


def _stream(i: int, provider: str, prompt: int, cached: int) -> str:
    head = {"id": f"gen-1764921600-or{i}", "provider": provider, "model": "openai/gpt-5",
            "object": "chat.completion.chunk", "created": 1764921600 + 60 * i}
    chunks = [
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Answer "},
                              "finish_reason": None, "native_finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": f"{i}."},
                              "finish_reason": "stop", "native_finish_reason": "completed"}]},
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                              "finish_reason": None, "native_finish_reason": None}],
         "usage": _usage(prompt, cached)},
    ]
    return (": OPENROUTER PROCESSING\n\n"
            + "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n")


# (provider, prompt tokens, cached tokens, streamed): OpenRouter sent the session's first
# call to OpenAI, the next two to Azure. On Azure the second call read nothing; the third
# read what the second left.
OPENROUTER_CALLS = (("OpenAI", 2_000, 0, False), ("Azure", 2_300, 0, False),
                    ("Azure", 2_600, 2_176, True))


def _capture(path: Path) -> Path:
    lines = []
    for i, (provider, prompt, cached, streamed) in enumerate(OPENROUTER_CALLS):
        body = {"model": "openai/gpt-5", "messages": _messages(i), "usage": {"include": True},
                "stream": streamed}
        response: dict = {"status_code": 200}
        if streamed:
            response["headers"] = {"content-type": "text/event-stream"}
            response["body_raw"] = _stream(i, provider, prompt, cached)
        else:
            response["headers"] = {"content-type": "application/json"}
            response["body"] = _completion(i, provider, prompt, cached)
        lines.append({
            "timestamp": f"2026-12-05T08:0{i}:00Z",
            "request": {"method": "POST", "url": "https://openrouter.ai/api/v1/chat/completions",
                        "headers": {"content-type": "application/json",
                                    "x-session-id": "review-1", "x-title": "reviewer"},
                        "body": body},
            "response": response})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


class TestOpenRouterCapture:
    def test_each_calls_provider_is_its_backend(self, tmp_path: Path) -> None:
        requests, skips = read_requests(_capture(tmp_path / "or.jsonl"))
        assert skips == []
        assert [r.metadata.get("provider") for r in requests] == ["OpenAI", "Azure", "Azure"]
        assert [backend(r) for r in requests] == ["OpenAI", "Azure", "Azure"]
        assert {r.channel for r in requests} == {"openrouter.ai"}

    def test_the_stream_keeps_its_usage(self, tmp_path: Path) -> None:
        requests, _ = read_requests(_capture(tmp_path / "or.jsonl"))
        last = requests[2]
        assert (last.usage.prompt_tokens, last.usage.cached_tokens) == (2_600, 2_176)
        assert last.metadata.get("streamed") is True

    def test_the_hop_is_routing_with_openrouters_knob(self, tmp_path: Path) -> None:
        # OpenAI's rules (128-token steps, never the last token): call 2 shared the first
        # call's 2,000 tokens, X = floor(2,000 / 128) * 128 = 1,920, read 0 on Azure:
        # routing 1,920. Call 3 on Azure read 2,176 of X = floor(2,300 / 128) * 128 = 2,176.
        result = runner.invoke(app, ["report", str(_capture(tmp_path / "or.jsonl")),
                                     "--json"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        assert doc["ledger"]["by_cause"]["routing"] == 1_920
        [f] = [f for f in doc["findings"] if f["kind"] == "backend-hop"]
        assert f["evidence"]["hops"] == {"OpenAI -> Azure": {"requests": 1, "tokens": 1_920}}
        assert f["evidence"]["gateway"] == "openrouter"
        assert "allow_fallbacks: false" in f["fix"]

    def test_a_response_without_provider_names_the_host(self, tmp_path: Path) -> None:
        path = _capture(tmp_path / "or.jsonl")
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        del lines[0]["response"]["body"]["provider"]
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        requests, _ = read_requests(path)
        assert "provider" not in requests[0].metadata
        assert backend(requests[0]) == "openrouter.ai"


def _newapi_row(i: int, channel: int, other: dict) -> dict:
    return {"id": 9100 + i, "user_id": 7, "created_at": 1764921600 + 60 * i, "type": 2,
            "content": "模型倍率 1.50，补全倍率 5.00，分组倍率 1.00", "username": "alice",
            "token_name": "claude-code", "model_name": "claude-sonnet-4-5", "quota": 21345,
            "prompt_tokens": 3, "completion_tokens": 412, "use_time": 7, "is_stream": True,
            "channel": channel, "token_id": 44, "group": "default", "ip": "",
            "request_id": f"20261205080{i}00abcdef",
            "other": json.dumps({"cache_tokens": 48_211, "cache_ratio": 0.1,
                                 "cache_creation_tokens": 1_520, "cache_creation_ratio": 1.25,
                                 "claude": True, "frt": 1840, "model_ratio": 1.5,
                                 "group_ratio": 1, "completion_ratio": 5,
                                 "request_path": "/v1/messages", **other})}


class TestNewApiMultiKeyChannel:
    @pytest.fixture
    def requests(self, tmp_path: Path):
        rows = [
            _newapi_row(0, 12, {"admin_info": {"use_channel": ["12"], "is_multi_key": True,
                                               "multi_key_index": 0}}),
            _newapi_row(1, 12, {"admin_info": {"use_channel": ["12"], "is_multi_key": True,
                                               "multi_key_index": 2}}),
            # a retry from channel 9 to 7: the row's channel is the one that served it
            _newapi_row(2, 7, {"admin_info": {"use_channel": ["9", "7"]}}),
            # a direct relay logs the key index at the top of `other`
            _newapi_row(3, 12, {"direct_relay": True, "multi_key_index": 1}),
        ]
        path = tmp_path / "logs.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        requests, skips = read_requests(path)
        assert skips == []
        return requests

    def test_the_key_of_a_multi_key_channel_is_the_backend(self, requests) -> None:
        assert [r.metadata.get("deployment") for r in requests] == [
            "12 key 0", "12 key 2", None, "12 key 1"]
        assert [backend(r) for r in requests] == ["12 key 0", "12 key 2", "7", "12 key 1"]

    def test_the_channel_stays_the_channel(self, requests) -> None:
        assert [r.channel for r in requests] == ["12", "12", "7", "12"]


def _generation(i: int, deployment: str) -> dict:
    """A generation as LiteLLM's Langfuse callback writes it (v1 observations page row)."""
    return {
        "id": f"time-08-0{i}-00-litellm-{i}", "traceId": f"litellm-call-{i}",
        "type": "GENERATION", "name": "litellm-acompletion",
        "startTime": f"2026-12-05T08:0{i}:00.000Z", "endTime": f"2026-12-05T08:0{i}:04.000Z",
        "model": "claude-sonnet-4-5-20250929", "modelParameters": {"max_tokens": "1024"},
        "input": {"messages": _messages(i)},
        "output": {"role": "assistant", "content": f"Answer {i}."},
        "usageDetails": {"input": 900, "output": 40, "total": 940,
                         "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0},
        "metadata": {"hidden_params": {"model_id": deployment, "cache_key": None,
                                       "api_base": f"https://{deployment}.openai.azure.com",
                                       "response_cost": 0.0031},
                     "api_base": f"https://{deployment}.openai.azure.com",
                     "litellm_response_cost": 0.0031, "user_api_key_alias": "reviewer"},
        "sessionId": "review-1", "level": "DEFAULT", "statusMessage": None,
    }


class TestLangfuseFromLiteLLM:
    def test_the_deployment_litellm_logged_is_the_backend(self, tmp_path: Path) -> None:
        page = {"data": [_generation(0, "dep-east"), _generation(1, "dep-west")],
                "meta": {"page": 1, "limit": 50, "totalItems": 2, "totalPages": 1}}
        path = tmp_path / "observations.json"
        path.write_text(json.dumps(page), encoding="utf-8")
        requests, skips = read_requests(path)
        assert skips == []
        assert [r.metadata.get("model_id") for r in requests] == ["dep-east", "dep-west"]
        assert [backend(r) for r in requests] == ["dep-east", "dep-west"]
        assert requests[0].metadata.get("api_base") == "https://dep-east.openai.azure.com"

    def test_a_generation_without_it_has_none(self, tmp_path: Path) -> None:
        row = _generation(0, "dep-east")
        row["metadata"] = {}
        page = {"data": [row], "meta": {"page": 1, "limit": 50, "totalItems": 1,
                                        "totalPages": 1}}
        path = tmp_path / "observations.json"
        path.write_text(json.dumps(page), encoding="utf-8")
        requests, _ = read_requests(path)
        assert "model_id" not in requests[0].metadata
        assert "api_base" not in requests[0].metadata


def _generation_record(i: int, provider: str, prompt: int, cached: int) -> dict:
    """An OpenRouter generation record (GET /api/v1/generation's ``data``)."""
    return {"id": f"gen-17649216{i:02d}-aB3dE5fG7hJ9kL1m", "upstream_id": f"msg_01X{i}",
            "total_cost": 0.0123, "cache_discount": 0.0054 if cached else None,
            "upstream_inference_cost": None,
            "created_at": f"2026-12-05T08:0{i}:00.000000+00:00",
            "model": "anthropic/claude-sonnet-4.5", "app_id": 2872617, "streamed": True,
            "cancelled": False, "provider_name": provider, "latency": 1016,
            "moderation_latency": None, "generation_time": 2940, "finish_reason": "stop",
            "native_finish_reason": "end_turn", "tokens_prompt": prompt - 700,
            "tokens_completion": 116, "native_tokens_prompt": prompt,
            "native_tokens_completion": 98, "native_tokens_completion_images": None,
            "native_tokens_reasoning": 0, "native_tokens_cached": cached,
            "num_media_prompt": None, "num_input_audio_prompt": None,
            "num_media_completion": None, "num_search_results": None,
            "origin": "https://reviewer.example/", "usage": 0.0123, "is_byok": False,
            "external_user": "alice", "api_type": "completions"}


# Claude Sonnet 4.5 through OpenRouter, a minute apart: Anthropic served the first call,
# Amazon Bedrock the next two (prompt tokens, cached tokens)
GENERATIONS = (("Anthropic", 20_000, 0), ("Amazon Bedrock", 24_000, 0),
               ("Amazon Bedrock", 26_000, 23_998))


def _generations(path: Path) -> Path:
    rows = [{"data": _generation_record(i, *g)} for i, g in enumerate(GENERATIONS)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


class TestOpenRouterGenerationRecords:
    def test_only_this_format_claims_them(self, tmp_path: Path) -> None:
        from prefixscope.ingest.formats import all_formats
        from prefixscope.ingest.probing import probe
        from prefixscope.ingest.source import Source

        pr = probe(Source.from_path(_generations(tmp_path / "gens.jsonl")))
        assert [m.NAME for m in all_formats() if m.sniff(pr)] == ["openrouter"]

    def test_provider_usage_and_who(self, tmp_path: Path) -> None:
        requests, skips = read_requests(_generations(tmp_path / "gens.jsonl"))
        assert skips == []
        assert [backend(r) for r in requests] == ["Anthropic", "Amazon Bedrock",
                                                  "Amazon Bedrock"]
        assert [(r.usage.prompt_tokens, r.usage.cached_tokens, r.usage.cache_write_tokens,
                 r.usage.output_tokens) for r in requests] == [
            (20_000, 0, None, 98), (24_000, 0, None, 98), (26_000, 23_998, None, 98)]
        first = requests[0]
        assert (first.native_id, first.model, first.user, first.client, first.channel) == (
            "gen-1764921600-aB3dE5fG7hJ9kL1m", "anthropic/claude-sonnet-4.5", "alice",
            "2872617", "openrouter")
        assert first.metadata["tokens_prompt"] == 19_300  # OpenRouter's normalized count

    def test_a_page_and_bare_records_read_the_same(self, tmp_path: Path) -> None:
        page = tmp_path / "page.json"
        page.write_text(json.dumps({"data": [_generation_record(i, *g)
                                             for i, g in enumerate(GENERATIONS)]}))
        bare = tmp_path / "bare.jsonl"
        bare.write_text("".join(json.dumps(_generation_record(i, *g)) + "\n"
                                for i, g in enumerate(GENERATIONS)))
        for path in (page, bare):
            requests, skips = read_requests(path)
            assert skips == []
            assert [r.metadata["provider"] for r in requests] == [
                "Anthropic", "Amazon Bedrock", "Amazon Bedrock"]

    def test_a_record_without_id_is_a_skip(self, tmp_path: Path) -> None:
        path = _generations(tmp_path / "gens.jsonl")
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        del rows[1]["data"]["id"]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        requests, skips = read_requests(path)
        assert len(requests) == 2
        assert [s.reason for s in skips] == ["generation record without `id`"]

    def test_the_hop_is_routing_with_openrouters_knob(self, tmp_path: Path) -> None:
        # threaded by growing prompt (one user, app, model); Anthropic's rules: call 2
        # could have read 20,000 - 2 = 19,998 of call 1's prompt (no write count: no cap)
        # and read 0 on Bedrock: routing 19,998. Call 3 read all 24,000 - 2 it could.
        # Pinned, call 2 reads those 19,998 tokens it paid at the input price ($3 / MTok;
        # the record has no write count): 19,998 x (3 - 0.30) / 1e6 dollars.
        result = runner.invoke(app, ["report", str(_generations(tmp_path / "gens.jsonl")),
                                     "--json"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        assert doc["ledger"]["by_cause"]["routing"] == 19_998
        [f] = [f for f in doc["findings"] if f["kind"] == "backend-hop"]
        assert f["evidence"]["hops"] == {
            "Anthropic -> Amazon Bedrock": {"requests": 1, "tokens": 19_998}}
        assert f["evidence"]["gateway"] == "openrouter"
        assert "allow_fallbacks: false" in f["fix"]
        [pin] = [w for w in doc["what_if"] if w["name"] == "pin-backend"]
        assert pin["saved_usd"] == pytest.approx(19_998 * 2.7 / 1e6, abs=1e-6)


def _bifrost_row(i: int, key_name: str | None, key_id: str | None) -> dict:
    """A Bifrost `logs` row (formats.md §8): its provider and the key it selected."""
    return {"id": f"b7e-{i}", "timestamp": f"2026-12-05 08:0{i}:00+00:00",
            "object_type": "chat.completion", "provider": "anthropic",
            "model": "claude-sonnet-4-5", "status": "success", "stream": 1,
            "input_history": json.dumps(_messages(min(i, 2))), "raw_request": "",
            "selected_key_id": key_id, "selected_key_name": key_name,
            "prompt_tokens": 51_478, "completion_tokens": 412, "total_tokens": 51_890,
            "cached_read_tokens": 48_211, "created_at": f"2026-12-05 08:0{i}:01+00:00"}


def test_bifrost_names_the_provider_key_it_selected(tmp_path: Path) -> None:
    # weighted key selection: each key an account with a cache of its own
    from builders import make_bifrost_db

    db = make_bifrost_db(tmp_path / "logs.db", [
        _bifrost_row(0, "primary", "key-1"), _bifrost_row(1, "secondary", "key-2"),
        _bifrost_row(2, None, "key-2"), _bifrost_row(3, None, None)])
    requests, skips = read_requests(db)
    assert skips == []
    assert [r.metadata.get("deployment") for r in requests] == [
        "anthropic key primary", "anthropic key secondary", "anthropic key key-2", None]
    assert [backend(r) for r in requests] == [
        "anthropic key primary", "anthropic key secondary", "anthropic key key-2", "anthropic"]


def test_the_store_reads_them_as_the_ledgers_backend(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.duckdb")
    ingest_paths([str(_capture(tmp_path / "or.jsonl"))], store)
    assert [r.backend for r in store.usage_records()] == ["OpenAI", "Azure", "Azure"]
