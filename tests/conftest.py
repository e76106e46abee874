"""Shared test fixtures: paths to the real public data, an isolated working dir, store helpers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
# ../shared/data/real relative to the project root (CI lays shared/ beside the clone).
REAL = Path(os.environ.get("PREFIXSCOPE_REAL_DATA", ROOT.parent / "shared" / "data" / "real"))


@pytest.fixture
def real() -> Path:
    """The real-data folder; tests using it are skipped when it is absent."""
    if not REAL.is_dir():
        pytest.skip(f"real data not found at {REAL}")
    return REAL


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs in its own directory with UTC time and no network-reaching hub."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TZ", "UTC")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("PREFIXSCOPE_CACHE_DIR", str(tmp_path / "cache"))
