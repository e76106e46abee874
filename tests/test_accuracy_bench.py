"""bench/accuracy.py cannot rot silently: its generator's answer key agrees with a hand
computation on a tiny corpus, it never imports prefixscope, its scoring counts what
docs/accuracy.md says, and a small run goes end to end through the CLI.

The expected numbers below come from the generator's cache rules (docs/accuracy.md), worked
out by hand; none is prefixscope's output.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import accuracy as acc  # noqa: E402


def chunk(cid: str, tokens: int, part: str = "messages") -> acc.Chunk:
    return acc.Chunk(cid, tokens, part, ())


TOOLS, SYSTEM = chunk("tools", 1000, "tools"), chunk("system", 500, "system")
M = [chunk(f"m{i}", n) for i, n in enumerate((300, 200, 100, 100, 100))]
OPUS, SONNET = acc.MODELS[1], acc.MODELS[0]


def call(session: str, index: int, time: float, kind: str, model: str, n: int,
         first: acc.Chunk | None = None) -> acc.Call:
    messages = ([first] if first else []) + M[:n]
    return acc.Call(session, index, time, kind, model, "2.1.150", acc.FIVE_MIN,
                    [TOOLS, SYSTEM, *messages])


@pytest.fixture(scope="module")
def calls() -> dict[str, acc.Call]:
    made = {
        "a0": call("a", 0, 0, "cold", SONNET, 1),
        "b0": call("b", 0, 30, "cold", SONNET, 0, chunk("b-m0", 700)),
        "a1": call("a", 1, 60, "append", SONNET, 2),
        "a2": call("a", 2, 460, "ttl", SONNET, 3),
        "a3": call("a", 3, 470, "model-change", OPUS, 4),
        "a4": call("a", 4, 480, "provider", OPUS, 5),
    }
    acc.simulate(list(made.values()), random.Random(0))
    return made


class TestHostedKeyByHand:
    """Session a: tools 1,000, system 500, messages of 300, 200, 100, 100, 100 tokens;
    session b shares the tools and system. Entries sit at 1,000, 1,500 and the prompt
    minus 2; 5-minute TTL from the last write or read."""

    def test_usage_and_key(self, calls: dict[str, acc.Call]) -> None:
        got = {k: (c.prompt, c.read, c.write, c.true_tokens) for k, c in calls.items()}
        # a0 cold: nothing cached; writes all but the 2 tail tokens; every missed token cold
        assert got["a0"] == (1_800, 0, 1_798, 1_800)
        # b0 cold: a0's tools + system entry (1,500, written at 0 s) is live at 30 s
        assert got["b0"] == (2_200, 1_500, 698, 700)
        # a1 extends a0 within 5 min: reads a0's entry, 1,800 - 2
        assert got["a1"] == (2_000, 1_798, 200, 0)
        # a2 400 s after a1: every entry expired (b0 refreshed 1,500 to 330 s; a1 wrote all
        # three to 360 s); the key: what the warm prefix would have served, 2,000 - 2
        assert got["a2"] == (2_100, 0, 2_098, 1_998)
        # a3 another model: its own cache (empty); min(2,200, 2,100) - 0
        assert got["a3"] == (2_200, 0, 2_198, 2_100)

    def test_provider_miss_serves_a_shorter_live_entry(self, calls: dict[str, acc.Call]
                                                       ) -> None:
        a4 = calls["a4"]
        # a3 wrote opus entries at 1,000, 1,500 and 2,198: the provider serves one of the
        # shorter ones, or nothing; the key is the rest of the warm prefix
        assert a4.prompt == 2_300
        assert a4.read in (0, 1_000, 1_500)
        assert a4.true_tokens == 2_198 - a4.read

    def test_claude_code_lines(self, calls: dict[str, acc.Call], tmp_path: Path) -> None:
        calls["a3"].records.append({"type": "system", "subtype": "compact_boundary"})
        paths = acc.write_claude_code([c for k, c in calls.items() if k[0] == "a"],
                                      tmp_path)
        lines = [json.loads(x) for x in paths[0].read_text().splitlines()]
        assistant = [x for x in lines if x["type"] == "assistant"]
        usage = assistant[3]["message"]["usage"]
        # prompt = input + cache read + cache creation (Anthropic's)
        assert (usage["input_tokens"], usage["cache_read_input_tokens"],
                usage["cache_creation_input_tokens"]) == (2, 0, 2_198)
        assert usage["cache_creation"] == {"ephemeral_5m_input_tokens": 2_198,
                                           "ephemeral_1h_input_tokens": 0}
        assert assistant[3]["message"]["model"] == OPUS
        # the record is written before the call it precedes
        kinds = [x.get("subtype") or x["type"] for x in lines]
        assert kinds.index("compact_boundary") < kinds.index("assistant", 7)


def text_chunk(cid: str, n: int) -> acc.Chunk:
    """A message of `n` tokens in the corpus's word count (its role and two delimiters
    are three of them)."""
    words = " ".join(f"{cid}w{i}" for i in range(n - 3))
    return acc.Chunk(cid, n, "messages", ({"role": "user", "content": [
        {"type": "text", "text": words}]},))


def pool_run(sizes: dict[str, int], blocks: int, output: int) -> list[tuple[int, int, str, int]]:
    """Sessions x (x1, then x1 + x2), y and z (one call each), in the order x1, y1, z1, x2,
    through a pool of `blocks` blocks, each call answering with `output` tokens."""
    system, tools = acc.Chunk("s", 0, "system", ()), acc.Chunk("t", 0, "tools", ())
    acc._VTOKENS.update({"s": [], "t": []})
    c = {k: text_chunk(f"{k}n{n}b{blocks}o{output}", n) for k, n in sizes.items()}
    calls = [acc.Call("x", 0, 0, "cold", acc.SELF_HOSTED_MODEL, "v", 0, [system, tools, c["x1"]]),
             acc.Call("y", 0, 10, "cold", acc.SELF_HOSTED_MODEL, "v", 0, [system, tools, c["y1"]])]
    if "z1" in c:
        calls.append(acc.Call("z", 0, 15, "cold", acc.SELF_HOSTED_MODEL, "v", 0,
                              [system, tools, c["z1"]]))
    calls.append(acc.Call("x", 1, 20, "append", acc.SELF_HOSTED_MODEL, "v", 0,
                          [system, tools, c["x1"], c["x2"]]))
    acc.simulate_self_hosted(calls, capacity_tokens=blocks * acc.BLOCK,
                             tokenize=acc.word_prompt, output_tokens=output)
    return [(c.prompt, c.read, c.kind, c.true_tokens) for c in calls]


def test_self_hosted_eviction_by_hand() -> None:
    """Block 16, a pool of 5 blocks, one output token a call (KV for the prompt). x1 (72
    tokens: 4 full blocks and a partial one) takes all 5; y1 (72 other tokens) needs 5 and
    pops them all: x2 (x1 + 8 tokens) reads nothing, and the unlimited cache would have
    served x1's 4 full blocks: eviction 64."""
    assert pool_run({"x1": 72, "y1": 72, "x2": 8}, 5, 1) == [
        (72, 0, "cold", 72), (72, 0, "cold", 72), (80, 0, "eviction", 64)]


