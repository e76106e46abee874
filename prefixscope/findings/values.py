"""The values the findings modules pass between them, below every module that makes or
reads them: the report's options, the cache domains planned and a domain's replay (what
`findings.evidence`, `domains`, `whatif_pools` and `ledgering` hand on), the cache policy
priced per kind of request (`findings.policy` prices it, the report shows it) and the
evidence gathered (`findings.evidence` gathers it, the finders and the report read it).
Here, none of those modules imports another to name its type: no import runs in a circle
(the import-linter contract ``acyclic_siblings``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefixscope.analyses.bucket import BucketReport
from prefixscope.analyses.diff import DiffReport
from prefixscope.analyses.engine_cache import EngineLogAnalysis
from prefixscope.analyses.segments import SegmentsReport
from prefixscope.analyses.simulate import SimulateReport
from prefixscope.analyses.usage_lint import UsageLint
from prefixscope.engines.choose import AUTO
from prefixscope.findings.ledger import Ledger
from prefixscope.findings.ttl_choice import TtlWhatIf
from prefixscope.ingest.engine_logs import EngineLogInput
from prefixscope.model import SessionEvent, UsageRecord
from prefixscope.model.words import plural, signed_usd
from prefixscope.prompt import RenderOptions
from prefixscope.store.store import UsageSummary

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ReportOptions:
    """What the report analyses with."""

    render: RenderOptions = field(default_factory=RenderOptions)
    engine: str = AUTO  # a cache model name, or "auto" (chosen from the log)
    block_size: int | None = None  # None: inferred from the cached values
    capacity_tokens: int | None = None  # None: fitted when the log has cached tokens
    # vLLM / SGLang logs and /metrics dumps: paths (sniffed when read), or files an ingest
    # classified (read as their kind)
    engine_logs: tuple[Path | EngineLogInput, ...] = ()
    # Dollars per million uncached prompt tokens of a self-hosted engine (its compute);
    # None: hosted models at their list prices (genai-prices), self-hosted unpriced.
    price_per_mtok: float | None = None
    # What-ifs to price (--what-if): render transforms (replayed) and TTL choices (priced
    # from the ledger); the ones the diff's causes call for are priced anyway.
    what_if: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Replay:
    """One cache domain's replay: the log file whose requests share one server's cache."""

    domain: str
    report: SimulateReport


# domain -> (engine, block size, files); each file's (engine, block) as chosen; the notes
# saying why
Plans = tuple[dict[str, tuple[str, int | None, list[str]]],
              dict[str, tuple[str | None, int | None]], list[str]]


# The policy's options and moves (`findings.policy`) its values name
AS_LOGGED = "as-logged"
MOVE = "move-volatile"  # the volatile part of the prefix moved after the last breakpoint
NO_BODIES = ("not measurable without bodies: the log keeps no prompt of this kind's calls "
             "(usage only), so no volatile part of it can be located")
NOTHING_TO_MOVE = ("nothing to move: no volatile part of the prompts the log keeps broke "
                   "this kind's prefix")


@dataclass(frozen=True, slots=True)
class PolicyOption:
    """One way of keeping a kind's expired prefixes, priced over its calls."""

    name: str  # one of OPTIONS
    saved_usd: float  # what the expired prefixes it keeps were charged, less their reads
    cost_usd: float  # the 1-hour write premium and the pings' cache reads
    kept_requests: int  # the pauses whose prefix it keeps
    kept_tokens: int  # their ttl tokens, read instead of re-written
    pings: int = 0
    ping_minutes: float | None = None  # the keep-warm interval
    # move-volatile: the break tokens the move itself turns into reads (their dollars are in
    # saved_usd; an expiry it uncovers is in kept_tokens when the option keeps it)
    moved_tokens: int = 0
    moved_requests: int = 0
    moved_usd: float = 0.0  # their break dollars (part of saved_usd)

    @property
    def net_usd(self) -> float:
        return self.saved_usd - self.cost_usd


