"""JSON documents and JSON lines: every record with its place, bad lines reported in place.

Most formats arrive as JSON lines (one record a line, a collector or logger appending)
or as one JSON document (an API page, a UI download, an array of records). Both are
read here the same way for every format, and so is the byte-order mark a Windows
editor leaves in front of the first line.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

import orjson
from orjson import OPT_NON_STR_KEYS

from prefixscope.ingest.readers import BadRecord, bounded_lines
from prefixscope.ingest.source import DECOMPRESS_ERRORS, Probe, Source
from prefixscope.model.bodytext import SPLIT_FIELDS, keep, write_body
from prefixscope.model.hashing import MAX_JSON_DEPTH, unwritable

UTF8_BOM = b"\xef\xbb\xbf"
# Non-blank lines looked at to find the first record of a JSON-lines file.
JSONL_PROBE_LINES = 20

_NOT_JSON = object()
# A head line longer than this is kept for detection as a sample (`detection_sample`): the
# parsed records of the first lines live as long as the file is read, beside the parser's
# own copy, and a line of 10^5 one-letter content blocks parses to 11x its bytes.
SAMPLE_LINE_BYTES = 1 << 20
SAMPLE_ITEMS = 64


def json_lines(source: Source, *, drain: bool = True,
               ends: bool = False) -> Iterator[tuple[int, bytes | None]]:
    """(1-based line number, line without surrounding white space) of every non-blank line;
    a UTF-8 byte-order mark in front of line 1 is dropped. A line longer than
    ``source.max_line_bytes`` is (line number, None), read past in bounded pieces (not
    `drain`: the lines end after it).

    `ends`: a line whose only surrounding white space is its final newline is given with
    it (``b'{...}\\n'``, not a copy without it): for a reader that parses the line, which
    JSON reads the same with a newline after the value. A captured request is a line of
    hundreds of KB, and the copy cost as much as a tenth of parsing it."""
    with source.open_binary() as fh:
        for lineno, raw in enumerate(bounded_lines(fh, source.max_line_bytes, drain=drain),
                                     start=1):
            if raw is None:
                yield lineno, None
                continue
            if ends and lineno > 1 and _bare(raw):
                yield lineno, raw  # == raw.strip() + b"\n": non-blank, no BOM to drop
                continue
            line = raw.strip()
            if lineno == 1:
                line = line.lstrip(UTF8_BOM)
            if line:
                yield lineno, line


# What ``bytes.strip()`` removes (it strips ASCII white space, JSON's four and \v \f).
_STRIPPED = frozenset(b" \t\n\r\x0b\x0c")


def _bare(raw: bytes) -> bool:
    """`raw` is ``raw.strip()`` followed by one ``\\n``: it ends with a newline, and
    neither its first byte nor the one before the newline is white space."""
    return (len(raw) > 1 and raw[-1] == 0x0A and raw[-2] not in _STRIPPED
            and raw[0] not in _STRIPPED)


def _head_lines(source: Source) -> Generator[tuple[int, bytes | None], None, None]:
    """`json_lines` for detection: a gzip cut short ends the lines there (the parser reports
    the cut; detection looks at what was read before it), and so does a line over the
    limit (None)."""
    try:
        yield from json_lines(source, drain=False)
    except DECOMPRESS_ERRORS:
        return


def detection_sample(value: Any, keep: int = SAMPLE_ITEMS) -> Any:
    """`value` with every list cut to its first `keep` items, at every level (objects and
    strings as they are, shared): what a sniffer looks at (keys, types, the first
    elements) without holding a huge record. Lists past 64 levels are shared, not cut."""
    def cut(item: Any, depth: int) -> Any:
        if depth > 64:
            return item
        if isinstance(item, list):
            return [cut(x, depth + 1) for x in item[:keep]]
        if isinstance(item, dict):
            return {k: cut(v, depth + 1) for k, v in item.items()}
        return item
    return cut(value, 0)


def _kept(line: bytes, value: Any) -> Any:
    """What detection keeps of a parsed head line: all of it, or a sample of a long one."""
    return value if len(line) <= SAMPLE_LINE_BYTES else detection_sample(value)


def first_json_line(source: Source, *, containers_only: bool = False) -> tuple[bool, Any]:
    """(found, value) of the first JSON-lines record (a line up to
    ``source.max_line_bytes``).

    Looks at the first `JSONL_PROBE_LINES` non-blank lines, so that a file whose
    first line is truncated or garbage is still read as JSON lines (the bad line
    becomes a reported skip). A JSON object or array is preferred; a bare scalar on
    the very first line is accepted unless `containers_only`.
    """
    for seen, (_, line) in enumerate(_head_lines(source), start=1):
        try:
            value = _NOT_JSON if line is None else orjson.loads(line)
        except orjson.JSONDecodeError:
            value = _NOT_JSON
        if isinstance(value, dict | list):
            return True, _kept(line, value)  # type: ignore[arg-type]
        if seen == 1 and value is not _NOT_JSON and not containers_only:
            return True, value
        if seen >= JSONL_PROBE_LINES:
            break
    return False, None


def first_line_too_long(source: Source) -> bool:
    """The first non-blank line is longer than ``source.max_line_bytes`` (read no further)."""
    lines = _head_lines(source)
    try:
        first = next(lines, None)
    finally:
        lines.close()
    return first is not None and first[1] is None


def is_json_lines(source: Source) -> bool:
    """True when the first non-blank line is a whole JSON object or array and another
    non-blank line follows: JSON lines for sure (such content can never parse as one
    document), found without reading the file whole."""
    lines = _head_lines(source)
    try:
        first = next(lines, None)
        if first is None or first[1] is None:
            return False
        try:
            value = orjson.loads(first[1])
        except orjson.JSONDecodeError:
            return False
        return isinstance(value, dict | list) and next(lines, None) is not None
    finally:
        lines.close()


def head_json_records(source: Source, limit: int = JSONL_PROBE_LINES) -> list[Any]:
    """The JSON values of the first `limit` non-blank lines that parse (bad lines left out):
    what detection looks at when a log's first record does not say what the log is."""
    values: list[Any] = []
    for seen, (_, line) in enumerate(_head_lines(source), start=1):
        try:
            if line is not None:
                values.append(_kept(line, orjson.loads(line)))
        except orjson.JSONDecodeError:
            pass
        if seen >= limit:
            break
    return values


