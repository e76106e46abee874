"""The log itself: records that could not be read, and bodies the logger cut short.

Both make every other number less certain, so they are reported even though they cost no
tokens: a skipped record is a request the analysis did not see; a truncated body (LiteLLM's
"... skipped N chars ..." marker) is text that was not what the model saw.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from prefixscope.findings.evidence import Evidence
from prefixscope.findings.finders.base import EXAMPLES, finding
from prefixscope.findings.model import Finding


def find(ev: Evidence) -> Iterator[Finding]:
    ingest = ev.ingest
    if ingest is not None and ingest.skipped:
        reasons = Counter(e.reason for e in ingest.errors)
        yield finding(
            "bad-records", f"{ingest.skipped:,} record(s) or file(s) could not be read and "
            "are not in the analysis", 0,
            {"skipped": ingest.skipped,
             "reasons": dict(reasons.most_common(5)),
             "examples": [f"{e.file}:{e.line}" if e.line is not None else e.file
                          for e in ingest.errors[:EXAMPLES]],
             "unrecognized_files": list(ingest.unrecognized[:EXAMPLES])},
            "Run `prefixscope ingest LOGS --json` for every skipped record with its place and "
            "reason; fix the exporter or pass --format.", severity="medium")
    truncated = ev.truncated
    if truncated:
        yield finding(
            "truncated-bodies", f"{len(truncated):,} request bodies were cut by the logger: "
            "their divergence points and token counts are not exact", 0,
            {"requests": len(truncated), "example_requests": list(truncated[:EXAMPLES])},
            "Raise the logger's body limit (LiteLLM: `MAX_STRING_LENGTH_PROMPT_IN_DB`), or "
            "analyse a raw capture of the requests.", severity="low")
