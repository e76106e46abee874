"""What every finder shares: building a `Finding` whose share and severity `build` fills."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prefixscope.findings.model import Finding

EXAMPLES = 3  # example ids a finding carries
EXCERPT_CHARS = 120


def finding(kind: str, title: str, lost_tokens: int, evidence: Mapping[str, Any], fix: str,
            *, segment: str | None = None, severity: str = "",
            fix_hit_rate: float | None = None, lost_usd: float | None = None) -> Finding:
    """A finding; an empty `severity` is decided by its share of the prompt tokens."""
    return Finding(kind, severity, title, segment, int(lost_tokens), 0.0, dict(evidence), fix,
                   fix_hit_rate, lost_usd)


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """`text` on one line, cut to `limit` characters (the view escapes it)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def count(n: int, noun: str) -> str:
    """"1 request", "2,000 requests"."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")
