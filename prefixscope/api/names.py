"""The names an option of the library takes, from the registries that define them: the
command line's help lists them (``--by``, ``--engine``, ``--gateway``, ``--what-if``,
``--tokenizer``, ``ingest --format``) without reaching past the library, and a notebook
can ask the same.

Reading them stays cheap (`prefixscope --help` imports no numpy): the engine registry, the
gateway profiles and the bundled tokenizers are names whose modules are imported when
first used, and the ingest formats' modules are imported only by `ingest_formats`.
"""

from __future__ import annotations

from prefixscope.analyses.dimensions import DIMENSIONS
from prefixscope.model.whatifs import LEDGER_WHAT_IFS
from prefixscope.prompt.gateways import PROFILES
from prefixscope.prompt.whatif import WHAT_IFS
from prefixscope.tokenizers import BUNDLED

# the dimensions ``by=`` groups by (``bucket``, ``report``)
BY_DIMENSIONS: tuple[str, ...] = DIMENSIONS
# the gateway profiles ``gateway=`` names (besides ``auto``)
GATEWAYS: tuple[str, ...] = PROFILES
# the render transforms ``what_if=`` names (``drop:<regex>`` takes a regular expression)
RENDER_WHAT_IFS: tuple[str, ...] = WHAT_IFS
# the what-ifs report prices from the ledger (usage, pauses, backends), not a replay
LEDGER_PRICED_WHAT_IFS: tuple[str, ...] = LEDGER_WHAT_IFS
# the tokenizers bundled with prefixscope, by the name ``tokenizer=`` takes
TOKENIZERS: tuple[str, ...] = BUNDLED


def engines() -> tuple[str, ...]:
    """The cache models ``engine=`` names (besides ``auto``), in the registry's order,
    with any registered since (`prefixscope.engines.register`)."""
    from prefixscope.engines import ENGINES

    return tuple(ENGINES)


def ingest_formats() -> tuple[tuple[str, str], ...]:
    """(name, what it reads) of every ingest format, in detection order: the names
    ``ingest(format=...)`` takes (besides ``auto``). Imports every format's module."""
    from prefixscope.ingest.formats import all_formats

    return tuple((m.NAME, m.DESCRIPTION) for m in all_formats())
