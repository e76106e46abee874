"""Find the request a command names: a store id (or prefix, or native id) or a file.

`render`, `diff` and friends accept either a request in the store or a file holding
one request: any log format ingest understands (if the file holds exactly one
request with a body), or a bare request body (Anthropic Messages, OpenAI Chat or
Responses JSON).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from .ingest import read_requests
from .ingest.fields import detect_endpoint, loads_deep
from .model import Request

if TYPE_CHECKING:
    from .store import Store


class LookupError_(LookupError):
    """The reference names no usable request; the message says why, in one line."""


def request_from_file(path: Path) -> Request:
    """The one request a file holds (a log of any format, or a bare body)."""
    try:
        requests, _ = read_requests(path)
    except ValueError:
        requests = []
    except OSError as exc:
        raise LookupError_(f"cannot read {path}: {exc.strerror or exc}") from None
    with_body = [r for r in requests if r.body is not None]
    if len(with_body) == 1:
        return with_body[0]
    if len(with_body) > 1:
        raise LookupError_(f"{path} holds {len(with_body)} requests: ingest it and name one "
                           "by id (prefixscope ingest FILE; prefixscope sql \"select id ...\")")
    try:
        body = loads_deep(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        body = None
    if isinstance(body, dict) and detect_endpoint(body) != "unknown":
        return request_from_body(body, id=path.name, source_file=str(path))
    raise LookupError_(f"{path} holds no request body prefixscope can read")


def request_from_body(body: dict[str, Any], *, id: str, source_file: str | None = None,
                      endpoint: str | None = None, gateway: str | None = None) -> Request:
    """A `Request` for a bare request body; the endpoint is detected from its keys."""
    model = body.get("model")
    return Request(id=id, source_format="body", source_file=source_file or id,
                   source_line=None, timestamp=None,
                   endpoint=endpoint or detect_endpoint(body), gateway=gateway,
                   model=model if isinstance(model, str) else None, body=body)


def resolve_request(ref: str, store: Store | None) -> Request:
    """A request from a file path, or from the store by id / id prefix / native id."""
    path = Path(ref)
    if path.is_file():
        return request_from_file(path)
    if store is None:
        raise LookupError_(f"{ref} is not a file, and no store was given (--store)")
    try:
        return store.get(store.resolve_id(ref))
    except KeyError as exc:
        raise LookupError_(str(exc.args[0])) from None
