"""Every option of every command reads a value as Typer's own coercion (its pydantic
adapter) does: the same value of the same type, or the same error, word for word
(`cli.coercion`, issue 37: start-up without an adapter per option)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any, get_args, get_origin

import pytest
import typer.main
from typer._coercion import build_runtime_param

from prefixscope.cli.coercion import PlainRuntimeParam
from prefixscope.cli.main import app


def every_parameter() -> list[tuple[str, Any, Any]]:
    """(command name, click command, parameter) of the app and each of its commands."""
    group = typer.main.get_command(app)
    found = [("prefixscope", group, p) for p in group.params]
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        found += [(name, command, p) for p in command.params]
    return found


def samples(annotation: Any, tmp: Path) -> list[Any]:
    """Values a user or a default may give a parameter of `annotation`, good and bad."""
    if get_origin(annotation) is list:
        (item,) = get_args(annotation)
        one = samples(item, tmp)
        return [one[:2], tuple(one[:3]), [], one[0]]
    if annotation is str:
        return ["abc", "", "ünï code", "0", "--x", b"bytes", 5]
    if annotation is bool:
        return [True, False, "true", "0"]
    if annotation in (int, float):
        return ["0", "1", "7", "-3", "12", "007", "1.5", "0.25", "1e3", " 4", "1_000",
                "abc", "", "99999999999999999999", 3, 0, 2.5, True]
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return [*[m.value for m in annotation], *list(annotation), "bogus", "",
                str(list(annotation)[0].value).upper()]
    if annotation is Path:
        (tmp / "a-file").write_text("x")
        return [str(tmp), str(tmp / "a-file"), str(tmp / "missing"), "", "-", tmp,
                "sample_logs"]
    return ["x"]


def outcome(runtime: Any, value: Any, param: Any, ctx: Any) -> tuple[str, Any]:
    try:
        got = runtime._coerce_value(value, param=param, ctx=ctx)
    except Exception as exc:  # noqa: BLE001 - the error is the outcome compared
        return "error", (type(exc).__name__, str(exc))
    return "value", (type(got).__name__, got,
                     [type(x).__name__ for x in got] if isinstance(got, list) else None)


@pytest.mark.parametrize("where", every_parameter(),
                         ids=lambda w: f"{w[0]}:{w[2].name}")
def test_each_option_reads_a_value_as_typers_own_coercion(where, tmp_path):
    name, command, param = where
    descriptor = param.type_descriptor
    if descriptor.file_annotation is not None:
        pytest.fail(f"{name} --{param.name}: a file parameter is typer's own; add its case")
    ctx = command.make_context(name, [], resilient_parsing=True)
    ours = PlainRuntimeParam(parameter_info=descriptor.parameter_info,
                             annotation=descriptor.annotation, descriptor=descriptor)
    typers = build_runtime_param(descriptor)
    for value in samples(descriptor.annotation, tmp_path):
        assert outcome(ours, value, param, ctx) == outcome(typers, value, param, ctx), (
            name, param.name, value)


def test_the_manual_parameters_coerce_with_the_plain_reader():
    """The parameters the commands are built with use `cli.coercion` (no pydantic adapter
    for a well-formed value)."""
    kinds = {type(p.get_runtime_param()).__name__ for _, _, p in every_parameter()}
    assert kinds == {"PlainRuntimeParam"}
