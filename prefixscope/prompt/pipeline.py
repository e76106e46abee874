"""`render`: a logged request -> the prompt text the upstream model saw, with its segment map.

The path is the one a real request takes:

1. the logged body is copied with marks on every string that reaches the prompt
   and every object registered under its logged path (`marking.mark_body`);
2. what-if text edits change the system content (`whatif`);
3. the gateway profile rewrites the request (`gateways.to_upstream`), or, for a
   hosted Anthropic model, the body is laid out tools -> system -> messages for a
   proxy template (`protocols.anthropic_proxy_view`, ``approximate=True``);
4. the serving engine normalizes it (`serving`: content joined, arguments parsed,
   tools re-dumped);
5. the chat template renders it through transformers' Jinja environment with a
   mark-aware ``tojson`` (`template.render_marked`);
6. the marks are stripped: each character is owned by the innermost mark around it
   (`marks.strip_marks`), and runs become `Segment` spans.

(Module names are those of `prefixscope.prompt`.)

For a template this project did not write, the marked render is checked against
transformers' own ``render_jinja_template``; if a template mangled the marks (it
inspected or trimmed message text), the plain render wins and ownership is carried
over by aligning the two texts (``attribution="aligned"``).
"""

from __future__ import annotations

import dataclasses
import difflib
import operator
import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import orjson
import xxhash

from prefixscope.model import Request
from prefixscope.prompt import serving
from prefixscope.prompt.gateways import PROFILES, get_profile, to_upstream
from prefixscope.prompt.gateways.anthropic_to_openai import claude_message
from prefixscope.prompt.jsontext import dumps
from prefixscope.prompt.marking import (
    mark_anthropic_message,
    mark_body,
    mark_openai_message,
    mark_responses_item,
)
from prefixscope.prompt.marks import (
    TEMPLATE,
    Marker,
    Stripped,
    has_reserved_chars,
    marks_active,
    strip_marks,
)
from prefixscope.prompt.protocols import anthropic_proxy_view, proxy_message, responses_to_chat
from prefixscope.prompt.splice import HEADS, SPLICES, SpliceRule, heads_split
from prefixscope.prompt.template import render_marked, render_plain
from prefixscope.prompt.values import (
    SYSTEM_ROLES,
    TEMPLATE_PATH,
    Prompt,
    RenderError,
    RenderOptions,
    Segment,
)
from prefixscope.prompt.whatif import (
    BILLING_PREFIX,
    WhatIfPlan,
    apply_text_edits,
    parse_what_ifs,
    sorted_schema,
)
from prefixscope.tokenizers import choose_tokenizer, load_tokenizer

if TYPE_CHECKING:
    from prefixscope.tokenizers import Tokenizer

RENDER_VERSION = "r1"
KNOWN_ENDPOINTS = ("anthropic-messages", "openai-chat", "openai-responses")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
# JSON escape of a high surrogate of U+10E000..U+10F0FF (the marks' range).
_RESERVED_ESCAPE_RE = re.compile(rb"\\u[dD][bB][fF][89a-cA-C]")


def check_options(options: RenderOptions) -> None:
    """Validate the parts of `options` that do not depend on a request, up front.

    A bad ``--gateway`` or ``--what-if`` is the caller's mistake, not a property of
    one request: checking it once keeps it from being counted as N unrenderable pairs.

    Raises:
        RenderError: an unknown gateway profile, an unknown what-if or a bad regex.
    """
    wanted = options.gateway or "auto"
    if wanted != "auto" and wanted not in PROFILES:
        raise RenderError(f"unknown gateway profile {wanted!r} (known: auto, "
                          f"{', '.join(PROFILES)})")
    parse_what_ifs(options.what_if)


def resolve_gateway(request: Request, options: RenderOptions, endpoint: str
                    ) -> tuple[str, str, tuple[str, ...]]:
    """(profile, where it came from, notes): the log's word first, then the flag, then default.

    Raises:
        RenderError: the flag names an unknown profile, or one that cannot apply.
    """
    notes: list[str] = []
    wanted = options.gateway or "auto"
    if wanted != "auto":
        get_profile(wanted)
    logged = request.gateway
    if logged in PROFILES:
        required = get_profile(logged).requires_endpoint
        if required is not None and endpoint != required:
            notes.append(f"the log says {logged} but the body is {endpoint} "
                         "(already converted): rendered as received")
            return "passthrough", "log", tuple(notes)
        if wanted not in ("auto", logged):
            notes.append(f"the log says gateway {logged}; --gateway {wanted} ignored")
        return logged, "log", tuple(notes)
    if logged:
        notes.append(f"the log names gateway {logged!r}, which has no profile: not applied")
    if wanted != "auto":
        required = get_profile(wanted).requires_endpoint
        if required is not None and endpoint != required:
            raise RenderError(f"gateway {wanted} needs an {required} body; "
                              f"request {request.id or '?'} is {endpoint}")
        return wanted, "flag", tuple(notes)
    return "passthrough", "default", tuple(notes)


def render(request: Request, options: RenderOptions | None = None) -> Prompt:
    """Render a logged request as the upstream model saw it.

    Args:
        request: a request with a body.
        options: gateway profile, tokenizer spec and what-if transforms.

    Returns:
        The `Prompt`: text, segments covering every character, renderer id.

    Raises:
        RenderError: no body, unknown profile or what-if, or a profile that does not apply.
        TokenizerError: the tokenizer spec cannot be loaded offline.
    """
    return render_turn(request, options, keep=False)[0]


def head_text(request: Request, options: RenderOptions) -> tuple[str, str] | None:
    """(the start of `request`'s prompt before the part its messages decide, the bundled
    tokenizer it is rendered with), for a body whose prompt is provably that start
    followed by a part its head (the tools, the system prompt) does not change, rendered
    with a template of `splice.HEADS`: an Anthropic body in the proxy view or through
    new-api's conversion (``anthropic-to-openai``), none of whose messages is a system or
    developer one, or an OpenAI Chat body as logged (passthrough, or
    ``hoist-system-messages``), none of whose messages after its leading system and
    developer ones (`_lead`) is one. None anywhere else.

    Why, for the proxy view: its template input is the head -- `anthropic_proxy_view` of
    the body without messages: one system message made of the tools and the system blocks
    -- followed by each message converted on its own (`proxy_message`, then
    `serving.conversation`; roles kept). The what-if transforms edit the system blocks and
    the tools only (`whatif`). So the template inputs of a body and of its what-if are
    H + M and H' + M, and by `HEADS` the prompts are T(H)[:-|G|] + rest and
    T(H')[:-|G|] + rest with the same rest.

    Why, for the OpenAI Chat view as logged: `_appended_input`'s proof gives its template
    input as the head's -- the body with its messages cut to the `lead` (the same
    marking, edits and conversion; the tools are the head's) -- followed by each later
    message converted on its own (`passthrough.chat_view` keeps each dict message as it
    is and drops the others, `serving.conversation` maps each one alone, roles kept).
    The what-if transforms edit system and developer messages, wherever they are, and
    the tools' schemas only (`whatif._edit_system`, `sort-json-keys`): none of the later
    messages is one, so they are the same in the body and its what-if, and the inputs
    are again H + M and H' + M, M holding no system or developer message. With no such
    message after the lead, ``hoist-system-messages`` moves nothing (`_hoists`: its
    conversion is the passthrough one) and its ``no-hoist`` what-if changes nothing.

    Why, for an Anthropic body through new-api's conversion (`claude_to_openai`): marking
    and the what-if edits as for the proxy view (``system`` and the tools only:
    `whatif._edit_system` on this endpoint; ``sort-json-keys`` sorts the converted tools'
    schemas, `_build_template_input`; ``no-hoist`` is not read by this conversion). The
    conversion is the head -- ``system`` alone made into at most one system message (its
    text blocks joined; none when it is empty or neither a text nor a list of blocks) and
    the tools alone made into functions, i.e. the conversion of the body without messages
    -- followed by
    `claude_message` of each message in turn, which keeps everything it makes of a message
    in that message's place (a ``tool_result`` becomes a tool message just before its own
    message's remainder, never merged with a neighbour; ``cache_control`` stays on its
    text part; images become parts of their message; thinking blocks are dropped; an
    empty message is dropped alone; ids are the logged ones, never renumbered) and reads
    the body beyond its message in one place only: a nameless ``tool_result`` is named by
    the first block anywhere in the *messages* whose id is its ``tool_use_id``
    (`_tool_name_for`), which the what-if leaves as they are. The roles are the logged
    ones and ``tool`` (none is a system or developer one, checked above). Then
    `serving.conversation` maps each message on its own. So again the inputs are H + M
    and H' + M, M the same messages, and H one system message or none.

    `HEADS`' cut condition at the head (`HeadRule.cuts`) holds for H + M and H' + M
    whatever M is, where every message of the head's template input is a system or
    developer one: qwen2.5's and qwen3.6's ask of the head's last message that it not be a
    tool message (with M's first one a tool message), qwen3.6's that no assistant message
    of the head show reasoning, o200k-harmony's that no assistant message of the head
    carry a call whose id a tool message of M asks for; the head's template input is
    checked so (the proxy view's head is one system message, new-api's is one or none,
    the lead is system and developer messages, roles kept), else None.

    T(H) is rendered from the body without its history through the same conversion,
    unmarked: a bundled template prints text as it is, so its plain render is the marked
    one stripped (tests/test_template_parity.py); lone surrogates become U+FFFD as
    `render_turn` makes them; its system texts filled into its frame, rendered once for
    the heads that differ in those texts alone (`_framed_head`, the proof there). The
    caller checks the cut falls at a split token of the prompt it has
    (`simulate.prepare`)."""
    body = request.body
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return None
    endpoint = request.endpoint if request.endpoint in KNOWN_ENDPOINTS else _detect(body)
    messages = body["messages"]
    if endpoint == "anthropic-messages":
        if any(isinstance(m, dict) and isinstance(m.get("role"), str) and m["role"] in SYSTEM_ROLES
               for m in messages):
            return None
    elif endpoint != "openai-chat":
        return None
    tok = load_tokenizer(choose_tokenizer(options.tokenizer, request.model).spec)
    rule = HEADS.get(tok.name)
    if rule is None or not tok.bundled or tok.chat_template != _bundled_source(tok.name):
        return None
    generation = rule.generation
    profile = resolve_gateway(request, options, endpoint)[0]
    if endpoint == "anthropic-messages":
        if profile not in ("passthrough", "anthropic-to-openai"):  # the proxy view, new-api's
            return None
        head = {**body, "messages": []}
    else:
        if profile not in ("passthrough", "hoist-system-messages"):
            return None
        lead = _lead(body, endpoint, profile)
        if any(isinstance(m, dict) and m.get("role") in SYSTEM_ROLES for m in messages[lead:]):
            return None
        head = _head_body(body, lead)
    proxy = endpoint == "anthropic-messages" and profile == "passthrough"
    plan = parse_what_ifs(options.what_if)
    # What the text depends on, with the template and the what-ifs: the head with the
    # what-ifs' system edits made. Unmarked, marking copies the head's values as they are
    # and the edits read and write the system's values alone, so the template input is
    # the same whether the edits are made before marking (here) or after (the render):
    # two heads the edits make equal (a billing header whose hash changes, stripped) have
    # one text. Of that head, the system texts are printed once each, as they are
    # (`_framed_head`): the rest -- the frame -- is rendered once for every head that
    # differs from it in those texts alone (a billing header whose hash changes, kept).
    with marks_active(False):  # as `_template_input` makes them with this marker
        edited = apply_text_edits(endpoint, head, plan, Marker(enabled=False))
    framed, texts = _framed_head(endpoint, edited)
    raw = _json(framed)
    key = None if raw is None else (tok.name, options.what_if, endpoint, profile,
                                    xxhash.xxh3_128_intdigest(raw))
    frame = _HEAD_FRAMES.get(key) if key is not None else None
    if frame is None:
        frame = _head_frame(endpoint, framed, profile, proxy, plan, tok, len(texts))
        if key is not None:
            _HEAD_FRAMES[key] = frame
            if len(_HEAD_FRAMES) > _HEAD_FRAMES_KEPT:
                del _HEAD_FRAMES[next(iter(_HEAD_FRAMES))]
    text = _filled(frame, texts) if frame is not _UNFRAMED else None
    if text is None:  # the template input of the head itself, rendered whole
        converted, tools = _template_input(endpoint, head, profile, proxy, plan, tok,
                                           Marker(enabled=False))
        text = _head_render(converted, tools, tok)
    return (text[:-len(generation)], tok.name) if text.endswith(generation) else None


