"""The share-safe bundle (`prefixscope export --bundle`, issue 40 item 3): no prompt text in
it, and `prefixscope report` on it gives the report of the logs it came from, excerpts and
the names a prompt chose in segment paths aside (docs/bundle.md)."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import REAL, ROOT
from typer.testing import CliRunner

import prefixscope as ps
from prefixscope.api.handle import store_of
from prefixscope.api.scope import reading
from prefixscope.cli.main import app
from prefixscope.findings.bundle import (
    BILLING_MARK,
    BLOCK_SIZE,
    BundleError,
    _class,
    _Hasher,
    decode,
    encode,
    read_bundle,
    write_bundle,
)
from prefixscope.findings.evidence import ReportOptions, gather
from prefixscope.prompt import RenderOptions
from prefixscope.store import Store

runner = CliRunner()
KEY = bytes(range(32))  # a fixed key for the tests that map the logs' paths as the bundle's
# Keys whose values in a body are the protocol's words or the model, not the prompt: the
# bundle carries the model on purpose, and "assistant", "function" are vocabulary.
NOT_PROMPT = frozenset({"type", "role", "model"})


def _invoke(*args: str) -> Any:
    result = runner.invoke(app, list(args), catch_exceptions=False)
    return result


def _strings(value: Any, out: set[str], key: str | None = None) -> None:
    if isinstance(value, str):
        if len(value) >= 8 and key not in NOT_PROMPT:
            out.add(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            _strings(v, out, k)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out, key)


def _bundle_strings(value: Any, out: set[str], key: str | None = None) -> None:
    """Every string of a bundle file (keys too) but the segments' keyed hashes (32 random
    hex digits, checked apart)."""
    if isinstance(value, str):
        if key != "hash":
            out.add(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            out.add(k)
            _bundle_strings(v, out, k)
    elif isinstance(value, list):
        for v in value:
            _bundle_strings(v, out, key)


def _lines(directory: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (directory / "requests.jsonl").read_bytes()
            .splitlines()]


def _mapped(value: Any, name: Any) -> Any:
    """`value` with `name` applied to every string in it, mapping keys too."""
    if isinstance(value, str):
        return name(value)
    if isinstance(value, dict):
        return {name(k): _mapped(v, name) for k, v in value.items()}
    if isinstance(value, list):
        return [_mapped(v, name) for v in value]
    return value


def _masked(document: Any) -> Any:
    """A copy of the report document with every finding's excerpt emptied (a bundle has no
    text)."""
    document = copy.deepcopy(document)
    for finding in document["findings"]:
        if "excerpt" in finding["evidence"]:
            finding["evidence"]["excerpt"] = None
    return document


@pytest.fixture(scope="module")
def real_bundle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(store of tests/data/real, its bundle), made through the command line."""
    base = tmp_path_factory.mktemp("bundle")
    store, bundle = base / "real.duckdb", base / "share"
    assert _invoke("ingest", str(REAL), "--store", str(store), "-q").exit_code == 0
    result = _invoke("export", "--bundle", str(bundle), "--store", str(store), "-q")
    assert result.exit_code == 0, result.output
    yield store, bundle


