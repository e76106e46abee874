"""OpenHands completion logs (`log_completions`): one JSON file per LLM call, the request as sent.

The OpenHands SDK's `LLM(log_completions=True, log_completions_folder=DIR)` (and the
SWE-bench evaluation's ``llm_completions/<instance>/``) writes one file per call:
`Telemetry.log_llm_call` (``openhands-sdk/openhands/sdk/llm/utils/telemetry.py``) dumps the
request context `LLM._prepare_completion_params` built -- ``messages`` (formatted, as
passed to LiteLLM), ``tools``, ``kwargs`` (the call's options), ``context_window`` -- plus
``response`` (LiteLLM's `ModelResponse`, OpenAI Chat form), ``cost``, ``timestamp`` (epoch
seconds, when the response arrived) and ``latency_sec``; ``raw_messages`` / ``raw_response``
when tool calls were mocked into the prompt (the non-function-calling path), and
``usage_summary`` in newer versions. The file is named ``<model with / as __>-<epoch
seconds, 3 decimals>[-<4 hex>].json``; a failed call is ``...-error.json`` with ``error``
and no ``response``. A log of the Responses API path (``llm_path: "responses"``,
``instructions`` + ``input``) is one counted skip: not read yet.

Guarantees:

* One file is one request. Body: ``{"messages", "tools", <the other kwargs>}`` in OpenAI
  Chat form, endpoint ``openai-chat``: the messages as logged, the tools that reached the
  provider (``kwargs.tools`` when present, ``None`` there meaning none were sent; newer
  versions drop that duplicate and keep the top-level ``tools``, used when they are OpenAI
  tool schemas, else `metadata["tools_missing"]`), then the kwargs but ``extra_body``
  (LiteLLM proxy metadata, kept as `metadata["extra_body"]`, not sent to the model).
* Usage from ``response.usage`` (`usage_auto`: LiteLLM's OpenAI convention, DeepSeek's and
  Anthropic's own cache fields included); the file's ``cost`` is `metadata["cost"]`.
* `model` from the response (``litellm_proxy/...`` as LiteLLM returned it), else
  ``kwargs.model``; `native_id` the response's ``id``; `output` the model's message (the
  ``raw_response``'s when tool calls were mocked, the text the model wrote).
* A folder is one conversation: session ``openhands-completions:<folder name>:<its first
  call's time>`` (``openhands-completions.folder``), the time as the earliest file name in
  the folder spells it. Evaluation runs reuse the instance folders' names, and a run's first
  call is its own, so two runs ingested into one store stay two sessions, while a run read
  again (or a call read after the rest) keys the same. Calls are ordered by their
  ``timestamp``, which is the order of the file names.
* A failed call (``error``) and a file without a ``response`` object or a ``messages`` list
  are one counted skip each, with the reason.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prefixscope.ingest.normalize.fields import as_object, dig, first_present, parse_time, to_float
from prefixscope.ingest.normalize.usage import usage_auto
from prefixscope.ingest.source import Probe, Source
from prefixscope.model import Record, Request, Skip

NAME = "openhands-completions"
DESCRIPTION = "OpenHands completion logs (log_completions): one file per LLM call, as sent"

_PREFIX = "openhands-completions"
# `Telemetry.log_llm_call`'s file name: <model>-<epoch seconds, 3 decimals>[-<4 hex>], and
# `-error` for a failed call.
_FILE_NAME = re.compile(r"-(\d+\.\d{3})(?:-[0-9a-f]{4})?(?:-error)?\.json(?:\.gz)?$")


def sniff(probe: Probe) -> bool:
    if probe.kind != "json":
        return False
    doc = probe.document
    return (isinstance(doc, dict) and isinstance(doc.get("kwargs"), dict)
            and "context_window" in doc and ("messages" in doc or "input" in doc)
            and ("response" in doc or "error" in doc))


def parse(source: Source, probe: Probe) -> Iterator[Record | Skip]:
    doc = probe.document
    if not isinstance(doc, dict) or not isinstance(doc.get("kwargs"), dict):
        yield Skip(None, "not an OpenHands completion log: one JSON object with `kwargs` a file")
        return
    if doc.get("llm_path") == "responses" or ("input" in doc and "messages" not in doc):
        yield Skip(None, "OpenHands completion log of the Responses API path: not read yet")
        return
    if "error" in doc and not isinstance(doc.get("response"), dict):
        error = as_object(doc.get("error"))
        yield Skip(None, f"OpenHands completion log of a failed call "
                         f"({error.get('type') or 'error'}): no response, no usage")
        return
    messages = doc.get("messages")
    response = doc.get("response")
    if not isinstance(messages, list) or not isinstance(response, dict):
        yield Skip(None, "OpenHands completion log without a `messages` list and a "
                         "`response` object")
        return
    yield _record(source, doc, messages, response)


def _record(source: Source, doc: dict[str, Any], messages: list[Any],
            response: dict[str, Any]) -> Record:
    kwargs: dict[str, Any] = doc["kwargs"]
    metadata: dict[str, Any] = {"body_from": "OpenHands completion log: messages, tools, kwargs"}
    body: dict[str, Any] = {"messages": messages}
    tools = kwargs["tools"] if "tools" in kwargs else doc.get("tools")
    if "tools" not in kwargs and tools and not _openai_tools(tools):
        metadata["tools_missing"] = "the log holds the SDK's tool definitions, not the schemas sent"
    elif tools:
        body["tools"] = tools
    body.update((k, v) for k, v in kwargs.items() if k not in ("tools", "extra_body"))
    if kwargs.get("extra_body") is not None:
        metadata["extra_body"] = kwargs["extra_body"]
    cost = to_float(doc.get("cost"))
    if cost is not None:
        metadata["cost"] = cost
    for key in ("context_window", "latency_sec"):
        if doc.get(key) is not None:
            metadata[key] = doc[key]
    reply = as_object(doc.get("raw_response")) or response
    native_id = response.get("id")
    session_key = _session_key(source)
    request = Request(
        id="", source_format="", source_file="", source_line=None, source_position=0,
        timestamp=parse_time(first_present(doc.get("timestamp"), response.get("created"))),
        endpoint="openai-chat",
        model=first_present(response.get("model"), kwargs.get("model")),
        session_key=session_key, session_key_source="openhands-completions.folder",
        client="openhands",
        native_id=native_id if isinstance(native_id, str) else None,
        body=body,
        output=as_object(dig(reply, "choices", 0, "message")) or None,
        usage=usage_auto(response.get("usage"), "openai-chat"),
        metadata=metadata,
    )
    return Record(request=request, key=f"{session_key}:{native_id or Path(source.name).name}")


def _openai_tools(tools: Any) -> bool:
    return isinstance(tools, list) and all(
        isinstance(t, dict) and t.get("type") == "function" and isinstance(t.get("function"), dict)
        for t in tools)


def _session_key(source: Source) -> str:
    if source.path is None:
        return f"{_PREFIX}:stdin"
    folder = source.path.resolve().parent
    try:
        first = _first_call(folder, os.stat(folder).st_mtime_ns)
    except OSError:
        first = None
    return f"{_PREFIX}:{folder.name}" + (f":{first}" if first else "")


@functools.lru_cache(maxsize=16)
def _first_call(folder: Path, listed: int) -> str | None:
    """The earliest call time the folder's file names hold, as spelled there; None when no
    name is the SDK's (renamed files: the folder name alone keys the session).

    Kept by the folder and its modification time (`listed`: a file added, removed or
    renamed changes it): a folder is listed once for all its files, not once per file --
    a long session's folder holds thousands of calls, and listing it per file made its
    read quadratic (3,000 files: 7.6 s of keys)."""
    stamps = [m.group(1) for name in os.listdir(folder) if (m := _FILE_NAME.search(name))]
    return min(stamps, key=float) if stamps else None
