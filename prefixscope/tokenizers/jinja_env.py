"""The sandboxed Jinja environment chat templates run in: transformers' own, rebuilt here so
that rendering a prompt never imports transformers.

Importing transformers costs over half a second, most of a small command's run, and
prefixscope needs none of it but the environment that
``transformers.utils.chat_template_utils._cached_compile_jinja_template`` compiles chat
templates in. `chat_template_environment` builds it the same way: an
``ImmutableSandboxedEnvironment`` (a template is code from a model directory: reaching
Python's internals is a ``SecurityError``) with ``trim_blocks``/``lstrip_blocks``, the
``loopcontrols`` extension and the ``{% generation %}`` tag (`_GenerationTag`:
transformers' ``AssistantTracker`` minus the assistant-mask tracking, which is off unless
a caller asks for that mask), the ``tojson`` filter with transformers' signature and
``json.dumps`` options (``ensure_ascii=False``; not Jinja's HTML-escaping one), and the
globals ``raise_exception``, ``strftime_now``, ``dict`` and ``namespace`` (which refuses
``_``-names). tests/test_template_parity.py renders every bundled and model-directory
template over the real corpora's requests here and through transformers: byte-identical.

It sits in `tokenizers` because a model directory's template is compiled when the
tokenizer is loaded (one error for a broken template, not one per request); `prompt`
renders with it. Requires Jinja2 >= 3.1.6, as transformers does (older versions have
known sandbox escapes).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from functools import cache, lru_cache
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2 import TemplateError
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment


class _GenerationTag(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}``: renders its body unchanged (transformers
    records where it starts and ends only when asked for an assistant-token mask)."""

    tags = {"generation"}

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(
            lineno)

    def _body(self, caller: Callable[[], str]) -> str:
        return caller()


class _TemplateDict:
    """``dict`` for templates: builds dicts, exposes nothing of the dict type itself."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
    """Jinja's ``namespace`` refusing underscore-prefixed attributes (no path to
    CPython internals through a stored dunder)."""

    def __init__(*args: Any, **kwargs: Any) -> None:
        # Jinja's own signature trick, so that namespace(self=...) still works.
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise SecurityError(
                f"Chat templates cannot store underscore-prefixed attributes on a namespace, "
                f"but got {name!r}. Please rename the attribute.")


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | str | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # Not Jinja's own tojson, which escapes HTML characters.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


@cache
def chat_template_environment() -> ImmutableSandboxedEnvironment:
    """The environment transformers compiles chat templates in (see the module doc)."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _TemplateNamespace
    return env


@lru_cache(maxsize=64)
def compile_chat_template(source: str) -> jinja2.Template:
    """`source` compiled in `chat_template_environment` (cached).

    Raises:
        jinja2.TemplateError: the template does not compile.
    """
    return chat_template_environment().from_string(source)
