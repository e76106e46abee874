"""docs/architecture.md is true of the tree (issue 38 item 7).

* its layer table is the import-linter layers contract in pyproject.toml, row for row and
  in order, and each row's "may import" names only layers below it;
* its package tree lists every top-level module and package of prefixscope/, and each
  entry it nests exists where it is nested;
* every file it names (``store/load.py``, ``tests/test_workers.py``) exists, every
  ``module.name`` it cites is defined in that module, and every registry or constant it
  names (``ENGINES``, ``_MODULES in ingest/formats/__init__.py``) is defined there.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from conftest import ROOT

DOC = ROOT / "docs" / "architecture.md"
TEXT = DOC.read_text(encoding="utf-8")
PACKAGE = ROOT / "prefixscope"
SOURCES = {p: p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py")}
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
    "tool"]["importlinter"]["contracts"]
LAYERS = next(c for c in CONTRACTS if c["type"] == "layers")["layers"]


def section(title: str) -> str:
    """The text of the ``## title`` section."""
    found = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", TEXT, re.M | re.S)
    assert found, f"docs/architecture.md has no section {title!r}"
    return found.group(1)


def table_rows(text: str) -> list[list[str]]:
    """The cells of each body row of the first Markdown table in `text`."""
    rows = [line for line in text.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", row)[1:-1]] for row in rows[2:]]


def ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def defines(source: str, name: str) -> bool:
    """`source` defines `name` at any level (a def, a class, an assignment, a field) or
    imports it (a package re-exporting its modules' names)."""
    word = re.escape(name)
    return re.search(rf"^\s*(?:(?:async\s+)?def|class)\s+{word}\b|"
                     rf"^\s*{word}\s*(?::[^=\n]*)?=|"
                     rf"^from [\w.]+ import (?:\([^)]*?)?\b{word}\b", source, re.M) is not None


def module_file(dotted: str) -> Path | None:
    """The module or package of prefixscope named by the dotted tail `dotted` (``onepass``,
    ``prompt.pipeline``, ``store``), when exactly one matches."""
    parts = dotted.split(".")
    found = [p for p in SOURCES
             if p.relative_to(PACKAGE).with_suffix("").parts[-len(parts):] == tuple(parts)
             or (p.name == "__init__.py"
                 and p.parent.relative_to(PACKAGE).parts[-len(parts):] == tuple(parts))]
    return found[0] if len(found) == 1 else None


def test_the_layer_table_is_the_import_linter_contract() -> None:
    rows = table_rows(section("Layers"))
    assert [set(ticked(layer)) for layer, _ in rows] == [
        {name.strip() for name in layer.split("|")} for layer in LAYERS]


def test_a_layer_may_import_only_the_layers_below_it() -> None:
    rows = table_rows(section("Layers"))
    every = {name.strip() for layer in LAYERS for name in layer.split("|")}
    below: list[set[str]] = []
    for i in range(len(rows)):
        below.append({name.strip() for layer in LAYERS[i + 1:] for name in layer.split("|")})
    for (layer, may), lower in zip(rows, below, strict=True):
        named = {n for n in ticked(may) if n in every}
        assert named <= lower, f"{layer} names {sorted(named - lower)}, not below it"


def tree_entries() -> list[tuple[int, str]]:
    """(indent, name) of each entry of the package tree block (``prefixscope/`` first)."""
    block = re.search(r"```\nprefixscope/\n(.*?)```", TEXT, re.S)
    assert block, "no package tree in docs/architecture.md"
    entries = []
    for line in block.group(1).splitlines():
        found = re.match(r"( +)([\w.]+/?)(?=\s|$)", line)
        if found and (found.group(2).endswith("/") or found.group(2).endswith(".py")):
            entries.append((len(found.group(1)), found.group(2)))
    return entries


def test_the_tree_lists_every_top_level_module_and_package() -> None:
    top = min(indent for indent, _ in tree_entries())
    listed = {name for indent, name in tree_entries() if indent == top}
    actual = {p.name + ("/" if p.is_dir() else "") for p in PACKAGE.iterdir()
              if p.name not in ("__pycache__", "__init__.py", "__main__.py", "py.typed")}
    assert listed == actual


def test_every_entry_of_the_tree_exists_where_it_is_nested() -> None:
    parents: list[tuple[int, Path]] = [(-1, PACKAGE)]
    missing = []
    for indent, name in tree_entries():
        while parents[-1][0] >= indent:
            parents.pop()
        path = parents[-1][1] / name.rstrip("/")
        if not path.exists():
            missing.append(str(path.relative_to(ROOT)))
        if name.endswith("/"):
            parents.append((indent, path))
    assert missing == []


FILES = sorted(set(re.findall(r"(?<![\w./<>-])((?:[\w-]+/)*[\w-]+\.(?:py|md|jinja|toml))\b",
                              TEXT)))


@pytest.mark.parametrize("name", FILES)
def test_every_file_named_exists(name: str) -> None:
    tracked = [p for p in ROOT.rglob(Path(name).name)
               if ".venv" not in p.parts and p.as_posix().endswith("/" + name)]
    assert tracked, f"docs/architecture.md names {name}, which is not in the tree"


CITED = sorted({ref for ref in re.findall(r"`(\w+(?:\.\w+)+)(?:\(\))?`", TEXT)
                if not re.search(r"\.(py|md|jinja|toml|npz|json)$", ref)})


@pytest.mark.parametrize("ref", CITED)
def test_every_cited_name_is_defined_where_it_is_cited(ref: str) -> None:
    """``onepass._base_ids_out``: in analyses/onepass.py; ``Store.iter_layouts``: a
    method of a class `Store`; a name whose head is no module: defined somewhere."""
    *head, name = ref.split(".")
    dotted = ".".join(h for h in head if h != "prefixscope")
    where = module_file(dotted) if dotted else None
    if where is not None:
        assert defines(SOURCES[where], name), f"{ref}: no {name} in {where}"
        return
    owner = head[-1]
    classes = [s for s in SOURCES.values() if re.search(rf"^class {owner}\b", s, re.M)]
    assert any(defines(s, name) for s in classes) or any(
        defines(s, name) for s in SOURCES.values()), f"{ref} is defined nowhere"


REGISTERED = sorted({(name, path) for row in table_rows(section("Where a new thing goes"))
                     for name, path in re.findall(r"`(\w+)` in `([\w/]+\.py)`", row[-1])})
CONSTANTS = sorted(set(re.findall(r"`(_?[A-Z][A-Z_]+)`", TEXT)))


@pytest.mark.parametrize(("name", "path"), REGISTERED)
def test_every_registry_named_is_in_its_file(name: str, path: str) -> None:
    assert defines((PACKAGE / path).read_text(encoding="utf-8"), name), f"{name} in {path}"


@pytest.mark.parametrize("name", CONSTANTS)
def test_every_constant_named_is_defined(name: str) -> None:
    assert any(defines(s, name) for s in SOURCES.values()), f"{name} is defined nowhere"
