"""report's walk leaves the texts around each pair's split unmade (`gather(windows=False)`),
and `findings.build.shown_windows` makes those of the pairs the report shows from the two
requests' whole renders: the texts `diff_pairs` makes, each pair rendered and tokenized
whole (the oracle), and a report's views the same as with every window made."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import prefixscope as ps
from prefixscope.analyses.diff import DEFAULT_CONTEXT, diff_requests, windowed
from prefixscope.findings.evidence import gather
from prefixscope.findings.values import ReportOptions
from prefixscope.prompt import render
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
REAL = HERE / "data" / "real"
LOGS = {"sample": [HERE.parent / "sample_logs"],
        "real": [REAL / d for d in ("swe-agent", "aider", "langfuse", "mini-swe-agent")]}


@pytest.fixture(scope="module", params=sorted(LOGS))
def store_path(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
               ) -> Path:
    path = tmp_path_factory.mktemp("windows") / f"{request.param}.duckdb"
    with Store.open(path) as store:
        assert ingest_paths([str(p) for p in LOGS[request.param]], store).ingested > 0
    return path


def test_a_divergence_windowed_from_the_two_renders_is_the_one_diff_pairs_makes(
        store_path: Path):
    options = ReportOptions()
    with Store.open(store_path, read_only=True) as store:
        ev = gather(store, options, workers=1, windows=False)
        assert ev.diff is not None
        diverged = [p for p in ev.diff.pairs if p.first_divergence is not None]
        assert diverged
        loaded = store.get_many(rid for p in diverged for rid in (p.a, p.b))
        for p in diverged:
            assert p.first_divergence is not None
            assert p.first_divergence.text_a is None and p.first_divergence.text_b is None
            a, b = loaded[p.a], loaded[p.b]
            whole = diff_requests(a, b, options.render, block_size=p.block_size)
            made = windowed(p.first_divergence, render(a, options.render).text,
                            render(b, options.render).text, DEFAULT_CONTEXT)
            assert made == whole.first_divergence


def test_the_walks_workers_leave_the_texts_unmade_too(store_path: Path):
    options = ReportOptions()
    with Store.open(store_path, read_only=True) as store:
        one = gather(store, options, workers=1, windows=False)
        two = gather(store, options, workers=2, windows=False)
    assert one.diff is not None and two.diff is not None
    assert one.diff.pairs == two.diff.pairs
    assert all(p.first_divergence.text_a is None for p in two.diff.pairs
               if p.first_divergence is not None)


def test_the_report_makes_the_texts_of_each_findings_first_example_pair_alone(
        store_path: Path):
    report = ps.report(store_path, workers=1)
    with Store.open(store_path, read_only=True) as store:
        every = gather(store, ReportOptions(), workers=1)
    assert report.evidence is not None and report.evidence.diff is not None
    assert every.diff is not None
    shown = {tuple(f.evidence["example_pairs"][0]) for f in report.findings
             if f.evidence.get("example_pairs")}
    made = set()
    for p, q in zip(report.evidence.diff.pairs, every.diff.pairs, strict=True):
        fd, whole = p.first_divergence, q.first_divergence
        if fd is not None and fd.text_a is not None:
            made.add((p.a, p.b))
            assert p == q
        elif whole is not None:
            assert p == replace(q, first_divergence=replace(whole, text_a=None, text_b=None))
        else:
            assert p == q
    assert made == {pair for pair in shown
                    if next(p for p in every.diff.pairs if (p.a, p.b) == pair)
                    .first_divergence is not None}
    assert made


def test_a_report_reads_the_same_with_every_window_made(store_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch):
    import prefixscope.findings.evidence as evidence

    lazy = ps.report(store_path, workers=1)
    eager_gather = evidence.gather

    def every_window(*args: object, **kwargs: object) -> object:
        kwargs["windows"] = True
        return eager_gather(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(evidence, "gather", every_window)
    eager = ps.report(store_path, workers=1)
    assert eager.evidence is not None and eager.evidence.diff is not None
    assert all(p.first_divergence.text_a is not None for p in eager.evidence.diff.pairs
               if p.first_divergence is not None)
    assert lazy.to_markdown() == eager.to_markdown()
    assert lazy.to_html() == eager.to_html()
    assert lazy.to_dict() == eager.to_dict()
