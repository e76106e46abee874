"""A chat template from a model directory renders within a budget (issue 39).

A template is code: nested ``range(100000)`` loops ran over 60 s, ``3 ** 1000000000``
over 90 s, and a string doubled in a loop ended in a MemoryError reported as "internal
error ... a bug". Each is now one line naming the template. The budgets are made small
here (`RENDER_SECONDS`, `MAX_TEXT`) so that each test is quick; what is checked is which
line a template gets, never how long it took.
"""

from __future__ import annotations

import pytest
from test_bad_input import BODY_FILE, one_error_line, run, tokenizer_dir

from prefixscope.prompt import RenderError
from prefixscope.prompt.template import render_plain
from prefixscope.tokenizers import jinja_env

MESSAGES = [{"role": "user", "content": "hi"}]
FAILED = "the chat template failed on this request: "


@pytest.fixture
def small_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jinja_env, "RENDER_SECONDS", 0.05)
    monkeypatch.setattr(jinja_env, "MAX_TEXT", 1_000_000)


def failure(source: str, spec: str = "DIR") -> str:
    jinja_env.name(source, spec)
    with pytest.raises(RenderError) as caught:
        render_plain(source, MESSAGES, None, {})
    return str(caught.value)


@pytest.mark.usefixtures("small_budget")
class TestBudget:
    def test_nested_loops_stop_at_the_time_budget(self) -> None:
        source = ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
                  "{% endfor %}")
        assert failure(source) == FAILED + "the chat template of DIR ran past its budget " \
                                           "of 0.05 s"

    def test_loops_making_no_call_stop_too(self) -> None:
        # a range made once and iterated: no call, attribute or item the sandbox sees
        source = ("{% set r = range(100000) %}{% for a in r %}{% for b in r %}{% endfor %}"
                  "{% endfor %}")
        assert failure(source) == FAILED + "the chat template of DIR ran past its budget " \
                                           "of 0.05 s"

    def test_loops_over_strings_stop_too(self) -> None:
        # no range, no call, attribute or item lookup: only the loops themselves
        source = ('{% set s = "ab" * 400000 %}{% for a in s %}{% for b in s %}{% endfor %}'
                  "{% endfor %}")
        assert failure(source) == FAILED + "the chat template of DIR ran past its budget " \
                                           "of 0.05 s"

    def test_a_huge_power_is_refused_before_it_is_computed(self) -> None:
        assert failure("{{ (3 ** 50000) % 7 }}") == FAILED + (
            "the chat template of DIR computes a power of over 65,536 bits")

    @pytest.mark.parametrize("source", [
        '{{ "x" * 2000000 }}',
        '{{ ("x" * 600000) + ("y" * 600000) }}',
        '{% set ns = namespace(s="ab") %}{% for i in range(30) %}{% set ns.s = ns.s ~ ns.s %}'
        '{% endfor %}{{ ns.s|length }}',
    ], ids=["repeat", "add", "concat"])
    def test_a_string_grown_past_the_size_budget_is_refused(self, source: str) -> None:
        assert failure(source) == FAILED + (
            "the chat template of DIR built a value of over 1,000,000 characters or items")

    def test_output_past_the_size_budget_is_refused(self) -> None:
        source = '{% for i in range(2000) %}{{ "x" * 1000 }}{% endfor %}'
        assert failure(source) == FAILED + (
            "the chat template of DIR wrote over 1,000,000 characters")

    def test_running_out_of_memory_is_the_templates_failure(self) -> None:
        # a filter the sandbox does not see: its MemoryError is caught, not a bug's
        assert failure('{{ "x"|center(10 ** 14) }}') == FAILED + (
            "the chat template of DIR ran out of memory")

    def test_arithmetic_errors_are_the_templates_failure(self) -> None:
        assert failure("{{ 1 / 0 }}") == FAILED + "division by zero"

    def test_an_unnamed_template_is_the_chat_template(self) -> None:
        source = "{{ (7 ** 99999) }}"
        with pytest.raises(RenderError, match="^" + FAILED + "the chat template computes"):
            render_plain(source, MESSAGES, None, {})

    def test_a_template_within_its_budget_renders_as_before(self) -> None:
        source = ("{% for m in messages %}{{ m.role }}: {{ m.content }}|{% endfor %}"
                  "{{ range(3)|list }} {{ range(10, 0, -3)|reverse|list }} {{ 2 ** 10 }} "
                  "{{ range(5)|length }} {{ 3 in range(5) }} {{ range(4)[1] }} "
                  '{{ "ab" * 3 }} {{ "a" ~ "b" }}')
        assert render_plain(source, MESSAGES, None, {}) == (
            "user: hi|[0, 1, 2] [1, 4, 7, 10] 1024 5 True 1 ababab ab")


@pytest.mark.slow
def test_render_names_the_directory_on_one_line(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(jinja_env, "RENDER_SECONDS", 0.05)
    spec = tokenizer_dir("loops", template="{% for i in range(100000) %}{% for j in "
                                           "range(100000) %}{% endfor %}{% endfor %}")
    result = run("render", BODY_FILE, "--tokenizer", spec)
    assert result.exit_code == 1
    assert one_error_line(result) == (f"error: {FAILED}the chat template of {spec} ran past "
                                      "its budget of 0.05 s")
