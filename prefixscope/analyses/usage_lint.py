"""The usage lint: where a store's token counts cannot be taken at face value.

A hit rate is only as good as the usage it is computed from, and sources disagree on
what "input tokens" means (docs/store.md "Usage, normalized", shared formats.md §10).
`lint_usage` reads every request's stored usage once (`Store.usage_facts`) and reports
each pattern that makes a number misleading, with the requests it concerns, the prompt
tokens at stake, example ids and the fix (docs/usage-lint.md explains each check):

* ``cached-exceeds-prompt`` -- a source whose prompt tokens exclude the cache;
* ``unaligned-cached`` -- cached counts that are not whole blocks of the block size the
  caller inferred (skipped without one; Anthropic-upstream rows count exactly and are
  left out);
* ``input-includes-cache-reads`` -- Anthropic-protocol calls answered from a
  cache-inclusive upstream through a converting gateway: the client is told
  ``input_tokens`` with the cache reads in them;
* ``missing-vs-zero`` -- a source that leaves cached tokens unreported on some (or all)
  requests;
* ``weighted-vs-mean`` -- the per-request mean hit rate more than 10 points from the
  token-weighted one;
* ``double-counted`` -- calls two sources logged (the store's ``duplicate_of``);
* ``impossible-count`` -- counts over what any context window holds
  (`MAX_CONTEXT_TOKENS`): ingest skips such a call now, a store written before did not.

Per-source checks read every row of their source (each source's view stays whole);
the two cross-source checks count every call once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from prefixscope.analyses.bucket import BLOCK_SIZES, MEAN_GAP_NOTE
from prefixscope.model.records import MAX_CONTEXT_TOKENS
from prefixscope.model.words import plural
from prefixscope.store import Store
from prefixscope.store.store import UsageFacts

KINDS = ("cached-exceeds-prompt", "unaligned-cached", "input-includes-cache-reads",
         "missing-vs-zero", "weighted-vs-mean", "double-counted", "impossible-count")
MAX_EXAMPLES = 5

# Conventions of an Anthropic upstream: its cached counts are exact token counts (no
# blocks), and its input_tokens already exclude the cache (ingest/normalize/usage.py,
# formats/newapi.py, formats/otel.py, formats/tracelab.py).
ANTHROPIC_NATIVE = frozenset({"anthropic", "new-api:claude", "otel:anthropic-exclusive",
                              "tracelab:claude"})
# new-api logging a /v1/messages call with `other.claude` false: the upstream was
# OpenAI-compatible, and new-api's buildClaudeUsageFromOpenAIUsage (service/convert.go)
# answers the client with input_tokens = prompt_tokens, cache included (formats.md §2.3).
_CONVERTED_INCLUSIVE = frozenset({"new-api:openai"})


@dataclass(frozen=True)
class UsageIssue:
    """One pattern in the store's usage, with what it concerns and the fix."""

    kind: str  # one of KINDS
    title: str  # one line a person understands, with the numbers
    requests: int  # how many requests it concerns
    tokens: int  # prompt tokens of those requests (0 when they report none)
    examples: tuple[str, ...]  # up to MAX_EXAMPLES request ids, in time order
    evidence: Mapping[str, object]  # JSON-able figures behind the title
    fix: str


@dataclass(frozen=True)
class UsageLint:
    """Every issue found, in the order of KINDS (per-source issues by source)."""

    issues: tuple[UsageIssue, ...]
    checked_requests: int  # requests in the store (every source's rows)
    block_size: int | None  # the block size unaligned-cached checked against (None: skipped)


def lint_usage(store: Store, block_size: int | None = None) -> UsageLint:
    """Run every usage check over `store`. `block_size` is the engine's block size (as
    `bucket` infers it); without one, cached counts are not checked for alignment."""
    if block_size is not None and block_size <= 0:
        raise ValueError(f"block size must be a positive number of tokens, not {block_size}")
    rows = store.usage_facts()
    by_source: dict[str, list[UsageFacts]] = {}
    for row in rows:
        if row.duplicate_of is not None and row.kept_format == row.source_format:
            continue  # a copy of a call its own format logged too: counted through the kept
        by_source.setdefault(row.source_format, []).append(row)
    sources = sorted(by_source.items())
    issues: list[UsageIssue] = []
    issues += _per_source(sources, _cached_exceeds_prompt)
    if block_size is not None:
        bs = block_size
        issues += _per_source(sources, lambda src, rs: _unaligned_cached(src, rs, bs))
    issues += _optional(_input_includes_cache_reads(rows))
    issues += _per_source(sources, _missing_vs_zero)
    issues += _per_source(sources, _weighted_vs_mean)
    issues += _optional(_double_counted(rows))
    issues += _optional(_impossible_count(rows))
    return UsageLint(issues=tuple(issues), checked_requests=len(rows), block_size=block_size)


