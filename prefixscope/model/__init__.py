"""The values every stage passes along (`Request`, `Usage`, `Skip`, `Record`), the
content hashes and request keys computed from them, and what every output shares
(`redaction`: secret masking; `atomic`: files written whole or not at all). The bottom
layer: imports nothing else of prefixscope."""

from prefixscope.model.records import (
    API_USAGE_SEMANTICS,
    ENDPOINTS,
    EVENT_KINDS,
    Endpoint,
    Record,
    Request,
    SessionEvent,
    Skip,
    Usage,
    UsageRecord,
)

__all__ = ["API_USAGE_SEMANTICS", "ENDPOINTS", "EVENT_KINDS", "Endpoint", "Record", "Request",
           "SessionEvent", "Skip", "Usage", "UsageRecord"]
