"""The same upstream call logged by two sources: linked once (`duplicate_of`), each source
still shown on its own, every total over all sources counting the call once."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from conftest import ROOT
from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.store.duplicates import WINDOW_S, CallRow, call_row, link_duplicates

runner = CliRunner()
T0 = datetime(2026, 8, 17, 1, 0, 0)


def row(rid: str, file: str, *, fmt: str = "raw", seconds: float = 0.0, response_id=None,
        body=None, model="m", usage=(1000, 512, None, 20), line: int | None = None) -> CallRow:
    prompt, cached, write, output = usage
    return CallRow(rid, fmt, file, line, T0 + timedelta(seconds=seconds), model, response_id,
                   body, prompt, cached, write, output)


class TestLinking:
    def test_same_response_id_in_two_files(self):
        links = link_duplicates([row("a", "proxy.jsonl", response_id="chatcmpl-1", body="x3:1"),
                                 row("b", "litellm.csv", fmt="litellm", seconds=3000,
                                     response_id="chatcmpl-1", usage=(1, 0, None, 1))])
        assert links == {"b": "a"}  # the copy with a body is kept; time does not matter

    def test_one_file_never_logs_a_call_twice(self):
        assert link_duplicates([row("a", "f", response_id="r1", body="h"),
                                row("b", "f", seconds=1, response_id="r1", body="h")]) == {}

    def test_same_body_and_model_within_the_window(self):
        rows = [row("a", "client.jsonl", body="h1", usage=(None, None, None, None)),
                row("b", "proxy.jsonl", seconds=WINDOW_S, body="h1"),
                row("c", "proxy.jsonl", seconds=WINDOW_S + 1, body="h1", model="other"),
                row("d", "zz.jsonl", seconds=WINDOW_S + 1, body="h1"),
                row("e", "late.jsonl", seconds=2 * WINDOW_S + 2, body="h1")]
        # a-b: same body and model, 120 s apart; c has another model; d is 121 s from a but
        # 1 s from b, a third copy; e is 121 s from d. Kept: a body and the most usage
        # fields (b, d), then the first file name.
        assert link_duplicates(rows) == {"a": "b", "d": "b"}

    def test_same_usage_needs_two_formats_and_the_window(self):
        tracer = row("t", "langfuse.jsonl", fmt="langfuse")
        gateway = row("g", "new-api.db", fmt="new-api", seconds=2.5)
        late = row("l", "new-api.db", fmt="new-api", seconds=WINDOW_S + 0.5)
        same_format = row("s", "langfuse-2.jsonl", fmt="langfuse", seconds=1)
        assert link_duplicates([tracer, gateway]) == {"g": "t"}
        assert link_duplicates([tracer, late]) == {}
        assert link_duplicates([tracer, same_format]) == {}
        # two Langfuse files' look-alike calls: the gateway's row is a copy of one of them
        assert link_duplicates([tracer, same_format, gateway]) == {"g": "t"}

    def test_identical_calls_pair_one_to_one_nearest_first(self):
        rows = [row(f"t{i}", "langfuse.jsonl", fmt="langfuse", seconds=i) for i in range(3)]
        rows += [row(f"g{i}", "new-api.db", fmt="new-api", seconds=i + 0.5) for i in range(3)]
        assert link_duplicates(rows) == {"g0": "t0", "g1": "t1", "g2": "t2"}

    def test_three_sources_point_at_one_copy(self):
        rows = [row("raw", "capture.jsonl", response_id="msg_1", body="h"),
                row("cc", "session.jsonl", fmt="claude-code", seconds=1, response_id="msg_1"),
                row("gw", "new-api.db", fmt="new-api", seconds=2)]
        assert link_duplicates(rows) == {"cc": "raw", "gw": "raw"}


class TestResponseIdFormats:
    """A format whose native id is the id the provider (or the gateway the client called)
    returned in the response: a gateway's log of the same calls carries it too."""

    @staticmethod
    def spend_log(folder: Path) -> list[dict]:
        """The LiteLLM proxy's spend rows of the calls in an OpenHands completion folder
        (the SDK called ``litellm_proxy/...``: the proxy logs each call under the response
        id it returned), from a LiteLLM that kept no usage object in the row's metadata."""
        rows = []
        for path in sorted(folder.rglob("*.json")):
            doc = json.loads(path.read_text())
            end = datetime.fromtimestamp(doc["timestamp"], UTC)
            usage = doc["response"]["usage"]
            rows.append({"request_id": doc["response"]["id"], "call_type": "acompletion",
                         "spend": doc["cost"],
                         "startTime": (end - timedelta(seconds=doc["latency_sec"])).isoformat(),
                         "endTime": end.isoformat(),
                         "model": doc["response"]["model"].split("/", 1)[1],
                         "prompt_tokens": usage["prompt_tokens"],
                         "completion_tokens": usage["completion_tokens"],
                         "total_tokens": usage["total_tokens"], "metadata": {}})
        return rows

    def test_openhands_completions_and_the_proxys_spend_log_count_each_call_once(
            self, tmp_path):
        shutil.copytree(ROOT / "tests/data/real/openhands-completions", "logs")
        rows = self.spend_log(Path("logs"))
        Path("logs/spend_logs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        calls = {r["request_id"] for r in rows}  # one response id a call
        assert len(calls) == 10
        runner.invoke(app, ["ingest", "logs", "--store", "s.duckdb"])
        stored = json.loads(runner.invoke(app, [
            "sql", "select source_format, native_id, duplicate_of, "
                   "(select native_id from requests k where k.id = r.duplicate_of) kept "
                   "from requests r order by 1, 2", "--store", "s.duckdb", "--json"]).stdout)
        # the spend rows' usage lacks the cache fields the completion logs report, so only
        # the response id tells the copies apart: each row points at its own call
        assert [(r["source_format"], r["native_id"], r["kept"]) for r in stored
                if r["duplicate_of"]] == [("litellm", c, c) for c in sorted(calls)]
        assert sum(r["duplicate_of"] is None for r in stored) == len(calls)
        report = json.loads(runner.invoke(app, ["report", "--store", "s.duckdb",
                                                "--json"]).stdout)
        assert (report["summary"]["requests"], report["summary"]["sessions"]) == (10, 2)

    def test_an_openrouter_generation_is_the_response_its_id_names(self):
        # the generation record has no cache-write count and the capture of the streamed
        # call none of its usage: neither body nor usage can pair them, the id does
        capture = call_row({"id": "cap", "source_format": "raw", "source_file": "proxy.jsonl",
                            "source_line": 1, "timestamp": T0, "model": "anthropic/claude",
                            "native_id": "gen-17", "body_hash": "h", "prompt_tokens": None,
                            "cached_tokens": None, "cache_write_tokens": None,
                            "output_tokens": None})
        record = call_row({"id": "gen", "source_format": "openrouter",
                           "source_file": "generations.jsonl", "source_line": 1,
                           "timestamp": T0 + timedelta(seconds=2), "model": "anthropic/claude",
                           "native_id": "gen-17", "body_hash": None, "prompt_tokens": 18054,
                           "cached_tokens": 18041, "cache_write_tokens": None,
                           "output_tokens": 90})
        assert record.response_id == "gen-17"
        assert link_duplicates([capture, record]) == {"gen": "cap"}


@pytest.mark.slow
class TestSampleLogs:
    """sample_logs/ holds the 62 Claude Code calls twice: in the Langfuse export and as
    new-api `/v1/messages` rows (sample_logs/README.md), beside 60 direct calls logged by
    new-api only and a 44-call capture."""

    def test_the_62_calls_are_linked_each_to_its_own_copy(self, tmp_path):
        out = runner.invoke(app, ["ingest", str(ROOT / "sample_logs"), "--store", "s.duckdb",
                                  "--json"])
        assert json.loads(out.stdout)["duplicates"] == 62
        rows = json.loads(runner.invoke(app, [
            "sql", "select id, source_format, duplicate_of, "
                   "json_extract_string(metadata, '$.request_path') path from requests "
                   "where source_format in ('langfuse', 'new-api') "
                   "order by timestamp, id", "--store", "s.duckdb", "--json"]).stdout)
        # Both logs hold the same sequence of calls: the i-th Langfuse call in time is the
        # i-th /v1/messages row in time.
        langfuse = [r["id"] for r in rows if r["source_format"] == "langfuse"]
        messages = [r for r in rows if r["path"] == "/v1/messages"]
        assert len(langfuse) == len(messages) == 62
        assert [r["duplicate_of"] for r in messages] == langfuse
        assert all(r["duplicate_of"] is None for r in rows if r["path"] != "/v1/messages")

    def test_totals_count_each_call_once_and_each_source_shows_its_own(self, tmp_path):
        runner.invoke(app, ["ingest", str(ROOT / "sample_logs"), "--store", "s.duckdb"])
        by_format = {r["source_format"]: r for r in json.loads(runner.invoke(app, [
            "sql", "select source_format, count(*) n, sum(prompt_tokens) p, "
                   "sum(cached_tokens) c from requests group by 1", "--store", "s.duckdb",
            "--json"]).stdout)}
        calls = json.loads(runner.invoke(app, [
            "sql", "select count(*) n, sum(prompt_tokens) p, sum(cached_tokens) c "
                   "from requests where source_format = 'new-api' and "
                   "json_extract_string(metadata, '$.request_path') = '/v1/chat/completions'",
            "--store", "s.duckdb", "--json"]).stdout)[0]
        # every call once: Langfuse's 62, new-api's 60 direct calls, the 44 + 24 captured
        # (the MCP agent and the eviction sample)
        once = {k: by_format["langfuse"][k] + calls[k] + by_format["raw"][k]
                for k in ("n", "p", "c")}
        plain = json.loads(runner.invoke(app, ["bucket", "--store", "s.duckdb", "--json",
                                               "--no-explain"]).stdout)
        per_source = json.loads(runner.invoke(app, ["bucket", "--by", "source", "--store",
                                                    "s.duckdb", "--json",
                                                    "--no-explain"]).stdout)
        for report in (plain, per_source):
            t = report["totals"]
            assert (t["requests"], t["prompt_tokens"], t["cached_tokens"]) == (
                once["n"], once["p"], once["c"])
        assert {g["key"]["source"]: g["requests"] for g in per_source["groups"]} == {
            "langfuse": 62, "new-api": 122, "raw": 44 + 24}
        assert sum(g["requests"] for g in plain["groups"]) == once["n"] == 166 + 24
        segments = json.loads(runner.invoke(app, ["segments", "--store", "s.duckdb", "--json",
                                                  "--no-tokens"]).stdout)
        # censused: 62 + 44 + 24 bodies; without a body: only the 60 direct calls
        assert (segments["totals"]["requests"], segments["totals"]["without_body"]) == (
            62 + 44 + 24, 60)
        diff = json.loads(runner.invoke(app, ["diff", "--all", "--store", "s.duckdb", "--json",
                                              "--tokenizer", "deepseek-v4"]).stdout)
        pairs = json.loads(runner.invoke(app, [
            "sql", "select count(*) filter (where r.duplicate_of is null) once, count(*) every "
                   "from sessions s join requests r on r.id = s.request_id "
                   "where s.prev_id is not null", "--store", "s.duckdb", "--json"]).stdout)[0]
        assert diff["totals"]["pairs"] + diff["totals"]["skipped"] == pairs["once"]
        assert pairs["once"] < pairs["every"]