# The frames `head_text` rendered last (`_head_frame`), by (template, what-ifs, endpoint,
# gateway profile, hash of the framed body without its history): a session's turns and a
# request's what-ifs share their heads' frames.
_HEAD_FRAMES: dict[tuple[str, tuple[str, ...], str, str, int],
                   tuple[tuple[str, ...], tuple[int, ...]] | str] = {}
_HEAD_FRAMES_KEPT = 256
_UNFRAMED = "unframed"  # `_HEAD_FRAMES`: a hole not found once in the frame: render whole


def _hole(i: int) -> str:
    """The stand-in for the `i`-th system text of a framed head (`_framed_head`): plane 15
    private-use characters (not the marks' range), found once each in the frame's text or
    the frame is not used."""
    return f"\U000f0000{i}\U000f0001"


def _framed_head(endpoint: str, head: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """(the head body with each of its system texts replaced by `_hole(i)`, the texts in
    the order of i), for a head `head_text` renders (an Anthropic body without messages,
    an OpenAI Chat body with its leading system and developer messages alone), its what-if
    edits made: Anthropic's ``system`` when it is a non-empty string, or the ``text`` of
    each of its blocks that is a dict with a string ``text``; of an OpenAI Chat head, each
    system or developer message's ``content`` when it is a string, or the ``text`` of each
    of its parts that is a dict of type ``text`` with a string ``text``. Everything else
    stays (and is in the frame's key).

    Why the head's text is the frame's with each hole replaced by its text (`_filled`):
    the text is T(X), X the head's template input (`_template_input`: marking, which
    copies unmarked values as they are; the plan's ``sort-json-keys`` and ``no-hoist``,
    its text edits being made already; the conversion; `serving`), and T a template of
    `splice.HEADS`, which prints the content of each system or developer message of a
    head input once, as it is, and reads it nowhere else (`splice.HEADS`, the frame) -- so
    T(X) is F_0 + c_1 + F_1 + ... + c_k + F_k with F_j independent of the contents c_j.
    Each framed text reaches one content, whole, where the text itself would, and nothing
    else reads it:

    * the proxy view (`anthropic_proxy_view`): the head's one system message has the
      content parts ``tool_text`` of each tool, then ``system`` when a string, or the
      ``text`` of each dict block whose ``text`` is a string (any type); `serving` joins a
      message's text parts with "\\n" into its content (the bundled templates print
      ``message.content``: the "string" content format);
    * new-api's conversion (`claude_to_openai`): ``system`` as one system message when it
      is a string that is not empty (a framed one is not, and neither is its hole), or,
      when it is a non-empty list of dicts, the ``text`` of each block whose ``text`` is a
      string joined with ""; the tools alone made into functions;
    * the OpenAI Chat view as logged (`passthrough.chat_view`; ``hoist-system-messages``
      moves nothing in a head of leading system messages): each message kept as it is,
      `serving` taking a string content whole or the ``text`` of each ``text`` part,
      joined with "\\n".

    The whole render's checks stay: the roles (read off the frame's input: no text makes
    or drops a message) and the text's length (`_filled`: a render longer than
    `MAX_TEXT` fails, so such a head is rendered whole and fails as before). Lone
    surrogates become U+FFFD in the texts as in the frame (a character at a time).
    tests/test_head_frames.py holds `head_text` equal to the whole render of each head,
    heads rendered in any order, for each of these views and templates."""
    texts: list[str] = []

    def hole(text: str) -> str:
        texts.append(text)
        return _hole(len(texts) - 1)

    if endpoint == "anthropic-messages":
        system = head.get("system")
        if isinstance(system, str) and system:
            return {**head, "system": hole(system)}, tuple(texts)
        if isinstance(system, list):
            blocks = [{**b, "text": hole(b["text"])}
                      if isinstance(b, dict) and isinstance(b.get("text"), str) else b
                      for b in system]
            return {**head, "system": blocks}, tuple(texts)
        return head, ()
    messages = head.get("messages")
    if not isinstance(messages, list):
        return head, ()
    framed: list[Any] = []
    for message in messages:
        if isinstance(message, dict) and isinstance(message.get("role"), str) and \
                message["role"] in SYSTEM_ROLES:
            content = message.get("content")
            if isinstance(content, str):
                message = {**message, "content": hole(content)}
            elif isinstance(content, list):
                message = {**message, "content": [
                    {**p, "text": hole(p["text"])} if isinstance(p, dict) and
                    p.get("type") == "text" and isinstance(p.get("text"), str) else p
                    for p in content]}
        framed.append(message)
    return {**head, "messages": framed}, tuple(texts)


def _head_frame(endpoint: str, framed: dict[str, Any], profile: str, proxy: bool,
                plan: WhatIfPlan, tok: Tokenizer, holes: int
                ) -> tuple[tuple[str, ...], tuple[int, ...]] | str:
    """(the pieces of the framed head's text between its holes, the holes' numbers in
    the order they are printed), or `_UNFRAMED` where a hole is not found exactly once
    (a text that holds one: the head is rendered whole). `framed` has the plan's text
    edits made (`_framed_head`)."""
    converted, tools = _template_input(endpoint, framed, profile, proxy,
                                       dataclasses.replace(plan, edits=()), tok,
                                       Marker(enabled=False))
    text = _head_render(converted, tools, tok)
    found: list[tuple[int, int]] = []
    for i in range(holes):
        at = text.find(_hole(i))
        if at < 0 or text.find(_hole(i), at + 1) >= 0:
            return _UNFRAMED
        found.append((at, i))
    found.sort()
    pieces, start = [], 0
    for at, i in found:
        pieces.append(text[start:at])
        start = at + len(_hole(i))
    pieces.append(text[start:])
    return tuple(pieces), tuple(i for _, i in found)


def _filled(frame: tuple[tuple[str, ...], tuple[int, ...]] | str, texts: tuple[str, ...]
            ) -> str | None:
    """The frame's text with each hole replaced by its text (lone surrogates made U+FFFD);
    None where that text is longer than a render may write (`MAX_TEXT`)."""
    from prefixscope.tokenizers.jinja_env import MAX_TEXT  # (jinja2: not at import)

    assert not isinstance(frame, str)
    pieces, order = frame
    if not order:
        return pieces[0]
    out = [pieces[0]]
    for i, piece in zip(order, pieces[1:], strict=True):
        out.append(_without_surrogates(texts[i]))
        out.append(piece)
    text = "".join(out)
    return text if len(text) <= MAX_TEXT else None


def _without_surrogates(text: str) -> str:
    """`text` with each lone surrogate made U+FFFD: UTF-8 encodes every other character,
    so a text that encodes has none (an ASCII text is known so at once)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE_RE.sub("\ufffd", text)
    return text


def _head_render(converted: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                 tok: Tokenizer) -> str:
    """T(H) of a head's template input, unmarked; "" where a message of it is not a system
    or developer one (no text ends with G: no head)."""
    if not all(m.get("role") in SYSTEM_ROLES for m in converted):
        return ""
    return _SURROGATE_RE.sub("\ufffd", render_plain(tok.chat_template, converted, tools,
                                                     tok.template_vars))


@dataclass(frozen=True, slots=True)
class Turn:
    """What a rendered request leaves for the next request of its session: enough to render
    that one as this text plus its new messages' part (`splice`), and nothing of this
    request's own objects (the next render marks and converts its own body)."""

    key: tuple[str, str, bool]  # (renderer id, endpoint, proxy view): equal or no splice
    history: str  # the body's list that grows: "messages" or "input"
    rest: bytes  # JSON of the body without that list (key order kept)
    # JSON of that list in runs of its items' texts (`_array`: "[" + the runs joined by
    # commas + "]"; no run empty), a turn's own runs after its predecessor's very runs
    # where it extends that history (`_raw_parts`): compared and extended run by run
    items: tuple[bytes, ...]
    count: int  # its length
    table: tuple[tuple[str, ...], tuple[str, ...]]  # the marker's paths and kinds
    # JSON of the template input's messages (marks included), open, and of its tools; empty
    # where `messages` is kept (a view that maps each message on its own: the next turn's
    # input holds these very message objects, `_appended_input`, no JSON compared)
    conversation: bytes
    length: int  # how many template messages
    tools: bytes
    prompt: Prompt
    # The template input itself and the marker that registered its objects, where the
    # conversion maps each logged message on its own (`_appended_input`); else None.
    messages: list[dict[str, Any]] | None = None
    marker: Marker | None = None
    head: int = 0  # how many of `messages` come from the body without its history
    # Where the head's text ends in `prompt.text` (T(H)[:-|G|] of `splice.HEADS`), for a
    # template there and a view that maps messages; else None.
    head_end: int | None = None
    # The body's history list itself (its items JSON is `items`): a later body whose
    # history starts with these very objects extends it without dumping them again
    # (bodies are never written, `Store.iter_requests`' shared parts)
    logged: list[Any] | None = None
    kept: int = 0  # how many leading characters of `prompt.text` are the previous turn's
    # How many leading messages of an OpenAI Chat body belong to its head, not its history
    # (`_lead`): `items`, `count` and `logged` are of the messages after them.
    lead: int = 0
    # The template input's tools, where the conversion maps each message on its own and
    # keeps the tools (the OpenAI Chat view): a next body with the same rest reuses them.
    tool_input: list[dict[str, Any]] | None = None
    # The proxy view's text of each tool (marked, `_build_template_input`'s ``made``) and
    # the JSON of the body's tools they were made of: a next body with equal tools and
    # a new rest takes them (`_appended_input`).
    tool_texts: tuple[bytes, tuple[str, ...]] | None = None


def render_turn(request: Request, options: RenderOptions | None = None,
                previous: Turn | None = None, *, keep: bool = True
                ) -> tuple[Prompt, Turn | None]:
    """`render`, given the `Turn` its session's previous request left (None: none): when
    this request's body extends that one's (the same fields, its history a continuation of
    that history) and the template has a proven splice (`splice.SPLICES`), only the new
    messages go through the chat template. The `Prompt` is the one `render` gives, whatever
    `previous` is (tests/test_splice.py). With `keep`, also this request's `Turn` (None when
    its template has no splice rule or its render cannot seed one).

    Raises:
        RenderError, TokenizerError: as `render`.
    """
    options = options or RenderOptions()
    body = request.body
    if not isinstance(body, dict):
        raise RenderError(f"request {request.id or '?'} has no body: the log did not record "
                          "the prompt")
    endpoint = request.endpoint if request.endpoint in KNOWN_ENDPOINTS else _detect(body)
    choice = choose_tokenizer(options.tokenizer, request.model)
    tok = load_tokenizer(choice.spec)
    plan = parse_what_ifs(options.what_if)
    profile, source, notes_from_gateway = resolve_gateway(request, options, endpoint)
    proxy = endpoint == "anthropic-messages" and profile == "passthrough"
    approximate = proxy or choice.stand_in is not None
    notes = list(notes_from_gateway)
    if proxy:
        notes.append("hosted Anthropic model: Claude's tokenizer is not public; rendered in "
                     f"Anthropic's cache order with {tok.name} as a stand-in tokenizer")
    elif choice.stand_in is not None:
        notes.append(f"{choice.stand_in}: counted with {tok.name} as a stand-in "
                     "(approximate; pass --tokenizer for the model's own)")
    renderer = renderer_id(tok, profile, options.what_if)

    listed = _history(body, endpoint)
    mapped = _maps_messages(endpoint, proxy, profile)
    lead = _lead(body, endpoint, profile) if listed is not None else 0
    if previous is not None and listed == "input" and previous.logged is not None and \
            previous.history == "input" and not _starts_with(body["input"], previous.logged):
        # a new user turn: the API dropped earlier turns' reasoning from the history
        previous = _without_dropped(previous, body["input"]) or previous
    # the body's JSON in two parts (the rest, the history): scanned, and compared below
    parts = _raw_parts(body, listed, previous, lead) if listed is not None else None
    reserved, surrogates = _scan_body(body, parts, previous)
    rule = _splice_rule(tok) if not (reserved or surrogates) else None
    key = (renderer, endpoint, proxy)
    history = listed if rule is not None else None
    seed = previous if (rule is not None and previous is not None and history is not None
                        and previous.key == key) else None
    raw = parts if history is not None and (keep or seed) else None
    # `grown`: the previous turn, when this body's history continues its history (the
    # rest of the body, its system prompt say, may differ); `seed`: ... and the rest is equal.
    grown = seed if seed is not None and raw is not None and seed.lead == lead and \
        _grows(seed.items, seed.count, raw[1]) else None
    if seed is not None and (raw is None or not _extends(seed, raw)):
        seed = None
    # Path ids are numbered as marking meets them; seeded with the previous turn's table,
    # the paths of the shared history get the ids they had there, so equal template input
    # is equal marked text. A body that extends the previous one is marked in the same
    # order up to the end of that history, so the seeded table gives every path the id and
    # the kind it would get unseeded, and stale paths are never used: the Prompt is the same.
    appended = (_appended_input(grown, seed is not None, body, endpoint, profile, proxy, plan,
                                tok) if grown is not None else None)
    head = 0
    tool_texts: tuple[bytes, tuple[str, ...]] | None = None
    if appended is not None:
        marker, messages, tools, head, tool_texts = appended
    else:
        marker = _seeded(seed) if seed is not None else Marker(enabled=not reserved)
        made: list[str] | None = [] if keep and proxy and mapped else None
        messages, tools = _template_input(endpoint, body, profile, proxy, plan, tok, marker,
                                          made=made)
        logged_tools = _json(body.get("tools")) if made is not None else None
        if made is not None and logged_tools is not None:
            tool_texts = (logged_tools, tuple(made))
        if keep and rule is not None and mapped:
            head = len(_template_input(endpoint, _head_body(body, lead, listed or "messages"),
                                       profile, proxy, plan, tok, Marker(enabled=False))[0])
    conversation = tools_json = None
    if rule is not None and (keep or seed is not None) and not mapped:
        conversation, tools_json = _json(messages), _json(tools)
    spliced = None
    head_end = None
    kept = 0  # leading characters of the text known to be the previous turn's
    if seed is not None and rule is not None and (
            conversation is not None or (mapped and appended is not None)):
        # (mapped and appended: the input is the previous one's messages, these very
        # objects, then new ones; the tools are None in both)
        spliced = _splice(rule, seed, messages, conversation, tools_json, marker, tok)
        head_end = seed.head_end
        if spliced is not None:  # the previous text up to its generation prompt, kept
            kept = len(seed.prompt.text) - len(rule.generation)
    elif grown is not None and appended is not None:  # the head changed, the history grew
        moved = _splice_head(grown, messages, tools, head, marker, tok)
        if moved is not None:
            spliced, head_end = (moved[0], moved[1]), moved[2]
    if spliced is not None:
        text, segments, attribution = spliced[0], spliced[1], "exact"
    else:
        text, segments, attribution = _whole(tok, messages, tools, marker, reserved, notes,
                                             endpoint, body, profile, proxy, plan)
        if keep and rule is not None and attribution == "exact" and mapped and \
                not _hoists(profile, plan, body, lead, listed):
            head_end = _head_end(tok, messages[:head], tools, marker, text)
    if surrogates and _SURROGATE_RE.search(text):
        text = _SURROGATE_RE.sub("\ufffd", text)
        notes.append("lone UTF-16 surrogates in the log were replaced by U+FFFD")
    prompt = Prompt(
        text=text,
        segments=segments,
        renderer=renderer,
        gateway=profile,
        tokenizer=tok.name,
        approximate=approximate,
        gateway_source=source,
        attribution=attribution,
        notes=tuple(notes),
    )
    turn = None
    if keep and raw is not None and attribution == "exact" and history is not None and (
            mapped or (conversation is not None and tools_json is not None)):
        logged = body[history][lead:] if lead else body[history]
        turn = Turn(key, history, raw[0], raw[1], len(logged),
                    (tuple(marker.paths), tuple(marker.kinds)),
                    b"" if mapped or conversation is None else conversation[:-1],
                    len(messages), tools_json or b"", prompt,
                    messages if mapped else None, marker if mapped else None, head,
                    head_end if mapped else None, logged, kept, lead,
                    tools if mapped else None, tool_texts)
    return prompt, turn


def _maps_messages(endpoint: str, proxy: bool, profile: str) -> bool:
    """Does the conversion of this endpoint and view map each logged message on its own
    (so a body with messages appended has its template input extended)? The Anthropic
    proxy view, an Anthropic body through new-api's conversion (``anthropic-to-openai``),
    and an OpenAI Chat or Responses body as logged or with late system messages hoisted
    (``passthrough``, ``hoist-system-messages``): see `_appended_input` for when and why."""
    if endpoint == "anthropic-messages":
        return proxy or profile == "anthropic-to-openai"
    return endpoint in ("openai-chat", "openai-responses") and \
        profile in ("passthrough", "hoist-system-messages")


def _hoists(profile: str, plan: WhatIfPlan, body: dict[str, Any], lead: int,
            history: str | None) -> bool:
    """May the ``hoist-system-messages`` profile move a message of this body: is there a
    system or developer message in its history after its `lead` (`_lead`)? With none, the
    profile's conversion is the passthrough one (`hoist_system_messages` returns the
    messages as they are), so the body's head is the passthrough head."""
    if profile != "hoist-system-messages" or plan.no_hoist:
        return False
    listed = body.get(history) if history is not None else None
    return not isinstance(listed, list) or any(
        isinstance(m, dict) and m.get("role") in SYSTEM_ROLES for m in listed[lead:])


def _lead(body: dict[str, Any], endpoint: str, profile: str) -> int:
    """How many of an OpenAI Chat body's messages, as logged (passthrough, or hoisted), are
    its head: the system and developer messages it starts with (a gateway that converted
    an Anthropic request put its system prompt there, billing header and all). 0
    elsewhere: the Anthropic body's head is outside its messages."""
    if endpoint != "openai-chat" or profile not in ("passthrough", "hoist-system-messages"):
        return 0
    listed = body.get("messages")
    n = 0
    while isinstance(listed, list) and n < len(listed) and isinstance(listed[n], dict) and \
            isinstance(listed[n].get("role"), str) and listed[n]["role"] in SYSTEM_ROLES:
        n += 1
    return n


def _head_body(body: dict[str, Any], lead: int, history: str = "messages") -> dict[str, Any]:
    """The body without its history: its `history` list cut to the `lead` that are its
    head."""
    listed = body.get(history)
    return {**body, history: listed[:lead] if lead and isinstance(listed, list) else []}


_CALL_ITEMS = ("function_call", "custom_tool_call", "local_shell_call", "web_search_call")


def _skipped(items: list[Any], start: int) -> int:
    """How many items from `start` on make no message (reasoning, compaction, non-dicts):
    the first new item that makes one is at ``start + _skipped(...)``."""
    n = 0
    for item in items[start:]:
        if isinstance(item, dict) and (item.get("type") in _CALL_ITEMS or item.get("type") in (
                "function_call_output", "custom_tool_call_output") or
                (item.get("type") in (None, "message") and "role" in item)):
            break
        n += 1
    return n


def _ends_in_calls(items: list[Any]) -> bool:
    """Does the Chat view of these Responses input items end with an assistant message of
    grouped calls (`protocols.responses_to_chat`), which a call item after them joins?
    Its last item that makes a message decides: a call item makes or joins one."""
    for item in reversed(items):
        if not isinstance(item, dict):
            continue
        itype = item.get("type")
        if itype in _CALL_ITEMS:
            return True
        if itype in ("function_call_output", "custom_tool_call_output") or \
                (itype in (None, "message") and "role" in item):
            return False
    return False


def _seeded(seed: Turn, registry: Marker | None = None) -> Marker:
    """A marker numbering paths as the previous turn did, its registry of objects fresh or
    `registry`'s (shared, not copied)."""
    marker = Marker(enabled=True, paths=list(seed.table[0]), kinds=list(seed.table[1]),
                    _ids={p: i for i, p in enumerate(seed.table[0])})
    if registry is not None:
        marker._objects, marker._alive = registry._objects, registry._alive
        marker._origins, marker._leaves = registry._origins, registry._leaves
    return marker


_ITEM_PATH_RE = re.compile(r"input\[(\d+)\]")


def _makes_message(item: Any) -> bool:
    """Does this Responses input item make or join a message of the Chat view
    (`protocols.responses_to_chat`)? A call, a call's output, or a message with a role."""
    if not isinstance(item, dict):
        return False
    itype = item.get("type")
    return itype in _CALL_ITEMS or itype in ("function_call_output",
                                            "custom_tool_call_output") or \
        (itype in (None, "message") and "role" in item)


def _without_dropped(previous: Turn, listed: list[Any]) -> Turn | None:
    """The `Turn` the previous Responses body would have left with the items that make no
    message (`_makes_message`: reasoning, compaction, non-dicts) that this body's history
    `listed` leaves out removed from its history, when `listed` starts with the previous
    history's other items, these very objects, in order; None otherwise, or when nothing
    was left out. A Codex rollout's new user turn is such a body: the API drops the
    reasoning of earlier turns, so the history is no continuation (paths ``input[i]``
    move) and was rendered whole; from this `Turn` it is an appended one
    (`_appended_input`, `_splice`).

    Why the result is a `Turn` of the body A' = the previous body A with its history cut
    to the kept items K (listed[:|K|]), as `render_turn` of A' seeded alike would leave it:

    * text: the Chat view of A' is the view of A. `responses_to_chat` maps the
      instructions and then each item in order; an item that makes no message appends
      nothing and leaves the last message as it was, so a call after it joins the same
      grouped calls (the grouping reads the last message only). The what-if edits edit
      each system/developer item by itself (`whatif._edit_system`) and the instructions;
      an edited dropped item still makes no message. Marking copies each item by itself
      under its own path (`marking.mark_responses_item`: kinds follow from the item's
      type and role, never its index). A gateway profile that hoists system messages
      reads the Chat view only. So A' converts to the same template input as A,
      object for object, except that an object of kept item i stands for the path
      ``input[r(i)]`` (r(i) its place in K) where A's stood for ``input[i]``: the same
      marks with other path names, the same text (a template reads text, and a mark
      names an id, whose path the table gives).
    * the table: each path ``input[i]...`` of a kept item becomes ``input[r(i)]...``,
      with the kind it had (the kind marking gives the same object there, as above);
      every other ``input[j]...`` (a dropped item's, or one no kept item has) gets a name
      no marking makes (it starts with a NUL, a path starts with a body key's name), so a
      path that marking A' or a later body meets gets the id of the same object's path
      or a new one, never a stale one. r is injective on the kept items: the table's
      paths stay distinct. The registry (`Turn.marker`) is shared as it is: it maps
      objects to ids, and ids to paths is the table.
    * the segments: A's with each path renamed so (a dropped item owns no character --
      checked: a segment naming one gives None). Injective renaming keeps two
      neighbouring segments' paths unequal, so they join as one walk over A' joins them.
    * the JSON of the history: K's items dumped (`items`, `count`, `logged` = K); the
      rest is A's. Every string of K was in A's history, found clean by `_scan_body`.

    Then `render_turn` takes this body as A' with items appended, whose proof
    (`_appended_input`, `_splice`) gives the whole render of this body.
    tests/test_splice.py holds every turn of sessions that drop items equal to its
    whole render."""
    logged = previous.logged
    if logged is None or previous.history != "input" or previous.lead or \
            previous.messages is None or previous.marker is None:
        return None
    place: dict[int, int] = {}  # index in `logged` -> index in `listed`, for a kept item
    n = len(listed)
    for i, item in enumerate(logged):
        if len(place) < n and item is listed[len(place)]:
            place[i] = len(place)
        elif _makes_message(item):
            return None
    if len(place) == len(logged):
        return None
    paths, kinds = previous.table
    renamed: list[str] = []
    for path in paths:
        if path.startswith("input["):
            found = _ITEM_PATH_RE.match(path)
            if found is None:
                return None
            at = place.get(int(found.group(1)))
            renamed.append(f"input[{at}]{path[found.end():]}" if at is not None
                           else "\x00" + path)
        else:
            renamed.append(path)
    names = dict(zip(paths, renamed, strict=True))
    segments = []
    for segment in previous.prompt.segments:
        name = names.get(segment.path, segment.path)
        if name.startswith("\x00"):
            return None
        segments.append(segment if name == segment.path else
                        Segment(name, segment.kind, segment.char_start, segment.char_end))
    kept = listed[:len(place)]
    items = _json(kept)
    if items is None:
        return None
    return dataclasses.replace(
        previous, items=_runs(items), count=len(kept), logged=kept,
        table=(tuple(renamed), kinds),
        prompt=dataclasses.replace(previous.prompt, segments=tuple(segments)))


def _appended_input(grown: Turn, same_rest: bool, body: dict[str, Any], endpoint: str,
                    profile: str, proxy: bool, plan: WhatIfPlan, tok: Tokenizer
                    ) -> tuple[Marker, list[dict[str, Any]], list[dict[str, Any]] | None,
                               int, tuple[bytes, tuple[str, ...]] | None] | None:
    """(marker, template messages, tools, how many of them the head is, the proxy view's
    tool texts for the `Turn`) of a body whose
    history continues `grown`'s (`_continues`, checked by the caller), converting only its
    new messages, and, unless `same_rest`, the body without its history; None where the
    conversion is not a map of messages.

    Why it equals `_template_input` of the whole body, for the Anthropic proxy view:
    `_mark_anthropic` marks ``system``, ``tools``, then each message by itself under
    ``messages[i]``; the what-if edits touch ``system`` and the tools only
    (`whatif._edit_system` on this endpoint, `_with_sorted_schema`);
    `anthropic_proxy_view` is a head built from the tools and the system alone (the
    whole view of the body with no messages) followed by `proxy_message` of each message
    in turn; `serving.conversation` maps each message on its own (`_message`,
    `_parse_arguments`, `_alias_reasoning`). So the whole body's template input is its
    head, the previous one's messages after the previous head, then those of the new
    messages. Path ids: marking meets the rest's paths, then the messages' in order; the
    previous table holds every path of the shared history, so a path new here gets an id
    no other path has, in the same order as a whole walk seeded alike. An id names a path
    and the kind its first use gave it (a kind here follows from the path and the block
    type: equal for the shared history), and the `Prompt` names paths, never ids. Objects:
    the previous turn's template input was registered in its marker, whose registry is
    shared here (it keeps its objects alive, so no id of a dead object is reused), so the
    chat template finds them as the whole walk finds its own.

    A new rest whose tools' JSON is that of the tools the previous turn's texts were made
    of (`Turn.tool_texts`: a billing hash changed, the tools not) takes those texts and
    marks the rest without its tools (`_build_template_input`'s ``texts``): the view
    reads the tools through ``tool_text`` alone, and a tool's text is `jsontext.dumps` of
    its marked copy (sorted by ``sort-json-keys``, a what-if the renderer id holds), a
    function of the tool as logged and of the ids its paths have. Equal JSON is equal
    tools (order kept), their paths the same; the texts were made under a marker whose
    table this one's starts with (the table is carried turn to turn and only grows), so
    each path has the id it had there, and none of them is new here: leaving them out of
    the marking gives no later path another id. Their copies are registered nowhere the
    view reads (it reads their texts).

    The OpenAI Chat view of a body as logged (passthrough), its head the tools and its
    `lead` leading system/developer messages (`_lead`), its history the messages after
    them: `_mark_openai` marks ``tools``, then each message by itself under
    ``messages[i]`` (`mark_openai_message`); the what-if edits are made message by message
    (`whatif._edit_system`: a system/developer message's content, whatever its place) and
    sort the tools' schemas; `passthrough.chat_view` keeps each dict message as it is, in
    order; `serving.conversation` maps each message on its own and `serving.tool_dicts`
    reads the tools alone. So the whole body's template input is the head's (the body with
    its messages cut to the lead: the same marking, edits and conversion), the previous
    one's messages after its head, then the new messages marked, edited and converted one
    by one; the tools are the head's (reused with an equal rest, whose JSON holds the
    tools and the lead). Paths and objects as above.

    An Anthropic body through new-api's conversion (``anthropic-to-openai``,
    `claude_to_openai`): marking and the what-if edits as for the proxy view (``system``
    and the tools only); the conversion is a head made of the system and the tools alone
    (the conversion of the body without messages) followed by `claude_message` of each
    message in turn, which reads the body beyond its message in one place only: a
    nameless ``tool_result`` is named by the first block anywhere in the messages whose
    id is its ``tool_use_id``. Given the whole body as logged, the new messages' lookups
    are the whole walk's (it reads block ids, which marking keeps as logged, and names
    unmarked; a body holding the marks' characters is never spliced, `_scan_body`); the
    history's lookups are unchanged when no new block has the id one of them looks up
    (`_names_kept`, else None): the first block with an id the history holds is in the
    history, and the new blocks come after it. Then `serving.conversation` as above.

    ``hoist-system-messages`` (`hoist_system_messages` after the passthrough view, A the
    previous chat view, N the new messages' view): with no system or developer message
    in N (else None), the leading system messages of A + N are A's (N has none to add
    unless A is all system messages, and then N's first is not one), its late ones A's,
    and the rest A's rest followed by N; so the hoisted view is A's hoisted view followed
    by N, unchanged objects, and with an equal rest the head is the previous one's. With
    a new rest (a new head), the conversion is the passthrough one on both bodies when
    no system or developer message follows the lead (`_hoists`: nothing is hoisted, the
    messages come back as they are), and the passthrough proof holds; else None. The
    no-hoist what-if is the passthrough view. tests/test_splice.py holds every turn
    equal to its whole render, for each of these views."""
    if not _maps_messages(endpoint, proxy, profile) or grown.messages is None or \
            grown.marker is None:
        return None
    logged = body[grown.history]
    start = grown.lead + grown.count
    responses = endpoint == "openai-responses"
    hoist = profile == "hoist-system-messages" and not plan.no_hoist
    if hoist and not same_rest and _hoists(profile, plan, body, grown.lead, grown.history):
        return None  # a new head, and a history whose system messages the head holds
    if profile == "anthropic-to-openai" and not _names_kept(logged, start):
        return None
    if responses and grown.logged is not None and _ends_in_calls(grown.logged) and \
            any(isinstance(i, dict) and i.get("type") in _CALL_ITEMS for i in
                logged[start:start + 1 + _skipped(logged, start)]):
        return None  # the new calls join the previous last message: convert whole
    marker = _seeded(grown, grown.marker)
    tools: list[dict[str, Any]] | None = None
    tool_texts = grown.tool_texts if proxy else None
    if same_rest:  # (an equal rest: equal tools, their texts kept)
        head, tools = grown.messages[:grown.head], grown.tool_input
    else:  # the rest first, as the whole walk marks it
        logged_tools = _json(body.get("tools")) if proxy else None
        kept = tool_texts[1] if tool_texts is not None and logged_tools is not None and \
            tool_texts[0] == logged_tools else None
        made: list[str] | None = [] if proxy and kept is None else None
        head, tools = _template_input(endpoint, _head_body(body, grown.lead, grown.history),
                                      profile, proxy, plan, tok, marker, kept, made)
        tool_texts = None if logged_tools is None else (logged_tools, kept or tuple(made or ()))
    with marks_active(True):
        view: list[dict[str, Any]] = []
        if proxy:
            for i, m in enumerate(logged[start:], start=start):
                message = mark_anthropic_message(m, f"messages[{i}]", marker)
                if isinstance(message, dict):
                    view.extend(proxy_message(message, marker))
        elif endpoint == "anthropic-messages":  # new-api's conversion
            for i, m in enumerate(logged[start:], start=start):
                message = mark_anthropic_message(m, f"messages[{i}]", marker)
                if isinstance(message, dict):
                    view.extend(claude_message(message, body, marker))
        elif responses:
            items = {"input": [mark_responses_item(m, f"input[{i}]", marker)
                               for i, m in enumerate(logged[start:], start=start)]}
            view = responses_to_chat(apply_text_edits(endpoint, items, plan, marker),
                                     marker)[0]
        else:
            marked = {"messages": [mark_openai_message(m, f"messages[{i}]", marker)
                                   for i, m in enumerate(logged[start:], start=start)]}
            edited = apply_text_edits(endpoint, marked, plan, marker)["messages"]
            view = [m for m in edited if isinstance(m, dict)]
        if hoist and any(m.get("role") in SYSTEM_ROLES for m in view):
            return None  # a late system message: hoisted into the head
        new = serving.conversation(view, marker, serving.content_format(tok.chat_template))
    return marker, [*head, *grown.messages[grown.head:], *new], tools, len(head), tool_texts


def _names_kept(logged: list[Any], start: int) -> bool:
    """Does new-api's conversion of the history ``logged[:start]`` stay what it was when
    the messages after `start` follow it? It reads the body beyond a message in one place:
    a ``tool_result`` block without a name takes the name of the first block anywhere in
    the messages whose ``id`` is its ``tool_use_id`` (`_tool_name_for`), so a new block
    with that id could name a history's tool result that no history block named. True
    when no new block's id is the ``tool_use_id`` of a nameless tool result of the
    history (a sufficient condition; an id that cannot be hashed: False)."""
    ids: set[Any] = set()
    for message in logged[start:]:
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict) and "id" in block:
                try:
                    ids.add(block["id"])
                except TypeError:
                    return False
    if not ids:
        return True
    for message in logged[:start]:
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict) and block.get("type") == "tool_result" and not (
                    isinstance(block.get("name"), str) and block["name"]):
                try:
                    if (block.get("tool_use_id") or "") in ids:
                        return False
                except TypeError:
                    continue  # an unhashable id equals no hashable one
    return True


