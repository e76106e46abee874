"""The ledger's X on hosted Anthropic requests with bodies: a read is served only from an
entry an earlier request wrote at a ``cache_control`` breakpoint (cache-semantics.md A.4),
so the tokens between the predecessor's last breakpoint before the first divergent token
D and D are the change's loss, not the provider's (docs/accuracy.md, miss 1).

Two raw Anthropic captures, one session: A marks its first tool, its system prompt and its
message; B adds an MCP tool after A's second tool (after the first tool's breakpoint) and
reads nothing. The oracle is the tokenizer library over transformers' own render
(`_render_helpers.reference_text`): D, the token end of the marked tool, the lengths."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from _render_helpers import make_request, reference_text
from typer.testing import CliRunner

from prefixscope.cli.main import app
from prefixscope.prompt import RenderOptions
from prefixscope.tokenizers import load_tokenizer

MODEL = "claude-sonnet-4-5"
CC = {"type": "ephemeral"}


def _words(n: int, word: str) -> str:
    return (word + " ") * n


def _tool(name: str, n: int, word: str, mark: bool = False) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": name, "description": _words(n, word),
                            "input_schema": {"type": "object",
                                             "properties": {"path": {"type": "string"}}}}
    if mark:
        tool["cache_control"] = CC
    return tool


def _bodies() -> tuple[dict[str, Any], dict[str, Any]]:
    a = {"model": MODEL, "max_tokens": 100,
         "system": [{"type": "text", "text": _words(600, "alpha"), "cache_control": CC}],
         "tools": [_tool("Read", 1500, "gamma", mark=True), _tool("Edit", 400, "delta")],
         "messages": [{"role": "user", "content": [
             {"type": "text", "text": _words(300, "beta"), "cache_control": CC}]}]}
    b = json.loads(json.dumps(a))
    b["tools"].append(_tool("mcp__search", 300, "omega"))  # after the marked tool
    b["messages"][0]["content"][0].pop("cache_control")
    b["messages"] += [{"role": "assistant", "content": "ok ok"},
                      {"role": "user", "content": [
                          {"type": "text", "text": _words(50, "zeta"), "cache_control": CC}]}]
    return a, b


def _oracle(a: dict[str, Any], b: dict[str, Any]) -> tuple[int, int, int, int]:
    """(len A, len B, D, the token end of A's marked tool) by the tokenizer library."""
    options = RenderOptions()
    tok = load_tokenizer(options.tokenizer)
    text_a = reference_text(make_request(a, model=MODEL), options)
    text_b = reference_text(make_request(b, model=MODEL), options)
    ids_a, ids_b = tok.encode(text_a).ids.tolist(), tok.encode(text_b).ids.tolist()
    d = next(i for i, (x, y) in enumerate(zip(ids_a, ids_b, strict=False)) if x != y)
    # the marked tool's block runs to where the next tool's JSON starts (the template's
    # newline between them joins the block before it)
    marked_end = len(tok.encode(text_a[:text_a.index('{"name": "Edit"')]).ids)
    return len(ids_a), len(ids_b), d, marked_end


def _capture(n: int, body: dict[str, Any], at: str, read: int, write: int,
             prompt: int) -> str:
    return json.dumps({
        "request": body, "endpoint": "/v1/messages", "timestamp": at,
        "headers": {"x-session-id": "conv-1"},
        "response": {"id": f"msg_{n}", "model": MODEL,
                     "usage": {"input_tokens": prompt - read - write,
                               "cache_read_input_tokens": read,
                               "cache_creation_input_tokens": write, "output_tokens": 2}}})


def test_a_tool_added_after_the_breakpoint_is_the_breaks_from_that_breakpoint(
        tmp_path: Path) -> None:
    a, b = _bodies()
    len_a, len_b, d, marked_end = _oracle(a, b)
    # the hand facts the expectation rests on: the added tool diverges after the marked
    # tool's end, within A's prompt, and the marked prefix is above Sonnet's 1,024 minimum
    assert 1_024 <= marked_end < d < len_a < len_b
    log = tmp_path / "captures.jsonl"
    log.write_text("\n".join([
        # A: cold, writes every breakpoint (its prompt less the 2 tokens after the last)
        _capture(0, a, "2026-08-01T12:00:00Z", 0, len_a - 2, len_a),
        # B, a minute later (within the 5-minute TTL): the provider served nothing
        _capture(1, b, "2026-08-01T12:01:00Z", 0, len_b - 2, len_b)]) + "\n")
    result = CliRunner().invoke(app, ["calls", str(log), "--json"])
    assert result.exit_code == 0, result.output
    calls = [c for s in json.loads(result.stdout)["sessions"] for c in s["calls"]]
    assert [c["prompt_tokens"] for c in calls] == [len_a, len_b]
    second = calls[1]
    # [0, the marked tool's end): an entry A wrote, live, not read -- the provider's;
    # [that end, D) and [D, len A): the added tool's break (not [0, D) provider, as when X
    # was D); [len A, len B): new
    assert second["causes"] == {"provider": marked_end, "break": len_a - marked_end,
                                "new": len_b - len_a}
    assert (second["break_kind"], second["break_segment"]) == ("tool-set-change", "tools")
    assert sum(second["causes"].values()) == second["missed_tokens"] == len_b


def _date_bodies() -> tuple[dict[str, Any], dict[str, Any]]:
    """A (as `_bodies`, its system prompt holding a date) and B: the date changed, one
    more turn. D is in the system prompt, after the marked tool and the unmarked one."""
    a, _ = _bodies()
    day = "Today's date is 2026-08-0{}. "
    a["system"][0]["text"] = _words(300, "alpha") + day.format(1) + _words(300, "alpha")
    b = json.loads(json.dumps(a))
    b["system"][0]["text"] = _words(300, "alpha") + day.format(2) + _words(300, "alpha")
    b["messages"][0]["content"][0].pop("cache_control")
    b["messages"] += [{"role": "assistant", "content": "ok ok"},
                      {"role": "user", "content": [
                          {"type": "text", "text": _words(50, "zeta"), "cache_control": CC}]}]
    return a, b


def test_a_read_nearest_the_last_breakpoint_is_that_entry_in_the_logs_count(
        tmp_path: Path) -> None:
    """The provider counts 300 tokens fewer than prefixscope's tokenizer, all in the marked
    tool (its own tokenizer): its read after the date change is the marked tool's entry,
    at marked_end - 300 in its count. Scaled by the prompts' lengths the marked end lands
    about 145 tokens past that read, which was booked provider; an Anthropic read ends
    only where a request wrote a breakpoint, and this read is nearer the predecessor's
    last breakpoint before D than the prompt's start (no other breakpoint lies before D),
    so it is that entry: X = the read, and everything from it to A's end is the date's
    break (docs/accuracy.md, the residue of miss 1)."""
    a, b = _date_bodies()
    len_a, len_b, d, marked_end = _oracle(a, b)
    log_a, log_b, read = len_a - 300, len_b - 300, marked_end - 300
    assert 1_024 <= read < marked_end < d < len_a < len_b
    # by the lengths, the marked end maps at least 64 tokens (Anthropic's unit) past the read
    assert round(marked_end * log_b / len_b) - read >= 64
    log = tmp_path / "captures.jsonl"
    log.write_text("\n".join([
        _capture(0, a, "2026-08-01T12:00:00Z", 0, log_a - 2, log_a),
        _capture(1, b, "2026-08-01T12:01:00Z", read, log_b - 2 - read, log_b)]) + "\n")
    result = CliRunner().invoke(app, ["calls", str(log), "--json"])
    assert result.exit_code == 0, result.output
    second = [c for s in json.loads(result.stdout)["sessions"] for c in s["calls"]][1]
    assert second["causes"] == {"break": log_a - read, "new": log_b - log_a}
    assert (second["break_kind"], second["break_segment"]) == (
        "volatile-prefix-segment", "system[0]")


def test_the_breakpoints_survive_the_distributed_stages_table() -> None:
    import pyarrow as pa

    from prefixscope.analyses.diff import PairDiff
    from prefixscope.distributed.stage import RESULT_SCHEMA, _pair_diff, _pair_row

    pair = PairDiff("a", "b", "s", 10, 12, None, 1, 10, 0, "append-only", "", False, "flag",
                    3, (4, 9))
    row = pa.Table.from_pylist([_pair_row(0, pair)], schema=RESULT_SCHEMA).to_pylist()[0]
    assert _pair_diff(row) == pair
    assert _pair_diff(row | {"breakpoints_a": None}).breakpoints_a == ()
