"""Cache models for `simulate`: a registry of engines, one module and one `EngineSpec` each.

Each engine follows one real implementation's rules, cited in its module docstring
(sources in shared/reference/cache-semantics.md), behind the interface of `base.Engine`.
Its spec says everything the rest of prefixscope asks about it -- simulate (what it
replays, its block and TTL keywords and defaults, its lean unlimited variant, its
one-pass capacity sweep), report (hosted or self-hosted, which models it serves, and the
rules the missed-token ledger reads a request by: unit, minimum cacheable length,
retention and the longer TTLs a request can choose, whether a read may cover the whole
prompt or only reaches breakpoints, and the words its findings' advice uses) and the
command line's help -- so a new engine is one module plus one `register` call, and no
module outside this package names one (`choose` picks the engine a log is replayed with).

Example::

    engine = get_engine("vllm", block_size=16, capacity_blocks=4096)
    for token_ids in prompts:
        hit = engine.step(engine.units(token_ids))
        print(hit.cached_tokens)
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from prefixscope.tokenizers import CLAUDE_MODELS, DEEPSEEK_MODELS, OPENAI_MODELS

if TYPE_CHECKING:
    from prefixscope.engines.base import Admission, Engine, Lookup, Units, block_keys
    from prefixscope.engines.sweep import Sweep

# The registry is read where no engine runs (`prefixscope --help` lists the engines' names
# and defaults): each engine module is imported, and numpy with it, by the first call of
# its factory, and the base module's names by the first `from prefixscope.engines import`.
_BASE_NAMES = ("Admission", "Engine", "Lookup", "Units", "block_keys")


def __getattr__(name: str) -> Any:
    if name in _BASE_NAMES:
        return getattr(importlib.import_module(f"{__name__}.base"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True, slots=True)
class Lazy:
    """A class (or function) of an engine module, called
    (`Lazy("vllm", "VllmEngine")(block_size=16)`) as it is, with keyword arguments, its
    module imported by the first call; picklable, as a spec's factory travels to worker
    processes."""

    module: str  # the module's name in this package
    name: str  # the class's (function's) name in it

    def __call__(self, **params: Any) -> Any:
        return getattr(importlib.import_module(f"{__name__}.{self.module}"),
                       self.name)(**params)


@dataclass(frozen=True, slots=True)
class LongTtl:
    """A longer TTL a request can write its cache entries with, at a higher write price
    (Anthropic: ``"ttl": "1h"`` at 2x the input price instead of 5 minutes at 1.25x; the
    prices themselves come from the price table, `analyses.prices`)."""

    seconds: float
    mark: str  # how a request asks for it, as the advice quotes it


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """One cache model as the registry holds it.

    The fields after `sweep` are a hosted engine's rules as the missed-token ledger and
    the findings read them (`findings.ledger.hosted_rules`): a self-hosted engine's are
    its block size alone (whole blocks, never the last token, no expiry).
    """

    name: str
    factory: Callable[..., Engine]  # keyword arguments only (a class, or a `Lazy` one)
    about: str  # what it models, in a few words (help text)
    block_parameter: str | None = None  # the factory's keyword for the block size, if any
    block_size: int = 1  # its default (1: token-granular, or no blocks)
    ttl_parameter: str | None = None  # the factory's keyword for the retention, if any
    ttl_seconds: float | None = None  # its default (None: no expiry)
    hosted: bool = False  # a provider's API (one cache for every log it answered)
    replays: Literal["tokens", "segments", "traces"] = "tokens"  # what a request becomes
    models: re.Pattern[str] | None = None  # model names it serves (report's automatic choice)
    # The usage convention only its hosted API writes (`UsageRecord.usage_semantics`:
    # DeepSeek's ``prompt_cache_hit_tokens``): a log whose usage has it was answered by that
    # API, whatever step its cached values move in (report's automatic choice).
    usage_semantics: str | None = None
    cache_output: bool = False  # the factory takes `cache_output`
    unlimited: Callable[..., Engine] | None = None  # same answers without a capacity, leaner
    sweep: Callable[..., Sweep] | None = None  # every capacity in one pass (engines.sweep)
    # The shortest prefix it caches, in tokens (its factory's default) -- or, by model,
    # `min_tokens_of(model=...)` (Anthropic's table: 1,024-4,096 tokens by model).
    min_tokens: int = 0
    min_tokens_of: Callable[..., int] | None = None
    # A read may cover the whole prompt (a breakpoint at its end; DeepSeek's persisted
    # units); else the last prompt token is always computed, as a server must to produce
    # logits (a hit is at most `(prompt - 1)` rounded down to the unit).
    reads_last_token: bool = False
    # Tokens short of the previous prompt a warm read ends (Anthropic's automatic
    # breakpoint: 2 in 7 of 9 adjacent pairs of TraceLab's claude-opus sample,
    # cache-semantics.md A.4; the replay reads it as `analyses.simulate.ANTHROPIC_READ_LAG`).
    read_lag: int = 0
    # The step a hosted API's reads move in, in tokens (1: token-exact) -- or, by model,
    # `read_step_of(model)` (DeepSeek's table: `deepseek_read_step`). No read reaches the
    # part of a prefix past its last whole step: the ledger's unit for it
    # (`findings.ledger.hosted_rules`), and a miss of that part is `rounding`, never the
    # provider's.
    read_step: int = 1
    read_step_of: Callable[[str | None], int] | None = None
    # A longer TTL a request can choose per write (`LongTtl`): the ledger reads a session
    # whose writes chose it by it, and report prices choosing it (`findings.ttl_choice`).
    long_ttl: LongTtl | None = None
    # The retention a request can ask for by option (OpenAI's ``prompt_cache_retention:
    # "24h"``: `engines.openai.RETENTION`), seconds: the ledger reads its successor by it.
    extended_ttl_seconds: float | None = None
    # The low end of a retention that is a range, not a TTL (OpenAI's in-memory cache:
    # "5-10 minutes of inactivity, up to 1 hour"): `ttl_seconds` is its top; a pause
    # within or past it expired the prefix only when the read after it shows so
    # (`findings.ledger.Rules.expired`). None: `ttl_seconds` is a fixed TTL.
    ttl_low_seconds: float | None = None
    # Its default retention in words, as a ttl-expiry finding says it (None: "its TTL").
    retention_words: str | None = None
    # The advice of a provider-miss finding: what the client can change so the provider's
    # cache finds the prefix (None: the generic advice, keep a session on one endpoint).
    provider_fix: str | None = None
    # Its models' maker publishes their tokenizer (False: Claude's, so every prompt of it
    # is counted with a stand-in, and no --tokenizer makes the count exact).
    tokenizer_published: bool = True
    # The words the findings say of it, so that no findings module names an engine
    # (tests/test_engine_registry.py): its name in prose (None: `name`), ...
    display: str | None = None
    # ... its minimum cacheable length in words when it varies by model (None: `min_tokens`,
    # when it has one), as the below-minimum advice quotes it, ...
    minimum_words: str | None = None
    # ... the request field that keeps a session's requests on one cache machine, as the
    # routing advice names it (None: none), ...
    session_key: str | None = None
    # ... the provider-miss advice for a client that sets its caching up itself, by client
    # family (`findings.finders.recorded.client_family`): what such a client leaves to this
    # provider (before `provider_fix`, whatever the engine replayed), ...
    provider_fix_by_client: tuple[tuple[str, str], ...] = ()
    # ... and, for a cache that reads only at breakpoints, the advice for sessions that never
    # asked it to cache, by client family ("": any other client).
    not_requested_fix: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        """Its name as a finding says it (`display`, else `name`)."""
        return self.display or self.name

    @property
    def minimum_text(self) -> str | None:
        """Its minimum cacheable length in words (None: it caches any length)."""
        return self.minimum_words or (f"{self.min_tokens:,}" if self.min_tokens else None)

    @property
    def has_unit(self) -> bool:
        """Its cache unit is a parameter (a block size) to give, infer or fit."""
        return self.block_parameter is not None

    @property
    def reads_at_breakpoints(self) -> bool:
        """It caches only where a request marks a breakpoint (``cache_control``), and
        reads only an entry an earlier request wrote at one: what it replays is segments
        between breakpoints. The ledger places its reads at the predecessor's
        breakpoints, and a session that marks none never asked for caching."""
        return self.replays == "segments"

    def write_ttl(self, written: int | None, written_long: int | None,
                  before: float | None = None) -> float | None:
        """The TTL of the cache entry a call leaves, as its usage shows it: the long TTL
        when it wrote entries with it (`UsageRecord.cache_write_1h_tokens`: Anthropic's
        ``cache_creation.ephemeral_1h_input_tokens``), the default TTL when it wrote and
        its usage splits its writes with none of the long ones; a call that wrote nothing
        read and refreshed the entry it found, which keeps its TTL: `before`, its
        predecessor's. None: the log does not say (writes not split by TTL, or an engine
        with no longer TTL to choose) -- the default."""
        if self.long_ttl is None:
            return None if written else before
        if written_long:
            return self.long_ttl.seconds
        if written:
            return self.ttl_seconds if written_long is not None else None
        return before

    def minimum(self, model: str | None) -> int:
        """The shortest prefix it caches for `model`."""
        if self.min_tokens_of is not None:
            return int(self.min_tokens_of(model=model))
        return self.min_tokens

    def step(self, model: str | None) -> int:
        """The step its reads of `model`'s prompts move in."""
        return self.read_step_of(model) if self.read_step_of is not None else self.read_step

    def block_kwargs(self, block_size: int | None) -> dict[str, int]:
        """The factory keyword setting `block_size` (None: the default)."""
        if self.block_parameter is None:
            if block_size not in (None, 1):
                raise ValueError(f"{self.name} has no block size to set")
            return {}
        return {self.block_parameter: block_size or self.block_size}