class TestRealLogs:
    def test_no_string_of_the_source_prompts_is_in_the_bundle(
            self, real_bundle: tuple[Path, Path]) -> None:
        store, bundle = real_bundle
        source: set[str] = set()
        with Store.open(store, read_only=True) as st:
            for request in st.iter_requests(copies=True):
                _strings(request.body, source)
        assert len(source) > 500  # the corpus's prompts: system, tools, messages, arguments
        found: set[str] = set()
        for line in _lines(bundle):
            _bundle_strings(line, found)
            for segment in line["prefixscope_bundle"].get("segments", ()):
                assert re.fullmatch(r"[0-9a-f]{32}", segment["hash"])
        _bundle_strings(orjson.loads((bundle / "evidence.json").read_bytes()), found)
        everything = "\x00".join(found)
        assert [s for s in source if s in everything] == []

    def test_report_on_the_bundle_is_the_report_on_the_logs_but_excerpts(
            self, real_bundle: tuple[Path, Path]) -> None:
        store, bundle = real_bundle
        logs = _invoke("report", "--store", str(store), "--json")
        shared = _invoke("report", str(bundle), "--json")
        assert (logs.exit_code, shared.exit_code) == (0, 0)
        a, b = json.loads(logs.stdout), json.loads(shared.stdout)
        assert a["ledger"]["by_cause"]["provider"] > 0  # a ledger with losses to compare
        assert a["findings"]  # and findings
        assert _masked(b) == _masked(a)

    def test_hash_ids_agree_with_where_the_diff_found_each_pair_diverging(
            self, real_bundle: tuple[Path, Path]) -> None:
        _, bundle = real_bundle
        hashes = {line["prefixscope_bundle"]["id"]: line["hash_ids"] for line in _lines(bundle)}
        diff = read_bundle(bundle).diff
        assert diff is not None
        checked = 0
        for pair in diff.pairs:
            d = pair.first_divergence
            a, b = hashes.get(pair.a), hashes.get(pair.b)
            if d is None or not a or not b:
                continue
            block = d.token // BLOCK_SIZE  # blocks before it are the same tokens in both
            assert a[:block] == b[:block]
            if block < min(len(a), len(b)):
                assert a[block] != b[block]
            checked += 1
        assert checked >= 20

    def test_hash_ids_number_blocks_in_order_of_first_appearance(
            self, real_bundle: tuple[Path, Path]) -> None:
        _, bundle = real_bundle
        seen = -1
        for line in _lines(bundle):
            for block in line["hash_ids"]:
                assert block <= seen + 1
                seen = max(seen, block)
        assert seen > 1000

    def test_the_mooncake_reader_replays_the_bundle(self, real_bundle: tuple[Path, Path],
                                                    tmp_path: Path) -> None:
        _, bundle = real_bundle
        lines = _lines(bundle)
        result = _invoke("ingest", str(bundle / "requests.jsonl"), "--format", "block-trace",
                         "--store", str(tmp_path / "t.duckdb"), "--json")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["by_format"] == {"block-trace": len(lines)}
        with Store.open(tmp_path / "t.duckdb", read_only=True) as st:
            assert st.run("SELECT sum(prompt_tokens) FROM requests")[0][0] == sum(
                line["input_length"] for line in lines)


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """sample_logs/'s store, its report, and bundles of it under three keys (KEY, 0s, 1s)
    with the report on the KEY one."""
    base = tmp_path_factory.mktemp("samples")
    store = base / "s.duckdb"
    ps.ingest(ROOT / "sample_logs", store)
    bundles = {}
    with store_of(store) as handle, reading(handle, None) as st:
        evidence = gather(st, ReportOptions(), workers=1, with_census=True)  # as export_bundle
        for key in (KEY, bytes(32), bytes([1] * 32)):
            bundles[key] = base / f"b{key[0]}{key[-1]}"
            write_bundle(evidence, st.iter_requests(copies=True), bundles[key],
                         RenderOptions(), key=key)
    return {"store": store, "bundles": bundles,
            "logs": ps.report(store, workers=1).to_dict(),
            "shared": ps.report(ps.ingest(bundles[KEY], store=None)).to_dict()}


class TestSampleLogs:
    """sample_logs/ holds tool schemas whose parameter names appear in segment paths."""

    def test_names_in_segment_paths_are_keyed_the_rest_equal(self, samples: Any) -> None:
        logs, shared = samples["logs"], samples["shared"]
        assert "properties.limit" in json.dumps(logs)  # a tool parameter's name
        assert "properties.limit" not in json.dumps(shared)
        assert _masked(shared) == _masked(_mapped(logs, _Hasher(KEY).paths))

    def test_a_billing_header_change_keeps_its_finding(self, samples: Any) -> None:
        volatile = [f for f in samples["shared"]["findings"]
                    if f["kind"] == "volatile-prefix-segment"]
        assert volatile[0]["title"].startswith("Claude Code's billing header")
        assert volatile[0]["evidence"]["excerpt"] == BILLING_MARK

    def test_each_bundle_has_its_own_key(self, samples: Any) -> None:
        first, second = (_lines(samples["bundles"][k]) for k in (bytes(32), bytes([1] * 32)))
        # the same structure (equal blocks numbered alike) ...
        assert [x["hash_ids"] for x in first] == [x["hash_ids"] for x in second]
        # ... and no segment hash of one bundle in the other
        one_hashes, two_hashes = ({s["hash"] for x in lines
                                   for s in x["prefixscope_bundle"].get("segments", ())}
                                  for lines in (first, second))
        assert len(one_hashes) > 100
        assert one_hashes.isdisjoint(two_hashes)

    def test_a_price_option_reprices_the_bundle_as_the_logs(self, samples: Any) -> None:
        logs = ps.report(samples["store"], workers=1, price_per_mtok=0.4).to_dict()
        shared = ps.report(ps.ingest(samples["bundles"][KEY], store=None),
                           price_per_mtok=0.4).to_dict()
        assert logs["ledger"]["lost_usd"] != samples["logs"]["ledger"]["lost_usd"]
        assert shared["ledger"]["lost_usd"] == logs["ledger"]["lost_usd"]
        assert _masked(shared) == _masked(_mapped(logs, _Hasher(KEY).paths))


