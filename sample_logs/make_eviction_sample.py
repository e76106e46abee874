"""Write sample_logs/vllm-agents-eviction.jsonl.gz: concurrent agent sessions evicting each
other's prefixes on a vLLM server whose prefix cache is too small.

Four agent sessions share a system prompt and take turns on one Qwen3.6 server with
16-token blocks and room for only 60 blocks (960 tokens) of prefix cache: each session's
own history is evicted by the others' before its next turn, so every turn caches just the
shared system prompt. The usage comes from tests/gen_vllm_log.py -- transformers' own
template renderer, the model's own tokenizer and a deliberately simple block LRU; it never
imports prefixscope -- and the file is gzip'd deterministically (no name, no time stamp),
which is also how `prefixscope ingest` meets compressed logs.

    python sample_logs/make_eviction_sample.py            # rewrites the file here
    python sample_logs/make_eviction_sample.py /tmp/out   # or elsewhere
"""

from __future__ import annotations

import gzip
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from gen_vllm_log import generate  # noqa: E402 - the oracle lives with the tests

NAME = "vllm-agents-eviction.jsonl.gz"
BLOCK_SIZE = 16
CAPACITY_BLOCKS = 60
SESSIONS = 4
TURNS = 6


def build(out_dir: Path = HERE) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "log.jsonl"
        generate(plain, block_size=BLOCK_SIZE, capacity_blocks=CAPACITY_BLOCKS,
                 sessions=SESSIONS, turns=TURNS)
        data = plain.read_bytes()
    target = out_dir / NAME
    with target.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw,
                                                 mtime=0, compresslevel=9) as out:
        out.write(data)
    return target


if __name__ == "__main__":
    print(build(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE))
