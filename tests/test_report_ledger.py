"""`prefixscope report` adds up, end to end: hand-built logs whose every number is known,
through the CLI, checked with a calculator -- the ledger sums exactly to the missed tokens,
findings claim no token twice, every rate is over its stated basis, and dollars equal the
published list prices times the tokens."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import REAL, ROOT
from report_scenarios import write_session
from typer.testing import CliRunner

from prefixscope.cli.main import app

runner = CliRunner()
LENSES = {"pinned-constant", "low-hit-rate-dimension"}


def report(*args: str) -> dict[str, Any]:
    result = runner.invoke(app, ["report", *args, "--json"])
    assert result.exit_code == 0, result.output + result.stderr
    return json.loads(result.stdout)


def claude_code_session(path: Path, turns: list[tuple[str, int, int, int]],
                        model: str = "claude-opus-4-5") -> Path:
    """Claude Code transcript lines (assistant messages with usage), one per
    (time, input_tokens, cache_read, cache_creation)."""
    lines = []
    for n, (at, uncached, read, write) in enumerate(turns):
        lines.append(json.dumps({
            "type": "assistant", "timestamp": at, "sessionId": "sess-1", "uuid": f"u{n}",
            "parentUuid": f"u{n - 1}" if n else None, "requestId": f"req_{n}",
            "message": {"id": f"msg_{n}", "role": "assistant", "model": model,
                        "content": [{"type": "text", "text": "ok"}],
                        "usage": {"input_tokens": uncached, "cache_read_input_tokens": read,
                                  "cache_creation_input_tokens": write,
                                  "output_tokens": 100}}}))
    path.write_text("\n".join(lines) + "\n")
    return path


def check_sums(doc: dict[str, Any]) -> None:
    """What a reader checks with a calculator, on any report."""
    ledger, summary = doc["ledger"], doc["summary"]
    basis = ledger["basis"]
    assert summary["basis"] == basis
    assert (summary["prompt_tokens"], summary["cached_tokens"]) == (basis["prompt_tokens"],
                                                                    basis["cached_tokens"])
    assert ledger["missed_tokens"] == basis["prompt_tokens"] - basis["cached_tokens"]
    parts = {c: (v["tokens"] if isinstance(v, dict) else v)
             for c, v in ledger["by_cause"].items()}
    assert sum(parts.values()) == ledger["missed_tokens"]
    brk = ledger["by_cause"]["break"]
    assert sum(brk["by_kind"].values()) == brk["tokens"] == sum(brk["by_segment"].values())
    claimed = sum(f["lost_tokens"] for f in doc["findings"])
    assert claimed <= ledger["lost_tokens"] <= ledger["missed_tokens"]
    assert all(f["lost_tokens"] == 0 for f in doc["findings"] if f["kind"] in LENSES)
    if basis["source"] == "observed" and basis["prompt_tokens"]:
        assert summary["hit_rate"] == pytest.approx(basis["cached_tokens"]
                                                    / basis["prompt_tokens"])


class TestHostedUsageOnly:
    """shared/reference/ledger.md §1: a Claude Code session, a pause past the 5-minute TTL."""

    def test_the_ledger_of_a_paused_session_in_tokens_and_dollars(self, tmp_path: Path):
        log = claude_code_session(tmp_path / "s.jsonl", [
            ("2026-03-02T10:00:00Z", 0, 0, 20_000),        # cold: all 20,000 written
            ("2026-03-02T10:01:00Z", 0, 19_998, 4_002),    # warm: read 2 short
            ("2026-03-02T10:12:00Z", 0, 13_000, 14_000)])  # 11 minutes later
        doc = report(str(log))
        check_sums(doc)
        by = doc["ledger"]["by_cause"]
        assert (by["cold"], by["new"], by["rounding"], by["ttl"]) == (20_000, 7_000, 4, 10_998)
        assert doc["ledger"]["missed_tokens"] == 38_002
        (ttl,) = [f for f in doc["findings"] if f["kind"] == "ttl-expiry"]
        assert ttl["lost_tokens"] == 10_998
        # Opus 4.5 list prices: 5-minute write $6.25 / MTok, cache read $0.50 / MTok.
        assert ttl["lost_usd"] == pytest.approx(10_998 * (6.25 - 0.50) / 1e6, abs=1e-6)
        money = doc["summary"]["money"]
        # spend: writes 38,002 x $6.25 + reads 32,998 x $0.50 + output 300 x $25, per MTok
        assert money["spend_usd"] == pytest.approx(
            (38_002 * 6.25 + 32_998 * 0.50 + 300 * 25) / 1e6, abs=1e-6)
        # saved: every read token at $5.00 input instead of $0.50
        assert money["saved_usd"] == pytest.approx(32_998 * 4.50 / 1e6, abs=1e-6)

    def test_only_unavoidable_misses_are_no_findings_and_say_so(self, tmp_path: Path):
        log = claude_code_session(tmp_path / "s.jsonl", [
            ("2026-03-02T10:00:00Z", 0, 0, 20_000),
            ("2026-03-02T10:01:00Z", 0, 19_998, 4_002)])
        doc = report(str(log))
        check_sums(doc)
        assert [f for f in doc["findings"] if f["lost_tokens"]] == []
        out = runner.invoke(app, ["report", str(log)]).stdout
        assert "all unavoidable" in out and "no findings" in out


def _session_usage(first: int, step: int, cached: Callable[[int], int]
                   ) -> Callable[[int], dict[str, Any]]:
    """A session's logged usage: `first` prompt tokens growing by `step` a turn, each turn
    after the first reading `cached(previous prompt)` tokens."""
    def usage(turn: int) -> dict[str, Any]:
        prompt = first + step * turn
        return {"prompt_tokens": prompt, "completion_tokens": 5,
                "prompt_tokens_details": {"cached_tokens": cached(prompt - step) if turn else 0}}
    return usage


# (model, first prompt, growth a turn, cached of the previous prompt, the by-hand ledger)
_SIDES = {
    # token-exact: 7 short of the previous prompt each turn is rounding, 4 x 7
    "anthropic": ("claude-sonnet-4-5", 3000, 400, lambda p: p - 7,
                  {"cold": 3000, "new": 4 * 400, "rounding": 4 * 7}),
    # 128-token steps: 2500, 2800, 3100, 3400 read as 2432, 2688, 3072, 3328
    "openai": ("gpt-4.1", 2500, 300, lambda p: p // 128 * 128,
               {"cold": 2500, "new": 4 * 300, "rounding": 68 + 112 + 28 + 72}),
    # no cache model of Gemini: 64 short each turn is the provider's
    "gemini": ("gemini-2.5-pro", 2000, 200, lambda p: p - 64,
               {"cold": 2000, "new": 4 * 200, "provider": 4 * 64}),
}


class TestMixedProviders:
    """A log mixing providers: each request is ledgered by its own model's family, whichever
    model the log's first request has and whichever engine its file is given."""

    @pytest.mark.parametrize("sides", [("anthropic", "openai"), ("openai", "anthropic"),
                                       ("anthropic", "gemini", "gemini"),
                                       ("gemini", "gemini", "anthropic")])
    def test_each_sessions_ledger_is_its_own_providers_by_hand(
            self, tmp_path: Path, sides: tuple[str, ...]) -> None:
        logs = []
        for n, side in enumerate(sides):
            model, first, step, cached, _ = _SIDES[side]
            logs.append(write_session(tmp_path / f"{n}.jsonl", turns=5, model=model,
                                      session=f"{side}-{n}",
                                      usage=_session_usage(first, step, cached)).read_text())
        log = tmp_path / "mixed.jsonl"
        log.write_text("".join(logs))  # one file: one engine chosen for all of it
        result = runner.invoke(app, ["calls", str(log), "--json"])
        assert result.exit_code == 0, result.output + result.stderr
        got = {s["session"]: {k: v for k, v in s["by_cause"].items() if v}
               for s in json.loads(result.stdout)["sessions"]}
        assert got == {f"{side}-{n}": _SIDES[side][4] for n, side in enumerate(sides)}


