"""Engines as whole registry entries: one `EngineSpec` per engine is all simulate, report
and the command line read, so an engine registered in one line runs through both; the
CLI's 'N blocks' are the engine's blocks; a logged model name (a LoRA adapter) and
``cache_salt`` separate the requests' blocks as vLLM's extra keys do."""

from __future__ import annotations

import ast
import json
import re
from functools import partial
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prefixscope.analyses.simulate import SimulateOptions, simulate_store
from prefixscope.cli.main import app
from prefixscope.engines import ENGINES, EngineSpec, register
from prefixscope.engines.base import Admission, BaseEngine, Lookup, Units
from prefixscope.engines.openai import OpenaiEngine
from prefixscope.findings.evidence import ReportOptions, gather
from prefixscope.model import API_USAGE_SEMANTICS
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths

runner = CliRunner()


class Forgetful(BaseEngine):
    """Never caches anything: every prediction is 0, whatever the log."""

    name = "forgetful"

    def __init__(self, *, block_size: int = 8, capacity_tokens: int | None = None,
                 cache_output: bool = False) -> None:
        self.unit = block_size

    def lookup(self, prompt: Units, *, now: float | None = None) -> Lookup:
        return Lookup(0, 0, self.unit)

    def admit(self, prompt: Units, *, now: float | None = None) -> Admission:
        return Admission(self.lookup(prompt), prompt)

    def release(self, admission: Admission, *, sequence: Units | None = None,
                now: float | None = None) -> None:
        admission.finish()


def _log(path: Path, salts: list[str | None], models: list[str] | None = None) -> Path:
    """Raw captures of one chat resent as is, each with its ``cache_salt`` (None: none)
    and model name (default: one model for all)."""
    messages = [{"role": "system", "content": "You review code. " * 60},
                {"role": "user", "content": "Is this loop correct? " * 10}]
    lines = []
    for i, salt in enumerate(salts):
        model = models[i] if models else "qwen3.6-35b-a3b"
        body: dict[str, object] = {"model": model, "messages": messages}
        if salt is not None:
            body["cache_salt"] = salt
        lines.append({"timestamp": f"2026-05-04T09:00:{i:02d}Z",
                      "url": "http://vllm.internal:8000/v1/chat/completions", "request": body,
                      "response": {"id": f"r{i}", "object": "chat.completion",
                                   "usage": {"prompt_tokens": 700, "completion_tokens": 3}}})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def forgetful(monkeypatch: pytest.MonkeyPatch) -> EngineSpec:
    monkeypatch.setitem(ENGINES, "forgetful", ENGINES["vllm"])  # restored after the test
    return register(EngineSpec("forgetful", Forgetful, "never caches", "block_size", 8))


def test_an_engine_registered_in_one_line_runs_through_simulate_and_report(
        tmp_path: Path, forgetful: EngineSpec) -> None:
    store = Store.open(tmp_path / "s.duckdb")
    ingest_paths([str(_log(tmp_path / "log.jsonl", [None, None, None]))], store)
    report = simulate_store(store, SimulateOptions(engine="forgetful"), fit=True,
                            capacity_curve=(64, None))
    assert (report.engine, report.unit, report.requests) == ("forgetful", 8, 3)
    assert [r.predicted for r in report.per_request] == [0, 0, 0]
    assert [r.ideal for r in report.per_request] == [0, 0, 0]
    assert [p.hit_rate for p in report.capacity_curve] == [0.0, 0.0]
    evidence = gather(store, ReportOptions(engine="forgetful"))
    assert evidence.simulate is not None and evidence.simulate.engine == "forgetful"
    assert evidence.simulate.hit_rate_predicted == 0.0


def test_an_engines_own_usage_convention_is_one_the_store_keeps() -> None:
    # the store keeps a request's usage convention only when one API alone writes it
    owned = [spec.usage_semantics for spec in ENGINES.values() if spec.usage_semantics]
    assert owned == ["deepseek"]
    assert set(owned) <= set(API_USAGE_SEMANTICS)


