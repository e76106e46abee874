"""The one choice of the engine a log is replayed with, for every command that replays one.

`report` chooses per log file (`findings.evidence` plans each file's cache domain),
`simulate` once for the whole store; both ask `choose_engine`, which reads the registry
(`EngineSpec.models`, `hosted`, `block_size`) and names no engine but the default
self-hosted one. With ``--engine auto``:

1. block-hash traces (Mooncake / Bailian, LMCache lookup logs) replay through their own
   block ids with the self-hosted default (`SELF_HOSTED`);
2. usage in a hosted API's own convention (`EngineSpec.usage_semantics`: DeepSeek's
   ``prompt_cache_hit_tokens``, which no server of open weights writes) for most requests:
   that API, whatever step its cached values move in (DeepSeek's reads are multiples of 64
   or 128 tokens, and would otherwise look like a server's blocks);
3. cached values aligned to a block size (given with ``--block-size``, else the largest
   candidate dividing 90% of them: `aligned_block_size`) mean a self-hosted engine's
   blocks -- unless the models' hosted API reads in steps itself (OpenAI's 128 tokens
   look like blocks);
4. models of a hosted family prefixscope has no cache model of (Gemini, xAI): nothing,
   unless asked;
5. the hosted engine serving most of the requests' models (`model_family_engine`);
6. the self-hosted default when the log has prompts to render, else nothing (usage alone
   cannot be replayed without a hosted engine's rules).

`simulate` on a log without bodies (`with_bodies=False`) has nothing a self-hosted engine
could rebuild: it replays the usage with the models' hosted API, or says which engine to
pass. Each choice carries the words the output says it in.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from prefixscope.engines import ENGINES
from prefixscope.model import UsageRecord

AUTO = "auto"
SELF_HOSTED = "vllm"  # the self-hosted engine auto replays with
# Candidate block sizes of a self-hosted engine, as cached values are read for them.
BLOCK_SIZES = (16, 32, 64, 128, 256, 512, 1024, 2048)
# ingest's names of block-hash traces: Mooncake / Bailian, LMCache lookup-hash logs
TRACE_FORMATS = ("block-trace", "lmcache-lookup")
# Hosted model families whose provider cache prefixscope does not model (Google's implicit
# caching, xAI): replayed only with an explicit --engine.
_UNMODELLED = re.compile(r"gemini|grok", re.I)

USAGE_ONLY = "a usage-only log (no bodies, no block ids)"
NO_UNIT = "no block size"  # the unit source of an engine that has none (Anthropic, DeepSeek)


@dataclass(frozen=True, slots=True)
class EngineChoice:
    """The cache model a replay uses, and why."""

    engine: str | None  # None: no engine can replay this log; `why` names the fix
    unit: int | None  # None: the engine's own default
    why: str  # why this engine ("as asked", or auto's reason)
    # "given", "inferred from the cached values", "the engine's default" or NO_UNIT
    unit_source: str
    # the block size given, else the one the cached values are aligned to (None: neither)
    block: int | None = None


def model_family_engine(records: Sequence[UsageRecord]) -> str | None:
    """The hosted engine serving most of the requests' models (None: no family matches)."""
    votes: Counter[str] = Counter()
    families = [(spec.models, name) for name, spec in ENGINES.items() if spec.models]
    for record in records:
        for pattern, engine in families:
            if record.model and pattern.search(record.model):
                votes[engine] += 1
                break
    return votes.most_common(1)[0][0] if votes else None


def usage_engine(records: Sequence[UsageRecord]) -> str | None:
    """The hosted engine whose own usage convention (`EngineSpec.usage_semantics`) more than
    half of the requests' usage is in (None: none is)."""
    owners = {spec.usage_semantics: name for name, spec in ENGINES.items()
              if spec.usage_semantics}
    votes = Counter(owners[r.usage_semantics] for r in records if r.usage_semantics in owners)
    top = votes.most_common(1)
    return top[0][0] if top and 2 * top[0][1] > len(records) else None


def unmodelled_family(records: Sequence[UsageRecord]) -> str | None:
    """A hosted family without a cache model that most requests' models belong to."""
    votes: Counter[str] = Counter()
    for record in records:
        if record.model:
            match = _UNMODELLED.search(record.model)
            votes[match.group(0).lower() if match else ""] += 1
    top = votes.most_common(1)
    return top[0][0] if top and top[0][0] else None


