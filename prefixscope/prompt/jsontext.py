"""JSON text exactly as Python's ``json.dumps`` and Go's ``encoding/json`` write it, with marks.

Tool schemas and tool-call arguments reach the model as JSON text, written either
by the chat template (transformers' ``tojson`` filter is ``json.dumps(x,
ensure_ascii=False)``) or by a Go gateway (new-api's ``json.Marshal``). Two things
follow, and this module provides both:

* `dumps` reproduces ``json.dumps`` byte for byte (separators, indent, sort_keys,
  ensure_ascii, float repr) and, given a `Marker`, wraps every registered object in
  its path's marks -- a member's marks include its key, so ``"path": {...}`` belongs
  to ``...properties.path``. With marks removed the result equals ``json.dumps``
  (property-tested). The renderer installs it as the template's ``tojson``.
* `go_marshal` reproduces Go's ``json.Marshal`` of a value decoded into ``any``:
  object keys sorted (Go sorts map keys), compact, ``<``, ``>``, ``&``, U+2028 and
  U+2029 escaped as ``\\u003c`` etc., ``\\b``/``\\f`` short escapes (Go >= 1.22), other
  control characters as ``\\u00XX``, and numbers as float64 in Go's format
  (``1e+21``, ``1e-7``, integers without a fraction). Source: Go's
  ``encoding/json/encode.go`` (``appendString``, ``floatEncoder``).
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from functools import lru_cache
from json.encoder import encode_basestring, encode_basestring_ascii
from typing import Any

from prefixscope.prompt.marks import CLOSE, OPEN, Marker, unmark

# ------------------------------------------------------------------ Python json.dumps


def dumps(value: Any, marker: Marker | None = None, *, ensure_ascii: bool = False,
          indent: int | str | None = None, separators: tuple[str, str] | None = None,
          sort_keys: bool = False) -> str:
    """``json.dumps(value, ...)`` with registered objects wrapped in their marks."""
    if isinstance(indent, int):
        indent = " " * indent
    if separators is not None:
        item_sep, key_sep = separators
    else:
        item_sep, key_sep = (", ", ": ") if indent is None else (",", ": ")
    quote = encode_basestring_ascii if ensure_ascii else encode_basestring
    out: list[str] = []
    mark = marker if marker is not None and marker.enabled else None
    if mark is None and indent is None and not ensure_ascii:
        # Nothing to mark: the C encoder writes this text, unless a key holds a mark
        # character (this writer drops those; then the text holds one too).
        text = _encoder(False, sort_keys, item_sep, key_sep).encode(value)
        if OPEN not in text and CLOSE not in text:
            return text

    def scalar(v: Any) -> str:
        if isinstance(v, str):
            # NOTE: ASCII escaping would turn marks into \udbxx text: drop them first.
            return quote(unmark(v) if ensure_ascii else v)
        if v is None:
            return "null"
        if v is True:
            return "true"
        if v is False:
            return "false"
        if isinstance(v, int):
            return int.__repr__(v)
        if isinstance(v, float):
            return _py_float(v)
        raise TypeError(f"Object of type {type(v).__name__} is not JSON serializable")

    def key_text(k: Any) -> str:
        if isinstance(k, str):
            return quote(unmark(k))
        if isinstance(k, bool) or k is None:
            return quote(scalar(k))
        if isinstance(k, (int, float)):
            return quote(scalar(k))
        raise TypeError(f"keys must be str, int, float, bool or None, not {type(k).__name__}")

    def container(v: Any, level: int) -> None:
        if isinstance(v, dict):
            if not v:
                out.append("{}")
                return
            items = sorted(v.items()) if sort_keys else v.items()
            out.append("{")
            first = True
            for k, item in items:
                if not first:
                    out.append(item_sep)
                first = False
                if indent is not None:
                    out.append("\n" + indent * (level + 1))
                owner = mark.path_of(item) if mark and isinstance(item, (dict, list)) else None
                if owner is not None and mark is not None:
                    out.append(mark.open(owner))
                out.append(key_text(k))
                out.append(key_sep)
                value_text(item, level + 1, marked=owner is not None)
                if owner is not None and mark is not None:
                    out.append(mark.close())
            if indent is not None:
                out.append("\n" + indent * level)
            out.append("}")
        else:
            if not v:
                out.append("[]")
                return
            out.append("[")
            for i, item in enumerate(v):
                if i:
                    out.append(item_sep)
                if indent is not None:
                    out.append("\n" + indent * (level + 1))
                value_text(item, level + 1, marked=False)
            if indent is not None:
                out.append("\n" + indent * level)
            out.append("]")

    def value_text(v: Any, level: int, *, marked: bool) -> None:
        if isinstance(v, (dict, list, tuple)):
            owner = None if marked or mark is None else mark.path_of(v)
            if owner is not None and mark is not None:
                out.append(mark.open(owner))
            if indent is None and mark is not None and mark.is_leaf(v):
                # Nothing registered inside: the C encoder writes the same text, faster.
                out.append(_encoder(ensure_ascii, sort_keys, item_sep, key_sep).encode(v))
            else:
                container(list(v) if isinstance(v, tuple) else v, level)
            if owner is not None and mark is not None:
                out.append(mark.close())
        else:
            out.append(scalar(v))

    value_text(value, 0, marked=False)
    return "".join(out)


@lru_cache(maxsize=16)
def _encoder(ensure_ascii: bool, sort_keys: bool, item_sep: str, key_sep: str
             ) -> json.JSONEncoder:
    """The encoder ``json.dumps`` makes for these options, made once: `encode` of it is
    ``json.dumps(v, ensure_ascii=..., sort_keys=..., separators=...)`` (what dumps does),
    without a new encoder per call (a template's ``tojson`` of every small value)."""
    return json.JSONEncoder(ensure_ascii=ensure_ascii, sort_keys=sort_keys,
                            separators=(item_sep, key_sep))


def _py_float(v: float) -> str:
    if v != v:
        return "NaN"
    if v == math.inf:
        return "Infinity"
    if v == -math.inf:
        return "-Infinity"
    return float.__repr__(v)


# ------------------------------------------------------------------ Go encoding/json

_GO_ESCAPES = {
    ord('"'): '\\"', ord("\\"): "\\\\", ord("\b"): "\\b", ord("\f"): "\\f", ord("\n"): "\\n",
    ord("\r"): "\\r", ord("\t"): "\\t", ord("<"): "\\u003c", ord(">"): "\\u003e",
    ord("&"): "\\u0026", 0x2028: "\\u2028", 0x2029: "\\u2029",
}
for _c in range(0x20):
    _GO_ESCAPES.setdefault(_c, f"\\u00{_c:02x}")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def go_string(text: str) -> str:
    """A Go ``json.Marshal``'d string (HTML-escaping on, as ``json.Marshal`` does)."""
    # NOTE: Go strings are UTF-8; a lone surrogate cannot survive decoding and is U+FFFD.
    text = _SURROGATE_RE.sub("\ufffd", text)
    return '"' + text.translate(_GO_ESCAPES) + '"'


def go_number(value: int | float) -> str:
    """A JSON number as Go writes the float64 it decoded it into."""
    f = float(value)
    if f == 0:
        return "-0" if math.copysign(1.0, f) < 0 else "0"
    if math.isinf(f) or math.isnan(f):
        raise ValueError(f"json: unsupported value: {value!r}")
    sign, digits, exponent = Decimal(repr(f)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    head = "-" if sign else ""
    if abs(f) < 1e-6 or abs(f) >= 1e21:
        exp = exponent + len(text) - 1
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        # strconv writes at least two exponent digits; encoding/json then turns
        # "e-07" into "e-7" (only negative exponents lose the zero).
        if exp < 0:
            return f"{head}{mantissa}e-{-exp}"
        return f"{head}{mantissa}e+{exp:02d}"
    if exponent >= 0:
        return head + text + "0" * exponent
    point = len(text) + exponent
    if point <= 0:
        return head + "0." + "0" * -point + text
    return head + text[:point] + "." + text[point:]


def go_marshal(value: Any, marker: Marker | None = None) -> str:
    """Go ``json.Marshal`` of `value` as decoded into ``any`` (maps have sorted keys)."""
    out: list[str] = []
    mark = marker if marker is not None and marker.enabled else None

    def emit(v: Any, *, marked: bool) -> None:
        owner = None
        if mark is not None and not marked and isinstance(v, (dict, list)):
            owner = mark.path_of(v)
        if owner is not None and mark is not None:
            out.append(mark.open(owner))
        if isinstance(v, dict):
            out.append("{")
            for i, k in enumerate(sorted(v, key=lambda s: unmark(str(s)))):
                if i:
                    out.append(",")
                item = v[k]
                child = mark.path_of(item) if mark and isinstance(item, (dict, list)) else None
                if child is not None and mark is not None:
                    out.append(mark.open(child))
                out.append(go_string(unmark(str(k))))
                out.append(":")
                emit(item, marked=child is not None)
                if child is not None and mark is not None:
                    out.append(mark.close())
            out.append("}")
        elif isinstance(v, (list, tuple)):
            out.append("[")
            for i, item in enumerate(v):
                if i:
                    out.append(",")
                emit(item, marked=False)
            out.append("]")
        elif isinstance(v, str):
            out.append(go_string(v))
        elif v is None:
            out.append("null")
        elif v is True:
            out.append("true")
        elif v is False:
            out.append("false")
        elif isinstance(v, (int, float)):
            out.append(go_number(v))
        else:
            raise TypeError(f"cannot marshal {type(v).__name__}")
        if owner is not None and mark is not None:
            out.append(mark.close())

    emit(value, marked=False)
    return "".join(out)
