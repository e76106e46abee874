"""The JSON shapes are declared once (prefixscope.views.jsonshapes), documented, and printed.

* docs/json.md's field tables (``key | type | meaning``) and the `TypedDict`s agree:
  the same key paths, nested objects included, with the same types, both ways;
* each command's actual ``--json`` output validates against its `TypedDict`: every
  key present, no other key, each value of its declared type (``None`` only where
  the annotation says so), recursively -- and every declared path is exercised.
"""

import ast
import json
import re
import types
import typing
from typing import Any, NotRequired, TypedDict, Union, get_args, get_origin, get_type_hints

import pytest
from conftest import FIXTURES, ROOT
from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.views.jsonshapes import SHAPES, IngestErrorJson

runner = CliRunner()
CAPTURE = str(FIXTURES / "raw" / "claude_code_capture.jsonl")
SAMPLE = str(ROOT / "sample_logs" / "langfuse-claude-code.events_full.jsonl")
DOC = ROOT / "docs" / "json.md"
# Documented sections whose output is no fixed object: `sql --json` rows are the query's.
FREE_FORM = {"sql"}

# A type as compared: the set of its union members, each (name, canonical arguments).
Canon = frozenset[tuple[str, tuple[Any, ...]]]

# ------------------------------------------------------------------ declared shapes


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def canon(tp: Any) -> Canon:
    """An annotation in the docs' terms: a TypedDict is ``object``, ``None`` is ``null``."""
    if _is_union(tp):
        return frozenset().union(*(canon(member) for member in get_args(tp)))
    if typing.is_typeddict(tp):
        return frozenset({("object", ())})
    if tp is type(None):
        return frozenset({("null", ())})
    if tp in (int, float, bool, str):
        return frozenset({(tp.__name__, ())})
    if tp is object:  # free JSON (a finding's evidence): any value
        return frozenset({("any", ())})
    origin = get_origin(tp)
    if origin in (list, dict):
        return frozenset({(origin.__name__, tuple(canon(a) for a in get_args(tp)))})
    raise TypeError(f"annotation {tp!r} has no JSON spelling")


def declared_fields(shape: type, prefix: str = "") -> dict[str, tuple[Canon, bool]]:
    """Every key path of a TypedDict (nested ones included) -> (type, optional key)."""
    out: dict[str, tuple[Canon, bool]] = {}

    def nested(tp: Any, path: str) -> None:
        for member in get_args(tp) if _is_union(tp) else (tp,):
            if typing.is_typeddict(member):
                out.update(declared_fields(member, f"{path}."))
            elif get_origin(member) is list:
                nested(get_args(member)[0], f"{path}[]")
            elif get_origin(member) is dict:
                nested(get_args(member)[1], f"{path}.*")

    for key, tp in get_type_hints(shape).items():
        out[prefix + key] = (canon(tp), key in shape.__optional_keys__)  # type: ignore[attr-defined]
        nested(tp, prefix + key)
    return out


# ------------------------------------------------------------------ documented shapes

_TOKEN = re.compile(r"\s*(\w+|[\[\],|])")


def parse_type(text: str) -> Canon:
    """``int | null``, ``list[object]``, ``dict[str, str | null]``... as `canon` gives it."""
    tokens = _TOKEN.findall(text)
    if not tokens or "".join(tokens) != re.sub(r"\s+", "", text):
        raise ValueError(f"cannot read type {text!r}")
    pos = 0

    def peek() -> str:
        return tokens[pos] if pos < len(tokens) else ""

    def union() -> Canon:
        nonlocal pos
        members = set(term())
        while peek() == "|":
            pos += 1
            members |= term()
        return frozenset(members)

    def term() -> Canon:
        nonlocal pos
        name = peek()
        pos += 1
        if name not in ("int", "float", "bool", "str", "null", "object", "list", "dict", "any"):
            raise ValueError(f"unknown type {name!r} in {text!r}")
        args: list[Canon] = []
        if peek() == "[":
            pos += 1
            args.append(union())
            while peek() == ",":
                pos += 1
                args.append(union())
            if peek() != "]":
                raise ValueError(f"unbalanced brackets in {text!r}")
            pos += 1
        if (name in ("list", "dict")) != bool(args) or (name == "dict") != (len(args) == 2):
            raise ValueError(f"wrong arguments for {name!r} in {text!r}")
        return frozenset({(name, tuple(args))})

    result = union()
    if pos != len(tokens):
        raise ValueError(f"trailing text in type {text!r}")
    return result


_HEADING = re.compile(r"^#{2,3} .*`prefixscope (.+?) --json`")
_TABLE_HEAD = "| key | type | meaning |"


