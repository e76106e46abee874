"""The values rendering produces: the prompt text and who owns each character of it.

`Prompt` is what the upstream model saw, reproduced: the text after the gateway
profile and the chat template, and a partition of that text into `Segment` spans.
Every character belongs to exactly one segment (the spans are contiguous, sorted
and cover the text), named by its path in the request *as logged*, before any
gateway touched it:

* ``system``, ``system[0]`` (Anthropic), ``messages[0]`` (an OpenAI system message),
* ``tools[3]``, ``tools[3].function``, ``tools[3].function.parameters.properties.path``,
* ``messages[7]`` (string content), ``messages[7].content[1]`` (a content block),
  ``messages[7].tool_calls[0].function.arguments``,
* ``template`` for glue the chat template, the gateway or the serving engine added.

A character belongs to the innermost JSON object or array of the logged request
that holds it; strings and numbers belong to the object holding them (so a text
block's text is ``messages[7].content[1]``, not ``...content[1].text``). One path
may own several spans (the glue before and after a nested object).
"""

from __future__ import annotations

from dataclasses import dataclass, field

TEMPLATE_PATH = "template"
SYSTEM_ROLES = ("system", "developer")  # OpenAI roles a chat template puts in the system turn


class RenderError(ValueError):
    """A request cannot be rendered (no body, a profile that does not apply, bad options)."""


@dataclass(frozen=True, slots=True)
class RenderOptions:
    """How to reproduce the upstream prompt: the shared key of render, tokens, diff and simulate."""

    gateway: str = "auto"  # a profile name, or "auto" (the log's, else the endpoint default)
    # "auto" (by the request's model family), a bundled name, a model directory, or a
    # locally cached HF id
    tokenizer: str = "auto"
    what_if: tuple[str, ...] = ()  # transforms, applied in order (see render.whatif)

    def __post_init__(self) -> None:
        if isinstance(self.what_if, str):  # a lone "a,b" string is a common slip
            object.__setattr__(self, "what_if", tuple(
                w.strip() for w in self.what_if.split(",") if w.strip()))
        else:
            object.__setattr__(self, "what_if", tuple(self.what_if))


@dataclass(frozen=True, slots=True)
class Segment:
    """A contiguous span of the rendered prompt owned by one place of the logged request."""

    path: str  # place in the logged request, or "template"
    # system | tools | tool | message | tool_call | tool_result | reasoning | image | template
    kind: str
    char_start: int  # first character (inclusive)
    char_end: int  # end (exclusive)

    @property
    def length(self) -> int:
        return self.char_end - self.char_start


@dataclass(frozen=True, slots=True)
class Prompt:
    """A rendered prompt and its segment map."""

    text: str  # exactly what the tokenizer receives
    segments: tuple[Segment, ...]  # partition of text, in order
    renderer: str  # pipeline id: version, tokenizer, template hash, gateway, what-ifs
    gateway: str  # profile applied
    tokenizer: str  # tokenizer spec
    approximate: bool  # rendered through a proxy (hosted Claude): counts are not the real ones
    gateway_source: str = "default"  # where the profile came from: "log", "flag" or "default"
    attribution: str = "exact"  # "exact", "partial" (template split marked text) or "aligned"
    notes: tuple[str, ...] = field(default=())  # things a reader should know about this render

    def segment_text(self, index: int) -> str:
        seg = self.segments[index]
        return self.text[seg.char_start:seg.char_end]

    def segment_at(self, char: int) -> int:
        """Index of the segment holding character `char`."""
        from bisect import bisect_right

        starts = [s.char_start for s in self.segments]
        return max(0, bisect_right(starts, char) - 1)
