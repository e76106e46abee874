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

    def test_a_claude_log_is_not_told_to_pass_a_tokenizer_anthropic_does_not_publish(
            self) -> None:
        task = str(ROOT / "tests" / "fixtures" / "cline-history-nocache" / "tasks"
                   / "1777100000000")
        said = runner.invoke(app, ["report", task]).stdout
        [line] = [s for s in said.splitlines() if s.startswith("approximate:")]
        assert line == (
            "approximate: 3 of 3 diffed pairs and 4 of 4 replayed requests counted with "
            "deepseek-v4 standing in for Claude's tokenizer, which Anthropic does not publish "
            "(no --tokenizer can make them exact): their token positions and predicted cached "
            "tokens are estimates; the hit rates and the ledger count the log's own usage")
        # a model whose own tokenizer exists is still told how to get it
        other = runner.invoke(app, ["report", self.LANGFUSE]).stdout
        assert "pass --tokenizer for exact ones" in other

    def test_no_page_or_message_says_proxy_tokenizer(self) -> None:
        files = [*(ROOT / "prefixscope").rglob("*.py"), *(ROOT / "docs").rglob("*.md"),
                 ROOT / "README.md"]
        said = [f for f in files if re.search(r"proxy (tokenizer|render)",
                                               f.read_text(encoding="utf-8"), re.I)]
        assert said == []


def _legend_lines(text: str) -> list[str]:
    """The lines that define all three rates (the legend), whitespace collapsed."""
    return [" ".join(line.split()) for line in text.splitlines()
            if all(f"{rate}:" in line for rate in ("observed", "predicted", "ideal"))]


class TestRatesLegend:
    """observed / predicted / ideal are defined in one line in every view that prints them,
    in the words `simulate` prints."""

    def test_every_report_view_and_simulate_define_the_three_rates_alike(
            self, sample) -> None:
        simulate = runner.invoke(app, ["simulate", str(ROOT / "sample_logs" /
                                                       "vllm-agents-eviction.jsonl.gz")])
        assert simulate.exit_code == 0, simulate.stderr
        [said] = _legend_lines(simulate.stdout)
        legend = said.split("; agreement:")[0]  # simulate adds what its agreement column is
        assert "ideal: the same replay with an unlimited cache and no expiry" in legend
        assert _legend_lines(sample["terminal"]) == [legend]
        assert _legend_lines(sample["md"]) == [legend + "."]
        assert legend + "." in sample["html_text"]
        # said once, right under the rates, before the findings
        for text in (sample["terminal"], sample["md"]):
            assert text.index("observed") < text.index(legend) < text.index(TITLES[0])


