"""The layout is a contract: what import-linter cannot see is checked here.

* every module says why it exists (a module docstring);
* SQL lives in prefixscope/store only: nothing else executes statements or holds SQL text;
* the registries are the extension points: every gateway / bundled tokenizer / ingest format
  module in its package is registered, and every registered name resolves.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest
from conftest import ROOT

PACKAGE = ROOT / "prefixscope"
MODULES = sorted(PACKAGE.rglob("*.py"))
SQL_TEXT = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|CREATE|DROP|COPY)\b.*"
                      r"\b(FROM|INTO|TABLE|TO)\b", re.S)


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_every_module_has_a_docstring(path: Path) -> None:
    assert ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))), _rel(path)


# SQL that is not about the store: reading new-api / LiteLLM SQLite *log files*, and the
# piece cache's own on-disk file of token pieces.
NOT_THE_STORE = {"prefixscope/ingest/readers/sqlite.py", "prefixscope/tokens/tokenize.py"}


@pytest.mark.parametrize("path", [p for p in MODULES if "store" not in p.relative_to(PACKAGE).parts
                                  and _rel(p) not in NOT_THE_STORE], ids=_rel)
def test_no_sql_outside_the_store(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("execute", "executemany", "sql",
                                                             "con", "run"):
            # `.run` / `.con` / `.execute` are the store's connection API.
            if isinstance(node.value, ast.Name) and node.value.id in ("store", "st", "self"):
                raise AssertionError(f"{_rel(path)}:{node.lineno} reaches into the store's "
                                     f"connection (.{node.attr})")
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            upper = node.value.upper()
            if SQL_TEXT.search(upper) and node.value.lstrip().upper().startswith(
                    ("SELECT", "INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "COPY", "WITH")):
                raise AssertionError(f"{_rel(path)}:{node.lineno} holds SQL text")


def _modules_in(package: str) -> set[str]:
    folder = PACKAGE / Path(*package.split(".")[1:])
    return {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}


def test_every_gateway_module_is_registered() -> None:
    from prefixscope.prompt.gateways import _MODULES, gateway_profiles

    assert _modules_in("prefixscope.prompt.gateways") - {"profile"} == set(_MODULES)
    assert sorted(gateway_profiles()) == sorted(
        importlib.import_module(f"prefixscope.prompt.gateways.{m}").PROFILE.name
        for m in _MODULES)


def test_every_bundled_tokenizer_module_is_registered() -> None:
    from prefixscope.tokenizers import _BUNDLED_MODULES

    loaders = {m for m in _modules_in("prefixscope.tokenizers")
               if hasattr(importlib.import_module(f"prefixscope.tokenizers.{m}"), "load")}
    assert loaders == set(_BUNDLED_MODULES.values())
    templates = {p.stem for p in (PACKAGE / "tokenizers" / "templates").glob("*.jinja")}
    assert templates == set(_BUNDLED_MODULES)


def test_ci_runs_the_readme_test_command() -> None:
    """`.ci/run` runs exactly the README's test command (scripts/test), and that command
    installs what the tests need on a fresh machine (Chromium, a fresh venv with the test
    extra) before the checks, in the README's order."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```sh\n(.*?)```", readme, re.S)
    assert "bash scripts/test\n" in blocks
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.startswith("#")]
    assert ci[-1] == "exec bash scripts/test"
    script = (ROOT / "scripts" / "test").read_text()
    steps = [line.strip() for line in script.splitlines() if line.startswith(".venv/bin/")]
    assert steps == [".venv/bin/python -m pip install --quiet --upgrade pip",
                     '.venv/bin/python -m pip install --quiet -e ".[test]"',
                     ".venv/bin/lint-imports", ".venv/bin/ruff check .", ".venv/bin/mypy",
                     '.venv/bin/python -m pytest "$@"']
    assert "apt-get install -y -qq chromium" in script
    assert "python3 -m venv --clear .venv" in script
    assert script.index("chromium") < script.index("python3 -m venv")


def test_every_finder_module_is_registered_and_every_kind_documented():
    from prefixscope.findings.finders import FINDERS
    from prefixscope.findings.model import KINDS

    folder = ROOT / "prefixscope" / "findings" / "finders"
    modules = {p.stem for p in folder.glob("*.py")} - {"__init__", "base"}
    registered = {f.__module__.rsplit(".", 1)[-1] for f in FINDERS}
    assert modules == registered
    doc = (ROOT / "docs" / "report.md").read_text(encoding="utf-8")
    kinds = doc.split("## Kinds of finding", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `([a-z0-9-]+)` \|", kinds, re.M))
    assert documented == set(KINDS)


def test_every_ledger_cause_is_documented_in_order():
    from prefixscope.findings.ledger import CAUSES

    doc = (ROOT / "docs" / "report.md").read_text(encoding="utf-8")
    ledger = doc.split("## The ledger", 1)[1].split("\n## ", 1)[0]
    assert tuple(re.findall(r"^\| `([a-z-]+)` \|", ledger, re.M)) == CAUSES