def _whole(tok: Tokenizer, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
           marker: Marker, reserved: bool, notes: list[str], endpoint: str,
           body: dict[str, Any], profile: str, proxy: bool, plan: WhatIfPlan
           ) -> tuple[str, tuple[Segment, ...], str]:
    """(text, segments, attribution) of the template run over the whole conversation."""
    with marks_active(marker.enabled):
        rendered = render_marked(tok.chat_template, messages, tools, marker, tok.template_vars)
    if reserved:  # the text's own private-use characters are not marks: keep them
        stripped = Stripped(rendered, ((0, len(rendered), TEMPLATE),) if rendered else (), True)
    else:
        stripped = strip_marks(rendered)
    text, runs = stripped.text, stripped.runs
    attribution = "exact" if stripped.balanced else "partial"
    if reserved:
        attribution = "none"
        notes.append("the logged text uses private-use characters U+10E000-U+10F0FF, which "
                     "prefixscope's segment marks are made of: no segment map")
    elif not stripped.balanced:
        notes.append("the chat template split some message text; part of it is attributed "
                     "to the template")
    if not tok.bundled:
        plain_marker = Marker(enabled=False)
        plain_messages, plain_tools = _template_input(endpoint, body, profile, proxy,
                                                      plan, tok, plain_marker)
        plain = render_plain(tok.chat_template, plain_messages, plain_tools, tok.template_vars)
        if plain != text:
            runs = align_runs(text, runs, plain)
            text = plain
            attribution = "aligned"
            notes.append("the chat template changed marked text (it inspects or trims "
                         "message text): segments were aligned to the plain render")
    return text, _segments(runs, marker), attribution


