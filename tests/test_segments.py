"""segments: the hash contract, change kinds, segment paths, previews, and the census
naming the culprit in the three classic cases (billing header, key shuffle, live status
block); the key-order sample end to end; the sample generator is reproducible."""

from __future__ import annotations

import ast
import importlib.util
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from factories import BILLING, SYSTEM, TOOLS, anthropic_body, conversation, make_request
from typer.testing import CliRunner

from prefixscope.analyses.segments import (
    census,
    change_kind,
    preview,
    raw_segments,
    segment_hashes,
    token_positions,
)
from prefixscope.cli.main import app
from prefixscope.model.hashing import HASH_VERSION
from prefixscope.prompt import RenderOptions
from prefixscope.tokens.tokenize import tokens

SAMPLES = ROOT / "sample_logs"
KEYORDER = SAMPLES / "bifrost-mcp-keyorder.jsonl"
LANGFUSE_SAMPLE = "langfuse-claude-code.events_full.jsonl"
NEWAPI_SAMPLE = "new-api-logs.db"
BEHIND_NEWAPI = RenderOptions(gateway="anthropic-to-openai", tokenizer="deepseek-v4")
runner = CliRunner()


def chain(requests) -> list[tuple[str, str]]:
    return [(a.id, b.id) for a, b in zip(requests, requests[1:], strict=False)]


class TestChangeKind:
    def test_every_kind(self):
        base = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "x y"}}}
        shuffled = {"properties": {"b": {"type": "x y"}, "a": {"type": "string"}},
                    "type": "object"}
        spaced = {"type": "object", "properties": {"a": {"type": "string"},
                                                   "b": {"type": " x\n  y "}}}
        changed = {"type": "object", "properties": {"a": {"type": "integer"},
                                                    "b": {"type": "x y"}}}
        h = segment_hashes
        assert change_kind(h(base), h(json.loads(json.dumps(base)))) is None
        assert change_kind(h(base), h(shuffled)) == "key-order"
        assert change_kind(h(base), h(spaced)) == "whitespace"
        assert change_kind(h(base), h(changed)) == "value"
        assert change_kind(None, h(base)) == "inserted-deleted"
        assert change_kind(h(base), None) == "inserted-deleted"
        assert change_kind(None, None) is None

    def test_hashes_are_tagged_with_the_contract_version(self):
        hashes = segment_hashes({"text": "a"})
        assert all(v.startswith(f"{HASH_VERSION}:") for v in
                   (hashes.exact, hashes.canonical, hashes.folded))


class TestRawSegments:
    def test_anthropic_paths_as_logged(self):
        request = make_request("a", body=anthropic_body(conversation(2)))
        segs = raw_segments(request)
        assert [(s.path, s.kind) for s in segs] == [
            ("tools[0]", "tool"), ("tools[1]", "tool"), ("system[0]", "system"),
            ("system[1]", "system"), ("messages[0]", "message"), ("messages[1]", "message"),
            ("messages[2]", "message")]

    def test_string_system_is_one_segment(self):
        body = {"system": "be brief", "messages": [{"role": "user", "content": "hi"}]}
        assert [s.path for s in raw_segments(make_request("a", body=body))] == [
            "system", "messages[0]"]

    def test_openai_system_message_is_kind_system(self):
        body = {"messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "y"}],
                "tools": [{"type": "function", "function": {"name": "f"}}]}
        segs = raw_segments(make_request("a", body=body, endpoint="openai-chat"))
        assert [(s.path, s.kind) for s in segs] == [
            ("tools[0]", "tool"), ("messages[0]", "system"), ("messages[1]", "message")]

    def test_responses_instructions_and_input(self):
        body = {"instructions": "be brief", "input": [{"role": "user", "content": "hi"}]}
        segs = raw_segments(make_request("a", body=body, endpoint="openai-responses"))
        assert [s.path for s in segs] == ["instructions", "input[0]"]

    def test_no_body(self):
        assert raw_segments(make_request("a")) == []


class TestPreview:
    def test_secrets_masked(self):
        text = ("key sk-ant-api03-AbCdEf0123456789GhIjKl and mei@example.com, "
                "cch=3f9a1; plain words stay")
        assert preview(text, limit=200) == (
            "key •••••••• and ••••••••, cch=•••••; plain words stay")

    def test_whitespace_folded_and_cut(self):
        assert preview("a  b\n\n c " + "x" * 60) == "a b c " + "x" * 41 + "…"

    def test_show_text_is_unredacted(self):
        assert preview("cch=3f9a1;", limit=200, redact=False) == "cch=3f9a1;"

    def test_jumps_to_where_two_contents_differ(self):
        a = BILLING.format("3f9a1")
        b = BILLING.format("b72c0")
        shown = preview(a, other=b)
        assert shown.startswith("x-anthropic-bil") and shown.endswith("cch=•••••;")
        assert len(shown) <= 48


