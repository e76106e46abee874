"""Hostile text cannot hang prefixscope: masking and engine-log regexes run in linear time.

A regular expression that backtracks can take time quadratic in its text: masking
``"sk-" * 20000`` took 7.1 s, a private-key header repeated 5.4 s, 20 KB of one letter in
a segment preview 2.6 s, one 2.3 MB ``non-default args`` line of a vLLM log 111 s.

The check is a size doubling check (issue 39), not a timer: the same adversarial text at
n and at 4n characters (two doublings), and the ratio of the two costs. Linear work gives
about 4, quadratic work about 16; the bound is 8 (an exponent of 1.5), far enough from
both that a loaded machine does not decide the outcome. Each cost is the smallest of
several runs of enough repetitions to take a few milliseconds of this process's CPU time,
so the ratio is of work done, not of a wall clock shared with other processes.

The rewritten patterns must mask what the old ones masked: the old patterns are kept here
as the oracle, and Hypothesis compares the two on texts made of secrets, their prefixes
and the characters the patterns test.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from prefixscope.analyses.segments import preview
from prefixscope.ingest import engine_logs
from prefixscope.model import redaction
from prefixscope.model.redaction import MASK, SECRET_PATTERNS, Redactor, opaque_masked

BOUND = 8.0  # cost(4n) / cost(n): ~4 when linear, ~16 when quadratic
N = 2_000


def _cost(f: Callable[[str], object], text: str) -> float:
    """CPU seconds of one call of `f(text)`: the least of 3 measures of enough calls to
    take 4 ms."""
    reps = 1
    while True:
        start = time.process_time()
        for _ in range(reps):
            f(text)
        spent = time.process_time() - start
        if spent >= 0.004:
            break
        reps *= 4
    best = spent / reps
    for _ in range(2):
        start = time.process_time()
        for _ in range(reps):
            f(text)
        best = min(best, (time.process_time() - start) / reps)
    return max(best, 1e-9)


def growth(f: Callable[[str], object], unit: str, n: int = N) -> float:
    """cost of `f` on `unit` repeated to 4n characters over its cost at n (the least of
    two tries, so that one burst of load elsewhere cannot fail a linear function)."""
    small, big = unit * (n // len(unit) + 1), unit * (4 * n // len(unit) + 1)
    ratios = []
    for _ in range(2):
        ratios.append(_cost(f, big) / _cost(f, small))
        if ratios[-1] < BOUND:
            break
    return min(ratios)


def test_the_doubling_check_tells_quadratic_from_linear() -> None:
    """The check itself: a known quadratic search fails it, a linear one passes."""
    quadratic = re.compile(r"a*b")  # from each of n starts, a scan to the end
    assert growth(quadratic.search, "a") > BOUND
    assert growth(lambda s: s.count("b"), "a") < BOUND


# Texts a masking pattern could be slow on: each rule's prefix or key word repeated (a
# look-ahead from each would scan the rest), runs of the characters its repetitions take,
# and pieces of the shapes it looks for.
MASKING_UNITS = [
    "sk-", "sk-a", "sk-proj-", "sk-ant-a", "-----BEGIN PRIVATE KEY-----",
    "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n", "-----BEGIN ", "-----END PRIVATE KEY-----",
    "a", "A", "0", "a0", " ", "-", "a.", "a@", "a@b.", "ey", "eyAAAAAAAAAAAAAAAAAAA.",
    "AKIA", "AKIAAAAAAAAAAAAAAAAA ", "x://u:", "x://u:p", "password=", "password:",
    "password: ", "passwd:a", "authorization:", "authorization: ", "Authorization: Bearer ",
    "x-api-key:", "x-api-key: ", "Bearer ", "hooks.slack.com/services/", "glpat-", "xoxb-",
    "xapp-1-", "AIza", "ghp_", "hf_", "sk_live_", "api_org_", "aws_secret_key=",
    "https://a:b", "npm_", "pypi-AgEIcHlwaS5vcmc", "SG.", "AccountKey=", "hvs.", "hvb.",
    "dapi", "SK", "AC0", "dop_v1_", "12345678:A", "1", "+", "=", "_",
]


def _every_pattern(text: str) -> str:
    """Every built-in rule over the text, without the anchor test that skips most."""
    for rule in SECRET_PATTERNS:
        text = rule.pattern.sub(redaction._masked, text)
    return text


@pytest.mark.parametrize("unit", MASKING_UNITS)
def test_every_masking_pattern_runs_in_linear_time_on_adversarial_text(unit: str) -> None:
    assert growth(_every_pattern, unit) < BOUND


@pytest.mark.parametrize("unit", MASKING_UNITS)
def test_the_preview_masking_of_opaque_tokens_runs_in_linear_time(unit: str) -> None:
    assert growth(opaque_masked, unit) < BOUND


@pytest.mark.parametrize("unit", ["sk-", "-----BEGIN PRIVATE KEY-----", "a", "password:"])
def test_the_issue_cases_through_the_redactor_and_a_segment_preview(unit: str) -> None:
    """The reported texts through what a command calls (the redactor's cache emptied, so
    each call masks)."""
    r = Redactor()

    def masked(text: str) -> str:
        redaction._text.cache_clear()
        return r.text(text)

    assert growth(masked, unit) < BOUND
    assert growth(preview, unit) < BOUND


def test_without_default_redaction_a_preview_masks_no_opaque_token() -> None:
    token = "Zq7x" * 8  # letters and digits: an opaque token to the preview's masking
    text = f"key {token} and deadbeef42 from a@example.com"
    assert preview(text, limit=200) == "key " + MASK * 8 + " and " + MASK * 8 \
        + " from " + MASK * 8
    redaction.activate(redaction.redactor([], defaults=False))
    try:
        assert preview(text, limit=200) == text
    finally:
        redaction.activate(Redactor())


# -- the old patterns are the oracle of what is masked -----------------------------------

_OLD_HEADER = r"""(?=[^\s"',;\\•]*[0-9+/=_.~-])[^\s"',;\\•]{8,}"""
_OLD = {  # the patterns before they were made linear (commit c9932a6)
    "private-key": r"(?P<keep>-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----)"
                   r"(?:[\s\S]{64,}?(?=-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----)"
                   r"|(?:[A-Za-z0-9+/=\s]|\\[nr])+)",
    "anthropic-api-key": r"(?P<keep>(?<![A-Za-z0-9])sk-ant-)[a-z]+\d\d-[A-Za-z0-9_-]{20,}",
    "openai-api-key": r"(?P<keep>(?<![A-Za-z0-9])sk-(?:proj-|svcacct-|admin-)?)"
                      r"(?=[A-Za-z0-9_-]*\d)(?!ant-)[A-Za-z0-9_-]{20,}",
    "slack-token": r"(?P<keep>(?<![A-Za-z0-9])xox[abposer]-)[0-9A-Za-z-]{10,}"
                   r"|(?P<keep2>(?<![A-Za-z0-9])xapp-)\d-[A-Za-z0-9-]{10,}",
    "jwt": r"(?P<keep>(?<![A-Za-z0-9])ey)[A-Za-z0-9]{17,}\.ey[A-Za-z0-9/\\_-]{17,}\."
           r"(?:[A-Za-z0-9/\\_-]{10,}={0,2})?",
    "password-assignment":
        r"(?P<keep>(?<![A-Za-z0-9])(?i:password|passwd)(?:[\"']?\s*=\s*[\"']?"
        r"|[\"']?\s*:\s*[\"']))[^\s\"'`,;&\\•]{3,}|(?P<keep2>(?<![A-Za-z0-9])"
        r"(?i:password|passwd)\s*:\s*)(?=[^\s\"',;\\•]*[0-9+/=_.~!#$%^*-])[^\s\"'`,;&\\•]{3,}",
    "authorization-header": r"(?i)(?P<keep>\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?"
                            r"(?:(?:bearer|basic|token|digest|apikey)\s+)?)" + _OLD_HEADER,
    "api-key-header": r"(?i)(?P<keep>\b(?:x-api-key|api-key|x-goog-api-key|x-auth-token)"
                      r"[\"']?\s*[:=]\s*[\"']?)" + _OLD_HEADER,
    "bearer-token": r"(?P<keep>\b[Bb]earer\s+)[A-Za-z0-9._~+/-]{20,}=*",
}
_OLD_OPAQUE = re.compile(
    r"(?=[A-Za-z0-9+/_=-]*\d)(?=[A-Za-z0-9+/_=-]*[A-Za-z])[A-Za-z0-9+/_=-]{24,}"
    r"|\b(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{5,}\b|\b[\w.+-]+@[\w-]+\.[\w.]+\b")
_UNCHANGED_RULES = [r for r in SECRET_PATTERNS if r.name not in _OLD]
_OLD_RULES = [re.compile(_OLD[r.name]) if r.name in _OLD else r.pattern
              for r in SECRET_PATTERNS]


def _old_masked(match: re.Match[str]) -> str:
    """A match masked after its kept group, newlines kept: the masking as specified."""
    keep = max(len(match.group(g) or "") for g in ("keep", "keep2")
               if g in match.re.groupindex) if match.re.groupindex else 0
    return match.group()[:keep] + "".join(
        c if c in "\r\n" else MASK for c in match.group()[keep:])


def _bullets(text: str) -> str:
    return re.sub(r"[^\r\n]", MASK, text)


def _old_text(text: str) -> str:
    for pattern in _OLD_RULES:
        text = pattern.sub(_old_masked, text)
    return text


# Pieces: real-shaped secrets, each rule's prefix alone, and the characters the rewritten
# tests look at (digits, symbols, separators).
_PIECES = [
    "sk-", "sk-proj-", "sk-ant-", "sk-ant-api03-", "ant-", "Ab1Cd2Ef3Gh4" * 2, "abcdefghij",
    "xoxb-", "xapp-1-", "ey", "eyJhbGciOiJIUzI1NiIsInR5", ".", ".ey", "password", "passwd",
    ":", "=", '"', "'", " ", "\n", "authorization", "Authorization: Bearer ", "x-api-key",
    "Bearer ", "basic ", "token ", "-", "_", "/", "+", "0", "7", "a", "Z", "q" * 30,
    "-----BEGIN RSA PRIVATE KEY-----\n", "\n-----END RSA PRIVATE KEY-----", "MIIEowIBAAKCAQEA" * 5,
    "a@b.co", "user.name+tag@example.com", "deadbeef", "cafe1234", "•", "!", "~",
]


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=14))
def test_the_linear_patterns_mask_what_the_old_ones_masked(parts: list[str]) -> None:
    text = "".join(parts)
    # one private key at most: where two BEGIN or END lines meet, the bodies differ on
    # purpose (held by hand below)
    assume(text.count("-----BEGIN") <= 1 and text.count("-----END") <= 1)
    assert _every_pattern(text) == _old_text(text)


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=14))
def test_the_linear_opaque_masking_masks_what_the_old_one_masked(parts: list[str]) -> None:
    # pieces apart: the old pattern began a token or address where the one before ended
    # inside a run of their characters (``a@b.co-sk-…``); the new one only where a run
    # begins (held by hand below)
    text = " ".join(parts)
    old = _OLD_OPAQUE.sub(lambda m: MASK * min(len(m.group()), 8), text)
    assert opaque_masked(text) == old


