"""The normalized values every stage of prefixscope passes along.

Each input format (Langfuse, gateways, OTel, captures, trajectories, block traces)
is parsed into the same two records, `Request` and `Usage`, so that the analyses
never care where a request came from. The rules that make them comparable:

* `Usage.prompt_tokens` is ALL input tokens, cached ones included (OpenAI's
  convention). Sources that report Anthropic-style uncached `input_tokens` are
  converted by the parser; the source's own convention is kept in `semantics`.
* A value the source did not report is `None`, never 0; so is a token count no call can
  have (negative, or over `MAX_CONTEXT_TOKENS`: a damaged or hostile log), which `Usage`
  drops; a count over the bound is named in `Usage.impossible`, and ingest skips such a
  call with the reason (counted), so no total holds it.
* `Request.body` is the request as sent, in the protocol named by `endpoint`
  (`anthropic-messages`, `openai-chat`, `openai-responses`). Sources that log a
  looser shape (Langfuse, OTel, trajectories) are mapped to `openai-chat` by their
  parser; block-hash traces carry `block_hashes` instead of a body.

Values are frozen: identity and storage are the store's concern.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

Endpoint = Literal["anthropic-messages", "openai-chat", "openai-responses", "unknown"]
ENDPOINTS: tuple[str, ...] = ("anthropic-messages", "openai-chat", "openai-responses", "unknown")
# No call reads or writes more tokens than a context window holds. The largest published
# window is 10M tokens (Meta's Llama 4 Scout; Gemini 1.5 Pro: 2M; Claude, GPT-4.1: 1M), so
# a larger count (a prompt, a cache read or write, an output) is a damaged counter, not a
# call; the sums of any number of calls under it fit the store's 64-bit columns.
MAX_CONTEXT_TOKENS = 10_000_000
# The longest line a line-by-line reader takes (`--max-line-bytes`); a longer one is one
# skip, read past in bounded pieces. The longest real records seen are tens of MB (a
# whole conversation with pasted files in one JSON line). Here, beside the other bound on
# what a log holds, rather than in `ingest.source` (which re-exports it): the library's
# signature (`api.ingest`) reads it, and importing anything of `ingest` imports every
# format, which a command that reads a store (`diff --all --store`) never uses.
MAX_LINE_BYTES = 256 << 20


@dataclass(frozen=True, slots=True)
class Usage:
    """Token accounting of one request, normalized to cache-inclusive prompt tokens."""

    prompt_tokens: int | None = None  # all input tokens, cache reads and writes included
    cached_tokens: int | None = None  # tokens read from the prompt cache
    cache_write_tokens: int | None = None  # tokens written to the prompt cache
    output_tokens: int | None = None  # generated tokens (reasoning included)
    semantics: str | None = None  # the source's own convention, e.g. "anthropic", "openai"
    # Of `cache_write_tokens`, those written with the 1-hour TTL (Anthropic's
    # ``cache_creation.ephemeral_1h_input_tokens``; priced at 2x base input, 5-minute
    # writes at 1.25x). None: the source does not split its writes by TTL.
    cache_write_1h_tokens: int | None = None
    # The counts dropped for being more than any context window holds (over
    # MAX_CONTEXT_TOKENS), as "name=value": set by the constructor, never given.
    impossible: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        impossible = list(self.impossible)
        for name in ("prompt_tokens", "cached_tokens", "cache_write_tokens", "output_tokens",
                     "cache_write_1h_tokens"):
            value = getattr(self, name)
            if value is None or (isinstance(value, int) and 0 <= value <= MAX_CONTEXT_TOKENS):
                continue
            if isinstance(value, int) and value > MAX_CONTEXT_TOKENS:
                impossible.append(f"{name}={value:,}")
            object.__setattr__(self, name, None)  # not a count: unreported
        object.__setattr__(self, "impossible", tuple(impossible))

    @property
    def reported(self) -> bool:
        """True when the source reported any token count at all."""
        return any(
            v is not None
            for v in (self.prompt_tokens, self.cached_tokens, self.cache_write_tokens,
                      self.output_tokens)
        )


# What the log itself records happening in a session between two calls (`SessionEvent.kind`).
EVENT_KINDS: tuple[str, ...] = ("compaction", "truncation", "model-change", "tool-set",
                                "client-upgrade", "history-rewrite", "settings-change")


@dataclass(frozen=True, slots=True)
class SessionEvent:
    """A change the log records in a session before a call: a compaction boundary, a
    truncation of the history, another model, a new client version, a tool-set delta.
    Kept with the first call after it (`Request.events`); the store keeps them in one
    table (``session_events``) with that call's session and file."""

    kind: str  # one of EVENT_KINDS
    detail: str  # what changed, for a person ("claude-sonnet-4-5 -> claude-opus-4-5")
    timestamp: datetime | None  # when the log recorded it (naive UTC)
    source_line: int | None  # the log line (or element) that records it


