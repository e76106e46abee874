"""`render_report`: everything ``prefixscope render`` shows about one request, as plain values.

The CLI only formats a `RenderResult`: the rendered text, the gateway profile and
where it came from, the tokenizer, the token count, whether counts are approximate,
one `SegmentRow` per segment span with its character and token spans (a
segment's tokens are those whose first character lies in it), and the token ids with
the offset each starts at. Its JSON (`views.json.render_json`, what the library's
``RenderResult.to_dict()`` returns) is the documented shape (docs/json.md, issue 3):
``{"request", "gateway", "tokenizer", "tokens", "approximate", "segments": [{"segment",
"kind", "char_start", "char_end", "token_start", "token_end"}]}`` plus ``"text"``
with ``show_text``.
"""

from __future__ import annotations

from dataclasses import dataclass

from prefixscope.model import Request
from prefixscope.prompt.values import RenderOptions


@dataclass(frozen=True, slots=True)
class SegmentRow:
    """One segment span with its character and token ranges (end-exclusive)."""

    segment: str  # path in the logged request, or "template"
    kind: str  # segment kind
    char_start: int  # first character in the rendered text
    char_end: int  # end character (exclusive)
    token_start: int  # first token whose first character is in the span
    token_end: int  # end token (exclusive); equal to token_start when no token starts here


@dataclass(frozen=True, slots=True)
class RenderResult:
    """The rendered prompt of one request, ready to print."""

    request: str  # request id (or the file name a body was read from)
    gateway: str  # gateway profile applied
    gateway_source: str  # "log", "flag" or "default"
    tokenizer: str  # tokenizer spec
    tokens: int  # number of tokens of the prompt
    approximate: bool  # counted with a stand-in tokenizer (a hosted model, or none offline)
    segments: tuple[SegmentRow, ...]  # every span of the text, in order
    text: str  # the rendered prompt
    what_if: tuple[str, ...]  # transforms applied
    attribution: str  # "exact", "partial", "aligned" or "none"
    renderer: str  # rendering pipeline id
    notes: tuple[str, ...]  # remarks for the reader (profile conflicts, proxy mode, ...)
    token_ids: tuple[int, ...] = ()  # the prompt's token ids, in order
    token_starts: tuple[int, ...] = ()  # offset in `text` of each token's first character


def render_report(request: Request, options: RenderOptions | None = None) -> RenderResult:
    """Render and tokenize one request for display.

    Args:
        request: a request with a body (from the store, a log, or a body file).
        options: gateway profile, tokenizer, what-ifs.

    Returns:
        The `RenderResult`.

    Raises:
        RenderError: the request cannot be rendered.
        TokenizerError: the tokenizer cannot be loaded offline.
    """
    from prefixscope.tokens.tokenize import tokens

    options = options or RenderOptions()
    result = tokens(request, options)
    prompt = result.prompt
    rows = tuple(
        SegmentRow(seg.path, seg.kind, seg.char_start, seg.char_end, start, end)
        for seg, (start, end) in zip(prompt.segments, result.segment_token_spans(), strict=True))
    return RenderResult(
        request=request.id, gateway=prompt.gateway, gateway_source=prompt.gateway_source,
        tokenizer=prompt.tokenizer, tokens=len(result), approximate=prompt.approximate,
        segments=rows, text=prompt.text, what_if=options.what_if,
        attribution=prompt.attribution, renderer=prompt.renderer, notes=prompt.notes,
        token_ids=tuple(result.ids.tolist()), token_starts=tuple(result.char_starts.tolist()))
