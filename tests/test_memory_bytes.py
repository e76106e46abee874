"""Memory bounded by bytes (issue 39): a line of many tiny content blocks costs a small
multiple of its bytes, measured by tracemalloc's peak over the ingest (never a timer).

Before: 10^6 one-letter blocks in a 55 MB line took 1.5 GB to ingest, and a 165 MB line
ran out of 8 GB: the parsed record was held three times (detection parsed the first
line twice and kept both for the whole file, the parser a third) and every prefix hash
copied the prompt whole (`strip_cache_control`), as every segment hash did
(`fold_whitespace`). docs/scale.md states the multiple held here.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import orjson

from prefixscope.ingest.probing import probe
from prefixscope.ingest.readers.json import SAMPLE_ITEMS
from prefixscope.ingest.source import Source
from prefixscope.model.hashing import fold_whitespace, strip_cache_control
from prefixscope.store import Store
from prefixscope.store.load import ingest_paths

BLOCKS = 100_000
# tracemalloc's peak over the ingest of one such line, over the line's bytes: 47 before
# the fix, 25-26 after (docs/scale.md). A Python dict per one-letter block is ~11x its
# 27 bytes of JSON: the parsed record is about half of what is left.
MULTIPLE = 30


def blocks_log(path: Path, blocks: int = BLOCKS) -> int:
    """A raw log: one body of `blocks` one-letter text blocks, then a small body."""
    body = {"model": "claude-sonnet-4-5", "max_tokens": 256, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "a"}] * blocks}]}
    small = {"model": "claude-sonnet-4-5", "max_tokens": 256,
             "messages": [{"role": "user", "content": "hi"}]}
    path.write_bytes(orjson.dumps(body) + b"\n" + orjson.dumps(small) + b"\n")
    return path.stat().st_size


def test_ingesting_a_line_of_many_tiny_blocks_costs_a_small_multiple_of_its_bytes() -> None:
    blocks_log(Path("warm.jsonl"), 10)
    with Store.open(Path("warm.duckdb")) as store:  # the lazy imports, outside the count
        ingest_paths(["warm.jsonl"], store)
    size = blocks_log(Path("blocks.jsonl"))
    assert size // BLOCKS == 27  # {"type":"text","text":"a"}, and 179 bytes more
    tracemalloc.start()
    try:
        with Store.open(Path("s.duckdb")) as store:
            result = ingest_paths(["blocks.jsonl"], store)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (result.ingested, result.skipped) == (2, 0)
    assert peak / size < MULTIPLE, f"{peak / size:.1f}x the line's bytes"


def test_detection_keeps_a_sample_of_a_long_line_and_the_whole_of_a_short_one() -> None:
    blocks_log(Path("blocks.jsonl"))
    found = probe(Source.from_path(Path("blocks.jsonl")))
    content = found.first["messages"][0]["content"]
    assert len(content) == SAMPLE_ITEMS and content[0] == {"type": "text", "text": "a"}
    assert [len(r["messages"][0]["content"]) for r in found.records] == [SAMPLE_ITEMS, 2]
    blocks_log(Path("short.jsonl"), 1_000)
    found = probe(Source.from_path(Path("short.jsonl")))
    assert len(found.first["messages"][0]["content"]) == 1_000


def test_hashing_helpers_share_what_they_do_not_change() -> None:
    blocks = [{"type": "text", "text": "a"}] * 1_000
    body = {"system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": blocks}]}
    stripped = strip_cache_control(body)
    assert stripped == {"system": [{"type": "text", "text": "s"}],
                        "messages": [{"role": "user", "content": blocks}]}
    assert stripped["messages"] is body["messages"]  # shared, not copied
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}  # input untouched
    assert fold_whitespace(body) is body
    folded = fold_whitespace({"a": [" x  y ", "z"], "b": "c"})
    assert folded == {"a": ["x y", "z"], "b": "c"}
