"""simulate: miss classes on hand-built token scenarios, the Mooncake ceilings and LRU curve
against a deliberately simple model, a generated vLLM log (agreement and --fit), the
billing-header what-if, and a hosted API that misses an intact prefix."""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from gen_vllm_log import generate
from hypothesis import example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from prefixscope.analyses.simulate import (
    SimulateOptions,
    _Prepared,
    replay_report,
    simulate_store,
)
from prefixscope.cli.main import app
from prefixscope.engines import ENGINES
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths

runner = CliRunner()


def request(rid: str, ids: list[int], *, prev: str | None = None, observed: int | None = None,
            compacted: bool = False, seconds: float | None = None) -> _Prepared:
    return _Prepared(rid, "s", prev, compacted, seconds, observed,
                     np.array(ids, dtype=np.int64), None, None, 0, 0)


class TestMissClasses:
    """Block size 16, unlimited: every number below is hand arithmetic."""

    def test_an_appended_turn_hits_its_predecessor_and_the_rest_is_new(self):
        a = request("a", list(range(40)))
        b = request("b", list(range(64)), prev="a")
        report = replay_report([a, b], SimulateOptions(engine="vllm", unit=16), {})
        first, second = report.per_request
        assert (first.predicted, first.ideal, first.misses) == (0, 0, {"cold": 40})
        # b reuses the 2 full blocks a left (32 tokens); 64 - 32 = 32 never sent before.
        assert (second.predicted, second.ideal, second.misses) == (32, 32, {"new": 32})

    def test_a_change_early_in_the_prompt_is_a_break_for_what_was_sent_before(self):
        a = request("a", list(range(64)))
        b = request("b", [999, *range(1, 64), *range(64, 80)], prev="a")
        second = replay_report([a, b], SimulateOptions(unit=16), {}).per_request[1]
        # Nothing is reusable; a sent 64 tokens = 4 full blocks (min(64, 80 - 1)), 16 new.
        assert (second.predicted, second.ideal) == (0, 0)
        assert second.misses == {"break": 64, "new": 16}

    def test_a_compacted_predecessor_is_compaction_not_break(self):
        a = request("a", list(range(64)))
        b = request("b", list(range(500, 548)), prev="a", compacted=True)
        assert replay_report([a, b], SimulateOptions(unit=16), {}).per_request[1].misses == \
            {"compaction": 48}

    def test_eviction_is_what_the_ideal_cache_holds_and_the_small_one_lost(self):
        a = request("a", list(range(64)))
        other = request("o", list(range(1000, 1064)))
        again = request("a2", list(range(80)), prev="a")
        options = SimulateOptions(unit=16, capacity_tokens=4 * 16)
        report = replay_report([a, other, again], options, {})
        third = report.per_request[2]
        # a's 4 blocks go back to the free queue tail first; the other request takes all 4.
        # The ideal cache still has them: min(4, (80 - 1) // 16) blocks = 64 tokens.
        assert (third.predicted, third.ideal) == (0, 64)
        assert third.misses == {"eviction": 64, "new": 16}

    def test_a_log_that_got_less_than_a_live_intact_prefix_is_unexplained_when_self_hosted(self):
        a = request("a", list(range(64)), observed=0)
        b = request("b", list(range(80)), prev="a", observed=16)
        second = replay_report([a, b], SimulateOptions(unit=16), {}).per_request[1]
        assert (second.predicted, second.shortfall) == (64, 48)
        assert second.misses == {"new": 16, "unexplained": 48}

    def test_hosted_api_misses_of_an_intact_prefix_are_provider(self):
        words = list(range(3000))
        a = request("a", words[:1500], observed=0, seconds=0.0)
        b = request("b", words[:2000], prev="a", observed=0, seconds=30.0)
        second = replay_report([a, b], SimulateOptions(engine="openai"), {}).per_request[1]
        # OpenAI: 128-token steps, at most len-1: floor(1499 / 128) * 128 = 1408.
        assert second.predicted == 1408
        assert second.misses["provider"] == 1408

    def test_an_expired_hosted_prefix_is_ttl(self):
        words = list(range(3000))
        a = request("a", words[:1500], seconds=0.0)
        b = request("b", words[:2000], prev="a", seconds=4 * 3600.0)
        second = replay_report([a, b], SimulateOptions(engine="openai"), {}).per_request[1]
        assert (second.predicted, second.ideal) == (0, 1408)
        assert second.misses["ttl"] == 1408

    def test_cached_tokens_the_log_reports_beyond_the_ideal_are_counted_apart(self):
        # A sub-agent's first call reads its parent's prefix: the model cannot see it.
        a = _Prepared("a", "s", None, False, None, 60, np.arange(100, dtype=np.int64), None,
                      None, 0, 0, logged_prompt=100)
        report = replay_report([a], SimulateOptions(unit=16), {})
        only = report.per_request[0]
        assert (only.predicted, only.ideal) == (0, 0)
        assert only.misses == {"cold": 40}  # 100 - 60 uncached, all of them cold
        assert report.observed_above_ideal == 60
        assert report.hit_rate_observed == 0.6  # the log's own basis: 60 / 100

    def test_blocks_of_a_running_request_are_not_evicted_with_concurrency(self):
        # Capacity 4 blocks of 16. A (4 blocks) runs from t=0 to t=10; B (4 other blocks)
        # runs from t=1 to t=1.5; A's prompt comes again at t=20.
        def timed(rid, ids, start, duration):
            return replace(request(rid, ids, seconds=start), duration=duration)

        a = timed("a", list(range(64)), 0.0, 10.0)
        b = timed("b", list(range(1000, 1064)), 1.0, 0.5)
        again = timed("c", list(range(64)), 20.0, 1.0)
        options = SimulateOptions(unit=16, capacity_tokens=4 * 16)
        sequential = replay_report([a, b, again], options, {}).per_request[2]
        # One after another: B takes A's 4 freed blocks, nothing of A is left.
        assert sequential.predicted == 0
        concurrent = replay_report([a, b, again], replace(options, concurrent=True),
                                   {}).per_request[2]
        # Overlapping: A's blocks are pinned while B runs, so they survive; C reuses
        # min(4, (64 - 1) // 16) = 3 blocks.
        assert concurrent.predicted == 48

    def test_every_uncached_token_is_classified_once(self):
        rng = np.random.default_rng(3)
        prepared, prev = [], None
        base = list(range(200))
        for i in range(30):
            base = base + list(rng.integers(0, 50, rng.integers(1, 60)))
            if i % 7 == 3:
                base = [int(rng.integers(1000, 2000)), *base[1:]]
            prepared.append(request(f"r{i}", base, prev=prev))
            prev = f"r{i}"
        for r in replay_report(prepared, SimulateOptions(unit=16, capacity_tokens=160), {}
                               ).per_request:
            assert sum(r.misses.values()) == r.prompt_tokens - r.predicted
            assert 0 <= r.predicted <= r.ideal <= r.prompt_tokens - 1
        observed = [replace(p, observed=int(rng.integers(0, p.n_tokens))) for p in prepared]
        for r in replay_report(observed, SimulateOptions(unit=16, capacity_tokens=160), {}
                               ).per_request:
            assert sum(r.misses.values()) == r.prompt_tokens - r.observed


