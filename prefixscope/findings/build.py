"""`build_report`: the finders run over the gathered evidence, ranked by the ledger tokens
each finding accounts for, each given its share of the basis's prompt tokens and a
severity, then gated; the what-ifs asked for, priced."""

from __future__ import annotations

from dataclasses import replace

from prefixscope.analyses.diff import DEFAULT_CONTEXT, windowed
from prefixscope.engines import ttl_split_engine
from prefixscope.findings.breakdown import breakdown
from prefixscope.findings.evidence import Evidence
from prefixscope.findings.finders import FINDERS
from prefixscope.findings.gate import GateOptions, evaluate, scenario_prefixes
from prefixscope.findings.model import (
    FLOOR_TOKENS_PER_REQUEST,
    FLOOR_TOTAL_TOKENS,
    HIGH_SHARE,
    LENS_KINDS,
    MEDIUM_SHARE,
    Finding,
    ReplayBasis,
    Report,
    Summary,
    WhatIfLine,
    reading_order,
)
from prefixscope.findings.pinning import pin_backend, pin_line
from prefixscope.findings.policy import policy_line
from prefixscope.findings.ttl_choice import TTL_WHAT_IFS
from prefixscope.model.whatifs import PIN_BACKEND, POLICY
from prefixscope.prompt import render
from prefixscope.store import Store


def summarize(ev: Evidence) -> Summary:
    """The summary over the ledger's basis: the hit rate and its totals over the same
    requests, predicted and ideal over the basis's requests the replay rebuilt."""
    u = ev.usage
    sim = ev.simulate
    ledger = ev.ledger
    if ledger is None:  # nothing but engine logs
        return Summary(u.requests, u.sessions, 0, 0, None, None, None)
    basis = ledger.basis
    replay = replay_basis(ev)
    return Summary(
        requests=u.requests, sessions=_sessions(ev), prompt_tokens=basis.prompt_tokens,
        cached_tokens=basis.cached_tokens,
        hit_rate=basis.hit_rate if basis.source == "observed" else None,
        hit_rate_predicted=replay.hit_rate_predicted if replay else None,
        hit_rate_ideal=replay.hit_rate_ideal if replay else None,
        engine=sim.engine if sim else None,
        replayed_requests=replay.requests if replay else 0,
        replayed_prompt_tokens=replay.replayed_prompt_tokens if replay else 0,
        basis=basis, replay=replay, money=ledger.money)


def _sessions(ev: Evidence) -> int:
    """The sessions the requests are in, every call once (as `requests` counts them, and
    `bucket --by session` groups them): a second log of a call (another source logged it
    too) is in its first copy's session, not in one of its own."""
    kept = {r.session for r in ev.records if r.duplicate_of is None and r.session}
    return len(kept) if ev.records else ev.usage.sessions


def replay_basis(ev: Evidence) -> ReplayBasis | None:
    """Observed, predicted and ideal over the same requests: the basis's that were replayed."""
    if ev.simulate is None or ev.ledger is None:
        return None
    sims = {r.id: r for r in ev.simulate.per_request}
    entries = [e for e in ev.ledger.entries if e.id in sims]
    if not entries:
        return None
    replayed = sum(sims[e.id].prompt_tokens for e in entries)
    observed = ev.ledger.basis.source == "observed"
    logged = sum(e.prompt_tokens for e in entries)
    cached = sum(e.cached_tokens for e in entries)
    bodies = {r.id for r in ev.records if r.has_body}
    # coverage, call by call: the rendered prompt against the prompt tokens the log reports
    counted = {r.id: r.prompt_tokens for r in ev.records if r.prompt_tokens}
    both = [e.id for e in entries if e.id in counted and e.id in ev.rendered]
    return ReplayBasis(
        len(entries), logged, cached, replayed,
        cached / logged if observed and logged else None,
        sum(sims[e.id].predicted for e in entries) / replayed if replayed else None,
        sum(sims[e.id].ideal for e in entries) / replayed if replayed else None,
        sum(e.id in bodies for e in entries),
        sum(counted[i] or 0 for i in both) if both else None,
        sum(ev.rendered[i] for i in both),
        sum(e.id in ev.not_rebuilt for e in entries))


def share_basis(summary: Summary, ev: Evidence) -> int:
    """The basis's prompt tokens: what every finding's share is of."""
    return summary.prompt_tokens


def severity(finding: Finding, basis: int = 0) -> str:
    """The finder's, else by its share of the basis's prompt tokens (a lens: by the share
    it shows of the ledger's losses)."""
    if finding.severity:
        return finding.severity
    share = finding.share
    if finding.kind in LENS_KINDS:
        shows = finding.evidence.get("shows_tokens", 0)
        share = shows / basis if basis and isinstance(shows, int) else 0.0
        if not share:
            return "info"
    if finding.kind not in LENS_KINDS and below_floor(finding):
        return "low"
    if share >= HIGH_SHARE:
        return "high"
    if share >= MEDIUM_SHARE:
        return "medium"
    return "low" if finding.lost_tokens or finding.kind in LENS_KINDS else "info"


def below_floor(finding: Finding) -> bool:
    """A cause finding under the significance floor: it lost tokens, fewer than
    `FLOOR_TOTAL_TOKENS` in all and fewer than `FLOOR_TOKENS_PER_REQUEST` per request on
    average (its requests: `evidence["requests"]`, else its pairs, else one)."""
    lost = finding.lost_tokens
    if not lost or lost >= FLOOR_TOTAL_TOKENS:
        return False
    n = finding.evidence.get("requests") or finding.evidence.get("pairs") or 1
    return isinstance(n, int) and lost < FLOOR_TOKENS_PER_REQUEST * max(1, n)


