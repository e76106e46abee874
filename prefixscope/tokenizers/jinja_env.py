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

A sandbox keeps a template from Python, not from hanging the run: nested
``range(100000)`` loops ran over 60 s, ``3 ** 1000000000`` over 90 s, and a string
doubled in a loop ended in a MemoryError. So a render here has a budget (`render`):
`RENDER_SECONDS` in all, checked at every call, attribute and item lookup the sandbox
sees, every `CHECK_EVERY`-th item a ``{% for %}`` loop or a ``range`` yields and every
piece of output; no power with more than `MAX_POWER_BITS` bits; no string or list a
template builds (``*``, ``+``, ``~``) and no output longer than `MAX_TEXT`; running out
of memory or recursion is the template's failure too. Each is a `BudgetError` (a
``TemplateError``): one line naming the template (`name`), never an internal error.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from functools import cache, lru_cache
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2 import TemplateError
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError
from jinja2.sandbox import MAX_RANGE, ImmutableSandboxedEnvironment
from jinja2.utils import concat

RENDER_SECONDS = 10.0  # one render of one conversation (a real one takes milliseconds)
MAX_TEXT = 64 * 1024 * 1024  # characters (items) of a string (list) a template builds
MAX_POWER_BITS = 65_536  # of ``a ** b``: far past any number a prompt prints
CHECK_EVERY = 1024  # items a loop or a ``range`` yields between two looks at the clock
_BUDGET_FILTER = "_prefixscope_budget"  # a template naming it gets its items back


class BudgetError(SecurityError):
    """A chat template that ran past its budget (time, size, power, memory)."""


# (deadline on time.monotonic(), the template's name) of the render under way
_BUDGET: ContextVar[tuple[float, str] | None] = ContextVar("_BUDGET", default=None)
# a model directory's template source -> its name in messages ("the chat template of DIR")
_NAMES: dict[str, str] = {}


def name(source: str, spec: str) -> None:
    """Name a template for budget messages (a model directory's: its ``--tokenizer``)."""
    _NAMES[source] = f"the chat template of {spec}"


def _over(what: str) -> BudgetError:
    held = _BUDGET.get()
    return BudgetError(f"{held[1] if held else 'the chat template'} {what}")


def _check_clock() -> None:
    held = _BUDGET.get()
    if held is not None and time.monotonic() > held[0]:
        raise _over(f"ran past its budget of {RENDER_SECONDS:g} s")


def _check_size(value: Any) -> Any:
    if isinstance(value, str | list | tuple | bytes) and len(value) > MAX_TEXT:
        raise _over(f"built a value of over {MAX_TEXT:,} characters or items")
    return value


@contextmanager
def budget(source: str) -> Iterator[None]:
    """The budget of one render of `source` (nested renders keep the outer one)."""
    if _BUDGET.get() is not None:
        yield
        return
    token = _BUDGET.set((time.monotonic() + RENDER_SECONDS,
                         _NAMES.get(source, "the chat template")))
    try:
        yield
    finally:
        _BUDGET.reset(token)


def render(template: jinja2.Template, source: str, **variables: Any) -> str:
    """`template` (compiled from `source`) rendered within its budget.

    Raises:
        BudgetError: the budget ran out (its message names the template).
        jinja2.TemplateError, TypeError, ValueError, ...: the template failed otherwise.
    """
    with budget(source):
        pieces: list[str] = []
        size = 0
        try:
            for piece in template.generate(**variables):
                size += len(piece)
                if size > MAX_TEXT:
                    raise _over(f"wrote over {MAX_TEXT:,} characters")
                _check_clock()
                pieces.append(piece)
            return concat(pieces)
        except MemoryError:
            pieces.clear()
            raise _over("ran out of memory") from None
        except RecursionError:
            raise _over("recursed too deep") from None


