"""Session keys: where a log says which conversation a request belongs to, decided once.

Three kinds of evidence, shared by every format that can see them:

* **Wire identifiers** -- the session headers clients and gateways send
  (`session_from_headers`) and the body fields that name a conversation
  (`session_from_body`: OpenAI Responses ``conversation``, ``metadata.session_id`` /
  ``metadata.conversation_id``, Claude Code's ``metadata.user_id``). One parser reads
  Claude Code's ``metadata.user_id`` in both of its forms (`claude_code_user_id`).
  OpenAI Responses ``previous_response_id`` names the response a request continues
  (`previous_response`): the format sets it as `Request.parent_key`, and threading puts
  a chain of responses in one session. ``prompt_cache_key`` is a routing hint, not a
  session: formats keep it in metadata (`prompt_cache_key`).
* **User rules** -- ``prefixscope ingest --session-key EXPR`` (`parse_session_rule`,
  `apply_session_rules`) for the identifiers no format knows: ``header:NAME`` reads the
  request headers a format kept in ``metadata["headers"]`` (secrets removed,
  `loggable_headers`), ``body:dotted.path`` the request body, ``meta:dotted.path`` the
  request's ``metadata``.
* **Trajectory files** -- SWE-agent, OpenHands and mini-swe-agent log no session id: a
  trajectory file (or an OpenHands ``output.jsonl`` line) is one agent run, and reruns of
  the same instance reuse its name. All three key the session the same way,
  ``<format>:<name>:<12 hex of the content hash>`` (`file_session_key`), so two runs of
  one instance stay apart and re-ingesting a file gives the same key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from prefixscope.ingest.normalize.fields import as_object, dig, loads_deep, to_text
from prefixscope.model.hashing import content_hash
from prefixscope.model.redaction import CREDENTIAL_HEADER

if TYPE_CHECKING:
    from prefixscope.ingest.source import Source
    from prefixscope.model import Request

_DIGEST_CHARS = 12
_TRAJ_SUFFIX = re.compile(r"(\.traj)?(\.json)?(\.gz)?$")

# --------------------------------------------------------------------------- headers

# Session headers in precedence order (lower case; matched case-insensitively). A header
# a gateway documents as its own session grouping comes before the ids coding clients
# send on their own, as each gateway itself ranks them.
SESSION_HEADERS: tuple[str, ...] = (
    # LiteLLM: `get_chain_id_from_headers` in litellm/proxy/litellm_pre_call_utils.py
    # ranks x-litellm-trace-id, then x-litellm-session-id, then any x-<vendor>-session-id;
    # docs.litellm.ai/docs/proxy/ui_logs_sessions (Session Logs).
    "x-litellm-trace-id",
    "x-litellm-session-id",
    # Bifrost: docs/providers/request-options.mdx ("Session Stickiness", x-bf-session-id) and
    # docs/providers/session-affinity.mdx (x-bf-session-id always wins; otherwise the coding
    # harness headers session-id / session_id / x-claude-code-session-id are adopted).
    "x-bf-session-id",
    # Helicone: docs.helicone.ai observability/sessions (Helicone-Session-Id groups requests).
    "helicone-session-id",
    # Portkey: portkey.ai/docs/product/observability/traces ("include the x-portkey-trace-id
    # in your request header": related LLM calls are grouped in one trace).
    "x-portkey-trace-id",
    # Claude Code sends its session on every API call.
    "x-claude-code-session-id",
    # Generic names clients and harnesses send (Codex sends session_id).
    "x-session-id",
    "session-id",
    "session_id",
    "x-conversation-id",
)
# LiteLLM's last rule: any x-<vendor>-session-id header.
_VENDOR_SESSION_HEADER = re.compile(r"^x-[a-z0-9]+(?:-[a-z0-9]+)*-session-id$")
# Not built in: x-request-group and x-trace-id are documented by no gateway as a
# conversation id (x-trace-id is only LiteLLM's example of a forwarded header); use
# `--session-key header:x-request-group` when a deployment sets one.



def header_map(headers: Any) -> dict[str, str]:
    """Header names lower-cased with string values; accepts a mapping (a list value, as
    OTel's ``http.request.header.*`` string arrays, gives its first item), ``[[name,
    value]]`` or ``[{name, value}]``."""
    out: dict[str, str] = {}
    if isinstance(headers, Mapping):
        items = list(headers.items())
    elif isinstance(headers, list):
        items = [(h.get("name"), h.get("value")) if isinstance(h, dict) else tuple(h[:2])
                 for h in headers if isinstance(h, (dict, list)) and len(h) >= 2]
    else:
        return out
    for name, value in items:
        if isinstance(value, list):
            value = value[0] if value else None
        text = to_text(value)
        if isinstance(name, str) and text is not None:
            out[name.strip().lower()] = text
    return out


def loggable_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers worth keeping with a request: everything but credentials and cookies."""
    return {k: v for k, v in headers.items() if not CREDENTIAL_HEADER.search(k)}


