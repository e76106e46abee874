"""Property-based fuzzing (issue 12): the parsers never raise, and the analyses' invariants hold.

Bounded (few examples each, no deadline) so the whole file stays around 20 s. Parsers are
fed each format's own fixture with values replaced at random paths by random JSON (so
the records look like the format's and reach deep into its parser), and random JSON
records outright. The analyses get random valid requests built with tests/factories.py;
every expected value is an invariant or computed here from the generated numbers.
"""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import FIXTURES
from factories import make_request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefixscope.analyses.bucket import bucket_store
from prefixscope.analyses.diff import diff_requests
from prefixscope.analyses.simulate import SimulateOptions, simulate_store
from prefixscope.ingest import forced_mismatch
from prefixscope.ingest.formats import get_format
from prefixscope.ingest.probing import probe
from prefixscope.ingest.source import Source
from prefixscope.model import Record, Skip
from prefixscope.prompt import RenderOptions
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths

# not in the fast loop (`pytest -m "not slow"`): Hypothesis over every parser and analysis
pytestmark = pytest.mark.slow

FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
QWEN = RenderOptions(tokenizer="qwen3.6")

# One fixture of each format, in its own container (JSON lines or one JSON document).
TEMPLATES = {
    "block-trace": "block-trace/mooncake_sample.jsonl",
    "tracelab": "tracelab/rounds.jsonl",
    "otel": "otel/collector.jsonl",
    "langfuse": "langfuse/batch-export.jsonl",
    "new-api": "newapi/api_logs_page.json",
    "litellm": "litellm/spend_logs.json",
    "bifrost": "bifrost/api_logs.json",
    "claude-code": "claude-code/streamed_session.jsonl",
    "codex": "codex/handmade/sessions/2025/10/01/"
             "rollout-2025-10-01T10-00-00-0199a0b1-0000-7000-8000-00000000000a.jsonl",
    "swe-agent": "swe-agent/query_steps.traj",
    "openhands": "openhands/runs_output.jsonl",
    "mini-swe-agent": "mini-swe-agent/v1_usage.traj.json",
    "openhands-completions": "openhands-completions/conv/gpt-4.1-1757000003.250-3c4d.json",
    "gemini-cli": "gemini-cli/legacy/session-2025-10-18T14-57-f86f5318.json",
    "cline": "cline/Code/User/globalStorage/saoudrizwan.claude-dev/tasks/1769064454592/"
             "ui_messages.json",
    "raw": "raw/openai_chat_capture.jsonl",
}

scalars = (st.none() | st.booleans() | st.integers(min_value=-(1 << 70), max_value=1 << 70)
           | st.floats(allow_nan=False) | st.text(max_size=12)
           | st.sampled_from(["", "user", "assistant", "system", "tool", "2026-03-02T09:00:00Z",
                              "chatcmpl-1", "gpt-4.1", "anthropic-messages", "{}", "[]", "null"]))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                           max_leaves=12)


def _dumps(value: Any) -> bytes:
    return json.dumps(value).encode()  # orjson refuses integers beyond 64 bits


def _loads(line: bytes) -> Any:
    """A fixture line's JSON; None for the bad lines some fixtures hold on purpose."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return None


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside `value` (dict keys, list indexes)."""
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


def _mutate(doc: Any, data: st.DataObject) -> Any:
    doc = copy.deepcopy(doc)
    for _ in range(data.draw(st.integers(1, 4))):
        paths = _paths(doc)
        path = data.draw(st.sampled_from(paths))
        if not path:
            continue
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        if data.draw(st.booleans()) and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = data.draw(json_values)
    return doc


def _parse(fmt: str, data: bytes, name: str) -> list[Any]:
    module = get_format(fmt)
    source = Source(name=name, data=data)
    pr = probe(source)
    if forced_mismatch(module, pr):  # `--format` refuses it before the parser runs
        return []
    return list(module.parse(source, pr))


@pytest.mark.parametrize("fmt", sorted(TEMPLATES))
@FUZZ
@given(data=st.data())
def test_every_parser_on_its_own_records_mutated(fmt: str, data: st.DataObject) -> None:
    path = FIXTURES / TEMPLATES[fmt]
    text = path.read_bytes()
    if path.suffix == ".jsonl":
        lines = [x for x in map(_loads, text.splitlines()) if x is not None]
        mutated = _mutate(lines, data)
        blob = b"".join(_dumps(x) + b"\n" for x in mutated) if isinstance(mutated, list) \
            else _dumps(mutated)
    else:
        blob = _dumps(_mutate(orjson.loads(text), data))
    for item in _parse(fmt, blob, path.name):
        assert isinstance(item, Record | Skip), item


@pytest.mark.parametrize("fmt", sorted(TEMPLATES))
@settings(max_examples=20, deadline=None, derandomize=True)
@given(records=st.lists(json_values, min_size=1, max_size=4))
def test_every_parser_on_random_json_records(fmt: str, records: list[Any]) -> None:
    lines = b"".join(_dumps(r) + b"\n" for r in records)
    for blob in (lines, _dumps(records)):
        for item in _parse(fmt, blob, "random.jsonl"):
            assert isinstance(item, Record | Skip), item