class TestObservedAboveIdeal:
    """A log that reports more cache than an unlimited replay of its prompts can serve:
    every view says why, the JSON too."""

    @pytest.fixture(scope="class")
    @classmethod
    def above(cls, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
        from report_scenarios import write_session

        folder = tmp_path_factory.mktemp("above")
        # every turn reports 100 uncached tokens of 2,000 + 100 x turn: 12,900 of 13,500
        # cached over the 6 turns (hand sum: prompt 6 x 2,000 + 100 x 15 = 13,500)
        log = write_session(folder / "above.jsonl", usage=lambda t: {
            "prompt_tokens": 2000 + 100 * t, "completion_tokens": 10,
            "total_tokens": 2010 + 100 * t,
            "prompt_tokens_details": {"cached_tokens": 1900 + 100 * t}})
        files = {ext: folder / f"r.{ext}" for ext in ("md", "html", "json")}
        result = runner.invoke(app, ["report", str(log), "--md", str(files["md"]),
                                     "--html", str(files["html"]), "--json-file",
                                     str(files["json"])])
        assert result.exit_code == 0, result.stderr
        parsed = _Text()
        parsed.feed(files["html"].read_text(encoding="utf-8"))
        return {"terminal": " ".join(result.stdout.split()),
                "md": " ".join(files["md"].read_text(encoding="utf-8").split()),
                "html_text": parsed.text,
                "doc": json.loads(files["json"].read_text(encoding="utf-8"))}

    def test_the_json_says_why_observed_is_above_ideal_as_every_view_does(
            self, above) -> None:
        replay = above["doc"]["summary"]["replay"]
        assert replay["hit_rate_observed"] == pytest.approx(12_900 / 13_500)
        ideal = replay["hit_rate_ideal"]
        assert ideal < 12_900 / 13_500 - 0.005
        why = replay["above_ideal"]
        assert why.startswith(f"observed 95.56% is above the ideal {ideal:.2%}: ")
        # the bodies were logged: the rebuild lacks part of what was sent
        assert "the rebuilt prompts lack part of what was sent" in why
        assert why in above["terminal"]
        assert why in above["md"]
        assert why in above["html_text"]

    def test_no_explanation_when_observed_is_below_ideal(self, sample) -> None:
        replay = sample["doc"]["summary"]["replay"]
        assert replay["hit_rate_observed"] < replay["hit_rate_ideal"]
        assert replay["above_ideal"] is None
        assert "is above the ideal" not in sample["terminal"] + sample["md"]


def _rendered(markdown: str) -> tuple[str, str]:
    """`markdown` as GitHub's CommonMark with tables renders it: the HTML, and its text."""
    from markdown_it import MarkdownIt

    page = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(markdown)
    parsed = _Text()
    parsed.feed(page)
    return page, parsed.text


class TestMarkdownRenders:
    """`--md` renders in a pull-request comment as it reads: code spans as code, no escape
    printed, tables as tables, headings as headings (markdown-it-py, CommonMark)."""

    def test_code_spans_tables_and_headings_render_with_no_stray_backslash(
            self, sample) -> None:
        import html

        page, text = _rendered(sample["md"])
        doc = sample["doc"]
        # no escape is printed: outside code (where a break's was / now shows a newline as
        # \n on purpose) the text shows no backslash, as the report holds none
        _, prose = _rendered(re.sub(r"`[^`]*`", "", sample["md"]))
        assert "\\" not in prose and "\\" not in json.dumps(doc, ensure_ascii=False).replace(
            '\\"', "").replace("\\\\", "").replace("\\n", "")
        # every code span a fix writes is a <code> element holding its literal text
        spans = {s for f in doc["findings"] for s in re.findall(r"`([^`]+)`", f["fix"])}
        assert {"x-anthropic-billing-header:", "strip_anthropic_billing_header",
                "--what-if strip-billing-header"} <= spans
        codes = set(re.findall(r"<code>(.*?)</code>", page))
        assert {html.escape(s, quote=False) for s in spans} <= codes
        # each finding's title and fix read as the JSON holds them (code marks aside)
        for f in doc["findings"]:
            assert " ".join(f["title"].replace("`", "").split()) in text
            assert " ".join(f["fix"].replace("`", "").split()) in text
        # the rates table and one table per group of findings, as tables
        groups = {_group(f) for f in doc["findings"]}
        assert page.count("<table>") == 1 + len(groups)
        # 7 cells a finding, 4 in the rates' row
        assert len(re.findall(r"<td\b", page)) == 7 * len(doc["findings"]) + 4
        assert re.findall(r"<h1>(.*?)</h1>", page) == ["prefixscope report"]
        assert "Findings" in re.findall(r"<h2>(.*?)</h2>", page)
        assert [html.unescape(t) for t in re.findall(r"<h3>(.*?)</h3>", page)] == TITLES
        # the caveat is a quote of its own: the ledger line after it is a paragraph
        quote = re.search(r"<blockquote>(.*?)</blockquote>", page, re.S)
        assert quote is not None and "missed " not in quote.group(1)

    def test_log_text_stays_text_in_code_spans_and_out(self, tmp_path) -> None:
        from report_scenarios import PLANTED, planted_log

        md = tmp_path / "r.md"
        result = runner.invoke(app, ["report", str(planted_log(tmp_path)), "--md", str(md),
                                     "--max-volatile-before", "100000"])
        assert result.exit_code == 3  # the gate fails: the planted prefix changes every turn
        page, text = _rendered(md.read_text(encoding="utf-8"))
        # the planted markup is never made: no script, image or link
        assert PLANTED and not re.search(r"<(script|img|a)\b", page)
        # a pipe in a table cell does not split it: every row has its header's cells
        for table in re.findall(r"<table>(.*?)</table>", page, re.S):
            rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)
            assert len({len(re.findall(r"<t[hd]\b", row)) for row in rows}) == 1

    @pytest.mark.parametrize(("text", "code", "shown"), [
        # a fix's code span: kept as code, nothing escaped inside it
        ("set `cache_control: {\"type\": \"ephemeral\"}` (once)", "cache_control: "
         "{&quot;type&quot;: &quot;ephemeral&quot;}", "set cache_control: {\"type\": "
         "\"ephemeral\"} (once)"),
        # markup outside code is shown as typed; a URL's run of characters is a code span,
        # which GitHub never links (issue 39: no live links from log text in a PR comment)
        ("a *b* _c_ [d](http://e) <f> & ~g~ \\h", "http://e)", "a *b* _c_ [d](http://e) <f> & ~g~ "
         "\\h"),
        # a double-backtick span may hold a backtick; a lone backtick is a backtick
        ("``a`b`` and a lone `", "a`b", "a`b and a lone `"),
        # what would open a block at a line's start
        ("1. one", None, "1. one"), ("# two", None, "# two"), ("- three", None, "- three"),
        ("> four", None, "> four"), ("snake_case_name", None, "snake_case_name"),
    ])
    def test_md_text_is_read_as_typed(self, text: str, code: str | None, shown: str) -> None:

        from prefixscope.views.markdown import md_text

        page, rendered = _rendered(md_text(text) + "\n")
        assert page.startswith("<p>") and rendered == shown
        assert re.findall(r"<code>(.*?)</code>", page) == ([code] if code else [])
        # in a table cell the same
        page, cell = _rendered(f"| x |\n|---|\n| {md_text(text, cell=True)} |\n")
        assert "<td>" in page and cell == f"x {shown}"

    def test_a_pipe_in_a_table_cell_does_not_split_it_in_code_or_out(self) -> None:
        from prefixscope.views.markdown import md_text

        cell = md_text("`a|b` c|d", cell=True)
        page, text = _rendered(f"| x | y |\n|---|---|\n| {cell} | z |\n")
        assert len(re.findall(r"<td\b", page)) == 2
        assert re.findall(r"<code>(.*?)</code>", page) == ["a|b"] and text == "x y a|b c|d z"
        # outside a table a code span's pipe is no escape
        assert _rendered(md_text("`a|b`") + "\n")[0] == "<p><code>a|b</code></p>\n"


