"""The cache policy, priced per kind of request (`report --what-if policy`, issue 40).

One TTL choice for a whole log hides that a main agent and its sub-agents pause
differently: a main agent waits on a human, a sub-agent runs tools back to back; Claude
Code sets the TTL of each apart. The policy groups the ledger's calls by kind -- the agent
(``main``, ``sub-agent``, ``compaction``: `store.kinds`), the project and the model -- and
prices, for each kind alone, every way of keeping its expired prefixes with the TTL
decision's own arithmetic (`findings.ttl_choice`, run over a ledger of the kind's calls):

* ``as-logged``: the log as it is, its writes at the TTL they used (net 0);
* ``ttl-1h``: the kind's 5-minute writes written with the 1-hour TTL;
* ``keep-warm``: pings 30 seconds inside the TTL through the pauses where they pay. A ping
  refreshes the TTL, so the longest interval inside it sends the fewest pings: 4.5 minutes
  under 5-minute writes, 59.5 under 1-hour ones -- the two intervals that matter;
* ``ttl-1h+keep-warm``: 1-hour writes, and pings every 59.5 minutes through the pauses
  past the hour where they pay (those prefixes are then read, not re-written: no premium).

The highest net is the kind's choice. A kind is a session's kind: the write that must
outlive a pause is the one before it, in the same session, so its TTL is the kind's. The
turn is a property of a pause: before a ``user turn`` (the call's last message is a
human's) the session waited on a person, before a ``tool loop`` call (a tool result) on a
tool. Each kind's figures are split by the turn of its pauses (`TurnFigures`): which
pauses the choice keeps and which it pings (pings are decided pause by pause, so a client
that pings only while it waits on the user gets the user turns' figures).

Moving the volatile part of the prefix after the last breakpoint (``move-volatile``: a
timestamp, Claude Code's billing header ``cch=``, a system block that changes) is priced from
the same ledger: its ``break`` tokens of kind ``volatile-prefix-segment`` (`MOVABLE`) are
what the change made the call write again. Moved, the prefix before the breakpoint no longer
changes, so a call whose pause was within the retention its ledger entry was read by reads
them instead (what they were charged less a read: their ``break`` dollars), and one after a
longer pause finds them expired -- they become ``ttl`` tokens, which the TTL options may then
keep. Moving text adds no write: the moved text is sent after the breakpoint, uncached as
before (its own few tokens are counted as recovered: the ledger does not know their
length). So every TTL option is priced again over the *moved* ledger (`_moved`), plus what
the move reads directly: ``move-volatile``, ``ttl-1h+move-volatile``, ... -- a token is
either read by the move, or an expiry one TTL option keeps, never both. A kind whose calls
carry no body cannot show a volatile part: it is "not measurable without bodies", not 0.

Where the log names the backend that served each call, pinning a session to one backend
(``pin-backend``: a sticky route, `prompt_cache_key`) adds what `findings.pinning`'s
replay of the kind's calls on one backend saves: the ``routing`` tokens of the hops the
retention bridges, which no TTL choice touches (every missed token has one cause; a hop
after a pause past the retention is in neither). Each kind's figures are over its own
calls, so the kinds' nets add up to the policy's, and no token is priced twice.

The policy's values (`Policy`, its parts, options and turn figures) are in
`findings.values`, below this module and the report's values that hold them.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from prefixscope.analyses.prices import CallPrice
from prefixscope.engines import ENGINES
from prefixscope.findings.ledger import Ledger, LedgerEntry, read_ttls
from prefixscope.findings.model import WhatIfLine
from prefixscope.findings.pinning import pin_backend
from prefixscope.findings.ttl_choice import (
    PING_MARGIN,
    TtlWhatIf,
    keep_warm,
    one_hour,
    ttl_what_ifs,
)
from prefixscope.findings.values import (
    AS_LOGGED,
    MOVE,
    NO_BODIES,
    NOTHING_TO_MOVE,
    Policy,
    PolicyOption,
    PolicyPart,
    TurnFigures,
)
from prefixscope.model import Request, UsageRecord
from prefixscope.model.whatifs import POLICY

HOUR_AND_PINGS = "ttl-1h+keep-warm"
OPTIONS = (AS_LOGGED, "ttl-1h", "keep-warm", HOUR_AND_PINGS)
MOVE_OPTIONS = (MOVE, *(f"{o}+{MOVE}" for o in OPTIONS[1:]))  # after OPTIONS: a tie keeps
# The break kinds whose changed text a client can move after its last breakpoint (a header,
# a timestamp, a system block); a history rewrite, a tool list or a model change cannot be.
MOVABLE = frozenset({"volatile-prefix-segment"})
MOVE_APPLICABLE = "applicable"
NOT_PRICED = ("not priced: a volatile part broke this kind's prefix, but its model has no "
              "list price (self-hosted: --price-per-mtok)")
TURNS = {"user": "user turn", "tool_result": "tool loop", None: "turn unknown"}
NO_BACKEND = "not applicable: the log names no backend that served a call"


def last_message_of(body: Mapping[str, Any] | None) -> str | None:
    """What a request body sent last: ``tool_result`` (a tool's output: Anthropic's
    tool_result block, OpenAI's ``tool`` message or Responses' ``*_call_output`` item,
    Gemini's functionResponse) or ``user`` (a human's message); None when it says neither."""
    if not isinstance(body, Mapping):
        return None
    for key in ("messages", "input", "contents"):
        items = body.get(key)
        if isinstance(items, list) and items and isinstance(items[-1], Mapping):
            return _item_kind(items[-1])
    return None


def _item_kind(item: Mapping[str, Any]) -> str | None:
    kind = str(item.get("type") or "")
    if kind.endswith("_call_output") or item.get("role") in ("tool", "function"):
        return "tool_result"
    content = item.get("content", item.get("parts"))
    if isinstance(content, list) and any(
            isinstance(b, Mapping) and (b.get("type") == "tool_result"
                                        or "functionResponse" in b) for b in content):
        return "tool_result"
    return "user" if item.get("role") == "user" else None


def request_kinds(roles: Mapping[str, tuple[str, str | None]], bodies: Iterable[Request]
                  ) -> dict[str, tuple[str, str]]:
    """request id -> (agent, turn) from `store.kinds.request_roles`, a call's body telling
    what it sent last where its reader did not (`bodies`)."""
    last = {rid: sent for rid, (_, sent) in roles.items()}
    for request in bodies:
        last[request.id] = last.get(request.id) or last_message_of(request.body)
    return {rid: (agent, TURNS.get(last.get(rid), TURNS[None]))
            for rid, (agent, _) in roles.items()}


def price_policy(ledger: Ledger, records: Sequence[UsageRecord],
                 kinds: Mapping[str, tuple[str, str]] | None,
                 unseen: Collection[str] = (), diffed: Collection[str] = ()) -> Policy:
    """Every kind of the ledger's calls priced alone (`kinds`: `request_kinds`; a call
    absent from it is a main agent's, turn unknown; None: the kinds are not known).
    A volatile part can be located in the calls with a body (`UsageRecord.has_body`) or
    `diffed` against their predecessor (a bundle's calls carry no body, its diff's pairs
    do), except `unseen`: calls whose log lacks the system prompt."""
    known = kinds is not None
    kinds = kinds or {}
    record_of = {r.id: r for r in records}
    backends = any(r.backend for r in records if r.duplicate_of is None)
    seen = ({r.id for r in records if r.has_body} | set(diffed)) - set(unseen)
    groups: dict[tuple[str, str | None, str | None], list[LedgerEntry]] = {}
    for e in ledger.entries:
        r = record_of.get(e.id)
        agent = kinds.get(e.id, ("main", ""))[0]
        groups.setdefault((agent, r.project if r else None, r.model if r else None),
                          []).append(e)
    ttls = read_ttls(records)
    turn_of = {e.id: kinds.get(e.id, ("", TURNS[None]))[1] for e in ledger.entries}
    parts = [_part(key, entries, ledger, records, ttls, turn_of, backends, seen)
             for key, entries in groups.items()]
    parts.sort(key=lambda p: (-p.net_usd, p.label))
    return Policy(tuple(parts), "applicable" if backends else NO_BACKEND, known)


@dataclass(frozen=True, slots=True)
class _Priced:
    """The TTL options over one ledger of a kind's calls (the logged one, or the moved)."""

    options: list[PolicyOption]  # without as-logged
    kept: dict[str, set[str]]  # option -> the pauses it keeps
    pinged: dict[str, dict[str, Pinged]]  # option -> the pauses it pings
    hour: TtlWhatIf | None
    expired: list[LedgerEntry]
    entries: tuple[LedgerEntry, ...]