@dataclass(frozen=True, slots=True)
class Request:
    """One model call as the log describes it."""

    id: str  # stable id: same source record -> same id (see ingest.record_id)
    source_format: str  # ingest format name, e.g. "langfuse", "new-api"
    source_file: str  # file the record came from ("-" for stdin)
    source_line: int | None  # 1-based line (JSONL) or row (CSV / SQLite) or index (JSON array)
    timestamp: datetime | None  # request start, naive UTC
    endpoint: str = "unknown"  # protocol of `body`: one of ENDPOINTS
    model: str | None = None  # model name as the client asked for it
    session_key: str | None = None  # explicit session/conversation id from the source
    session_key_source: str | None = None  # where session_key came from, e.g. "langfuse.sessionId"
    parent_key: str | None = None  # explicit parent request/chat id when the source links turns
    user: str | None = None  # user / account / API key name
    client: str | None = None  # client or entrypoint (user agent, cc_entrypoint, agent name)
    channel: str | None = None  # gateway channel / provider / upstream
    gateway: str | None = None  # conversion the log says was applied ("anthropic-to-openai")
    native_id: str | None = None  # the source's own id for this request, when it has one
    body: dict[str, Any] | None = None  # the request body in `endpoint`'s protocol
    body_truncated: bool = False  # the log cut strings in the body (e.g. LiteLLM); text is lossy
    output: Any = None  # the response message(s) when logged (used to thread turns)
    usage: Usage = field(default_factory=Usage)  # token accounting
    block_hashes: tuple[int, ...] | None = None  # prefix-chained block ids (block-hash traces)
    block_size: int | None = None  # tokens per block of `block_hashes`
    metadata: dict[str, Any] = field(default_factory=dict)  # anything else worth keeping
    # 0-based place of the request inside its log record, for records that hold several
    # calls (an OpenHands output.jsonl row, a trajectory): (timestamp, file, line, position)
    # is the order requests happened in when they share a line and have no timestamp.
    source_position: int | None = None
    # What the log recorded in this call's session since the session's previous call
    # (in the log's order), oldest first.
    events: tuple[SessionEvent, ...] = ()

    @property
    def has_body(self) -> bool:
        return self.body is not None


@dataclass(frozen=True, slots=True)
class Skip:
    """A record a parser could not use: reported with its place and reason, never lost."""

    line: int | None  # 1-based line / row / index in the file, None for the whole file
    reason: str  # one line, for a person


@dataclass(frozen=True, slots=True)
class Record:
    """A parsed request plus the key its stable id is derived from.

    `key` is whatever identifies the record within its source: the source's own
    request id when it has one, else the canonical JSON of the raw record. The
    ingest driver hashes (format, key, occurrence) into `Request.id`, so
    re-ingesting a file yields the same ids.
    """

    request: Request
    key: str


# Usage conventions (`Usage.semantics`) that only one provider's API writes: ``deepseek``,
# DeepSeek's ``prompt_cache_hit_tokens`` (no server of open weights reports it). A
# `UsageRecord` keeps its request's convention only when it is one of these.
API_USAGE_SEMANTICS = ("deepseek",)


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """A stored request's usage and grouping fields, without its body (what bucket reads)."""

    id: str
    timestamp: datetime | None
    endpoint: str
    model: str | None
    client: str | None
    user: str | None
    channel: str | None
    source_format: str
    session: str | None  # from session threading
    prompt_tokens: int | None
    cached_tokens: int | None
    has_body: bool
    duplicate_of: str | None = None  # the copy kept when another source logged this call too
    source_file: str = ""  # the log file it came from (a cache domain, for report's replay)
    cache_write_tokens: int | None = None
    cache_write_1h_tokens: int | None = None  # of cache_write_tokens, 1-hour TTL writes
    output_tokens: int | None = None
    prev_id: str | None = None  # the session's previous request (session threading)
    compaction: bool = False  # the link from prev_id is a compaction
    project: str | None = None  # the agent's working directory (Claude Code / Codex `cwd`)
    # the backend that served it, where the log says: LiteLLM's deployment (``model_id``,
    # ``api_base``), a gateway's channel or provider, a raw capture's host (`Store.usage_records`)
    backend: str | None = None
    # the usage's convention when only one provider's API writes it (`API_USAGE_SEMANTICS`),
    # by which report's automatic choice knows that API answered; None for any other
    usage_semantics: str | None = None
    # what the log itself says the call cost, in dollars (a client's or gateway's own
    # figure, `Store.usage_records`); report sets list prices beside it, never in its place
    recorded_cost_usd: float | None = None
