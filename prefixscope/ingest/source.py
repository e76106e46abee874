"""Reading log files the same way for every format: paths, gzip, stdin, probing.

A `Source` is one input file (or stdin) with transparent gzip decompression; a
`Probe` is what format detection looks at: the container kind (JSON document,
JSON lines, CSV, SQLite database, SSE text) and the first record. Formats are
detected from this content, never from the file name alone.

`iter_json_records`, `iter_csv_rows` and `iter_sqlite_rows` give every format the
same numbering of records (1-based line for JSONL, row for CSV/SQLite, element
index for a JSON array), so skips can be reported with a place.
"""

from __future__ import annotations

import csv
import gzip
import io
import os
import re
import sqlite3
import sys
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import orjson

SQLITE_MAGIC = b"SQLite format 3\x00"
DUCKDB_MAGIC = b"DUCK"  # at bytes 8..12 of a DuckDB database file
GZIP_MAGIC = b"\x1f\x8b"
PROBE_BYTES = 1 << 16
# Whole-document JSON parsing is used for probing only below this size; larger
# files are probed by their first line (JSON lines) or streamed by the parser.
MAX_DOCUMENT_PROBE = 512 << 20
# Non-blank lines looked at to find the first record of a JSON-lines file.
JSONL_PROBE_LINES = 20
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
BINARY_PROBE_BYTES = 8000  # as git: a NUL byte in the first 8000 bytes means binary

# What reading a damaged gzip raises (truncated stream, bad CRC, corrupt deflate data).
DECOMPRESS_ERRORS: tuple[type[Exception], ...] = (EOFError, zlib.error, gzip.BadGzipFile)

csv.field_size_limit(sys.maxsize)


class BadRecord(Exception):
    """Raised by a parser helper for a record that cannot be used; the message is the reason."""


@dataclass
class Source:
    """One input: a file on disk (possibly gzip-compressed) or bytes read from stdin."""

    name: str  # what reports show: the path as given, or "-" for stdin
    path: Path | None = None  # the file on disk, None for stdin
    data: bytes | None = None  # stdin contents (already read)
    _tmp: list[str] = field(default_factory=list, repr=False)

    @classmethod
    def from_path(cls, path: Path) -> Source:
        return cls(name=str(path), path=path)

    @classmethod
    def from_stdin(cls) -> Source:
        return cls(name="-", data=sys.stdin.buffer.read())

    @cached_property
    def compressed(self) -> bool:
        return self._raw_head(2) == GZIP_MAGIC

    def _raw_head(self, n: int) -> bytes:
        if self.data is not None:
            return self.data[:n]
        assert self.path is not None
        with open(self.path, "rb") as fh:
            return fh.read(n)

    def open_binary(self) -> io.BufferedIOBase:
        """A fresh binary stream over the decompressed content."""
        if self.data is not None:
            raw: io.BufferedIOBase = io.BytesIO(self.data)
        else:
            assert self.path is not None
            raw = open(self.path, "rb")  # noqa: SIM115 - returned to the caller
        if self.compressed:
            return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
        return raw

    @cached_property
    def head(self) -> bytes:
        with self.open_binary() as fh:
            return fh.read(PROBE_BYTES)

    def read_bytes(self) -> bytes:
        with self.open_binary() as fh:
            return fh.read()

    @property
    def size(self) -> int:
        if self.data is not None:
            return len(self.data)
        assert self.path is not None
        return self.path.stat().st_size

    def local_path(self) -> Path:
        """A real uncompressed file with this content (a temp copy for stdin / gzip)."""
        if self.path is not None and not self.compressed:
            return self.path
        fd, tmp = tempfile.mkstemp(prefix="prefixscope-", suffix=".tmp")
        with os.fdopen(fd, "wb") as out, self.open_binary() as fh:
            while chunk := fh.read(1 << 20):
                out.write(chunk)
        self._tmp.append(tmp)
        return Path(tmp)

    def sibling(self, name: str) -> Path | None:
        """A file next to this one, if it exists (used for request/response pairs)."""
        if self.path is None:
            return None
        p = self.path.with_name(name)
        return p if p.exists() else None

    def close(self) -> None:
        for tmp in self._tmp:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        self._tmp.clear()


@dataclass
class Probe:
    """What format detection sees of a source."""

    kind: str  # "sqlite" | "json" | "jsonl" | "csv" | "text" | "empty" | "binary"
    document: Any = None  # the whole parsed document (kind "json")
    # The first record: first JSON-lines record, first array element, or the object.
    first: Any = None
    header: list[str] | None = None  # CSV header (kind "csv")
    tables: dict[str, list[str]] = field(default_factory=dict)  # SQLite table -> columns
    text: str = ""  # decoded head of the file
    # Why no container fits, in one line, when the content says what it tried to be
    # (a JSON document that does not parse, UTF-16 text); "" otherwise.
    problem: str = ""

    @property
    def first_dict(self) -> dict[str, Any]:
        return self.first if isinstance(self.first, dict) else {}


