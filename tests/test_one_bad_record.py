"""One bad record never sinks the rest (issue 39): a record nested deeper than the store's
JSON writer goes, dated outside 1970-2100, or reporting a token count no context window
holds is one counted skip with its reason; every other record of the file is stored and
the numbers over them are what they would be without it.

Before the fix: a 300-deep body stopped its file ("raw parser stopped: TypeError:
Recursion limit reached", the records after it lost) or, where the parser hashed nothing,
the whole ingest (`internal error`, no store); a record dated 0001-01-01 made `report`
fail with "year 0 is out of range" and `simulate` with an internal error; one
``prompt_tokens: 2**40`` among 20 calls made the hit rate 0.00% and the spend $10,995,116.

The expected values are worked out by hand from how each file is built.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.model import Usage

sys.path.insert(0, str(FIXTURES / "hostile"))
import make_corpus  # noqa: E402 - the corpus's own recipes (no prefixscope in it)

runner = CliRunner()
# orjson writes 254 nested containers and raises on 255 (its documented recursion limit;
# it reads 1024): the deepest record the store can hold.
WRITER_LIMIT = 254


def invoke(*args: str | Path) -> Any:
    result = runner.invoke(app, [str(a) for a in args], catch_exceptions=False)
    assert "Traceback" not in result.output + result.stderr, result.stderr
    return result


def ingest(path: Path, *extra: str) -> tuple[Any, dict[str, Any]]:
    result = invoke("ingest", path, "--store", "s.duckdb", "--json", *extra)
    return result, json.loads(result.stdout)


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def nested_schema(levels: int) -> dict[str, Any]:
    """A JSON Schema `levels` objects deep: each level is 2 containers (the schema and its
    ``properties``), the innermost schema 1."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