ENGINES: dict[str, EngineSpec] = {}

# The steps DeepSeek's API reads move in, by model (the first pattern that matches; else
# `DEEPSEEK_READ_STEP`), from every `prompt_cache_hit_tokens` of the real runs seen (the
# fork network of SWE-agent/mini-swe-agent): V3.x in 64 (`deepseek-chat` and
# `deepseek-reasoner`, @ ec0e8e84 `output/deepseek_*_dev/`: 2,474 hits of 2,498 calls, 1,303
# of them an odd multiple of 64; the V3 docs: "64 tokens as a storage unit"), V4 in 128
# (`deepseek-v4-flash`, @ 9c0e0e77 `eval/example_trajectories/astropy__astropy-12907`: 64
# of 64 hits a multiple of 128). V4's heavily compressed attention keeps one entry per 128
# tokens (its cache's block, vllm-project/vllm-ascend#16270): no prefix between is restored.
DEEPSEEK_READ_STEP = 64
DEEPSEEK_READ_STEPS: tuple[tuple[re.Pattern[str], int], ...] = (
    (re.compile(r"deepseek[-_.]?v4", re.I), 128),
)


def deepseek_read_step(model: str | None) -> int:
    """The step DeepSeek's API reads `model`'s prompts in (`DEEPSEEK_READ_STEPS`)."""
    return next((step for pattern, step in DEEPSEEK_READ_STEPS
                 if model and pattern.search(model)), DEEPSEEK_READ_STEP)