def test_self_hosted_pool_frees_tail_first() -> None:
    """A pool of 6 blocks, one output token. x1 (64 tokens, 4 blocks) leaves [2 empty, b3, b2, b1,
    b0] (front to back); y1 (48 tokens, 3 blocks) pops the 2 empty slots and x1's tail
    block b3: x2 (x1 + 16 tokens) reads x1's first 3 blocks, 48 tokens; the unlimited
    cache 64: eviction 16."""
    assert pool_run({"x1": 64, "y1": 48, "x2": 16}, 6, 1) == [
        (64, 0, "cold", 64), (48, 0, "cold", 48), (80, 48, "eviction", 16)]


def test_self_hosted_partial_block_is_reused_first() -> None:
    """A pool of 5 blocks, one output token. x1 (72 tokens) frees its partial block to the front
    and its 4 full ones to the back: [p, b3, b2, b1, b0]; y1 (40 tokens, 3 blocks) pops p
    (nothing evicted), b3 and b2: x2 (x1 + 8 tokens) reads b0 and b1, 32 tokens, of the
    unlimited cache's 64: eviction 32. (Freed to the back, p would have cost x1's b1.)"""
    assert pool_run({"x1": 72, "y1": 40, "x2": 8}, 5, 1) == [
        (72, 0, "cold", 72), (40, 0, "cold", 40), (80, 32, "eviction", 32)]


def test_self_hosted_output_blocks_take_slots() -> None:
    """A pool of 6 blocks, 17 output tokens a call (KV for 16: the last sampled token is
    never fed back). x1 (48 tokens + 16: 3 prompt blocks and 1 of output, hashed) leaves
    [e, e, o3, b2, b1, b0]; y1 (32 + 16: 3 blocks) pops both empty slots and x1's output
    block; z1 (16 + 16: 2 blocks) pops b2 and b1: x2 (x1 + 16 tokens) reads b0, 16
    tokens, of the unlimited cache's 48: eviction 32. With one output token (KV for the
    prompt only) nothing of x1 would have gone."""
    assert pool_run({"x1": 48, "y1": 32, "z1": 16, "x2": 16}, 6, 17) == [
        (48, 0, "cold", 48), (32, 0, "cold", 32), (16, 0, "cold", 16),
        (64, 16, "eviction", 32)]
    assert pool_run({"x1": 48, "y1": 32, "z1": 16, "x2": 16}, 6, 1)[-1] == (
        64, 48, "append", 0)


