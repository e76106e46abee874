"""Layer (a)/(c) tests of the segment marks and the exact JSON writers (Python and Go)."""

from __future__ import annotations

import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from prefixscope.prompt.jsontext import dumps, go_marshal, go_number, go_string
from prefixscope.prompt.marks import (
    CLOSE,
    TEMPLATE,
    Marker,
    edit,
    has_reserved_chars,
    marks_active,
    strip_marks,
    unmark,
)


class TestMarks:
    def test_wrapped_text_strips_back_with_its_owner(self):
        m = Marker()
        pid = m.path_id("messages[0]", "message")
        got = strip_marks("<a>" + m.wrap("hello", pid) + "</a>")
        assert got.text == "<a>hello</a>"
        assert got.runs == ((0, 3, TEMPLATE), (3, 8, pid), (8, 12, TEMPLATE))
        assert got.balanced

    def test_innermost_mark_owns_nested_text(self):
        m = Marker()
        outer, inner = m.path_id("tools[0]", "tool"), m.path_id("tools[0].x", "tool")
        got = strip_marks(m.wrap("{" + m.wrap("x", inner) + "}", outer))
        assert got.runs == ((0, 1, outer), (1, 2, inner), (2, 3, outer))

    def test_empty_strings_are_never_wrapped(self):
        assert Marker().wrap("", 0) == ""

    def test_disabled_marker_leaves_text_alone_but_records_paths(self):
        m = Marker(enabled=False)
        pid = m.path_id("system", "system")
        assert m.wrap("abc", pid) == "abc"
        assert m.paths == ["system"]

    def test_lone_close_is_dropped_and_reported(self):
        got = strip_marks("a" + CLOSE + "b")
        assert (got.text, got.balanced) == ("ab", False)

    def test_many_ids_round_trip(self):
        m = Marker()
        for i in (0, 1, 4095, 4096, 70000):
            assert strip_marks(m.wrap("x", i)).runs == ((0, 1, i),)

    def test_reserved_range_is_detected(self):
        assert has_reserved_chars("a\U0010e123b")
        assert not has_reserved_chars("a\U000f0000b")  # transformers' own markers: not ours

    def test_edit_keeps_marks_and_drops_them_when_empty(self):
        m = Marker()
        wrapped = m.wrap("Hello", 7)
        assert strip_marks(edit(wrapped, str.upper)).runs == ((0, 5, 7),)
        assert unmark(edit(wrapped, str.upper)) == "HELLO"
        assert edit(wrapped, lambda _: "") == ""

    @given(st.text())
    def test_unmarked_text_strips_to_itself(self, text):
        if not has_reserved_chars(text):
            assert strip_marks(text).text == text


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=4),
    max_leaves=20)


class TestPythonJson:
    @settings(max_examples=150)
    @given(json_values, st.sampled_from([None, 2, "\t"]), st.booleans(), st.booleans(),
           st.sampled_from([None, (",", ":"), (", ", ": ")]))
    def test_equals_json_dumps(self, value, indent, sort_keys, ensure_ascii, separators):
        kwargs = {"indent": indent, "sort_keys": sort_keys, "ensure_ascii": ensure_ascii,
                  "separators": separators}
        # A log whose own text holds the marks' private-use characters is rendered with
        # marks inactive (the renderer scans the body first); then they are plain text.
        with marks_active(not has_reserved_chars(json.dumps(value, ensure_ascii=False))):
            assert dumps(value, **kwargs) == json.dumps(value, **kwargs)

    def test_a_key_holding_a_mark_loses_it_with_or_without_a_marker(self):
        """Unmarked values go through the C encoder, except where a key holds a mark: the
        writer drops marks from keys (marks active), as it does when marking."""
        from prefixscope.prompt.marks import CLOSE, open_mark

        value = {open_mark(3) + "key" + CLOSE: [1, "a"], "b": {open_mark(4) + CLOSE: 2}}
        assert dumps(value) == dumps(value, Marker()) == '{"key": [1, "a"], "b": {"": 2}}'
        with marks_active(False):
            assert dumps(value) == json.dumps(value, ensure_ascii=False)

    @settings(max_examples=60)
    @given(json_values)
    def test_marks_around_registered_objects_strip_to_json_dumps(self, value):
        assume(not has_reserved_chars(json.dumps(value, ensure_ascii=False)))
        m = Marker()

        def register(v, path):
            if isinstance(v, dict):
                m.register(v, m.path_id(path, "tool"))
                for k, x in v.items():
                    register(x, f"{path}.{k}")
            elif isinstance(v, list):
                m.register(v, m.path_id(path, "tool"))
                for i, x in enumerate(v):
                    register(x, f"{path}[{i}]")

        register(value, "root")
        assert strip_marks(dumps(value, m)).text == json.dumps(value, ensure_ascii=False)

    def test_member_marks_include_the_key(self):
        m = Marker()
        schema = {"type": "object", "properties": {"path": {"type": "string"}}}
        m.register(schema, m.path_id("p", "tool"))
        m.register(schema["properties"]["path"], m.path_id("p.properties.path", "tool"))
        got = strip_marks(dumps(schema, m))
        owners = {got.text[a:b]: m.paths[pid] for a, b, pid in got.runs}
        assert owners['"path": {"type": "string"}'] == "p.properties.path"

    def test_leaf_objects_are_written_by_the_c_encoder_identically(self):
        m = Marker()
        leaf = {"b": [1, 2.5, "x"], "a": None}
        m.register(leaf, m.path_id("leaf", "tool"), leaf=True)
        assert strip_marks(dumps({"k": leaf}, m)).text == json.dumps({"k": leaf})


class TestGoJson:
    @pytest.mark.parametrize(("value", "expected"), [
        (1, "1"), (10, "10"), (1.5, "1.5"), (100.0, "100"), (0.1, "0.1"), (1e21, "1e+21"),
        (1e20, "100000000000000000000"), (1e-06, "0.000001"), (1e-07, "1e-7"),
        (1.234e-10, "1.234e-10"), (-0.0, "-0"), (0, "0"),
        (12345678901234567891, "12345678901234567000"),  # float64 on the way through Go
    ])
    def test_numbers_are_go_float64_text(self, value, expected):
        assert go_number(value) == expected

    def test_strings_are_html_escaped_with_short_b_and_f(self):
        assert go_string('<a href="x">&\u2028\b\f\x01é\\') == \
            '"\\u003ca href=\\"x\\"\\u003e\\u0026\\u2028\\b\\f\\u0001é\\\\"'

    def test_maps_have_sorted_keys_and_no_spaces(self):
        assert go_marshal({"timeout": 1000, "command": "ls <d>", "n": [True, None]}) == \
            '{"command":"ls \\u003cd\\u003e","n":[true,null],"timeout":1000}'

    @settings(max_examples=100)
    @given(json_values)
    def test_parses_back_to_the_same_value_with_sorted_keys(self, value):
        # Text holding the marks' own private-use characters is rendered with marks off.
        with marks_active(not has_reserved_chars(json.dumps(value, ensure_ascii=False))):
            back = json.loads(go_marshal(value))

        def norm(v):
            if isinstance(v, dict):
                return {k: norm(v[k]) for k in sorted(v)}
            if isinstance(v, list):
                return [norm(x) for x in v]
            if isinstance(v, bool) or v is None or isinstance(v, str):
                return v
            return float(v)

        assert norm(back) == norm(value)
