"""Provider usage objects -> `Usage`: the one place that knows each "input tokens" convention.

"Input tokens" means two different things (formats.md §0, §10): Anthropic-native
`input_tokens` excludes cache reads and writes, OpenAI `prompt_tokens` / Responses
`input_tokens` / OTel include them. The functions below turn each provider's usage
object into `Usage` with cache-inclusive `prompt_tokens`, keep the convention in
`semantics`, and leave unreported values as None. Raw captures, Claude Code
transcripts, gateways that log a provider usage object (Bifrost) and agent
trajectories (OpenHands, mini-swe-agent) all read usage through them; formats with
their own columns (new-api, LiteLLM, Langfuse, OTel, TraceLab) keep their rule in
their module.
"""

from __future__ import annotations

from typing import Any

from prefixscope.ingest.normalize.fields import first_present, to_int
from prefixscope.model import Usage


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _sum_present(*values: int | None) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def usage_anthropic(u: dict[str, Any] | None) -> Usage:
    """Anthropic Messages usage: `input_tokens` EXCLUDES cache reads and writes."""
    if not isinstance(u, dict):
        return Usage()
    uncached = to_int(u.get("input_tokens"))
    read = to_int(u.get("cache_read_input_tokens"))
    write = to_int(u.get("cache_creation_input_tokens"))
    cc = _dict(u.get("cache_creation"))
    write_1h = to_int(cc.get("ephemeral_1h_input_tokens"))
    if write is None and cc:
        write = _sum_present(to_int(cc.get("ephemeral_5m_input_tokens")), write_1h)
    if write_1h is not None and (write is None or write_1h > write):
        write_1h = None  # a split that does not fit its total says nothing
    prompt = None if uncached is None else uncached + (read or 0) + (write or 0)
    return Usage(prompt_tokens=prompt, cached_tokens=read, cache_write_tokens=write,
                 output_tokens=to_int(u.get("output_tokens")), semantics="anthropic",
                 cache_write_1h_tokens=write_1h)


def usage_openai_chat(u: dict[str, Any] | None) -> Usage:
    """OpenAI Chat usage (also vLLM, DeepSeek): `prompt_tokens` INCLUDES cached tokens."""
    if not isinstance(u, dict):
        return Usage()
    details = _dict(u.get("prompt_tokens_details"))
    deepseek_hit = to_int(u.get("prompt_cache_hit_tokens"))
    read = deepseek_hit if deepseek_hit is not None else to_int(first_present(
        details.get("cached_tokens"), details.get("cached_read_tokens"),
        u.get("cache_read_input_tokens")))
    write = to_int(first_present(u.get("cache_write_tokens"), details.get("cache_write_tokens"),
                                 details.get("cached_write_tokens"),
                                 details.get("cache_creation_tokens"),
                                 u.get("cache_creation_input_tokens")))
    prompt = to_int(u.get("prompt_tokens"))
    if prompt is None and deepseek_hit is not None:
        prompt = _sum_present(deepseek_hit, to_int(u.get("prompt_cache_miss_tokens")))
    return Usage(prompt_tokens=prompt, cached_tokens=read, cache_write_tokens=write,
                 output_tokens=to_int(u.get("completion_tokens")),
                 semantics="deepseek" if deepseek_hit is not None else "openai")


def usage_openai_responses(u: dict[str, Any] | None) -> Usage:
    """OpenAI Responses usage: `input_tokens` INCLUDES cached tokens."""
    if not isinstance(u, dict):
        return Usage()
    details = _dict(u.get("input_tokens_details"))
    return Usage(prompt_tokens=to_int(u.get("input_tokens")),
                 cached_tokens=to_int(details.get("cached_tokens")),
                 cache_write_tokens=to_int(details.get("cache_write_tokens")),
                 output_tokens=to_int(u.get("output_tokens")), semantics="openai-responses")


def usage_auto(u: Any, endpoint: str = "unknown") -> Usage:
    """Pick the convention from the keys present, falling back on the endpoint protocol."""
    if not isinstance(u, dict):
        return Usage()
    if "prompt_tokens" in u or "prompt_cache_hit_tokens" in u:
        return usage_openai_chat(u)
    if "input_tokens_details" in u:
        return usage_openai_responses(u)
    if "cache_read_input_tokens" in u or "cache_creation_input_tokens" in u:
        return usage_anthropic(u)
    if "input_tokens" in u:
        if endpoint == "openai-responses":
            return usage_openai_responses(u)
        return usage_anthropic(u)
    return Usage()
