"""A logged request -> the prompt text the upstream model saw, with its segment map.

* `render(request, options) -> Prompt`: gateway profile + serving-engine normalization +
  chat template; every character attributed to a `Segment` (its path in the logged
  request, or ``template``). See prefixscope/prompt/pipeline.py and docs/render.md.
* `RenderOptions(gateway, tokenizer, what_if)`: the frozen key shared with
  `prefixscope.tokens`, diff, bucket and simulate.
* `check_options(options)`: reject an unknown gateway profile or what-if up front.
"""

from prefixscope.prompt.gateways import PROFILES
from prefixscope.prompt.pipeline import check_options, render, resolve_gateway
from prefixscope.prompt.values import TEMPLATE_PATH, Prompt, RenderError, RenderOptions, Segment
from prefixscope.prompt.whatif import WHAT_IFS

__all__ = ["PROFILES", "TEMPLATE_PATH", "WHAT_IFS", "Prompt", "RenderError", "RenderOptions",
           "Segment", "check_options", "render", "resolve_gateway"]