def iter_json_records(source: Source, probe_: Probe, *,
                      bodies: bool = False) -> Iterator[tuple[int, Any]]:
    """Yield (place, record) for a JSON array / object / JSON-lines source.

    A JSON-lines line that does not parse yields (line, BadRecord(reason)) so the
    caller can report it and go on; so does a record prefixscope could not store
    (nested deeper than `MAX_JSON_DEPTH`: orjson reads 1024 levels and writes 254), which
    would otherwise stop its file or the whole ingest where it is hashed or written.

    `bodies`: a line's record is a request body, or holds one as a top-level value, that
    its format keeps as it is (raw captures): the depth test writes that body as the store
    keeps it (`_written_record`), and ingest takes that text instead of writing the body a
    second time.
    """
    if probe_.kind == "json":
        doc = probe_.document
        if doc is None:
            doc = orjson.loads(source.read_bytes())
        if isinstance(doc, list):
            for place, element in enumerate(doc, start=1):
                why = unwritable(element)
                yield place, BadRecord(why) if why else element
        else:
            why = unwritable(doc)
            yield 1, BadRecord(why) if why else doc
        return
    for lineno, line in json_lines(source, ends=True):
        if line is None:
            yield lineno, BadRecord(f"line longer than --max-line-bytes "
                                    f"({source.max_line_bytes:,} bytes)")
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            try:  # the reason names its place in the line without its newline, as always
                value = orjson.loads(line.strip())
            except orjson.JSONDecodeError as exc:
                yield lineno, BadRecord(f"invalid JSON: {exc}")
                continue
        why = _written_record(value) if bodies else _too_deep(line, value)
        yield lineno, BadRecord(why) if why else value


# A line this long holds more than MAX_JSON_DEPTH brackets but for a freak (a captured
# request has thousands): counting them would only delay the exact test.
_COUNT_BELOW = 1 << 16


def _written_record(value: Any) -> str:
    """`unwritable(value)`, found by writing its request body as the store keeps it
    (`bodytext.write_body`, held for ingest: `bodytext.keep`) and the rest of it: `value`
    itself when it is a body (a list-valued `SPLIT_FIELDS` entry), else the first of its
    top-level values that is one, one level down, the other values as a dict of them, as
    deep as in `value`. Each of its values is in one of those pieces, written at its depth
    in `value`, so one fails exactly when writing `value` would: its reason is
    `unwritable(value)`'s, as without the body written."""
    if not isinstance(value, dict):
        return unwritable(value)
    body: Any = value
    depth = 0
    if not _is_body(value):
        body = next((v for v in value.values() if _is_body(v)), None)
        if body is None:
            return unwritable(value)
        depth = 1
    try:
        if depth:  # the record's other values, in a dict as deep as the record
            orjson.dumps({k: v for k, v in value.items() if v is not body},
                         option=OPT_NON_STR_KEYS, default=str)
        keep(body, write_body(body, depth))
    except TypeError:
        why = unwritable(value)
        assert why, "a piece of a record failed to serialize but the record did not"
        return why
    return ""


def _is_body(value: Any) -> bool:
    return isinstance(value, dict) and any(isinstance(value.get(k), list) for k in SPLIT_FIELDS)


def _too_deep(line: bytes, value: Any) -> str:
    """`unwritable(value)` of the record `line` parsed to, tested only when it can fail: a
    line with fewer brackets than MAX_JSON_DEPTH cannot be nested deeper (counting them
    is C time, a short line's test skipped)."""
    if len(line) < _COUNT_BELOW and line.count(b"[") + line.count(b"{") <= MAX_JSON_DEPTH:
        return ""
    return unwritable(value)