def test_n_blocks_are_the_engines_blocks(tmp_path: Path) -> None:
    log = str(_log(tmp_path / "log.jsonl", [None, None]))
    for args, tokens in ((["--engine", "lmcache", "--capacity", "4 blocks"], 4 * 256),
                         (["--engine", "vllm", "--capacity", "4 blocks"], 4 * 16),
                         (["--block-size", "64", "--capacity", "3 blocks"], 3 * 64)):
        result = runner.invoke(app, ["simulate", log, *args, "--json"])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["capacity_tokens"] == tokens


def test_a_cache_salt_separates_identical_prompts(tmp_path: Path) -> None:
    """The same prompt four times: salts a, b, a, none. vLLM puts the salt on the first
    block's hash, so only the third (salt a again) hits what the first cached; the
    fourth (no salt) hits nothing either."""
    store = Store.open(tmp_path / "s.duckdb")
    ingest_paths([str(_log(tmp_path / "log.jsonl", ["a", "b", "a", None]))], store)
    report = simulate_store(store, SimulateOptions(engine="vllm"))
    n = report.per_request[0].prompt_tokens
    full = (n - 1) // 16 * 16  # the whole prompt hits but its last token
    assert [r.ideal for r in report.per_request] == [0, 0, full, 0]


def test_a_lora_adapters_name_separates_identical_prompts(tmp_path: Path) -> None:
    """The same prompt for the base model, a LoRA adapter (vLLM's server picks it by the
    request's model name and keys every block by it), the adapter again, the base again:
    the third hits what the second cached and the fourth what the first did; the second
    hits nothing although its tokens are the first's."""
    models = ["qwen3.6-35b-a3b", "qwen3.6-35b-a3b-sql-lora", "qwen3.6-35b-a3b-sql-lora",
              "qwen3.6-35b-a3b"]
    store = Store.open(tmp_path / "s.duckdb")
    ingest_paths([str(_log(tmp_path / "log.jsonl", [None] * 4, models))], store)
    report = simulate_store(store, SimulateOptions(engine="vllm"))
    n = [r.prompt_tokens for r in report.per_request]
    assert len(set(n)) == 1  # one tokenizer: the same tokens for every model name
    full = (n[0] - 1) // 16 * 16
    assert [r.ideal for r in report.per_request] == [0, 0, full, full]


def test_a_hosted_api_caches_each_models_prompts_apart(tmp_path: Path) -> None:
    """Usage alone, one session: a Sonnet turn, a Haiku call (same conversation), a Sonnet
    turn. Anthropic's cache is per model, so the Haiku call reads nothing the Sonnet turn
    wrote and the last turn reads the first's prefix, not the Haiku call's."""
    lines = []
    for n, (model, prompt) in enumerate((("claude-sonnet-4-5", 5000),
                                         ("claude-haiku-4-5", 5200),
                                         ("claude-sonnet-4-5", 5400))):
        lines.append({  # Claude Code's transcript: one assistant line per call
            "type": "assistant", "timestamp": f"2026-05-04T09:00:{n:02d}Z",
            "sessionId": "sess-1", "uuid": f"u{n}", "parentUuid": f"u{n - 1}" if n else None,
            "requestId": f"req_{n}",
            "message": {"id": f"msg_{n}", "role": "assistant", "model": model,
                        "content": [{"type": "text", "text": "ok"}],
                        "usage": {"input_tokens": prompt, "output_tokens": 10}}})
    path = tmp_path / "session.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    store = Store.open(tmp_path / "s.duckdb")
    ingest_paths([str(path)], store)
    report = simulate_store(store, SimulateOptions(engine="anthropic"))
    by_id = {r.prompt_tokens: r.ideal for r in report.per_request}
    assert by_id[5200] == 0
    assert by_id[5400] > 0


