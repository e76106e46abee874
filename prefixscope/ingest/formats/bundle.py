"""prefixscope's share-safe bundle (``prefixscope export --bundle DIR``): its requests.jsonl.

Each line is a block-hash trace record (Mooncake's ``timestamp`` in ms from the first
request, ``input_length``, ``output_length``, ``hash_ids``) with prefixscope's own fields
under ``prefixscope_bundle`` (`findings.bundle` writes them; docs/bundle.md). A line
becomes a `Request` with no body: `block_hashes` = ``hash_ids`` (16-token blocks, the
last one partial), the usage as the source log reported it (not the trace's lengths),
the time, session, model, endpoint and backend (as ``channel``); the source's request id
is `native_id` and the record key, so ingesting a bundle twice stores each request once.
The segments and the ledger's labels stay in `metadata` (``segments``, ``ledger``).

The bundle's ``evidence.json`` is read by ``prefixscope report`` itself, not here
(`is_companion`): a directory walk passes it over.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from prefixscope.ingest.normalize.fields import to_int
from prefixscope.ingest.readers import BadRecord
from prefixscope.ingest.readers.json import iter_json_records
from prefixscope.ingest.source import Probe, Source
from prefixscope.model import Record, Request, Skip, Usage

NAME = "bundle"
DESCRIPTION = "prefixscope export --bundle: hashed requests (no text) with usage and causes"

MARK = "prefixscope_bundle"
BLOCK_SIZE = 16
EVIDENCE_FILE = "evidence.json"
_ENDPOINTS = ("anthropic-messages", "openai-chat", "openai-responses", "unknown")


def sniff(probe: Probe) -> bool:
    first = probe.first_line
    return first is not None and isinstance(first.get(MARK), dict) \
        and isinstance(first.get("hash_ids"), list)


def is_companion(path: Path) -> bool:
    """The evidence file beside a bundle's requests.jsonl (read by report, not ingest)."""
    return path.name == EVIDENCE_FILE and (path.parent / "requests.jsonl").is_file()


def parse(source: Source, probe: Probe) -> Iterator[Record | Skip]:
    for place, rec in iter_json_records(source, probe):
        if isinstance(rec, BadRecord):
            yield Skip(place, str(rec))
            continue
        fields = rec.get(MARK) if isinstance(rec, dict) else None
        if not isinstance(fields, dict) or not isinstance(fields.get("id"), str):
            yield Skip(place, f"not a bundle line (no `{MARK}` object with an `id`)")
            continue
        hashes = rec.get("hash_ids")
        if not isinstance(hashes, list) or not all(
                isinstance(h, int) and not isinstance(h, bool) and 0 <= h < 1 << 63
                for h in hashes):
            yield Skip(place, "`hash_ids` is not a list of non-negative 64-bit integers")
            continue
        yield _record(place, fields, hashes)


def _record(place: int, fields: dict[str, Any], hashes: list[int]) -> Record:
    given = fields.get("usage")
    usage: dict[str, Any] = given if isinstance(given, dict) else {}
    endpoint = fields.get("endpoint")
    metadata: dict[str, Any] = {name: fields[name] for name in
                                ("segments", "ledger", "rendered_tokens") if name in fields}
    request = Request(
        id="", source_format="", source_file="", source_line=place,
        timestamp=_time(fields.get("time")),
        endpoint=endpoint if endpoint in _ENDPOINTS else "unknown",
        model=_text(fields.get("model")),
        session_key=_text(fields.get("session")),
        session_key_source="bundle.session" if _text(fields.get("session")) else None,
        channel=_text(fields.get("backend")),
        native_id=fields["id"],
        usage=Usage(prompt_tokens=to_int(usage.get("prompt_tokens")),
                    cached_tokens=to_int(usage.get("cached_tokens")),
                    cache_write_tokens=to_int(usage.get("cache_write_tokens")),
                    cache_write_1h_tokens=to_int(usage.get("cache_write_1h_tokens")),
                    output_tokens=to_int(usage.get("output_tokens")),
                    semantics=_text(usage.get("semantics"))),
        block_hashes=tuple(hashes) or None,
        block_size=BLOCK_SIZE if hashes else None,
        metadata=metadata,
    )
    return Record(request=request, key=f"bundle:{fields['id']}")


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None