def session_from_headers(headers: Mapping[str, str]) -> tuple[str, str] | None:
    """(session id, ``header:<name>``) from the first session header present, else None.
    `headers` must have lower-case names (`header_map`)."""
    for name in SESSION_HEADERS:
        value = to_text(headers.get(name))
        if value:
            return value, f"header:{name}"
    for name in sorted(headers):
        if _VENDOR_SESSION_HEADER.match(name) and (value := to_text(headers[name])):
            return value, f"header:{name}"
    return None


# --------------------------------------------------------------------------- bodies

class ClaudeCodeUserId(NamedTuple):
    """What Claude Code's ``metadata.user_id`` says."""

    device: str | None
    account: str | None
    session: str | None


# Legacy form: user_<hex device>_account_<uuid or empty>_session_<uuid>.
_CC_LEGACY_USER_ID = re.compile(
    r"^user_(?P<device>[0-9A-Za-z]+)_account_(?P<account>[0-9A-Za-z-]*)"
    r"_session_(?P<session>[0-9A-Za-z][0-9A-Za-z-]*)$")
_CC_SESSION_SUFFIX = re.compile(r"_session_([0-9A-Za-z][0-9A-Za-z-]*)$")


def claude_code_user_id(value: Any) -> ClaudeCodeUserId:
    """Claude Code's ``metadata.user_id``, either form: the legacy
    ``user_<device>_account_<account>_session_<session>`` string, or the JSON text of
    ``{"device_id", "account_uuid", "session_id"}`` newer versions send. Unknown text
    gives no fields (a string ending ``_session_<id>`` still gives the session)."""
    if not isinstance(value, str) or not value.strip():
        return ClaudeCodeUserId(None, None, None)
    text = value.strip()
    legacy = _CC_LEGACY_USER_ID.match(text)
    if legacy:
        return ClaudeCodeUserId(legacy["device"], legacy["account"] or None, legacy["session"])
    decoded = loads_deep(text)
    if isinstance(decoded, dict):
        return ClaudeCodeUserId(to_text(decoded.get("device_id")),
                                to_text(decoded.get("account_uuid")),
                                to_text(decoded.get("session_id")))
    suffix = _CC_SESSION_SUFFIX.search(text)
    return ClaudeCodeUserId(None, None, suffix.group(1) if suffix else None)


def session_from_body(body: Any) -> tuple[str, str] | None:
    """(session id, where) from the request body: OpenAI Responses ``conversation`` (an id or
    ``{"id"}``), ``metadata.session_id``, ``metadata.conversation_id``, then Claude Code's
    ``metadata.user_id``; None when the body names no conversation."""
    if not isinstance(body, dict):
        return None
    conversation = body.get("conversation")
    conversation_id = to_text(conversation.get("id")) if isinstance(conversation, dict) \
        else to_text(conversation)
    if conversation_id:
        return conversation_id, "openai-responses.conversation"
    metadata = as_object(body.get("metadata"))
    for key in ("session_id", "conversation_id"):
        value = to_text(metadata.get(key))
        if value:
            return value, f"metadata.{key}"
    session = claude_code_user_id(metadata.get("user_id")).session
    if session:
        return session, "claude-code.metadata.user_id"
    return None