# Text formats (not JSON): their own fixture's lines replaced, dropped or duplicated at
# random, and random text lines.
TEXT_TEMPLATES = {
    "aider": ("TO LLM 2025-01-01T10:00:00\n-------\nSYSTEM be brief\nSYSTEM \n-------\n"
              "USER hi\nLLM RESPONSE 2025-01-01T10:00:02\nASSISTANT ok\n"
              "TO LLM 2025-01-01T10:00:05\n-------\nSYSTEM be brief\n-------\nUSER hi\n"
              "-------\nASSISTANT ok\n-------\nUSER more\n"),
}
text_lines = st.sampled_from(["-------", "SYSTEM ", "USER x", "ASSISTANT y", "TOOL z", "",
                              "TO LLM 2025-01-01T10:00:09", "LLM RESPONSE 2025-13-01T99:00:00",
                              "TO LLM", "\u00e9\u00e8"]) | st.text(max_size=20)


@pytest.mark.parametrize("fmt", sorted(TEXT_TEMPLATES))
@FUZZ
@given(data=st.data())
def test_every_text_parser_on_its_own_lines_mutated(fmt: str, data: st.DataObject) -> None:
    lines = TEXT_TEMPLATES[fmt].split("\n")
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(lines) - 1))
        action = data.draw(st.sampled_from(["replace", "drop", "insert"]))
        if action == "replace":
            lines[i] = data.draw(text_lines)
        elif action == "drop" and len(lines) > 1:
            del lines[i]
        else:
            lines.insert(i, data.draw(text_lines))
    for item in _parse(fmt, "\n".join(lines).encode(), "x.history"):
        assert isinstance(item, Record | Skip), item


# -- the analyses on random valid requests ------------------------------------------

words = st.text(alphabet="abcdefghij klmnop.,!?0123456789", min_size=1, max_size=30)


def _chat(texts: list[str]) -> list[dict[str, str]]:
    """user/assistant alternation ending with a user turn."""
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": t}
            for i, t in enumerate(texts)]


def _body(messages: list[dict[str, str]], system: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "system", "content": system}, *messages]}


@FUZZ
@given(system=words, turns=st.lists(words, min_size=1, max_size=5).filter(lambda t: len(t) % 2),
       more=st.lists(words, min_size=2, max_size=4).filter(lambda t: len(t) % 2 == 0),
       other=st.lists(words, min_size=1, max_size=5).filter(lambda t: len(t) % 2))
def test_diff_invariants(system: str, turns: list[str], more: list[str],
                         other: list[str]) -> None:
    a = make_request("a", body=_body(_chat(turns), system), endpoint="openai-chat")
    same = diff_requests(a, make_request("b", body=copy.deepcopy(a.body), endpoint="openai-chat",
                                         minutes=1), QWEN, block_size=16)
    assert same.cause == "identical" and same.first_divergence is None
    assert same.tokens_a == same.tokens_b and same.lost_tokens == 0
    grown = make_request("b", body=_body(_chat(turns + more), system), endpoint="openai-chat",
                         minutes=1)
    appended = diff_requests(a, grown, QWEN, block_size=16)
    assert appended.cause == "append-only" and appended.first_divergence is None
    assert appended.lost_tokens == 0 and appended.tokens_b > appended.tokens_a
    unrelated = make_request("c", body=_body(_chat(other), system[::-1]),
                             endpoint="openai-chat", minutes=2)
    for pair in (same, appended, diff_requests(a, unrelated, QWEN, block_size=16)):
        assert 0 <= pair.reusable_tokens <= min(pair.tokens_a, pair.tokens_b)
        assert pair.reusable_tokens % pair.block_size == 0 or \
            pair.reusable_tokens == min(pair.tokens_a, pair.tokens_b)


usages = st.lists(st.tuples(st.sampled_from(["m1", "m2", "m3"]), st.integers(0, 5000),
                            st.integers(0, 5000), st.integers(0, 5000)),
                  min_size=1, max_size=12)


@FUZZ
@given(calls=usages)
def test_bucket_totals_are_the_sum_of_groups_and_rates_in_0_1(
        calls: list[tuple[str, int, int, int]]) -> None:
    lines = []
    for i, (model, uncached, read, write) in enumerate(calls):
        lines.append(json.dumps({
            "type": "assistant", "sessionId": "s", "uuid": f"u{i}", "requestId": f"r{i}",
            "timestamp": f"2026-03-02T09:{i:02d}:00Z",
            "message": {"id": f"msg_{i}", "role": "assistant", "model": model, "content": [],
                        "usage": {"input_tokens": uncached, "cache_read_input_tokens": read,
                                  "cache_creation_input_tokens": write,
                                  "output_tokens": 1}}}))
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "t.jsonl"
        log.write_text("\n".join(lines) + "\n")
        store = Store.open(Path(tmp) / "s.duckdb")
        try:
            ingest_paths([str(log)], store)
            report = bucket_store(store, ("model",), explain=False)
        finally:
            store.close()
    groups = report.groups
    assert report.totals.requests == sum(g.requests for g in groups) == len(calls)
    assert report.totals.prompt_tokens == sum(g.prompt_tokens for g in groups) \
        == sum(u + r + w for _, u, r, w in calls)
    assert report.totals.cached_tokens == sum(g.cached_tokens for g in groups) \
        == sum(r for _, _, r, _ in calls)
    for rate in (report.totals.hit_rate, *(g.hit_rate for g in groups),
                 *(g.mean_request_hit_rate for g in groups)):
        assert rate is None or 0 <= rate <= 1


