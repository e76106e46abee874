"""The request protocols (`Request.endpoint`) as the findings speak of them: each
endpoint's maker in prose and how its usage counts the input, so that no findings module
names a protocol's maker or compares an endpoint to a literal (tests/test_engine_registry.py).

Anthropic's Messages usage reports ``input_tokens`` without the cache reads and writes,
which come apart (``cache_read_input_tokens``, ``cache_creation_input_tokens``: "Prompt
caching", docs.anthropic.com); OpenAI's Chat and Responses usage counts them inside
``prompt_tokens`` / ``input_tokens`` (``cached_tokens`` is a part of it). Ingest converts
both to cache-inclusive prompt tokens (`model.records.Usage`); the ledger reads a gateway
that answers an Anthropic client with OpenAI's counting by this (`findings.ledgering`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Protocol:
    """One endpoint's protocol, as a finding names it."""

    endpoint: str  # one of `model.records.ENDPOINTS`
    maker: str  # whose protocol it is, in prose ("<maker>-protocol calls")
    # How its usage counts the uncached input, when input_tokens leaves the cache reads and
    # writes out (the convention as a gateway's advice quotes it); None: input_tokens (or
    # prompt_tokens) holds the whole prompt, cache reads included.
    uncached_input: str | None = None


PROTOCOLS: dict[str, Protocol] = {p.endpoint: p for p in (
    Protocol("anthropic-messages", "Anthropic",
             "input_tokens = prompt_tokens − cache_read_input_tokens − "
             "cache_creation_input_tokens"),
    Protocol("openai-chat", "OpenAI"),
    Protocol("openai-responses", "OpenAI"),
)}


def input_excludes_cache(endpoint: str) -> bool:
    """`endpoint`'s usage reports input_tokens without the cache reads and writes."""
    protocol = PROTOCOLS.get(endpoint)
    return protocol is not None and protocol.uncached_input is not None


def makers(endpoints: list[str]) -> str:
    """The makers of `endpoints`' protocols in prose, each once, in order (" / " between;
    an endpoint of no known protocol: "unknown")."""
    names = [PROTOCOLS[e].maker if e in PROTOCOLS else "unknown" for e in endpoints]
    return " / ".join(dict.fromkeys(names))


__all__ = ["PROTOCOLS", "Protocol", "input_excludes_cache", "makers"]
