"""`causes._common_end` (the diverging segments' common end, which `volatile_change` cuts
off before it looks for a volatile value) is the count of trailing characters two texts
share, as a character-by-character loop from their ends counts them (the oracle, the
loop it replaced); and `volatile_change` finds a billing header's new hash at the start
of a long system message (the OpenAI Chat view's shape) as it finds it in a short one."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.analyses.causes import _common_end, volatile_change

# a small alphabet makes long shared ends likely; surrogates and astral characters too
chars = st.sampled_from(["a", "b", "=", " ", "\n", "\udc80", "\U0010e000", "é"])
texts = st.lists(chars, max_size=300).map("".join)


def _loop(a: str, b: str) -> int:
    suffix, limit = 0, min(len(a), len(b))
    while suffix < limit and a[len(a) - 1 - suffix] == b[len(b) - 1 - suffix]:
        suffix += 1
    return suffix


@settings(max_examples=500, deadline=None)
@given(a=texts, b=texts, end=texts)
def test_common_end_counts_as_the_character_loop(a, b, end):
    assert _common_end(a + end, b + end) == _loop(a + end, b + end)
    assert _common_end(a, a) == len(a)


@settings(max_examples=100, deadline=None)
@given(rest=st.text(min_size=0, max_size=20_000))
def test_a_billing_hash_is_found_before_a_long_shared_end(rest):
    head = "x-anthropic-billing-header: cc_version=2.0.14; cch="
    a = head + "8c7f0;\n" + rest
    b = head + "7ee55;\n" + rest
    start = len(head)
    assert volatile_change(a, b, start, len(a), len(b)) == ("cch=8c7f0", "cch=7ee55")