def _per_source(sources: Sequence[tuple[str, list[UsageFacts]]],
                check: Callable[[str, list[UsageFacts]], UsageIssue | None]) -> list[UsageIssue]:
    return [issue for src, rows in sources if (issue := check(src, rows)) is not None]


def _optional(issue: UsageIssue | None) -> list[UsageIssue]:
    return [] if issue is None else [issue]


def _examples(rows: Iterable[UsageFacts]) -> tuple[str, ...]:
    return tuple(r.id for r in rows)[:MAX_EXAMPLES]


def _prompt(rows: Iterable[UsageFacts]) -> int:
    return sum(r.prompt_tokens or 0 for r in rows)


def _both(rows: Iterable[UsageFacts]) -> list[UsageFacts]:
    return [r for r in rows if r.prompt_tokens is not None and r.cached_tokens is not None]


def _cached_exceeds_prompt(source: str, rows: list[UsageFacts]) -> UsageIssue | None:
    both = _both(rows)
    over = [r for r in both if (r.cached_tokens or 0) > (r.prompt_tokens or 0)]
    if not over:
        return None
    cached = sum(r.cached_tokens or 0 for r in over)
    prompt = _prompt(over)
    return UsageIssue(
        kind="cached-exceeds-prompt",
        title=(f"{source}: {len(over)} of {plural(len(both), 'request')} reporting both show "
               "more cached than prompt "
               f"tokens ({cached:,} cached over {prompt:,} prompt): their prompt tokens "
               "exclude the cache"),
        requests=len(over), tokens=prompt, examples=_examples(over),
        evidence={"source": source, "requests_reporting_both": len(both),
                  "cached_tokens": cached, "prompt_tokens": prompt,
                  "excess_tokens": cached - prompt,
                  "semantics": sorted({r.semantics or "unknown" for r in over})},
        fix=("Count cache reads and writes in this source's prompt tokens (prompt = input + "
             "cache read + cache write, the OpenAI convention) before computing a hit rate: "
             "the source mixes conventions, or reports Anthropic-style input_tokens as its "
             "prompt; until then its hit rate can exceed 100%."),
    )


def _exact_counts(row: UsageFacts) -> bool:
    """An Anthropic upstream counts cached tokens exactly: no block size applies."""
    if row.semantics in ANTHROPIC_NATIVE:
        return True
    return row.endpoint == "anthropic-messages" and not _converted(row)


def _converted(row: UsageFacts) -> bool:
    """The gateway turned an Anthropic request into another protocol's."""
    gateway = row.gateway or ""
    return (gateway.startswith("anthropic-to-") and gateway != "anthropic-to-anthropic") \
        or row.semantics in _CONVERTED_INCLUSIVE


def _largest_dividing(values: Sequence[int]) -> int | None:
    fits = [bs for bs in BLOCK_SIZES if all(v % bs == 0 for v in values)]
    return fits[-1] if fits else None


def _unaligned_cached(source: str, rows: list[UsageFacts], block_size: int) -> UsageIssue | None:
    checked = [r for r in rows if (r.cached_tokens or 0) > 0 and not _exact_counts(r)]
    off = [r for r in checked if (r.cached_tokens or 0) % block_size]
    if not off:
        return None
    share = len(off) / len(checked)
    values = [r.cached_tokens or 0 for r in checked]
    return UsageIssue(
        kind="unaligned-cached",
        title=(f"{source}: {len(off)} of {len(checked)} non-zero cached values ({share:.1%}) "
               f"are not whole {block_size}-token blocks"),
        requests=len(off), tokens=_prompt(off), examples=_examples(off),
        evidence={"source": source, "block_size": block_size, "nonzero_values": len(checked),
                  "unaligned": len(off), "share": share,
                  "exact_count_requests": sum(1 for r in rows if (r.cached_tokens or 0) > 0
                                              and _exact_counts(r)),
                  "largest_block_dividing_all": _largest_dividing(values)},
        fix=(f"These counts did not come from a {block_size}-token block cache: check the "
             "block size (bucket --block-size), whether this source mixes engines or a hosted "
             "API with the self-hosted one (split it with bucket --by source,model), or whether "
             "the engine runs with another block or page size. Constants that are not whole "
             "blocks cannot be matched to a segment boundary."),
    )