def test_self_hosted_tokens_are_qwens_turn_by_turn() -> None:
    """The vLLM corpus counts Qwen2.5's tokens of the chat template's text: its turns,
    tokenized alone and joined, are the whole text's ids (the tokenizer splits at added
    tokens first), and the prompt opens with the system turn and ends with the generation
    prompt (ids from Qwen2.5's vocabulary: <|im_start|> 151644, "system" 8948, "\\n" 198,
    "assistant" 77091)."""
    calls = acc.generate(3, 1, "openai-vllm")
    chunks = calls[2].chunks
    system, tools, *messages = chunks
    text = ("<|im_start|>system\n" + acc.openai_messages(system)[0]["content"]
            + acc.QWEN_TOOLS_HEAD
            + "".join("\n" + json.dumps(t, ensure_ascii=False) for t in acc.openai_tools(tools))
            + acc.QWEN_TOOLS_TAIL + "<|im_end|>\n"
            + "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
                      for c in messages for m in acc.openai_messages(c))
            + "<|im_start|>assistant\n")
    ids = acc.qwen_prompt(chunks)
    assert ids == acc.qwen_encode(text)
    assert ids[:3] == [151644, 8948, 198]
    assert ids[-3:] == [151644, 77091, 198]
    assert calls[2].prompt == len(ids)
    # "<tool_call>" is one added token (151657) in Qwen2.5, as in the template's tail
    assert acc.qwen_encode("<tool_call>") == [151657]


def test_litellm_rows_are_the_raw_anthropic_sessions(tmp_path: Path) -> None:
    """The LiteLLM corpus is the raw Anthropic corpus's sessions (same seed: same calls,
    usage and key), one spend-log row per call: prompt_tokens cache-inclusive (2 + read +
    write), the read and write where LiteLLM puts them, the client's body with its marks."""
    raw, lite = acc.generate(5, 2, "raw-anthropic"), acc.generate(5, 2, "litellm")
    assert acc.answer_key(raw, "x") == acc.answer_key(lite, "x")
    paths = acc.write_litellm(lite, tmp_path)
    rows = [json.loads(x) for x in paths[0].read_text().splitlines()]
    assert len(rows) == len(lite)
    first = min(lite, key=lambda c: (c.time, c.session))
    row = rows[0]
    assert row["request_id"] == acc.request_id(first)
    assert row["startTime"] == acc.stamp(first.time)
    assert row["prompt_tokens"] == 2 + first.read + first.write == first.prompt
    extra = row["metadata"]["additional_usage_values"]
    assert (extra["cache_read_input_tokens"], extra["cache_creation_input_tokens"]) == (
        first.read, first.write)
    assert row["session_id"] == first.session
    body = row["proxy_server_request"]
    assert body["tools"][-1]["cache_control"]["type"] == "ephemeral"
    assert body["messages"][-1]["content"][-1]["cache_control"]["type"] == "ephemeral"
    assert row["call_type"] == "anthropic_messages"


def test_litellm_openai_rows_are_the_openai_hosted_sessions(tmp_path: Path) -> None:
    """LiteLLM's rows of the OpenAI hosted sessions: OpenAI's prompt_tokens (cached
    included), the cached tokens where LiteLLM puts them, the client's chat body."""
    hosted, lite = acc.generate(5, 2, "openai-hosted"), acc.generate(5, 2, "litellm-openai")
    assert acc.answer_key(hosted, "x") == acc.answer_key(lite, "x")
    rows = [json.loads(x) for x in
            acc.write_litellm_openai(lite, tmp_path)[0].read_text().splitlines()]
    by_call = sorted(lite, key=lambda c: (c.time, c.session))
    assert len(rows) == len(by_call)
    for row, c in zip(rows, by_call, strict=True):
        assert row["prompt_tokens"] == c.prompt
        extra = row["metadata"]["additional_usage_values"]
        assert extra["prompt_tokens_details"]["cached_tokens"] == c.read
        assert (row["call_type"], row["custom_llm_provider"]) == ("acompletion", "openai")
        assert row["session_id"] == c.session and row["startTime"] == acc.stamp(c.time)
        system, tools, *messages = c.chunks
        body = row["proxy_server_request"]
        assert body["tools"] == acc.openai_tools(tools)
        assert len(body["messages"]) == 1 + sum(len(m.payload) for m in messages)


def test_langfuse_rows_are_the_openai_hosted_sessions(tmp_path: Path) -> None:
    """The Langfuse corpus is the OpenAI hosted corpus's sessions, one GENERATION per call:
    Langfuse's buckets (input uncached, input_cached_tokens, total = both + output), the
    integration's {messages, tools} input, one trace per session."""
    hosted, lf = acc.generate(5, 2, "openai-hosted"), acc.generate(5, 2, "langfuse")
    assert acc.answer_key(hosted, "x") == acc.answer_key(lf, "x")
    rows = [json.loads(x) for x in acc.write_langfuse(lf, tmp_path)[0].read_text().splitlines()]
    assert len(rows) == len(lf)
    by_call = sorted(lf, key=lambda c: (c.time, c.session))
    for row, c in zip(rows, by_call, strict=True):
        usage = row["usageDetails"]
        assert usage["input"] + usage["input_cached_tokens"] == c.prompt
        assert usage["input_cached_tokens"] == c.read
        assert usage["total"] == c.prompt + 60
        assert row["type"] == "GENERATION" and row["model"] == c.model
        assert row["traceId"] == c.session.replace("-", "")
        system, tools, *messages = c.chunks
        assert row["input"]["tools"] == acc.openai_tools(tools)
        assert row["input"]["messages"][0] == {"role": "system", "content": "\n".join(
            b["text"] for b in system.payload)}
    assert len({r["traceId"] for r in rows}) == 2