class TestCodec:
    def test_values_come_back_as_they_were(self) -> None:
        from prefixscope.model import SessionEvent
        from prefixscope.store.store import UsageSummary

        value = {"t": (1, 2.5, float("inf")), "f": frozenset({"a"}), 3: [None, True],
                 "when": datetime(2026, 1, 2, 3, 4, 5),
                 "event": SessionEvent("model-change", "a -> b", None, 7),
                 "summary": UsageSummary("all", 1, 1, 1, 0, 10, 1, 5, 1, 1, 10, 5)}
        assert decode(orjson.loads(orjson.dumps(encode(value)))) == value

    def test_a_bundle_naming_the_evidences_former_modules_is_read(self) -> None:
        """A bundle written before the evidence's and the policy's values moved to
        `findings.values` names them in `findings.evidence` and `findings.policy`: it reads
        as the same values (one written now, renamed to the old modules by hand)."""
        from prefixscope.findings import values

        option = values.PolicyOption("as-logged", 0.0, 0.0, 0, 0)
        turn = values.TurnFigures("user turn", 2, 1, 10, 1, 10, 0.5, 0, 0.0)
        part = values.PolicyPart("main", None, "m", 2, 1, 10, (option,), "as-logged", (turn,))
        policy = values.Policy((part,), "applicable")
        text = orjson.dumps(encode({"policy": policy})).decode()
        old = text.replace("prefixscope.findings.values:", "prefixscope.findings.policy:")
        assert old.count("prefixscope.findings.policy:") == 4
        assert decode(orjson.loads(old)) == {"policy": policy}
        assert _class("prefixscope.findings.evidence:Evidence") is values.Evidence

    def test_a_bundle_storing_a_figure_now_derived_is_read(self) -> None:
        """A bundle written before `RecordedCost.compared_*` became sums of `by_model`
        (properties) stores them as fields: it reads as the same value, the stored figures
        passed over (one written now, the old fields added by hand)."""
        from prefixscope.findings.ledger import RecordedCost, RecordedModel

        cost = RecordedCost(2, 0.75, (RecordedModel("a", 1, 0.5, 0.25),))
        data = orjson.loads(orjson.dumps(encode({"recorded": cost})))
        fields = data["$m"][0][1]["f"]
        assert set(fields) == {"requests", "usd", "by_model"}
        fields.update(compared_requests=1, compared_recorded_usd=0.5, compared_list_usd=0.25)
        assert decode(data) == {"recorded": cost}

    def test_an_excerpt_is_not_written(self) -> None:
        from prefixscope.model import SessionEvent

        event = SessionEvent("compaction", "Context compressed from 80% to 10%.", None, 3)
        assert encode(event)["f"]["detail"] == ""

    @pytest.mark.parametrize("name", ["builtins:eval", "os:system", "prefixscope.api:report"])
    def test_a_bundle_rebuilds_no_other_callable(self, name: str) -> None:
        with pytest.raises(BundleError):
            decode({"$dc": name, "f": {}})


class TestCommandLine:
    def test_export_wants_one_destination(self) -> None:
        result = _invoke("export")
        assert result.exit_code == 2
        assert "give one of --parquet DIR or --bundle DIR" in result.stderr

    def test_an_option_that_needs_the_prompts_is_refused_on_a_bundle(
            self, real_bundle: tuple[Path, Path]) -> None:
        _, bundle = real_bundle
        result = _invoke("report", str(bundle), "--engine", "vllm")
        assert result.exit_code == 2
        assert "is a bundle" in result.stderr and "--engine" in result.stderr


class TestDamage:
    def test_a_damaged_evidence_file_is_one_line(self, real_bundle: tuple[Path, Path],
                                                 tmp_path: Path) -> None:
        _, bundle = real_bundle
        damaged = tmp_path / "damaged"
        damaged.mkdir()
        (damaged / "requests.jsonl").write_bytes((bundle / "requests.jsonl").read_bytes())
        (damaged / "evidence.json").write_text('{"bundle": {"version": 1}, "evidence": '
                                               '{"$dc": "os:system", "f": {}}}')
        result = _invoke("report", str(damaged))
        assert result.exit_code == 1
        assert result.stderr.startswith("error: ") and len(result.stderr.splitlines()) == 1
        assert "'os:system', not a class of this prefixscope's" in result.stderr
        (damaged / "evidence.json").write_text('{"bundle": {"version": 99}}')
        result = _invoke("report", str(damaged))
        assert result.exit_code == 1
        assert "is bundle version 99; this prefixscope reads version 1" in result.stderr

    def test_a_bad_line_is_one_counted_skip(self, real_bundle: tuple[Path, Path],
                                            tmp_path: Path) -> None:
        _, bundle = real_bundle
        lines = (bundle / "requests.jsonl").read_bytes().splitlines()
        bad = json.loads(lines[1])
        bad["hash_ids"] = ["x"]
        target = tmp_path / "requests.jsonl"
        target.write_bytes(b"\n".join([lines[0], json.dumps(bad).encode(), *lines[2:]]) + b"\n")
        result = _invoke("ingest", str(target), "--store", str(tmp_path / "s.duckdb"),
                         "--json")
        assert result.exit_code == 0, result.output
        done = json.loads(result.stdout)
        assert done["by_format"] == {"bundle": len(lines) - 1}
        assert done["skipped"] == 1
        assert done["errors"][0]["line"] == 2
        assert "`hash_ids` is not a list of non-negative 64-bit integers" in \
            done["errors"][0]["reason"]
