"""`sql` for a person: the rows as a terminal table.

The values are the store's, so log text: a cell is shown as every log text is on a
terminal (`views.terminal.shown`), cut to `max_width` characters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.table import Table

from prefixscope.views.sqlrows import cell_text
from prefixscope.views.terminal import shown


def rows_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], max_width: int) -> Table:
    table = Table(show_edge=False, pad_edge=False)
    for c in columns:
        table.add_column(shown(c), overflow="fold")
    for row in rows:
        cells = []
        for v in row:
            text = cell_text(v)
            if max_width and len(text) > max_width:
                text = text[: max_width - 1] + "…"
            cells.append(shown(text))
        table.add_row(*cells)
    return table