def test_newapi_rows_are_the_raw_anthropic_sessions(tmp_path: Path) -> None:
    """The new-api corpus is the raw Anthropic sessions (same calls and usage), one consume
    row per call as a Claude channel logs it: prompt_tokens Anthropic's uncached input (2),
    the read and write (and its 5m / 1h split) in `other`, whole-second times, no body."""
    raw, na = acc.generate(5, 2, "raw-anthropic"), acc.generate(5, 2, "new-api")
    assert acc.true_key(raw, "x") == acc.true_key(na, "x")
    rows = [json.loads(x) for x in acc.write_newapi(na, tmp_path)[0].read_text().splitlines()]
    by_call = sorted(na, key=lambda c: (c.time, c.session))
    assert len(rows) == len(by_call)
    for row, c in zip(rows, by_call, strict=True):
        other = json.loads(row["other"])
        assert (row["type"], row["prompt_tokens"], row["completion_tokens"]) == (2, 2, 60)
        assert 2 + other["cache_tokens"] + other["cache_creation_tokens"] == c.prompt
        assert (other["cache_tokens"], other["cache_creation_tokens"]) == (c.read, c.write)
        one_hour = c.write if c.ttl == acc.ONE_HOUR else 0
        assert (other["cache_creation_tokens_1h"], other["cache_creation_tokens_5m"]) == (
            one_hour, c.write - one_hour)
        assert other["claude"] is True and other["request_path"] == "/v1/messages"
        assert row["created_at"] == int((acc.EPOCH + acc.timedelta(seconds=c.time)).timestamp())
        assert row["model_name"] == c.model
        assert not {"request", "messages", "body", "session_id"} & set(row)
    assert len({r["username"] for r in rows}) == 2


def entry(session: str, index: int, time: str, cause: str, tokens: int, prompt: int,
          read: int, model: str = "a") -> dict[str, object]:
    return {"session": session, "index": index, "time": f"2026-03-02T09:{time}.500Z",
            "cause": cause, "injected": cause, "tokens": tokens, "prompt": prompt,
            "read": read, "model": model, "ttl_seconds": 300}


def test_usage_only_key_by_hand() -> None:
    """What a log without bodies or session ids can name, worked out by hand: a change in
    a grown prompt is the provider's, a shrunk prompt and a first call on a model are
    cold (P - read), a return to a model continues its last call (P' - 2 - read), ttl
    past the TTL; times cut to the second."""
    key = acc.usage_only_key([
        entry("s", 0, "00:00", "cold", 1000, 1000, 0),
        entry("s", 1, "01:00", "none", 0, 1200, 998),
        entry("s", 2, "02:00", "break:tool-order", 700, 1300, 500),   # grew: provider
        entry("s", 3, "03:00", "compaction", 900, 1100, 200),         # shrank: cold 900
        entry("s", 4, "04:00", "break:model-change", 1150, 1150, 0, "b"),  # new model: cold
        entry("s", 5, "06:00", "break:model-change", 1080, 1400, 20),  # back to a, 3 min
        entry("s", 6, "12:00", "ttl", 1398, 1500, 0),                  # 6 min: ttl
    ])
    assert [(e["cause"], e["tokens"]) for e in key] == [
        ("cold", 1000), ("none", 0), ("provider", 700), ("cold", 900), ("cold", 1150),
        ("provider", 1100 - 2 - 20), ("ttl", 1398)]
    assert key[5]["injected"] == "break:model-change"
    assert key[0]["time"] == "2026-03-02T09:00:00Z"
    assert key[2]["losses"] == {"provider": 700} and key[1]["losses"] == {}
    # a return after the TTL with nothing read is ttl, one that read all is nothing
    back = acc.usage_only_key([
        entry("t", 0, "00:00", "cold", 500, 500, 0),
        entry("t", 1, "01:00", "break:model-change", 600, 600, 0, "b"),
        entry("t", 2, "07:00", "break:model-change", 600, 700, 0),
        entry("t", 3, "08:00", "break:model-change", 0, 800, 798, "b")])
    assert [(e["cause"], e["tokens"]) for e in back] == [
        ("cold", 500), ("cold", 600), ("ttl", 498), ("none", 0)]