def documented() -> tuple[dict[str, dict[str, tuple[Canon, bool]]], set[str]]:
    """docs/json.md's field tables by shape name, and every documented command section.

    A table belongs to the nearest heading above it naming ``prefixscope X --json``;
    the shape name is X without its capitalized placeholders (``segments --by DIM``
    -> ``segments --by``).
    """
    tables: dict[str, dict[str, tuple[Canon, bool]]] = {}
    sections: set[str] = set()
    current: str | None = None
    lines = DOC.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            match = _HEADING.match(line)
            current = (" ".join(w for w in match.group(1).split() if not w.isupper())
                       if match else None)
            if current and line.startswith("## "):
                sections.add(current)
        elif line.strip() == _TABLE_HEAD:
            assert current, f"docs/json.md:{i + 1}: a field table outside a command section"
            assert current not in tables, f"docs/json.md: two field tables for {current!r}"
            fields: dict[str, tuple[Canon, bool]] = {}
            i += 2  # header and |---| rule
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in re.split(r"(?<!\\)\|", lines[i].strip()[1:-1])]
                assert len(cells) == 3, f"docs/json.md:{i + 1}: not 3 cells"
                keys = re.findall(r"`([^`]+)`", cells[0])
                spelled = re.findall(r"`([^`]+)`", cells[1])
                assert keys and len(spelled) == 1, f"docs/json.md:{i + 1}: key or type unreadable"
                try:
                    tp = parse_type(spelled[0].replace("\\|", "|"))
                except ValueError as exc:
                    raise AssertionError(f"docs/json.md:{i + 1}: {exc}") from None
                optional = "*(optional)*" in cells[1]
                for key in keys:
                    assert key not in fields, f"docs/json.md:{i + 1}: {key} listed twice"
                    fields[key] = (tp, optional)
                i += 1
            tables[current] = fields
            continue
        elif line.startswith("|") and current:
            raise AssertionError(f"docs/json.md:{i + 1}: a table row outside a field table "
                                 f"(header `{_TABLE_HEAD}`, rows without a blank line)")
        i += 1
    return tables, sections


def spell(tp: Canon) -> str:
    """A canonical type back in the docs' spelling, for messages."""
    def member(m: tuple[str, tuple[Any, ...]]) -> str:
        name, args = m
        return f"{name}[{', '.join(spell(a) for a in args)}]" if args else name
    return " | ".join(sorted((member(m) for m in tp), key=lambda s: (s == "null", s)))


def test_parse_type_reads_the_documented_spellings():
    assert parse_type("int | null") == canon(int | None)
    assert parse_type("null | int") == canon(int | None)
    assert parse_type("dict[str, str | null]") == canon(dict[str, str | None])
    assert parse_type("list[object]") == canon(list[IngestErrorJson])
    assert parse_type("int | float | null") == canon(int | float | None)
    assert parse_type("dict[str, any]") == canon(dict[str, object])
    for bad in ("integer", "list", "dict[str]", "list[int", "int |", "int null"):
        with pytest.raises(ValueError):
            parse_type(bad)


def test_docs_tables_match_the_declared_shapes():
    tables, sections = documented()
    assert set(tables) == set(SHAPES), (
        f"field tables in docs/json.md for {sorted(tables)}, shapes declared for "
        f"{sorted(SHAPES)}")
    assert sections - FREE_FORM <= {name.split()[0] for name in SHAPES}, (
        f"documented sections without a declared shape: {sorted(sections - FREE_FORM)}")
    problems = []
    for name, shape in SHAPES.items():
        doc, decl = tables[name], declared_fields(shape)
        for path in sorted(decl.keys() - doc.keys()):
            problems.append(f"{name}: {path} is declared but not in docs/json.md")
        for path in sorted(doc.keys() - decl.keys()):
            problems.append(f"{name}: {path} is in docs/json.md but not declared")
        for path in sorted(doc.keys() & decl.keys()):
            (dt, dopt), (tt, topt) = doc[path], decl[path]
            if dt != tt:
                problems.append(f"{name}: {path} is `{spell(dt)}` in docs/json.md, "
                                f"`{spell(tt)}` declared")
            if dopt != topt:
                problems.append(f"{name}: {path} optional: docs {dopt}, declared {topt}")
    assert not problems, "\n".join(problems)


def test_docs_table_check_catches_a_mismatch():
    """The comparison is not vacuous: a changed shape differs from the docs' table."""

    class Inner(TypedDict):
        n: int

    class Outer(TypedDict):
        a: str | None
        inner: list[Inner]
        extra: NotRequired[bool]

    fields = declared_fields(Outer)
    assert fields == {"a": (parse_type("str | null"), False),
                      "inner": (parse_type("list[object]"), False),
                      "inner[].n": (parse_type("int"), False),
                      "extra": (parse_type("bool"), True)}
    assert declared_fields(SHAPES["diff"])["totals.by_cause.*.lost_tokens"] == (
        parse_type("int"), False)


