"""Counts and dollars as the report's sentences write them, for every layer that words a
finding or a what-if (one spelling of "1 request" / "3 requests" and of "−$0.04")."""

from __future__ import annotations


def plural(n: int, noun: str) -> str:
    """``1 request``, ``3,000 requests``."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def signed_usd(value: float) -> str:
    """Dollars with a leading minus sign (U+2212) when negative: cents, or four places
    below a cent (``$0.0012``, ``−$0.04``, ``$1,234.50``)."""
    sign = "−" if value < 0 else ""
    value = abs(value)
    return sign + (f"${value:,.4f}" if value < 0.01 and value else f"${value:,.2f}")
