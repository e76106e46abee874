"""The missed-token ledger: every prompt token the log reports as not cached, attributed to
exactly one cause, so that a user checking the report with a calculator finds the parts
summing to the whole and no two findings claiming the same token.

For each request of the basis, ``missed = prompt − cached`` (as the log reports them), and
the missed tokens are cut by where they sit in the prompt. With ``C`` the cached tokens,
``S`` the tokens this prompt shares in length with its session predecessor
(``min(previous prompt, this prompt)``), ``D`` the first divergent token (the diff of the
two rendered prompts, mapped to the log's token count; ``S`` when they do not diverge or
the log has no bodies) and ``X`` what the engine could have served of ``D`` by its rules
(whole blocks, and never the last token, for a self-hosted engine; a hosted API's unit and
minimum cacheable length; Anthropic's automatic breakpoint reading 2 tokens short, and
never past what the predecessor read plus wrote: its uncached tail was never written;
with bodies, the end of the predecessor's last ``cache_control`` breakpoint at or before
``D``, since Anthropic reads only at breakpoints an earlier request wrote: ``[X, D)`` is
then the change's ``break``)::

    0 ........ C ........ X ........ D ........ S ........ P
    | cached   | shortfall | rounding | break    | new      |

* ``[S, P)`` is ``new``: appended since the previous turn (not a loss);
* ``[D, S)`` is ``break``: sent before, but after the prefix changed (with the diff's
  kind and the segment it blames), or ``compaction`` when the change is a compaction;
* ``[X, D)`` is ``break`` on Anthropic with a located change (`_breakpoint_reach`),
  else ``rounding`` (a partial block, the provider's unit) or ``below-minimum``
  (``D`` is shorter than the minimum cacheable prefix or than one block, so ``X = 0``);
* ``[C, X)``, the shortfall, is ``routing`` (another backend served the call than its
  predecessor, for the same model: `hop`; a cache is per backend), ``ttl`` (a hosted API
  and a pause longer than its retention), ``eviction`` (as much as a replay at the fitted
  capacity loses and an unlimited one keeps), ``provider`` (a hosted API missed a live
  prefix by at least one cache unit; less is ``rounding``), else ``unexplained``; in a
  session where caching was never requested (every call 0 read and 0 written on a hosted
  Anthropic model: `findings.unrequested`) it is ``not-requested``, and the
  predecessor's unwritten tail is not taken off ``X``: had it been asked, the cache would
  have held it.

What the log itself records between a request and its session predecessor
(`model.SessionEvent`, read at ingest: a compaction boundary, a truncation, another
model, a new client version, a tool-set delta) decides before the positions do: a
recorded ``compaction`` makes every missed token ``compaction``; a recorded change is a
``break`` of its kind (``model-change``, ``settings-change`` -- another reasoning effort:
``D = 0``, another model or effort has a cache of its own;
``tool-set-change``, ``client-upgrade``, ``truncation``, ``history-rewrite``: ``D = C``,
the log cannot say where the prefix changed, and the cache served what was left of it), so
such a request is never ``provider``. A prompt shorter than its predecessor is never read
as an intact prefix either: a shortfall there, within the retention, is ``unexplained``.

Cached tokens beyond ``X`` (another session or other live traffic kept a longer prefix
warm; an engine that caches outputs) cover the intervals after it in prompt order. The
first request of a session is ``cold`` (all its missed tokens) unless the log records a
compaction before it (a compaction's summarizer call, a sub-agent file of its own in
Claude Code); a request after a compaction link is ``compaction`` (so is a compacted
request that continues a session it could not be paired with: docs/store.md#sessions).
Precedence where two could apply (docs/report.md): the positions decide, and a break
before a pause wins (nothing after the divergence could have hit, whatever the pause); a
shortfall is not-requested before routing before ttl before below-minimum before eviction
before provider before unexplained, and a recorded change decides before routing.

The basis is the requests whose log reports both prompt and cached tokens
(``observed``); a log that reports no cache at all is read on the replay's predicted
cache over its rebuilt prompts (``predicted``). Requests outside the basis are counted,
never mixed in. Each request's missed tokens are priced (`analyses.prices`) at what its
uncached tokens were charged less the cache-read price.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from prefixscope.analyses.bucket import top_level_element
from prefixscope.analyses.diff import PairDiff
from prefixscope.analyses.prices import CallPrice
from prefixscope.analyses.simulate import RequestSim
from prefixscope.engines import ENGINES, ttl_split_engine
from prefixscope.findings.unrequested import unrequested_sessions
from prefixscope.model import UsageRecord

CAUSES = ("cold", "new", "rounding", "break", "compaction", "not-requested", "routing",
          "ttl", "below-minimum", "eviction", "provider", "unexplained")
NOT_LOSSES = frozenset({"cold", "new", "rounding"})  # the unavoidable part of a miss
LOSSES = tuple(c for c in CAUSES if c not in NOT_LOSSES)

# A diff cause -> the break kind (and finding kind) it is.
KIND_OF_CAUSE = {
    "volatile-value": "volatile-prefix-segment",
    "content-change": "volatile-prefix-segment",
    "whitespace": "volatile-prefix-segment",
    "json-key-order": "json-key-order",
    "tool-order": "tool-order",
    "tool-set": "tool-set-change",
    "history-rewrite": "history-rewrite",
    "template-divergence": "template-divergence",
    "model-change": "model-change",
}
_TOOLS_KINDS = {"json-key-order", "tool-order", "tool-set-change"}
# A recorded session event (`model.SessionEvent.kind`) -> the break kind (finding kind) it
# is; a recorded compaction is the ledger's `compaction` cause.
KIND_OF_EVENT = {
    "model-change": "model-change",
    "tool-set": "tool-set-change",
    "client-upgrade": "client-upgrade",
    "truncation": "truncation",
    "settings-change": "settings-change",
    "history-rewrite": "history-rewrite",
}
# Recorded changes that re-write the whole prompt (D = 0): another model, or another
# reasoning effort (OpenAI's prompt header holds it: its cache diagnostics name
# `reasoning_effort_changed` a miss reason).
_WHOLE_PROMPT_KINDS = frozenset({"model-change", "settings-change"})
# Which recorded event decides when several are recorded before one request.
_EVENT_ORDER = ("compaction", "model-change", "settings-change", "client-upgrade", "tool-set",
                "truncation", "history-rewrite")
# A hosted API that caches at breakpoints, not in blocks, reads a warm turn a few tokens
# short of the previous prompt (2 in TraceLab's Claude Code sample, 1-5 seen). A shortfall
# below this many tokens (or one unit of a hosted API's steps) is that distance, not a
# provider miss.
HOSTED_SHORTFALL_TOLERANCE = 64


@dataclass(frozen=True, slots=True)
class Rules:
    """What an engine could serve of a prefix: its unit, minimum, retention."""

    engine: str | None
    hosted: bool
    unit: int  # tokens per block / step (1: token-exact)
    minimum: int  # the shortest prefix it caches
    ttl: float | None  # seconds a hosted cache keeps an unused prefix (None: no expiry)
    read_lag: int = 0  # tokens short of the previous prompt a warm read ends
    tolerance: int = 1  # a shortfall below this is rounding
    # The retention is a range, not a TTL (OpenAI's in-memory cache: "5-10 minutes of
    # inactivity, up to 1 hour" off-peak): `ttl` is its top, `ttl_low` its low end; a pause
    # past either expired the prefix only when the read after it shows so (`expired`).
    ttl_range: bool = False
    ttl_low: float | None = None
    # A hosted read may cover the whole prompt (`EngineSpec.reads_last_token`); a
    # self-hosted engine always computes the last token.
    reads_last_token: bool = False
    # It reads only at breakpoints an earlier request wrote, and caches only what a
    # request marks (`EngineSpec.reads_at_breakpoints`).
    at_breakpoints: bool = False

    def expired(self, gap: float | None, cached: int, expected: int,
                warm: int | None = None) -> bool:
        """A pause of `gap` seconds before a read of `cached` tokens, where the predecessor
        allowed `expected`, expired the cache. A fixed TTL: any pause longer than it.

        A retention range (`ttl_range`): an idle expiry takes the session's own entries at
        once (every one of them was last used by the predecessor's call); what survives it
        is what other traffic kept warm (a system prompt and tools other sessions send).
        Past the range's top (`ttl`: no documented retention covers the pause) the pause
        expired the prefix unless the read shows the session's own prefix outlived it
        (the "up to 1 hour" off-peak). With `warm`, what other traffic kept warm (the
        replay of every session's requests at the documented retention, in the log's
        tokens; 0 without a replay) and `expected` are what each reading predicts the
        call reads: an expiry `warm`, an outlived prefix `expected`. The read decides by
        which it is nearer: no more than `warm`, or nearer it than `expected`, is an
        expiry (past `warm` by less than the rest: its mapping to the log's tokens is off
        by the rendering's framing and tokenizer, which a log lacking the tools makes
        hundreds of tokens, docs/accuracy.md), nearer `expected` reached tokens only this
        session had sent; a `warm` covering `expected` says other traffic kept the whole
        prefix: no expiry explains a shortfall. Without a replay this is the half rule:
        less than half of `expected` read. Within the range (past `ttl_low`, at most
        `ttl`), where the prefix may or may not be kept, the half rule alone decides."""
        if self.ttl is None or gap is None:
            return False
        if not self.ttl_range:
            return gap > self.ttl
        if gap > self.ttl:
            warm = warm or 0
            return warm < expected and (cached <= warm or cached - warm < expected - cached)
        return self.ttl_low is not None and gap > self.ttl_low and 2 * cached < expected

    def expected(self, divergence: int, prompt: int, whole_predecessor: bool) -> int:
        """X: the cached tokens these rules allow when the first `divergence` tokens are
        the predecessor's (`whole_predecessor`: it sent no more than those)."""
        if self.hosted:
            reach = divergence - (self.read_lag if whole_predecessor else 0)
            reach = reach if self.reads_last_token else min(reach, prompt - 1)
            x = (max(0, reach) // self.unit) * self.unit
        else:
            x = (max(0, min(divergence, prompt - 1)) // self.unit) * self.unit
        return x if x >= self.minimum else 0


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One request's missed tokens by cause."""

    id: str
    session: str | None
    prompt_tokens: int
    cached_tokens: int
    causes: Mapping[str, int]  # cause -> tokens (only causes with tokens)
    break_kind: str | None = None  # the break's kind (a finding kind), when it broke
    break_segment: str | None = None  # the part of the request it blames
    gap_seconds: float | None = None  # since the session's previous request
    expected_tokens: int | None = None  # X: what the predecessor allowed
    domain: str | None = None  # the replay's cache domain, when one replayed it
    lost_usd: Mapping[str, float] = field(default_factory=dict)  # loss cause -> dollars
    engine: str | None = None  # whose rules the request was read by
    recorded: str | None = None  # the session event the log recorded that decided its cause
    shrank: bool = False  # its prompt is shorter than its session predecessor's
    # (predecessor's backend, this one's) when another backend served it than its
    # predecessor, with the same model (`hop`)
    hop: tuple[str, str] | None = None
    # the retention it was read by (`Rules.ttl`: a range's top; None: no expiry), which
    # `findings.pinning` holds a pinned hop's pause against
    ttl_seconds: float | None = None

    @property
    def missed_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens


@dataclass(frozen=True, slots=True)
class Basis:
    """The requests every rate and total of the report is over."""

    source: str  # "observed" (the log's usage) | "predicted" (the replay) | "none"
    requests: int
    prompt_tokens: int
    cached_tokens: int
    outside_requests: int = 0  # requests not in the basis
    outside_prompt_tokens: int = 0  # their logged prompt tokens (where logged)
    outside_reason: str = ""  # why they are not in it

    @property
    def hit_rate(self) -> float | None:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None


@dataclass(frozen=True, slots=True)
class RecordedModel:
    """One model's calls that the log records a cost for and list prices price."""

    model: str
    requests: int
    recorded_usd: float  # what the log says they cost
    list_usd: float  # what list prices make of them


@dataclass(frozen=True, slots=True)
class RecordedCost:
    """What the log itself says the basis's calls cost (the client's or gateway's own
    figure, `UsageRecord.recorded_cost_usd`), set beside list prices over the same calls:
    a price table out of date for a model shows as their ratio. List prices stay the
    report's dollars; this only checks them."""

    requests: int  # basis calls whose record carries a cost
    usd: float  # those costs summed
    by_model: tuple[RecordedModel, ...]  # of them, the calls list prices price too, by model,
    # largest gap first

    @property
    def compared_requests(self) -> int:
        """The calls both price: those list prices price too."""
        return sum(r.requests for r in self.by_model)

    @property
    def compared_recorded_usd(self) -> float:
        """The recorded cost of the compared calls."""
        return sum(r.recorded_usd for r in self.by_model)

    @property
    def compared_list_usd(self) -> float:
        """List prices' spend on the compared calls."""
        return sum(r.list_usd for r in self.by_model)

    @property
    def ratio(self) -> float | None:
        """List prices over the log's own figure, on the calls both price."""
        if not self.compared_requests or self.compared_recorded_usd <= 0:
            return None
        return self.compared_list_usd / self.compared_recorded_usd


@dataclass(frozen=True, slots=True)
class Money:
    """The basis in dollars (list prices, or the user's own rate)."""

    source: str  # where the prices come from
    priced_requests: int
    unpriced_requests: int
    unknown_models: tuple[str, ...]
    spend_usd: float
    saved_usd: float  # what the cache reads saved against paying the input price
    lost_usd: float  # what the loss causes cost beyond cache reads
    lost_usd_by_cause: Mapping[str, float]
    write_premium_usd: float = 0.0  # the cache writes beyond the input price
    recorded: RecordedCost | None = None  # the log's own cost, where it records one

    @property
    def net_saved_usd(self) -> float:
        """What caching saved in all: the reads' saving less the writes' premium."""
        return self.saved_usd - self.write_premium_usd


@dataclass(frozen=True, slots=True)
class Ledger:
    basis: Basis
    missed_tokens: int
    by_cause: Mapping[str, int]  # every cause, in CAUSES order (zeros included)
    break_by_kind: Mapping[str, int]
    break_by_segment: Mapping[str, int]
    entries: tuple[LedgerEntry, ...]
    money: Money | None = None
    prices: Mapping[str, CallPrice] = field(default_factory=dict)  # the calls priced

    @property
    def lost_tokens(self) -> int:
        """Missed tokens that are losses (not cold, new or rounding)."""
        return sum(self.by_cause[c] for c in LOSSES)

    def tokens_of(self, ids: Sequence[str] | set[str]) -> dict[str, int]:
        """cause -> tokens over the entries of `ids` (a lens shows these)."""
        wanted = set(ids)
        out: Counter[str] = Counter()
        for e in self.entries:
            if e.id in wanted:
                out.update(e.causes)
        return {c: out[c] for c in CAUSES if out[c]}


@dataclass(frozen=True, slots=True)
class ReplayedRequest:
    """What a replay says of one request, with the domain's engine and block size."""

    domain: str
    engine: str
    unit: int
    sim: RequestSim


def break_kind(pair: PairDiff) -> str | None:
    """The break kind (a finding kind) of a diffed pair; None when it does not break."""
    kind = KIND_OF_CAUSE.get(pair.cause)
    if kind is not None and pair.cause == "content-change" and _in_history(pair):
        return "history-rewrite"  # an earlier message changed: not a prefix header
    return kind


def blamed_segment(kind: str, pair: PairDiff) -> str | None:
    """The part of the request a break of `kind` blames."""
    seg = pair.first_divergence.segment if pair.first_divergence else None
    if seg is None or kind == "model-change":
        return None
    if kind in _TOOLS_KINDS:
        return "tools"  # the tool list as a whole (its template wrapper included)
    if kind == "history-rewrite":
        return seg.split("[", 1)[0]
    return top_level_element(seg)


def _in_history(pair: PairDiff) -> bool:
    """The divergence is in a message after the first (the first is the system prompt in
    the OpenAI protocols, so a change there is a prefix segment's)."""
    seg = pair.first_divergence.segment if pair.first_divergence else ""
    head = seg.split(".", 1)[0]
    return head.startswith(("messages", "input")) and head not in ("messages[0]", "input[0]")


def hosted_rules(engine: str, model: str | None, ttl_1h: bool = False,
                 extended: bool = False) -> Rules:
    """A hosted API's rules, from its registry entry (`EngineSpec`: unit or read step, minimum
    cacheable length for `model`, retention, read lag). `ttl_1h`: the predecessor's writes
    chose the engine's longer TTL (`EngineSpec.long_ttl`: Anthropic's 1 hour);
    `extended`: the predecessor asked for the engine's extended retention
    (`EngineSpec.extended_ttl_seconds`: OpenAI's ``prompt_cache_retention: "24h"``, its
    prefix lasts up to a day)."""
    spec = ENGINES[engine]
    ttl = spec.ttl_seconds
    if ttl_1h and spec.long_ttl is not None:
        ttl = spec.long_ttl.seconds
    if extended and spec.extended_ttl_seconds is not None:
        ttl = spec.extended_ttl_seconds
    return Rules(engine, True, max(spec.block_size, spec.step(model)), spec.minimum(model), ttl,
                 spec.read_lag,
                 max(spec.block_size, HOSTED_SHORTFALL_TOLERANCE),
                 ttl_range=spec.ttl_low_seconds is not None,
                 ttl_low=None if extended else spec.ttl_low_seconds,
                 reads_last_token=spec.reads_last_token,
                 at_breakpoints=spec.reads_at_breakpoints)


def self_hosted_rules(engine: str | None, unit: int | None) -> Rules:
    size = max(1, unit or 1)
    return Rules(engine, False, size, size if size > 1 else 0, None)


def recorded_event(kinds: Sequence[str]) -> str | None:
    """The one of the session events recorded before a request that decides its cause."""
    return next((k for k in _EVENT_ORDER if k in kinds), None)


def _outside_reason(outside: Sequence[UsageRecord]) -> str:
    """Why requests are outside an observed basis: their usage has no cache field, or the
    log has no usage of them at all (a call that failed or was cancelled before any
    arrived)."""
    bare = sum(1 for r in outside if _no_usage(r))
    if bare == len(outside):
        return "no usage logged"
    if not bare:
        return "no cache field in their usage"
    return (f"{len(outside) - bare} with no cache field in their usage, {bare} with no usage "
            "logged")


def build_ledger(records: Sequence[UsageRecord], pairs: Sequence[PairDiff],
                 replayed: Mapping[str, ReplayedRequest],
                 rules_of: Mapping[str, Rules], prices: Mapping[str, CallPrice],
                 money_source: str = "", unknown_models: Sequence[str] = (),
                 events: Mapping[str, Sequence[str]] | None = None,
                 not_rebuilt: frozenset[str] = frozenset()) -> Ledger:
    """The ledger of `records` (time order; see the module docstring).

    `pairs`: the diff of consecutive turns (by later request); `replayed`: the replay's
    result per request id; `rules_of`: each request's engine rules (a request missing
    from it is read token-exact); `prices`: each priced request's price; `events`: the
    kinds of the session events the log recorded before each request (`SessionEvent`);
    `not_rebuilt`: the requests whose prompt the log could not rebuild (`findings.rebuild`:
    no position the diff finds is mapped onto them, no below-minimum or break is sized on
    a predicted basis's rebuilt prompt).
    """
    events = events or {}
    kept = [r for r in records if r.duplicate_of is None]
    by_id = {r.id: r for r in kept}
    observed = [r for r in kept if r.prompt_tokens is not None and r.cached_tokens is not None]
    if observed:
        source = "observed"
        basis_ids = {r.id for r in observed}
        reason = _outside_reason([r for r in kept if r.id not in basis_ids])
    elif replayed:
        source = "predicted"
        basis_ids = {r.id for r in kept if r.id in replayed}
        reason = "not replayed (no body, no trace, no usage a hosted replay can read)"
    else:
        source, basis_ids, reason = "none", set(), "no cache field and no replay"
    pair_of = {p.b: p for p in pairs}
    default = Rules(None, False, 1, 0, None)
    unrequested = unrequested_sessions(kept, {
        r.id: rules_of[r.id].minimum for r in kept
        if r.id in rules_of and rules_of[r.id].at_breakpoints})
    entries: list[LedgerEntry] = []
    for r in kept:
        if r.id not in basis_ids:
            continue
        prompt, cached = _sizes(r, replayed.get(r.id), source)
        prev = by_id.get(r.prev_id) if r.prev_id is not None else None
        kinds = list(events.get(r.id, ()))
        while source == "observed" and prev is not None and _no_usage(prev) \
                and prev.prev_id in by_id:
            # a call the log has no usage of (failed or cancelled before any arrived:
            # Cline's `streaming_failed`) left nothing the log can size: the cache is
            # the one its own predecessor left, and what was recorded before it is this
            # call's
            kinds = list(events.get(prev.id, ())) + kinds
            prev = by_id[str(prev.prev_id)]
        entries.append(_entry(r, prompt, cached, prev, pair_of.get(r.id), replayed, source,
                              rules_of.get(r.id, default), prices.get(r.id),
                              recorded_event(kinds),
                              r.id not in not_rebuilt, r.session in unrequested))
    outside = [r for r in kept if r.id not in basis_ids]
    basis = Basis(source, len(entries), sum(e.prompt_tokens for e in entries),
                  sum(e.cached_tokens for e in entries), len(outside),
                  sum(r.prompt_tokens or 0 for r in outside), reason if outside else "")
    by_cause: Counter[str] = Counter()
    by_kind: Counter[str] = Counter()
    by_segment: Counter[str] = Counter()
    for e in entries:
        by_cause.update(e.causes)
        if e.causes.get("break"):
            by_kind[e.break_kind or "unknown"] += e.causes["break"]
            by_segment[e.break_segment or "(not located)"] += e.causes["break"]
    missed = sum(e.missed_tokens for e in entries)
    assert sum(by_cause.values()) == missed, "the ledger's causes must sum to its misses"
    money = (_money(entries, prices, money_source, unknown_models, by_id) if money_source
             else None)
    return Ledger(basis, missed, {c: by_cause[c] for c in CAUSES},
                  dict(by_kind.most_common()), dict(by_segment.most_common()),
                  tuple(entries), money, prices)


def _no_usage(r: UsageRecord) -> bool:
    """The log holds no usage of `r` at all."""
    return r.prompt_tokens is None and r.cached_tokens is None \
        and r.cache_write_tokens is None and r.output_tokens is None


def _sizes(r: UsageRecord, rep: ReplayedRequest | None, source: str) -> tuple[int, int]:
    if source == "observed":
        prompt = r.prompt_tokens or 0
        return prompt, min(r.cached_tokens or 0, prompt)
    assert rep is not None
    return rep.sim.prompt_tokens, min(rep.sim.predicted, rep.sim.prompt_tokens)


def _entry(r: UsageRecord, prompt: int, cached: int, prev: UsageRecord | None,
           pair: PairDiff | None, replayed: Mapping[str, ReplayedRequest], source: str,
           rules: Rules, price: CallPrice | None, recorded: str | None = None,
           rebuilt: bool = True, unrequested: bool = False) -> LedgerEntry:
    rep = replayed.get(r.id)
    domain = rep.domain if rep is not None else None
    gap = (r.timestamp - prev.timestamp).total_seconds() \
        if prev is not None and r.timestamp is not None and prev.timestamp is not None else None
    causes: Counter[str] = Counter()
    kind = segment = None
    expected = None
    shrank = False
    missed = prompt - cached
    hopped = hop(prev, r)
    if prev is None and not r.compaction and recorded != "compaction":
        causes["cold"] = missed
        recorded = None
    elif prev is None or recorded == "compaction" or recorded is None and (
            r.compaction or (pair is not None and pair.cause == "compaction")):
        # (a change the log records decides before threading's or the diff's reading of a
        # shorter history as a compaction)
        # (also a compacted request whose session could not be told: a continuation of
        # an unknown one -- its cache restarted all the same)
        causes["compaction"] = missed
        recorded = "compaction" if recorded == "compaction" else None
    else:
        before = _predecessor_tokens(prev, rep, replayed, source, prompt)
        if before is None:
            causes["unexplained"] = missed  # the predecessor's length is not known
        else:
            shared = min(before, prompt)
            shrank = prompt < before
            divergence = shared
            kind = break_kind(pair) if pair is not None else None
            anchor = None  # X by the predecessor's breakpoints (a located Anthropic change)
            if recorded is not None:  # the log's own record of the change decides
                kind = KIND_OF_EVENT[recorded]
                segment = "tools" if kind == "tool-set-change" else None
                # another model (or reasoning effort: OpenAI's prompt header holds it) has
                # a cache of its own; else the log cannot say where the prefix changed:
                # the cache served what was left of it
                divergence = 0 if kind in _WHOLE_PROMPT_KINDS else min(shared, cached)
            elif pair is not None and kind is not None:
                segment = blamed_segment(kind, pair)
                if kind == "model-change":  # another model has a cache of its own
                    divergence = 0
                elif pair.first_divergence is not None and not rebuilt:
                    # the rebuild lacks part of the prompt: the diff's position does not map
                    # onto the logged one -- as for a recorded change, the cache served
                    # what was left of the prefix
                    divergence = min(shared, cached)
                elif pair.first_divergence is not None:
                    divergence = min(shared, _to_log(pair.first_divergence.token,
                                                     pair.tokens_b, prompt, source))
                    anchor = _breakpoint_reach(pair, rules, source, prompt, divergence,
                                               cached)
            expected = rules.expected(divergence, prompt, divergence >= before)
            below = expected == 0 and divergence > 0 and rules.minimum > 0
            if anchor is not None:
                # Anthropic reads only an entry an earlier request wrote at a breakpoint:
                # what lies between the last one before D and D is the change's loss
                expected = min(expected, anchor) if anchor >= rules.minimum else 0
                below = False
            written = None if unrequested else _written_reach(prev, rules, source)
            if written is not None and written < expected:
                # the predecessor's tokens after its last breakpoint were never written:
                # no cache holds them ([written, D) is rounding, not a shortfall)
                expected = written
            intervals = [
                (expected, divergence, "break" if anchor is not None
                 else "below-minimum" if below else "rounding"),
                (divergence, shared, "break"),
                (shared, prompt, "new"),
            ]
            shortfall = max(0, expected - cached)
            if shortfall and unrequested:
                # caching was never requested: the cache would have served what the
                # predecessor sent (`findings.unrequested`), whatever the pause
                causes["not-requested"] += shortfall
            elif shortfall and hopped is not None and recorded is None:
                # another backend served it: its cache never held what the predecessor
                # sent there, whatever the pause (less than a cache unit is rounding)
                causes["rounding" if shortfall < rules.tolerance else "routing"] += shortfall
            elif shortfall:
                for cause, n in _shortfall(shortfall, rules, gap, rep, prompt,
                                           shrank, cached, expected).items():
                    causes[cause] += n
            for start, end, cause in intervals:
                n = max(0, end - max(start, cached))
                if n:
                    causes[cause] += n
            if not rebuilt and source != "observed":
                # a predicted basis is the replay's own sizes of prompts the log could not
                # rebuild: nothing but what they add is sized on them
                located = causes.pop("below-minimum", 0)
                if recorded is None and kind not in _WHOLE_PROMPT_KINDS:
                    located += causes.pop("break", 0)
                if located:
                    causes["unexplained"] += located
            if not causes.get("break"):
                kind = segment = None
    lost = {c: price.lost(n) for c, n in causes.items() if c not in NOT_LOSSES and n} \
        if price is not None else {}
    return LedgerEntry(r.id, r.session, prompt, cached, {c: n for c, n in causes.items() if n},
                       kind, segment, gap, expected, domain, lost, rules.engine, recorded,
                       shrank, hopped if causes.get("routing") else None, rules.ttl)


def hop(prev: UsageRecord | None, r: UsageRecord) -> tuple[str, str] | None:
    """(the predecessor's backend, `r`'s) when the log names both and they differ for the
    same model: a hosted engine keeps a cache per backend (a provider behind OpenRouter, a
    LiteLLM deployment, a new-api channel, a router's replica), so `r` could not read what
    its predecessor left. Another model is a `model-change`, not a hop: its cache is its
    own on any backend."""
    if (prev is None or r.backend is None or prev.backend is None
            or r.backend == prev.backend or r.model != prev.model):
        return None
    return prev.backend, r.backend


def _predecessor_tokens(prev: UsageRecord, rep: ReplayedRequest | None,
                        replayed: Mapping[str, ReplayedRequest], source: str,
                        prompt: int) -> int | None:
    """The previous turn's prompt length, in this basis's tokens."""
    if source == "observed" and prev.prompt_tokens is not None:
        return prev.prompt_tokens
    before = replayed.get(prev.id)
    if before is None:
        return None
    if source == "observed":  # the predecessor reports no prompt tokens: its rebuilt one,
        if rep is None or not rep.sim.prompt_tokens:  # in this request's scale
            return None
        return round(before.sim.prompt_tokens * prompt / rep.sim.prompt_tokens)
    return before.sim.prompt_tokens


def _breakpoint_reach(pair: PairDiff, rules: Rules, source: str, prompt: int,
                      divergence: int, cached: int = 0) -> int | None:
    """X of a hosted Anthropic request whose body the diff located a change in (`D`,
    `divergence`, in the log's tokens): the end of the predecessor's last ``cache_control``
    breakpoint at or before `D` (the token end of a marked block in its rendered prompt,
    compared with `D` there: the two prompts are the same tokens before it; an entry the
    predecessor wrote or refreshed), 0 when there is none. Anthropic serves nothing else:
    it reads only at breakpoints an earlier request wrote, so ``[X, D)`` is the change's
    loss, not the provider's. (What the predecessor itself read is not taken: it is a
    position in the log's count, and compared with `D` mapped by the lengths it lands on
    the wrong side of `D` when the change is at that very entry's end.) None where this
    does not apply (another engine, a basis not read from the log's usage, a predecessor
    without ``cache_control`` marks).

    The lengths map a rendered end to the log's count only as well as the two tokenizers
    agree along the prompt; the read (`cached`) is exact. An Anthropic read ends only where
    a request wrote a breakpoint, so a read short of that end and nearer it than the
    predecessor's breakpoint before it (or the prompt's start) is that entry, at its place
    in the log's own count: X is the read. A read nearer an earlier breakpoint (or none)
    is a shorter entry served, and X stays the mapped end."""
    div = pair.first_divergence
    if (not rules.at_breakpoints or source != "observed" or div is None
            or not pair.breakpoints_a):
        return None
    ends = sorted(_to_log(end, pair.tokens_b, prompt, source)
                  for end in pair.breakpoints_a if end <= div.token)
    reach = min(divergence, ends[-1]) if ends else 0
    if 0 < cached < reach and all(reach - cached < abs(cached - end)
                                  for end in [0, *ends[:-1]]):
        return cached
    return reach


def _written_reach(prev: UsageRecord, rules: Rules, source: str) -> int | None:
    """How far into the predecessor's prompt a hosted Anthropic cache holds it after that
    call: what it read plus what it wrote (its prompt less its uncached ``input_tokens``,
    the tokens after its last breakpoint, which no call wrote). None where the log does not
    say (no write count, or a basis not read from the log's usage)."""
    if (source != "observed" or not rules.at_breakpoints or prev.cached_tokens is None
            or prev.cache_write_tokens is None):
        return None
    return prev.cached_tokens + prev.cache_write_tokens


def _to_log(token: int, rendered: int, logged: int, source: str) -> int:
    """A rendered token position in the log's count (the rebuilt prompt may be shorter or
    tokenized by a stand-in: positions scale with the lengths)."""
    if source != "observed" or rendered <= 0 or rendered == logged:
        return token
    return round(token * logged / rendered)


def _shortfall(tokens: int, rules: Rules, gap: float | None, rep: ReplayedRequest | None,
               prompt: int, shrank: bool = False, cached: int = 0,
               expected: int = 0) -> dict[str, int]:
    """[C, X): what the predecessor allowed and the cache did not give (`shrank`: the
    prompt is shorter than the predecessor's, so not an intact prefix extended)."""
    if rules.hosted:
        if rules.expired(gap, cached, expected, _kept_warm(rules, rep, prompt)):
            return {"ttl": tokens}
        if tokens < rules.tolerance:
            return {"rounding": tokens}
        return {"unexplained" if shrank else "provider": tokens}
    if tokens < rules.tolerance:
        return {"rounding": tokens}
    # The replay's eviction class: blocks the fitted capacity lost and an unlimited cache
    # kept, which the log did not get either (in the replay's tokens: scaled to the log's).
    lost = rep.sim.misses.get("eviction", 0) if rep is not None else 0
    if lost and rep is not None and rep.sim.prompt_tokens:
        evicted = min(tokens, round(lost * prompt / rep.sim.prompt_tokens))
        return {"eviction": evicted, "unexplained": tokens - evicted}
    return {"unexplained": tokens}


def _kept_warm(rules: Rules, rep: ReplayedRequest | None, prompt: int) -> int | None:
    """What the replay of the log at the engine's documented retention serves this request
    (every session's traffic, so after a pause past the retention what other sessions kept
    warm), in the log's tokens; None without a replay by the same engine.

    A rendered prompt at least as long as the logged one is the same prompt in a stand-in
    tokenizer's count: the warm prefix scales with the lengths. A shorter one lacks part
    of the prompt (`metadata.approximate`): a Codex rollout holds no tool list, a Cline or
    gateway body no system prompt or tools -- parts that precede the messages, so inside
    the prefix other sessions share. Those tokens are added to the warm prefix rather
    than spread over the prompt by scaling (which put a Codex release's shared 3,456-token
    prefix at 2,586, and every expiry that read it down as a provider miss), when some of
    the rendered prefix is warm; when none is, the prompt's start was cold and nothing
    after it is warm either. Lacked tokens after the warm prefix's end (a turn's encrypted
    reasoning) overstate it by at most their number, which moves the verdict only for a
    read within them of the warm prefix."""
    if rep is None or rep.engine != rules.engine or not rep.sim.prompt_tokens:
        return None
    rendered, predicted = rep.sim.prompt_tokens, rep.sim.predicted
    if rendered < prompt:
        return min(prompt, predicted + prompt - rendered) if predicted else 0
    return round(predicted * prompt / rendered)


def _money(entries: Sequence[LedgerEntry], prices: Mapping[str, CallPrice], source: str,
           unknown: Sequence[str], records: Mapping[str, UsageRecord]) -> Money:
    priced = [e for e in entries if e.id in prices]
    spend = sum(prices[e.id].spend_usd for e in priced)
    saved = sum(e.cached_tokens * max(0.0, prices[e.id].rates.input / 1e6
                                      - prices[e.id].read_rate) for e in priced)
    by_cause: Counter[str] = Counter()
    for e in priced:
        for cause, usd in e.lost_usd.items():
            by_cause[cause] += usd  # type: ignore[assignment]
    premium = sum(prices[e.id].write_premium_usd for e in priced)
    return Money(source, len(priced), len(entries) - len(priced), tuple(sorted(unknown)),
                 spend, saved, float(sum(by_cause.values())),
                 {c: float(by_cause[c]) for c in LOSSES if by_cause[c]}, premium,
                 _recorded(entries, prices, records))


def _recorded(entries: Sequence[LedgerEntry], prices: Mapping[str, CallPrice],
              records: Mapping[str, UsageRecord]) -> RecordedCost | None:
    """The log's own cost of the basis's calls beside list prices (None: it records none)."""
    costs = {e.id: c for e in entries
             if (c := records[e.id].recorded_cost_usd) is not None}
    if not costs:
        return None
    by_model: dict[str, list[float]] = {}
    for rid, cost in costs.items():
        if rid in prices:
            row = by_model.setdefault(prices[rid].rates.model, [0, 0.0, 0.0])
            row[0] += 1
            row[1] += cost
            row[2] += prices[rid].spend_usd
    models = sorted((RecordedModel(m, int(n), got, listed)
                     for m, (n, got, listed) in by_model.items()),
                    key=lambda r: (-abs(r.list_usd - r.recorded_usd), r.model))
    return RecordedCost(len(costs), sum(costs.values()), tuple(models))


def read_ttls(records: Sequence[UsageRecord]) -> dict[str, float]:
    """request id -> the TTL of the entry its session predecessor left, where the log shows
    it, by the rules of the engine whose usage splits writes by TTL (`ttl_split_engine`,
    `EngineSpec.write_ttl`: its long TTL after long-TTL writes, its default after split
    writes with none; a predecessor that wrote nothing passes on the TTL of the entry it
    read). `records` in time order; a request the log says nothing for is absent."""
    spec = ttl_split_engine()
    left: dict[str, float | None] = {}
    out: dict[str, float] = {}
    if spec is None:
        return out
    for r in records:
        before = left.get(r.prev_id) if r.prev_id is not None else None
        if before is not None:
            out[r.id] = before
        left[r.id] = spec.write_ttl(r.cache_write_tokens, r.cache_write_1h_tokens, before)
    return out


def ttl_1h_predecessors(records: Sequence[UsageRecord]) -> set[str]:
    """Ids of requests whose session predecessor left a long-TTL (1-hour) entry
    (`read_ttls`)."""
    spec = ttl_split_engine()
    if spec is None or spec.long_ttl is None:
        return set()
    return {rid for rid, ttl in read_ttls(records).items() if ttl == spec.long_ttl.seconds}


def _hosted(engine: str) -> bool:
    spec = ENGINES.get(engine)
    return spec is not None and spec.hosted


def unmodelled_hosted_rules(family: str) -> Rules:
    """A hosted API whose cache prefixscope has no model of (Gemini's implicit caching,
    xAI): a shortfall of a live prefix is the provider's; no retention or minimum is
    assumed."""
    return Rules(family, True, 1, 0, None, 0, HOSTED_SHORTFALL_TOLERANCE, reads_last_token=True)


def rules_for(records: Sequence[UsageRecord], replayed: Mapping[str, ReplayedRequest],
              block_of_source: Mapping[str, int | None], engine_of: Mapping[str, str | None],
              family_of: Mapping[str, str | None],
              unmodelled_of: Mapping[str, str | None],
              extended: Collection[str] = frozenset()) -> dict[str, Rules]:
    """Each request's rules: a hosted API's by its own model's family (a log may mix
    providers); else its replay's engine and block size; else the engine chosen for its
    log file; else the block size inferred for its log; else token-exact. `extended`: ids
    of requests that asked for OpenAI's 24-hour retention (their successor's rules keep
    the prefix a day)."""
    one_hour = ttl_1h_predecessors(records)
    out: dict[str, Rules] = {}
    for r in records:
        rep = replayed.get(r.id)
        engine = rep.engine if rep is not None else engine_of.get(r.id)
        family = family_of.get(r.id)
        if engine is None and family is not None and _hosted(family):
            # no engine for its log (most of its calls went to a hosted API prefixscope
            # has no cache model of): its own model's family still has one
            engine = family
        if engine is not None and _hosted(engine):
            out[r.id] = hosted_rules(family if family is not None and _hosted(family)
                                     else engine, r.model,
                                     r.id in one_hour, r.prev_id in extended)
        elif rep is not None:
            out[r.id] = self_hosted_rules(rep.engine, rep.unit)
        elif engine is None and unmodelled_of.get(r.id):
            out[r.id] = unmodelled_hosted_rules(str(unmodelled_of[r.id]))
        else:
            out[r.id] = self_hosted_rules(engine, block_of_source.get(r.source_format))
    return out
