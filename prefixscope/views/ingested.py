"""What an ingest did, as the library returns it (`prefixscope.Store.ingest_result`), and
the document ``prefixscope ingest --json`` prints (`ingest_json`).

Apart from `views.results` and `views.json` (which re-exports `ingest_json`) so that an
ingest imports none of the analyses: those two import every command's analyses and
findings, numpy with them (~0.2 s of an `ingest` command's CPU, issue 37), and an ingest
reads none of them. The core `store.load.IngestResult` with ``to_dict()``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from prefixscope.store import load as _load
from prefixscope.store.store import UsageSummary

if TYPE_CHECKING:
    from prefixscope.views.jsonshapes import IngestJson, UsageSummaryJson


@dataclass(frozen=True, slots=True, repr=False)
class IngestResult(_load.IngestResult):
    """What `prefixscope.ingest` did: requests stored, records skipped (with the first
    reasons), formats, sessions, and the store's usage after it."""

    @classmethod
    def _of(cls, result: _load.IngestResult) -> IngestResult:
        return cls(**{f.name: getattr(result, f.name) for f in fields(result)})

    def to_dict(self) -> dict[str, Any]:
        """The document ``prefixscope ingest --json`` prints."""
        return dict(ingest_json(self))

    def __repr__(self) -> str:
        return (f"<prefixscope.IngestResult: {self.ingested:,} ingested, "
                f"{self.already_present:,} already present, {self.skipped:,} skipped>")


_NOTHING = UsageSummary("all", 0, 0, 0, 0, None, 0, None, 0, 0, 0, 0)


def usage_summary_json(u: UsageSummary) -> UsageSummaryJson:
    return {"requests": u.requests, "sessions": u.sessions, "with_body": u.with_body,
            "duplicates": u.duplicates, "prompt_tokens": u.prompt_tokens,
            "prompt_requests": u.prompt_requests, "cached_tokens": u.cached_tokens,
            "cached_requests": u.cached_requests, "hit_rate": u.hit_rate,
            "rate_requests": u.rate_requests, "rate_prompt_tokens": u.rate_prompt_tokens,
            "rate_cached_tokens": u.rate_cached_tokens}


def ingest_json(result: _load.IngestResult) -> IngestJson:
    return {
        "ingested": result.ingested, "already_present": result.already_present,
        "skipped": result.skipped, "by_format": result.by_format,
        "sessions": result.sessions, "duplicates": result.duplicates, "files": result.files,
        "errors": [{"file": e.file, "line": e.line, "reason": e.reason} for e in result.errors],
        "unrecognized": list(result.unrecognized),
        "empty": list(result.empty),
        "engine_logs": list(result.engine_logs),
        "formats": {u.format: usage_summary_json(u) for u in result.summary},
        "totals": usage_summary_json(result.totals or _NOTHING),
    }