class _BudgetRange:
    """``range`` for templates: at most Jinja's MAX_RANGE numbers, and a look at the clock
    every `CHECK_EVERY` of them (a loop over it makes no call the sandbox sees)."""

    def __init__(self, *args: int) -> None:
        self._range = range(*args)
        if len(self._range) > MAX_RANGE:
            raise OverflowError(f"Range too big. The sandbox blocks ranges larger than "
                                f"MAX_RANGE ({MAX_RANGE}).")

    def __iter__(self) -> Iterator[int]:
        for i, n in enumerate(self._range):
            if i % CHECK_EVERY == 0:
                _check_clock()
            yield n

    def __reversed__(self) -> Iterator[int]:
        back = self._range[::-1]
        return iter(_BudgetRange(back.start, back.stop, back.step))

    def __len__(self) -> int:
        return len(self._range)

    def __contains__(self, n: object) -> bool:
        return n in self._range

    def __getitem__(self, at: int | slice) -> Any:
        got = self._range[at]
        return _BudgetRange(got.start, got.stop, got.step) if isinstance(got, range) else got

    def __repr__(self) -> str:
        return repr(self._range)


class _BudgetCodeGenerator(CodeGenerator):
    """Jinja's code generator with ``a ~ b`` joined by `_BudgetSandbox.budget_join` (the
    sandbox sees no other string concatenation)."""

    def visit_Concat(self, node: jinja2.nodes.Concat, frame: Frame) -> None:
        if frame.eval_ctx.volatile or frame.eval_ctx.autoescape:  # never, in this env
            super().visit_Concat(node, frame)
            return
        self.write("environment.budget_join((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


def _budget_iter(values: Any) -> Iterator[Any]:
    """What a ``{% for %}`` loops over, with a look at the clock at its start and every
    `CHECK_EVERY` items (nested loops over strings or lists make no call the sandbox
    sees)."""
    _check_clock()
    for i, value in enumerate(values, 1):
        if i % CHECK_EVERY == 0:
            _check_clock()
        yield value


class _BudgetSandbox(ImmutableSandboxedEnvironment):
    """transformers' sandbox with the render budget checked at every hook it has."""

    code_generator_class = _BudgetCodeGenerator
    intercepted_binops = frozenset({"**", "*", "+"})

    def _parse(self, source: str, name: str | None,
               filename: str | None) -> jinja2.nodes.Template:
        """The template's tree with every ``{% for %}``'s iterable passed through
        `_budget_iter` (a filter of this environment's own)."""
        tree = super()._parse(source, name, filename)
        for loop in tree.find_all(jinja2.nodes.For):
            loop.iter = jinja2.nodes.Filter(loop.iter, _BUDGET_FILTER, [], [], None, None,
                                            lineno=loop.iter.lineno)
        return tree

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _check_clock()
        if operator == "**" and isinstance(left, int) and isinstance(right, int) \
                and right > 0 and abs(left) > 1 \
                and right * abs(left).bit_length() > MAX_POWER_BITS:
            raise _over(f"computes a power of over {MAX_POWER_BITS:,} bits")
        if operator == "*":
            seq, n = ((left, right) if isinstance(right, int) else (right, left))
            if isinstance(seq, str | list | tuple | bytes) and isinstance(n, int) \
                    and len(seq) * n > MAX_TEXT:
                raise _over(f"built a value of over {MAX_TEXT:,} characters or items")
        if operator == "+" and isinstance(left, str | list | tuple | bytes) \
                and isinstance(right, str | list | tuple | bytes) \
                and len(left) + len(right) > MAX_TEXT:
            raise _over(f"built a value of over {MAX_TEXT:,} characters or items")
        return super().call_binop(context, operator, left, right)

    def budget_join(self, values: tuple[Any, ...]) -> str:
        _check_clock()
        texts = [str(v) for v in values]
        if sum(map(len, texts)) > MAX_TEXT:
            raise _over(f"built a value of over {MAX_TEXT:,} characters or items")
        return concat(texts)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        _check_clock()
        return _check_size(ImmutableSandboxedEnvironment.call(__self, __context, __obj,
                                                               *args, **kwargs))

    def getattr(self, obj: Any, attribute: str) -> Any:
        _check_clock()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        _check_clock()
        return super().getitem(obj, argument)


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
    env = _BudgetSandbox(trim_blocks=True, lstrip_blocks=True,
                         extensions=[_GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _TemplateNamespace
    env.globals["range"] = _BudgetRange
    env.filters[_BUDGET_FILTER] = _budget_iter
    return env


@lru_cache(maxsize=64)
def compile_chat_template(source: str) -> jinja2.Template:
    """`source` compiled in `chat_template_environment` (cached).

    Raises:
        jinja2.TemplateError: the template does not compile.
    """
    return chat_template_environment().from_string(source)