@pytest.mark.slow  # report on the whole real folder: ~25 s
class TestBasisOnRealData:
    def test_the_real_folder_states_its_basis_and_sums(self):
        doc = report(str(REAL))
        check_sums(doc)
        basis = doc["summary"]["basis"]
        assert basis["outside_requests"] > 0 and basis["outside_reason"]
        # requests = in the basis + outside it (each call once)
        assert basis["requests"] + basis["outside_requests"] == doc["summary"]["requests"]

    def test_the_samples_sum_and_the_constant_follows_the_volatile_header(self):
        doc = report(str(ROOT / "sample_logs"))
        check_sums(doc)
        order = [f["kind"] for f in doc["findings"]]
        assert order[0] == "volatile-prefix-segment"
        assert order.index("pinned-constant") > order.index("volatile-prefix-segment")
        pinned = next(f for f in doc["findings"] if f["kind"] == "pinned-constant")
        assert "break" in pinned["evidence"]["attributed_to"]


def _words(n: int, word: str) -> str:
    return (word + " ") * n


def anthropic_captures(path: Path, inclusive: bool, turns: int = 30) -> Path:
    """Raw Anthropic captures of one growing conversation without cache_control marks;
    usage counts one token per repeated word (the words are single tokens in any BPE
    vocabulary). `inclusive`: input_tokens is the whole prompt (cache reads in it)."""
    system = _words(3_000, "alpha")
    lines, history, before = [], [], 0
    for n in range(turns):
        history.append({"role": "user", "content": _words(100, "beta")})
        words = 3_000 + 100 * (n + 1) + 2 * n
        read = before
        uncached = words if inclusive else words - read
        lines.append(json.dumps({
            "request": {"model": "claude-sonnet-4-5", "system": system,
                        "messages": list(history), "max_tokens": 100},
            "response": {"id": f"msg_{n}", "usage": {"input_tokens": uncached,
                                                     "cache_read_input_tokens": read,
                                                     "output_tokens": 2}},
            "endpoint": "/v1/messages", "timestamp": f"2026-08-01T12:{n:02d}:00Z",
            "headers": {"x-session-id": "conv-1"}}))
        history.append({"role": "assistant", "content": "ok ok"})
        before = words
    path.write_text("\n".join(lines) + "\n")
    return path


