"""Characters that draw nothing or reorder what is drawn, shown as what they are.

The bidi embeddings, overrides and isolates of Trojan Source (CVE-2021-42574: U+202A-
U+202E, U+2066-U+2069, and the marks U+200E, U+200F, U+061C), zero-width characters
(U+200B-U+200D, U+2060-U+2064, U+FEFF) and the Unicode line and paragraph separators
(U+2028, U+2029). A tool name or a prompt holding one would read as something else in a
terminal, a PR comment or a browser (``‮txt.exe`` shows as ``exe.txt``), so every output
that is read shows each as ``\\uNNNN``: the terminal (`views.terminal.visible`, and the
sink in `cli.console`), Markdown, HTML. JSON keeps the string exact and writes each as a
JSON escape (`json_escaped`), so a JSON file viewed as text shows none raw either.
"""

from __future__ import annotations

import re

INVISIBLE = re.compile("[\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")


def _code(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def escaped(text: str) -> str:
    """`text` with each invisible or reordering character as ``\\uNNNN`` (six characters
    one reads)."""
    return INVISIBLE.sub(_code, text) if INVISIBLE.search(text) else text


def json_escaped(document: str) -> str:
    """A JSON document with each invisible or reordering character written as a JSON
    escape: the same strings to a JSON reader (they occur only inside strings), none raw
    to a person reading the file."""
    return escaped(document)