def _splice_rule(tok: Tokenizer) -> SpliceRule | None:
    """The splice rule of a bundled template, when `tok` renders with that very source."""
    rule = SPLICES.get(tok.name)
    if rule is None or not tok.bundled or tok.chat_template != _bundled_source(tok.name):
        return None
    return rule


@cache
def _bundled_source(name: str) -> str:
    from prefixscope.tokenizers.files import bundled_template

    return bundled_template(name)


def _history(body: dict[str, Any], endpoint: str) -> str | None:
    """The list a session's next body appends to ("input" for the Responses API)."""
    name = "input" if endpoint == "openai-responses" else "messages"
    return name if isinstance(body.get(name), list) else None


def _json(value: Any) -> bytes | None:
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        return None


def _raw_parts(body: dict[str, Any], history: str, previous: Turn | None = None,
               lead: int = 0) -> tuple[bytes, tuple[bytes, ...]] | None:
    """(JSON of the body without `history`, JSON of `history` in runs: `Turn.items`): key
    order kept, so equal bytes are equal input to marking. `previous`: a turn whose
    history's items, these very objects, start this one's: their runs are its runs, these
    very bytes, and the new items' text is one more run (a JSON array is its items' texts
    joined by commas), the history's JSON not copied. `lead`: the history's first
    `lead` items belong to the head (`_lead`): their JSON follows the rest's (a JSON
    object's text is self-delimiting, so equal bytes are an equal rest and equal items),
    and the history is the items after them."""
    rest = _json({k: v for k, v in body.items() if k != history})
    listed = body[history]
    if lead:
        head = _json(listed[:lead])
        rest = None if rest is None or head is None else rest + head
        listed = listed[lead:]
    logged = previous.logged if previous is not None and previous.history == history \
        and previous.lead == lead else None
    if logged is not None and _starts_with(listed, logged):
        assert previous is not None
        new = _json(listed[len(logged):])
        items = None if new is None else previous.items + _runs(new)
    else:
        whole = _json(listed)
        items = None if whole is None else _runs(whole)
    return None if rest is None or items is None else (rest, items)


