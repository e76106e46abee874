"""What a gateway profile is: a named, exact reproduction of one gateway's request rewrite."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Messages = list[dict[str, Any]]
Tools = list[dict[str, Any]] | None
# (endpoint, marked body, marker, *, hoist) -> the upstream OpenAI Chat (messages, tools),
# marks kept and objects registered so the segment map survives the rewrite.
Convert = Callable[..., tuple[Messages, Tools]]


@dataclass(frozen=True, slots=True)
class GatewayProfile:
    """One gateway rewrite, as the registry in `prefixscope.prompt.gateways` holds it."""

    name: str  # what --gateway and the logs call it
    summary: str  # one line for --help and docs
    # The only body protocol this profile converts (its input); None: it passes OpenAI
    # Chat / Responses bodies through and leaves Anthropic bodies to the proxy view.
    requires_endpoint: str | None
    convert: Convert