def test_where_the_linear_patterns_differ_from_the_old_ones() -> None:
    """The deliberate differences, by hand. A header's or a bare ``password:``'s value
    needs its digit or symbol within its first 256 characters; a private key's body stops
    at the next BEGIN or END line (either way no character of a key shows)."""
    late = "q" * 256 + "7"
    assert Redactor().text(f"x-api-key: {late}") == f"x-api-key: {late}"
    assert _old_text(f"x-api-key: {late}") == "x-api-key: " + MASK * 257
    early = "q" * 255 + "7"
    assert Redactor().text(f"x-api-key: {early}") == "x-api-key: " + MASK * 256
    head = "-----BEGIN " + "RSA PRIVATE KEY-----"
    end = "-----END RSA PRIVATE KEY-----"
    short = f"{head}\nAAAA\n{end}\n" + "x" * 64 + f"\n{end}"
    # the old lazy body ran through the first END line to the second; the new one masks
    # the base64 body only
    assert _old_text(short) == f"{head}\n{MASK * 4}\n{MASK * len(end)}\n{MASK * 64}\n{end}"
    assert Redactor().text(short) == f"{head}\n{MASK * 4}\n{end}\n" + "x" * 64 + f"\n{end}"
    # a header inside a body: the old body ran over it to the END line; the new one stops
    # there, and that header's own body is masked to its END line
    body = "q" * 70
    two = f"{head}\n{body}\n{head}\n{body}\n{end}"
    assert _old_text(two) == head + _bullets(two[len(head):-len(end)]) + end
    assert Redactor().text(two) == f"{head}\n{MASK * 70}\n{head}\n{MASK * 70}\n{end}"
    # a preview's token or address begins where a run of their characters begins, not
    # where the address before it ended inside one
    glued = "a@b.cosk-sk-sk-proj-sk-ant-api03-"
    assert _OLD_OPAQUE.sub(lambda m: MASK * min(len(m.group()), 8), glued) == MASK * 16
    assert opaque_masked(glued) == MASK * 8 + "-sk-sk-proj-sk-ant-api03-"