def _input_includes_cache_reads(rows: Sequence[UsageFacts]) -> UsageIssue | None:
    calls: dict[str, UsageFacts] = {}
    for r in rows:
        if (r.endpoint == "anthropic-messages" and (r.cached_tokens or 0) > 0
                and r.semantics not in ANTHROPIC_NATIVE and _converted(r)):
            call = r.duplicate_of or r.id  # a call two sources logged counts once,
            if call not in calls or r.duplicate_of is None:  # through the copy kept
                calls[call] = r
    hit = list(calls.values())
    if not hit:
        return None
    prompt = _prompt(hit)
    reads = sum(r.cached_tokens or 0 for r in hit)
    gateways = Counter(r.gateway or "unknown" for r in hit)
    named = ", ".join(sorted(gateways))
    return UsageIssue(
        kind="input-includes-cache-reads",
        title=(f"{plural(len(hit), 'Anthropic-protocol call')} answered by a cache-inclusive "
               f"upstream through a converting gateway ({named}): unless the gateway subtracts "
               f"them, the client's input_tokens include {reads:,} cache-read tokens, counted "
               "twice as context"),
        requests=len(hit), tokens=prompt, examples=_examples(hit),
        evidence={"calls": len(hit), "prompt_tokens": prompt, "cache_read_tokens": reads,
                  "cache_write_tokens": sum(r.cache_write_tokens or 0 for r in hit),
                  "by_gateway": dict(sorted(gateways.items())),
                  "by_source": dict(sorted(Counter(r.source_format for r in hit).items())),
                  "semantics": sorted({r.semantics or "unknown" for r in hit})},
        fix=("Make the gateway answer Anthropic clients in Anthropic's convention: "
             "input_tokens = prompt_tokens - cache_read_input_tokens - "
             "cache_creation_input_tokens (new-api: the channel setting "
             "anthropic_messages_exclude_cache proposed in new-api PR #6821). A client "
             "that adds the cache reads to input_tokens (Claude Code) otherwise over-counts "
             "its context by the cached tokens and compacts early, which rewrites the prefix "
             "again."),
    )


def _missing_vs_zero(source: str, rows: list[UsageFacts]) -> UsageIssue | None:
    missing = [r for r in rows if r.cached_tokens is None]
    if not missing:
        return None
    zero = sum(1 for r in rows if r.cached_tokens == 0)
    positive = len(rows) - len(missing) - zero
    no_prompt = sum(1 for r in missing if r.prompt_tokens is None)
    evidence = {"source": source, "requests": len(rows), "cached_missing": len(missing),
                "cached_zero": zero, "cached_positive": positive,
                "missing_without_prompt": no_prompt,
                "requests_reporting_both": len(_both(rows))}
    if len(missing) == len(rows):
        what = "token counts" if no_prompt == len(rows) else "cached tokens"
        title = (f"{source}: none of its {len(rows):,} requests reports {what}: its hit rate "
                 "cannot be observed")
        fix = ("Log the cache counters with every request (0 when nothing was cached): "
               "vLLM --enable-prompt-tokens-details, the provider's prompt_tokens_details / "
               "cache_read_input_tokens, the gateway's usage columns. Until then only "
               "prefixscope simulate can tell what the cache should do.")
    else:
        # a request whose log has no usage at all (a call that failed or was cancelled
        # before any arrived: Cline's `streaming_failed`) is not a dropped counter: it is
        # outside the basis for its own reason (the ledger says which), not this issue's
        unreported = [r for r in missing if r.prompt_tokens is not None]
        if not unreported:
            return None
        zeros = (f"{zero} report 0" if zero else
                 f"none reports 0 ({positive} report a positive count)")
        verb = "does" if len(unreported) == 1 else "do"
        without = (f" ({no_prompt} more log no usage at all)" if no_prompt else "")
        title = (f"{source}: {len(unreported)} of {len(rows)} requests {verb} not report "
                 f"cached tokens{without} while {zeros}: a missing count is not a miss, and "
                 f"the hit rate is only over the {len(_both(rows))} requests reporting both")
        missing = unreported
        fix = ("Make the source report cached tokens on every request, 0 included (some "
               "providers and exporters drop a zero counter; a missing one may be a zero or "
               "an unlogged hit). prefixscope keeps unreported as NULL and computes the hit "
               "rate over requests reporting both; a dashboard that reads NULL as 0 "
               "understates it, one that drops the zeros overstates it.")
    return UsageIssue(kind="missing-vs-zero", title=title, requests=len(missing),
                      tokens=_prompt(missing), examples=_examples(missing),
                      evidence=evidence, fix=fix)


