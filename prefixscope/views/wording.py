"""The report's summary in sentences, written once for every view (terminal, Markdown,
HTML), so that each says the same basis, coverage, ledger and dollars in the same words.

Each function returns plain text (no markup); views escape it their own way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from prefixscope.findings.ledger import CAUSES, LOSSES, NOT_LOSSES, Ledger
from prefixscope.findings.model import (
    LENS_KINDS,
    READING_GROUPS,
    Finding,
    ReplayBasis,
    Report,
    Summary,
    reading_group,
)
from prefixscope.findings.verdicts import reconcile
from prefixscope.model.words import CLAUDE_NOT_PUBLIC as CLAUDE_NOT_PUBLIC  # defined there
from prefixscope.model.words import STAND_IN as STAND_IN
from prefixscope.model.words import plural as plural
from prefixscope.tokenizers import DEFAULT_TOKENIZER, no_public_tokenizer

if TYPE_CHECKING:
    from prefixscope.findings.evidence import Evidence

# The three hit rates every report view and `simulate` print side by side, in one line.
RATES_LEGEND = ("observed: the cache the log reports; predicted: a replay of the same "
                "prompts through the engine's cache model (its block size, capacity and "
                "retention); ideal: the same replay with an unlimited cache and no expiry, "
                "the most any cache could have served")


def usd(value: float) -> str:
    """Dollars as a person reads them: cents, or four places below a cent."""
    if value and abs(value) < 0.01:
        return f"${value:,.4f}"
    return f"${value:,.2f}"


def basis_line(s: Summary) -> str:
    """What the totals and the hit rate are over."""
    b = s.basis
    head = f"{plural(s.requests, 'request')} in {plural(s.sessions, 'session')}"
    if b is None or b.source == "none":
        return head + " · no request reports its cached tokens and none could be replayed"
    rate = f" = {b.hit_rate:.2%}" if b.hit_rate is not None else ""
    what = ("cached" if b.source == "observed" else "cached as the replay predicts")
    line = (f"{head} · {b.prompt_tokens:,} prompt tokens, {b.cached_tokens:,} {what}{rate}"
            f" over {'all ' if not b.outside_requests else ''}"
            f"{plural(b.requests, 'request')}")
    if b.source == "predicted":
        line += " (the log reports no cached tokens: the replay's prediction)"
    if b.outside_requests:
        line += (f" + {plural(b.outside_requests, 'request')} outside the basis "
                 f"({b.outside_reason})")
    return line


def rates_title(s: Summary) -> str:
    r = s.replay
    if r is None:
        return "hit rate (cached / prompt tokens)"
    b = s.basis
    every = b is not None and r.requests == b.requests
    return (f"hit rate (cached / prompt tokens) over the {'' if not every else 'same '}"
            f"{plural(r.requests, 'request')}" + ("" if every else " the replay rebuilt"))


def replay_lines(s: Summary) -> list[str]:
    """Coverage and consistency of the replay: what predicted and ideal can be trusted for."""
    r = s.replay
    if r is None:
        return []
    out = []
    if r.partial and r.coverage is not None:
        out.append(f"the log let the bodies be rebuilt to {r.coverage:.0%} of the logged "
                   f"prompt tokens ({r.rebuilt_prompt_tokens:,} of "
                   f"{r.logged_prompt_tokens or 0:,}): predicted and ideal are partial; the "
                   "ledger and the findings are sized on the logged usage, no below-minimum "
                   "or break on a prompt the log could not rebuild")
    elif r.partial:
        out.append(f"the log lacks part of {plural(r.not_rebuilt, 'prompt')} (the system "
                   "prompt, the tools) and logs no prompt tokens to size them by: predicted "
                   "and ideal are over partial prompts, and no below-minimum or break is "
                   "sized on them")
    above = above_ideal(r)
    if above is not None:
        out.append(above)
    return out


def above_ideal(r: ReplayBasis | None) -> str | None:
    """Why observed is above ideal (by more than half a point), one sentence; None when it
    is not. Every view says it, the JSON too (`summary.replay.above_ideal`)."""
    if (r is None or r.hit_rate_observed is None or r.hit_rate_ideal is None
            or r.hit_rate_observed <= r.hit_rate_ideal + 0.005):
        return None
    why = ("the rebuilt prompts lack part of what was sent, or the cache served other "
           "traffic's prefixes" if r.with_body else
           "replayed from usage alone, the engine's rules (its minimum cacheable length, "
           "its TTL) cannot produce the cache the log reports: other traffic's prefixes, "
           "or rules the model lacks")
    return (f"observed {r.hit_rate_observed:.2%} is above the ideal {r.hit_rate_ideal:.2%}: "
            f"{why}; the ledger reads those requests from their usage")


def approximate_line(report: Report) -> str | None:
    """Which counts rest on a stand-in tokenizer (None: every count is the model's own)."""
    ev = report.evidence
    if ev is None:
        return None
    parts = []
    if ev.diff is not None:
        pairs = sum(p.approximate for p in ev.diff.pairs)
        if pairs:
            parts.append(f"{pairs:,} of {plural(len(ev.diff.pairs), 'diffed pair')}")
    if ev.simulate is not None and ev.simulate.approximate_requests:
        parts.append(f"{ev.simulate.approximate_requests:,} of "
                     f"{plural(ev.simulate.requests, 'replayed request')}")
    if not parts:
        return None
    counted = "approximate: " + " and ".join(parts) + " counted with "
    estimates = "their token positions and predicted cached tokens are estimates"
    claude = _claude_share(ev, {r.id: r.model for r in ev.records})
    if claude == "all":
        usage = ("; the hit rates and the ledger count the log's own usage"
                 if report.ledger is not None and report.ledger.basis.source == "observed"
                 else "")
        return (f"{counted}{DEFAULT_TOKENIZER} standing in for Claude's tokenizer, which "
                "Anthropic does not publish (no --tokenizer can make them exact): "
                f"{estimates}{usage}")
    own = f"{counted}a {STAND_IN} (the model's own is not available offline): {estimates}"
    if claude == "some":
        return (f"{own}; pass --tokenizer for exact ones, except for the Claude models "
                "(Anthropic publishes no tokenizer: theirs stay estimates)")
    return f"{own}; pass --tokenizer for exact ones"


def _claude_share(ev: Evidence, models: dict[str, str | None]) -> str:
    """Of the requests counted with a stand-in, whose model is Claude's: "all", "some" or
    "none" (a Claude model's tokenizer is never available, so each is a stand-in)."""
    pairs = [p.b for p in ev.diff.pairs if p.approximate] if ev.diff is not None else []
    counted = len(pairs) + (ev.simulate.approximate_requests if ev.simulate else 0)
    claude = sum(no_public_tokenizer(models.get(i)) for i in pairs)
    if ev.simulate is not None and ev.simulate.approximate_requests:
        claude += min(ev.simulate.approximate_requests,
                      sum(no_public_tokenizer(models.get(s.id))
                          for s in ev.simulate.per_request))
    return "all" if counted and claude == counted else "some" if claude else "none"


def ledger_line(ledger: Ledger | None) -> str | None:
    """Every missed token by cause, largest first; the parts sum to the whole."""
    if ledger is None or not ledger.basis.requests:
        return None
    if not ledger.missed_tokens:
        return "missed 0 tokens: every prompt token of the basis was cached"
    parts = [(c, ledger.by_cause[c]) for c in CAUSES if ledger.by_cause[c]]
    parts.sort(key=lambda kv: -kv[1])
    shown = " · ".join(f"{c} {n:,}" for c, n in parts)
    line = f"missed {ledger.missed_tokens:,} tokens: {shown}"
    if all(c in NOT_LOSSES for c, _ in parts):
        line += " — all unavoidable (cold starts, new tokens, partial blocks)"
    return line


def verdicts_line(report: Report) -> str | None:
    """The provider's own verdicts beside prefixscope's causes, when the log carries any."""
    if report.evidence is None or not report.evidence.verdicts:
        return None
    agreed = reconcile(report.ledger, report.evidence.verdicts)
    if not agreed.calls:
        return None
    return (f"provider verdicts: {plural(agreed.calls, 'call')} carry one; prefixscope's "
            f"cause agrees on {agreed.agree:,} of {agreed.compared:,} that name a change; "
            f"they count {agreed.provider_missed_tokens:,} missed tokens, the ledger "
            f"{agreed.lost_tokens:,} lost{_agreement(report)} (cause x reason: --json "
            "ledger.provider_verdicts)")


def _agreement(report: Report) -> str:
    """Agreement as a number: the share of the compared verdicts prefixscope's cause agrees
    with, said over every miss when every call of the basis that lost tokens carries a
    verdict, else over how many of them do."""
    assert report.evidence is not None
    agreed = reconcile(report.ledger, report.evidence.verdicts)
    if not agreed.compared or report.ledger is None:
        return ""
    lost = [e.id for e in report.ledger.entries if any(e.causes.get(c) for c in LOSSES)]
    carried = sum(i in report.evidence.verdicts for i in lost)
    said = f"; agreement {agreed.agree / agreed.compared:.0%}"
    if carried == len(lost):
        return said + ", every call that lost tokens carrying one"
    return said + f", verdicts on {carried:,} of {plural(len(lost), 'call')} that lost tokens"


def money_line(s: Summary) -> str | None:
    m = s.money
    if m is None or not m.priced_requests:
        return None
    lost = ""
    if m.lost_usd_by_cause:
        causes = sorted(m.lost_usd_by_cause.items(), key=lambda kv: -kv[1])
        lost = " · lost " + usd(m.lost_usd) + " (" + ", ".join(
            f"{c} {usd(v)}" for c, v in causes) + ")"
    unpriced = (f" · {plural(m.unpriced_requests, 'request')} unpriced"
                if m.unpriced_requests else "")
    saved = f"the cache saved {usd(m.saved_usd)}"
    if m.write_premium_usd > 0:  # both figures, labelled: the reads' and, net, caching's
        saved = (f"the cache reads saved {usd(m.saved_usd)}, {usd(m.net_saved_usd)} net of "
                 f"the {usd(m.write_premium_usd)} write premium")
    return f"spend {usd(m.spend_usd)} · {saved}{lost}{unpriced}"


# List prices within this share of the log's own cost agree with it (float noise, rounding
# of per-call figures to cents by some clients).
RECORDED_AGREES = 0.01


def recorded_cost_line(s: Summary) -> str | None:
    """The log's own cost beside list prices over the same calls (None: it records none)."""
    r = s.money.recorded if s.money is not None else None
    if r is None:
        return None
    head = f"the log's own cost {usd(r.usd)} over {plural(r.requests, 'call')}"
    if not r.compared_requests:
        return head + " (list prices price none of them)"
    some = (f" {r.compared_requests:,} of them" if r.compared_requests < r.requests
            else " the same calls")
    ratio = r.ratio
    if ratio is not None and abs(ratio - 1) <= RECORDED_AGREES:
        return f"{head}; list prices agree within 1% on{some} ({usd(r.compared_list_usd)})"
    gaps = [f"{m.model} {usd(m.list_usd)} against {usd(m.recorded_usd)}" for m in r.by_model
            if abs(m.list_usd - m.recorded_usd) > RECORDED_AGREES * max(m.recorded_usd, 1e-9)]
    times = f"{ratio:.2f}x: " if ratio is not None else ""
    return (f"{head}; list prices make {usd(r.compared_list_usd)} of{some} ({times}"
            f"{', '.join(gaps[:3])}{', ...' if len(gaps) > 3 else ''}): a gap is a price the "
            "data lacks or a charge the usage does not show")


def no_findings_line(report: Report) -> str:
    ledger = report.ledger
    if ledger is not None and ledger.missed_tokens and ledger.lost_tokens == 0:
        return ("no findings: every missed token is a cold start, new tokens or a partial "
                "block — nothing in these logs is costing cache")
    return "no findings: nothing in these logs is costing cache"


def what_if_lines(report: Report) -> list[str]:
    """One line per what-if; the policy's kinds of request each on a line of its own."""
    out = []
    for w in report.what_ifs:
        out.append(f"what-if {w.name}: {w.detail}")
        if w.policy is not None:
            out += [f"  policy · {part.detail}" for part in w.policy.parts]
    return out


# The reading order's groups (`findings.model.reading_group`), each under its own title in
# every view, so that a person never reads a severity out of order.
GROUP_TITLES = {
    "cause": "what is costing cache — causes, severe first",
    "lens": "where the loss shows — lenses, no tokens of their own",
    "info": "what costs nothing — for information",
}


def grouped(findings: Sequence[Finding]) -> list[tuple[str, list[tuple[int, Finding]]]]:
    """`findings` (in the reading order) numbered from 1 and cut into their groups, in
    `READING_GROUPS` order; a group with no finding is left out."""
    groups: dict[str, list[tuple[int, Finding]]] = {g: [] for g in READING_GROUPS}
    for n, f in enumerate(findings, 1):
        groups[reading_group(f)].append((n, f))
    return [(g, shown) for g, shown in groups.items() if shown]


def finding_label(f: Finding) -> str:
    """What a view prints before the kind: the severity of a cause or of what costs
    nothing, ``lens`` for a lens (its rank is among the lenses, not the causes)."""
    return "lens" if reading_group(f) == "lens" else f.severity


def finding_cost(f: Finding) -> str:
    """What the finding costs, in the same words in every view: its ledger tokens and
    their share (and dollars), what a lens shows, or that it costs no token."""
    if f.kind in LENS_KINDS:
        return lens_shows(f)
    if not f.lost_tokens:
        return "no token cost"
    cost = f"{f.lost_tokens:,} tokens ({f.share:.1%})"
    return cost + (f" · {usd(f.lost_usd)}" if f.lost_usd else "")


def lens_shows(f: Finding) -> str:
    """A lens's missed tokens, by the ledger causes it shows (it claims none of them)."""
    shows = f.evidence.get("shows_tokens") or 0
    causes = [str(c) for c in f.evidence.get("attributed_to") or ()]
    if not shows or not causes:
        return "shows no loss of its own"
    return f"shows {shows:,} missed tokens of {', '.join(causes)}"


# A break finding's first divergence as a person scans it (`divergence`): this many
# unchanged characters each side of the change, and at most this many changed ones.
EXCERPT_CONTEXT = 12
EXCERPT_CHANGE = 32


def divergence(report: Report, f: Finding) -> tuple[int, str, str, str] | None:
    """A break finding's first example pair where it first diverges: (its token, its
    segment, what the previous turn had there, what this turn has), both short and
    escaped (`escaped`); None for a finding without example pairs, or when the report
    holds no diff of that pair. The texts are the report's, so masked as it is."""
    pairs = f.evidence.get("example_pairs")
    ev = report.evidence
    if not pairs or ev is None or ev.diff is None:
        return None
    a, b = pairs[0][0], pairs[0][1]
    pair = next((p for p in ev.diff.pairs if p.a == a and p.b == b), None)
    fd = pair.first_divergence if pair is not None else None
    if fd is None:
        return None
    at = fd.first_char - fd.context_start  # the first differing character, in both texts
    text_a, text_b = fd.texts()
    same = 0  # the unchanged characters both texts end with
    while (same < min(len(text_a), len(text_b)) - at
           and text_a[len(text_a) - 1 - same] == text_b[len(text_b) - 1 - same]):
        same += 1

    def side(text: str) -> str:
        start = max(0, at - EXCERPT_CONTEXT)
        changed = text[at:len(text) - same]
        after = text[len(text) - same:]
        head = "…" if start or fd.context_start else ""
        if len(changed) > EXCERPT_CHANGE:
            return head + escaped(text[start:at] + changed[:EXCERPT_CHANGE]) + "…"
        tail = "…" if len(after) > EXCERPT_CONTEXT else ""
        return head + escaped(text[start:at] + changed + after[:EXCERPT_CONTEXT]) + tail

    return fd.token, fd.segment, side(text_a), side(text_b)


def escaped(text: str) -> str:
    """`text` with what does not print (newlines, tabs, control, bidi and zero-width
    characters) and backslashes as Python writes them in a string: ``\\n``, ``\\x1b``,
    ``\\u202e``, ``\\\\``."""
    return "".join("\\\\" if c == "\\" else c if c.isprintable() else repr(c)[1:-1]
                   for c in text)


def divergence_line(report: Report, f: Finding) -> str | None:
    """`divergence` in one line: "first divergence at token 2,916 in system[0]: was
    '…; cch=e4a04;You are Cl…' now '…; cch=b7b6c;You are Cl…'"."""
    found = divergence(report, f)
    if found is None:
        return None
    token, segment, was, now = found
    return f"first divergence at token {token:,} in {segment}: was '{was}' now '{now}'"