def probe(source: Source) -> Probe:
    """Classify the container and parse just enough of it to detect the format."""
    head = source.head
    if head.startswith(SQLITE_MAGIC):
        try:
            return Probe(kind="sqlite", tables=read_sqlite_tables(source.local_path()))
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
        too_large = len(head) == PROBE_BYTES and source.size > MAX_DOCUMENT_PROBE
        if not too_large:
            try:
                doc = orjson.loads(source.read_bytes().lstrip(b"\xef\xbb\xbf"))
            except orjson.JSONDecodeError as exc:
                document_error = str(exc)
            except DECOMPRESS_ERRORS as exc:
                # A damaged gzip: its readable start may still be JSON lines.
                document_error = f"damaged gzip: {exc}"
            else:
                if isinstance(doc, list):
                    first = next((x for x in doc if isinstance(x, dict)), doc[0] if doc else None)
                    return Probe(kind="json", document=doc, first=first, text=text)
                return Probe(kind="json", document=doc, first=doc, text=text)
        found, first = _first_json_line(source)
        if found:
            return Probe(kind="jsonl", first=first, text=text)
        if too_large:
            problem = (f"a JSON document over {MAX_DOCUMENT_PROBE >> 20} MB that is not JSON "
                       "lines: too large to read whole (split it, e.g. jq -c '.[]' FILE)")
        else:
            hint = " (truncated?)" if "unexpected end of data" in document_error else ""
            problem = f"invalid JSON document{hint}: {document_error}"
        return Probe(kind="text", text=text, problem=problem)
    first_line = stripped.split("\n", 1)[0]
    if any(d in first_line for d in _DELIMITERS):
        try:
            header = next(csv.reader(io.StringIO(first_line), delimiter=_delimiter(first_line)))
        except (csv.Error, StopIteration):
            header = None
        if header and all(h.strip() for h in header):
            return Probe(kind="csv", header=[h.strip() for h in header], text=text)
    # JSON lines whose first line is damaged (a log cut at its start, a stray banner):
    # the records after it are still readable, and the parser reports the bad line.
    found, first = _first_json_line(source, containers_only=True)
    if found:
        return Probe(kind="jsonl", first=first, text=text)
    return Probe(kind="text", text=text)


def _looks_binary(head: bytes) -> bool:
    """NUL bytes near the start: binary. A zero-filled tail (a log cut by a crash, the
    file system's preallocated block) does not make a text log binary."""
    return b"\x00" in head.rstrip(b"\x00")[:BINARY_PROBE_BYTES]


_DELIMITERS = (",", "\t", ";")


def _delimiter(text: str) -> str:
    """The header's most frequent separator: comma; tab for `mysql --batch` / `sqlite3 -tabs`
    exports; semicolon for spreadsheets saved in locales where the comma is decimal."""
    first_line = text.lstrip("\ufeff").split("\n", 1)[0]
    return max(_DELIMITERS, key=first_line.count)


def _first_json_line(source: Source, *, containers_only: bool = False) -> tuple[bool, Any]:
    """(found, value) of the first JSON-lines record, however long its line.

    Looks at the first `JSONL_PROBE_LINES` non-blank lines, so that a file whose
    first line is truncated or garbage is still read as JSON lines (the bad line
    becomes a reported skip). A JSON object or array is preferred; a bare scalar on
    the very first line is accepted unless `containers_only`.
    """
    seen = 0
    with source.open_binary() as fh:
        for raw in fh:
            line = raw.strip()
            if seen == 0:
                line = line.lstrip(b"\xef\xbb\xbf")
            if not line:
                continue
            seen += 1
            try:
                value = orjson.loads(line)
            except orjson.JSONDecodeError:
                value = _NOT_JSON
            if isinstance(value, dict | list):
                return True, value
            if seen == 1 and value is not _NOT_JSON and not containers_only:
                return True, value
            if seen >= JSONL_PROBE_LINES:
                break
    return False, None


_NOT_JSON = object()


def sqlite_tables(path: Path) -> dict[str, list[str]]:
    """Table -> columns of a SQLite file; {} when it cannot be read."""
    try:
        return read_sqlite_tables(path)
    except sqlite3.Error:
        return {}


