"""The values every stage passes along (`Request`, `Usage`, `Skip`, `Record`), and the
content hashes and request keys computed from them. The bottom layer: imports nothing
else of prefixscope."""

from prefixscope.model.records import (
    ENDPOINTS,
    Endpoint,
    Record,
    Request,
    Skip,
    Usage,
    UsageRecord,
)

__all__ = ["ENDPOINTS", "Endpoint", "Record", "Request", "Skip", "Usage", "UsageRecord"]
