"""Chat templates rendered in transformers' sandboxed Jinja environment (rebuilt in
`tokenizers.jinja_env`, so rendering never imports transformers), with one filter made
mark-aware.

`render_marked` renders through an overlay of that environment whose ``tojson`` is
`jsontext.dumps` bound to the current `Marker`, which writes the same text plus marks
around registered objects. With the marks stripped, the output is what transformers'
``render_jinja_template`` produces. `render_plain` is that function for what prefixscope
passes it (dict tools, no documents, one conversation): the inputs copied as plain JSON
values, reasoning aliased under its three names, rendered with
``add_generation_prompt=True``. The renderer compares the two for templates this project
did not write (tests compare them for the bundled ones), and
tests/test_template_parity.py proves `render_plain` byte-identical to transformers' own.

The marked render receives the conversation objects directly (not plain copies),
because ``tojson`` recognizes registered objects by identity; they are plain JSON
values already, so the copy changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any

from prefixscope.prompt.jsontext import dumps
from prefixscope.prompt.marks import Marker
from prefixscope.prompt.values import RenderError

if TYPE_CHECKING:  # jinja2 is imported on the first render, not by every command
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

_CURRENT: ContextVar[Marker | None] = ContextVar("prefixscope_marker", default=None)

# transformers' names for a message's reasoning; the first is the one templates read.
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def _marked_tojson(x: Any, ensure_ascii: bool = False, indent: int | str | None = None,
                   separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    return dumps(x, _CURRENT.get(), ensure_ascii=ensure_ascii, indent=indent,
                 separators=separators, sort_keys=sort_keys)


def _template_failures() -> tuple[type[Exception], ...]:
    """What a chat template written by someone else can raise on a conversation it does
    not expect: its own raise_exception / undefined values (TemplateError), or Python
    errors from filters applied to the wrong type."""
    from jinja2 import TemplateError

    return (TemplateError, TypeError, ValueError, LookupError, AttributeError,
            ArithmeticError)


@cache
def _marked_environment() -> ImmutableSandboxedEnvironment:
    from prefixscope.tokenizers.jinja_env import chat_template_environment

    env = chat_template_environment().overlay()
    # NOTE: overlay() shares the filters dict with its parent: replace, never mutate.
    env.filters = {**env.filters, "tojson": _marked_tojson}
    return env


def compile_template(source: str) -> jinja2.Template:
    """The template compiled in the plain environment (cached).

    Raises:
        jinja2.TemplateError: the template does not compile.
    """
    from prefixscope.tokenizers.jinja_env import compile_chat_template

    return compile_chat_template(source)


@lru_cache(maxsize=64)
def _compiled_marked(source: str) -> jinja2.Template:
    return _marked_environment().from_string(source)


def compile_both(source: str) -> None:
    """Compile `source` for `render_marked` and `render_plain` now (both are cached), as a
    process about to fork the workers that render with it does: each worker then starts
    with Jinja imported and the template compiled, in pages it shares, instead of doing
    both itself (two workers: ~0.05 s of CPU each). A template that does not compile is
    left to the render, which raises its error as before."""
    try:
        _compiled_marked(source)
        compile_template(source)
    except _template_failures():
        pass


def render_marked(source: str, messages: list[dict[str, Any]], tools: list[Any] | None,
                  marker: Marker, template_vars: dict[str, Any]) -> str:
    """Render with marks (``add_generation_prompt=True``, as a serving engine does)."""
    from prefixscope.tokenizers.jinja_env import render

    token = _CURRENT.set(marker)
    try:
        return render(_compiled_marked(source), source,
                      messages=messages, tools=tools, documents=None,
                      add_generation_prompt=True, **template_vars)
    except RenderError:
        raise
    except _template_failures() as exc:
        raise _template_failure(exc) from None
    finally:
        _CURRENT.reset(token)


def render_plain(source: str, messages: list[dict[str, Any]], tools: list[Any] | None,
                 template_vars: dict[str, Any]) -> str:
    """transformers' ``render_jinja_template`` of one conversation (the reference render,
    no marks): ``add_generation_prompt=True``, dict tools, no documents."""
    try:
        chat = _plain_data(messages)
        for message in chat:
            if not isinstance(message, dict):
                raise TypeError(f"Chat messages should be dicts, dataclasses or pydantic "
                                f"models, but got {message!r}.")
        from prefixscope.tokenizers.jinja_env import render

        return render(compile_template(source), source,
                      messages=_alias_reasoning(chat), tools=_plain_data(tools), documents=None,
                      add_generation_prompt=True, **_plain_data(template_vars))
    except RenderError:
        raise
    except _template_failures() as exc:
        raise _template_failure(exc) from None


def _plain_data(value: Any) -> Any:
    """A fresh copy made of plain JSON types (transformers' ``_plain_template_data`` for
    the values a log holds: anything else becomes a ``<type>`` placeholder)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain_data(k): _plain_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_data(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain_data(v) for v in value)
    return f"<{type(value).__name__}>"


def _alias_reasoning(chat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """transformers' ``_alias_reasoning_fields``: reasoning under any of its names is also
    passed as ``reasoning_content`` and ``thinking``."""
    out = []
    for message in chat:
        reasoning = next((message[key] for key in _REASONING_FIELDS
                          if message.get(key) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        out.append(message)
    return out


def _template_failure(exc: Exception) -> RenderError:
    """A template that refuses a conversation (its ``raise_exception``) or breaks on it."""
    text = str(exc).strip()
    return RenderError(f"the chat template failed on this request: "
                       f"{text.splitlines()[0] if text else type(exc).__name__}")