def _runs(array: bytes) -> tuple[bytes, ...]:
    """A JSON array's text as `Turn.items`' runs: its items' texts, one run (none: empty)."""
    return (array[1:-1],) if len(array) > 2 else ()


def _array(runs: tuple[bytes, ...]) -> bytes:
    """The JSON array whose items' texts are `runs`' (`Turn.items`)."""
    return b"".join((b"[", b",".join(runs), b"]"))


def _starts_with(listed: list[Any], known: list[Any]) -> bool:
    """Are `listed`'s first items `known`'s, these very objects (bodies are never written,
    so their JSON is the same)?"""
    return len(listed) >= len(known) and all(map(operator.is_, listed[:len(known)], known))


def _continues(before: bytes | memoryview, count: int, now: bytes) -> bool:
    """Is the JSON array `now` the array of `count` items whose text without its closing
    bracket is `before`, with items appended (or none)?

    A JSON value's text is self-delimiting, so `now` starts with those items followed by a
    comma or the closing bracket exactly when its first `count` items are them, byte for
    byte."""
    if not now.startswith(before) or len(now) == len(before):
        return False
    follow = now[len(before)]
    return follow == 0x5D or (follow == 0x2C and count > 0) or count == 0  # "]" or ","


def _open(items: bytes) -> memoryview:
    """A JSON array's text without its closing bracket, not copied (what `_continues`
    compares: `bytes.startswith` takes it)."""
    return memoryview(items)[:-1]


