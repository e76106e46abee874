"""The ``passthrough`` gateway profile: the upstream got the request as logged.

An OpenAI Chat body is the upstream request; a Responses API body is read as Chat
messages (`protocols.responses_to_chat`). An Anthropic body under passthrough means a
hosted Claude model, which the renderer lays out in Anthropic's cache order instead
(`protocols.anthropic_proxy_view`, marked approximate): no profile converts it.
"""

from __future__ import annotations

from typing import Any

from prefixscope.prompt.gateways.profile import GatewayProfile
from prefixscope.prompt.marks import Marker
from prefixscope.prompt.protocols import responses_to_chat
from prefixscope.prompt.values import RenderError


def chat_view(endpoint: str, marked: dict[str, Any], marker: Marker
              ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """(messages, tools) of an OpenAI Chat or Responses body, as logged."""
    if endpoint == "openai-responses":
        return responses_to_chat(marked, marker)
    logged = marked.get("messages")
    if logged is not None and not isinstance(logged, list):
        raise RenderError(f"the body's messages is a {type(logged).__name__}, not a list")
    messages = [m for m in logged or [] if isinstance(m, dict)]
    tools = marked.get("tools") if isinstance(marked.get("tools"), list) else None
    return messages, tools


def convert(endpoint: str, marked: dict[str, Any], marker: Marker, *, hoist: bool = True
            ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    return chat_view(endpoint, marked, marker)


PROFILE = GatewayProfile(
    name="passthrough",
    summary="the upstream got the request as logged",
    requires_endpoint=None,
    convert=convert,
)
