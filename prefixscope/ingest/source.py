"""Reading log files the same way for every format: paths, gzip, stdin.

A `Source` is one input file (or stdin) with transparent gzip decompression; a
`Probe` is what format detection looks at: the container kind (JSON document,
JSON lines, CSV, SQLite database, SSE text), the first record, and the first few
records (a log may open with records that say nothing of its format: a Claude Code
transcript's ``permission-mode`` line). Formats are
detected from this content, never from the file name alone.

Both are values the container readers (`prefixscope.ingest.readers`) take, so this module
imports none of them: making a `Probe` from a `Source` uses the readers, and is
`prefixscope.ingest.probing`'s job (tests/test_import_graph.py keeps the two apart).
"""

from __future__ import annotations

import gzip
import io
import os
import sys
import tempfile
import zlib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, BinaryIO, cast

from prefixscope.model.records import MAX_LINE_BYTES as MAX_LINE_BYTES  # (read from here too)
from prefixscope.model.regular import open_regular

GZIP_MAGIC = b"\x1f\x8b"
PROBE_BYTES = 1 << 16
# The read buffer of a file being parsed. A captured request is a line of hundreds of KB;
# `readline` through the default 8 KiB buffer gathers it in small reads and copies it
# again to join them (0.19-0.25 s of CPU for 0.27 GiB of raw captures, 0.05-0.11 s with
# 1 MiB: docs/scale.md, "Ingest per byte").
READ_BUFFER = 1 << 20

# What reading a damaged gzip raises (truncated stream, bad CRC, corrupt deflate data).
DECOMPRESS_ERRORS: tuple[type[Exception], ...] = (EOFError, zlib.error, gzip.BadGzipFile)
# What reading a file part-way can raise: I/O, a damaged gzip stream.
READ_ERRORS: tuple[type[Exception], ...] = (OSError, *DECOMPRESS_ERRORS)
# ... and, when the bytes are decoded, bad encodings.
DECODE_ERRORS: tuple[type[Exception], ...] = (*READ_ERRORS, ValueError)


@dataclass
class Source:
    """One input: a file on disk (possibly gzip-compressed) or bytes read from stdin."""

    name: str  # what reports show: the path as given, or "-" for stdin
    path: Path | None = None  # the file on disk, None for stdin
    data: bytes | None = None  # stdin contents (already read)
    max_line_bytes: int = MAX_LINE_BYTES  # longer lines are skipped (`readers.bounded_lines`)
    _tmp: list[str] = field(default_factory=list, repr=False)
    _streams: list[BinaryIO] = field(default_factory=list, repr=False)
    _furthest: int = field(default=0, repr=False)

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
        with open_regular(self.path) as fh:
            return fh.read(n)

    def open_binary(self) -> BinaryIO:
        """A fresh binary stream over the decompressed content."""
        if self.data is not None:
            raw: BinaryIO = io.BytesIO(self.data)
        else:
            assert self.path is not None
            raw = open_regular(self.path, buffering=READ_BUFFER)
            self._streams.append(raw)
        if self.compressed:
            return cast(BinaryIO, gzip.GzipFile(fileobj=raw))
        return raw

    @cached_property
    def head(self) -> bytes:
        """The first `PROBE_BYTES` of the content; of a gzip cut short, what decompresses
        before the cut (the parser then reports the cut with the records before it)."""
        with self.open_binary() as fh:
            if not isinstance(fh, gzip.GzipFile):
                return fh.read(PROBE_BYTES)
            chunks: list[bytes] = []
            got = 0
            try:
                while got < PROBE_BYTES and (chunk := fh.read1(PROBE_BYTES - got)):
                    chunks.append(chunk)
                    got += len(chunk)
            except DECOMPRESS_ERRORS:
                if not chunks:
                    raise
            return b"".join(chunks)

    def read_bytes(self) -> bytes:
        with self.open_binary() as fh:
            return fh.read()

    def read_at_most(self, limit: int) -> bytes | None:
        """The whole decompressed content; None when it is longer than `limit` bytes (only
        `limit` + 1 bytes are read to find that out: a gzip bomb is never inflated whole)."""
        with self.open_binary() as fh:
            data = fh.read(limit + 1)
        return data if len(data) <= limit else None

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

    def position(self) -> int:
        """How far into the file (its bytes on disk, compressed or not) the streams opened
        so far have read: the progress of a parser reading it."""
        for stream in self._streams:
            try:
                self._furthest = max(self._furthest, stream.tell())
            except (OSError, ValueError):  # closed: its last position was taken before
                continue
        self._streams = [s for s in self._streams if not s.closed]
        return self._furthest

    def close(self) -> None:
        self.__dict__.pop("head", None)  # a run holds every source: not its first 64 KiB
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
    # The first records (up to JSONL_PROBE_LINES): JSON-lines records that parse, array
    # elements, or the one object.
    records: list[Any] = field(default_factory=list)
    header: list[str] | None = None  # CSV header (kind "csv")
    tables: dict[str, list[str]] = field(default_factory=dict)  # SQLite table -> columns
    text: str = ""  # decoded head of the file
    # Why no container fits, in one line, when the content says what it tried to be
    # (a JSON document that does not parse, UTF-16 text); "" otherwise.
    problem: str = ""

    @property
    def first_dict(self) -> dict[str, Any]:
        return self.first if isinstance(self.first, dict) else {}

    @property
    def head_lines(self) -> list[dict[str, Any]]:
        """The first JSON-lines records that are objects (a one-line file counts too); [] for
        a JSON array and anything else."""
        if self.first_line is None:
            return []
        return [r for r in self.records if isinstance(r, dict)] or [self.first_line]

    @property
    def first_line(self) -> dict[str, Any] | None:
        """The first record of a JSON-lines log when it is an object; a one-line file parses
        as one JSON object and counts too. None for a JSON array and anything else."""
        if self.kind == "jsonl" or (self.kind == "json" and isinstance(self.document, dict)):
            return self.first if isinstance(self.first, dict) else None
        return None
