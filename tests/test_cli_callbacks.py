"""A command's callback parses its options, calls the library once and hands the result to
a view (issue 38): no callback grows past 30 lines of body (its docstring aside), so what
is not option parsing or rendering lives in the library or in a small helper beside it."""

from __future__ import annotations

import ast
import inspect
import textwrap

from prefixscope.cli.main import app

MAX_BODY_LINES = 30


def body_lines(function: object) -> int:
    """Lines from the first statement after the docstring to the last one's end."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))  # type: ignore[arg-type]
    node = tree.body[0]
    assert isinstance(node, ast.FunctionDef)
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    if not body:
        return 0
    return (body[-1].end_lineno or body[-1].lineno) - body[0].lineno + 1


def callbacks() -> dict[str, object]:
    found: dict[str, object] = {c.name or c.callback.__name__: c.callback
                                for c in app.registered_commands if c.callback}
    if app.registered_callback is not None and app.registered_callback.callback:
        found["(app)"] = app.registered_callback.callback
    return found


def test_every_command_is_registered_with_a_callback():
    assert set(callbacks()) >= {"report", "calls", "ingest", "diff", "segments", "bucket",
                                "simulate", "render", "engine-log", "sql", "export", "(app)"}


def test_no_command_callback_body_is_longer_than_30_lines():
    lengths = {name: body_lines(fn) for name, fn in callbacks().items()}
    assert {n: k for n, k in lengths.items() if k > MAX_BODY_LINES} == {}


def test_the_count_leaves_out_the_docstring_and_counts_to_the_last_line():
    def example(a: int) -> int:
        """A docstring of
        three lines,
        not counted."""
        b = a + 1
        return (b +
                2)

    assert body_lines(example) == 3