traces = st.lists(st.tuples(st.lists(st.integers(0, 30), min_size=1, max_size=8),
                            st.integers(0, 40)), min_size=1, max_size=15)


@FUZZ
@given(trace=traces, capacity=st.sampled_from([None, 512, 2048, 8192]),
       engine=st.sampled_from(["vllm", "sglang", "lmcache"]))
def test_simulate_predicted_never_exceeds_ideal(trace: list[tuple[list[int], int]],
                                               capacity: int | None, engine: str) -> None:
    lines = [json.dumps({"timestamp": i * 1000, "input_length": len(ids) * 512 - extra,
                         "output_length": 1, "hash_ids": ids})
             for i, (ids, extra) in enumerate(trace)]
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "t.jsonl"
        log.write_text("\n".join(lines) + "\n")
        store = Store.open(Path(tmp) / "s.duckdb")
        try:
            ingest_paths([str(log)], store)
            report = simulate_store(store, SimulateOptions(engine=engine,
                                                           capacity_tokens=capacity))
        finally:
            store.close()
    assert report.requests == len(trace)
    for r in report.per_request:
        assert 0 <= r.predicted <= r.ideal <= r.prompt_tokens, r
    for rate in (report.hit_rate_predicted, report.hit_rate_ideal):
        assert rate is None or 0 <= rate <= 1
    if report.hit_rate_predicted is not None and report.hit_rate_ideal is not None:
        assert report.hit_rate_predicted <= report.hit_rate_ideal


# -- regressions: the crashes this fuzzing found (each was a TypeError out of the parser) ----


def _count(fmt: str, blob: bytes, name: str) -> tuple[int, int]:
    items = _parse(fmt, blob, name)
    assert items and all(isinstance(i, Record | Skip) for i in items)
    return sum(isinstance(i, Record) for i in items), sum(isinstance(i, Skip) for i in items)


def test_codex_a_line_or_item_whose_type_is_a_list_is_no_crash() -> None:
    path = FIXTURES / TEMPLATES["codex"]
    whole = _count("codex", path.read_bytes(), path.name)
    lines = path.read_bytes().splitlines()
    # a line type that is a list: one skip, the other lines read as before
    bad_line = lines[0].replace(b'"type":"session_meta"', b'"type":[]', 1)
    assert bad_line != lines[0]
    assert _count("codex", b"\n".join([*lines, bad_line]) + b"\n", path.name) == \
        (whole[0], whole[1] + 1)
    # a response item whose type is a list: sent as an item, no crash
    item = next(i for i, x in enumerate(lines) if b'"payload":{"type":"reasoning"' in x)
    lines[item] = lines[item].replace(b'"payload":{"type":"reasoning"', b'"payload":{"type":[]')
    assert _count("codex", b"\n".join(lines) + b"\n", path.name)[0] == whole[0]


def test_openhands_a_tool_call_id_that_is_a_list_is_no_crash() -> None:
    path = FIXTURES / TEMPLATES["openhands"]
    text = path.read_bytes()
    whole = _count("openhands", text, path.name)
    damaged = text.replace(b'"tool_call_id": "toolu_1"', b'"tool_call_id": ["toolu_1"]')
    assert damaged != text
    assert _count("openhands", damaged, path.name)[0] == whole[0]


def test_otel_an_operation_name_that_is_a_list_is_no_model_call() -> None:
    path = FIXTURES / TEMPLATES["otel"]
    text = path.read_bytes()
    whole = _count("otel", text, path.name)
    old = b'{"key":"gen_ai.operation.name","value":{"stringValue":"chat"}}'
    new = b'{"key":"gen_ai.operation.name","value":{"arrayValue":{"values":[]}}}'
    assert text.count(old) >= 1
    damaged = text.replace(old, new, 1)
    assert _count("otel", damaged, path.name)[0] == whole[0] - 1


def test_a_codex_call_named_by_a_list_is_read_not_a_crash() -> None:
    """Hypothesis found it (CI, 2026-12-05): a function_call whose ``name`` is a list made
    the shell-output check hash the list (TypeError) and lost the whole rollout."""
    path = FIXTURES / TEMPLATES["codex"]
    lines = [x for x in map(_loads, path.read_bytes().splitlines()) if x is not None]
    calls = [x for x in lines if isinstance(x, dict) and isinstance(x.get("payload"), dict)
             and x["payload"].get("type") == "function_call"]
    assert calls, "the fixture holds a function_call"
    calls[0]["payload"]["name"] = []
    blob = b"".join(_dumps(x) + b"\n" for x in lines)
    items = _parse("codex", blob, path.name)
    assert items and all(isinstance(item, Record | Skip) for item in items)