@dataclass(frozen=True, slots=True)
class TurnFigures:
    """The pauses before one turn kind's calls, under the kind's choice."""

    turn: str  # user turn | tool loop | turn unknown
    requests: int
    expired_requests: int
    ttl_tokens: int
    kept_requests: int  # the pauses the choice keeps (the hour or pings)
    kept_tokens: int
    saved_usd: float  # their ttl dollars
    pings: int  # the pings sent through these pauses
    ping_usd: float  # their cache reads
    moved_tokens: int = 0  # the break tokens the choice's move reads in these calls
    moved_usd: float = 0.0  # their break dollars

    @property
    def line(self) -> str:
        text = (f"{self.turn}: {self.kept_requests:,} of "
                f"{plural(self.expired_requests, 'expired pause')} kept ({self.kept_tokens:,} "
                f"of {self.ttl_tokens:,} tokens, {signed_usd(self.saved_usd)})")
        if self.pings:
            text += f" with {plural(self.pings, 'ping')} ({signed_usd(self.ping_usd)})"
        if self.moved_tokens:
            text += (f", {self.moved_tokens:,} break tokens read after the move "
                     f"({signed_usd(self.moved_usd)})")
        return text


@dataclass(frozen=True, slots=True)
class PolicyPart:
    """One kind of request: its options priced and the cheapest chosen."""

    agent: str  # main | sub-agent | compaction
    project: str | None
    model: str | None
    requests: int
    expired_requests: int  # pauses the prefix expired in (priced calls)
    ttl_tokens: int
    options: tuple[PolicyOption, ...]  # OPTIONS priced (only "as-logged" without an expiry)
    choice: str  # the option with the highest net (the first on a tie)
    turns: tuple[TurnFigures, ...] = ()
    routing_tokens: int = 0  # the routing tokens pinning recovers
    pin_usd: float | None = None  # pinning's saving (`pin_backend`); None: no backends
    reused_share: float | None = None  # ttl-1h: the 5-minute writes that were re-writes
    break_even_share: float | None = None  # ttl-1h: the share at which it pays
    payback_pause_minutes: float | None = None  # pings pay up to this pause (whole prefix)
    volatile_tokens: int = 0  # the kind's break tokens a moved volatile part would not break
    move: str = NOTHING_TO_MOVE  # MOVE_APPLICABLE (its options priced), or why not

    @property
    def chosen(self) -> PolicyOption:
        return next(o for o in self.options if o.name == self.choice)

    @property
    def pin(self) -> bool:
        return bool(self.pin_usd)

    @property
    def net_usd(self) -> float:
        return self.chosen.net_usd + (self.pin_usd or 0.0)

    @property
    def label(self) -> str:
        return " · ".join(x for x in (self.agent, self.project, self.model) if x)

    @property
    def detail(self) -> str:
        """One line: the choice, its net, what proves it, its payback and break-even."""
        what = self.choice + (" + pin-backend" if self.pin else "")
        o = self.chosen
        line = (f"{self.label}: {what}, net {signed_usd(self.net_usd)} over "
                f"{plural(self.requests, 'call')} "
                f"({plural(self.expired_requests, 'expired pause')}, "
                f"{self.ttl_tokens:,} ttl tokens)")
        if o.kept_requests:
            line += (f"; keeps {o.kept_tokens:,} tokens of {plural(o.kept_requests, 'pause')} "
                     f"({signed_usd(o.saved_usd - o.moved_usd)}) for {signed_usd(o.cost_usd)}")
        if o.pings:
            line += f", {plural(o.pings, 'ping')} every {o.ping_minutes:.1f} min"
        if o.moved_tokens:
            line += (f"; moving the volatile part after the last breakpoint reads "
                     f"{o.moved_tokens:,} break tokens of {plural(o.moved_requests, 'call')} "
                     f"({signed_usd(o.moved_usd)}) instead of paying for them again (moving adds "
                     "no write)")
        others = ", ".join(f"{x.name} {signed_usd(x.net_usd)}" for x in self.options
                           if x.name != self.choice)
        if others:
            line += f" (others: {others})"
        if self.payback_pause_minutes is not None:
            line += (f"; pings pay for a pause up to {self.payback_pause_minutes:,.1f} min "
                     "when its whole prefix expired")
        if self.reused_share is not None and self.break_even_share is not None:
            line += (f"; 1-hour writes pay above {self.break_even_share:.1%} re-writes, "
                     f"this kind has {self.reused_share:.1%}")
        if self.pin_usd is not None and self.routing_tokens:
            line += f"; pinning keeps {self.routing_tokens:,} routing tokens"
        if self.move == NO_BODIES:
            line += f"; {MOVE} not measurable without bodies"
        if any(t.expired_requests for t in self.turns):
            line += "; " + "; ".join(t.line for t in self.turns if t.expired_requests)
        return line


