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


class BadRecord(Exception):
    """A record that cannot be used; the message is the reason.

    Readers yield it in place of a record they cannot decode; format parsers raise it
    from their helpers for a record they cannot use, and turn it into a `Skip`.
    """
