"""What-if replays render only the requests a transform may change (issue 20, item 2):
`prompt.render.what_if_changes` says False only where the transform provably leaves the
prompt as it is, and `prepare_what_if` (the what-if replay's input, the base's tokens kept
for the others) equals `prepare` rendering every request under the transform."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import REAL, ROOT

from prefixscope.analyses.simulate import SimulateOptions, prepare
from prefixscope.analyses.simulate.prepare import prepare_what_if
from prefixscope.prompt import RenderError, RenderOptions, render
from prefixscope.prompt.render import what_if_changes
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths

pytestmark = pytest.mark.real

SOURCES = {"samples": [str(ROOT / "sample_logs" / "langfuse-claude-code.events_full.jsonl"),
                       str(ROOT / "sample_logs" / "bifrost-mcp-keyorder.jsonl")],
           "real": [str(REAL)]}
TRANSFORMS = ("strip-billing-header", "no-hoist", "sort-json-keys")


@pytest.fixture(scope="module", params=sorted(SOURCES))
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Store:
    path = tmp_path_factory.mktemp("whatif") / "s.duckdb"
    st = Store.open(path)
    ingest_paths(SOURCES[request.param], st)
    return st


def _prompt(request: Any, options: RenderOptions) -> tuple[Any, ...] | str:
    try:
        p = render(request, options)
    except RenderError as exc:
        return str(exc)
    return p.text, p.segments, p.approximate, p.attribution, p.notes


def test_a_request_said_unchanged_renders_to_the_same_prompt(store: Store) -> None:
    base = RenderOptions()
    kept = 0
    for request in store.iter_requests():
        if request.body is None:
            continue
        before = _prompt(request, base)
        for transform in TRANSFORMS:
            if not what_if_changes(request, base, (transform,)):
                kept += 1
                assert _prompt(request, RenderOptions(what_if=(transform,))) == before, \
                    (request.id, transform)
    assert kept  # the proof is used on these logs


def test_the_billing_header_and_a_hoisting_gateway_are_changes() -> None:
    from factories import anthropic_body, conversation, make_request

    headed = make_request("r2", body=anthropic_body(conversation(2)))  # factories' header
    plain = make_request("r1", body={**anthropic_body(conversation(2)), "system": [
        {"type": "text", "text": "You are Claude Code."}]})
    assert not what_if_changes(plain, RenderOptions(), ("strip-billing-header",))
    assert not what_if_changes(plain, RenderOptions(), ("no-hoist",))
    assert what_if_changes(headed, RenderOptions(), ("strip-billing-header",))
    assert what_if_changes(plain, RenderOptions(), ("sort-json-keys",))  # never proven
    assert what_if_changes(plain, RenderOptions(), ("drop:Claude",))
    chat = make_request("r3", endpoint="openai-chat", body={"messages": [
        {"role": "user", "content": "hi"}, {"role": "system", "content": "late"}]})
    assert not what_if_changes(chat, RenderOptions(), ("no-hoist",))
    assert what_if_changes(chat, RenderOptions(gateway="hoist-system-messages"), ("no-hoist",))


def _same(a: list[Any], b: list[Any]) -> None:
    assert [p.id for p in a] == [p.id for p in b]
    for x, y in zip(a, b, strict=True):
        for name in x.__dataclass_fields__:
            u, v = getattr(x, name), getattr(y, name)
            if isinstance(u, np.ndarray) or isinstance(v, np.ndarray):
                assert u is not None and v is not None and np.array_equal(u, v), (x.id, name)
            else:
                assert u == v, (x.id, name)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["vllm", "anthropic"])
@pytest.mark.parametrize("transform", TRANSFORMS)
def test_the_what_if_input_is_prepares_with_every_request_rendered(
        store: Store, engine: str, transform: str) -> None:
    options = SimulateOptions(engine=engine)
    base, _ = prepare(store, options)
    changed = SimulateOptions(engine=engine, render=RenderOptions(what_if=(transform,)))
    _same(prepare_what_if(store, changed, base, (transform,)), prepare(store, changed)[0])
