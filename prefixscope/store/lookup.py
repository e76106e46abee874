"""Find the request a command names: a store id (or prefix, or native id) or a file.

`render`, `diff` and friends accept either a request in the store or a file holding
one request: any log format ingest understands (if the file holds exactly one
request with a body), or a bare request body (Anthropic Messages, OpenAI Chat or
Responses JSON).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefixscope.ingest import UnreadableFile, read_requests_from
from prefixscope.ingest.normalize.fields import loads_deep
from prefixscope.ingest.source import DECODE_ERRORS, DECOMPRESS_ERRORS, Source
from prefixscope.model import Request
from prefixscope.model.keys import detect_endpoint

if TYPE_CHECKING:
    from prefixscope.store import Store


class LookupError_(LookupError):
    """The reference names no usable request; the message says why, in one line."""


def request_from_file(path: Path) -> Request:
    """The one request a file (or ``-``, stdin) holds: a log of any format, or a bare body."""
    source = Source.from_stdin() if str(path) == "-" else Source.from_path(path)
    try:
        return _request_from_source(source, path)
    finally:
        source.close()


def _request_from_source(source: Source, path: Path) -> Request:
    name = "stdin" if source.path is None else str(path)
    unreadable = ""
    try:
        requests, _ = read_requests_from(source)
    except UnreadableFile as exc:
        requests, unreadable = [], str(exc)
    except ValueError:  # no log format recognizes it: maybe a bare body
        requests = []
    except OSError as exc:
        raise LookupError_(f"cannot read {name}: {exc.strerror or exc}") from None
    except DECOMPRESS_ERRORS as exc:
        raise LookupError_(f"cannot read {name}: damaged gzip: {exc}") from None
    with_body = [r for r in requests if r.body is not None]
    if len(with_body) == 1:
        return with_body[0]
    if len(with_body) > 1:
        raise LookupError_(f"{name} holds {len(with_body)} requests: ingest it and name one "
                           "by id (prefixscope ingest FILE; prefixscope sql \"select id ...\")")
    if requests:
        fmt = requests[0].source_format
        raise LookupError_(f"{name} holds {len(requests)} {fmt} request(s) but the log records "
                           "no request body: nothing to render")
    try:
        body = loads_deep(source.read_bytes())
    except DECODE_ERRORS:  # orjson.JSONDecodeError is a ValueError
        body = None
    if isinstance(body, dict) and detect_endpoint(body) != "unknown":
        return request_from_body(body, id=path.name if source.path else "stdin",
                                 source_file=name)
    if unreadable:
        raise LookupError_(f"cannot read {name}: {unreadable}")
    raise LookupError_(f"{name} holds no request body prefixscope can read")


def request_from_body(body: dict[str, Any], *, id: str, source_file: str | None = None,
                      endpoint: str | None = None, gateway: str | None = None) -> Request:
    """A `Request` for a bare request body; the endpoint is detected from its keys."""
    model = body.get("model")
    return Request(id=id, source_format="body", source_file=source_file or id,
                   source_line=None, timestamp=None,
                   endpoint=endpoint or detect_endpoint(body), gateway=gateway,
                   model=model if isinstance(model, str) else None, body=body)


def resolve_request(ref: str, store: Store | None) -> Request:
    """A request from a file path (``-``: stdin), or from the store by id / prefix / native id."""
    if not ref.strip():
        raise LookupError_("empty request reference: give a request id or a file")
    path = Path(ref)
    if ref == "-" or path.is_file():
        return request_from_file(path)
    if path.is_dir():
        raise LookupError_(f"{ref} is a directory: give a request id, or a file holding one "
                           "request (to ingest logs: prefixscope ingest DIR)")
    if store is None:
        raise LookupError_(f"{ref} is neither a file nor, without a store, a request id "
                           "(give --store, or run prefixscope ingest first)")
    try:
        return store.get(store.resolve_id(ref))
    except KeyError as exc:
        raise LookupError_(str(exc.args[0])) from None