def nested_lists(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def capture(i: int, prompt: int, **body: Any) -> dict[str, Any]:
    """A raw proxy capture of an OpenAI chat call with its response id and usage."""
    return {"timestamp": f"2026-03-02T09:{i:02d}:00Z",
            "request": {"model": "gpt-4.1", "messages": [
                {"role": "system", "content": "You are a careful assistant. " * 200},
                {"role": "user", "content": f"question {i}"}], **body},
            "response": {"id": f"chatcmpl-{i}", "object": "chat.completion", "model": "gpt-4.1",
                         "choices": [{"index": 0, "finish_reason": "stop", "message": {
                             "role": "assistant", "content": "ok"}}],
                         "usage": {"prompt_tokens": prompt, "completion_tokens": 5,
                                   "prompt_tokens_details": {"cached_tokens": 0 if i == 0
                                                             else 1024}}}}


class TestTooDeep:
    def test_150_nested_tool_schemas_among_good_bodies_are_one_skip_each(self) -> None:
        # bare bodies: the raw format hashes the record for its key (the parser stopped)
        deep_tools = [{"name": "t", "description": "d", "input_schema": nested_schema(150)}]
        deep_dict: dict[str, Any] = {}
        for _ in range(299):
            deep_dict = {"k": deep_dict}
        good = [make_corpus.body(f"good {i}") for i in range(6)]
        records = [*good[:3], {**make_corpus.body("tools"), "tools": deep_tools},
                   {**make_corpus.body("deep dict"), "metadata": deep_dict}, *good[3:]]
        result, out = ingest(write_jsonl(Path("bodies.jsonl"), records))
        assert result.exit_code == 0
        assert (out["ingested"], out["skipped"]) == (6, 2)
        # a container is a level: the body 1, tools 2, the tool 3, then 150 schemas with
        # their properties (300) and the innermost schema (1): 304; the dict: 1 + 300 = 301
        assert [(e["line"], e["reason"]) for e in out["errors"]] == [
            (4, f"JSON nested 304 levels deep: prefixscope hashes and stores at most "
                f"{WRITER_LIMIT} (orjson's writer limit)"),
            (5, f"JSON nested 301 levels deep: prefixscope hashes and stores at most "
                f"{WRITER_LIMIT} (orjson's writer limit)")]

    def test_a_deep_capture_with_a_response_id_does_not_lose_the_whole_ingest(self) -> None:
        # a capture keyed by its response id is hashed nowhere in the parser: before the
        # fix the store write failed and nothing of any file was stored
        deep = capture(3, 1300, tools=[{"type": "function", "function": {
            "name": "t", "parameters": nested_schema(150)}}])
        records = [capture(i, 1200 + i) for i in range(3)] + [deep] + [
            capture(i, 1200 + i) for i in range(4, 8)]
        result, out = ingest(write_jsonl(Path("caps.jsonl"), records))
        assert result.exit_code == 0
        assert (out["ingested"], out["skipped"]) == (7, 1)
        assert out["errors"][0]["line"] == 4
        assert out["errors"][0]["reason"].startswith("JSON nested 306 levels deep")

    def test_the_deepest_record_the_writer_holds_is_kept_and_one_more_is_skipped(self) -> None:
        # a bare body: the record (1), messages (2), the message (3), its content (4..)
        def body(depth: int) -> dict[str, Any]:
            return {"model": "m", "messages": [{"role": "user",
                                                "content": nested_lists(depth - 3)}]}
        path = write_jsonl(Path("edge.jsonl"), [body(WRITER_LIMIT), body(WRITER_LIMIT + 1),
                                                make_corpus.body("after")])
        result, out = ingest(path)
        assert (out["ingested"], out["skipped"]) == (2, 1)
        assert [e["line"] for e in out["errors"]] == [2]
        assert out["errors"][0]["reason"].startswith(f"JSON nested {WRITER_LIMIT + 1} levels")
        for args in (("bucket",), ("segments",), ("diff", "--all")):
            assert invoke(*args, "--store", "s.duckdb").exit_code == 0, args

    def test_a_deep_element_of_a_json_array_is_a_skip_at_its_index(self) -> None:
        deep = {**make_corpus.body("deep"), "metadata": nested_lists(400)}
        Path("doc.json").write_text(json.dumps(
            [make_corpus.body("one"), deep, make_corpus.body("three")]))
        result, out = ingest(Path("doc.json"))
        assert (out["ingested"], out["skipped"]) == (2, 1)
        assert out["errors"][0]["line"] == 2
        assert out["errors"][0]["reason"].startswith("JSON nested 401 levels deep")


class TestOutOfRangeDates:
    @pytest.mark.parametrize("when", ["0001-01-01T00:00:00.000Z", "1969-12-31T23:59:59Z",
                                      "2101-01-01T00:00:00Z", "9999-12-31T23:59:59Z"])
    def test_a_call_dated_outside_1970_2100_is_one_skip_and_report_and_simulate_run(
            self, when: str) -> None:
        lines = []
        for n in range(6):
            lines += [make_corpus.cc_user(n), make_corpus.cc_line(
                n, ts=when if n == 3 else f"2026-03-02T09:0{n}:00.000Z")]
        result, out = ingest(write_jsonl(Path("t.jsonl"), lines))
        assert (out["ingested"], out["skipped"]) == (5, 1)
        shown = when.replace("Z", "").replace(".000", "")
        assert [(e["line"], e["reason"]) for e in out["errors"]] == [
            (8, f"its time, {shown}, is outside 1970-2100 (a placeholder date, or a number "
                "in the wrong unit): not when a model call was made")]
        for args in (("report",), ("simulate",), ("bucket",)):
            assert invoke(*args, "--store", "s.duckdb").exit_code == 0, args

    @pytest.mark.parametrize("when", ["1970-01-01T00:00:00Z", "2100-12-31T23:59:59Z"])
    def test_the_ends_of_the_range_are_kept(self, when: str) -> None:
        lines = [make_corpus.cc_user(1), make_corpus.cc_line(1, ts=when)]
        _, out = ingest(write_jsonl(Path("t.jsonl"), lines))
        assert (out["ingested"], out["skipped"]) == (1, 0)


class TestImpossibleCounts:
    def test_one_count_beyond_any_context_window_is_a_skip_and_the_numbers_stay_sane(
            self) -> None:
        records = [capture(i, 2**40 if i == 7 else 1210 + i) for i in range(20)]
        result, out = ingest(write_jsonl(Path("calls.jsonl"), records))
        assert (out["ingested"], out["skipped"]) == (19, 1)
        assert out["errors"][0]["line"] == 8
        assert out["errors"][0]["reason"] == (
            "token counts no context window holds (prompt_tokens=1,099,511,627,776; the "
            "bound is 10,000,000, the largest published window): a damaged counter, so the "
            "call is left out of every total")
        # the other 19: prompts 1210..1229 without 1217; 1,024 cached on all but call 0
        prompt = sum(range(1210, 1230)) - 1217
        assert (out["totals"]["prompt_tokens"], out["totals"]["cached_tokens"]) == (
            prompt, 18 * 1024) == (23_173, 18_432)
        report = json.loads(invoke("report", "--store", "s.duckdb", "--json").stdout)
        assert report["summary"]["hit_rate"] == pytest.approx(18_432 / 23_173)
        # gpt-4.1 list prices: $2 / Mtok input, $0.50 cached, $8 output; 5 output tokens each
        spend = ((prompt - 18_432) * 2 + 18_432 * 0.5 + 19 * 5 * 8) / 1e6
        assert report["summary"]["money"]["spend_usd"] == pytest.approx(spend)
        gate = invoke("report", "--store", "s.duckdb", "--fail-under", "0.75")
        assert gate.exit_code == 0, gate.stderr

    def test_the_bound_is_ten_million_tokens(self) -> None:
        assert Usage(prompt_tokens=10_000_000, output_tokens=0).impossible == ()
        over = Usage(prompt_tokens=10_000_001, cached_tokens=5, output_tokens=2**63)
        assert (over.prompt_tokens, over.cached_tokens, over.output_tokens) == (None, 5, None)
        assert over.impossible == ("prompt_tokens=10,000,001",
                                   "output_tokens=9,223,372,036,854,775,808")
        # negative counts are unreported, as before, and not impossible counts
        assert Usage(prompt_tokens=-5).impossible == ()


def test_a_kept_body_is_serialized_once_by_its_test() -> None:
    """Issue 37: ingest keeps the text its serialize test made (a store write hashes and
    stores it, instead of serializing the body again): `checked` gives the body written
    (`bodytext.write_body`), the hash and size of its compact JSON in its own key order, in
    UTF-8 (Python's json writes the same, the oracle), for a kept request; none for a
    request without a body or a skipped one, whose reason is `unusable`'s, whatever nests
    deeper in its body."""
    from datetime import datetime

    from prefixscope.ingest import checked, unusable
    from prefixscope.model import Request
    from prefixscope.model.hashing import exact_hash

    body = {"model": "m", "messages": [{"role": "user", "content": "é 1"}], "a": [1, 2.5]}
    kept = Request("r", "raw", "f", 1, datetime(2026, 1, 1), body=body)
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    why, written = checked(kept)
    assert why == "" and written is not None
    assert (written.hash, written.size) == (exact_hash(text), len(text))
    assert checked(Request("r", "raw", "f", 1, datetime(2026, 1, 1))) == ("", None)
    deep: dict[str, Any] = {}
    for _ in range(WRITER_LIMIT):
        deep = {"x": deep}  # 255 containers, the body 256: past the 254 orjson writes
    for bad in (Request("r", "raw", "f", 1, datetime(1, 1, 1), body=body),
                Request("r", "raw", "f", 1, datetime(2026, 1, 1), body={"x": deep})):
        why, text = checked(bad)
        assert why == unusable(bad) != "" and text is None
    assert checked(Request("r", "raw", "f", 1, datetime(2026, 1, 1), body={"x": deep}))[0] \
        .startswith(f"JSON nested {WRITER_LIMIT + 2} levels deep")