# ------------------------------------------------------------------ actual output


def validate(value: Any, tp: Any, path: str = "", seen: set[str] | None = None) -> list[str]:
    """Why `value` is not of annotation `tp` (empty when it is); `seen` collects key paths."""
    seen = set() if seen is None else seen
    where = path or "(top)"
    if _is_union(tp):
        for member in get_args(tp):
            trial: set[str] = set()
            if not validate(value, member, path, trial):
                seen |= trial
                return []
        others = [m for m in get_args(tp) if m is not type(None)]
        if value is not None and len(others) == 1:  # `X | None` and not null: why not an X
            return validate(value, others[0], path, seen)
        return [f"{where}: {value!r:.80} is not {spell(canon(tp))}"]
    if typing.is_typeddict(tp):
        if not isinstance(value, dict):
            return [f"{where}: {value!r:.80} is not an object"]
        hints = get_type_hints(tp)
        errors = [f"{where}: key {k!r} missing" for k in sorted(tp.__required_keys__ - set(value))]
        errors += [f"{where}: key {k!r} not declared" for k in sorted(set(value) - set(hints))]
        for key in hints.keys() & value.keys():
            sub = f"{path}.{key}" if path else key
            seen.add(sub)
            errors += validate(value[key], hints[key], sub, seen)
        return errors
    origin = get_origin(tp)
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: {value!r:.80} is not a list"]
        return [e for item in value for e in validate(item, get_args(tp)[0], f"{path}[]", seen)]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: {value!r:.80} is not an object"]
        errors = [f"{where}: key {k!r} is not a string" for k in value if not isinstance(k, str)]
        return errors + [e for item in value.values()
                         for e in validate(item, get_args(tp)[1], f"{path}.*", seen)]
    if tp is type(None):
        return [] if value is None else [f"{where}: {value!r:.80} is not null"]
    if tp is object:  # any JSON value: it came through json.loads
        return []
    if tp in (int, float, bool, str):
        # Exact: a bool is no int, an int no float (json.loads keeps 2 and 2.0 apart).
        return [] if type(value) is tp else [f"{where}: {value!r:.80} is not {tp.__name__}"]
    return [f"{where}: cannot check annotation {tp!r}"]


def test_validate_is_strict():
    shape = SHAPES["ingest"]
    good = {"ingested": 1, "already_present": 0, "skipped": 1, "by_format": {"raw": 1},
            "sessions": 1, "duplicates": 0, "files": 1,
            "errors": [{"file": "f", "line": None, "reason": "r"}],
            "unrecognized": [], "empty": [], "engine_logs": [], "formats": {},
            "totals": {"requests": 1, "sessions": 1, "with_body": 0, "duplicates": 0,
                       "prompt_tokens": None, "prompt_requests": 0, "cached_tokens": None,
                       "cached_requests": 0, "hit_rate": None, "rate_requests": 0,
                       "rate_prompt_tokens": 0, "rate_cached_tokens": 0}}
    assert validate(good, shape) == []
    assert validate({**good, "ingested": True}, shape)  # a bool is not an int
    assert validate({**good, "ingested": 1.0}, shape)  # nor is a float
    assert validate({**good, "ingested": None}, shape)  # not Optional
    assert validate({**good, "more": 1}, shape)  # extra key
    assert validate({k: v for k, v in good.items() if k != "empty"}, shape)  # missing key
    assert validate({**good, "errors": [{"file": "f", "line": "7", "reason": "r"}]}, shape)
    assert validate({**good, "by_format": {"raw": None}}, shape)
    render = {"request": "r", "gateway": "g", "tokenizer": "t", "tokens": 1,
              "approximate": False, "segments": []}
    assert validate(render, SHAPES["render"]) == []  # `text` is NotRequired
    assert validate({**render, "text": None}, SHAPES["render"])


