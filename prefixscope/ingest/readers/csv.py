"""CSV exports: comma-, tab- or semicolon-separated tables with a header row.

Database tables reach users as CSV more often than any other way (``mysql --batch``,
``sqlite3 -csv``, a spreadsheet, a dashboard's download button). The separator is
the header's most frequent one, field sizes are unlimited (a logged request body is
one field), and a row that is not UTF-8 is reported, not guessed at.
"""

from __future__ import annotations

import csv
import io
import re
import sys
from collections.abc import Iterator
from typing import Any

from prefixscope.ingest.readers import BadRecord
from prefixscope.ingest.source import Source

DELIMITERS = (",", "\t", ";")
# Bytes that were not UTF-8, as the surrogateescape error handler keeps them.
_UNDECODED = re.compile("[\udc80-\udcff]")

csv.field_size_limit(sys.maxsize)


def delimiter(text: str) -> str:
    """The header's most frequent separator: comma; tab for `mysql --batch` / `sqlite3 -tabs`
    exports; semicolon for spreadsheets saved in locales where the comma is decimal."""
    first_line = text.lstrip("\ufeff").split("\n", 1)[0]
    return max(DELIMITERS, key=first_line.count)


def header(first_line: str) -> list[str] | None:
    """The column names of a CSV header line; None when it is not one (no separator, an
    empty column name, unparseable)."""
    if not any(d in first_line for d in DELIMITERS):
        return None
    try:
        names = next(csv.reader(io.StringIO(first_line), delimiter=delimiter(first_line)))
    except (csv.Error, StopIteration):
        return None
    if names and all(h.strip() for h in names):
        return [h.strip() for h in names]
    return None


def iter_csv_rows(source: Source) -> Iterator[tuple[int, Any]]:
    """Yield (row number, row dict) of a CSV / tab-separated export; row 1 = first data row.

    A row that is not valid UTF-8 (a latin-1 / Windows-1252 export), or whose number of
    fields is not the header's (a row cut short, an unquoted separator shifting the columns),
    yields (row, BadRecord(reason)); the rows around it are still read.
    """
    sep = delimiter(source.head.decode("utf-8", "replace"))
    with source.open_binary() as fh:
        text = io.TextIOWrapper(fh, encoding="utf-8-sig", errors="surrogateescape",
                                newline="")
        reader = csv.DictReader(text, delimiter=sep)
        for rowno, row in enumerate(reader, start=1):
            width = len(reader.fieldnames or ())
            if None in row or any(v is None for v in row.values()):
                fields = width + len(row.get(None) or ()) - sum(v is None for v in row.values())
                why = "cut short?" if fields < width else "an unquoted separator?"
                yield rowno, BadRecord(f"row has {fields} field(s), the header {width} ({why})")
                continue
            clean = {(k or "").strip(): v for k, v in row.items()}
            if any(_UNDECODED.search(v) for v in (*clean, *clean.values())
                   if isinstance(v, str)):
                yield rowno, BadRecord("row is not valid UTF-8 (a latin-1 / Windows-1252 "
                                       "export? convert it: iconv -f cp1252 -t utf-8)")
                continue
            yield rowno, clean
