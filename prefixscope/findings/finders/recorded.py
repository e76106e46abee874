"""Breaks the log itself records: the client changed the prompt's prefix between two calls
and wrote down that it did (`model.SessionEvent`, read at ingest): another model, a new
client version, a tool-set delta, a truncation of the history. The ledger books their
missed tokens as ``break`` of that kind (`findings.ledger`); this finder reports them, one
finding per kind, with the fix a user of the client that wrote the log can apply (not
request-building advice such as a ``cache_control`` breakpoint, which the client sets).
A recorded compaction is the ledger's ``compaction`` cause (the replay finder's).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence

from prefixscope.findings.evidence import Evidence
from prefixscope.findings.finders.base import EXAMPLES, count, excerpt, finding
from prefixscope.findings.ledger import KIND_OF_EVENT, LedgerEntry
from prefixscope.findings.model import Finding

CLAUDE_CODE = "claude-code"
CLINE_FAMILY = frozenset({"cline", "roo-code", "kilo-code"})
CODEX = "codex"


def find(ev: Evidence) -> Iterator[Finding]:
    if ev.ledger is None:
        return
    groups: dict[str, list[LedgerEntry]] = defaultdict(list)
    for e in ev.ledger.entries:
        if e.recorded in KIND_OF_EVENT and e.causes.get("break") and e.break_kind:
            groups[e.break_kind].append(e)
    client_of = clients_of(ev)
    for kind, entries in groups.items():
        yield _finding(ev, kind, entries, client_of)


def provider_said(entries: Sequence[LedgerEntry], ev: Evidence) -> dict[str, int]:
    """The provider's own verdicts on these requests' misses, where the log kept them
    (reason -> requests, most first): shown beside the finding's cause."""
    said = Counter(ev.verdicts[e.id][0] for e in entries if e.id in ev.verdicts)
    return dict(said.most_common())


def clients_of(ev: Evidence) -> dict[str, str | None]:
    """Each request's client, as `client_family` reads it. A Codex rollout is Codex's
    whatever its `originator` says: the CLI writes ``codex_cli_rs``, the IDE extension
    ``codex_vscode``, ``codex exec`` ``codex_exec``, and the desktop app ``Codex Desktop``
    (a real rollout of Codex 0.104, madshn/localpush's fixture), so the format decides."""
    return {r.id: CODEX if r.source_format == CODEX else r.client for r in ev.records}


def client_family(ids: Sequence[str], client_of: dict[str, str | None]) -> str | None:
    """``claude-code`` / ``cline`` / ``codex`` when every request of `ids` is that client's,
    else None."""
    clients = {client_of.get(i) for i in ids}
    if clients == {CLAUDE_CODE}:
        return CLAUDE_CODE
    if clients and clients <= CLINE_FAMILY:
        return "cline"
    if clients and all(c is not None and c.lower().startswith(CODEX) for c in clients):
        return CODEX  # Codex's `originator` in another format's log (a gateway's header)
    return None


def _finding(ev: Evidence, kind: str, entries: list[LedgerEntry],
             client_of: dict[str, str | None]) -> Finding:
    tokens = sum(e.causes["break"] for e in entries)
    priced = [e.lost_usd["break"] for e in entries if "break" in e.lost_usd]
    worst = sorted(entries, key=lambda e: -e.causes["break"])
    event = next(k for k, v in KIND_OF_EVENT.items() if v == kind)
    details = [x.detail for e in worst for x in ev.events.get(e.id, ()) if x.kind == event]
    changes = Counter(details)
    evidence: dict[str, object] = {
        "requests": len(entries),
        "sessions": len({e.session for e in entries}),
        "recorded": event,
        "example_requests": [e.id for e in worst[:EXAMPLES]],
        "tokens_per_request_max": worst[0].causes["break"],
        "changes": {excerpt(d, 80): n for d, n in changes.most_common(EXAMPLES)},
    }
    family = client_family([e.id for e in entries], client_of)
    if family is not None:
        evidence["client"] = family
    said = provider_said(entries, ev)
    if said:
        evidence["provider_verdicts"] = said
    n = count(len(entries), "request")
    what = f" ({excerpt(details[0], 60)})" if details else ""
    title = {
        "model-change": f"the model changed mid-session before {n}{what}: another model has "
                        "its own cache, so the whole prompt was written again",
        "tool-set-change": f"the tool set changed mid-session before {n}{what}: the log "
                           "records tools or MCP servers added or removed",
        "settings-change": f"the reasoning effort changed mid-session before {n}{what}: "
                           "the provider's prompt header holds it, so the whole prompt was "
                           "written again",
        "client-upgrade": f"the client was upgraded mid-session before {n}{what}: a new "
                          "version sends a new system prompt and tools",
        "truncation": f"the history was truncated to fit the context window before {n}"
                      f"{what}: everything after the kept prefix was written again",
        "history-rewrite": f"the client rewrote earlier turns before {n}{what}: everything "
                           "after the first rewritten message was written again",
    }[kind]
    if kind == "history-rewrite" and family == CODEX:
        title = (f"a new user turn dropped the reasoning of the turns before it, before {n}: "
                 "the Responses API keeps only the current turn's reasoning, so everything "
                 "after the first dropped item was written again")
    return finding(kind, title, tokens, evidence, _fix(kind, family),
                   segment="tools" if kind == "tool-set-change" else None,
                   lost_usd=sum(priced) if priced else None)