class Checked:
    """Validates outputs of one shape and remembers which declared paths they exercised."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.seen: set[str] = set()

    def __call__(self, out: Any) -> Any:
        errors = validate(out, SHAPES[self.name], "", self.seen)
        assert not errors, f"{self.name} --json:\n" + "\n".join(errors[:20])
        return out

    def all_exercised(self) -> None:
        missing = declared_fields(SHAPES[self.name]).keys() - self.seen
        assert not missing, f"{self.name}: never exercised by the test inputs: {sorted(missing)}"


def run_json(*args: str) -> Any:
    result = runner.invoke(app, [*args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_ingest_shape():
    check = Checked("ingest")
    check(run_json("ingest", CAPTURE, "--store", "s.duckdb"))
    # Bad lines and an unrecognized file: errors with a line and with `null`.
    out = check(run_json("ingest", CAPTURE, str(FIXTURES / "claude-code" / "bad_lines.jsonl"),
                         str(FIXTURES / "mini-swe-agent" / "not_messages.json"),
                         "--store", "t.duckdb"))
    assert {type(e["line"]) for e in out["errors"]} == {int, type(None)}
    check.all_exercised()


def test_render_shape():
    check = Checked("render")
    runner.invoke(app, ["ingest", CAPTURE, "--store", "s.duckdb"])
    rid = json.loads(runner.invoke(app, ["sql", "select id from requests limit 1", "--store",
                                         "s.duckdb", "--json"]).stdout)[0]["id"]
    assert "text" not in check(run_json("render", rid, "--store", "s.duckdb"))
    assert "text" in check(run_json("render", rid, "--store", "s.duckdb", "--show-text"))
    check.all_exercised()


def test_diff_shape():
    check = Checked("diff")
    out = check(run_json("diff", "--all", CAPTURE, "--gateway", "anthropic-to-openai"))
    assert out["pairs"]
    check.all_exercised()


def test_bucket_shape():
    check = Checked("bucket")
    out = check(run_json("bucket", SAMPLE, "--by", "endpoint"))
    assert out["groups"][0]["spikes"][0]["boundary"] is not None
    check.all_exercised()


def test_segments_shape():
    check = Checked("segments")
    check(run_json("segments", SAMPLE))
    check.all_exercised()
    grouped = Checked("segments --by")
    grouped(run_json("segments", SAMPLE, "--by", "endpoint"))
    grouped.all_exercised()


def test_simulate_shape():
    check = Checked("simulate")
    sample = str(ROOT / "sample_logs" / "bifrost-mcp-keyorder.jsonl")
    check(run_json("simulate", sample, "--what-if", "sort-json-keys", "--capacity-curve",
                   "2000,unlimited", "--fit", "--per-request"))
    check(run_json("simulate", str(FIXTURES / "block-trace" / "mooncake_sample.jsonl")))
    check.all_exercised()


def test_calls_shape():
    check = Checked("calls")
    out = check(run_json("calls", SAMPLE))
    assert any(c["break_kind"] for s in out["sessions"] for c in s["calls"])
    check(run_json("calls", SAMPLE, "--session", out["sessions"][0]["session"][:6]))
    # recorded session events and provider verdicts
    check(run_json("calls", str(ROOT / "tests" / "fixtures" / "claude-code"
                                / "recorded_events.jsonl")))
    check.all_exercised()


@pytest.mark.slow
def test_report_shape(tmp_path):
    check = Checked("report")

    def report(*args: str) -> Any:
        result = runner.invoke(app, ["report", *args, "--json"])
        assert result.exit_code in (0, 3), result.output
        return json.loads(result.stdout)

    base = tmp_path / "base.json"
    base.write_text('{"prefixscope_baseline": 1, "scenarios": {"gone": 5}}')
    check(report(str(ROOT / "sample_logs"), "--fail-under", "0.5", "--max-volatile-before",
                 "10", "--baseline", str(base)))
    out = check(report(str(ROOT / "tests" / "fixtures" / "claude-code"
                           / "idle_gap_session.jsonl"), "--fail-under", "0.99",
                       "--what-if", "policy"))
    (policy,) = [w["policy"] for w in out["what_if"] if w["name"] == "policy"]
    assert policy["parts"][0]["options"] and policy["parts"][0]["turns"]
def test_engine_log_shape(tmp_path):
    from test_engine_log import gen

    check = Checked("engine-log")
    files = {"vllm.log": gen.vllm_log(minutes=2, bad_lines=1)[0],
             "metrics.txt": gen.prometheus_dump()[0], "sglang.log": gen.sglang_log()[0],
             "lmcache.log": gen.vllm_log(minutes=1, lmcache=True)[0]}
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    out = check(run_json("engine-log", str(tmp_path)))
    assert out["prometheus"] and out["sglang"] and out["lmcache"] and out["skips"]
    assert out["findings"]
    check(run_json("engine-log", str(tmp_path / "vllm.log")))  # prometheus, sglang: null
    check.all_exercised()


def test_jsonshapes_is_a_leaf_module():
    """Any module may import the shapes: they import nothing but the standard library."""
    tree = ast.parse((ROOT / "prefixscope" / "views" / "jsonshapes.py").read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] if node.module and not node.level else "."
                 for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= {"typing", "__future__"}, imported
