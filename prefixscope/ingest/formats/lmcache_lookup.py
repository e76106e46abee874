"""LMCache lookup-hash logs: every lookup an LMCache server answered, as its chunk hashes.

``lmcache server --lookup-hash-log-dir DIR`` (LMCache 0.5.6,
``lmcache/v1/mp_observability/config.py``) writes rotating JSON-lines files
``lookup_hashes_<YYYYmmdd_HHMMSS>_<n>.jsonl`` (``subscribers/logging/lookup_hash.py``,
``LookupHashLoggingSubscriber._on_lookup_hashes``), one record per lookup::

    {"timestamp": 1711929600.123, "request_id": "req-abc", "model_name": "DeepSeek-V3",
     "chunk_size": 256, "seq_len": 1024, "dtypes": ["float8_e4m3fn"],
     "shapes": [[32, 256, 128]], "chunk_hashes": ["0xab...", ...]}

``chunk_hashes`` are ``TokenHasher.compute_chunk_hashes`` of the request's tokens
(``v1/multiprocess/token_hasher.py``): rolling prefix hashes of the **complete** chunks
only (a partial last chunk is discarded), each ``"0x" + bytes.hex()`` (or ``hex(int)``).
Equal hashes mean equal prefixes through that chunk: the same block-hash trace as a
Mooncake one, with LMCache's chunk as the block. No text, no usage.

Guarantees:

* `block_hashes` = the chunk hashes as signed 64-bit integers: a hash of up to 64 bits
  as its value, a longer one (sha256 digests) by its first 8 bytes big-endian (LMCache's
  own folding, ``int.from_bytes(h[:8], "big")``); `block_size` = ``chunk_size``.
* `usage.prompt_tokens` = ``seq_len`` (the request's tokens), no cache counts,
  semantics ``trace``; `timestamp` = the Unix time ``timestamp`` (UTC).
* `native_id` = ``request_id``, `model` = ``model_name``; every record is one request,
  as LMCache saw it: a request looked up again (after a preemption) is a second lookup.
  The record key is ``lmcache-lookup:<request_id>`` (the driver's occurrence count tells
  repeats apart), or the canonical JSON of a record without a request id.
* `simulate` and `report` replay these requests through the ``lmcache`` engine (LMCache's
  LRU chunk store and hit rule) rather than the Mooncake convention.
* A line without a list of hex-string ``chunk_hashes``, an integer ``seq_len`` >= 0 or an
  integer ``chunk_size`` >= 1 is a skip naming this format.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from prefixscope.ingest.normalize.fields import to_int
from prefixscope.ingest.readers import BadRecord
from prefixscope.ingest.readers.json import iter_json_records
from prefixscope.ingest.source import Probe, Source
from prefixscope.model import Record, Request, Skip, Usage
from prefixscope.model.hashing import canonical_json

NAME = "lmcache-lookup"
DESCRIPTION = ("LMCache lookup-hash logs (lmcache server --lookup-hash-log-dir): chunk hashes "
               "per lookup")
TRACE = "lmcache"  # metadata["trace"]: replayed with LMCache's own cache model
_REQUIRED = ("chunk_hashes", "seq_len", "chunk_size")
_INT64 = 1 << 64


def sniff(probe: Probe) -> bool:
    first = probe.first_line
    return first is not None and all(k in first for k in _REQUIRED) \
        and isinstance(first["chunk_hashes"], list)


def parse(source: Source, probe: Probe) -> Iterator[Record | Skip]:
    for place, rec in iter_json_records(source, probe):
        if isinstance(rec, BadRecord):
            yield Skip(place, f"{NAME}: {rec}")
            continue
        if not isinstance(rec, dict):
            yield Skip(place, f"{NAME}: line is a JSON {type(rec).__name__}, not a lookup "
                              "record")
            continue
        hashes = _hashes(rec.get("chunk_hashes"))
        if isinstance(hashes, str):
            yield Skip(place, f"{NAME}: {hashes}")
            continue
        seq_len, chunk = to_int(rec.get("seq_len")), to_int(rec.get("chunk_size"))
        if seq_len is None or seq_len < 0:
            yield Skip(place, f"{NAME}: no integer `seq_len`")
            continue
        if chunk is None or chunk < 1:
            yield Skip(place, f"{NAME}: no integer `chunk_size` >= 1")
            continue
        yield _record(place, rec, hashes, seq_len, chunk)


def _hashes(value: Any) -> list[int] | str:
    """The chunk hashes as signed 64-bit ints, or why they are not readable."""
    if not isinstance(value, list):
        return "no `chunk_hashes` list"
    out: list[int] = []
    for h in value:
        if not isinstance(h, str):
            return "`chunk_hashes` holds a value that is not a hex string"
        digits = h[3:] if h.startswith("-0x") else h[2:] if h.startswith("0x") else h
        try:
            number = int(h, 16)
        except ValueError:
            return f"`chunk_hashes` holds {h[:20]!r}, not a hex number"
        if not -(_INT64 >> 1) <= number < _INT64:
            number = int(digits[:16], 16)  # a digest longer than 8 bytes: its first 8
        out.append(number - _INT64 if number >= _INT64 >> 1 else number)
    return out


def _record(place: int, rec: dict[str, Any], hashes: list[int], seq_len: int,
            chunk: int) -> Record:
    request_id = rec.get("request_id")
    request_id = str(request_id) if request_id not in (None, "") else None
    metadata: dict[str, Any] = {"trace": TRACE, "trace_timestamp": rec.get("timestamp")}
    request = Request(
        id="", source_format="", source_file="", source_line=place,
        timestamp=_time(rec.get("timestamp")), endpoint="unknown",
        model=str(rec["model_name"]) if rec.get("model_name") else None,
        native_id=request_id,
        usage=Usage(prompt_tokens=seq_len, semantics="trace"),
        block_hashes=tuple(hashes), block_size=chunk, metadata=metadata)
    key = f"lmcache-lookup:{request_id}" if request_id is not None else canonical_json(rec)
    return Record(request=request, key=key)


def _time(value: Any) -> datetime | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return datetime.fromtimestamp(value, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None
