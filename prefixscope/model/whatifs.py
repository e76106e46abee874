"""The names of the what-ifs a report prices from the log's usage (its TTL choices), apart
from the code that prices them (`findings.ttl_choice`): the command line lists them in its
help without importing the findings (and numpy, DuckDB with them) to print ``--help``."""

from __future__ import annotations

TTL_WHAT_IFS = ("ttl-1h", "keep-warm")  # 1-hour cache writes; pings through pauses