def _extends(previous: Turn, raw: tuple[bytes, tuple[bytes, ...]]) -> bool:
    """Is this body the previous one with items appended to its history?"""
    return raw[0] == previous.rest and _grows(previous.items, previous.count, raw[1])


def _grows(before: tuple[bytes, ...], count: int, now: tuple[bytes, ...]) -> bool:
    """`_continues` of two histories' JSON in runs (`Turn.items`): `before` of `count`
    items. Where `now`'s runs start with `before`'s (the same bytes: where `_raw_parts`
    extended them, the very objects, compared by identity first) it is so without reading
    them: ``[`` + those runs, then ``]`` or ``,`` (a run is one or more items, so `before`
    has items when it has runs), as `_continues` reads it. Else the texts are compared."""
    if now[:len(before)] == before:
        return True
    return _continues(_open(_array(before)), count, _array(now))


def _splice(rule: SpliceRule, previous: Turn, messages: list[dict[str, Any]],
            conversation: bytes | None, tools_json: bytes | None, marker: Marker,
            tok: Tokenizer
            ) -> tuple[str, tuple[Segment, ...]] | None:
    """(text, segments) of the previous text with the new messages' part (module
    `splice`), or None when the template input does not extend the previous one's or a
    check fails (then the request is rendered whole). `conversation` None: the caller
    knows the input extends the previous one's (`_appended_input`: its very objects)."""
    n = previous.length
    if len(messages) < n or conversation is not None and (
            tools_json != previous.tools or
            not _continues(previous.conversation, n, conversation)):
        return None
    ctx = rule.context(messages, n)
    if ctx is None:
        return None
    base = [messages[i] for i in ctx]
    gen = rule.generation
    # R_A and R_B are rendered without the tools: a bundled template reads them in its
    # head only (`splice`, "The tools"), which the two renders share, so the cut falls
    # after the same head and the tail is the same; their schemas' JSON was most of a
    # splice's rendering (the OpenAI Chat captures: 0.74 s of tojson at 1 GiB).
    with marks_active(True):
        before = render_marked(tok.chat_template, base, None, marker, tok.template_vars) \
            if base else _empty_render(tok)
        after = render_marked(tok.chat_template, base + messages[n:], None, marker,
                              tok.template_vars)
    old = previous.prompt.text
    cut = len(before) - len(gen)
    if not (before.endswith(gen) and old.endswith(gen) and after.startswith(before[:cut])):
        return None
    if base and not strip_marks(before).balanced:  # a mark open at the cut
        return None
    tail = strip_marks(after[cut:])
    if not tail.balanced:
        return None
    at = len(old) - len(gen)
    # old is old[:at] + G: a tail that starts with G (a new assistant message's, in
    # deepseek-v4's) joins old whole, one copy of the prompt instead of a cut and a join
    text = old + tail.text[len(gen):] if tail.text.startswith(gen) else old[:at] + tail.text
    return text, _segments(tail.runs, marker, previous.prompt.segments, at)


def _empty_render(tok: Tokenizer) -> str:
    """`tok`'s template rendered with no message and no tools (`_splice`'s R_A where the
    rule reads no message of A: deepseek-v4's; `_splice_head`'s empty head), rendered
    once a tokenizer. It holds no
    mark: marks are written only around the messages' and tools' values, and there are
    none; so it reads nothing but the template's source and variables, which are the
    tokenizer's (a render that fails is not kept: it fails each time, as before)."""
    text = _EMPTY_RENDERS.get(tok)
    if text is None:
        text = _EMPTY_RENDERS[tok] = render_marked(tok.chat_template, [], None,
                                                   Marker(enabled=True), tok.template_vars)
    return text