def _ttl_options(kind: Ledger, records: Sequence[UsageRecord],
                 prices: Mapping[str, CallPrice], ttls: Mapping[str, float]) -> _Priced:
    """`ttl-1h`, `keep-warm` and `ttl-1h+keep-warm` over `kind` (none: nothing expired)."""
    expired = [e for e in kind.entries if e.causes.get("ttl") and e.id in prices]
    options: list[PolicyOption] = []
    hour: TtlWhatIf | None = None
    kept: dict[str, set[str]] = {}
    pinged: dict[str, dict[str, Pinged]] = {}
    priced = {w.name: w for w in ttl_what_ifs(kind, records, prices)}
    if priced:
        hour, warm = priced["ttl-1h"], priced["keep-warm"]
        long_ttl = _long_ttl(expired)
        if not hour.in_use:
            options.append(PolicyOption("ttl-1h", hour.saved_usd, hour.cost_usd,
                                        hour.requests, hour.tokens))
            kept["ttl-1h"] = {e.id for e in expired if e.gap_seconds is not None
                              and e.gap_seconds <= long_ttl}
        pinged["keep-warm"] = _pings(expired, prices, ttls)
        options.append(_warm_option("keep-warm", warm, pinged["keep-warm"]))
        kept["keep-warm"] = set(pinged["keep-warm"])
        if not hour.in_use:
            option, pinged[HOUR_AND_PINGS] = _hour_and_pings(kind, expired, records, prices,
                                                             long_ttl)
            options.append(option)
            kept[HOUR_AND_PINGS] = kept["ttl-1h"] | set(pinged[HOUR_AND_PINGS])
    return _Priced(options, kept, pinged, hour, expired, kind.entries)


