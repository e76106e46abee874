"""Cache models for `simulate`: a registry of engines, one module each.

Each engine follows one real implementation's rules, cited in its module
docstring (sources in shared/reference/cache-semantics.md), behind the interface
of `base.Engine`. A new engine is one module plus one line in `ENGINES`.

Example::

    engine = get_engine("vllm", block_size=16, capacity_blocks=4096)
    for token_ids in prompts:
        hit = engine.step(engine.units(token_ids))
        print(hit.cached_tokens)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prefixscope.engines.anthropic import AnthropicEngine
from prefixscope.engines.base import Admission, Engine, Lookup, Units, block_keys
from prefixscope.engines.blocktrace import BlocktraceEngine
from prefixscope.engines.deepseek import DeepseekEngine
from prefixscope.engines.lmcache import LmcacheEngine
from prefixscope.engines.openai import OpenaiEngine
from prefixscope.engines.sglang import SglangEngine
from prefixscope.engines.vllm import VllmEngine, VllmUnlimitedEngine

ENGINES: dict[str, Callable[..., Engine]] = {
    "vllm": VllmEngine,  # vLLM 0.33 APC: 16-token chained blocks, physical block pool, LRU
    "sglang": SglangEngine,  # SGLang 0.5.10 RadixCache: token (page) radix tree, LRU leaves
    "lmcache": LmcacheEngine,  # LMCache 0.5.6 local CPU: 256-token chunks, LRU
    "blocktrace": BlocktraceEngine,  # Mooncake trace convention: 512-token ids, LRU
    "anthropic": AnthropicEngine,  # cache_control breakpoints, 20-block lookback, 5m/1h TTL
    "openai": OpenaiEngine,  # automatic from 1,024 tokens, 128-token steps, retention
    "deepseek": DeepseekEngine,  # persisted prefix units (input end, output end, common)
}

# The same engine's answers when its capacity is unlimited, kept in less memory (an
# unlimited replay holds every distinct block of the log); same constructor keywords
# less the capacity.
UNLIMITED: dict[str, Callable[..., Engine]] = {
    "vllm": VllmUnlimitedEngine,
}


def get_engine(name: str, **params: Any) -> Engine:
    """A new engine `name` built with `params` (each engine's keyword arguments).

    Raises:
        ValueError: `name` is not a registered engine.
    """
    try:
        factory = ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(ENGINES)}") from None
    return factory(**params)


__all__ = ["ENGINES", "UNLIMITED", "Admission", "Engine", "Lookup", "Units", "block_keys",
           "get_engine"]
