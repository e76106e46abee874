"""The HTML report in a real browser (headless Chromium driven by Playwright): it renders
with its plots, a `<script>` planted in a logged prompt does not run, and the page makes
no network request.

Chromium is Debian's package (`.ci/run` installs it); Playwright drives it through
``executable_path``, so nothing is downloaded. Where no Chromium can be found the test
is skipped, saying so.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import ROOT
from report_scenarios import PLANTED, planted_log
from typer.testing import CliRunner

from prefixscope.cli.main import app

CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"),
                             "/usr/bin/chromium") if p and Path(p).exists()), None)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium on this machine (Debian: apt-get install chromium; "
                             ".ci/run installs it)")
pytestmark = [pytestmark, pytest.mark.slow]  # slow: the HTML report in Chromium


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