def billing_session(n: int) -> list:
    """Claude Code turns: a fresh cch each turn, the conversation growing."""
    return [make_request(f"b{i}", minutes=i, body=anthropic_body(
        conversation(i + 1), cch=f"{(i * 7919) % 0xfffff:05x}")) for i in range(n)]


class TestCensus:
    def test_billing_header_is_system0_unique_per_request(self):
        requests = billing_session(5)
        report = census(requests, chain(requests))
        top = report.segments[0]
        assert top.segment == "system[0]"
        assert (top.requests, top.distinct, top.unique_per_request) == (5, 5, True)
        assert (top.pairs, top.change_rate, top.change_kinds) == (4, 1.0, {"value": 4})
        grown = {s.segment: s for s in report.segments}["messages[2]"]
        assert grown.change_rate == 0.0  # appended messages are growth
        assert report.totals.pairs == 4 and report.totals.hash_version == HASH_VERSION

    def test_billing_header_token_positions(self):
        requests = billing_session(4)
        report = census(requests, chain(requests), positions=token_positions(BEHIND_NEWAPI))
        top = report.segments[0]
        assert top.segment == "system[0]"
        rendered = [tokens(r, BEHIND_NEWAPI) for r in requests]
        starts = []
        for tok in rendered:
            spans = tok.segment_token_spans()
            starts.append(min(s for seg, (s, e) in zip(tok.prompt.segments, spans, strict=True)
                              if seg.path == "system[0]" and e > s))
        afters = sorted(len(t) - s for t, s in zip(rendered, starts, strict=True))
        assert len(set(starts)) == 1  # the same tools before it in every request
        assert top.token_start_median == starts[0]
        assert top.tokens_after_median == (afters[1] + afters[2]) / 2
        assert top.invalidated_tokens == top.tokens_after_median

    def test_key_shuffle_names_the_reordered_tool(self):
        def tools(order):
            props = {"path": {"type": "string"}, "limit": {"type": "integer"},
                     "offset": {"type": "integer"}}
            return [{"type": "function", "function": {"name": "read", "parameters": {
                        "type": "object", "properties": {k: props[k] for k in order}}}},
                    {"type": "function", "function": {"name": "ls", "parameters": {
                        "type": "object", "properties": {"dir": {"type": "string"}}}}}]

        orders = [("path", "limit", "offset")] * 3 + [("limit", "offset", "path")] * 3
        requests = [make_request(f"k{i}", minutes=i, endpoint="openai-chat", body={
            "messages": [{"role": "system", "content": "ops agent"},
                         *conversation(i + 1)], "tools": tools(order)})
            for i, order in enumerate(orders)]
        report = census(requests, chain(requests),
                        positions=token_positions(RenderOptions(tokenizer="qwen3.6")))
        top = report.segments[0]
        assert top.segment == "tools[0]"
        assert top.change_kinds == {"key-order": 1}
        assert top.change_rate == pytest.approx(1 / 5)
        assert top.distinct == 2 and not top.unique_per_request
        assert {s.segment: s.change_rate for s in report.segments}["tools[1]"] == 0.0

    def test_live_status_block_in_the_system_prompt(self):
        def body(i):
            prompt = (f"{SYSTEM}\n# Environment\nWorking directory: /srv/app\n"
                      f"Active sub-agents: {i % 4 + 1} running\n# Rules\nBe concise.")
            return {"system": [{"type": "text", "text": SYSTEM},
                               {"type": "text", "text": "Tools guide."},
                               {"type": "text", "text": prompt}],
                    "tools": TOOLS, "messages": conversation(i + 1)}

        requests = [make_request(f"s{i}", minutes=i, body=body(i)) for i in range(6)]
        report = census(requests, chain(requests), positions=token_positions(BEHIND_NEWAPI))
        top = report.segments[0]
        assert top.segment == "system[2]"
        assert top.change_kinds == {"value": 5}
        assert top.distinct == 4 and not top.unique_per_request
        assert "running" in top.preview

    def test_compaction_cut_is_not_a_change_of_each_dropped_message(self):
        long = make_request("a", body=anthropic_body(conversation(4), cch="00001"))
        short = make_request("b", minutes=1, body=anthropic_body(
            [{"role": "user", "content": "summary of the session"}], cch="00001"))
        report = census([long, short], [("a", "b")])
        stats = {s.segment: s for s in report.segments}
        assert stats["messages[0]"].change_kinds == {"value": 1}
        assert stats["messages[5]"].pairs == 0 and stats["messages[5]"].change_rate is None

    def test_moving_cache_control_marker_is_not_a_change(self):
        # Claude Code puts the breakpoint on the newest message each turn: the marker
        # leaves the older message, whose content (and prompt) stays the same.
        def body(n):
            messages = [{"role": m["role"], "content": [{"type": "text", "text": m["content"]}]}
                        for m in conversation(n)]
            messages[-1]["content"][0]["cache_control"] = {"type": "ephemeral"}
            return anthropic_body(messages)

        requests = [make_request(f"c{i}", minutes=i, body=body(i + 1)) for i in range(4)]
        plain = make_request("p", body=body(1))
        plain.body["messages"][0]["content"][0].pop("cache_control")
        report = census(requests, chain(requests))
        assert {s.segment: s.change_rate for s in report.segments}["messages[0]"] == 0.0
        assert all(s.change_kinds == {} for s in report.segments)
        assert {s.segment: s.distinct for s in report.segments}["messages[0]"] == 1
        assert segment_hashes(requests[0].body["messages"][0]) == \
            segment_hashes(plain.body["messages"][0])

    def test_requests_without_body_are_counted_apart(self):
        report = census([make_request("x")], [], without_body=1)
        assert (report.totals.requests, report.totals.without_body, report.segments) == (
            0, 1, ())


