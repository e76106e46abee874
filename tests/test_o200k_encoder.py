"""`tokenizers.openai`: o200k-harmony encodes with bpe-openai's Rust encoder where it gives
tiktoken's ids, and decodes off the rank table. The oracle everywhere is tiktoken itself,
built here from the same rank file (its own parser, ``load_tiktoken_bpe``), the pattern and
the special tokens -- not the encoder under test."""

from __future__ import annotations

import gzip
import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefixscope.tokenizers import openai
from prefixscope.tokenizers.files import package_dir

REAL = Path(__file__).parent / "data" / "real"
# Characters whose pre-tokenization and merges are the pattern's edge cases: blanks of
# every kind before words and line breaks, contractions, digits, cased and uncased letters,
# combining marks, CJK, emoji with joiners, and the text of special tokens.
PIECES = [" ", "  ", "\n", "\r\n", "\t", "\u00a0", "\u3000", "\u200d", "a", "Z", "é", "ß",
          "İ", "ǅ", "ʰ", "\u0301", "中", "ー", "😀", "👩", "1", "23", "456", "'s", "'LL",
          "-", "/", "\\", "_", ".", "x", "<|end|>", "<|endoftext|>", "def f(x):", "http"]
TEXTS = st.one_of(
    st.lists(st.sampled_from(PIECES), max_size=40).map("".join),
    st.text(st.characters(codec="utf-8"), max_size=200))  # no lone surrogates


@pytest.fixture(scope="module")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """tiktoken's Encoding of o200k_base with harmony's special tokens."""
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    path = tmp_path_factory.mktemp("o200k") / "o200k_base.tiktoken"
    path.write_bytes(gzip.decompress(
        (package_dir("bpe_openai") / "data" / "o200k_base.tiktoken.gz").read_bytes()))
    return tiktoken.Encoding("o200k-oracle", pat_str=openai._O200K_PATTERN,
                             mergeable_ranks=load_tiktoken_bpe(str(path)),
                             special_tokens=openai._HARMONY_SPECIALS)


@pytest.fixture(scope="module")
def fast() -> Any:
    """The o200k-harmony tokenizer with the fast encoder (a module's own cache: the check
    runs once)."""
    tok = openai.load("o200k-harmony")
    assert tok._fast is not None  # type: ignore[attr-defined]
    return tok


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXTS)
def test_any_text_gets_tiktokens_ids_and_offsets(fast, oracle, text):
    got = fast.encode(text)
    assert got.ids.tolist() == oracle.encode(text, allowed_special="all")
    # offsets: tiktoken's, each token's start in characters
    _, offsets = oracle.decode_with_offsets(got.ids.tolist()) if text else ("", [])
    assert got.starts.tolist() == offsets


def test_every_text_of_the_real_codex_rollouts_gets_tiktokens_ids(fast, oracle):
    texts: list[str] = []

    def strings(value: Any) -> None:
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                strings(item)
        elif isinstance(value, list):
            for item in value:
                strings(item)

    files = sorted((REAL / "codex-desktop").rglob("*.jsonl"))
    assert files
    for file in files:
        for line in file.read_text(encoding="utf-8").splitlines():
            texts.append(line)
            strings(json.loads(line))
    assert len(texts) > 100
    for text in texts:
        assert fast.encode(text).ids.tolist() == oracle.encode(text, allowed_special="all")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 199_997),
                          st.sampled_from(sorted(openai._HARMONY_SPECIALS.values()))),
                max_size=30))
def test_decode_is_tiktokens_on_any_ids(fast, oracle, ids):
    # (ids that cut a character's UTF-8 bytes apart included: replaced as tiktoken does)
    assert fast.decode(ids) == oracle.decode(ids)


def test_an_id_no_token_spells_is_left_to_tiktoken(fast, oracle):
    with pytest.raises(KeyError):
        oracle.decode([199_999 + 500])
    with pytest.raises(KeyError):
        fast.decode([199_999 + 500])