# -- engine-log lines --------------------------------------------------------------------

def _patterns() -> dict[str, re.Pattern[str]]:
    found: dict[str, re.Pattern[str]] = {}
    for name, value in vars(engine_logs).items():
        if isinstance(value, re.Pattern):
            found[name] = value
        elif isinstance(value, dict):
            found.update((f"{name}[{k}]", v) for k, v in value.items()
                         if isinstance(v, re.Pattern))
    return found


ENGINE_PATTERNS = _patterns()
# the patterns engine_logs only tries at one place (re.match, at a line's start or a
# label's): a search would try every start, which no caller does
_MATCHED = {"_SGLANG_RECORD", "_PROM_LINE", "_PROM_LABEL"}
ENGINE_UNITS = [
    "non-default args: {", "non-default args: {} x", "server_args=ServerArgs(",
    "server_args=ServerArgs() x", "Initializing a V1 LLM engine (v", "speculative_config=",
    "speculative_config: {'x", "KV Transfer metrics: ", "KV Transfer metrics: {'a': 1",
    "1", "1 ", "Engine ", "Engine 1", ", a=", "{a", "'a", "a': ", "INFO 01-01 00:00:00 [",
    "INFO 01-01 00:00:00 [a:1", "model='", "kv_connector=", "Reqid: a", "a", " ", "}", "} ",
    "a=\"", "vllm:a{", "[2024-01-01 00:00:00", "Prefix cache hit rate: ", "Stored 1 ",
    "Retrieved 1 out of 1", "#new-seq: ", "token usage: ", "page_size=",
]


