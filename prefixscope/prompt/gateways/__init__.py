"""The gateway profiles: the request the upstream model server received, built from the
logged one. A registry: a new gateway is one module in this package that defines
``PROFILE`` (a `GatewayProfile`) plus one line in `_MODULES`.

Between the client and the model server sits a gateway that may rewrite the request.
Each profile reproduces one rewrite exactly and returns the upstream request in OpenAI
Chat shape (``messages``, ``tools``), every logged string still wrapped in its marks and
every logged object registered under its logged path (`prefixscope.prompt.marking`).
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import Any

from prefixscope.prompt.gateways.profile import GatewayProfile, Messages, Tools
from prefixscope.prompt.marks import Marker
from prefixscope.prompt.values import RenderError

# Module names in this package, in the order --help lists them.
_MODULES = ("passthrough", "anthropic_to_openai", "hoist_system_messages")


@cache
def gateway_profiles() -> dict[str, GatewayProfile]:
    """name -> profile, for every registered gateway."""
    profiles = [importlib.import_module(f"{__name__}.{m}").PROFILE for m in _MODULES]
    return {p.name: p for p in profiles}


PROFILES: tuple[str, ...] = tuple(gateway_profiles())


def get_profile(name: str) -> GatewayProfile:
    """Raises RenderError for an unknown name."""
    try:
        return gateway_profiles()[name]
    except KeyError:
        raise RenderError(f"unknown gateway profile {name!r} (known: "
                          f"{', '.join(PROFILES)})") from None


def to_upstream(endpoint: str, marked: dict[str, Any], profile: str, marker: Marker, *,
                hoist: bool = True) -> tuple[Messages, Tools]:
    """The upstream OpenAI Chat request (messages, tools) a gateway profile produces.

    Raises:
        RenderError: unknown profile, or one that does not apply to this endpoint.
    """
    gateway = get_profile(profile)
    required = gateway.requires_endpoint
    if required is not None and endpoint != required:
        raise RenderError(f"gateway {profile} needs an {required} body, this request is "
                          f"{endpoint}")
    if required is None and endpoint == "anthropic-messages":
        raise RenderError(f"gateway {profile} keeps an anthropic-messages body as is; render it "
                          "with the anthropic proxy view")
    return gateway.convert(endpoint, marked, marker, hoist=hoist)


__all__ = ["PROFILES", "GatewayProfile", "gateway_profiles", "get_profile", "to_upstream"]