_EMPTY_RENDERS: dict[Tokenizer, str] = {}  # `_empty_render`'s, by tokenizer (a few a run)


def _head_end(tok: Tokenizer, head: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
              marker: Marker, text: str) -> int | None:
    """Where the text of the head's template input `head` ends in the prompt `text`:
    |T(H)| - |G| for a template of `splice.HEADS` whose render of H starts `text` so;
    else None."""
    rule = HEADS.get(tok.name)
    if rule is None:
        return None
    generation = rule.generation
    with marks_active(True):
        top = strip_marks(render_marked(tok.chat_template, head, tools, marker,
                                        tok.template_vars))
    end = len(top.text) - len(generation)
    if not (top.balanced and top.text.endswith(generation) and
            text.startswith(top.text[:end])):
        return None
    return end


def _splice_head(previous: Turn, messages: list[dict[str, Any]],
                 tools: list[dict[str, Any]] | None, head: int, marker: Marker,
                 tok: Tokenizer) -> tuple[str, tuple[Segment, ...], int] | None:
    """(text, segments, head end) of a turn whose template input is a new head (`head`
    messages: the body without its history changed, a system prompt with a new billing
    hash) followed by the previous turn's messages after its head and new messages; None
    when the template has no `splice.HEADS` entry or a check fails.

    By `HEADS`, with H, H' the two heads, M the previous messages and N the new ones, none
    a system or developer message, and the template's render cut (`HeadRule.cuts`) at |H|
    in H + M, at |H'| and |H'| + |M| in H' + M + N and at |H'| in H' + N (checked here):
    the previous text is T(H)[:-|G|] + Q(M) + G and this one T(H')[:-|G|] + Q(M) + Q(N)
    + G, where T(H' + N) = T(H')[:-|G|] + Q(N) + G. So it is
    the new head's render, the previous text between its head's end (`Turn.head_end`) and
    G, then Q(N) + G. Q(N) is N's alone, whatever the head (its messages and tools): by
    `HEADS` again with the empty head (no message, no tools; the cut at 0, checked), T(N)
    = T([])[:-|G|] + Q(N) + G, so Q(N) + G is T(N) past |T([])| - |G| (T([]): `_empty_render`,
    which holds no mark, as the marked T(N) is the render of N's marked objects with the
    same marker): two renders, the new head with its tools and the new messages without,
    none of the history, and the head with the tools once (their schemas' JSON, in the
    OpenAI Chat view, was most of a head render). Segments: those of the two renders, and
    the previous turn's between, moved by the change of the head's length, joined where
    they meet as one walk over the whole text joins them."""
    rule = HEADS.get(tok.name)
    end = previous.head_end
    if rule is None or end is None or previous.messages is None or \
            previous.head > len(previous.messages):
        return None
    generation = rule.generation
    kept = len(previous.messages) - previous.head  # M
    if len(messages) < head + kept or not heads_split(tok.name, messages, head) or \
            not rule.cuts(messages, head + kept) or \
            not heads_split(tok.name, previous.messages, previous.head):
        return None
    base, new = messages[:head], messages[head + kept:]
    if not (rule.cuts([*base, *new], head) and rule.cuts(new, 0)):
        return None
    with marks_active(True):
        before = render_marked(tok.chat_template, base, tools, marker, tok.template_vars)
        after = render_marked(tok.chat_template, new, None, marker, tok.template_vars)
    empty = _empty_render(tok)
    old = previous.prompt.text
    cut, start = len(before) - len(generation), len(empty) - len(generation)
    if not (before.endswith(generation) and old.endswith(generation) and
            empty.endswith(generation) and after.startswith(empty[:start])
            and end <= len(old) - len(generation)):
        return None
    top, tail = strip_marks(before[:cut]), strip_marks(after[start:])
    if not (top.balanced and tail.balanced):
        return None
    stop = len(old) - len(generation)
    shift = len(top.text) - end
    segments = _joined_segments(top, marker, previous.prompt.segments, end, stop, shift, tail)
    return "".join((top.text, old[end:stop], tail.text)), segments, len(top.text)


def _joined_segments(top: Stripped, marker: Marker, old: tuple[Segment, ...], lo: int,
                     hi: int, shift: int, tail: Stripped) -> tuple[Segment, ...]:
    """The segments of ``top.text + old_text[lo:hi] + tail.text``: `top`'s runs, `old`'s
    segments cut to [lo, hi) and moved by `shift` (= len(top.text) - lo), then `tail`'s
    runs, spans of one path that meet joined as `_segments` joins runs (`_add_span`).
    `old` partitions its text, so two of its neighbours never share a path: only the two
    joins can merge."""
    first: list[list[Any]] = []
    _add_runs(first, top.runs, marker, 0)
    inner: tuple[Segment, ...] = ()
    last = first
    if lo < hi:
        i = bisect_right(old, lo, key=_char_start) - 1
        j = bisect_right(old, hi - 1, key=_char_start) - 1
        a, b = old[i], old[j]
        _add_span(first, a.path, a.kind, lo + shift, min(a.char_end, hi) + shift)
        if j > i:
            inner = old[i + 1: j]
            if shift:
                inner = tuple([Segment(s.path, s.kind, s.char_start + shift, s.char_end + shift)
                               for s in inner])
            last = [[b.path, b.kind, b.char_start + shift, hi + shift]]
    _add_runs(last, tail.runs, marker, hi + shift)
    made = tuple([Segment(*span) for span in first])
    if last is first:
        return made
    return made + inner + tuple([Segment(*span) for span in last])


def _char_start(segment: Segment) -> int:
    return segment.char_start


def _scan_body(body: dict[str, Any], parts: tuple[bytes, tuple[bytes, ...]] | None = None,
               clean: Turn | None = None) -> tuple[bool, bool]:
    """(uses the marks' private-use range, holds lone surrogates) -- fast path via orjson.

    `parts`: the body's JSON as `_raw_parts` cut it, scanned instead of dumping it again:
    every string of the body (its keys too) is whole in the rest or in one run of the
    history's (a run is whole items), and what is looked for lies inside one string.
    `clean`: a turn of a body scanned clean (a `Turn` is made of such bodies only): its
    rest, and the runs of its history that start this one's, are not scanned again, so a
    session's history is scanned once, not once per turn."""
    if parts is not None:
        rest, items = parts
        if clean is not None and rest == clean.rest:
            rest = b""
        if clean is not None and items[:len(clean.items)] == clean.items:
            items = items[len(clean.items):]
        return _reserved_in(rest) or any(map(_reserved_in, items)), False
    try:
        raw = orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        import json

        text = json.dumps(body, ensure_ascii=False, default=str)
        return has_reserved_chars(text), True
    return _reserved_in(raw), False


def _reserved_in(raw: bytes) -> bool:
    """Does this orjson text hold a character of the marks' private-use range, or spell one
    as a surrogate escape?"""
    # U+10E000..U+10F0FF are F4 8E/8F .. in UTF-8: cheap byte tests before the exact one
    # (a lone F4 byte is rare and found with memchr, so most bodies stop at the first).
    maybe = b"\xf4" in raw and (b"\xf4\x8e" in raw or b"\xf4\x8f" in raw)
    # Text the serving engine JSON-parses (tool-call arguments) may spell a reserved
    # character as a \uDBF8..\uDBFC surrogate escape: count it as reserved.
    return (maybe and has_reserved_chars(raw.decode("utf-8", "replace"))) or \
        _RESERVED_ESCAPE_RE.search(raw) is not None


def renderer_id(tok: Tokenizer, profile: str, what_if: tuple[str, ...]) -> str:
    """Identity of a rendering pipeline: equal ids render equal bodies to equal text."""
    template = xxhash.xxh3_64_hexdigest(tok.chat_template.encode("utf-8"))
    return f"{RENDER_VERSION}:{tok.identity}:{template}:{profile}:{','.join(what_if)}"


def _detect(body: dict[str, Any]) -> str:
    from prefixscope.model.keys import detect_endpoint

    found = detect_endpoint(body)
    return found if found in KNOWN_ENDPOINTS else "openai-chat"


