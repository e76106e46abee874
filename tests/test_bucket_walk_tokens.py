"""bucket's spike explainer takes the tokens report's walk made of its samples instead of
rendering them again (`bucket_store(rendered=...)`, `spike_samples`, `PassSetup.keep`):
the walk's tokens of a request are its whole render's, so the bucket report is the one
rendered afresh. The oracle is the explainer rendering every sample itself."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from conftest import ROOT

import prefixscope.analyses.bucket as bucket_module
from prefixscope.analyses.bucket import bucket_store, spike_samples
from prefixscope.analyses.onepass import one_pass, tokens_bytes
from prefixscope.findings.domains import plan_domains
from prefixscope.findings.evidence import ReportOptions, _pass_setup, gather
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths
from prefixscope.tokens import tokens

BY = ("source",)


@pytest.fixture(scope="module")
def walked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """sample_logs/' store (spikes in two of its sources), the ids its explainer renders
    (recorded), and the walk's tokens of `spike_samples`."""
    store = Store.open(tmp_path_factory.mktemp("bucketwalk") / "s.duckdb")
    ingest_paths([str(ROOT / "sample_logs")], store)
    asked: list[str] = []
    render = bucket_module._Explainer._make

    def spy(self: Any, rows: Any) -> Any:
        asked.extend(r.id for r in rows)
        return render(self, rows)

    bucket_module._Explainer._make = spy  # type: ignore[method-assign]
    try:
        fresh = bucket_store(store, BY)
    finally:
        bucket_module._Explainer._make = render  # type: ignore[method-assign]
    options = ReportOptions()
    setup = _pass_setup(store, options, plan_domains(store, options,
                                                     tuple(store.usage_records()), None)[0])
    samples = spike_samples(store, BY)
    passed = one_pass(store, replace(setup, keep=frozenset(samples)))
    return {"store": store, "fresh": fresh, "asked": asked, "samples": samples,
            "kept": passed.kept, "setup": replace(setup, keep=frozenset(samples))}


def test_spike_samples_are_the_requests_the_explainer_renders(walked: dict[str, Any]) -> None:
    assert len(walked["asked"]) == 58  # both spiking sources' samples
    assert walked["samples"] == walked["asked"]


def test_the_walk_keeps_every_sample_as_its_whole_render(walked: dict[str, Any]) -> None:
    store, kept = walked["store"], walked["kept"]
    assert set(kept) == set(walked["samples"])
    for rid, tok in kept.items():
        whole = tokens(store.get(rid))
        assert np.array_equal(tok.ids, whole.ids), rid
        assert tok.prompt.text == whole.prompt.text, rid
        assert tok.prompt.segments == whole.prompt.segments, rid
        assert tok.segment_token_spans() == whole.segment_token_spans(), rid
        assert tok.prompt.approximate == whole.prompt.approximate, rid


@pytest.mark.parametrize("share", ["all", "every other", "none"])
def test_the_bucket_report_is_the_one_rendered_afresh(walked: dict[str, Any], share: str
                                                      ) -> None:
    kept = walked["kept"]
    given = {"all": kept, "every other": {rid: kept[rid] for rid in list(kept)[::2]},
             "none": {}}[share]
    report = bucket_store(walked["store"], BY, rendered=given)
    assert report == walked["fresh"]
    assert any(s.boundary is not None for g in report.groups for s in g.spikes)


def test_report_explains_its_spikes_as_bucket_does(walked: dict[str, Any]) -> None:
    """report's walk in this process hands its tokens to the explainer (with workers the
    explainer renders them, as `bucket` does)."""
    assert gather(walked["store"], ReportOptions(), workers=1).bucket == walked["fresh"]


def test_the_walk_keeps_tokens_up_to_its_byte_budget(walked: dict[str, Any]) -> None:
    """`PassSetup.keep_hold`: what does not fit is left to the explainer to render."""
    store, setup, kept = walked["store"], walked["setup"], walked["kept"]
    assert one_pass(store, replace(setup, keep_hold=0)).kept == {}
    hold = sum(tokens_bytes(t) for t in kept.values()) - 1
    some = one_pass(store, replace(setup, keep_hold=hold)).kept
    assert some and set(some) < set(kept)
    assert sum(tokens_bytes(t) for t in some.values()) <= hold
    assert bucket_store(store, BY, rendered=some) == walked["fresh"]
