"""Every command's --json output on sample_logs/ and the real data, locked byte for byte.

A behaviour lock, not an oracle: the expected files are the output of the version that
wrote them, so a refactor that changes any number, key or order fails here. After a
deliberate change of output, regenerate with
`PREFIXSCOPE_UPDATE_GOLDEN=1 python -m pytest tests/test_golden_json.py` and review
the diff of tests/golden/.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import REAL, ROOT, normalized_output
from typer.testing import CliRunner

from prefixscope.cli.main import app

GOLDEN = ROOT / "tests" / "golden"
UPDATE = bool(os.environ.get("PREFIXSCOPE_UPDATE_GOLDEN"))
runner = CliRunner()

CORPORA = {"samples": ROOT / "sample_logs", "real": REAL}
# (corpus, name, arguments after the store); every one gets --json.
CASES = [
    ("samples", "bucket", ["bucket"]),
    ("samples", "bucket-by-endpoint-source", ["bucket", "--by", "endpoint,source"]),
    ("samples", "segments", ["segments"]),
    ("samples", "diff-all", ["diff", "--all"]),
    ("samples", "diff-all-strip", ["diff", "--all", "--what-if", "strip-billing-header"]),
    ("real", "bucket-by-source", ["bucket", "--by", "source"]),
    ("real", "segments", ["segments"]),
    ("real", "diff-all", ["diff", "--all"]),
]


def _check(name: str, stdout: str) -> None:
    path = GOLDEN / f"{name}.json"
    got = normalized_output(stdout)
    json.loads(got)
    if UPDATE:
        path.write_text(got)
    assert path.exists(), f"no golden {path.name}: run with PREFIXSCOPE_UPDATE_GOLDEN=1"
    assert got == path.read_text(), f"{name}: --json output differs from tests/golden"


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    out = {}
    for corpus, folder in CORPORA.items():
        store = tmp_path_factory.mktemp(corpus) / "golden.duckdb"
        result = runner.invoke(app, ["ingest", str(folder), "--store", str(store), "--json"])
        assert result.exit_code == 0, result.output
        out[corpus] = (store, result.stdout)
    return out


@pytest.mark.real
@pytest.mark.parametrize("corpus", sorted(CORPORA))
def test_ingest_json_is_unchanged(stores: dict[str, tuple[Path, str]], corpus: str) -> None:
    _check(f"{corpus}-ingest", stores[corpus][1])


@pytest.mark.real
@pytest.mark.parametrize(("corpus", "name", "args"), CASES, ids=[c[1] + "-" + c[0] for c in CASES])
def test_command_json_is_unchanged(stores: dict[str, tuple[Path, str]], corpus: str, name: str,
                                   args: list[str]) -> None:
    store = stores[corpus][0]
    result = runner.invoke(app, [*args, "--store", str(store), "--json"])
    assert result.exit_code == 0, result.output
    _check(f"{corpus}-{name}", result.stdout)


@pytest.mark.real
@pytest.mark.parametrize("corpus", sorted(CORPORA))
def test_render_json_is_unchanged(stores: dict[str, tuple[Path, str]], corpus: str) -> None:
    """One request of every body-carrying format in the corpus, rendered."""
    store = stores[corpus][0]
    ids = runner.invoke(app, ["sql", "select source_format, min(id) as id from requests "
                              "where has_body group by 1 order by 1", "--store", str(store),
                              "--json"])
    assert ids.exit_code == 0, ids.output
    rows = json.loads(ids.stdout)
    assert rows
    for row in rows:
        result = runner.invoke(app, ["render", row["id"], "--store", str(store), "--json"])
        assert result.exit_code == 0, result.output
        _check(f"{corpus}-render-{row['source_format']}", result.stdout)


@pytest.mark.slow
@pytest.mark.real
@pytest.mark.parametrize("corpus", sorted(CORPORA))
def test_report_json_is_unchanged(stores: dict[str, tuple[Path, str]], corpus: str) -> None:
    result = runner.invoke(app, ["report", "--store", str(stores[corpus][0]), "--json"])
    assert result.exit_code == 0, result.output
    _check(f"{corpus}-report", result.stdout)
