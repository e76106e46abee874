"""OpenRouter generation records (``GET /api/v1/generation?id=…``), kept one per call.

OpenRouter routes each call to one of a model's providers and keeps a record of every
generation: which provider served it (``provider_name``), its usage in the provider's own
tokens and what it cost. A script that saves those records (the response bodies, one per
line, or a list of them) is the log of an OpenRouter user who has no proxy capture: the
only place that names the provider of a streamed call, whose chunks may carry none once a
client library has read them. Each provider keeps a cache of its own, so the provider is
the call's backend (docs/report.md, sessions that hop between backends).

Accepted containers: JSON lines or a JSON array of the endpoint's response (``{"data":
{…}}``) or of its ``data`` object alone, or one ``{"data": [ … ]}`` page.

Guarantees:

* One request per record; key and `native_id` = the generation ``id`` (``gen-…``), so a
  record saved twice is one call. `model` = ``model`` (OpenRouter's slug,
  ``anthropic/claude-sonnet-4.5``), `timestamp` = ``created_at``.
* Backend: ``provider_name`` (``"Anthropic"``, ``"Amazon Bedrock"``, ``"Google"``) as
  ``metadata.provider`` (`Store.usage_records`); `channel` ``openrouter``.
* Usage (semantics ``openrouter``), in the provider's own tokens: `prompt_tokens` =
  ``native_tokens_prompt``, which counts the cached tokens (OpenRouter's usage accounting:
  a call that read 18,041 of 18,054 tokens from cache reports 18,054), `cached_tokens` =
  ``native_tokens_cached``, `output_tokens` = ``native_tokens_completion``. The record has
  no cache-write count (``cache_discount`` is dollars): `cache_write_tokens` stays None.
  ``tokens_prompt`` / ``tokens_completion`` (OpenRouter's normalized count, not what the
  provider billed) are kept in metadata.
* No body and no session id: `endpoint` ``unknown``; `user` = ``external_user`` (the
  request's ``user``), `client` = ``app_id``; sessions are threaded by growing prompt
  within (user, client, model) (docs/store.md#sessions).
* Also kept: ``streamed``, ``cancelled``, ``finish_reason``, ``total_cost``,
  ``cache_discount``, ``latency`` / ``generation_time`` (ms), ``origin``, ``is_byok``.
  A record without an ``id`` is a skip.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prefixscope.ingest.normalize.fields import parse_time, to_bool, to_int, to_text
from prefixscope.ingest.readers import BadRecord
from prefixscope.ingest.readers.json import iter_json_records
from prefixscope.ingest.source import Probe, Source
from prefixscope.model import Record, Request, Skip, Usage

NAME = "openrouter"
DESCRIPTION = ("OpenRouter generation records (GET /api/v1/generation, saved one per call): "
               "usage and the provider that served each call")

# Keys every generation record has and no other format's records have together.
_SIGNATURE = frozenset({"provider_name", "native_tokens_prompt", "tokens_prompt"})
_METADATA_KEYS = ("streamed", "cancelled", "finish_reason", "native_finish_reason",
                  "total_cost", "cache_discount", "upstream_inference_cost", "latency",
                  "generation_time", "origin", "is_byok", "api_type", "tokens_prompt",
                  "tokens_completion", "native_tokens_reasoning", "upstream_id")


def _generations(value: Any) -> list[Any]:
    """The generation objects in one record: a response ``{"data": {…}}``, a page
    ``{"data": [ … ]}``, or the object itself."""
    if isinstance(value, dict) and "data" in value and not _SIGNATURE <= value.keys():
        data = value["data"]
        return data if isinstance(data, list) else [data]
    return [value]


def sniff(probe: Probe) -> bool:
    first = probe.first_dict
    found = _generations(first)
    return bool(found) and isinstance(found[0], dict) and _SIGNATURE <= found[0].keys()


def parse(source: Source, probe: Probe) -> Iterator[Record | Skip]:
    for place, rec in iter_json_records(source, probe):
        if isinstance(rec, BadRecord):
            yield Skip(place, str(rec))
            continue
        for generation in _generations(rec):
            if not isinstance(generation, dict):
                yield Skip(place, f"a JSON {type(generation).__name__}, not a generation "
                                  "record")
            elif to_text(generation.get("id")) is None:
                yield Skip(place, "generation record without `id`")
            else:
                yield _record(place, generation)


def openrouter_usage(g: dict[str, Any]) -> Usage:
    return Usage(prompt_tokens=to_int(g.get("native_tokens_prompt")),
                 cached_tokens=to_int(g.get("native_tokens_cached")),
                 output_tokens=to_int(g.get("native_tokens_completion")),
                 semantics="openrouter")


def _record(place: int, g: dict[str, Any]) -> Record:
    gen_id = str(to_text(g.get("id")))
    metadata: dict[str, Any] = {k: g[k] for k in _METADATA_KEYS if g.get(k) is not None}
    provider = to_text(g.get("provider_name"))
    if provider:
        metadata["provider"] = provider
    for key in ("streamed", "cancelled", "is_byok"):
        if key in metadata:
            metadata[key] = to_bool(metadata[key])
    request = Request(
        id="", source_format="", source_file="", source_line=place,
        timestamp=parse_time(g.get("created_at")),
        endpoint="unknown",
        model=to_text(g.get("model")),
        user=to_text(g.get("external_user")),
        client=to_text(g.get("app_id")),
        channel="openrouter",
        native_id=gen_id,
        usage=openrouter_usage(g),
        metadata=metadata,
    )
    return Record(request=request, key=f"generation:{gen_id}")
