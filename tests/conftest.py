"""Shared test fixtures: paths to the real public data, an isolated working dir, store helpers."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
# Real public data copied byte for byte into the repo (sources and licences in its README),
# so every test runs on a fresh clone.
REAL = ROOT / "tests" / "data" / "real"


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