@pytest.mark.parametrize("unit", ENGINE_UNITS)
def test_every_engine_log_regex_runs_in_linear_time_on_adversarial_lines(unit: str) -> None:
    def every(text: str) -> None:
        for name, pattern in ENGINE_PATTERNS.items():
            if name in _MATCHED:
                pattern.match(text)
            else:
                pattern.findall(text)  # every start, as search, sub and findall try them

    assert growth(every, unit) < BOUND


@pytest.mark.parametrize("unit", ["non-default args: {", "non-default args: {} x",
                                  "server_args=ServerArgs(", "speculative_config=",
                                  "Initializing a V1 LLM engine (v"])
def test_configuration_lines_are_read_in_linear_time(unit: str) -> None:
    assert growth(engine_logs._config_facts, unit) < BOUND
    assert growth(engine_logs._sglang_config, unit) < BOUND


@pytest.mark.parametrize(("line", "facts"), [
    ("INFO 05-01 10:00:00 [api_server.py:1] non-default args: {'model': 'm', "
     "'enable_prefix_caching': True, 'speculative_config': {'method': 'ngram'}}  ",
     [("model", "m"), ("enable_prefix_caching", "True"), ("speculative_decoding", "ngram")]),
    ("non-default args: {'a': 1} and non-default args: {'enable_prefix_caching': False}",
     [("enable_prefix_caching", "False")]),
    ("non-default args: {'enable_prefix_caching': False", []),  # no closing brace
    ("INFO 05-01 10:00:00 [core.py:1] Initializing a V1 LLM engine (v0.10.1) with config: "
     "model='m', speculative_config=None, enable_prefix_caching=True",
     [("vllm_version", "0.10.1"), ("model", "m"), ("enable_prefix_caching", "True")]),
])
def test_configuration_lines_still_give_their_facts(line: str,
                                                    facts: list[tuple[str, str]]) -> None:
    assert engine_logs._config_facts(line) == facts


@pytest.mark.parametrize(("line", "facts"), [
    ("[2025-01-01 00:00:00] server_args=ServerArgs(model_path='m', page_size=16, "
     "disable_radix_cache=False)  ", [("model", "m"), ("block_size", "16"),
                                      ("enable_prefix_caching", "True")]),
    ("server_args=ServerArgs(model_path='m'", []),
])
def test_sglang_server_args_still_give_their_facts(line: str,
                                                   facts: list[tuple[str, str]]) -> None:
    assert engine_logs._sglang_config(line) == facts