@dataclass(frozen=True, slots=True)
class Policy:
    """The cheapest combination per kind of request, over the log."""

    parts: tuple[PolicyPart, ...]  # the most net first
    pinning: str  # "applicable", or why not
    kinds_known: bool = True  # False: priced without the calls' kinds (a bundle)

    @property
    def net_usd(self) -> float:
        return sum(p.net_usd for p in self.parts)

    @property
    def saved_usd(self) -> float:
        return sum(p.chosen.saved_usd + (p.pin_usd or 0.0) for p in self.parts)

    @property
    def cost_usd(self) -> float:
        return sum(p.chosen.cost_usd for p in self.parts)

    @property
    def detail(self) -> str:
        changed = [p for p in self.parts if p.choice != AS_LOGGED or p.pin]
        pinning = "" if self.pinning == "applicable" else f"; pinning {self.pinning}"
        if not self.kinds_known:
            pinning += ("; the log does not say which agent made each call or what it sent "
                        "last (a bundle): every call is priced as a main agent's")
        if not changed:
            return ("no kind of request gains from 1-hour writes, keep-warm pings, moving "
                    "the volatile part or pinning on this log "
                    f"({plural(len(self.parts), 'kind')}){pinning}")
        chosen = "; ".join(f"{p.label}: {p.choice}" + (" + pin-backend" if p.pin else "")
                           + f" (net {signed_usd(p.net_usd)})" for p in changed)
        return (f"net {signed_usd(self.net_usd)} over {plural(len(self.parts), 'kind')} "
                "of request: "
                f"{chosen}{pinning}")


@dataclass(frozen=True, slots=True)
class Evidence:
    """The analyses' results over one store (None: the step could not run; see notes)."""

    usage: UsageSummary
    records: tuple[UsageRecord, ...]
    bucket: BucketReport  # by source
    by_dimension: tuple[BucketReport, ...]  # one per dimension with more than one value
    diff: DiffReport | None
    segments: tuple[SegmentsReport, ...]
    simulate: SimulateReport | None  # every domain's replay merged
    what_if_of: dict[str, str]  # diff cause -> the what-if transform priced for it
    scenarios: tuple[tuple[str, bool, str, int], ...]  # Store.session_origins()
    usage_lint: UsageLint | None = None
    engine_log: EngineLogAnalysis | None = None
    ingest: Any = None  # ingest.IngestResult, when the report ingested the logs
    truncated: tuple[str, ...] = ()  # ids of requests whose body the logger cut short
    replays: tuple[Replay, ...] = ()  # per cache domain (a log file)
    notes: tuple[str, ...] = ()
    ledger: Ledger | None = None  # every missed token of the basis, by cause
    # Anthropic-protocol calls whose input_tokens already held the cache reads (the whole
    # rendered prompt): their logged prompt counts the reads twice (`cache_inclusive_input`)
    inclusive_input: tuple[str, ...] = ()
    ttl_what_ifs: tuple[TtlWhatIf, ...] = ()  # the TTL decision priced (Anthropic expiries)
    requested_what_if: tuple[str, ...] = ()  # --what-if, as asked
    # request id -> the session events the log recorded before it (compaction, truncation,
    # model change, client upgrade, tool-set delta), and the provider's own verdict on its
    # miss where the log kept one: (reason, missed tokens)
    events: Mapping[str, tuple[SessionEvent, ...]] = field(default_factory=dict)
    verdicts: Mapping[str, tuple[str, int | None]] = field(default_factory=dict)
    # request id -> its rendered prompt's tokens, and the calls whose prompt the log could
    # not rebuild (`findings.rebuild`)
    rendered: Mapping[str, int] = field(default_factory=dict)
    not_rebuilt: frozenset[str] = frozenset()
    # what the ledger reads besides: each log file's (engine, block size) as the replay
    # chose them, and the requests that asked for OpenAI's 24-hour retention (a bundle
    # rebuilds the ledger from these: `findings.bundle`)
    chosen: Mapping[str, tuple[str | None, int | None]] = field(default_factory=dict)
    extended: frozenset[str] = frozenset()
    policy: Policy | None = None  # --what-if policy: the choice per kind of request
