"""The CI gate: thresholds a report must meet, and the stable-prefix baseline.

* ``hit-rate`` (``--fail-under``): the token-weighted hit rate observed, or the replay's
  prediction when the log reports no cached tokens;
* ``volatile-before`` (``--max-volatile-before``): the earliest token at which two
  consecutive turns diverge (a breaking cause: not append-only, identical, compaction)
  must not come before the threshold;
* ``baseline:<scenario>`` (``--baseline``): each recorded scenario's stable prefix -- the
  fewest tokens any turn shares with the next -- must not shrink against a saved baseline.

A scenario is a session: its id when the log names it, else ``<file>#<n>`` (the n-th
threaded session of that file, in time order; the file by its shortest path no other
file ends with), so a re-recorded run of the same file keeps its names.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prefixscope.analyses.diff import DiffReport
from prefixscope.findings.model import Gate, GateCheck, ScenarioPrefix, Summary
from prefixscope.findings.names import short_names

BASELINE_FORMAT = 1
NOT_BREAKING = frozenset({"identical", "append-only", "compaction"})


class BaselineError(ValueError):
    """A baseline file that cannot be used (one line, for a person)."""


@dataclass(frozen=True, slots=True)
class GateOptions:
    fail_under: float | None = None
    max_volatile_before: int | None = None
    baseline: Mapping[str, int] | None = None  # scenario -> stable prefix tokens


def scenario_prefixes(diff: DiffReport | None,
                      origins: Sequence[tuple[str, bool, str, int]]) -> tuple[ScenarioPrefix, ...]:
    """Each session's stable prefix over its diffed consecutive pairs (compactions aside)."""
    if diff is None:
        return ()
    shared: dict[str, list[int]] = defaultdict(list)
    for pair in diff.pairs:
        if pair.session is None or pair.cause == "compaction":
            continue
        d = pair.first_divergence
        shared[pair.session].append(d.token if d is not None else pair.tokens_a)
    names: dict[str, str] = {}
    per_file: dict[str, int] = defaultdict(int)
    files = short_names(sorted({file for _s, _e, file, _t in origins}))
    for session, explicit, file, _turns in origins:
        if explicit:
            names[session] = session
        else:
            per_file[file] += 1
            names[session] = f"{files[file]}#{per_file[file]}"
    turns = {session: n for session, _e, _f, n in origins}
    return tuple(sorted((ScenarioPrefix(names.get(s, s), turns.get(s, len(v) + 1), min(v))
                         for s, v in shared.items()), key=lambda p: p.scenario))


def earliest_divergence(diff: DiffReport | None) -> int | None:
    """The first token any breaking pair diverges at (None: none does)."""
    if diff is None:
        return None
    tokens = [p.first_divergence.token for p in diff.pairs
              if p.cause not in NOT_BREAKING and p.first_divergence is not None]
    return min(tokens) if tokens else None


def evaluate(options: GateOptions, summary: Summary, diff: DiffReport | None,
             scenarios: Sequence[ScenarioPrefix]) -> Gate:
    checks: list[GateCheck] = []
    if options.fail_under is not None:
        rate, basis = summary.hit_rate, "observed"
        if rate is None:
            rate, basis = summary.hit_rate_predicted, "predicted (the log reports no cache)"
        ok = rate is not None and rate >= options.fail_under
        detail = (f"hit rate {basis} {rate:.2%} vs at least {options.fail_under:.2%}"
                  if rate is not None else "no hit rate: the log reports no cached tokens and "
                  "nothing could be replayed")
        checks.append(GateCheck("hit-rate", ok, rate, options.fail_under, detail))
    if options.max_volatile_before is not None:
        limit = options.max_volatile_before
        if diff is None:
            checks.append(GateCheck("volatile-before", False, None, limit,
                                    "no request bodies: divergence points cannot be checked"))
        else:
            first = earliest_divergence(diff)
            ok = first is None or first >= limit
            detail = ("no consecutive turns diverge (append-only)" if first is None else
                      f"earliest divergence at token {first:,} vs not before {limit:,}")
            checks.append(GateCheck("volatile-before", ok, first, limit, detail))
    if options.baseline is not None:
        current = {s.scenario: s.stable_prefix_tokens for s in scenarios}
        for name, saved in sorted(options.baseline.items()):
            now = current.get(name)
            if now is None:
                checks.append(GateCheck(f"baseline:{name}", False, None, saved,
                                        "scenario not in these logs (or no pair diffed)"))
            else:
                checks.append(GateCheck(
                    f"baseline:{name}", now >= saved, now, saved,
                    f"stable prefix {now:,} tokens vs {saved:,} in the baseline"
                    + ("" if now >= saved else f" (shrank by {saved - now:,})")))
    return Gate(all(c.passed for c in checks), tuple(checks))


def baseline_document(scenarios: Sequence[ScenarioPrefix], about: Mapping[str, Any]
                      ) -> dict[str, Any]:
    """The JSON a baseline file holds (`--write-baseline`)."""
    return {"prefixscope_baseline": BASELINE_FORMAT, "metric": "stable_prefix_tokens",
            **about, "scenarios": {s.scenario: s.stable_prefix_tokens for s in scenarios}}


def read_baseline(text: str, name: str) -> dict[str, int]:
    """scenario -> tokens from a baseline file's text.

    Raises:
        BaselineError: not JSON, or not a prefixscope baseline.
    """
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise BaselineError(f"{name}: not a baseline file (bad JSON: {exc})") from None
    if not isinstance(doc, dict) or doc.get("prefixscope_baseline") != BASELINE_FORMAT:
        raise BaselineError(f"{name}: not a prefixscope baseline (write one with "
                            "--write-baseline)")
    scenarios = doc.get("scenarios")
    if not isinstance(scenarios, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
            for k, v in scenarios.items()):
        raise BaselineError(f"{name}: 'scenarios' must map scenario names to token counts")
    return dict(scenarios)