def _acme_session(path: Path) -> Path:
    """Usage alone, one Claude Code session on the model ``acme-large``: a cold call of
    3,050 tokens; 60 s later 3,250 tokens, 3,008 of them read; 200 s later 3,400 tokens,
    none read."""
    lines = []
    for n, (at, prompt, read) in enumerate(((0, 3050, 0), (60, 3250, 3008),
                                            (260, 3400, 0))):
        lines.append({
            "type": "assistant", "timestamp": f"2026-05-04T09:{at // 60:02d}:{at % 60:02d}Z",
            "sessionId": "sess-1", "uuid": f"u{n}", "parentUuid": f"u{n - 1}" if n else None,
            "requestId": f"req_{n}",
            "message": {"id": f"msg_{n}", "role": "assistant", "model": "acme-large",
                        "content": [{"type": "text", "text": "ok"}],
                        "usage": {"input_tokens": prompt - read, "output_tokens": 10,
                                  "cache_read_input_tokens": read,
                                  "cache_creation_input_tokens": 0}}})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_a_hosted_engine_registered_in_one_line_runs_through_report_by_its_own_rules(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A provider whose cache reads in 64-token steps from 512 tokens and keeps a prefix
    120 seconds: the ledger allows the second call 3,008 tokens (3,050 in 64-token steps,
    where OpenAI's 128 would allow 2,944 and Anthropic's token-exact reads 3,048), and reads
    the 200-second pause before the third as an expiry (OpenAI's 5-10 minutes, Anthropic's
    5, would not expire it: a provider miss)."""
    monkeypatch.setitem(ENGINES, "acme", ENGINES["openai"])  # removed after the test
    register(EngineSpec("acme", partial(OpenaiEngine, min_tokens=512), "test", "step", 64, ttl_parameter="idle_ttl", ttl_seconds=120.0, hosted=True, models=re.compile(r"^acme-"), min_tokens=512))  # noqa: E501
    log = _acme_session(tmp_path / "session.jsonl")
    result = runner.invoke(app, ["report", str(log), "--json"])
    assert result.exit_code in (0, 2), result.output
    out = json.loads(result.stdout)
    assert {k: v for k, v in out["ledger"]["by_cause"].items() if k != "break" and v} == {
        "cold": 3050, "rounding": 42 + 50, "new": 200 + 150, "ttl": 3200}
    (expired,) = out["findings"]
    assert (expired["kind"], expired["lost_tokens"]) == ("ttl-expiry", 3200)
    assert (expired["evidence"]["rules"], expired["evidence"]["unit"]) == ("acme", 64)
    assert expired["title"].endswith("longer than the cache's retention (2 minutes)")


FINDINGS = sorted((Path(__file__).parent.parent / "prefixscope" / "findings").rglob("*.py"))


@pytest.mark.parametrize("path", FINDINGS, ids=lambda p: p.name)
def test_no_findings_module_names_an_engine(path: Path) -> None:
    """An engine's rules are its registry entry's (`EngineSpec`), read by the findings: no
    string of a findings module is an engine's name, so a new engine is one `register`
    call, never a findings edit."""
    named = [(node.lineno, node.value) for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Constant) and node.value in ENGINES]
    assert named == []


def literals(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string literal of `path` (an f-string's literal parts too)
    but its docstrings, which may cite an engine as documentation."""
    tree = ast.parse(path.read_text())
    docs = {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docs]


def engine_words() -> re.Pattern[str]:
    """Any registered engine's name or its name in prose (`EngineSpec.label`: Anthropic,
    OpenAI, vLLM), in any case, as a word of its own: ``anthropic-messages`` and ``no
    OpenAI-cached prefix`` name one, ``strip_anthropic_billing_header`` (a gateway's
    setting) does not."""
    words = sorted({w for spec in ENGINES.values() for w in (spec.name, spec.label)}, key=len,
                   reverse=True)
    return re.compile(rf"(?<!\w)({'|'.join(map(re.escape, words))})(?!\w)", re.I)


@pytest.mark.parametrize("path", FINDINGS, ids=lambda p: p.name)
def test_no_findings_string_says_an_engines_name(path: Path) -> None:
    """Nor does a findings string say an engine's name or its name in prose (advice,
    titles, notes, an endpoint compared to a literal): the words come from the engine's
    `EngineSpec` (`label`, `minimum_text`, `session_key`, its advice) or the endpoint's
    `model.protocols.Protocol`; a docstring may cite one."""
    pattern = engine_words()
    assert [(line, text) for line, text in literals(path) if pattern.search(text)] == []


def test_the_engine_words_catch_a_name_in_prose_and_an_endpoint():
    pattern = engine_words()
    assert [bool(pattern.search(s)) for s in (
        "no Anthropic-cached prefix", "`prompt_cache_key` on OpenAI", "anthropic-messages",
        "served by vLLM", "SGLang's radix cache", "strip_anthropic_billing_header",
        "a Claude model", "openaiish")] == [True, True, True, True, True, False, False, False]


def test_the_advice_names_a_registered_engine_in_its_own_words(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A hosted engine registered with its name in prose, a minimum and a session key
    is in the advice that lists them, in its words, after the built-in ones: no findings
    module is edited for it."""
    from prefixscope.findings.finders import replay, routing

    monkeypatch.setitem(ENGINES, "acme", EngineSpec(
        "acme", OpenaiEngine, "test", hosted=True, min_tokens=512, display="Acme Cloud",
        session_key="acme_session"))  # removed after the test
    assert replay._minimums() == (" (Anthropic: 1,024–4,096 tokens by model; OpenAI: 1,024; "
                                  "Acme Cloud: 512)")
    assert ("(a consistent hash of the session id, or `prompt_cache_key` on OpenAI, "
            "`acme_session` on Acme Cloud) in the gateway or router") in routing.fix(None)


def engine_modules() -> set[str]:
    """The modules of the engines themselves: each spec's factory's (its `Lazy` module)
    and every module of the package named like a registered engine."""
    package = Path(__file__).parent.parent / "prefixscope" / "engines"
    lazy = {getattr(spec.factory, "module", None) for spec in ENGINES.values()}
    return {f"prefixscope.engines.{m}" for m in lazy | set(ENGINES)
            if m is not None and (package / f"{m}.py").exists()}


def imported(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import of `path`, ``from package import module`` as the
    module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return found


def test_the_engine_modules_are_known():
    assert {"prefixscope.engines.anthropic", "prefixscope.engines.openai",
            "prefixscope.engines.vllm"} <= engine_modules()


@pytest.mark.parametrize("path", FINDINGS, ids=lambda p: p.name)
def test_no_findings_module_imports_an_engine_module(path: Path) -> None:
    """Nor does a findings module import one engine's module (its constants, its helpers):
    what it needs of an engine is in the engine's `EngineSpec`."""
    modules = engine_modules()
    assert [(line, m) for line, m in imported(path) if m in modules] == []


def test_the_ttl_a_write_leaves_is_the_engines_own():
    """`EngineSpec.write_ttl` reads a call's usage by its engine's TTLs: Anthropic's 1-hour
    writes leave an hour (3,600 s), split writes with none its 5 minutes (300 s), a call
    that wrote nothing keeps what it read; an engine with no longer TTL says nothing of
    its writes; one registered with a 2-hour TTL reads 7,200 s."""
    anthropic, openai = ENGINES["anthropic"], ENGINES["openai"]
    assert [anthropic.write_ttl(100, 50), anthropic.write_ttl(100, 0),
            anthropic.write_ttl(100, None), anthropic.write_ttl(0, 0, 3600.0),
            anthropic.write_ttl(0, None)] == [3600.0, 300.0, None, 3600.0, None]
    assert [openai.write_ttl(100, 50), openai.write_ttl(0, None, 600.0)] == [None, 600.0]
    from prefixscope.engines import LongTtl

    acme = EngineSpec("acme-2h", OpenaiEngine, "test", ttl_seconds=120.0, hosted=True,
                      long_ttl=LongTtl(7200.0, "ttl=2h"))
    assert [acme.write_ttl(10, 10), acme.write_ttl(10, 0)] == [7200.0, 120.0]
