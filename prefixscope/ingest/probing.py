"""`probe`: the first look at a `Source` that format detection reads, made with the readers.

The probe uses the same container readers as the parsers (CSV header, SQLite tables,
first JSON line), so detection and parsing never disagree about a file. It lives apart
from `prefixscope.ingest.source` because the readers take a `Source` and a `Probe`: the
values sit below the readers, the probe above them, and no import runs in a circle.
"""

from __future__ import annotations

import sqlite3

import orjson

from prefixscope.ingest.readers import csv as csv_reader
from prefixscope.ingest.readers.json import (
    JSONL_PROBE_LINES,
    UTF8_BOM,
    first_json_line,
    first_line_too_long,
    head_json_records,
    is_json_lines,
)
from prefixscope.ingest.readers.sqlite import SQLITE_MAGIC, read_tables
from prefixscope.ingest.source import DECOMPRESS_ERRORS, PROBE_BYTES, Probe, Source

DUCKDB_MAGIC = b"DUCK"  # at bytes 8..12 of a DuckDB database file
# Whole-document JSON parsing is used for probing only below this size; larger
# files are probed by their first line (JSON lines) or streamed by the parser.
MAX_DOCUMENT_PROBE = 512 << 20
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
BINARY_PROBE_BYTES = 8000  # as git: a NUL byte in the first 8000 bytes means binary


def probe(source: Source) -> Probe:
    """Classify the container and parse just enough of it to detect the format."""
    head = source.head
    if head.startswith(SQLITE_MAGIC):
        try:
            return Probe(kind="sqlite", tables=read_tables(source.local_path()))
        except sqlite3.Error as exc:
            return Probe(kind="sqlite", problem=f"unreadable SQLite database: {exc}")
    if head.startswith(UTF16_BOMS):
        return Probe(kind="text", problem="UTF-16 text: convert it to UTF-8 first "
                                          "(iconv -f UTF-16 -t UTF-8)")
    if head[8:12] == DUCKDB_MAGIC:
        return Probe(kind="binary", problem="a DuckDB database, not a log (a prefixscope "
                                            "store is read with --store)")
    if _looks_binary(head):
        return Probe(kind="binary")
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff")
    stripped = text.lstrip()
    if not stripped:
        return Probe(kind="empty", text=text)
    if stripped[0] in "[{":
        document_error = ""
        cut: Exception | None = None
        too_large = len(head) == PROBE_BYTES and source.size > MAX_DOCUMENT_PROBE
        # JSON lines (a whole record on line 1, more lines after it) is never one document:
        # it is not read whole to find that out (a log of GBs would be)
        if not too_large and not (len(head) == PROBE_BYTES and is_json_lines(source)):
            try:
                data = source.read_at_most(MAX_DOCUMENT_PROBE)  # None: a gzip inflating past it
                doc = None if data is None else orjson.loads(data.lstrip(UTF8_BOM))
            except orjson.JSONDecodeError as exc:
                document_error = str(exc)
            except DECOMPRESS_ERRORS as exc:
                # A damaged gzip: its readable start may still be JSON lines.
                document_error, cut = f"damaged gzip: {exc}", exc
            else:
                if data is None:
                    too_large = True
                elif isinstance(doc, list):
                    first = next((x for x in doc if isinstance(x, dict)), doc[0] if doc else None)
                    return Probe(kind="json", document=doc, first=first, text=text,
                                 records=doc[:JSONL_PROBE_LINES])
                else:
                    return Probe(kind="json", document=doc, first=doc, text=text,
                                 records=[doc])
        found, first = first_json_line(source)
        if found:
            return Probe(kind="jsonl", first=first, text=text,
                         records=head_json_records(source))
        if cut is not None:
            raise cut  # no record before the cut: the file cannot be read ("cannot read: ...")
        if too_large:
            problem = (f"a JSON document over {MAX_DOCUMENT_PROBE >> 20} MB that is not JSON "
                       "lines: too large to read whole (split it, e.g. jq -c '.[]' FILE)")
        else:
            hint = " (truncated?)" if "unexpected end of data" in document_error else ""
            problem = (f"invalid JSON document{hint}: {document_error} (read as JSON: the "
                       f"file starts with {stripped[0]!r})")
        return Probe(kind="text", text=text, problem=problem)
    header = csv_reader.header(stripped.split("\n", 1)[0])
    if header:
        return Probe(kind="csv", header=header, text=text)
    # JSON lines whose first line is damaged (a log cut at its start, a stray banner):
    # the records after it are still readable, and the parser reports the bad line.
    found, first = first_json_line(source, containers_only=True)
    if found:
        return Probe(kind="jsonl", first=first, text=text, records=head_json_records(source))
    if first_line_too_long(source):
        return Probe(kind="text", text=text, problem="its first line is longer than "
                     f"--max-line-bytes ({source.max_line_bytes:,} bytes)")
    return Probe(kind="text", text=text)


def _looks_binary(head: bytes) -> bool:
    """NUL bytes near the start: binary. A zero-filled tail (a log cut by a crash, the
    file system's preallocated block) does not make a text log binary."""
    return b"\x00" in head.rstrip(b"\x00")[:BINARY_PROBE_BYTES]