class _Off:
    """An encoder that is tiktoken's except on one text (a vocabulary token)."""

    def __init__(self, reference: Any, wrong: str) -> None:
        self.reference, self.wrong = reference, wrong

    def encode(self, text: str) -> list[int]:
        ids = self.reference.encode_ordinary(text)
        return [*ids, 0] if text == self.wrong else ids


def _fake_binding(encoder: Any) -> Any:
    class Binding:
        @staticmethod
        def tokenizer_for_encoding(name: str) -> Any:
            assert name == "o200k_base"
            return encoder

    return Binding


def test_an_encoder_that_differs_on_one_vocabulary_token_is_not_used(monkeypatch, oracle):
    plain = oracle.encode_ordinary
    wrong = next(t.decode() for t in oracle.token_byte_values()[150_000:]
                 if t.decode("utf-8", "replace").isalpha())
    off = _Off(oracle, wrong)
    monkeypatch.setattr(openai, "_binding", lambda folder: _fake_binding(off))
    tok = openai.load("o200k-harmony")
    assert tok._fast is None  # type: ignore[attr-defined]
    assert tok.encode(wrong).ids.tolist() == plain(wrong)  # tiktoken's, not the encoder's
    # the verdict is kept: a second load reads it, without checking again
    monkeypatch.setattr(openai, "_agrees", lambda *a: pytest.fail("checked again"))
    assert openai.load("o200k-harmony")._fast is None  # type: ignore[attr-defined]


def test_an_agreeing_encoders_verdict_is_kept(monkeypatch, oracle):
    calls = []

    def agrees(encoder: Any, raw: bytes) -> bool:
        calls.append(1)
        return True

    class Same:
        def encode(self, text: str) -> list[int]:
            return oracle.encode_ordinary(text)

    monkeypatch.setattr(openai, "_binding", lambda folder: _fake_binding(Same()))
    monkeypatch.setattr(openai, "_agrees", agrees)
    assert isinstance(openai.load("o200k-harmony")._fast, Same)  # type: ignore[attr-defined]
    assert isinstance(openai.load("o200k-harmony")._fast, Same)  # type: ignore[attr-defined]
    assert calls == [1]


def test_a_binding_that_cannot_be_loaded_leaves_texts_to_tiktoken(monkeypatch, oracle):
    def missing(folder: Path) -> Any:
        raise ImportError("no binding")

    monkeypatch.setattr(openai, "_binding", missing)
    tok = openai.load("o200k-harmony")
    assert tok._fast is None  # type: ignore[attr-defined]
    text = "Hello <|end|> wörld 😀"
    assert tok.encode(text).ids.tolist() == oracle.encode(text, allowed_special="all")


def test_a_warm_load_builds_no_tiktoken_and_the_package_imports_the_binding_after(
        tmp_path):
    env = {"PREFIXSCOPE_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    warm = "from prefixscope.tokenizers import openai; openai.load('o200k-harmony')"
    subprocess.run([sys.executable, "-c", warm], check=True, env=env,
                   cwd=Path(__file__).parent.parent)  # the verdict written
    code = (
        "import sys\n"
        "from prefixscope.tokenizers import openai\n"
        "tok = openai.load('o200k-harmony')\n"
        "assert tok._fast is not None\n"
        "assert 'bpe_openai' not in sys.modules and 'tiktoken' not in sys.modules\n"
        "import bpe_openai\n"
        "assert bpe_openai.get_encoding('o200k_base').encode('hello world') == "
        "tok.encode('hello world').ids.tolist()\n"
        "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=Path(__file__).parent.parent)
    assert done.stdout.strip() == "ok", done.stderr


def test_a_pickled_copy_encodes_with_tiktoken_and_gets_the_same_ids(fast, oracle):
    copy = pickle.loads(pickle.dumps(fast))
    assert copy._fast is None  # the Rust encoder does not pickle
    text = "A copy <|end|> of 数字 12345 and  spaces\n\n"
    assert copy.encode(text).ids.tolist() == fast.encode(text).ids.tolist() == \
        oracle.encode(text, allowed_special="all")
    assert copy.decode(fast.encode(text).ids) == text
