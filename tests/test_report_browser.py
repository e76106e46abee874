"""The HTML report in a real browser (headless Chromium driven by Playwright): it renders
with its plots, a `<script>` planted in a logged prompt does not run, and the page makes
no network request; at desktop and phone widths every part is visible and nothing
overflows the page (wide tables scroll inside their own box), the findings come in the
report's one order (the causes severe first, then the lenses, then what costs nothing),
and the evidence reads as a table of rounded numbers.

Chromium is Debian's package (`.ci/run` installs it); Playwright drives it through
``executable_path``, so nothing is downloaded. Where no Chromium can be found the tests
fail, saying how to install it (`bash scripts/test`, the README's command, does).
"""

from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path

import pytest
from conftest import ROOT
from report_scenarios import PLANTED, planted_log
from typer.testing import CliRunner

from prefixscope.cli.main import app

CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"),
                             "/usr/bin/chromium") if p and Path(p).exists()), None)
pytestmark = pytest.mark.slow  # slow: the HTML report in Chromium


@pytest.fixture(autouse=True)
def _chromium() -> None:
    """A missing browser fails these tests, saying how to get it: a skip would let the
    README's command report a green run that never opened the page."""
    if CHROMIUM is None:
        pytest.fail("no Chromium on this machine: `bash scripts/test` installs Debian's "
                    "package (or: apt-get install chromium)", pytrace=False)


def test_the_report_renders_its_plots_runs_no_planted_script_and_stays_offline(
        tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    page_file = tmp_path / "report.html"
    # the bundled sample (every plot has data) and a session carrying planted markup
    result = CliRunner().invoke(app, ["report", str(ROOT / "sample_logs"),
                                      str(planted_log(tmp_path)), "--html", str(page_file)])
    assert result.exit_code == 0, result.stderr
    requests: list[str] = []
    dialogs: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.on("request", lambda r: requests.append(r.url))
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(page_file.as_uri(), wait_until="load")
            images = page.eval_on_selector_all(
                "img", "els => els.map(e => [e.complete, e.naturalWidth, e.naturalHeight])")
            pwned = page.evaluate("() => window.pwned === undefined ? null : window.pwned")
            text = page.inner_text("body")
            findings = page.locator("section.finding").count()
        finally:
            browser.close()
    assert len(images) >= 5 and all(done and w > 100 and h > 100 for done, w, h in images)
    assert pwned is None and dialogs == []
    assert requests == [page_file.as_uri()]  # the data: images make no request
    assert PLANTED.split("<img")[0] in text  # the planted script is shown as text
    assert findings >= 1


# Desktop and phone (an iPhone 12-14 portrait viewport), CSS pixels.
VIEWPORTS = {"desktop": (1280, 900), "phone": (390, 844)}
SEVERITIES = ["high", "medium", "low", "info"]
LENSES = {"pinned-constant", "low-hit-rate-dimension"}  # findings that claim no token

# What sticks out of the viewport, ignoring what a scrolling box holds (it scrolls).
_OVERFLOW = """() => {
  const width = document.documentElement.clientWidth;
  const out = [];
  for (const el of document.body.querySelectorAll('*')) {
    if (el.closest('.scroll')) continue;
    const box = el.getBoundingClientRect();
    if (box.width && (box.right > width + 1 || box.left < -1))
      out.push(el.tagName + '.' + el.className + ' ' + Math.round(box.right));
  }
  return out;
}"""


def png_size(path: Path) -> tuple[int, int]:
    width, height = struct.unpack(">II", path.read_bytes()[16:24])
    return width, height


@pytest.fixture(scope="module")
def sample_page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The report of the bundled sample logs as HTML, and the same report as JSON."""
    folder = tmp_path_factory.mktemp("browser")
    page_file = folder / "report.html"
    result = CliRunner().invoke(app, ["report", str(ROOT / "sample_logs"), "--html",
                                      str(page_file), "--json"])
    assert result.exit_code == 0, result.stderr
    return page_file, json.loads(result.stdout)


@pytest.mark.parametrize("viewport", sorted(VIEWPORTS))
def test_every_part_is_visible_and_nothing_overflows(sample_page, viewport: str,
                                                     tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    page_file, _ = sample_page
    width, height = VIEWPORTS[viewport]
    shot = tmp_path / f"{viewport}.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto(page_file.as_uri(), wait_until="load")
            page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = 1)")
            visible = {sel: page.locator(sel).first.is_visible() for sel in (
                "h1", "h1 .badge.approx", "table.findings", "section.finding", ".bar",
                "table.evidence", "figure img", "figcaption")}
            scroll_width = page.evaluate("() => document.documentElement.scrollWidth")
            overflowing = page.evaluate(_OVERFLOW)
            images = page.eval_on_selector_all(
                "figure img", "els => els.map(e => e.getBoundingClientRect().right)")
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert visible == dict.fromkeys(visible, True)
    assert scroll_width == width
    assert overflowing == []
    assert len(images) >= 5 and max(images) <= width
    # a full-page screenshot is as wide as the viewport only when nothing sticks out
    assert png_size(shot)[0] == width and png_size(shot)[1] > height


def test_findings_come_causes_severe_first_then_lenses_with_rounded_evidence(
        sample_page) -> None:
    from playwright.sync_api import sync_playwright

    page_file, doc = sample_page
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(page_file.as_uri(), wait_until="load")
            shown = page.eval_on_selector_all(
                "section.finding .sev", "els => els.map(e => e.textContent.toLowerCase())")
            rows = page.eval_on_selector_all(
                "table.findings tr td:nth-child(2)", "els => els.map(e => e.textContent)")
            evidence = page.eval_on_selector_all("details > .scroll > table.evidence",
                                                 "els => els.map(e => e.textContent)")
            fixes = page.eval_on_selector_all("p.fix", "els => els.map(e => e.textContent)")
            titles = page.eval_on_selector_all("h3.group", "els => els.map(e => e.textContent)")
            table_titles = page.eval_on_selector_all(
                "table.findings tr.group", "els => els.map(e => e.textContent)")
        finally:
            browser.close()
    # the order is: the causes severe first, then the lenses (they claim no token and
    # follow every cause they show), then what costs nothing
    group = [2 if f["severity"] == "info" else 1 if f["kind"] in LENSES else 0
             for f in doc["findings"]]
    assert group == sorted(group) and 0 in group and 1 in group
    # the page lists the findings in the report's own order (the JSON's), a lens labelled
    # as one instead of a severity ranked among the causes
    assert shown == rows == [("lens" if g == 1 else f["severity"])
                             for f, g in zip(doc["findings"], group, strict=True)]
    # each group under its own title, in that order, in the table and in the sections
    assert titles == table_titles == [
        "what is costing cache — causes, severe first",
        "where the loss shows — lenses, no tokens of their own",
        "what costs nothing — for information"][:len(set(group))]
    causes = [SEVERITIES.index(f["severity"]) for f, g in zip(doc["findings"], group,
                                                               strict=True) if g == 0]
    assert causes == sorted(causes)
    assert len(evidence) == len(doc["findings"])
    # e.g. a share of requests 0.8709677419354839 is shown as 87.1%
    assert not any(re.search(r"\d\.\d{4,}", text) for text in evidence)
    assert any("87.1%" in text for text in evidence)
    for fix in fixes:
        sentences = [s for s in re.split(r"(?<=[.)])\s+", fix) if s]
        assert len(sentences) == len(set(sentences)), fix
        rates = re.findall(r"\d+\.\d%", fix)
        assert "expected hit rate after the fix" not in fix.lower() or len(rates) == len(
            set(rates)), fix
