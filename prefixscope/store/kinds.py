"""What kind of request each call is, as its log says, for the policy that prices each kind
apart (`findings.policy`): a main agent's call, a sub-agent's (a session under another:
Claude Code's ``subagents/agent-*`` files and sidechain lines, Gemini CLI's sub-agents), or
a compaction's summarizer (Claude Code's ``subagents/agent-acompact-*`` files, whose calls
carry a recorded compaction); and what the call sent last where its reader kept it
(metadata ``last_message``: ``tool_result`` or ``user``). A call with a body and no such
key is read from its body by the caller (`bodies_without_last_message`)."""

from __future__ import annotations

from collections.abc import Iterator

from prefixscope.model import Request
from prefixscope.store.store import Store

SUMMARIZER = "the compaction's summarizer call"  # the detail of its recorded compaction


def request_roles(store: Store) -> dict[str, tuple[str, str | None]]:
    """request id -> (agent: ``main`` | ``sub-agent`` | ``compaction``, what it sent last:
    ``tool_result`` | ``user`` | None), every call once (not a second log of it)."""
    rows = store.run(
        "SELECT r.id, "
        "coalesce(r.session_key, '') LIKE '%/agent-acompact-%' OR EXISTS (SELECT 1 FROM "
        "session_events e WHERE e.request_id = r.id AND starts_with(e.detail, ?)), "
        # a parent names the session a sub-agent runs under only in the agents' own logs;
        # elsewhere it chains a call to the response it continues (Responses'
        # previous_response_id, a trace's parent chat, a gateway's parent row)
        "(r.parent_key IS NOT NULL AND r.client IN ('claude-code', 'gemini-cli')) OR "
        "coalesce(json_extract_string(r.metadata, '$.isSidechain'), '') = 'true', "
        "json_extract_string(r.metadata, '$.last_message') "
        "FROM requests r WHERE r.duplicate_of IS NULL", [SUMMARIZER])
    return {rid: ("compaction" if summarizer else "sub-agent" if sub else "main", last)
            for rid, summarizer, sub, last in rows}


def bodies_without_last_message(store: Store) -> Iterator[Request]:
    """The calls with a body whose reader did not say what they sent last, bodies included."""
    ids = [rid for (rid,) in store.run(
        "SELECT id FROM requests WHERE duplicate_of IS NULL AND has_body AND "
        "json_extract_string(metadata, '$.last_message') IS NULL ORDER BY id")]
    return store.iter_ids(ids)
