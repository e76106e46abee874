"""What an ingest did, as the library returns it (`prefixscope.Store.ingest_result`).

Apart from `views.results` so that an ingest imports none of the analyses: the core
`store.load.IngestResult` with ``to_dict()``, the document ``prefixscope ingest --json``
prints.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from prefixscope.store import load as _load


@dataclass(frozen=True, slots=True, repr=False)
class IngestResult(_load.IngestResult):
    """What `prefixscope.ingest` did: requests stored, records skipped (with the first
    reasons), formats, sessions, and the store's usage after it."""

    @classmethod
    def _of(cls, result: _load.IngestResult) -> IngestResult:
        return cls(**{f.name: getattr(result, f.name) for f in fields(result)})

    def to_dict(self) -> dict[str, Any]:
        """The document ``prefixscope ingest --json`` prints."""
        from prefixscope.views.json import ingest_json

        return dict(ingest_json(self))

    def __repr__(self) -> str:
        return (f"<prefixscope.IngestResult: {self.ingested:,} ingested, "
                f"{self.already_present:,} already present, {self.skipped:,} skipped>")