def previous_response(body: Any) -> str | None:
    """OpenAI Responses ``previous_response_id``: the response this request continues."""
    return to_text(body.get("previous_response_id")) if isinstance(body, dict) else None


def prompt_cache_key(body: Any) -> str | None:
    """OpenAI ``prompt_cache_key``: a cache routing hint the client chose (kept in metadata)."""
    return to_text(body.get("prompt_cache_key")) if isinstance(body, dict) else None


def wire_session(headers: Mapping[str, str], body: Any) -> tuple[str | None, str | None]:
    """(session id, where) from the headers, else the body; (None, None) when neither says."""
    found = session_from_headers(headers) or session_from_body(body)
    return found if found else (None, None)


# --------------------------------------------------------------------------- user rules

_RULE_KINDS = ("header", "body", "meta")
_RULE_HELP = "use header:NAME, body:dotted.path or meta:dotted.path"


@dataclass(frozen=True, slots=True)
class SessionRule:
    """One ``--session-key`` expression: where to read a session id the formats do not know."""

    expr: str  # as given, e.g. "header:x-run-id"
    kind: str  # header | body | meta
    path: tuple[str, ...]  # the header name (one item, lower case) or the dotted path

    def value(self, request: Request) -> str | None:
        """The session id this rule reads from `request`, or None."""
        if self.kind == "header":
            return header_map(request.metadata.get("headers")).get(self.path[0])
        root = request.body if self.kind == "body" else request.metadata
        found = dig(root, *(int(p) if p.isdigit() else p for p in self.path))
        if isinstance(found, bool) or isinstance(found, (dict, list)):
            return None
        return to_text(found)


def parse_session_rule(expr: str) -> SessionRule:
    """A `SessionRule` from ``header:NAME``, ``body:dotted.path`` or ``meta:dotted.path``.

    Raises:
        ValueError: anything else (one line, for a person).
    """
    kind, sep, rest = expr.partition(":")
    kind = kind.strip().lower()
    rest = rest.strip()
    if not sep or kind not in _RULE_KINDS or not rest:
        raise ValueError(f"--session-key {expr!r}: unknown expression; {_RULE_HELP}")
    if kind == "header":
        if any(c.isspace() for c in rest) or ":" in rest:
            raise ValueError(f"--session-key {expr!r}: not a header name; {_RULE_HELP}")
        return SessionRule(expr, kind, (rest.lower(),))
    path = tuple(rest.split("."))
    if any(not part for part in path):
        raise ValueError(f"--session-key {expr!r}: empty step in the dotted path; {_RULE_HELP}")
    return SessionRule(expr, kind, path)


def apply_session_rules(request: Request, rules: Iterable[SessionRule]) -> Request:
    """`request` with the session of the first rule that reads a value from it; the rule
    wins over what the format found (``session_key_source`` = ``--session-key EXPR``)."""
    for rule in rules:
        value = rule.value(request)
        if value:
            return replace(request, session_key=value,
                           session_key_source=f"--session-key {rule.expr}")
    return request


# --------------------------------------------------------------------------- trajectories

def file_session_key(prefix: str, name: str, content: Any) -> str:
    """``<prefix>:<name>:<12 hex>``: one file/run is one session; the hash keeps reruns apart."""
    digest = content_hash(content).split(":", 1)[1][:_DIGEST_CHARS]
    return f"{prefix}:{name}:{digest}"


def source_stem(source: Source) -> str:
    """The file name without trajectory suffixes (``x.traj``, ``x.traj.json``); "stdin" for "-"."""
    if source.name == "-":
        return "stdin"
    return _TRAJ_SUFFIX.sub("", Path(source.name).name) or Path(source.name).name