def test_usage_only_key_names_the_readings_the_log_cannot_tell_apart() -> None:
    """Two readings a usage-only log supports alike, by hand: after a shorter prompt the
    earlier run's last call is still in the log, so a call whose read reads back neither
    its prompt nor the last call's may continue either (that run's shortfall, ttl past
    the TTL); a return more than an hour past the TTL may be a new conversation (cold,
    P - read). The score takes a booking of either reading as right."""
    key = acc.usage_only_key([
        entry("s", 0, "00:00", "cold", 5000, 5000, 0),               # run a
        entry("s", 1, "05:00", "compaction", 900, 1100, 200),        # shrank: run b
        entry("s", 2, "06:00", "break:tool-order", 1098, 5200, 0),   # reads back neither
        entry("s", 3, "07:00", "none", 0, 5300, 5198),               # reads back s2
    ])
    assert [(e["cause"], e["tokens"], e.get("also")) for e in key] == [
        ("cold", 5000, None), ("cold", 900, None),
        # the key's first reading continues b, 1 minute on; a's, 6 minutes after a's call
        ("provider", 1098, [["ttl", 5000 - 2 - 0]]),
        ("none", 0, None)]
    back = [entry("t", 0, "00:00", "cold", 1000, 1000, 0),
            entry("t", 1, "00:00", "ttl", 998, 1200, 0)]
    back[1]["time"] = "2026-03-02T10:05:01.500Z"  # 65 min 1 s: an hour past the 5 minutes
    assert [(e["cause"], e["tokens"], e.get("also")) for e in acc.usage_only_key(back)] == [
        ("cold", 1000, None), ("ttl", 998, [["cold", 1200]])]
    found = {"sessions": [{"session": "x", "calls": [
        {"time": "2026-03-02T09:00:00", "prompt_tokens": 5000, "causes": {"cold": 5000}},
        {"time": "2026-03-02T09:05:00", "prompt_tokens": 1100, "causes": {"cold": 900}},
        {"time": "2026-03-02T09:06:00", "prompt_tokens": 5200,
         "causes": {"new": 200, "ttl": 4998}},
        {"time": "2026-03-02T09:07:00", "prompt_tokens": 5300, "causes": {"new": 102}}]}]}
    result = acc.score(key, found)
    assert result["two_ways"] == {"calls": 1, "other": 1}
    assert result["causes"]["ttl"] == {"calls": 1, "right": 1, "given": 1, "recall": 1.0,
                                       "precision": 1.0, "token_error": 0.0,
                                       "true_tokens": 4998}
    assert "provider" not in result["causes"] and result["misses"] == []


def test_bifrost_rows_are_the_openai_hosted_sessions(tmp_path: Path) -> None:
    """Bifrost's log rows of the OpenAI hosted sessions: token_usage cache-inclusive with
    cached_read_tokens, the chat messages as input_history, a session's calls under its
    first call's id (parent_request_id)."""
    hosted, bf = acc.generate(5, 2, "openai-hosted"), acc.generate(5, 2, "bifrost")
    assert acc.answer_key(hosted, "x") == acc.answer_key(bf, "x")
    page = json.loads(acc.write_bifrost(bf, tmp_path)[0].read_text())
    rows = page["logs"][::-1]  # newest first
    by_call = sorted(bf, key=lambda c: (c.time, c.session))
    assert len(rows) == len(by_call) == page["pagination"]["total_count"]
    heads: dict[str, str] = {}
    for row, c in zip(rows, by_call, strict=True):
        usage = row["token_usage"]
        assert usage["prompt_tokens"] == c.prompt == row["prompt_tokens"]
        assert usage["prompt_tokens_details"]["cached_read_tokens"] == c.read
        assert row["cached_read_tokens"] == c.read
        assert row["timestamp"] == acc.stamp(c.time)
        assert (row["object"], row["provider"], row["model"]) == (
            "chat.completion", "openai", c.model)
        system, tools, *messages = c.chunks
        assert row["tools"] == acc.openai_tools(tools)
        assert row["input_history"][0]["role"] == "system"
        assert len(row["input_history"]) == 1 + sum(len(m.payload) for m in messages)
        if c.index == 0:
            assert row["parent_request_id"] is None
            heads[c.session] = row["id"]
        else:
            assert row["parent_request_id"] == heads[c.session]
    assert len(heads) == 2


def test_otel_spans_are_the_openai_hosted_sessions(tmp_path: Path) -> None:
    """One GenAI chat span per call of the OpenAI hosted sessions: input tokens the whole
    prompt (cached included), the cached part, the session, the time to the millisecond."""
    hosted, spans = acc.generate(5, 2, "openai-hosted"), acc.generate(5, 2, "otel")
    assert acc.answer_key(hosted, "x") == acc.answer_key(spans, "x")
    docs = [json.loads(x) for x in acc.write_otel(spans, tmp_path)[0].read_text().splitlines()]
    by_call = sorted(spans, key=lambda c: (c.time, c.session))
    assert len(docs) == len(by_call)
    for doc, c in zip(docs, by_call, strict=True):
        span = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
        attrs = {a["key"]: a["value"] for a in span["attributes"]}
        assert attrs["gen_ai.usage.input_tokens"] == {"intValue": str(c.prompt)}
        assert attrs["gen_ai.usage.cache_read.input_tokens"] == {"intValue": str(c.read)}
        assert attrs["gen_ai.conversation.id"] == {"stringValue": c.session}
        at = acc.EPOCH + acc.timedelta(seconds=c.time)
        assert int(span["startTimeUnixNano"]) // 1_000_000 == int(at.timestamp() * 1000)
        system, tools, *messages = c.chunks
        inputs = json.loads(attrs["gen_ai.input.messages"]["stringValue"])
        assert len(inputs) == sum(len(m.payload) for m in messages)
        assert len(json.loads(attrs["gen_ai.tool.definitions"]["stringValue"])) == len(
            tools.payload)