class TestUsageSemanticsByRender:
    def test_input_tokens_holding_the_whole_prompt_beside_cache_reads_is_flagged(
            self, tmp_path: Path):
        doc = report(str(anthropic_captures(tmp_path / "inclusive.jsonl", inclusive=True)))
        check_sums(doc)
        (f,) = [f for f in doc["findings"] if f["evidence"].get("check")
                == "input-includes-cache-reads-by-render"]
        assert f["evidence"]["requests"] == 29  # every call after the first reads the cache
        # no cache_control in the bodies, cache reads in the usage: automatic breakpoints
        assert any("automatic breakpoints" in n for n in doc["notes"])
        assert doc["summary"]["hit_rate_predicted"] > 0

    def test_the_same_log_in_anthropics_convention_is_not(self, tmp_path: Path):
        doc = report(str(anthropic_captures(tmp_path / "exclusive.jsonl", inclusive=False)))
        check_sums(doc)
        assert not [f for f in doc["findings"] if f["evidence"].get("check")
                    == "input-includes-cache-reads-by-render"]


class TestTtlDecision:
    """docs/report.md#money's worked example: ledger.md §1 on Claude Opus 4.5."""

    def test_keep_warm_and_one_hour_writes_priced_by_hand(self, tmp_path: Path):
        log = claude_code_session(tmp_path / "s.jsonl", [
            ("2026-03-02T10:00:00Z", 0, 0, 20_000),
            ("2026-03-02T10:01:00Z", 0, 19_998, 4_002),
            ("2026-03-02T10:12:00Z", 0, 13_000, 14_000)])
        doc = report(str(log), "--what-if", "ttl-1h,keep-warm")
        got = {w["name"]: w for w in doc["what_if"]}
        kept = 10_998 * (6.25 - 0.50) / 1e6  # the expired tokens, written instead of read
        # an 11-minute pause: ceil(660 / 270) - 1 = 2 pings, each reading 23,998 tokens
        warm = got["keep-warm"]
        assert warm["cost_usd"] == pytest.approx(2 * 23_998 * 0.50 / 1e6, abs=1e-6)
        assert warm["saved_usd"] == pytest.approx(kept, abs=1e-6)
        assert warm["net_usd"] == pytest.approx(kept - 2 * 23_998 * 0.50 / 1e6, abs=1e-6)
        # the 10,998 re-writes it avoids are read, not written: the other 5-minute writes
        # (38,002 - 10,998 = 27,004 tokens) at $10 instead of $6.25
        hour = got["ttl-1h"]
        assert hour["cost_usd"] == pytest.approx(27_004 * (10 - 6.25) / 1e6, abs=1e-6)
        assert hour["saved_usd"] == pytest.approx(kept, abs=1e-6)
        assert hour["net_usd"] == pytest.approx(-0.0380265, abs=1e-6)  # 0.0632385 - 0.101265
        assert "28.9% of the 5-minute writes" in hour["detail"]  # 10,998 / 38,002
        # (10 - 6.25) / (10 - 0.5)
        assert "the 1-hour TTL pays when more than 39.5% of them are" in hour["detail"]
        (ttl,) = [f for f in doc["findings"] if f["kind"] == "ttl-expiry"]
        assert ttl["evidence"]["what_if"]["keep-warm"] > 0 > ttl["evidence"]["what_if"]["ttl-1h"]

    def test_a_render_what_if_is_priced_by_the_replay(self):
        doc = report(str(ROOT / "sample_logs"), "--what-if", "sort-json-keys,ttl-1h")
        got = {w["name"]: w for w in doc["what_if"]}
        assert got["sort-json-keys"]["gain_tokens"] > 0
        assert "nothing to price" in got["ttl-1h"]["detail"]  # self-hosted: no TTL

    def test_an_unknown_what_if_is_one_line(self, tmp_path: Path):
        result = runner.invoke(app, ["report", str(ROOT / "sample_logs"), "--what-if", "nope"])
        assert result.exit_code != 0 and "nope" in result.output + result.stderr
        assert "Traceback" not in result.output + result.stderr


