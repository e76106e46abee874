"""Outputs are safe where they land (issue 39): a PR comment, a browser, a terminal, a file.

A log whose system prompt and a tool name carry what would act on the reader: an
``@user`` mention and ``@org/team`` (GitHub notifies them), a bare URL, a ``www.`` address
and an e-mail address (GitHub links them), bidi overrides and isolates (Trojan Source) and
zero-width characters. In Markdown, mentions and links are code spans; in every output
the invisible characters are ``\\uNNNN``; JSON carries them as JSON escapes (the same
strings once parsed).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from report_scenarios import write_session
from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.views.markdown import md_code, md_text

runner = CliRunner()

INVISIBLE = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200b\u200c\u200d\ufeff"
HOSTILE = ("ping @octocat and @acme/security, see https://evil.example/x?a=1 or "
           "www.evil.example, mail admin@evil.example; "
           + "".join(f"[{c}]" for c in INVISIBLE))
# shows as "runexe.sh" where the override acts; a finding names the tool in its text
TOOL = "run\u202ehs.exe @octocat https://evil.example/t"
PROPERTY = "pa\u2066th\u200b"


def _hostile(turn: int, request: dict[str, Any]) -> None:
    request["messages"][0]["content"] = f"{HOSTILE} " + request["messages"][0]["content"]
    if turn >= 3:  # a tool added half-way: a finding names it
        tool = json.loads(json.dumps(request["tools"][0]))
        tool["function"]["name"] = TOOL
        props = tool["function"]["parameters"]["properties"]
        props[PROPERTY] = props.pop("path")  # a segment path holds a property's name
        request["tools"].append(tool)


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return write_session(tmp_path / "hostile.jsonl", change=_hostile)


def _raw_invisible(text: str) -> list[str]:
    return [f"U+{ord(c):04X}" for c in text if c in INVISIBLE]


class TestMarkdownHelpers:
    def test_mentions_and_links_from_log_text_are_code_spans(self) -> None:
        assert md_text("ping @octocat and @acme/security now") == \
            "ping `@octocat` and `@acme/security` now"
        assert md_text("see https://evil.example/x?a=1 or www.evil.example") == \
            "see `https://evil.example/x?a=1` or `www.evil.example`"
        assert md_text("mail admin@evil.example today") == "mail `admin@evil.example` today"

    def test_what_is_not_a_mention_or_a_link_is_left_as_text(self) -> None:
        assert md_text("x@y and a@b and 1@2") == "x@y and a@b and 1@2"
        assert md_text("`@in_code`") == "`@in_code`"  # a code span is inert already

    def test_a_link_in_a_table_cell_keeps_the_cell_whole(self) -> None:
        assert md_text("a https://x.example/p|q b", cell=True) == \
            "a `https://x.example/p`\\|q b"

    def test_invisible_characters_are_shown_escaped_in_text_and_code(self) -> None:
        assert md_text("a\u202eb\u200bc") == "a\\\\u202eb\\\\u200bc"  # reads \u202e
        assert md_code("a\u202eb") == "`a\\u202eb`"


class TestEveryOutput:
    def test_report_markdown_html_json_and_terminal(self, log: Path, tmp_path: Path) -> None:
        md, page, doc = tmp_path / "r.md", tmp_path / "r.html", tmp_path / "r.json"
        result = runner.invoke(app, ["report", str(log), "--md", str(md), "--html", str(page),
                                     "--json-file", str(doc)])
        assert result.exit_code in (0, 3), result.output
        for name, text in (("md", md.read_text()), ("html", page.read_text()),
                           ("json", doc.read_text()), ("terminal", result.stdout)):
            assert _raw_invisible(text) == [], name
        text = md.read_text()
        assert "\\\\u202e" in text or "\\u202e" in text  # the tool name, shown
        # no mention, URL or address outside a code span
        plain = re.sub(r"`[^`]*`", "", text)
        for live in ("@octocat", "@acme", "https://", "www.evil", "admin@"):
            assert live not in plain, live
        assert "`@octocat` `https://evil.example/t`" in text
        # JSON: the same strings once parsed, written as escapes
        assert "\\u202e" in doc.read_text()
        assert TOOL in json.dumps(json.loads(doc.read_text()), ensure_ascii=False)

    def test_json_on_stdout_carries_escapes_not_raw_characters(self, log: Path) -> None:
        result = runner.invoke(app, ["segments", str(log), "--json"])
        assert result.exit_code == 0, result.output
        assert _raw_invisible(result.stdout) == []
        assert TOOL in json.dumps(json.loads(result.stdout), ensure_ascii=False)

    @pytest.mark.parametrize("command", ["segments", "calls"])
    def test_terminal_views_show_them_escaped(self, log: Path, command: str) -> None:
        result = runner.invoke(app, [command, str(log)])
        assert result.exit_code == 0, result.output
        assert _raw_invisible(result.stdout) == []

    def test_render_shows_a_segment_path_escaped(self, log: Path, tmp_path: Path) -> None:
        store = tmp_path / "s.duckdb"
        assert runner.invoke(app, ["ingest", str(log), "--store", str(store)]).exit_code == 0
        result = runner.invoke(app, ["render", "chatcmpl-hostile-5", "--store", str(store)])
        assert result.exit_code == 0, result.output
        assert _raw_invisible(result.stdout) == []
        assert "run\\u202ehs.exe" in result.stdout
        assert 'properties["pa\\u2066th\\u200b"]' in result.stdout  # the segments table


@pytest.mark.parametrize("unit", ["a.", "@a", "a@", "a@b.", "http://", "www.", "`", "`a``b",
                                  "a\u202e", "_a"])
def test_markdown_escaping_runs_in_linear_time(unit: str) -> None:
    from test_linear_time import BOUND, growth

    assert growth(md_text, unit) < BOUND
