"""`prefixscope --help` starts fast: the heavy libraries stay unimported."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("polars", "duckdb", "transformers", "matplotlib", "tokenizers", "tiktoken")


def test_help_does_not_import_heavy_libraries():
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from prefixscope.cli.main import app\n"
        "result = CliRunner().invoke(app, ['--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_every_command_has_help_text():
    from typer.testing import CliRunner

    from prefixscope.cli.main import app

    runner = CliRunner()
    for command in app.registered_commands:
        name = command.name or command.callback.__name__
        result = runner.invoke(app, [name, "--help"])
        assert result.exit_code == 0, name
        assert (command.callback.__doc__ or "").strip(), name


def test_a_bug_is_one_line_not_a_traceback():
    code = (
        "import sys\n"
        "import prefixscope.store as store\n"
        "def boom(*a, **k):\n"
        "    raise RuntimeError('kaboom')\n"
        "store.Store.open = classmethod(boom)\n"
        "from prefixscope.cli.main import main\n"
        "sys.argv = ['prefixscope', 'sql', 'select 1']\n"
        "main()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 1
    assert out.stderr.strip() == ("error: internal error: RuntimeError: kaboom (a bug: rerun "
                                  "with PREFIXSCOPE_DEBUG=1 and report it)")
