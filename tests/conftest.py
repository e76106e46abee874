"""Shared test fixtures: paths to the real public data, an isolated working dir, store helpers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
# Real public data copied byte for byte into the repo (sources and licences in its README),
# so every test runs on a fresh clone.
REAL = ROOT / "tests" / "data" / "real"
# The report names the price package's version as the basis of its dollars; the goldens
# hold a placeholder so a newer release with the same prices compares equal (the test
# extra pins the release whose prices the goldens' dollars come from).
_PRICES_VERSION = re.compile(r"genai-prices \d+(?:\.\d+)*\S*?(?=\))")


def normalized_output(text: str) -> str:
    """A command's output as the goldens hold it: the checkout's absolute path becomes
    `<root>` and the price package's version `<version>`, so the files compare anywhere."""
    return _PRICES_VERSION.sub("genai-prices <version>", text.replace(str(ROOT), "<root>"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that reads the real data carries the `real` marker (`pytest -m real`)."""
    for item in items:
        if "real" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.real)


@pytest.fixture
def real() -> Path:
    """The real-data folder in the repo."""
    assert REAL.is_dir(), f"real data missing at {REAL}"
    return REAL


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs in its own directory with UTC time and no network-reaching hub."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TZ", "UTC")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("PREFIXSCOPE_CACHE_DIR", str(tmp_path / "cache"))


def store_at_schema(path: Path, version: int) -> Any:
    """An open DuckDB connection to a new store file at `path` as prefixscope wrote it at
    schema `version` (the migrations up to it, each recorded), for the caller to fill and
    close: what an older prefixscope left behind, for the migration tests."""
    import duckdb

    from prefixscope.store.schema import MIGRATIONS

    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE schema_version (version INTEGER, "
                "applied_at TIMESTAMP DEFAULT current_timestamp)")
    for number, statement in enumerate(MIGRATIONS[:version], start=1):
        con.execute(statement)
        con.execute("INSERT INTO schema_version (version) VALUES (?)", [number])
    return con


@pytest.fixture(scope="module")
def deepseek_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tokenizer cache directory shared by a module's tests: DeepSeek's entry derived
    there once (a cold load)."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def warm_deepseek(deepseek_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A loader of DeepSeek's tokenizer from a warm cache entry (made first if absent)."""
    from prefixscope.tokenizers import deepseek

    monkeypatch.setenv("PREFIXSCOPE_CACHE_DIR", str(deepseek_cache))

    def load() -> Any:
        deepseek.load("deepseek-v4")
        return deepseek.load("deepseek-v4")
    return load


@pytest.fixture
def unloaded_deepseek(warm_deepseek: Any) -> Any:
    """DeepSeek's tokenizer from a warm cache entry: the `tokenizers` library not loaded."""
    tok = warm_deepseek()
    assert tok._rust is None
    return tok