def _part(key: tuple[str, str | None, str | None], entries: list[LedgerEntry],
          ledger: Ledger, records: Sequence[UsageRecord], ttls: Mapping[str, float],
          turn_of: Mapping[str, str], backends: bool, seen: set[str]) -> PolicyPart:
    agent, project, model = key
    prices = ledger.prices
    kind = replace(ledger, entries=tuple(entries))  # the ledger of this kind's calls alone
    logged = _ttl_options(kind, records, prices, ttls)
    options = [PolicyOption(AS_LOGGED, 0.0, 0.0, 0, 0), *logged.options]
    on: dict[str, _Priced] = {o.name: logged for o in options}  # option -> its ledger
    kept = {AS_LOGGED: set[str](), **logged.kept}
    pinged = dict(logged.pinged)
    volatile = sum(_movable(e, prices) for e in entries)
    move = (MOVE_APPLICABLE if volatile else NOT_PRICED if any(
        e.break_kind in MOVABLE and e.causes.get("break") for e in entries)
        else NOTHING_TO_MOVE if any(e.id in seen for e in entries) else NO_BODIES)
    read_by_move: dict[str, int] = {}
    if volatile:
        moved_kind, moved_records, read_by_move = _moved(kind, records, prices)
        moved = _ttl_options(moved_kind, moved_records, prices, ttls)
        direct = sum(e.lost_usd.get("break", 0.0) for e in entries if e.id in read_by_move)
        for o in (PolicyOption(AS_LOGGED, 0.0, 0.0, 0, 0), *moved.options):
            name = MOVE if o.name == AS_LOGGED else f"{o.name}+{MOVE}"
            options.append(replace(o, name=name, saved_usd=o.saved_usd + direct,
                                   moved_tokens=sum(read_by_move.values()),
                                   moved_requests=len(read_by_move), moved_usd=direct))
            on[name] = moved
            kept[name] = moved.kept.get(o.name, set())
            pinged[name] = moved.pinged.get(o.name, {})
    pinned = pin_backend(kind, records) if backends else None
    best = max(options, key=lambda o: o.net_usd)  # the first of the highest
    chosen = on[best.name]
    hour = chosen.hour
    at_hour = best.name.startswith(HOUR_AND_PINGS) or (hour is not None and hour.in_use)
    shares = hour is not None and not hour.in_use
    return PolicyPart(
        agent, project, model, len(entries), len(logged.expired),
        sum(e.causes["ttl"] for e in logged.expired), tuple(options), best.name,
        _turns(chosen.entries, chosen.expired, turn_of, kept.get(best.name, set()),
               pinged.get(best.name, {}),
               read_by_move if best.moved_tokens else {}, entries),
        pinned.tokens if pinned is not None else 0,
        (pinned.saved_usd or 0.0) if pinned is not None else None,
        hour.reused_share if shares and hour is not None else None,
        hour.break_even_share if shares and hour is not None else None,
        _payback(chosen.expired, prices, ttls, _long_ttl(chosen.expired) if at_hour else None)
        if chosen.hour is not None else None,
        volatile, move)


