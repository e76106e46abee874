"""Chat templates run through transformers' own Jinja machinery, with one filter made mark-aware.

transformers compiles a chat template in a sandboxed Jinja environment with its
own ``tojson`` (``json.dumps(x, ensure_ascii=False, ...)``), ``raise_exception``,
``strftime_now`` and ``namespace``. `render_marked` takes the template compiled by
transformers (``_compile_jinja_template``), overlays that very environment, and
replaces only ``tojson`` with `jsontext.dumps` bound to the current `Marker`, which
writes the same text plus marks around registered objects. With the marks
stripped, the output is what transformers' ``render_jinja_template`` produces --
`render_plain` calls exactly that, and the renderer compares the two for templates
this project did not write (tests compare them for the bundled ones).

The template receives the conversation objects directly (not transformers'
``_plain_template_data`` copies), because ``tojson`` recognizes registered objects
by identity; they are plain JSON values already, so the copy changes nothing.
"""

from __future__ import annotations

from contextvars import ContextVar
from functools import lru_cache
from typing import Any

from jinja2 import TemplateError

from prefixscope.prompt.jsontext import dumps
from prefixscope.prompt.marks import Marker
from prefixscope.prompt.values import RenderError

# What a chat template written by someone else can raise on a conversation it does not
# expect: its own raise_exception / undefined values (TemplateError), or Python errors
# from filters applied to the wrong type.
_TEMPLATE_FAILURES = (TemplateError, TypeError, ValueError, LookupError, AttributeError)

_CURRENT: ContextVar[Marker | None] = ContextVar("prefixscope_marker", default=None)


def _marked_tojson(x: Any, ensure_ascii: bool = False, indent: int | str | None = None,
                   separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    return dumps(x, _CURRENT.get(), ensure_ascii=ensure_ascii, indent=indent,
                 separators=separators, sort_keys=sort_keys)


def compile_template(source: str) -> Any:
    """The compiled template (cached).

    Raises:
        jinja2.TemplateError: the template does not compile.
    """
    return _compiled(source)


@lru_cache(maxsize=32)
def _compiled(source: str) -> Any:
    from transformers.utils.chat_template_utils import _compile_jinja_template

    base = _compile_jinja_template(source)
    env = base.environment.overlay()
    # NOTE: overlay() shares the filters dict with its parent: replace, never mutate.
    env.filters = {**base.environment.filters, "tojson": _marked_tojson}
    return env.from_string(source)


def render_marked(source: str, messages: list[dict[str, Any]], tools: list[Any] | None,
                  marker: Marker, template_vars: dict[str, Any]) -> str:
    """Render with marks (``add_generation_prompt=True``, as a serving engine does)."""
    token = _CURRENT.set(marker)
    try:
        return _compiled(source).render(messages=messages, tools=tools, documents=None,
                                        add_generation_prompt=True, **template_vars)
    except RenderError:
        raise
    except _TEMPLATE_FAILURES as exc:
        raise _template_failure(exc) from None
    finally:
        _CURRENT.reset(token)


def render_plain(source: str, messages: list[dict[str, Any]], tools: list[Any] | None,
                 template_vars: dict[str, Any]) -> str:
    """transformers' own ``render_jinja_template`` (the reference render, no marks)."""
    from transformers.utils.chat_template_utils import render_jinja_template

    try:
        rendered = render_jinja_template(conversations=[messages], tools=tools,
                                         chat_template=source, add_generation_prompt=True,
                                         **template_vars)
    except RenderError:
        raise
    except _TEMPLATE_FAILURES as exc:
        raise _template_failure(exc) from None
    return rendered[0][0] if isinstance(rendered, tuple) else rendered[0]


def _template_failure(exc: Exception) -> RenderError:
    """A template that refuses a conversation (its ``raise_exception``) or breaks on it."""
    text = str(exc).strip()
    return RenderError(f"the chat template failed on this request: "
                       f"{text.splitlines()[0] if text else type(exc).__name__}")