def build_report(ev: Evidence, gate: GateOptions | None = None,
                 by: tuple[str, ...] = ()) -> Report:
    """The report over `ev`; `by`: the ledger broken down by these dimensions too.

    Raises:
        ValueError: an unknown `by` dimension.
    """
    summary = summarize(ev)
    basis = share_basis(summary, ev)
    found: list[Finding] = []
    for finder in FINDERS:
        for f in finder(ev):
            shared = f.lost_tokens / basis if basis else 0.0
            f = replace(f, share=shared)
            found.append(replace(f, severity=severity(f, basis)))
    if ev.ledger is not None:
        _check_claims(found, ev.ledger.missed_tokens)
    found.sort(key=reading_order)
    scenarios = scenario_prefixes(ev.diff, ev.scenarios)
    table = breakdown(ev.ledger, ev.records, by) if by and ev.ledger is not None else None
    return Report(summary, tuple(found), evaluate(gate or GateOptions(), summary, ev.diff,
                                                   scenarios), scenarios, ev.notes, ev,
                  ev.ledger, priced_what_ifs(ev), table)


def shown_windows(report: Report, store: Store) -> Report:
    """`report` with the texts around the split (`diff.windowed`) of each pair a view shows
    them of -- each finding's first example pair (`views.wording.divergence`) -- where the
    walk left them unmade (`gather(windows=False)`): the report's other pairs are never
    shown with their texts, and masking a window around each split was ~5% of the walk.

    The same texts: `windowed` is a function of the two prompts, the divergence's offsets
    (made by the walk) and the run's redactor, and each prompt here is its request's
    render with the diff's options, which is the prompt the walk diffed (a turn the walk
    made from its predecessor's is that render: `prompt.pipeline`, tests/test_splice.py).
    The walk's context is the default one (`evidence._pass_setup`)."""
    ev = report.evidence
    if ev is None or ev.diff is None:
        return report
    shown = {(str(pairs[0][0]), str(pairs[0][1])) for f in report.findings
             if (pairs := f.evidence.get("example_pairs"))}
    unmade = [i for i, p in enumerate(ev.diff.pairs) if (p.a, p.b) in shown and
              p.first_divergence is not None and p.first_divergence.text_a is None]
    if not unmade:
        return report
    pairs = list(ev.diff.pairs)
    loaded = store.get_many(rid for i in unmade for rid in (pairs[i].a, pairs[i].b))
    options = ev.diff.options
    for i in unmade:
        pair, divergence = pairs[i], pairs[i].first_divergence
        assert divergence is not None  # (`unmade`)
        pairs[i] = replace(pair, first_divergence=windowed(
            divergence, render(loaded[pair.a], options).text,
            render(loaded[pair.b], options).text, DEFAULT_CONTEXT))
    return replace(report, evidence=replace(ev, diff=replace(ev.diff, pairs=tuple(pairs))))


def priced_what_ifs(ev: Evidence) -> tuple[WhatIfLine, ...]:
    """The what-ifs asked for (--what-if), each priced: a render transform by the replay's
    gain, a TTL choice in dollars; the TTL choices also when a hosted prefix expired, and
    pinning each session to one backend (`findings.pinning`) when a session hopped."""
    pinned = pin_backend(ev.ledger, ev.records) if ev.ledger is not None else None
    asked = ev.requested_what_if or (*(w.name for w in ev.ttl_what_ifs),
                                     *((PIN_BACKEND,) if pinned and pinned.hopped else ()))
    ttl = {w.name: w for w in ev.ttl_what_ifs}
    replayed = {w.transform: w for w in ev.simulate.what_if} if ev.simulate else {}
    out = []
    for name in dict.fromkeys(asked):
        if name == PIN_BACKEND:
            out.append(pin_line(pinned))
        elif name == POLICY:
            out.append(policy_line(ev.policy, ev.ledger, ev.records,
                                   [p.b for p in ev.diff.pairs] if ev.diff else ()))
        elif name in TTL_WHAT_IFS:
            w = ttl.get(name)
            out.append(WhatIfLine(name, w.detail, saved_usd=w.saved_usd, cost_usd=w.cost_usd,
                                  net_usd=w.net_usd) if w is not None else WhatIfLine(
                name, f"no {_ttl_choosing()}-cached prefix expired in a pause (priced "
                      "calls only): nothing to price"))
        elif name in replayed:
            r = replayed[name]
            out.append(WhatIfLine(name, f"the replay gains {r.gain_tokens:,} cached tokens: "
                                  f"predicted hit rate {_pct(ev.simulate.hit_rate_predicted)} "
                                  f"→ {_pct(r.hit_rate_predicted)}" if ev.simulate else "",
                                  gain_tokens=r.gain_tokens,
                                  hit_rate_predicted=r.hit_rate_predicted))
        else:
            out.append(WhatIfLine(name, "not priced: no replay of this log renders prompts"))
    return tuple(out)


def _ttl_choosing() -> str:
    """The engine whose writes choose their TTL (`engines.ttl_split_engine`: the one the
    TTL what-ifs price), as a finding names it."""
    spec = ttl_split_engine()
    return spec.label if spec is not None else "hosted"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _check_claims(found: list[Finding], missed: int) -> None:
    """The invariant a reader checks with a calculator: no finding claims more than the
    ledger holds, and together they claim no token twice."""
    claimed = sum(f.lost_tokens for f in found)
    assert all(f.lost_tokens == 0 for f in found if f.kind in LENS_KINDS), \
        "a lens claims no tokens of its own"
    assert claimed <= missed, f"findings claim {claimed:,} of {missed:,} missed tokens"