TRACELAB = REAL / "tracelab"


class TestViews:
    def test_report_by_day_and_model_sums_to_the_ledger(self):
        doc = report(str(TRACELAB), "--by", "day,model")
        rows = doc["by"]["rows"]
        assert doc["by"]["dimensions"] == ["day", "model"]
        assert [r["key"]["day"] for r in rows] == sorted(r["key"]["day"] for r in rows)
        basis, money = doc["ledger"]["basis"], doc["summary"]["money"]
        for field in ("requests", "prompt_tokens", "cached_tokens"):
            assert sum(r[field] for r in rows) == basis[field]
        assert sum(r["missed_tokens"] for r in rows) == doc["ledger"]["missed_tokens"]
        assert sum(r["lost_tokens"] for r in rows) == doc["ledger"]["lost_tokens"]
        assert sum(r["spend_usd"] for r in rows) == pytest.approx(money["spend_usd"], abs=1e-5)
        assert sum(r["lost_usd"] for r in rows) == pytest.approx(money["lost_usd"], abs=1e-5)

    def test_bucket_by_day_prices_the_same_spend_as_report(self):
        result = runner.invoke(app, ["bucket", str(TRACELAB), "--by", "day", "--json"])
        assert result.exit_code == 0, result.output
        spend = json.loads(result.stdout)["spend"]
        total = sum(r["spend_usd"] for r in spend["rows"])
        assert total == pytest.approx(report(str(TRACELAB))["summary"]["money"]["spend_usd"],
                                      abs=1e-5)

    def test_an_unknown_dimension_is_one_line(self):
        result = runner.invoke(app, ["report", str(TRACELAB), "--by", "weekday"])
        assert result.exit_code == 2 and "weekday" in result.output + result.stderr


class TestScope:
    def test_since_until_and_project_keep_only_their_requests(self, tmp_path: Path):
        # TraceLab: 20 Claude calls on 2026-06-01, 18 Codex calls on 2026-03-21.
        assert report(str(TRACELAB), "--since", "2026-06-01")["summary"]["requests"] == 20
        assert report(str(TRACELAB), "--until", "20260321")["summary"]["requests"] == 18
        store = tmp_path / "t.duckdb"
        assert runner.invoke(app, ["ingest", str(TRACELAB), "--store", str(store)]).exit_code == 0
        # the Claude sessions name their project (one copy of the two holds the field)
        scoped = report("--store", str(store), "--project", "project_4c7b8a1b")
        assert scoped["summary"]["requests"] == 10
        assert scoped["ledger"]["basis"]["requests"] == 10

    @pytest.mark.parametrize("value", ["yesterday", "2026-13-01", "2026/06/01"])
    def test_a_bad_date_is_a_usage_error_of_one_line(self, value: str):
        result = runner.invoke(app, ["bucket", str(TRACELAB), "--since", value])
        text = result.output + result.stderr
        assert result.exit_code == 2 and "--since" in text and "Traceback" not in text

    def test_a_window_holding_nothing_says_so(self):
        result = runner.invoke(app, ["report", str(TRACELAB), "--since", "2030-01-01"])
        assert result.exit_code == 1 and "no request since 2030-01-01" in result.stderr


def test_a_block_hash_traces_misses_are_read_in_its_own_blocks(tmp_path: Path) -> None:
    """A Mooncake-shaped trace (512-token blocks): a 915-token prompt (a full block and a
    403-token partial one), then a 2,000-token prompt that extends it. Replayed through
    the trace's own block ids, the second reads the first full block (512); the 403
    tokens of the partial block are rounding in 512-token blocks (not a shortfall of a
    16-token engine block), the 1,085 tokens after the first prompt are new, nothing is
    unexplained."""
    trace = tmp_path / "trace.jsonl"
    rows = [{"timestamp": 0, "input_length": 915, "output_length": 10, "hash_ids": [7, 8]},
            {"timestamp": 1000, "input_length": 2000, "output_length": 10,
             "hash_ids": [7, 9, 10, 11]}]
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    ledger = report(str(trace))["ledger"]
    assert ledger["basis"]["source"] == "predicted"
    assert ledger["missed_tokens"] == 915 + (2000 - 512)
    causes = {k: v for k, v in ledger["by_cause"].items() if k != "break" and v}
    assert causes == {"cold": 915, "rounding": 915 - 512, "new": 2000 - 915}
    assert ledger["by_cause"]["break"]["tokens"] == 0
