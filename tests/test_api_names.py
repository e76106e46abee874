"""`prefixscope.api.names`: the names an option takes, which the command line's help lists
without importing anything beneath the library, are the registries' own (read live where
a registry can grow)."""

from __future__ import annotations

from prefixscope.api import names


def test_the_names_listed_are_the_registries_own():
    from prefixscope.analyses.dimensions import DIMENSIONS
    from prefixscope.engines import ENGINES
    from prefixscope.ingest.formats import format_names
    from prefixscope.prompt.gateways import get_profile
    from prefixscope.tokenizers import BUNDLED

    assert names.engines() == tuple(ENGINES)
    assert tuple(n for n, _ in names.ingest_formats()) == format_names()
    assert all(description for _, description in names.ingest_formats())
    assert names.BY_DIMENSIONS == DIMENSIONS
    assert names.TOKENIZERS == BUNDLED
    for gateway in names.GATEWAYS:  # each a profile the library finds by that name
        assert get_profile(gateway).name == gateway


def test_the_help_lists_them():
    from typer.testing import CliRunner

    from prefixscope.cli.main import app

    shown = " ".join(CliRunner().invoke(app, ["report", "--help"], terminal_width=400)
                     .output.split())
    for name in (*names.engines(), *names.GATEWAYS, *names.TOKENIZERS,
                 *names.LEDGER_PRICED_WHAT_IFS):
        assert name in shown, name


def test_an_engine_registered_later_is_listed():
    from prefixscope.engines import ENGINES, EngineSpec, Lazy, register

    saved = dict(ENGINES)
    try:
        register(EngineSpec("acme-test", Lazy("vllm", "VllmEngine"), "a test engine"))
        assert names.engines()[-1] == "acme-test"
    finally:
        ENGINES.clear()
        ENGINES.update(saved)
    assert "acme-test" not in names.engines()