def aligned_block_size(cached_values: Sequence[int]) -> int | None:
    """The block size the cached values say a self-hosted engine has: the largest candidate
    dividing at least 90% of them (each value as often as it was seen). Stricter than
    bucket's inference, which may read a block size off a single repeated value (an upper
    bound that is useful to explain a spike, not evidence of blocks): a hosted API's
    token-exact reads must not look like a server's blocks."""
    values = [v for v in cached_values if v > 0]
    if not values:
        return None
    fits = [bs for bs in BLOCK_SIZES if sum(v % bs == 0 for v in values) >= 0.9 * len(values)]
    return max(fits) if fits else None


def usage_only_fix(records: Sequence[UsageRecord]) -> str:
    """The engine option that replays a log of usage alone: its models' hosted API."""
    family = model_family_engine([r for r in records if r.duplicate_of is None])
    if family is not None:
        return f"`--engine {family}` (its models' hosted API)"
    names = [f"`{name}`" for name, spec in ENGINES.items() if spec.hosted]
    names[0] = f"`--engine {names[0][1:]}"
    return "a hosted engine: " + (f"{', '.join(names[:-1])} or {names[-1]}"
                                  if len(names) > 1 else names[0])


def choose_engine(records: Sequence[UsageRecord], requested: str = AUTO,
                  block_size: int | None = None, *, with_bodies: bool = True
                  ) -> EngineChoice:
    """The engine and unit `records` (one cache domain, or a whole store) are replayed
    with: `requested` unless "auto" (see the module docstring); `block_size` as given
    (``--block-size``; None: inferred from the cached values a self-hosted engine
    reported, else the engine's own); `with_bodies`: the store holds request bodies."""
    kept = [r for r in records if r.duplicate_of is None]
    block = block_size or aligned_block_size([r.cached_tokens for r in kept if r.cached_tokens])
    if requested == AUTO:
        engine, why = _auto(kept, block, block_size is not None)
        unit = block if engine is not None and not ENGINES[engine].hosted else block_size
        traces = any(r.source_format in TRACE_FORMATS for r in kept)
        if engine is not None and not ENGINES[engine].hosted and not with_bodies \
                and not traces:
            family = model_family_engine(kept)
            if family is None:
                return EngineChoice(None, None, f"{USAGE_ONLY}: replay it with "
                                    f"{usage_only_fix(records)}", "", block)
            engine, unit = family, block_size
            why = f"{USAGE_ONLY}: replaying with `--engine {family}`, its models' hosted API"
        if engine is None:
            return EngineChoice(None, None, why, "", block)
    else:
        engine, why = requested, "as asked"
        spec = ENGINES[engine]
        unit = block if block_size is None and not spec.hosted and spec.has_unit \
            else block_size
    if not ENGINES[engine].has_unit:
        source = NO_UNIT
    elif block_size is not None:
        source = "given"
    elif unit is not None:
        source = "inferred from the cached values"
    else:
        source = "the engine's default"
    return EngineChoice(engine, unit, why, source, block)


def _auto(records: Sequence[UsageRecord], block_size: int | None, forced: bool
          ) -> tuple[str | None, str]:
    """(engine, why) auto replays `records` with; `block_size`: the one given (`forced`)
    or the one the cached values are aligned to."""
    if any(r.source_format in TRACE_FORMATS for r in records):
        return SELF_HOSTED, "block-hash traces replay through their own block ids"
    served = None if forced else usage_engine(records)
    if served is not None:
        return served, f"the usage has {ENGINES[served].label}'s API's own cache fields"
    family = model_family_engine(records)
    if block_size is not None and (family is None or ENGINES[family].block_size == 1):
        return SELF_HOSTED, (f"cached values are multiples of {block_size} tokens: a "
                             "self-hosted engine's blocks" if not forced else
                             "--block-size given")
    unmodelled = unmodelled_family(records)
    if unmodelled is not None:
        return None, (f"the models are {unmodelled}, a hosted API whose cache prefixscope has "
                      "no model of")
    if family is not None:
        return family, f"the models are {family}'s"
    if any(r.has_body for r in records):
        return SELF_HOSTED, "no model family recognised; prompts are in the log"
    return None, "no prompts in the log and no hosted model family recognised"


__all__ = ["AUTO", "BLOCK_SIZES", "NO_UNIT", "SELF_HOSTED", "TRACE_FORMATS", "USAGE_ONLY",
           "EngineChoice", "aligned_block_size", "choose_engine", "model_family_engine",
           "unmodelled_family", "usage_engine", "usage_only_fix"]