def _weighted_vs_mean(source: str, rows: list[UsageFacts]) -> UsageIssue | None:
    basis = [(r, r.prompt_tokens or 0, r.cached_tokens or 0)
             for r in _both(rows) if (r.prompt_tokens or 0) > 0]
    if not basis:
        return None
    prompt = sum(p for _, p, _ in basis)
    cached = sum(c for _, _, c in basis)
    weighted = cached / prompt
    mean = sum(c / p for _, p, c in basis) / len(basis)
    gap = mean - weighted
    if abs(gap) <= MEAN_GAP_NOTE:
        return None
    # mean - weighted = sum over requests of (ratio - weighted) * (1/n - prompt/total):
    # the examples are the requests pulling the mean furthest towards its side.
    n = len(basis)
    pull = sorted(basis, key=lambda b: -((b[2] / b[1] - weighted) * (1 / n - b[1] / prompt))
                  * (1 if gap > 0 else -1))
    side = "above" if gap > 0 else "below"
    return UsageIssue(
        kind="weighted-vs-mean",
        title=(f"{source}: the per-request mean hit rate ({mean:.1%}) is "
               f"{abs(gap) * 100:.1f} points {side} the token-weighted one ({weighted:.1%}) "
               f"over {n} requests: the token-weighted rate is what the cache saved"),
        requests=n, tokens=prompt, examples=tuple(b[0].id for b in pull[:MAX_EXAMPLES]),
        evidence={"source": source, "requests": n, "prompt_tokens": prompt,
                  "cached_tokens": cached, "token_weighted_hit_rate": weighted,
                  "mean_request_hit_rate": mean, "gap_points": gap * 100},
        fix=("Quote the token-weighted hit rate (sum of cached tokens / sum of prompt tokens): "
             "it is the share of prompt tokens the cache served, what cost and latency follow. "
             "A mean of per-request ratios weighs a 50-token call like a 50,000-token one; "
             "the examples are the requests that pull it furthest."),
    )


def _double_counted(rows: Sequence[UsageFacts]) -> UsageIssue | None:
    copies = [r for r in rows if r.duplicate_of is not None]
    if not copies:
        return None
    prompt = _prompt(copies)
    pairs = Counter(f"{r.source_format} -> {r.kept_format or 'unknown'}" for r in copies)
    named = ", ".join(f"{k} ({v})" for k, v in sorted(pairs.items()))
    return UsageIssue(
        kind="double-counted",
        title=(f"{plural(len(copies), 'call')} logged twice (copy -> copy kept: {named}): summing "
               f"the logs would count {prompt:,} prompt tokens twice"),
        requests=len(copies), tokens=prompt, examples=_examples(copies),
        evidence={"copies": len(copies), "prompt_tokens": prompt,
                  "cached_tokens": sum(r.cached_tokens or 0 for r in copies),
                  "by_sources": dict(sorted(pairs.items()))},
        fix=("Count each call once: prefixscope links every second log of a call to the copy "
             "it keeps (duplicate_of) and its totals count the kept copy only; in your own "
             "SQL over the store add `WHERE duplicate_of IS NULL`, and do not add up the "
             "gateway's and the tracer's dashboards."),
    )


_COUNTS = ("prompt_tokens", "cached_tokens", "cache_write_tokens")


def _impossible_count(rows: Sequence[UsageFacts]) -> UsageIssue | None:
    """Stored counts over `MAX_CONTEXT_TOKENS`: no call holds them (a damaged counter)."""
    over = [r for r in rows
            if any((getattr(r, name) or 0) > MAX_CONTEXT_TOKENS for name in _COUNTS)]
    if not over:
        return None
    over.sort(key=lambda r: -max(getattr(r, name) or 0 for name in _COUNTS))
    largest = max(getattr(over[0], name) or 0 for name in _COUNTS)
    fields = sorted({name for r in over for name in _COUNTS
                     if (getattr(r, name) or 0) > MAX_CONTEXT_TOKENS})
    return UsageIssue(
        kind="impossible-count",
        title=(f"{plural(len(over), 'request')} report more tokens than any context window "
               f"holds (over {MAX_CONTEXT_TOKENS:,} in {', '.join(fields)}; the largest "
               f"{largest:,}): a damaged counter in every total that sums them"),
        requests=len(over), tokens=_prompt(over), examples=_examples(over),
        evidence={"bound": MAX_CONTEXT_TOKENS, "largest": largest, "fields": fields},
        fix=("Ingest the log again with this version (into a new store): a call reporting "
             "such a count is one counted skip naming it, left out of every total; or correct "
             "the source's counter. Until then every hit rate, spend and gate over this "
             "store includes it: the examples are the requests with the largest counts."),
    )
