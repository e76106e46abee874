"""What a person reads in every view of `report` (terminal, Markdown, HTML) says the same
thing the same way: the findings in one reading order, each group under its own title, a
lens worded alike everywhere; the stand-in tokenizer named one way in every command.

Expected values come from the report's JSON (what the views render) and from hand-made
inputs, never from the view code itself.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from typing import Any

import pytest
from conftest import ROOT
from typer.testing import CliRunner

from prefixscope.cli.main import app

runner = CliRunner()
SAMPLES = str(ROOT / "sample_logs")
LENSES = {"pinned-constant", "low-hit-rate-dimension"}
SEVERITIES = ["high", "medium", "low", "info"]
TITLES = ["what is costing cache — causes, severe first",
          "where the loss shows — lenses, no tokens of their own",
          "what costs nothing — for information"]


class _Text(HTMLParser):
    """The text a browser shows, tags dropped (one string)."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)

    @property
    def text(self) -> str:
        return " ".join("".join(self.parts).split())


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The bundled sample's report: every finding in the terminal, Markdown, HTML, JSON."""
    folder = tmp_path_factory.mktemp("views")
    files = {ext: folder / f"r.{ext}" for ext in ("md", "html", "json")}
    result = runner.invoke(app, ["report", SAMPLES, "--top", "100", "--md", str(files["md"]),
                                 "--html", str(files["html"]), "--json-file",
                                 str(files["json"])])
    assert result.exit_code == 0, result.stderr
    parsed = _Text()
    parsed.feed(files["html"].read_text(encoding="utf-8"))
    return {"terminal": result.stdout, "md": files["md"].read_text(encoding="utf-8"),
            "html": files["html"].read_text(encoding="utf-8"), "html_text": parsed.text,
            "doc": json.loads(files["json"].read_text(encoding="utf-8"))}


def _group(f: dict[str, Any]) -> int:
    """The reading order's group, as docs/report.md states it."""
    return 2 if f["severity"] == "info" else 1 if f["kind"] in LENSES else 0


def _shows(f: dict[str, Any]) -> str:
    """What a lens shows, from its JSON evidence, in the words docs/report.md gives."""
    ev = f["evidence"]
    if not ev.get("shows_tokens") or not ev.get("attributed_to"):
        return "shows no loss of its own"
    return f"shows {ev['shows_tokens']:,} missed tokens of {', '.join(ev['attributed_to'])}"


class TestReadingOrder:
    def test_the_terminal_never_prints_a_severity_out_of_order(self, sample) -> None:
        doc, out = sample["doc"], sample["terminal"]
        numbered = re.findall(r"^(\d+)\. (\w+) ([\w-]+) · ", out, re.M)
        assert [int(n) for n, _, _ in numbered] == list(range(1, len(doc["findings"]) + 1))
        assert [kind for _, _, kind in numbered] == [f["kind"] for f in doc["findings"]]
        groups = [_group(f) for f in doc["findings"]]
        assert groups == sorted(groups) and set(groups) == {0, 1, 2}
        # a lens has its own label, not a severity ranked among the causes
        labels = [label for _, label, _ in numbered]
        assert labels == [("lens" if g == 1 else f["severity"])
                          for f, g in zip(doc["findings"], groups, strict=True)]
        # within each group the severities read high to low
        for g in (0, 2):
            ranks = [SEVERITIES.index(label) for label, gg in zip(labels, groups, strict=True)
                     if gg == g]
            assert ranks == sorted(ranks)
        # each group under its title, the titles in the reading order, each before its
        # first finding and after the previous group's last
        at = [out.index(f"\n{t}\n") for t in TITLES]
        assert at == sorted(at)
        first = {g: out.index(f"\n{groups.index(g) + 1}. ") for g in (0, 1, 2)}
        assert at[0] < first[0] < at[1] < first[1] < at[2] < first[2]

    def test_markdown_and_html_group_the_findings_under_the_same_titles(self, sample) -> None:
        md, page = sample["md"], sample["html_text"]
        assert re.findall(r"^### (.+)$", md, re.M) == TITLES
        assert all(page.count(t) == 2 for t in TITLES)  # the table's row and the sections'
        doc = sample["doc"]
        # the Markdown's numbered findings in the JSON's order, a lens labelled as one
        found = re.findall(r"^\*\*(\d+)\. (\w+) ([\w-]+)\*\*", md, re.M)
        assert [(int(n), label, kind) for n, label, kind in found] == [
            (n, "lens" if _group(f) == 1 else f["severity"], f["kind"])
            for n, f in enumerate(doc["findings"], 1)]

    def test_a_lens_is_worded_the_same_in_every_view(self, sample) -> None:
        doc = sample["doc"]
        lenses = [(n, f) for n, f in enumerate(doc["findings"], 1) if f["kind"] in LENSES]
        assert len(lenses) >= 3 and any(f["evidence"]["attributed_to"] for _, f in lenses)
        for n, f in lenses:
            said = _shows(f)
            label = "lens" if _group(f) == 1 else f["severity"]
            assert f"\n{n}. {label} {f['kind']} · {said}" in sample["terminal"]
            assert f"**{n}. {label} {f['kind']}** · {said}" in sample["md"]
            assert f"{label} {f['kind']}" in sample["html_text"]
            assert said in sample["html_text"]
        # the sample's low-hit-rate-dimension, by hand from its evidence (sample_logs/)
        dim = next(f for _, f in lenses if f["kind"] == "low-hit-rate-dimension")
        assert sum(dim["evidence"]["shows_tokens_by_cause"].values()) == \
            dim["evidence"]["shows_tokens"]
        # no view prints a lens's zero as a cost of its own
        assert "| lens | low-hit-rate-dimension | – | – |" in sample["md"]
        rows = [line for line in sample["md"].splitlines()
                if re.match(r"\| \d+ \| lens \|", line)]
        assert len(rows) == sum(_group(f) == 1 for _, f in lenses)
        assert not any("| 0 |" in row or "0.0%" in row for row in rows)
        for old in ("shows ttl", "a lens on", "a lens:"):
            assert old not in sample["terminal"] + sample["md"] + sample["html_text"]


class TestStandInTokenizer:
    """One name for a tokenizer counting in the model's stead: "stand-in tokenizer"."""

    LANGFUSE = str(ROOT / "sample_logs" / "langfuse-claude-code.events_full.jsonl")

    def test_diff_render_and_report_say_stand_in_tokenizer(self) -> None:
        # the Langfuse sample's model (llm-prime) has no offline tokenizer: approximate
        pair = runner.invoke(app, ["diff", "--all", self.LANGFUSE])
        render = runner.invoke(app, ["render", "ed91d1ab", self.LANGFUSE])
        report = runner.invoke(app, ["report", self.LANGFUSE])
        for result in (pair, render, report):
            assert result.exit_code == 0, result.stderr
            said = result.stdout + result.stderr
            assert "stand-in tokenizer" in said and "proxy" not in said

    def test_no_page_or_message_says_proxy_tokenizer(self) -> None:
        files = [*(ROOT / "prefixscope").rglob("*.py"), *(ROOT / "docs").rglob("*.md"),
                 ROOT / "README.md"]
        said = [f for f in files if re.search(r"proxy (tokenizer|render)",
                                               f.read_text(encoding="utf-8"), re.I)]
        assert said == []