def keyorder_changes() -> set[int]:
    """Tool indexes whose `properties` key order changed between two consecutive requests
    of the same conversation in the capture (read straight from the JSON lines)."""
    lines = [json.loads(line) for line in KEYORDER.read_text().splitlines()]
    changed = set()
    for a, b in zip(lines, lines[1:], strict=False):
        ma, mb = a["request"]["messages"], b["request"]["messages"]
        if mb[:len(ma)] != ma:
            continue  # a new conversation
        for k, (ta, tb) in enumerate(zip(a["request"]["tools"], b["request"]["tools"],
                                         strict=True)):
            pa = ta["function"]["parameters"]["properties"]
            pb = tb["function"]["parameters"]["properties"]
            if list(pa) != list(pb):
                assert pa == pb  # same content, other order
                changed.add(k)
    return changed


class TestKeyOrderSample:
    def test_segments_names_the_reordered_tools(self):
        changed = keyorder_changes()
        assert changed
        result = runner.invoke(app, ["segments", str(KEYORDER), "--tokenizer", "qwen3.6",
                                     "--json"], catch_exceptions=False)
        assert result.exit_code == 0
        segments = json.loads(result.stdout)["segments"]
        assert segments[0]["segment"] in {f"tools[{k}]" for k in changed}
        changing = {s["segment"]: s["change_kinds"] for s in segments if s["change_kinds"]}
        assert set(changing) == {f"tools[{k}]" for k in changed}
        assert all(set(kinds) == {"key-order"} for kinds in changing.values())

    def test_without_a_tokenizer_positions_are_omitted(self):
        result = runner.invoke(app, ["segments", str(SAMPLES / "langfuse-claude-code."
                                                     "events_full.jsonl"), "--no-tokens",
                                     "--json"], catch_exceptions=False)
        top = json.loads(result.stdout)["segments"][0]
        assert top["segment"] == "system[0]" and top["change_rate"] == 1.0
        assert (top["token_start_median"], top["invalidated_tokens"]) == (None, None)

    def test_terminal_headline_and_no_body_groups(self):
        result = runner.invoke(app, ["segments", str(SAMPLES / "new-api-logs.db"), "--by",
                                     "endpoint"], catch_exceptions=False)
        assert result.exit_code == 0
        assert "[endpoint=anthropic-messages] no request with a body" in result.stdout


def load_generator():
    spec = importlib.util.spec_from_file_location("make_samples", SAMPLES / "make_samples.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def db_rows(path: Path) -> list[tuple]:
    con = sqlite3.connect(path)
    try:
        return con.execute("SELECT * FROM logs ORDER BY id").fetchall()
    finally:
        con.close()


# Runs make_samples.py as its docstring says (``python sample_logs/make_samples.py OUT``) in
# a fresh interpreter, then prints the prefixscope modules that got imported on the way.
_RUN_GENERATOR = (
    "import runpy, sys\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    "print(sorted(m for m in sys.modules if m.split('.')[0] == 'prefixscope'))\n"
)
# Calls that import a module named by a string argument.
_IMPORTING_CALLS = {"import_module", "__import__", "find_spec", "spec_from_file_location",
                    "run_module", "run_path"}


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory) -> tuple[Path, list[str]]:
    """(folder the generator wrote, prefixscope modules it imported)."""
    out = tmp_path_factory.mktemp("samples")
    done = subprocess.run([sys.executable, "-c", _RUN_GENERATOR, str(SAMPLES / "make_samples.py"),
                           str(out)], cwd=ROOT, capture_output=True, text=True, check=True)
    return out, ast.literal_eval(done.stdout.strip().splitlines()[-1])


