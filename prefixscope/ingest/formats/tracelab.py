"""TraceLab round traces (uw-syfi/TraceLab `round_trace.jsonl`): provider usage per LLM round.

TraceLab normalizes real Claude Code and Codex sessions into one JSON line per
LLM invocation ("round") with the provider-reported token accounting and a
timeline of the round's events, but no text (`docs/prompt_cache_accounting.md`,
`example_sessions/*/README.md`). It is ground truth for usage analyses: hit
rate per session, cached-token jumps, previous-turn growth.

Guarantees:

* One request per line. `session_key` = ``session_id``
  (``tracelab.session_id``), `native_id` = ``round_id``, key
  ``round:<session_id>:<round_id>``, `model` = ``model``, `client` =
  ``provider``, `user` = ``user`` (derived, unsanitized traces only). No body
  (`endpoint` ``unknown``).
* Usage (semantics ``tracelab:<provider>``): `prompt_tokens` =
  ``input_tokens_total`` (TraceLab's total = prefix + newly appended, cache
  included for both providers); `cached_tokens` =
  ``claude_cache_read_input_tokens`` for Claude, else ``prefix_tokens`` (Codex
  ``cached_input_tokens``); `cache_write_tokens` =
  ``claude_cache_creation_input_tokens``. Codex reports no cache-write
  counter: its ``newly_append_tokens`` is miss accounting, not a write, so the
  write stays None. `output_tokens` = ``output_tokens`` (Codex: reasoning
  included, as `Usage` wants). Missing counters stay None.
* `timestamp` = the first event of ``timing_events`` (the input that started
  the round: user message or tool result).
* Lines that are not objects, or lack ``session_id`` / ``round_id``, are skips.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prefixscope.ingest.normalize.fields import dig, parse_time, to_int
from prefixscope.ingest.readers import BadRecord
from prefixscope.ingest.readers.json import iter_json_records
from prefixscope.ingest.source import Probe, Source
from prefixscope.model import Record, Request, Skip, Usage

NAME = "tracelab"
DESCRIPTION = "TraceLab round traces (round_trace.jsonl): usage per Claude Code / Codex round"

_SIGNATURE = ("session_id", "round_id", "input_tokens_total", "prefix_tokens", "provider")
_METADATA_KEYS = ("project", "round_index", "turn_id", "store", "trace_key", "newly_append_tokens",
                  "reasoning_output_tokens", "claude_uncached_input_tokens",
                  "current_input_event_count", "current_user_message_count",
                  "current_tool_result_count", "current_input_chars", "first_input_event_type")


def sniff(probe: Probe) -> bool:
    first = probe.first_line
    return first is not None and all(k in first for k in _SIGNATURE)


def parse(source: Source, probe: Probe) -> Iterator[Record | Skip]:
    for place, rec in iter_json_records(source, probe):
        if isinstance(rec, BadRecord):
            yield Skip(place, str(rec))
        elif not isinstance(rec, dict):
            yield Skip(place, f"line is a JSON {type(rec).__name__}, not a round record")
        elif rec.get("session_id") in (None, "") or rec.get("round_id") in (None, ""):
            yield Skip(place, "round without `session_id` or `round_id`")
        else:
            yield _record(place, rec)


def tracelab_usage(rec: dict[str, Any]) -> Usage:
    provider = str(rec.get("provider") or "unknown")
    claude_read = to_int(rec.get("claude_cache_read_input_tokens"))
    return Usage(
        prompt_tokens=to_int(rec.get("input_tokens_total")),
        cached_tokens=claude_read if claude_read is not None else to_int(rec.get("prefix_tokens")),
        cache_write_tokens=to_int(rec.get("claude_cache_creation_input_tokens")),
        output_tokens=to_int(rec.get("output_tokens")),
        semantics=f"tracelab:{provider}",
    )


def _record(place: int, rec: dict[str, Any]) -> Record:
    session_id, round_id = str(rec["session_id"]), str(rec["round_id"])
    metadata = {k: rec[k] for k in _METADATA_KEYS if rec.get(k) is not None}
    tools = rec.get("tools")
    if isinstance(tools, list):
        metadata["tool_names"] = [t.get("tool_name") for t in tools if isinstance(t, dict)]
    request = Request(
        id="", source_format="", source_file="", source_line=place,
        timestamp=parse_time(dig(rec, "timing_events", 0, "timestamp")),
        endpoint="unknown",
        model=rec.get("model") if isinstance(rec.get("model"), str) else None,
        session_key=session_id, session_key_source="tracelab.session_id",
        user=str(rec["user"]) if rec.get("user") not in (None, "") else None,
        client=str(rec["provider"]) if rec.get("provider") not in (None, "") else None,
        native_id=round_id,
        usage=tracelab_usage(rec),
        metadata=metadata,
    )
    return Record(request=request, key=f"round:{session_id}:{round_id}")