def _movable(e: LedgerEntry, prices: Mapping[str, CallPrice]) -> int:
    """The break tokens of `e` a volatile part moved after the last breakpoint would not
    break (priced calls: the options are in dollars)."""
    return e.causes.get("break", 0) if e.break_kind in MOVABLE and e.id in prices else 0


def _moved(kind: Ledger, records: Sequence[UsageRecord], prices: Mapping[str, CallPrice]
           ) -> tuple[Ledger, list[UsageRecord], dict[str, int]]:
    """`kind`'s ledger and records with the volatile part moved after the last breakpoint:
    a movable break (`_movable`) is read when the pause before it was within the retention
    its entry was read by (its call then writes that many fewer 5-minute tokens: no
    write, no premium), else it is a `ttl` expiry of the prefix the predecessor left
    (``X`` grows by it: a ping reads it). Also: request id -> the break tokens read."""
    read: dict[str, int] = {}
    entries = []
    for e in kind.entries:
        m = _movable(e, prices)
        if not m:
            entries.append(e)
            continue
        causes, lost = dict(e.causes), dict(e.lost_usd)
        del causes["break"]
        usd = lost.pop("break", 0.0)
        within = (e.gap_seconds is None or e.ttl_seconds is None
                  or e.gap_seconds <= e.ttl_seconds)
        if within:
            read[e.id] = m
        else:
            causes["ttl"] = causes.get("ttl", 0) + m
            lost["ttl"] = lost.get("ttl", 0.0) + usd
        entries.append(replace(e, causes=causes, lost_usd=lost, break_kind=None,
                               break_segment=None, cached_tokens=e.cached_tokens
                               + (m if within else 0),
                               expected_tokens=(e.expected_tokens or 0) + m))
    out = []
    for r in records:
        five = max(0, (r.cache_write_tokens or 0) - (r.cache_write_1h_tokens or 0))
        if r.id in read and five:
            r = replace(r, cache_write_tokens=(r.cache_write_tokens or 0)
                        - min(five, read[r.id]))
        out.append(r)
    return replace(kind, entries=tuple(entries)), out, read


def _long_ttl(entries: Sequence[LedgerEntry]) -> float:
    """The longer TTL the entries' engine writes with (Anthropic's hour)."""
    for e in entries:
        spec = ENGINES.get(e.engine or "")
        if spec is not None and spec.long_ttl is not None:
            return spec.long_ttl.seconds
    return 3600.0


def _default_ttl(e: LedgerEntry) -> float:
    spec = ENGINES.get(e.engine or "")
    return spec.ttl_seconds if spec is not None and spec.ttl_seconds else 300.0


@dataclass(frozen=True, slots=True)
class Pinged:
    """A pause `keep_warm` pings."""

    pings: int  # ``ceil(g / I) - 1``
    cost_usd: float  # their cache reads, as `keep_warm` prices them
    minutes: float  # ``I``: the interval


def _pings(expired: Sequence[LedgerEntry], prices: Mapping[str, CallPrice],
           ttls: Mapping[str, float]) -> dict[str, Pinged]:
    """The pauses `keep_warm` pings (it decides pause by pause: each priced alone)."""
    out = {}
    for e in expired:
        one = keep_warm([e], prices, ttls)
        if one.requests and e.gap_seconds is not None:
            interval = ttls.get(e.id, _default_ttl(e)) - PING_MARGIN
            out[e.id] = Pinged(max(0, math.ceil(e.gap_seconds / interval) - 1),
                               one.cost_usd, interval / 60)
    return out


def _warm_option(name: str, warm: TtlWhatIf, pinged: Mapping[str, Pinged],
                 hour: TtlWhatIf | None = None) -> PolicyOption:
    """A keep-warm option (over 1-hour writes: `hour` priced with the pinged pauses kept)."""
    every = min((p.minutes for p in pinged.values()), default=None)
    pings = sum(p.pings for p in pinged.values())
    if hour is None:
        return PolicyOption(name, warm.saved_usd, warm.cost_usd, warm.requests, warm.tokens,
                            pings, every)
    return PolicyOption(name, hour.saved_usd, hour.cost_usd + warm.cost_usd, hour.requests,
                        hour.tokens, pings, every)


