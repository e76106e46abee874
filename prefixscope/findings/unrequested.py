"""Sessions whose log shows that prompt caching was never requested.

Anthropic caches nothing unless the request asks for it (a ``cache_control`` breakpoint);
once asked, a call whose prompt reaches past the model's minimum cacheable length either
reads an entry or writes one. A session whose every call on a hosted Anthropic model reports
0 tokens read *and* 0 written, over several calls above that minimum, therefore never asked:
no ``cache_control`` was sent (a client or provider setting that does not place it), or a
proxy between the client and Anthropic stripped it. Read by the ledger as its own cause,
``not-requested`` (`findings.ledger`), not as the predecessor's unwritten tail (``rounding``).

What is never read as this (each has its own reading): a call whose log does not report the
write count (``None``: not known to be 0; a call without usage at all, failed or
cancelled, is passed over), a session with any read or write, any other
engine (OpenAI, DeepSeek cache automatically: 0 read on short prompts is their minimum;
a self-hosted engine has no ``cache_control``), and a session with fewer than
`MIN_CALLS` calls above the minimum (one call's 0 could be a prompt that barely reaches it).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

from prefixscope.model import UsageRecord

MIN_CALLS = 2  # calls above the minimum cacheable length that must all write nothing


def unrequested_sessions(records: Sequence[UsageRecord],
                         minimum_of: Mapping[str, int | None]) -> frozenset[str]:
    """The sessions of `records` where caching was never requested (module docstring).

    Args:
        records: the log's requests (duplicates skipped); a request without a session is
            never part of one.
        minimum_of: request id -> the minimum cacheable prompt of its hosted Anthropic
            model; a request absent (or None) is another engine's, which rules its
            session out.

    Returns:
        The session ids.
    """
    calls: dict[str, list[UsageRecord]] = defaultdict(list)
    for r in records:
        if r.session is not None and r.duplicate_of is None:
            calls[r.session].append(r)
    return frozenset(s for s, rs in calls.items() if _never_asked(rs, minimum_of.get))


def _never_asked(records: Sequence[UsageRecord],
                 minimum: Callable[[str], int | None]) -> bool:
    above = 0
    for r in records:
        if r.prompt_tokens is None:
            continue  # no usage (a failed or cancelled call): says nothing either way
        floor = minimum(r.id)
        if (floor is None or r.cached_tokens != 0 or r.cache_write_tokens != 0
                or r.cache_write_1h_tokens):
            return False
        above += r.prompt_tokens >= floor
    return above >= MIN_CALLS