# Why a session that marks no breakpoint read and wrote nothing (Anthropic's opt-in cache)
_NOT_REQUESTED = ("Anthropic caches only what a request marks with `cache_control`, and none "
                  "of these calls read or wrote a token: ")


def register(spec: EngineSpec) -> EngineSpec:
    """Add (or replace) an engine in the registry; returns `spec`."""
    ENGINES[spec.name] = spec
    return spec


for _spec in (
    EngineSpec("vllm", Lazy("vllm", "VllmEngine"),
               "vLLM 0.33 APC: chained full blocks, physical block pool, LRU",
               "block_size", 16, cache_output=True,
               unlimited=Lazy("vllm", "VllmUnlimitedEngine"),
               sweep=Lazy("sweep", "VllmSweep"), display="vLLM"),
    EngineSpec("sglang", Lazy("sglang", "SglangEngine"),
               "SGLang 0.5.10 RadixCache: radix tree of pages, LRU leaves",
               "page_size", 1, cache_output=True, display="SGLang"),
    EngineSpec("lmcache", Lazy("lmcache", "LmcacheEngine"),
               "LMCache 0.5.6 local CPU: 256-token chunks, LRU", "chunk_size", 256,
               display="LMCache"),
    EngineSpec("blocktrace", Lazy("blocktrace", "BlocktraceEngine"),
               "Mooncake trace convention: 512-token ids, LRU", "block_size", 512,
               replays="traces", sweep=Lazy("sweep", "BlocktraceSweep")),
    EngineSpec("anthropic", Lazy("anthropic", "AnthropicEngine"),
               "cache_control breakpoints, 20-block lookback, 5m/1h TTL",
               ttl_parameter="ttl", ttl_seconds=300.0, hosted=True,
               replays="segments", models=CLAUDE_MODELS,
               min_tokens_of=Lazy("anthropic", "min_cacheable"), reads_last_token=True,
               read_lag=2, long_ttl=LongTtl(
                   3600.0, "`cache_control: {\"type\": \"ephemeral\", \"ttl\": \"1h\"}`"),
               retention_words="5 minutes by default", tokenizer_published=False,
               provider_fix="Put an explicit `cache_control` breakpoint at the end of the "
               "stable prefix (and at most 20 blocks back from each later breakpoint).",
               display="Anthropic", minimum_words="1,024–4,096 tokens by model",
               provider_fix_by_client=(
                   ("claude-code", "Claude Code places its own cache breakpoints and the log "
                    "records no change before these requests: nothing in your setup explains "
                    "them. If they recur, report the request ids to Anthropic; a Claude Code "
                    "release that writes `diagnostics.cache_miss_reason` gives the provider's "
                    "own reason."),),
               not_requested_fix=(
                   ("cline", _NOT_REQUESTED + "Cline places the breakpoints only through its "
                    "Anthropic-family API providers (Anthropic, Vertex, Bedrock, OpenRouter). "
                    "Pick one of them for the Claude model in Cline's API Provider setting "
                    "instead of OpenAI Compatible, or route through a proxy that passes "
                    "`cache_control` on to Anthropic."),
                   ("claude-code", _NOT_REQUESTED + "Claude Code places its own breakpoints "
                    "unless prompt caching is turned off (`DISABLE_PROMPT_CACHING`): unset it, "
                    "and check that no gateway between Claude Code and Anthropic strips "
                    "`cache_control`."),
                   ("", _NOT_REQUESTED + "add a `cache_control: {\"type\": \"ephemeral\"}` "
                    "breakpoint at the end of the stable prefix (the tools and system prompt) "
                    "and on the last message, so each turn reads the one before; if the "
                    "requests pass a gateway or proxy, make it pass `cache_control` through."))),
    EngineSpec("openai", Lazy("openai", "OpenaiEngine"),
               "automatic from 1,024 tokens, 128-token steps, retention",
               "step", 128, ttl_parameter="idle_ttl", ttl_seconds=600.0,
               hosted=True, models=OPENAI_MODELS, cache_output=True, min_tokens=1024,
               extended_ttl_seconds=86_400.0, ttl_low_seconds=300.0,
               retention_words="5–10 minutes idle",
               provider_fix="Send a stable `prompt_cache_key` per session so requests reach "
               "the same cache machine, and keep the request rate per key under ~15 per "
               "minute.",
               display="OpenAI", session_key="prompt_cache_key",
               provider_fix_by_client=(
                   ("codex", "Codex sends the conversation id as `prompt_cache_key` itself and "
                    "the rollout records no change before these requests: nothing in your "
                    "setup explains them (OpenAI's cache is best effort: routing, overflow). "
                    "Codex's own compaction (`/compact`) and fewer model or effort switches "
                    "are the levers you have."),)),
    EngineSpec("deepseek", Lazy("deepseek", "DeepseekEngine"),
               "persisted prefix units (input end, output end, common)",
               ttl_parameter="ttl", hosted=True, models=DEEPSEEK_MODELS,
               usage_semantics="deepseek", reads_last_token=True,
               read_step=DEEPSEEK_READ_STEP, read_step_of=deepseek_read_step,
               display="DeepSeek"),
):
    register(_spec)


def ttl_split_engine() -> EngineSpec | None:
    """The engine whose usage splits a call's writes by TTL (the writes at its `long_ttl`
    counted apart: `UsageRecord.cache_write_1h_tokens`), by which a log's TTLs are read;
    None when no registered engine has a longer TTL to choose."""
    return next((spec for spec in ENGINES.values() if spec.long_ttl is not None), None)


def get_engine(name: str, **params: Any) -> Engine:
    """A new engine `name` built with `params` (each engine's keyword arguments).

    Raises:
        ValueError: `name` is not a registered engine.
    """
    try:
        spec = ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(ENGINES)}") from None
    return spec.factory(**params)


__all__ = ["ENGINES", "Admission", "Engine", "EngineSpec", "Lazy", "LongTtl", "Lookup", "Units",
           "block_keys", "get_engine", "register", "ttl_split_engine"]