def _ingest(paths: list[Path], tmp: Path) -> Store:
    store = Store.open(tmp / "s.duckdb")
    ingest_paths([str(p) for p in paths], store)
    return store


def _mooncake_oracle(path: Path, capacity_blocks: int | None) -> float:
    """Mooncake's convention in its simplest form: leading hash_ids seen before, LRU."""
    seen: OrderedDict[int, None] = OrderedDict()
    cached = total = 0
    for line in path.read_text().splitlines():
        row = json.loads(line)
        ids, length = row["hash_ids"], row["input_length"]
        hit = 0
        while hit < len(ids) and ids[hit] in seen:
            hit += 1
        cached += min(hit * 512, length)
        total += length
        for h in reversed(ids):
            seen[h] = None
            seen.move_to_end(h)
        while capacity_blocks is not None and len(seen) > capacity_blocks:
            seen.popitem(last=False)
    return cached / total


@pytest.mark.parametrize(("trace", "published"), [("conversation", 0.3736),
                                                   ("synthetic", 0.6512)])
@pytest.mark.slow
def test_mooncake_ideal_and_lru_curve(real: Path, tmp_path: Path, trace: str,
                                      published: float) -> None:
    path = real / "mooncake" / f"{trace}_trace.jsonl"
    store = _ingest([path], tmp_path)
    capacities = [2000 * 512, 20000 * 512]
    report = simulate_store(store, SimulateOptions(engine="vllm"), capacity_curve=capacities)
    assert round(report.hit_rate_ideal, 4) == published  # tests/data/real/README.md
    assert report.hit_rate_ideal == pytest.approx(_mooncake_oracle(path, None), abs=1e-12)
    for point in report.capacity_curve:
        assert point.hit_rate == pytest.approx(
            _mooncake_oracle(path, point.capacity_tokens // 512), abs=1e-12)


def test_a_known_vllm_configuration_is_reproduced_and_fitted(tmp_path: Path) -> None:
    log = tmp_path / "vllm.jsonl"
    generate(log, block_size=32, capacity_blocks=150)
    store = _ingest([log], tmp_path)
    # The generator's 150 cached blocks are 151 of vLLM's: while a request runs, its
    # partial last block holds a slot of the pool too.
    known = SimulateOptions(engine="vllm", unit=32, capacity_tokens=151 * 32)
    report = simulate_store(store, known, fit=True)
    assert report.agreement is not None and report.agreement >= 0.99
    assert report.misses["eviction"] > 0  # the capacity was small enough to evict
    assert report.fit is not None
    assert (report.fit.unit, report.fit.capacity_tokens) == (32, 151 * 32)


def test_stripping_the_billing_header_lifts_the_ideal_to_append_only(tmp_path: Path) -> None:
    store = _ingest([ROOT / "sample_logs" / "langfuse-claude-code.events_full.jsonl"], tmp_path)
    options = SimulateOptions(engine="vllm", unit=64)
    report = simulate_store(store, options, what_if=["strip-billing-header"])
    assert report.misses["break"] > 0  # the header changes in every request
    gain = report.what_if[0]
    stripped = simulate_store(store, SimulateOptions(
        engine="vllm", unit=64, render=options.render.__class__(
            what_if=("strip-billing-header",))))
    # Without the header only the sub-agent's tool-set change still breaks a prefix.
    assert stripped.misses["break"] < 0.05 * report.misses["break"]
    assert gain.hit_rate_ideal == stripped.hit_rate_ideal > report.hit_rate_ideal + 0.2
    assert gain.gain_tokens > 0


def test_simulate_cli_json_and_errors(tmp_path: Path) -> None:
    sample = str(ROOT / "sample_logs" / "bifrost-mcp-keyorder.jsonl")
    result = runner.invoke(app, ["simulate", sample, "--json", "--per-request",
                                 "--capacity-curve", "2000,unlimited"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["requests"] == len(data["per_request"]) == 44
    assert [p["capacity_tokens"] for p in data["capacity_curve"]] == [2000, None]
    bad = runner.invoke(app, ["simulate", sample, "--engine", "nope"])
    assert bad.exit_code == 2 and "unknown engine" in bad.stderr
    bad = runner.invoke(app, ["simulate", sample, "--capacity", "8GiB"])
    assert bad.exit_code == 2 and "--bytes-per-token" in bad.stderr
    plot = tmp_path / "curve.png"
    drawn = runner.invoke(app, ["simulate", sample, "--capacity-curve", "1000,4000,16000",
                                "--plot", str(plot)])
    assert drawn.exit_code == 0, drawn.output
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_a_claude_code_call_after_an_idle_gap_is_ttl(tmp_path: Path) -> None:
    """A Claude Code session file (usage only): 5 calls, a 4-hour pause before the 4th.
    Warm calls read the previous prompt minus 2 tokens (the fixture's own usage)."""
    store = _ingest([ROOT / "tests" / "fixtures" / "claude-code" / "idle_gap_session.jsonl"],
                    tmp_path)
    report = simulate_store(store, SimulateOptions(engine="anthropic"))
    prompts = [r.prompt_tokens for r in report.per_request]
    assert prompts == [20000, 21500, 23000, 24800, 26000]  # input + cache read + write
    assert report.agreement == 1.0
    after_gap = report.per_request[3]
    # The 5-minute entry expired: nothing read; the ideal reads what the previous call
    # left, its read + write (21,498 + 1,499: its 3 input tokens were never written), as
    # report's ledger caps it (docs/simulate.md)
    assert (after_gap.observed, after_gap.predicted, after_gap.ideal) == (0, 0, 22_997)
    assert after_gap.misses["ttl"] == 22_997
    assert report.misses["ttl"] == 22_997 and report.misses["provider"] == 0


def test_nothing_to_replay_is_an_error_not_an_empty_report(tmp_path: Path) -> None:
    log = str(ROOT / "tests" / "fixtures" / "claude-code" / "idle_gap_session.jsonl")
    result = runner.invoke(app, ["simulate", log, "--engine", "vllm", "--fit"])
    assert result.exit_code == 1
    # the error names the fix: the engine that replays usage alone
    assert result.stderr.strip() == (
        "error: a usage-only log (no bodies, no block ids): vllm has no prompt to replay; "
        "replay it from its usage with `--engine anthropic` (its models' hosted API)")


def test_usage_only_requests_need_a_hosted_engine(tmp_path: Path) -> None:
    store = _ingest([ROOT / "tests" / "fixtures" / "claude-code" / "idle_gap_session.jsonl"],
                    tmp_path)
    report = simulate_store(store, SimulateOptions(engine="vllm"))
    assert report.requests == 0 and sum(report.skipped.values()) == 5
    hosted = simulate_store(store, SimulateOptions(engine="openai"))
    # OpenAI steps of 128 tokens: the 2nd call reuses floor((20000 - 1) / 128) * 128.
    assert hosted.per_request[1].predicted == 19968


def test_an_openai_log_that_missed_intact_prefixes_is_provider(tmp_path: Path) -> None:
    """Raw OpenAI captures of one append-only conversation, a minute apart, every call
    reporting 0 cached tokens: the prefix was intact and live, so the misses are the
    provider's (routing, overflow), not the client's."""
    system = "You are a meticulous coding agent. " + " ".join(f"rule{i}" for i in range(1500))
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "fix it"}]
    lines = []
    for turn in range(4):
        lines.append({
            "timestamp": f"2026-06-01T10:0{turn}:00Z",
            "url": "https://api.openai.com/v1/chat/completions",
            "request": {"model": "gpt-4.1", "messages": list(messages)},
            "response": {"id": f"chatcmpl-{turn}", "object": "chat.completion",
                         "model": "gpt-4.1",
                         "choices": [{"index": 0, "message": {"role": "assistant",
                                                              "content": f"step {turn}"}}],
                         "usage": {"prompt_tokens": 4000 + turn, "completion_tokens": 5,
                                   "prompt_tokens_details": {"cached_tokens": 0}}}})
        messages += [{"role": "assistant", "content": f"step {turn}"},
                      {"role": "user", "content": f"now part {turn + 1}"}]
    log = tmp_path / "openai.jsonl"
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    store = _ingest([log], tmp_path)
    report = simulate_store(store, SimulateOptions(engine="openai"))
    later = report.per_request[1:]
    assert all(r.predicted > 1024 and r.observed == 0 for r in later)
    assert report.misses["provider"] == sum(r.predicted for r in later)
    assert report.misses["break"] == report.misses["eviction"] == report.misses["ttl"] == 0


def test_simulate_stores_its_per_request_results(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    sample = str(ROOT / "sample_logs" / "bifrost-mcp-keyorder.jsonl")
    assert runner.invoke(app, ["ingest", sample, "--store", str(store)]).exit_code == 0
    for _ in range(2):  # a second run of the same simulation replaces the first
        result = runner.invoke(app, ["simulate", "--store", str(store), "--json", "--save"])
        assert result.exit_code == 0, result.output
    runner.invoke(app, ["simulate", "--store", str(store), "--block-size", "32"])
    rows = runner.invoke(app, ["sql", "select block_size, count(*) n, sum(predicted) p, "
                               "sum(observed) o from simulated group by 1", "--store",
                               str(store), "--json"])
    saved = json.loads(rows.stdout)
    expected = json.loads(result.stdout)
    assert saved == [{"block_size": 16, "n": 44,
                      "p": round(expected["hit_rate"]["predicted"] * expected["prompt_tokens"]),
                      "o": 58992}]


def test_anthropic_bodies_cache_at_their_own_cache_control_marks(tmp_path: Path) -> None:
    """Claude Code's request (cache_control on tools[1], system[1], system[2]) sent three
    times as a conversation grows: a minute later the second call reads the prefix up to
    the last marked block; ten minutes after that the entry has expired (5-minute TTL)."""
    from prefixscope.prompt import RenderOptions
    from prefixscope.store.lookup import request_from_file
    from prefixscope.tokens import tokens

    base = json.loads((ROOT / "tests" / "fixtures" / "render" / "claude_code.json")
                      .read_text())
    # Longer than the model's minimum cacheable prefix (1,024 tokens), or nothing caches.
    base["system"][0]["text"] += " Follow the house style." * 300
    lines = []
    for turn, minute in enumerate((0, 1, 11)):
        body = json.loads(json.dumps(base))
        for i in range(turn):
            body["messages"] += [{"role": "assistant", "content": f"answer {i}"},
                                 {"role": "user", "content": f"question {i + 1}"}]
        lines.append({"timestamp": f"2026-06-01T10:{minute:02d}:00Z",
                      "url": "https://api.anthropic.com/v1/messages", "request": body,
                      "response": {"id": f"msg_{turn}", "type": "message",
                                   "role": "assistant", "model": body["model"],
                                   "content": [{"type": "text", "text": "ok"}],
                                   "usage": {"input_tokens": 10, "output_tokens": 2}}})
    log = tmp_path / "anthropic.jsonl"
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    store = _ingest([log], tmp_path)
    report = simulate_store(store, SimulateOptions(engine="anthropic"))
    first, second, third = report.per_request
    # The oracle: the last marked block, system[2] (with the template glue after it),
    # ends where the first message's text starts in the rendered prompt.
    body_file = tmp_path / "first.json"
    body_file.write_text(json.dumps(lines[0]["request"]))
    tok = tokens(request_from_file(body_file), RenderOptions())
    starts = {s.path: span[0] for s, span in zip(tok.prompt.segments,
                                                 tok.segment_token_spans(), strict=True)}
    marked_end = starts["messages[0].content[0]"]
    assert first.predicted == 0
    assert second.predicted == second.ideal == marked_end
    assert (third.predicted, third.ideal) == (0, marked_end)
    assert third.misses["ttl"] == marked_end


def _claude_code_session(path: Path, gaps: list[int], reads: list[int], totals: list[int]
                         ) -> None:
    """A Claude Code transcript: one call per gap (seconds after the previous one), with
    the cache reads and prompt totals given (writes = the rest)."""
    lines, when = [], 0
    for i, (gap, read, total) in enumerate(zip(gaps, reads, totals, strict=True)):
        when += gap
        ts = f"2026-03-02T{9 + when // 3600:02d}:{when % 3600 // 60:02d}:{when % 60:02d}Z"
        common = {"isSidechain": False, "userType": "external", "cwd": "/w",
                  "sessionId": "0f6e2d1c-1111-4222-8333-944455556666", "version": "2.0.31",
                  "timestamp": ts}
        lines.append({**common, "type": "user", "uuid": f"u{i}",
                      "parentUuid": f"a{i - 1}" if i else None,
                      "message": {"role": "user", "content": f"step {i}"}})
        lines.append({**common, "type": "assistant", "uuid": f"a{i}", "parentUuid": f"u{i}",
                      "requestId": f"req_{i}", "message": {
                          "id": f"msg_{i}", "type": "message", "role": "assistant",
                          "model": "claude-sonnet-4-5-20250929",
                          "content": [{"type": "text", "text": "ok"}],
                          "usage": {"input_tokens": 3, "cache_read_input_tokens": read,
                                    "cache_creation_input_tokens": total - read - 3,
                                    "output_tokens": 9}}})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_fit_finds_a_hosted_engines_retention(tmp_path: Path) -> None:
    # Read after 4 minutes, nothing read after 7: the retention is between 240 and 420 s;
    # of the candidates (1, 2, 5, 10, ... minutes) only 5 minutes fits both.
    log = tmp_path / "cc.jsonl"
    totals = [20000, 21000, 22000, 23000]
    _claude_code_session(log, gaps=[0, 240, 420, 60], reads=[0, 19998, 0, 21998],
                         totals=totals)
    store = _ingest([log], tmp_path)
    report = simulate_store(store, SimulateOptions(engine="anthropic"), fit=True)
    assert report.fit is not None
    assert (report.fit.ttl_seconds, report.fit.agreement) == (300.0, 1.0)
    longer = simulate_store(store, SimulateOptions(engine="anthropic", ttl_seconds=3600))
    # an hour keeps it alive: call 2 left its read + write, 21,000 less its 3 input tokens
    assert longer.per_request[2].predicted == totals[1] - 3


class TestRememberedReplays:
    """report replays a domain, fits it, then replays it at the fit: inside
    `remembered_replays` a replay the steps share runs once."""

    def _log(self) -> list[_Prepared]:
        return [request("a", list(range(40)), seconds=0.0, observed=0),
                request("b", list(range(64)), prev="a", seconds=10.0, observed=32),
                request("c", [7, *range(1, 64)], seconds=20.0, observed=0),
                request("d", list(range(80)), prev="b", seconds=900.0, observed=48)]

    @pytest.mark.parametrize("engine", [name for name, spec in ENGINES.items()
                                        if spec.ttl_parameter is None
                                        and spec.replays == "tokens"])
    def test_a_predicted_replay_with_no_capacity_and_no_clock_is_the_ideal(self, engine):
        from prefixscope.analyses.simulate.replay import _replay

        log = self._log()
        options = SimulateOptions(engine=engine)
        assert _replay(log, options) == _replay(log, options, unlimited=True)

    def test_a_shared_replay_runs_once_and_gives_the_same_answer(self, monkeypatch):
        from prefixscope.analyses.simulate import remembered_replays, replay
        from prefixscope.analyses.simulate.replay import _replays

        log = self._log()
        ran: list[object] = []
        real, real_sweep = replay._replay, replay._sweep

        def counted(prepared, options, *, unlimited=False):
            ran.append((options.capacity_tokens, unlimited))
            return real(prepared, options, unlimited=unlimited)

        def counted_sweep(prepared, options, unlimited=False):
            ran.append("ideal sweep" if unlimited else "sweep")
            return real_sweep(prepared, options, unlimited)

        monkeypatch.setattr(replay, "_replay", counted)
        monkeypatch.setattr(replay, "_sweep", counted_sweep)
        fitted = SimulateOptions(unit=16, capacity_tokens=64)
        alone = [_replays(log, [fitted, None], 1), _replays(log, [SimulateOptions(), None], 1)]
        # the capacity read off a sweep, and the ideal off that same sweep; unlimited: the
        # predicted replay is the ideal one, read off a sweep of that capacity alone
        assert ran == ["sweep", "ideal sweep"]
        ran.clear()
        with remembered_replays():
            first = _replays(log, [SimulateOptions(), None], 1)
            again = _replays(log, [fitted, None], 1)
            assert _replays(log, [fitted], 1) == [again[0]]
            assert _replays(log, [SimulateOptions(unit=16, capacity_tokens=32)], 1)
        assert [again, first] == alone
        assert ran == ["ideal sweep", "sweep"]  # one sweep serves every capacity
        ran.clear()
        _replays(log, [fitted], 1)  # outside the block nothing is remembered
        assert ran == ["sweep"]
        ran.clear()
        _replays(log, [fitted], 1, read_sweeps=False)
        assert ran == [(64, False)]

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=12), min_size=1,
                    max_size=10), st.integers(1, 4))
    # test_engine_sweep's hand trace: capacities 1..3 are ones the sweep does not follow
    @example(prompts=[[0], [1, 0], [0], [0, 1], [1, 0]], block=1)
    def test_a_capacity_read_off_the_sweep_is_the_replay_through_the_block_pool(
            self, prompts, block):
        """Every capacity up to past the log's blocks (those the sweep does not follow
        replayed): the same cached tokens as the block pool replayed at that capacity."""
        from prefixscope.analyses.simulate.replay import _replay, _replays

        log = [_Prepared(str(i), "s", None, False, None, None, np.array(t), None, None, 0,
                         0) for i, t in enumerate(prompts)]
        blocks = sum(len(t) for t in prompts) // block + 2
        for capacity in range(0, blocks * block + 1, block):
            options = SimulateOptions(unit=block, capacity_tokens=capacity)
            assert _replays(log, [options], 1) == [_replay(log, options)]