class TestSampleGenerator:
    @pytest.mark.slow
    def test_regenerates_the_committed_samples(self, regenerated):
        out, _ = regenerated
        for name in (LANGFUSE_SAMPLE, KEYORDER.name):
            assert (out / name).read_bytes() == (SAMPLES / name).read_bytes(), name
        assert db_rows(out / NEWAPI_SAMPLE) == db_rows(SAMPLES / NEWAPI_SAMPLE)

    def test_generator_never_imports_prefixscope(self, regenerated):
        """The samples' usage is an expected value: it comes from an independent oracle
        (the model's tokenizer, transformers' template renderer, a simple block LRU),
        never from the code under test -- neither written in the script nor loaded by it."""
        tree = ast.parse((SAMPLES / "make_samples.py").read_text(encoding="utf-8"))
        found = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [a.name for a in node.names if a.name.split(".")[0] == "prefixscope"]
            elif isinstance(node, ast.ImportFrom):
                if node.level or (node.module or "").split(".")[0] == "prefixscope":
                    found.append("." * node.level + (node.module or ""))
            elif isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                if name in _IMPORTING_CALLS:
                    found += [a.value for a in node.args if isinstance(a, ast.Constant)
                              and isinstance(a.value, str) and "prefixscope" in a.value]
        assert found == []
        assert regenerated[1] == []

    def test_sample_folder_stays_commit_sized(self):
        size = sum(p.stat().st_size for p in SAMPLES.iterdir() if p.is_file())
        assert size < 2_000_000


def test_sample_generator_uses_the_tested_new_api_schema():
    """make_samples.py carries its own copy of the DDL so it runs alone; it must not drift."""
    from builders import NEWAPI_INDEXES, NEWAPI_LOGS_DDL

    gen = load_generator()
    assert gen.NEWAPI_DDL == NEWAPI_LOGS_DDL.format(table="logs")
    assert gen.NEWAPI_INDEXES == tuple(i.format(table="logs") for i in NEWAPI_INDEXES)


@pytest.fixture(scope="module")
def mixed_store(tmp_path_factory: pytest.TempPathFactory):
    """The sample logs and fixtures of several formats (Anthropic bodies with moving
    cache_control marks, OpenAI system messages, Responses instructions and input)."""
    from prefixscope.store import Store
    from prefixscope.store.load import ingest_paths

    store = Store.open(tmp_path_factory.mktemp("stored-census") / "s.duckdb")
    fixtures = ROOT / "tests" / "fixtures"
    ingest_paths([str(SAMPLES)] + [str(fixtures / name) for name in
                                    ("codex", "litellm", "claude-code", "raw")], store)
    return store


class TestCensusOfStoredParts:
    """segments_store reads each body as stored (skeleton, layout, each distinct part once);
    the census must be the one of whole requests (`census` over `iter_requests`)."""

    @staticmethod
    def whole(store, by=()):
        from prefixscope.analyses.dimensions import group_key

        pairs = [(a, b) for a, b, _, _ in store.session_pairs(once=True)]
        session_of = store.session_of()
        groups: dict = {}
        for request in store.iter_requests():
            key = group_key(by, request, session_of.get(request.id))
            groups.setdefault(key, []).append(request)
        return [census([r for r in groups[k] if r.body is not None], pairs,
                       group=dict(zip(by, k, strict=True)),
                       without_body=sum(r.body is None for r in groups[k]))
                for k in sorted(groups, key=lambda k: tuple(map(str, k)))]

    def test_the_store_holds_what_the_comparison_needs(self, mixed_store):
        requests = list(mixed_store.iter_requests())
        assert any(r.endpoint == "openai-responses" for r in requests)
        assert any("cache_control" in json.dumps(r.body) for r in requests if r.body)
        assert any(m.get("role") == "system" for r in requests if isinstance(r.body, dict)
                   for m in r.body.get("messages") or [] if isinstance(m, dict))
        assert len(list(mixed_store.session_pairs(once=True))) > 20

    def test_same_census_as_whole_requests(self, mixed_store):
        from prefixscope.analyses.segments import segments_store

        assert segments_store(mixed_store, (), with_tokens=False) == self.whole(mixed_store)

    def test_same_census_by_group(self, mixed_store):
        from prefixscope.analyses.segments import segments_store

        got = segments_store(mixed_store, ("source",), with_tokens=False)
        assert len(got) > 3
        assert got == self.whole(mixed_store, ("source",))

    def test_same_census_when_parts_are_read_again(self, mixed_store, monkeypatch):
        from prefixscope.analyses import segments

        real = segments.PartCensus
        monkeypatch.setattr(segments, "PartCensus", lambda store: real(store, limit=5))
        assert segments.segments_store(mixed_store, (), with_tokens=False) == \
            self.whole(mixed_store)
