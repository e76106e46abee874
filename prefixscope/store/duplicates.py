"""The same upstream call logged by two sources: which stored request is a second copy.

A Langfuse export and the gateway's own log of the same traffic hold every call twice
(sample_logs/ has this: 62 Claude Code calls in both the Langfuse export and the new-api
database). Each source's view stays whole (`bucket --by source` shows both), but totals
that add sources must count each call once, so every later copy points at the one kept:
``requests.duplicate_of``. A pure function over store rows (like `prefixscope.sessions`),
run after every ingest over the requests it added and those they reach through a key
(`match_keys`): a small ingest into a large store links what it can change, not the store.

Two requests are copies of one call when they come from different log files (one log
never records a call twice: two such records are two calls) and, in this order:

1. they carry the same **upstream response id** (`response_id`: the provider's
   ``chatcmpl-…`` / ``msg_…`` / ``resp_…`` id, which only some formats log as their
   native id, see `RESPONSE_ID_FORMATS`);
2. else they have the same **request body** (exact hash) and model, `WINDOW_S` apart at
   most;
3. else they come from different log formats (a tracer and a gateway) and report the
   **same usage** (prompt, cached, cache-write and output tokens, prompt and output
   reported and prompt > 0), `WINDOW_S` apart at most. Two files of one format without
   bodies or response ids (per-session transcripts) are never matched on usage alone:
   two sessions' small calls can report the same counts.

Rules 2 and 3 are for requests a response id cannot tell apart: two requests (or two
clusters) that both carry response ids, none in common, are two calls however alike
their bodies, times and usage (an agent resending one prompt gets a new response each
time; 2,000 such captures were once reported as 1 request).

Rules 2 and 3 pair requests one to one, nearest in time first, so 8 identical calls logged
by two sources make 8 pairs, not 64. A cluster of copies holds at most one request per
file. The copy kept (the others' ``duplicate_of``) is the one with a body, then the one
reporting the most usage fields, then the fullest count (prompt + output tokens: a copy
written mid-stream, or cut short, reports less of the same call -- ccusage's
``should_replace_deduped_entry``), then the first by (file, line, id), so which copy is
kept never depends on the order the files were read in.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

# Sources start and end timestamps differently (Langfuse: the call's start; new-api: its
# end), so copies of one call are seconds apart: at most this far.
WINDOW_S = 120.0

# Formats whose native id is the response id the client was given (formats.md), which a
# gateway's log of the same call carries too: raw captures (the response's `id`), Claude
# Code (`message.id`), OpenHands (`model_response.id`), OpenHands completion logs
# (`response.id`), mini-swe-agent (the response dump's `id`), LiteLLM SpendLogs
# (`request_id`, the id the proxy returned), OpenRouter generation records (the generation
# `id`, the `id` of OpenRouter's chat completion). Other formats' ids are their own
# (Langfuse observation, new-api log, Bifrost row, TraceLab round, Gemini CLI message,
# Bailian chat, an LMCache lookup: a request looked up twice is two lookups). OTel spans
# carry gen_ai.response.id in metadata.
RESPONSE_ID_FORMATS = frozenset({"raw", "claude-code", "openhands", "openhands-completions",
                                 "mini-swe-agent", "litellm", "openrouter"})


@dataclass(frozen=True, slots=True)
class CallRow:
    """What matching reads of one stored request."""

    id: str
    source_format: str
    source_file: str
    source_line: int | None
    timestamp: datetime | None
    model: str | None
    response_id: str | None
    body_hash: str | None
    prompt_tokens: int | None
    cached_tokens: int | None
    cache_write_tokens: int | None
    output_tokens: int | None

    @property
    def usage_fields(self) -> int:
        return sum(v is not None for v in (self.prompt_tokens, self.cached_tokens,
                                          self.cache_write_tokens, self.output_tokens))

    @property
    def usage_total(self) -> int:
        """Prompt (cache reads and writes included) + output tokens."""
        return (self.prompt_tokens or 0) + (self.output_tokens or 0)


def call_row(row: Mapping[str, Any]) -> CallRow:
    """A `CallRow` from a store row (`Store.duplicate_rows`)."""
    response_id = row.get("response_id")
    if not response_id and row["source_format"] in RESPONSE_ID_FORMATS:
        response_id = row.get("native_id")
    return CallRow(row["id"], row["source_format"], row["source_file"], row["source_line"],
                   row["timestamp"],
                   row["model"], response_id or None, row["body_hash"], row["prompt_tokens"],
                   row["cached_tokens"], row["cache_write_tokens"], row["output_tokens"])


class _Clusters:
    """Union-find over request ids, keeping each cluster's files, formats and response ids."""

    def __init__(self, rows: Iterable[CallRow]) -> None:
        self.parent: dict[str, str] = {}
        self.files: dict[str, set[str]] = {}
        self.formats: dict[str, set[str]] = {}
        self.responses: dict[str, set[str]] = {}
        for r in rows:
            self.parent[r.id] = r.id
            self.files[r.id] = {r.source_file}
            self.formats[r.id] = {r.source_format}
            self.responses[r.id] = {r.response_id} if r.response_id else set()

    def root(self, rid: str) -> str:
        while self.parent[rid] != rid:
            self.parent[rid] = self.parent[self.parent[rid]]
            rid = self.parent[rid]
        return rid

    def join(self, a: str, b: str, *, other_format: bool = False) -> bool:
        """Merge a's and b's clusters unless they share a file (`other_format`: a log
        format), both have response ids and none in common, or are one already."""
        ra, rb = self.root(a), self.root(b)
        if ra == rb or self.files[ra] & self.files[rb] or (
                other_format and self.formats[ra] & self.formats[rb]) or (
                self.responses[ra] and self.responses[rb]
                and not self.responses[ra] & self.responses[rb]):
            return False
        self.parent[rb] = ra
        self.files[ra] |= self.files.pop(rb)
        self.formats[ra] |= self.formats.pop(rb)
        self.responses[ra] |= self.responses.pop(rb)
        return True


