"""Render a logged request into the prompt the upstream model saw, with a segment map.

Public API:

* `render(request, options) -> Prompt` -- gateway profile + serving-engine
  normalization + chat template; every character attributed to a `Segment` (its
  path in the logged request, or ``template``).
* `RenderOptions(gateway, tokenizer, what_if)` -- the frozen key shared with
  `prefixscope.tokenize.tokens`, diff, bucket and simulate.
* `check_options(options)` -- reject an unknown gateway profile or what-if up front.
* `load_tokenizer(spec)` -- bundled names, model directories, cached HF ids.
* `render_report(request, options) -> RenderResult` -- everything ``prefixscope
  render`` prints (imported lazily: it tokenizes).

See docs/render.md.
"""

from __future__ import annotations

from typing import Any

from prefixscope.render.gateway import PROFILES
from prefixscope.render.pipeline import check_options, render, resolve_gateway
from prefixscope.render.prompt import TEMPLATE_PATH, Prompt, RenderError, RenderOptions, Segment
from prefixscope.render.tokenizer import (
    BUNDLED,
    DEFAULT_TOKENIZER,
    Tokenizer,
    TokenizerError,
    load_tokenizer,
)
from prefixscope.render.whatif import WHAT_IFS

__all__ = [
    "BUNDLED", "DEFAULT_TOKENIZER", "PROFILES", "TEMPLATE_PATH", "WHAT_IFS", "Prompt",
    "RenderError", "RenderOptions", "RenderResult", "Segment", "SegmentRow", "Tokenizer",
    "TokenizerError", "check_options", "load_tokenizer", "render", "render_report",
    "resolve_gateway",
]


def __getattr__(name: str) -> Any:
    if name in ("render_report", "RenderResult", "SegmentRow"):
        from prefixscope.render import report

        return getattr(report, name)
    raise AttributeError(name)