def test_simulate_writes_nothing_into_the_store_unless_asked(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    sample = str(ROOT / "sample_logs" / "bifrost-mcp-keyorder.jsonl")
    assert runner.invoke(app, ["ingest", sample, "--store", str(store)]).exit_code == 0
    before = store.read_bytes()
    result = runner.invoke(app, ["simulate", "--store", str(store)])
    assert result.exit_code == 0, result.output
    assert store.read_bytes() == before
    assert "saved" not in result.stderr


class TestForgettingInTheReplay:
    """A replay with a clock lets the OpenAI engine forget what no later request can find
    (`OpenaiEngine.expire`): the same answers whatever the order of the times."""

    def test_the_horizon_is_the_least_time_to_come_none_before_a_none_nan_passed_over(self):
        from prefixscope.analyses.simulate.replay import _horizons
        times = [10.0, 5.0, None, 20.0, float("nan"), 30.0, 25.0, float("nan")]
        log = [request(str(i), [1], seconds=t) for i, t in enumerate(times)]
        inf = float("inf")
        assert _horizons(log) == [None, None, None, 20.0, 25.0, 25.0, 25.0, inf]

    @settings(max_examples=40, deadline=None)
    @given(st.lists(st.tuples(st.integers(0, 2), st.integers(1024, 1800),
                              st.one_of(st.none(), st.just(float("nan")),
                                        st.integers(0, 90).map(float))),
                    min_size=1, max_size=14),
           st.sampled_from([10.0, 30.0, 600.0]))
    def test_a_replay_with_times_in_any_order_answers_as_one_that_forgets_nothing(
            self, calls, ttl):
        from unittest import mock

        from prefixscope.analyses.simulate.replay import _replay
        from prefixscope.engines.base import BaseEngine
        from prefixscope.engines.openai import OpenaiEngine
        log = [request(str(i), list(range(100_000 * s, 100_000 * s + n)), seconds=t)
               for i, (s, n, t) in enumerate(calls)]
        options = SimulateOptions(engine="openai", ttl_seconds=ttl)
        with mock.patch.object(OpenaiEngine, "_EXPIRE_FROM", 1), \
                mock.patch.object(OpenaiEngine, "_MERGE_FROM", 2):
            forgetting = _replay(log, options)
        with mock.patch.object(OpenaiEngine, "expire", BaseEngine.expire):
            keeping = _replay(log, options)
        assert forgetting == keeping
