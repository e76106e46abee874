"""Counts and dollars as the report's sentences write them, for every layer that words a
finding or a what-if (one spelling of "1 request" / "3 requests" and of "−$0.04"), and the
name of a stand-in tokenizer."""

from __future__ import annotations

# The one name a person reads for a tokenizer that counts in the model's stead (a hosted
# model's own is not public, or not available offline): every view says it this way.
# (Here, not in `views.wording`, which imports the findings: the diff's and render's
# terminal views say it and read no finding.)
STAND_IN = "stand-in tokenizer"
# What a person can do about a stand-in: a model whose tokenizer can be had locally takes
# --tokenizer; Claude's cannot (Anthropic publishes none), so no option makes it exact.
CLAUDE_NOT_PUBLIC = ("not for a Claude model: Anthropic publishes no tokenizer, so its "
                     "counts stay estimates")


def plural(n: int, noun: str) -> str:
    """``1 request``, ``3,000 requests``."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def signed_usd(value: float) -> str:
    """Dollars with a leading minus sign (U+2212) when negative: cents, or four places
    below a cent (``$0.0012``, ``−$0.04``, ``$1,234.50``)."""
    sign = "−" if value < 0 else ""
    value = abs(value)
    return sign + (f"${value:,.4f}" if value < 0.01 and value else f"${value:,.2f}")