def test_raw_captures_carry_the_providers_verdict(tmp_path: Path) -> None:
    """A verdict-writing session's response carries Anthropic's `diagnostics` on every call
    that lost tokens (a body-only change named by the part it sits in: tools before
    system), with the key's tokens; other calls and sessions carry none."""
    calls = acc.generate(1, 12, "raw-anthropic")
    rows = [json.loads(x) for path in acc.write_raw_anthropic(calls, tmp_path)
            for x in path.read_text().splitlines()]
    by_id = {r["response"]["id"]: r["response"] for r in rows}
    expected = {"json-key-order": "tools_changed", "tool-order": "tools_changed",
                "volatile-prefix-segment": "system_changed", "ttl": "previous_message_not_found",
                "model-change": "model_changed", "history-rewrite": "messages_changed"}
    seen = set()
    for c in calls:
        verdict = by_id[acc.request_id(c)].get("diagnostics")
        if c.verdicts and c.kind in expected and c.true_tokens > 0:
            assert verdict == {"cache_miss_reason": {
                "type": expected[c.kind], "cache_missed_input_tokens": c.true_tokens}}
            seen.add(c.kind)
        elif c.kind in ("append", "cold") or not c.verdicts:
            assert verdict is None
    assert {"json-key-order", "volatile-prefix-segment"} <= seen


def test_the_generator_never_imports_prefixscope(tmp_path: Path) -> None:
    code = ("import sys; sys.path.insert(0, 'bench'); import accuracy as a; "
            "c = a.generate(3, 2, 'raw-anthropic'); a.write_raw_anthropic(c, "
            f"__import__('pathlib').Path({str(tmp_path)!r})); "
            "assert not [m for m in sys.modules if m.startswith('prefixscope')], 'imported'")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "raw-anthropic" / "capture-00.jsonl").exists()


def test_scoring_rules() -> None:
    key = [{"session": "s", "time": "2026-03-02T09:00:00.000Z", "prompt": 100, "cause": "cold",
            "tokens": 100, "request": "r0"},
           {"session": "s", "time": "2026-03-02T09:01:00.000Z", "prompt": 200, "cause": "none",
            "tokens": 0, "request": "r1"},
           {"session": "s", "time": "2026-03-02T09:02:00.000Z", "prompt": 300, "cause": "ttl",
            "tokens": 190, "request": "r2"},
           {"session": "s", "time": "2026-03-02T09:03:00.000Z", "prompt": 400,
            "cause": "break:tool-order", "tokens": 300, "request": "r3"}]
    found = {"sessions": [{"session": "s", "calls": [
        {"time": "2026-03-02T09:00:00", "prompt_tokens": 100, "causes": {"cold": 100}},
        # a loss booked on an append-only turn
        {"time": "2026-03-02T09:01:00", "prompt_tokens": 200,
         "causes": {"new": 100, "provider": 98, "rounding": 2}},
        {"time": "2026-03-02T09:02:00", "prompt_tokens": 300,
         "causes": {"new": 100, "ttl": 200}},
        {"time": "2026-03-02T09:03:00", "prompt_tokens": 400,
         "causes": {"break": 300, "new": 100}, "break_kind": "tool-order"}]}]}
    result = acc.score(key, found)
    rows = result["causes"]
    assert rows["cold"]["recall"] == rows["cold"]["precision"] == 1.0
    assert rows["ttl"]["token_error"] == pytest.approx(10 / 190)
    assert rows["none"]["recall"] == 0.0
    assert rows["provider"]["precision"] == 0.0
    assert rows["break:tool-order"]["recall"] == 1.0
    assert (result["append_calls"], result["append_with_cause"]) == (1, 1)
    assert acc.check(result, 0.99, 0.01)


def test_a_small_run_end_to_end(tmp_path: Path) -> None:
    """Two sessions per corpus through the CLI: every call of the key is found, and on the
    Claude Code transcripts (the client's changes recorded) every cause is named."""
    status = acc.main(["--seed", "7", "--sessions", "2", "--out", str(tmp_path),
                       "--formats", "claude-code,openai-vllm,litellm,langfuse"])
    assert status == 0
    for fmt in ("claude-code", "openai-vllm", "litellm", "langfuse"):
        result = json.loads((tmp_path / f"score.{fmt}.json").read_text())
        assert result["unmatched"] == 0
        assert result["calls"] > 20
    for fmt in ("claude-code", "litellm"):
        result = json.loads((tmp_path / f"score.{fmt}.json").read_text())
        assert acc.check(result, 0.99, 0.01) == []


def test_the_gateway_tables_run_end_to_end(tmp_path: Path) -> None:
    """new-api's usage-only rows and Bifrost's log page through the CLI: every call of the
    key is found (new-api's by its whole-second time), and Bifrost's, with bodies and a
    session id, every cause named (new-api's threading misses: docs/accuracy.md)."""
    status = acc.main(["--seed", "7", "--sessions", "2", "--out", str(tmp_path),
                       "--formats", "new-api,bifrost"])
    assert status == 0
    for fmt in ("new-api", "bifrost"):
        result = json.loads((tmp_path / f"score.{fmt}.json").read_text())
        assert result["unmatched"] == 0
        assert result["calls"] > 20
    bifrost = json.loads((tmp_path / "score.bifrost.json").read_text())
    assert acc.check(bifrost, 0.99, 0.01) == []


# ------------------------------------------------------------------ the agent-log corpora

import accuracy_agents as agents  # noqa: E402


