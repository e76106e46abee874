"""`breakpoint_ends` (the token end of each block an Anthropic body's ``cache_control``
marks set a breakpoint on, diff's `PairDiff.breakpoints_a`, read by the ledger) reads the
marks off the body once instead of walking the body per block: the same ends as the
block walk simulate keeps (`_anthropic_blocks`, the oracle), on bodies Hypothesis draws
with marks anywhere (tools, a system string or blocks, a message, a content block, the
top-level automatic mark, a body key named ``template``), through the proxy view and
new-api's conversion."""

from __future__ import annotations

from typing import Any

from _render_helpers import make_request
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.analyses.breakpoints import breakpoint_ends
from prefixscope.analyses.simulate.prepare import _anthropic_blocks
from prefixscope.prompt import RenderOptions
from prefixscope.tokens import tokens

CC = {"type": "ephemeral"}
WORDS = st.text(alphabet="abc xyz\n{}\":", min_size=0, max_size=24)


def _oracle(tok: Any, body: dict[str, Any]) -> tuple[int, ...]:
    blocks, breakpoints = _anthropic_blocks(tok, body)
    return tuple(sorted({blocks[i][1] for i, _ in breakpoints}))


def _marked(draw: st.DrawFn, node: dict[str, Any]) -> dict[str, Any]:
    mark = draw(st.sampled_from([None, CC, {"type": "ephemeral", "ttl": "1h"}, "not a dict"]))
    return node if mark is None else {**node, "cache_control": mark}


@st.composite
def bodies(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "claude-sonnet-4-5", "max_tokens": 10}
    if draw(st.booleans()):
        body["system"] = (draw(WORDS) if draw(st.booleans()) else
                          [_marked(draw, {"type": "text", "text": draw(WORDS)})
                           for _ in range(draw(st.integers(1, 3)))])
    if draw(st.booleans()):
        body["tools"] = [_marked(draw, {"name": f"t{i}", "description": draw(WORDS),
                                        "input_schema": {"type": "object", "properties": {
                                            "p": {"type": "string"}}}})
                         for i in range(draw(st.integers(1, 3)))]
    messages = []
    for i in range(draw(st.integers(1, 5))):
        role = "user" if i % 2 == 0 else "assistant"
        content: Any = (draw(WORDS) if draw(st.booleans()) else
                        [_marked(draw, {"type": "text", "text": draw(WORDS) or "x"})
                         for _ in range(draw(st.integers(1, 3)))])
        messages.append(_marked(draw, {"role": role, "content": content}))
    body["messages"] = messages
    if draw(st.booleans()):
        body["cache_control"] = CC
    if draw(st.booleans()):
        body["template"] = {"cache_control": CC}  # a key the block named "template" reads
    return body


@settings(max_examples=80, deadline=None)
@given(body=bodies(), gateway=st.sampled_from(["passthrough", "anthropic-to-openai"]))
def test_the_breakpoint_ends_are_the_block_walks(body: dict[str, Any], gateway: str) -> None:
    tok = tokens(make_request(body, endpoint="anthropic-messages"),
                 RenderOptions(gateway=gateway))
    assert breakpoint_ends(tok, body) == _oracle(tok, body)


def test_a_body_without_marks_has_no_breakpoint_and_a_marked_system_block_its_end() -> None:
    body = {"model": "claude-sonnet-4-5", "max_tokens": 10,
            "system": [{"type": "text", "text": "be brief"},
                       {"type": "text", "text": "and kind", "cache_control": CC}],
            "messages": [{"role": "user", "content": "hello there"}]}
    tok = tokens(make_request(body, endpoint="anthropic-messages"), RenderOptions())
    (end,) = breakpoint_ends(tok, body)
    # the block of system[1] ends where the first token of the next block starts
    after = next(i for i in range(len(tok)) if not tok.segment(i).path.startswith("system")
                 and tok.segment(i).path != "template" and i > 0)
    assert end == after
    unmarked = {**body, "system": [{"type": "text", "text": "be brief"},
                                   {"type": "text", "text": "and kind"}]}
    assert breakpoint_ends(tokens(make_request(unmarked, endpoint="anthropic-messages"),
                                  RenderOptions()), unmarked) == ()


@settings(max_examples=400)
@given(keys=st.lists(st.sampled_from([None, "system", "system[0]", "tools[1]", "messages[2]",
                                      "messages[2].content[0]"]), max_size=40),
       marked=st.sets(st.sampled_from(["template", "system", "system[0]", "tools[1]",
                                       "messages[2]", "messages[2].content[0]", "tools[9]"])))
def test_each_marked_run_ends_where_a_walk_of_every_segment_ends_it(keys, marked) -> None:
    """`_run_lasts` on block keys Hypothesis lists (glue first or not, a block's segments
    apart and again after another block's, the ``template`` block marked): the last
    segment of each run of a marked block, as the blocks laid out segment by segment
    give them (each glue segment the block before it's, or ``template``'s; consecutive
    segments of one block one run)."""
    from itertools import groupby

    from prefixscope.analyses.breakpoints import _run_lasts

    owner, owners = "template", []
    for key in keys:
        owner = key or owner
        owners.append(owner)
    want, at = [], 0
    for block, run in groupby(owners):
        at += len(list(run))
        if block in marked:
            want.append(at - 1)
    assert sorted(_run_lasts(keys, marked)) == want
