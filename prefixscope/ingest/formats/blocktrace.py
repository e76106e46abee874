"""Block-hash request traces (Mooncake, Alibaba Bailian): prompts as chains of block ids.

Production traces published for KV-cache research carry no text, only the
prompt as a list of block ids where equal ids mean equal prefixes. That is
enough to replay a cache (`simulate`) and to measure the ideal hit ratio, so
each line becomes a `Request` with `block_hashes` and no body.

Two publishers, one shape (``timestamp``, ``input_length``, ``output_length``,
``hash_ids``):

* Mooncake (kvcache-ai/Mooncake, FAST'25 ``traces/*.jsonl`` and the arXiv
  ``mooncake_trace.jsonl``): ``timestamp`` is the arrival time in
  **milliseconds** from the trace start; one hash id per **512**-token block
  (the trace README), the last block may be partial.
* Alibaba Bailian (alibaba-edu/qwen-bailian-usagetraces-anon,
  ``qwen_*_blksz_16.jsonl``) adds ``chat_id``, ``parent_chat_id`` (-1 for a
  root), ``turn`` and ``type`` (text / search / image / file): ``timestamp``
  is in **seconds** from the trace start and blocks are **16** tokens ("Salted
  SipHash blocks (16 tokens per block)", the dataset README; also
  ai-dynamo/aiperf PR #723 "Bailian traces use a block size of 16 tokens").

Guarantees:

* `block_hashes` = ``tuple(hash_ids)``; `block_size` = the ``blksz_<N>`` of the
  file name when it has one (the Bailian naming), else 16 for Bailian lines
  (they have ``chat_id``) and 512 otherwise. There is no override option: the
  value is stored and can be corrected in the store.
* `timestamp` = 1970-01-01 + the trace offset (ms for Mooncake, s for Bailian):
  the traces are anonymized to trace-relative time, so only differences are
  meaningful. The raw value is kept in `metadata["trace_timestamp"]`.
* Usage: `prompt_tokens` = ``input_length``, `output_tokens` =
  ``output_length``, no cache counts (None), semantics ``trace``.
* Bailian: `native_id` = ``chat_id``, `parent_key` = ``parent_chat_id`` unless
  -1 / null, `client` = ``type``, record key ``chat:<chat_id>``; sessions are
  left to the threading of parent chains (`session_key` None). Mooncake lines
  have no id: the key is the canonical JSON of the line (repeated identical
  lines are told apart by the driver's occurrence count).
* A line without a list of integer ``hash_ids`` (each in the signed 64-bit range) or an
  integer ``input_length`` is reported as a skip.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from prefixscope.ingest.normalize.fields import to_int
from prefixscope.ingest.readers import BadRecord
from prefixscope.ingest.readers.json import iter_json_records
from prefixscope.ingest.source import Probe, Source
from prefixscope.model import Record, Request, Skip, Usage
from prefixscope.model.hashing import canonical_json

NAME = "block-trace"
DESCRIPTION = "block-hash request traces (Mooncake, Alibaba Bailian JSONL): hash_ids per request"

MOONCAKE_BLOCK_SIZE = 512
BAILIAN_BLOCK_SIZE = 16
_EPOCH = datetime(1970, 1, 1)
_BLOCK_SIZE_IN_NAME = re.compile(r"blksz_(\d+)")
_REQUIRED = ("hash_ids", "input_length", "timestamp")
# A block hash is stored as a signed 64-bit integer: one outside that range is damage.
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def sniff(probe: Probe) -> bool:
    first = probe.first_line  # a JSON array is not a trace
    return first is not None and all(k in first for k in _REQUIRED) \
        and isinstance(first["hash_ids"], list)


def parse(source: Source, probe: Probe) -> Iterator[Record | Skip]:
    named = _BLOCK_SIZE_IN_NAME.search(source.name)
    named_size = int(named.group(1)) if named and int(named.group(1)) > 0 else None
    for place, rec in iter_json_records(source, probe):
        if isinstance(rec, BadRecord):
            yield Skip(place, str(rec))
            continue
        if not isinstance(rec, dict):
            yield Skip(place, f"line is a JSON {type(rec).__name__}, not a trace record")
            continue
        problem = _problem(rec)
        if problem:
            yield Skip(place, problem)
            continue
        yield _record(place, rec, named_size)


def _problem(rec: dict[str, Any]) -> str | None:
    hashes = rec.get("hash_ids")
    if not isinstance(hashes, list):
        return "no `hash_ids` list"
    if not all(isinstance(h, int) and not isinstance(h, bool) for h in hashes):
        return "`hash_ids` holds a value that is not an integer"
    if not all(_INT64_MIN <= h <= _INT64_MAX for h in hashes):
        return "`hash_ids` holds an integer outside the signed 64-bit range"
    if to_int(rec.get("input_length")) is None:
        return "no integer `input_length`"
    return None


def _record(place: int, rec: dict[str, Any], named_size: int | None) -> Record:
    bailian = "chat_id" in rec
    block_size = named_size or (BAILIAN_BLOCK_SIZE if bailian else MOONCAKE_BLOCK_SIZE)
    chat_id = _id(rec.get("chat_id"))
    parent = _id(rec.get("parent_chat_id"))
    metadata: dict[str, Any] = {"trace_timestamp": rec.get("timestamp"),
                                "trace": "bailian" if bailian else "mooncake"}
    if rec.get("turn") is not None:
        metadata["turn"] = rec["turn"]
    request = Request(
        id="", source_format="", source_file="", source_line=place,
        timestamp=_trace_time(rec.get("timestamp"), seconds=bailian),
        endpoint="unknown",
        parent_key=parent if parent not in (None, "-1") else None,
        client=str(rec["type"]) if rec.get("type") not in (None, "") else None,
        native_id=chat_id,
        usage=Usage(prompt_tokens=to_int(rec.get("input_length")),
                    output_tokens=to_int(rec.get("output_length")), semantics="trace"),
        block_hashes=tuple(rec["hash_ids"]),
        block_size=block_size,
        metadata=metadata,
    )
    key = f"chat:{chat_id}" if chat_id is not None else canonical_json(rec)
    return Record(request=request, key=key)


def _trace_time(value: Any, *, seconds: bool) -> datetime | None:
    """Trace-relative offset as a datetime after the epoch (ms for Mooncake, s for Bailian)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return _EPOCH + (timedelta(seconds=value) if seconds else timedelta(milliseconds=value))
    except (OverflowError, ValueError):
        return None


def _id(value: Any) -> str | None:
    if value is None or isinstance(value, bool) or value == "":
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)