def codex_call(session: str, index: int, time: float, kind: str, tokens: list[str],
               effort: str = "medium") -> agents.AgentCall:
    return agents.AgentCall(session, index, time, kind, agents.CODEX_MODELS[0], "0.63.0",
                            acc.OPENAI_TTL, [], tokens=tokens, effort=effort)


def seq(name: str, n: int) -> list[str]:
    return [f"{name}{i}" for i in range(n)]


@pytest.fixture(scope="module")
def codex_calls() -> dict[str, agents.AgentCall]:
    """Session a's tokens a0, a1, ...; the drop of a3 and the effort of a4, a5 by hand."""
    a = seq("a", 3000)
    made = {
        "a0": codex_call("a", 0, 0, "cold", a[:2000]),
        # another session sharing a's first 1,200 tokens (the instructions and tools)
        "b0": codex_call("b", 0, 30, "cold", a[:1200] + seq("b", 800)),
        "a1": codex_call("a", 1, 60, "append", a[:2600]),
        "a2": codex_call("a", 2, 760, "ttl", a[:3000]),
        # a new user turn dropped reasoning that sat at token 1,500
        "a3": codex_call("a", 3, 770, "history-rewrite", a[:1500] + seq("c", 1500)),
        "a4": codex_call("a", 4, 780, "settings-change", a[:1500] + seq("c", 1600),
                         effort="high"),
        "a5": codex_call("a", 5, 790, "provider", a[:1500] + seq("c", 2000),
                         effort="high"),
    }
    agents.simulate_codex(list(made.values()), random.Random(0))
    return made


class TestCodexKeyByHand:
    """OpenAI's cache as the Codex corpus models it: 128-token steps from 1,024 tokens, a
    step kept while used within 10 minutes, one cache per model and reasoning effort."""

    def test_usage_and_key(self, codex_calls: dict[str, agents.AgentCall]) -> None:
        got = {k: (c.prompt, c.read, c.kind, c.true_tokens) for k, c in codex_calls.items()}
        # a0 cold: nothing cached
        assert got["a0"] == (2_000, 0, "cold", 2_000)
        # b0: a0's first 9 steps (1,152 tokens, >= 1,024) are its own first 1,200 tokens'
        assert got["b0"] == (2_000, 1_152, "cold", 848)
        # a1 extends a0 60 s later: a0's 15 full steps, 1,920; nothing lost
        assert got["a1"] == (2_600, 1_920, "append", 0)
        # a2 700 s after a1 (b0's steps were used at 30 s): nothing live; the key is what
        # the warm prefix would have served, floor(2,600 / 128) * 128
        assert got["a2"] == (3_000, 0, "ttl", 2_560)
        # a3 10 s later: the steps before the drop at 1,500 are a2's: 11 steps, 1,408; a
        # recorded change: min(3,000, 3,000) - 1,408
        assert got["a3"] == (3_000, 1_408, "history-rewrite", 1_592)
        # a4 another effort: another cache, empty: min(3,100, 3,000) - 0
        assert got["a4"] == (3_100, 0, "settings-change", 3_000)

    def test_a_provider_miss_serves_fewer_steps(
            self, codex_calls: dict[str, agents.AgentCall]) -> None:
        a5 = codex_calls["a5"]
        # a4 (effort high) used 24 steps at 780 s: the provider serves none, or 8 to 22
        assert a5.prompt == 3_500
        assert a5.read == 0 or 1_024 <= a5.read <= 22 * 128 and a5.read % 128 == 0
        assert a5.true_tokens == 3_072 - a5.read

    def test_the_server_drops_the_reasoning_of_earlier_turns(self) -> None:
        def user(text: str) -> agents.Item:
            return agents.make_item(agents.message_item("user", text))
        env = user(agents.ENVIRONMENT)
        r1 = agents.make_item({"type": "reasoning", "summary": [], "content": None,
                               "encrypted_content": "x1"}, hidden=300)
        call = agents.make_item({"type": "function_call", "name": "shell",
                                 "arguments": "{}", "call_id": "c1"})
        out = agents.make_item({"type": "function_call_output", "call_id": "c1",
                                "output": "ok"})
        r2 = agents.make_item({"type": "reasoning", "summary": [], "content": None,
                               "encrypted_content": "x2"}, hidden=50)
        items = [env, user("fix it"), r1, call, out]
        assert agents.sent_items(items) == items  # within the turn: r1 is read
        later = [*items, r2, user("now lint")]
        assert agents.sent_items(later) == [env, items[1], call, out, later[-1]]
        assert len(r1.tokens) == 300 and not env.boundary and items[1].boundary

    def test_rollout_lines(self, tmp_path: Path) -> None:
        calls = agents.generate_codex(5, 2)
        paths = agents.write_codex(calls, tmp_path)
        lines = [json.loads(x) for x in paths[0].read_text().splitlines()]
        assert lines[0]["type"] == "session_meta"
        assert lines[0]["payload"]["cli_version"] in agents.CODEX_VERSIONS
        mine = sorted((c for c in calls if c.session == lines[0]["payload"]["id"]),
                      key=lambda c: c.index)
        counts = [x["payload"]["info"] for x in lines if x["type"] == "event_msg"
                  and x["payload"]["type"] == "token_count"]
        assert [(i["last_token_usage"]["input_tokens"],
                 i["last_token_usage"]["cached_input_tokens"]) for i in counts] == [
            (c.prompt, c.read) for c in mine]
        # the totals are the running sums of the calls' counts
        assert counts[-1]["total_token_usage"]["input_tokens"] == sum(c.prompt for c in mine)
        contexts = [x["payload"] for x in lines if x["type"] == "turn_context"]
        assert {c["model"] for c in contexts} <= set(agents.CODEX_MODELS)


