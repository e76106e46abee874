"""`prefixscope report` end to end: each finding kind from a focused scenario (and absent
from a clean control), the bundled sample's verdict, the gate's exit codes and baseline,
and every output file parsed back (JSON, Markdown, JUnit, HTML) with log text escaped."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from agent_captures import write_agent_captures
from conftest import ROOT
from gen_vllm_log import generate
from report_scenarios import at, from_turn, planted_log, write_session
from typer.testing import CliRunner

from prefixscope.cli.main import app

runner = CliRunner()
SAMPLES = str(ROOT / "sample_logs")
BREAKAGE = {"volatile-prefix-segment", "json-key-order", "tool-order", "tool-set-change",
            "history-rewrite", "template-divergence", "model-change", "pinned-constant"}


def report(*args: str, code: int = 0) -> dict[str, Any]:
    result = runner.invoke(app, ["report", *args, "--json"])
    assert result.exit_code == code, result.output + result.stderr
    return json.loads(result.stdout)


def kinds(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["kind"]: f for f in doc["findings"]}


def _stamp(turn: int, request: dict[str, Any]) -> None:
    request["messages"][0]["content"] = (f"Current time: 2026-06-01T10:{turn:02d}:13Z. "
                                         + request["messages"][0]["content"])


def _stamp_late(turn: int, request: dict[str, Any]) -> None:
    request["messages"][0]["content"] += f" Current time: 2026-06-01T10:{turn:02d}:13Z."


def _extra_tool(request: dict[str, Any]) -> None:
    request["tools"].append({"type": "function", "function": {
        "name": "web", "description": "search the web",
        "parameters": {"type": "object", "properties": {}}}})


def _elide(request: dict[str, Any]) -> None:
    request["messages"][2]["content"] = "[old output elided]"


def _reorder_keys(request: dict[str, Any]) -> None:
    props = request["tools"][1]["function"]["parameters"]["properties"]
    request["tools"][1]["function"]["parameters"]["properties"] = dict(reversed(props.items()))


SCENARIOS = {  # kind -> (change, blamed segment, breaking pairs of the 5)
    "volatile-prefix-segment": (_stamp, "messages[0]", 5),
    "tool-order": (from_turn(3, lambda r: r["tools"].reverse()), "tools", 1),
    "tool-set-change": (from_turn(3, _extra_tool), "tools", 1),
    "history-rewrite": (from_turn(3, _elide), "messages", 1),
    "json-key-order": (at(3, _reorder_keys), "tools", 2),  # changed at 3, back at 4
}


class TestScenarios:
    @pytest.mark.parametrize("kind", sorted(SCENARIOS))
    def test_one_change_gives_its_kind_and_nothing_else(self, kind: str, tmp_path: Path):
        change, segment, pairs = SCENARIOS[kind]
        log = write_session(tmp_path / f"{kind}.jsonl", change=change)
        doc = report(str(log))
        found = kinds(doc)
        assert set(found) & BREAKAGE == {kind}
        f = found[kind]
        assert (f["segment"], f["evidence"]["pairs"], f["evidence"]["pairs_diffed"]) == (
            segment, pairs, 5)
        assert f["lost_tokens"] > 0 and f["fix"]
        assert f["share"] == pytest.approx(f["lost_tokens"] / doc["summary"]
                                           ["replayed_prompt_tokens"])

    def test_the_clean_control_has_no_finding_and_passes_every_gate(self, tmp_path: Path):
        log = write_session(tmp_path / "clean.jsonl")
        doc = report(str(log), "--max-volatile-before", "100000", "--fail-under", "0.5")
        # the one thing to say: the captures carry no usage, so no hit rate is observed
        (lint,) = doc["findings"]
        assert (lint["kind"], lint["evidence"]["check"]) == ("usage-semantics",
                                                              "missing-vs-zero")
        assert doc["gate"]["passed"] and len(doc["gate"]["checks"]) == 2
        # 6 append-only turns: the stable prefix is the first turn's whole prompt.
        (scenario,) = doc["scenarios"]
        assert scenario["scenario"] == "clean.jsonl#1" and scenario["turns"] == 6

    def test_a_model_switch_inside_one_session_is_model_change(self, tmp_path: Path):
        log = write_session(tmp_path / "m.jsonl", session="task-1",
                            change=from_turn(3, lambda r: r.update(model="gpt-4.1-mini")))
        found = kinds(report(str(log)))
        assert found["model-change"]["evidence"]["pairs"] == 1

    def test_reasoning_the_template_drops_later_is_template_divergence(self, tmp_path: Path):
        """Qwen's template keeps an assistant turn's reasoning only while no user message
        follows it: the messages stay append-only, the rendered prompt does not."""
        call = {"role": "assistant", "content": "", "reasoning": "I should grep.",
                "tool_calls": [{"id": "c1", "type": "function", "function": {
                    "name": "grep", "arguments": "{\"pattern\": \"x\"}"}}]}

        def loop(turn: int, request: dict[str, Any]) -> None:
            if turn >= 2:
                request["messages"] = [*request["messages"][:3], {"role": "user",
                                                                   "content": "look"},
                                       call, {"role": "tool", "tool_call_id": "c1",
                                              "content": "x found"}]
            if turn >= 3:
                request["messages"] += [{"role": "assistant", "content": "Found it."},
                                        {"role": "user", "content": "thanks"}]

        log = write_session(tmp_path / "q.jsonl", model="qwen3.6-35b-a3b", change=loop,
                            turns=4)
        found = kinds(report(str(log)))
        assert found["template-divergence"]["evidence"]["pairs"] == 1

    def test_a_gateway_reporting_cache_inclusive_input_to_anthropic_clients_is_flagged(self):
        lint = [f for f in report(SAMPLES)["findings"] if f["kind"] == "usage-semantics"
                and f["evidence"].get("check") == "input-includes-cache-reads"]
        assert len(lint) == 1 and lint[0]["evidence"]["requests"] == 58

    def test_an_idle_gap_in_claude_code_usage_is_ttl_expiry(self):
        log = str(ROOT / "tests" / "fixtures" / "claude-code" / "idle_gap_session.jsonl")
        doc = report(log)
        assert doc["summary"]["engine"] == "anthropic"
        # the fixture's 4th call came after 4 hours: the 5-minute entry had expired, and
        # the warm read would have been what the 3rd call left in the cache, its read +
        # write (21,498 + 1,499): its 3 uncached input tokens were never written
        assert kinds(doc)["ttl-expiry"]["lost_tokens"] == 21498 + 1499

    def test_an_openai_log_missing_intact_prefixes_is_provider_miss(self, tmp_path: Path):
        log = write_session(tmp_path / "p.jsonl", usage=lambda turn: {
            "prompt_tokens": 1500 + 40 * turn, "completion_tokens": 9,
            "prompt_tokens_details": {"cached_tokens": 0}})
        doc = report(str(log))
        provider = kinds(doc)["provider-miss"]
        assert provider["evidence"]["requests"] == 5  # every call after the first
        assert "prompt_cache_key" in provider["fix"]

    def test_interleaved_sessions_on_a_small_cache_are_eviction_pressure(self, tmp_path: Path):
        log = tmp_path / "vllm.jsonl"
        generate(log, block_size=32, capacity_blocks=150)
        doc = report(str(log))
        evict = kinds(doc)["eviction-pressure"]
        assert doc["summary"]["engine"] == "vllm" and evict["evidence"]["unit"] == 32
        assert evict["lost_tokens"] > 0 and evict["fix_hit_rate"] is not None
        assert evict["fix_hit_rate"] > doc["summary"]["hit_rate_predicted"]

    def test_a_compacted_session_is_compaction(self, tmp_path: Path):
        log = tmp_path / "agents.jsonl"
        write_agent_captures(log, sessions=3, turns=5, compact_after={1: 3}, cached_block=16)
        found = kinds(report(str(log)))
        assert found["compaction"]["evidence"]["requests"] == 1

    def test_truncated_bodies_and_bad_records_are_reported(self):
        log = str(ROOT / "tests" / "fixtures" / "litellm" / "truncated_and_bad.jsonl")
        found = kinds(report(log))
        assert found["truncated-bodies"]["evidence"]["requests"] >= 1
        assert found["bad-records"]["evidence"]["skipped"] >= 1
        assert found["bad-records"]["lost_tokens"] == 0


class TestSample:
    """The bundled incident: Claude Code behind a converting gateway, an MCP agent."""

    @pytest.fixture(scope="class")
    @classmethod
    def doc(cls) -> dict[str, Any]:
        return report(SAMPLES)

    def test_the_billing_header_is_the_top_finding_and_its_fix_is_priced(self, doc):
        top = doc["findings"][0]
        assert (top["kind"], top["segment"], top["severity"]) == (
            "volatile-prefix-segment", "system[0]", "high")
        assert "cch=" in top["evidence"]["excerpt"]
        assert top["fix_hit_rate"] > doc["summary"]["hit_rate_predicted"]

    def test_the_2880_constant_is_45_blocks_of_64_at_the_system_prompt(self, doc):
        pinned = [f for f in doc["findings"] if f["kind"] == "pinned-constant"
                  and f["evidence"]["cached_tokens"] == 2880]
        assert len(pinned) == 1 and pinned[0]["segment"] == "system[0]"
        assert "45 × 64" in pinned[0]["title"]

    def test_the_mcp_gateways_key_shuffles_are_json_key_order(self, doc):
        keys = kinds(doc)["json-key-order"]
        assert keys["evidence"]["pairs"] == 5  # sample_logs/README.md: 5 of 41 pairs

    def test_findings_are_ranked_severe_first_then_by_lost_tokens_lenses_after(self, doc):
        lenses = {"pinned-constant", "low-hit-rate-dimension"}
        order = ["high", "medium", "low", "info"]
        causes = [(order.index(f["severity"]), -f["lost_tokens"]) for f in doc["findings"]
                  if f["kind"] not in lenses and f["severity"] != "info"]
        assert causes == sorted(causes)
        group = [2 if f["severity"] == "info" else 1 if f["kind"] in lenses else 0
                 for f in doc["findings"]]
        assert group == sorted(group)

    def test_the_terminal_shows_the_summary_and_each_fix(self):
        result = runner.invoke(app, ["report", SAMPLES])
        assert result.exit_code == 0, result.stderr
        assert "hit rate" in result.stdout and result.stdout.count("fix:") >= 3
        assert "volatile-prefix-segment" in result.stdout


class TestEvictionSample:
    """sample_logs/vllm-agents-eviction.jsonl.gz: four sessions on a 60-block cache."""

    SAMPLE = ROOT / "sample_logs" / "vllm-agents-eviction.jsonl.gz"

    def test_the_generator_reproduces_the_file_and_never_imports_prefixscope(
            self, tmp_path: Path):
        script = ROOT / "sample_logs" / "make_eviction_sample.py"
        probe = ("import runpy, sys; sys.argv = ['x', sys.argv[1]]; "
                 f"runpy.run_path({str(script)!r}, run_name='__main__'); "
                 "assert not [m for m in sys.modules if m.split('.')[0] == 'prefixscope'], "
                 "'prefixscope imported'")
        done = subprocess.run([sys.executable, "-c", probe, str(tmp_path)],
                              capture_output=True, text=True, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert (tmp_path / self.SAMPLE.name).read_bytes() == self.SAMPLE.read_bytes()

    def test_eviction_pressure_and_the_shared_prefix_constant(self):
        doc = report(str(self.SAMPLE))
        found = kinds(doc)
        assert doc["summary"]["requests"] == 24 and doc["summary"]["sessions"] == 4
        evict = found["eviction-pressure"]
        assert evict["evidence"]["unit"] == 16
        assert evict["fix_hit_rate"] > doc["summary"]["hit_rate"]
        pinned = found["pinned-constant"]
        # make_eviction_sample.py: the shared system prompt renders to 320 tokens = 20 blocks
        assert pinned["evidence"]["cached_tokens"] == 320 and "20 × 16" in pinned["title"]
        assert "shared by 4" in pinned["fix"]


class TestEngineLogs:
    """vLLM logs among the request logs, or named with --engine-log, join the report."""

    OFFLOAD = str(ROOT / "sample_logs" / "vllm-offload.log")

    def test_a_write_only_offload_tier_in_the_sample_is_l2_write_only(self):
        l2 = kinds(report(SAMPLES))["l2-write-only"]
        # sample_logs/make_engine_log.py: 120 stats lines, every offload transfer a store
        assert l2["evidence"]["load_points"] == 0 and l2["evidence"]["store_points"] == 120
        assert l2["severity"] == "medium" and l2["lost_tokens"] == 0

    def test_an_engine_log_alone_is_a_report_of_its_findings(self):
        doc = report(self.OFFLOAD)
        assert doc["summary"]["requests"] == 0
        assert "l2-write-only" in kinds(doc)
        assert "no model calls in the logs: engine logs only" in doc["notes"]

    def test_engine_log_option_adds_a_log_to_a_store(self, tmp_path: Path):
        store = tmp_path / "s.duckdb"
        assert runner.invoke(app, ["ingest", str(ROOT / "sample_logs" / "bifrost-mcp-keyorder"
                                                  ".jsonl"), "--store", str(store)]).exit_code == 0
        assert "l2-write-only" not in kinds(report("--store", str(store)))
        assert "l2-write-only" in kinds(report("--store", str(store), "--engine-log",
                                               self.OFFLOAD))

    def test_a_named_file_that_is_no_engine_log_is_one_line(self, tmp_path: Path):
        bad = tmp_path / "notes.txt"
        bad.write_text("hello\n")
        log = str(ROOT / "sample_logs" / "bifrost-mcp-keyorder.jsonl")
        result = runner.invoke(app, ["report", log, "--engine-log", str(bad)])
        assert result.exit_code == 1 and result.stderr.count("\n") == 1, result.stderr
        assert "notes.txt" in result.stderr


class TestGate:
    def test_exit_codes(self, tmp_path: Path):
        log = str(write_session(tmp_path / "v.jsonl", change=_stamp))
        assert runner.invoke(app, ["report", log]).exit_code == 0
        failed = runner.invoke(app, ["report", log, "--max-volatile-before", "1000"])
        assert failed.exit_code == 3 and "gate failed: volatile-before" in failed.stderr
        assert runner.invoke(app, ["report", log, "--fail-under", "2"]).exit_code == 2
        assert runner.invoke(app, ["report", log, "--engine", "nope"]).exit_code == 2
        bad = tmp_path / "bad.json"
        bad.write_text("{}")
        result = runner.invoke(app, ["report", log, "--baseline", str(bad)])
        assert result.exit_code == 1 and "not a prefixscope baseline" in result.stderr

    def test_a_baseline_passes_on_the_same_logs_and_fails_when_a_prefix_shrinks(
            self, tmp_path: Path):
        before = write_session(tmp_path / "agent.jsonl", change=_stamp_late)
        base = tmp_path / "base.json"
        ok = runner.invoke(app, ["report", str(before), "--write-baseline", str(base)])
        assert ok.exit_code == 0, ok.stderr
        saved = json.loads(base.read_text())["scenarios"]
        assert list(saved) == ["agent.jsonl#1"]
        assert runner.invoke(app, ["report", str(before), "--baseline", str(base)]
                             ).exit_code == 0
        # the same scenario re-recorded after a regression: the timestamp moved to the top
        after = write_session(tmp_path / "agent.jsonl", change=_stamp)
        junit = tmp_path / "gate.xml"
        result = runner.invoke(app, ["report", str(after), "--baseline", str(base),
                                     "--junit", str(junit)])
        assert result.exit_code == 3
        suite = ET.parse(junit).getroot().find("testsuite")
        assert suite is not None and suite.get("failures") == "1"
        (case,) = suite.findall("testcase")
        assert case.get("name") == "baseline:agent.jsonl#1"
        assert case.find("failure") is not None and "shrank by" in case.find("failure").text

    @pytest.mark.slow
    def test_junit_lists_one_case_per_check(self, tmp_path: Path):
        junit = tmp_path / "gate.xml"
        result = runner.invoke(app, ["report", SAMPLES, "--fail-under", "0.5",
                                     "--max-volatile-before", "5", "--junit", str(junit)])
        assert result.exit_code == 0, result.stderr
        cases = ET.parse(junit).getroot().iter("testcase")
        assert [c.get("name") for c in cases] == ["hit-rate", "volatile-before"]


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []
        self.meta: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        named = dict(attrs)
        if tag == "meta" and named.get("http-equiv"):
            self.meta[str(named["http-equiv"])] = str(named.get("content"))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


class TestOutputs:
    @pytest.mark.slow
    def test_every_file_is_written_and_json_to_stdout_is_alone(self, tmp_path: Path):
        files = {ext: tmp_path / f"r.{ext}" for ext in ("html", "md", "json", "xml")}
        result = runner.invoke(app, ["report", SAMPLES, "--html", str(files["html"]),
                                     "--md", str(files["md"]),
                                     "--json-file", str(files["json"]),
                                     "--junit", str(files["xml"])])
        assert result.exit_code == 0, result.stderr
        assert all(f.stat().st_size > 0 for f in files.values())
        # sample_logs: 166 calls (sample_logs/README.md) + the 24 of the eviction sample
        assert json.loads(files["json"].read_text())["summary"]["requests"] == 166 + 24
        alone = runner.invoke(app, ["report", SAMPLES, "--json"])
        json.loads(alone.stdout)  # nothing but the document on stdout

    def test_html_escapes_log_text_and_is_self_contained(self, tmp_path: Path):
        page = tmp_path / "r.html"
        result = runner.invoke(app, ["report", str(planted_log(tmp_path)), "--html", str(page)])
        assert result.exit_code == 0, result.stderr
        text = page.read_text()
        parsed = _Tags()
        parsed.feed(text)
        assert "script" not in parsed.tags and parsed.tags.count("img") == len(
            re.findall(r'<img alt="[^"]*" src="data:image/png;base64,', text))
        assert "<script>window.pwned" in "".join(parsed.text)  # shown, as text
        csp = parsed.meta["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "script-src" not in csp  # no script may run
        assert not re.search(r"(src|href)=\"(https?:|//)", text)

    def test_markdown_escapes_log_text(self, tmp_path: Path):
        md = tmp_path / "r.md"
        result = runner.invoke(app, ["report", str(planted_log(tmp_path)), "--md", str(md),
                                     "--max-volatile-before", "100000"])
        assert result.exit_code == 3
        text = md.read_text()
        assert "<script>" not in text and "<img" not in text and "](http" not in text
        # every row of a table has its header's columns: no pipe from a log splits a cell
        tables: list[list[int]] = [[]]
        for line in text.splitlines():
            if line.startswith("|"):
                tables[-1].append(len(re.findall(r"(?<!\\)\|", line)))
            elif tables[-1]:
                tables.append([])
        assert any(tables) and all(len(set(t)) <= 1 for t in tables)