def _fix(kind: str, family: str | None) -> str:
    if family == CLAUDE_CODE:
        return {
            "settings-change": "Keep the model's settings (effort, thinking) fixed for the "
                               "session.",
            "model-change": "Don't switch models mid-session (`/model`, or `opusplan` moving "
                            "between plan and execution): pick the model when the session "
                            "starts, and do another model's work in a session of its own.",
            "tool-set-change": "Keep the tool set fixed for the session: configure the MCP "
                               "servers you need before it starts (pinned in `.mcp.json` / "
                               "settings) instead of connecting, enabling or disabling them "
                               "(`/mcp`, plugins) mid-session.",
            "client-upgrade": "Upgrade Claude Code between sessions, not before resuming a "
                              "long one (`--resume` after an update re-writes the whole "
                              "prompt), or hold the version during long sessions "
                              "(`DISABLE_AUTOUPDATER=1`).",
            "truncation": "Compact at a natural break (`/compact`) rather than letting the "
                          "history be cut, and `/clear` between unrelated tasks.",
            "history-rewrite": "Claude Code cleared old tool results to save context "
                               "(micro-compaction), re-writing the history from the first one "
                               "it cleared: keep sessions shorter (`/clear` between tasks, "
                               "`/compact` at a natural break) so it has less to clear.",
        }[kind]
    if family == CODEX:
        return {
            "model-change": "Keep one model per Codex session: switching (`/model`, or "
                            "resuming with another `--model` / profile) re-writes the whole "
                            "prompt; start a new session for another model's work.",
            "settings-change": "Keep one reasoning effort per Codex session (`/model` sets "
                               "it with the model; `model_reasoning_effort` in "
                               "`~/.codex/config.toml`): each change re-writes the whole "
                               "prompt.",
            "tool-set-change": "Keep the MCP servers in `~/.codex/config.toml` fixed while "
                               "a session runs.",
            "client-upgrade": "Update Codex between sessions, not before resuming a long one "
                              "(`codex resume` with a new release sends its own instructions "
                              "and tools).",
            "truncation": "Start a new session (or `/compact`) before the context window "
                          "fills.",
            "history-rewrite": "Nothing in the request to fix: the Responses API drops the "
                               "reasoning of earlier turns at each new user message (Codex "
                               "sends it back encrypted). Fewer, fuller user messages (the "
                               "whole task at once, not many short follow-ups) mean fewer "
                               "such drops.",
        }[kind]
    if family == "cline":
        return {
            "settings-change": "Keep the model's settings fixed for the task.",
            "model-change": "Use one model for the task: Cline's Plan and Act modes can each "
                            "have their own model (turn off \"use different models for Plan "
                            "and Act modes\"), and each switch re-writes the prompt.",
            "tool-set-change": "Keep the MCP servers and tools fixed for the task (enable "
                               "them before it starts).",
            "client-upgrade": "Update the extension between tasks, not during one.",
            "truncation": "The history outgrew the context window and was cut "
                          "(`conversationHistoryDeletedRange`), each cut re-writing all after "
                          "the system prompt: use a model with a larger context window, start "
                          "a new task (with its context handed over) before the window fills, "
                          "or let the client condense the history once (Cline's auto-condense, "
                          "Roo Code's context condensing) instead of truncating it repeatedly.",
            "history-rewrite": "Start a new task at a natural break so earlier turns need not "
                               "be rewritten.",
        }[kind]
    return {
        "model-change": "Keep one model per session (route sub-tasks to their own session).",
        "settings-change": "Keep the reasoning effort fixed for a session (send the same "
                           "`reasoning.effort` on every request of it).",
        "tool-set-change": "Keep the tool list fixed for a session (register every tool up "
                           "front; disable instead of removing).",
        "client-upgrade": "Upgrade the client between sessions, not in the middle of one.",
        "truncation": "Truncate the history less often: drop a larger range at once, or "
                      "summarize it once, so the prefix stays stable between cuts.",
        "history-rewrite": "Do not rewrite earlier turns (elide old tool output only at a "
                           "compaction, all at once), so each turn extends the last.",
    }[kind]