@pytest.fixture(scope="module")
def cline_calls() -> dict[str, agents.AgentCall]:
    """One task: system 8,000 tokens; messages m0 300 (user), m1 100, m2 200, m3 100, m4
    400; the notice-bearing m1 150."""
    system = chunk("cline-sys", 8_000, "system")
    m = [chunk(f"cm{i}", n) for i, n in enumerate((300, 100, 200, 100, 400))]
    notice = chunk("cm1-notice", 150)

    def call(index: int, time: float, kind: str, sent: list[acc.Chunk]
             ) -> agents.AgentCall:
        return agents.AgentCall("t", index, time, kind, SONNET, "3.51.0", acc.FIVE_MIN,
                                [system, *sent])

    made = {
        "c0": call(0, 0, "cold", m[:1]),
        "c1": call(1, 60, "append", m[:3]),
        "c2": call(2, 460, "ttl", m[:5]),
        "c3": call(3, 470, "truncation", [m[0], notice, m[4]]),
        "c4": call(4, 480, "model-change", [m[0], notice, m[4]]),
    }
    made["c4"].model = OPUS
    agents.simulate_cline(list(made.values()), random.Random(0))
    return made


class TestClineKeyByHand:
    """Anthropic's cache at Cline's breakpoints (the system prompt's end, the last two user
    messages'; the last entry `CLINE_LAG` = 4 short), 5 minutes from the last write or
    read."""

    def test_usage_and_key(self, cline_calls: dict[str, agents.AgentCall]) -> None:
        got = {k: (c.prompt, c.read, c.write, c.true_tokens) for k, c in cline_calls.items()}
        # c0: nothing cached; writes all but the 4 tail tokens (entries 8,000 and 8,296)
        assert got["c0"] == (8_300, 0, 8_296, 8_300)
        # c1 within 5 min: reads c0's last entry, 8,300 - 4; nothing lost
        assert got["c1"] == (8_600, 8_296, 300, 0)
        # c2 400 s after c1 (entries refreshed to 360 s): nothing; key 8,600 - 4
        assert got["c2"] == (9_100, 0, 9_096, 8_596)
        # c3 truncated ([2, 3] dropped, the notice on m1): c2's system entry (8,000) only;
        # a recorded change: min(8,850, 9,100) - 8,000
        assert got["c3"] == (8_850, 8_000, 846, 850)
        # c4 another model: its own cache, empty: min(8,850, 8,850) - 0
        assert got["c4"] == (8_850, 0, 8_846, 8_850)

    def test_truncation_range_is_clines(self) -> None:
        roles = ["user" if i % 2 == 0 else "assistant" for i in range(11)]
        # 11 messages, none dropped yet: half of the 9 after the first pair, even: 4 -> [2, 5]
        assert agents.truncation_range(11, None, "half", roles) == (2, 5)
        # then from 6: (11 - 6) // 4 * 2 = 2 -> [2, 7]
        assert agents.truncation_range(11, (2, 5), "half", roles) == (2, 7)
        # keep none over 5 messages: 3 from index 2 end on a user message: [2, 3]
        assert agents.truncation_range(5, None, "none", roles) == (2, 3)

    def test_task_files(self, tmp_path: Path) -> None:
        calls = agents.generate_cline(5, 2)
        paths = agents.write_cline_tasks(calls, tmp_path)
        task = paths[0].parent
        ui = json.loads((task / "ui_messages.json").read_text())
        started = [json.loads(m["text"]) for m in ui if m.get("say") == "api_req_started"]
        mine = sorted((c for c in calls if c.session == task.name), key=lambda c: c.index)
        # prompt = tokensIn + cacheWrites + cacheReads (Cline's convention)
        assert [(s["tokensIn"] + s["cacheWrites"] + s["cacheReads"], s["cacheReads"])
                for s in started] == [(c.prompt, c.read) for c in mine]
        history = json.loads((task / "api_conversation_history.json").read_text())
        assert [m["role"] for m in history] == ["user", "assistant"] * len(mine)
        meta = json.loads((task / "task_metadata.json").read_text())
        assert meta["model_usage"][0]["model_id"] == mine[0].model


def test_the_agent_generators_never_import_prefixscope(tmp_path: Path) -> None:
    code = ("import sys; sys.path.insert(0, 'bench'); import accuracy as a; "
            "from pathlib import Path; "
            f"[a.agents().WRITERS[f](a.generate(3, 2, f), Path({str(tmp_path)!r})) "
            "for f in a.AGENT_FORMATS]; "
            "assert not [m for m in sys.modules if m.startswith('prefixscope')], 'imported'")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "codex" / "sessions").is_dir()
    assert (tmp_path / "cline" / "Code").is_dir()