def _near(a: CallRow, b: CallRow) -> bool:
    if a.timestamp is None or b.timestamp is None:
        return False
    return abs((a.timestamp - b.timestamp).total_seconds()) <= WINDOW_S


def _pair_in_time(clusters: _Clusters, groups: Mapping[Any, list[CallRow]], *,
                  other_format: bool = False) -> None:
    """Within each group of look-alikes, join each request to the nearest later one from
    another file (`other_format`: another log format) within the window, in time order
    (one to one)."""
    for rows in groups.values():
        if len({r.source_file for r in rows}) < 2:
            continue
        rows = sorted((r for r in rows if r.timestamp is not None),
                      key=lambda r: (r.timestamp, r.source_file, r.id))
        for i, a in enumerate(rows):
            for b in rows[i + 1:]:
                if not _near(a, b):
                    break
                if b.source_file == a.source_file:
                    continue
                # a cluster holds one request per file (per format, matching on usage):
                # two identical calls in one log pair with two in the other, not both
                # with the first
                if clusters.join(a.id, b.id, other_format=other_format):
                    break


def body_key(r: CallRow) -> tuple[str, str | None] | None:
    """What rule 2 groups a request by (None: it has no body)."""
    return None if r.body_hash is None else (r.body_hash, r.model)


def usage_key(r: CallRow) -> tuple[int, int | None, int | None, int] | None:
    """What rule 3 groups a request by (None: it reports no prompt or no output)."""
    if not r.prompt_tokens or r.output_tokens is None:
        return None
    return (r.prompt_tokens, r.cached_tokens, r.cache_write_tokens, r.output_tokens)


@dataclass(frozen=True, slots=True)
class MatchKeys:
    """The keys `link_duplicates` groups some requests by. A request holding none of them is
    never joined to those requests, directly or through a third: the requests a new one can
    reach this way, and none other, can change the links (`store.load.relink`)."""

    response_ids: frozenset[str]
    bodies: frozenset[tuple[str, str | None]]
    usages: frozenset[tuple[int, int | None, int | None, int]]


def match_keys(rows: Iterable[CallRow]) -> MatchKeys:
    rows = list(rows)
    return MatchKeys(frozenset(r.response_id for r in rows if r.response_id),
                     frozenset(k for k in map(body_key, rows) if k is not None),
                     frozenset(k for k in map(usage_key, rows) if k is not None))


def link_duplicates(rows: Iterable[CallRow]) -> dict[str, str]:
    """request id -> id of the copy kept, for every request that is a second log of a call
    (the kept copies and single calls are not in the result)."""
    rows = list(rows)
    clusters = _Clusters(rows)
    by_response: dict[str, list[CallRow]] = defaultdict(list)
    for r in rows:
        if r.response_id:
            by_response[r.response_id].append(r)
    for same in by_response.values():
        for other in same[1:]:
            clusters.join(same[0].id, other.id)
    by_body: dict[Any, list[CallRow]] = defaultdict(list)
    by_usage: dict[Any, list[CallRow]] = defaultdict(list)
    for r in rows:
        if (body := body_key(r)) is not None:
            by_body[body].append(r)
        if (usage := usage_key(r)) is not None:
            by_usage[usage].append(r)
    _pair_in_time(clusters, by_body)
    _pair_in_time(clusters, by_usage, other_format=True)
    members: dict[str, list[CallRow]] = defaultdict(list)
    for r in rows:
        members[clusters.root(r.id)].append(r)
    out: dict[str, str] = {}
    for group in members.values():
        if len(group) < 2:
            continue
        kept = min(group, key=lambda r: (r.body_hash is None, -r.usage_fields,
                                         -r.usage_total, r.source_file,
                                         r.source_line if r.source_line is not None else -1,
                                         r.id))
        out.update({r.id: kept.id for r in group if r.id != kept.id})
    return out
