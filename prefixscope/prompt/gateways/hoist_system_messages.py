"""The ``hoist-system-messages`` gateway profile.

``hoist-system-messages`` -- system/developer messages after the first non-system
message are removed from their place and appended, separated by a blank line, to
the leading system message (created if absent). The separator is this project's
assumption: gateways that hoist do not agree on one.
"""

from __future__ import annotations

from typing import Any

from prefixscope.prompt.gateways.passthrough import chat_view
from prefixscope.prompt.gateways.profile import GatewayProfile
from prefixscope.prompt.marks import Marker
from prefixscope.prompt.values import SYSTEM_ROLES


def convert(endpoint: str, marked: dict[str, Any], marker: Marker, *, hoist: bool = True
            ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The chat view of the body with late system messages hoisted (unless the no-hoist
    what-if asks what the prompt would be without the gateway's rewrite)."""
    messages, tools = chat_view(endpoint, marked, marker)
    return (hoist_system_messages(messages, marker) if hoist else messages), tools


def hoist_system_messages(messages: list[dict[str, Any]], marker: Marker) -> list[dict[str, Any]]:
    """Move system/developer messages after the conversation started into the leading one."""
    lead = 0
    while lead < len(messages) and messages[lead].get("role") in SYSTEM_ROLES:
        lead += 1
    late = [m for m in messages[lead:] if m.get("role") in SYSTEM_ROLES]
    if not late:
        return messages
    rest = [m for m in messages[lead:] if m.get("role") not in SYSTEM_ROLES]
    texts = [_flat_text(m.get("content")) for m in late]
    if lead:
        first = dict(messages[0])
        pid = marker.path_of(messages[0])
        if pid is not None:
            marker.register(first, pid)
        first["content"] = "\n\n".join([_flat_text(messages[0].get("content")), *texts])
        return [first, *messages[1:lead], *rest]
    return [{"role": "system", "content": "\n\n".join(texts)}, *rest]


def _flat_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content
                         if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


PROFILE = GatewayProfile(
    name="hoist-system-messages",
    summary="system/developer messages after the first turn moved into the leading one",
    requires_endpoint=None,
    convert=convert,
)