class TestBreakEvidence:
    """A break finding prints the change its JSON excerpt names and where its first example
    pair diverges, was / now, in the terminal and the Markdown -- as `diff` finds it."""

    def test_each_break_finding_shows_its_excerpt_and_first_divergence(self, sample) -> None:
        doc, out = sample["doc"], sample["terminal"]
        diffed = runner.invoke(app, ["diff", "--all", SAMPLES, "--json"])
        assert diffed.exit_code == 0, diffed.stderr
        pairs = {(p["a"], p["b"]): p for p in json.loads(diffed.stdout)["pairs"]}
        breaks = [f for f in doc["findings"] if f["evidence"].get("example_pairs")]
        assert {f["kind"] for f in breaks} >= {"volatile-prefix-segment", "tool-set-change",
                                               "json-key-order"}
        _, md_text = _rendered(sample["md"])
        for f in breaks:
            a, b = f["evidence"]["example_pairs"][0]
            fd = pairs[(a, b)]["first_divergence"]
            assert f"   change: {f['evidence']['excerpt']}\n" in out
            line = re.search(rf"^   first divergence at token {fd['token']:,} in "
                             rf"{re.escape(fd['segment'])}: was '(.*)' now '(.*)'$", out, re.M)
            assert line is not None, (f["kind"], fd)
            was, now = line.groups()
            # each side is a cut of its prompt around the split, escaped (a newline as \n)
            assert was != now and len(was) <= 60 and len(now) <= 60
            for side, text in ((was, fd["text_a"]), (now, fd["text_b"])):
                assert side.strip("…").replace("\\n", "\n") in text
            # the Markdown says the same, was and now as code
            assert (f"First divergence at token {fd['token']:,} in {fd['segment']}: was "
                    f"{was} now {now}") in md_text
            # and the HTML page (its text with whitespace collapsed)
            said = f"first divergence at token {fd['token']:,} in {fd['segment']}: was {was} now"
            assert " ".join(said.split()) in sample["html_text"]
        # the sample's billing header, as its JSON excerpt names the values (sample_logs/)
        volatile = next(f for f in breaks if f["kind"] == "volatile-prefix-segment")
        old, new = re.fullmatch(r"system\[0\]: (cch=\w+) → (cch=\w+)",
                                volatile["evidence"]["excerpt"]).groups()
        shown = re.search(r"in system\[0\]: was '(.*)' now '(.*)'$", out, re.M)
        assert shown is not None and old in shown.group(1) and new in shown.group(2)

    @pytest.fixture(scope="class")
    @classmethod
    def marked(cls, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
        """A session whose system prompt starts with a deployment's secret, the turn's
        number (the split), then a control character and markup."""
        from report_scenarios import write_session

        from prefixscope.model.redaction import Redactor, activate

        def plant(turn: int, request: dict[str, Any]) -> None:
            request["messages"][0]["content"] = (
                f"ACME-INTERNAL-7731 {turn}\x1b[31m<b>`x`|" + request["messages"][0][
                    "content"])

        folder = tmp_path_factory.mktemp("marked")
        log = write_session(folder / "marked.jsonl", change=plant)
        md = folder / "r.md"
        result = runner.invoke(app, ["report", str(log), "--md", str(md), "--redact",
                                     r"ACME-[A-Z]+-\d+"])
        activate(Redactor())  # the run's redactor is the process's: the default again
        assert result.exit_code == 0, result.stderr
        return {"terminal": result.stdout, "md": md.read_text(encoding="utf-8")}

    def test_the_excerpt_is_escaped_and_masked(self, marked) -> None:
        out = marked["terminal"]
        line = re.search(r"^   first divergence at token [\d,]+ in messages\[0\]: was '(.*)' "
                         r"now '(.*)'$", out, re.M)
        assert line is not None, out
        was, now = line.groups()
        # the ESC is shown as \x1b, never sent; the secret before the split masked
        assert "\x1b" not in out and "INTERNAL" not in out
        assert (was, now) == ("…••••••••••• 0\\x1b[31m<b>`x`|…",
                              "…••••••••••• 1\\x1b[31m<b>`x`|…")
        page, _ = _rendered(marked["md"])
        assert "INTERNAL" not in marked["md"] and "\x1b" not in marked["md"]
        # in the Markdown the markup is code: shown, not made
        assert not re.search(r"<b>|<a\b", page)
        codes = re.findall(r"<code>(.*?)</code>", page)
        assert "…••••••••••• 0\\x1b[31m&lt;b&gt;`x`|…" in codes