def _template_input(endpoint: str, body: dict[str, Any], profile: str, approximate: bool,
                    plan: WhatIfPlan, tok: Tokenizer, marker: Marker,
                    texts: tuple[str, ...] | None = None, made: list[str] | None = None
                    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    with marks_active(marker.enabled):
        return _build_template_input(endpoint, body, profile, approximate, plan, tok, marker,
                                     texts, made)


def _build_template_input(endpoint: str, body: dict[str, Any], profile: str, approximate: bool,
                          plan: WhatIfPlan, tok: Tokenizer, marker: Marker,
                          texts: tuple[str, ...] | None = None, made: list[str] | None = None
                          ) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The template input (messages, tools) of `body`. The proxy view (`approximate`)
    only: `made` gets the text of each tool, in order; `texts` are those of tools equal to
    the body's, made with a marker whose table this one's starts with, the body's tools
    then not marked again (`_appended_input`, the proof there)."""
    if approximate and texts is not None:
        body = {k: v for k, v in body.items() if k != "tools"}
    marked = apply_text_edits(endpoint, mark_body(endpoint, body, marker), plan, marker)
    if approximate and texts is not None:
        marked["tools"] = list(range(len(texts)))  # (the view reads them through tool_text)
        messages, tools = anthropic_proxy_view(marked, marker, texts.__getitem__)
    elif approximate:
        if plan.sort_json_keys:
            marked["tools"] = [_with_sorted_schema(t, marker) for t in marked.get("tools") or []]

        def tool_text(tool: Any) -> str:
            text = dumps(tool, marker)
            if made is not None:
                made.append(text)
            return text
        messages, tools = anthropic_proxy_view(marked, marker, tool_text)
    else:
        messages, tools = to_upstream(endpoint, marked, profile, marker, hoist=not plan.no_hoist)
    conversation = serving.conversation(messages, marker, serving.content_format(tok.chat_template))
    dumped = serving.tool_dicts(tools, marker)
    if plan.sort_json_keys and dumped:
        for tool in dumped:
            fn = tool.get("function")
            if isinstance(fn, dict) and isinstance(fn.get("parameters"), dict):
                fn["parameters"] = sorted_schema(fn["parameters"], marker)
    return conversation, dumped


def _with_sorted_schema(tool: Any, marker: Marker) -> Any:
    if not isinstance(tool, dict) or not isinstance(tool.get("input_schema"), dict):
        return tool
    return marker.register_like({**tool, "input_schema": sorted_schema(tool["input_schema"],
                                                                        marker)}, tool)


def _segments(runs: tuple[tuple[int, int, int], ...], marker: Marker,
              before: tuple[Segment, ...] = (), at: int = 0) -> tuple[Segment, ...]:
    """Segments of `runs` (offsets after `at`), following `before` cut at `at` (whose
    segments up to the one holding `at` are kept as they are)."""
    kept: tuple[Segment, ...] = ()
    spans: list[list[Any]] = []  # [path, kind, start, end], merged before any Segment is built
    if before:
        cut = bisect_left(before, at, key=_char_start)  # segments starting before `at`
        if cut:
            kept, last = before[:cut - 1], before[cut - 1]
            spans.append([last.path, last.kind, last.char_start, min(last.char_end, at)])
    _add_runs(spans, runs, marker, at)
    return kept + tuple([Segment(path, kind, start, end) for path, kind, start, end in spans])


def _add_span(spans: list[list[Any]], path: str, kind: str, start: int, end: int) -> None:
    """Append [path, kind, start, end] to `spans`, joined to the last span where it is the
    same path and they meet (the joined span takes the later kind); nothing when empty."""
    if start == end:
        return
    if spans and spans[-1][0] == path and spans[-1][3] == start:
        spans[-1][1], spans[-1][3] = kind, end
    else:
        spans.append([path, kind, start, end])


def _add_runs(spans: list[list[Any]], runs: tuple[tuple[int, int, int], ...], marker: Marker,
              at: int) -> None:
    """`_add_span` of each of a stripped render's runs, moved by `at`."""
    paths, kinds = marker.paths, marker.kinds
    for start, end, owner in runs:
        if owner == TEMPLATE:
            _add_span(spans, TEMPLATE_PATH, "template", start + at, end + at)
        else:
            _add_span(spans, paths[owner], kinds[owner], start + at, end + at)


def align_runs(src: str, runs: tuple[tuple[int, int, int], ...], dst: str
               ) -> tuple[tuple[int, int, int], ...]:
    """Carry character ownership from `src` over to a slightly different text `dst`.

    Lines are matched first (difflib), then characters inside changed line blocks;
    unmatched characters of `dst` belong to the template.
    """
    import numpy as np  # (not at import: `prefixscope --help` imports this module)

    owner = np.full(len(src), TEMPLATE, dtype=np.int64)
    for start, end, pid in runs:
        owner[start:end] = pid
    out = np.full(len(dst), TEMPLATE, dtype=np.int64)
    src_lines, dst_lines = src.splitlines(keepends=True), dst.splitlines(keepends=True)
    src_off = np.concatenate([[0], np.cumsum([len(x) for x in src_lines])]).astype(int)
    dst_off = np.concatenate([[0], np.cumsum([len(x) for x in dst_lines])]).astype(int)
    lines = difflib.SequenceMatcher(None, src_lines, dst_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in lines.get_opcodes():
        a0, a1, b0, b1 = src_off[i1], src_off[i2], dst_off[j1], dst_off[j2]
        if tag == "equal":
            out[b0:b1] = owner[a0:a1]
        elif tag == "replace":
            if (a1 - a0) * (b1 - b0) <= 4_000_000:
                chars = difflib.SequenceMatcher(None, src[a0:a1], dst[b0:b1], autojunk=False)
                for ctag, c1, c2, d1, d2 in chars.get_opcodes():
                    if ctag == "equal":
                        out[b0 + d1:b0 + d2] = owner[a0 + c1:a0 + c2]
                    elif ctag == "replace" and c2 > c1:
                        out[b0 + d1:b0 + d2] = owner[a0 + c1]
            elif a1 > a0:
                scale = (a1 - a0) / max(1, b1 - b0)
                idx = a0 + (np.arange(b1 - b0) * scale).astype(int)
                out[b0:b1] = owner[np.minimum(idx, a1 - 1)]
    result: list[tuple[int, int, int]] = []
    if len(dst):
        change = np.flatnonzero(np.diff(out)) + 1
        bounds = np.concatenate([[0], change, [len(dst)]])
        result = [(int(bounds[i]), int(bounds[i + 1]), int(out[bounds[i]]))
                  for i in range(len(bounds) - 1)]
    return tuple(result)


class BillingScan:
    """Whether a body holds the billing header's prefix, or a character of the marks'
    range, in any of its strings (`what_if_changes`), for a session's bodies in order: a
    body whose history starts with its predecessor's very items (a store's shared parts;
    bodies are never written) has them found clean already, and only the rest of the body
    and its new items are dumped and searched. Every string lies whole in one part."""

    def __init__(self) -> None:
        self._clean: dict[str, list[Any]] = {}  # request id -> its history, found clean

    def holds(self, request: Request, previous: str | None = None) -> bool | None:
        """Does `request`'s body hold either anywhere? None: it cannot be dumped (lone
        surrogates). `previous`: its session predecessor, scanned here before."""
        body = request.body
        if not isinstance(body, dict):
            return None
        endpoint = request.endpoint if request.endpoint in KNOWN_ENDPOINTS else _detect(body)
        history = _history(body, endpoint)
        known = self._clean.get(previous) if previous is not None else None
        listed = None if history is None else body[history]
        items: bytes | None = b""
        if listed is None:
            rest = _json(body)
        else:
            start = len(known) if known is not None and _starts_with(listed, known) else 0
            rest = _json({k: v for k, v in body.items() if k != history})
            items = _json(listed[start:])
        if rest is None or items is None:
            return None
        in_items = _holds_header(items)
        if listed is not None and not in_items:
            self._clean[request.id] = listed
        return in_items or _holds_header(rest)

    def forget(self, request_id: str) -> None:
        """No later body starts with this one's history."""
        self._clean.pop(request_id, None)


def _holds_header(raw: bytes) -> bool:
    return BILLING_PREFIX.encode() in raw or b"\xf4" in raw \
        or _RESERVED_ESCAPE_RE.search(raw) is not None


def what_if_changes(request: Request, options: RenderOptions, transforms: tuple[str, ...],
                    scan: BillingScan | None = None, previous: str | None = None) -> bool:
    """May rendering `request` with `options.what_if` plus `transforms` give another prompt
    (text, segments, tokens) than with `options`? False only where it provably cannot, so
    a what-if replay keeps such a request's tokens instead of rendering it again.

    Proven no-ops (True in every other case, whatever the transform):

    * ``strip-billing-header`` on a body no string of which contains
      ``x-anthropic-billing-header:`` (its JSON text, where that prefix needs no escape,
      does not) and with no character of the marks' private-use range: every edit
      `apply_text_edits` makes is then `marks.edit` of a text that does not start with the
      header, which gives the text back unchanged (a marked text is exactly one wrapped
      string: `_SINGLE_RE`), and every container it rebuilds holds the same items and is
      registered under the path and leaf flag of the one it replaces
      (`Marker.register_like`), which is all the template input and its marks read of it;
    * ``no-hoist`` under any gateway profile but ``hoist-system-messages``: the plan's
      ``no_hoist`` is read by that profile's conversion only (`to_upstream`'s ``hoist``).

    tests/test_whatif_reuse.py renders every body of the sample and real logs both ways
    where this says False and finds the same prompt. `scan`, `previous`: a session's
    bodies scanned in order, and this one's predecessor (`BillingScan`).
    """
    body = request.body
    if not isinstance(body, dict):
        return True
    endpoint = request.endpoint if request.endpoint in KNOWN_ENDPOINTS else _detect(body)
    held: bool | None = False
    scanned = False
    for name in transforms:
        if name == "strip-billing-header":
            if not scanned:
                held, scanned = (scan or BillingScan()).holds(request, previous), True
            if held is None or held:  # (None: lone surrogates, not worth proving)
                return True
        elif name == "no-hoist":
            try:
                profile = resolve_gateway(request, options, endpoint)[0]
            except RenderError:
                return True
            if profile == "hoist-system-messages":
                return True
        else:
            return True
    return False