def _hour_and_pings(kind: Ledger, expired: Sequence[LedgerEntry],
                    records: Sequence[UsageRecord], prices: Mapping[str, CallPrice],
                    long_ttl: float) -> tuple[PolicyOption, dict[str, Pinged]]:
    """1-hour writes, and pings every 59.5 minutes through the pauses past the hour where
    they pay (`keep_warm` at the 1-hour TTL): `one_hour` over the kind with those pauses
    kept as the hour keeps its own (read, not re-written, no premium)."""
    past = [e for e in expired if e.gap_seconds is not None and e.gap_seconds > long_ttl]
    at_hour = {e.id: long_ttl for e in past}
    pinged = _pings(past, prices, at_hour)
    held = replace(kind, entries=tuple(
        replace(e, gap_seconds=long_ttl) if e.id in pinged else e for e in kind.entries))
    hour = one_hour(held, records, prices)
    if not pinged:
        return PolicyOption(HOUR_AND_PINGS, hour.saved_usd, hour.cost_usd, hour.requests,
                            hour.tokens), pinged
    warm = keep_warm([e for e in past if e.id in pinged], prices, at_hour)
    return _warm_option(HOUR_AND_PINGS, warm, pinged, hour), pinged


def _turns(entries: Sequence[LedgerEntry], expired: Sequence[LedgerEntry],
           turn_of: Mapping[str, str], kept: set[str],
           pinged: Mapping[str, Pinged], moved: Mapping[str, int],
           logged: Sequence[LedgerEntry] = ()) -> tuple[TurnFigures, ...]:
    """The kind's pauses by the turn of the call after them, under its choice (`entries`,
    `expired`: of the ledger it is priced on, the moved one when it moves the volatile part;
    `moved`: request id -> the break tokens the move reads; `logged`: their entries as
    logged, whose break dollars those are)."""
    usd = {e.id: e.lost_usd.get("break", 0.0) for e in logged if e.id in moved}
    out = []
    for turn in dict.fromkeys(turn_of[e.id] for e in entries):
        mine = [e for e in expired if turn_of[e.id] == turn]
        held = [e for e in mine if e.id in kept]
        read = [e.id for e in entries if turn_of[e.id] == turn and e.id in moved]
        out.append(TurnFigures(
            turn, sum(turn_of[e.id] == turn for e in entries), len(mine),
            sum(e.causes["ttl"] for e in mine), len(held),
            sum(e.causes["ttl"] for e in held),
            sum(e.lost_usd.get("ttl", 0.0) for e in held),
            sum(pinged[e.id].pings for e in held if e.id in pinged),
            sum(pinged[e.id].cost_usd for e in held if e.id in pinged),
            sum(moved[rid] for rid in read), sum(usd.get(rid, 0.0) for rid in read)))
    return tuple(out)


def _payback(expired: Sequence[LedgerEntry], prices: Mapping[str, CallPrice],
             ttls: Mapping[str, float], ttl: float | None) -> float | None:
    """The longest pause, in minutes, whose pings pay when its whole prefix expired: ``p``
    pings of the prefix at the read price cost less than writing it again at the price it
    was written at (5 minutes; the hour where the log's writes use it) while
    ``p < (w - read) / read``, and a pause takes ``ceil(g / I) - 1`` (``I``: 30 seconds
    inside the TTL the log shows; `ttl`: the 1-hour one a policy writes with)."""
    long_ttl = _long_ttl(expired)
    for e in expired:
        rates = prices[e.id].rates
        shown = ttls.get(e.id, _default_ttl(e))
        write = rates.cache_write_1h if shown == long_ttl else rates.cache_write_5m
        if rates.cache_read > 0 and write > rates.cache_read:
            most = math.ceil((write - rates.cache_read) / rates.cache_read) - 1
            return (most + 1) * ((ttl or shown) - PING_MARGIN) / 60
    return None


def policy_line(policy: Policy | None, ledger: Ledger | None = None,
                records: Sequence[UsageRecord] = (), diffed: Collection[str] = ()
                ) -> WhatIfLine:
    """The what-if's line in the report (`Report.what_ifs`, the JSON's ``what_if``); without
    a `policy` (evidence read back from a bundle, which does not carry the calls' kinds),
    the one `ledger` gives with every call a main agent's (`diffed`: the calls its diff
    compared with their predecessor's, whose volatile part it could locate)."""
    if policy is None and ledger is not None:
        policy = price_policy(ledger, records, None, diffed=diffed)
    if policy is None or not policy.parts:
        return WhatIfLine(POLICY, "no call of the log is in the ledger: nothing to price")
    return WhatIfLine(POLICY, policy.detail, saved_usd=policy.saved_usd,
                      cost_usd=policy.cost_usd, net_usd=policy.net_usd, policy=policy)
