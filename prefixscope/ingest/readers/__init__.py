"""Container readers shared by the formats: JSON / JSON lines, CSV, SQLite, table exports,
ClickHouse literals.

A format decides what a record means; how the records come out of their container is
decided here once, with the same numbering for every format (1-based line for JSON
lines, row for CSV / SQLite, element index for a JSON array) so that a skip can name
its place. A reader never raises for one bad record: it yields `BadRecord` in its
place and goes on.

* `json` -- JSON documents and JSON lines (`iter_json_records`);
* `csv` -- comma / tab / semicolon exports with a header (`iter_csv_rows`);
* `sqlite` -- read-only SQLite access (`iter_sqlite_rows`, `read_tables`);
* `tables` -- one exported table whatever its container (`iter_table_rows`, `row_keys`);
* `clickhouse` -- ``Map`` / ``Array`` literals as ClickHouse prints them in exports.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

# Read past a line over the limit this much at a time (its bytes are never held whole).
_DRAIN = 1 << 20


class BadRecord(Exception):
    """A record that cannot be used; the message is the reason.

    Readers yield it in place of a record they cannot decode; format parsers raise it
    from their helpers for a record they cannot use, and turn it into a `Skip`.
    """


def bounded_lines(fh: BinaryIO, limit: int, *,
                  drain: bool = True) -> Iterator[bytes | None]:
    """Every line of `fh` (newline included), None in place of a line longer than `limit`
    bytes (its newline not counted): memory is bounded by `limit`, however long a line
    (a decompression bomb is one line of zeros). `drain`: read past such a line and go on;
    otherwise the lines end there (a first look at a file needs no more).
    """
    while line := fh.readline(limit + 1):
        if len(line) <= limit or line.endswith(b"\n"):
            yield line
            continue
        yield None
        if not drain:
            return
        while (rest := fh.readline(_DRAIN)) and not rest.endswith(b"\n"):
            pass