def read_sqlite_tables(path: Path) -> dict[str, list[str]]:
    """Table -> columns of a SQLite file.

    Raises:
        sqlite3.Error: the file is damaged, encrypted or locked.
    """
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {n: [c[1] for c in con.execute(f'PRAGMA table_info("{n}")')] for n in names}
    finally:
        con.close()


def iter_json_records(source: Source, probe_: Probe) -> Iterator[tuple[int, Any]]:
    """Yield (place, record) for a JSON array / object / JSON-lines source.

    A JSON-lines line that does not parse yields (line, BadRecord(reason)) so the
    caller can report it and go on.
    """
    if probe_.kind == "json":
        doc = probe_.document
        if doc is None:
            doc = orjson.loads(source.read_bytes())
        if isinstance(doc, list):
            yield from enumerate(doc, start=1)
        else:
            yield 1, doc
        return
    with source.open_binary() as fh:
        for lineno, raw in enumerate(fh, start=1):
            line = raw.strip()
            if lineno == 1:
                line = line.lstrip(b"\xef\xbb\xbf")
            if not line:
                continue
            try:
                yield lineno, orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                yield lineno, BadRecord(f"invalid JSON: {exc}")


def iter_csv_rows(source: Source) -> Iterator[tuple[int, Any]]:
    """Yield (row number, row dict) of a CSV / tab-separated export; row 1 = first data row.

    A row that is not valid UTF-8 (a latin-1 / Windows-1252 export) yields
    (row, BadRecord(reason)); the rows around it are still read.
    """
    delimiter = _delimiter(source.head.decode("utf-8", "replace"))
    with source.open_binary() as fh:
        text = io.TextIOWrapper(fh, encoding="utf-8-sig", errors="surrogateescape",
                                newline="")
        reader = csv.DictReader(text, delimiter=delimiter)
        for rowno, row in enumerate(reader, start=1):
            clean = {(k or "").strip(): v for k, v in row.items()}
            if any(_UNDECODED.search(v) for v in (*clean, *clean.values())
                   if isinstance(v, str)):
                yield rowno, BadRecord("row is not valid UTF-8 (a latin-1 / Windows-1252 "
                                       "export? convert it: iconv -f cp1252 -t utf-8)")
                continue
            yield rowno, clean


# Bytes that were not UTF-8, as the surrogateescape error handler keeps them.
_UNDECODED = re.compile("[\udc80-\udcff]")


def iter_sqlite_rows(source: Source, table: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (row number, row dict) from one table of a SQLite database file, read-only."""
    con = sqlite3.connect(f"file:{source.local_path()}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    try:
        for rowno, row in enumerate(con.execute(f'SELECT * FROM "{table}"'), start=1):
            yield rowno, dict(row)
    finally:
        con.close()


def iter_table_rows(source: Source, probe_: Probe, table: str) -> Iterator[tuple[int, Any]]:
    """Rows of an exported table, whatever the container: SQLite, CSV, JSON or JSON lines."""
    if probe_.kind == "sqlite":
        yield from iter_sqlite_rows(source, table)
    elif probe_.kind == "csv":
        yield from iter_csv_rows(source)
    else:
        for place, rec in iter_json_records(source, probe_):
            # API-style wrappers: {"data": [...]} / {"logs": [...]} / {"items": [...]}
            if place == 1 and isinstance(rec, dict) and probe_.kind == "json":
                for key in ("data", "logs", "items", "rows"):
                    inner = rec.get(key)
                    if isinstance(inner, list):
                        yield from enumerate(inner, start=1)
                        break
                    if isinstance(inner, dict) and isinstance(inner.get("items"), list):
                        yield from enumerate(inner["items"], start=1)
                        break
                else:
                    yield place, rec
                continue
            yield place, rec


_WRAPPER_KEYS = ("data", "logs", "items", "rows")


def first_table_row(probe: Probe) -> dict[str, Any]:
    """The first row of an exported table, as `iter_table_rows` yields it (wrappers unwrapped)."""
    if probe.kind == "csv":
        return dict.fromkeys(probe.header or [], "")
    first = probe.first
    if probe.kind == "json" and isinstance(probe.document, dict):
        for key in _WRAPPER_KEYS:
            inner = probe.document.get(key)
            if isinstance(inner, dict) and isinstance(inner.get("items"), list):
                inner = inner["items"]
            if isinstance(inner, list):
                first = next((x for x in inner if isinstance(x, dict)), None)
                break
    return first if isinstance(first, dict) else {}


def row_keys(probe: Probe) -> set[str]:
    """Column names of the first row of a CSV / JSON / JSON-lines table export."""
    if probe.kind not in ("csv", "json", "jsonl"):
        return set()
    return set(first_table_row(probe))
