"""The analyses' worker pool forks its workers from this process where that is safe
(`parallel.Pool(fork=True)`, `analyses.pool.worker_pool`): a worker starts with what this
process holds (its imports, the tokenizers loaded before the fork) instead of loading it
again, and gives the results a spawned worker gives.

The oracles: the same tasks run in this process (`Pool(1)`) or in spawned workers; the
tokenizer library's own ids in this process; the environment and the collector's state
read before the pool.
"""

from __future__ import annotations

import gc
import os
from typing import Any

import pytest

from prefixscope import parallel
from prefixscope.analyses.pool import worker_pool
from prefixscope.parallel import Pool, forks
from prefixscope.tokenizers import _load, load_tokenizer
from prefixscope.tokenizers.hf import HFTokenizer

# set after the import, so that a spawned worker (which imports this module afresh) sees
# the initial value and a forked one the parent's
_MARK = {"value": "imported"}


def _mark(_: int) -> str:
    return _MARK["value"]


def _tokenizers_loaded(_: int) -> tuple[int, int]:
    """(the tokenizers loaded in this worker before its task, misses of its load)."""
    loaded = _load.cache_info().currsize
    load_tokenizer("deepseek-v4")
    return loaded, _load.cache_info().misses


def _encode(texts: list[str]) -> tuple[list[list[int]], str | None]:
    """The ids of `texts` as the tokenizer gives them in this worker, and the worker's
    TOKENIZERS_PARALLELISM."""
    encoded = load_tokenizer("deepseek-v4").encode_many(texts)
    return [e.ids.tolist() for e in encoded], os.environ.get("TOKENIZERS_PARALLELISM")


def test_a_fork_pool_starts_its_workers_with_this_process_state(monkeypatch):
    assert forks()  # this suite runs on Linux
    monkeypatch.setitem(_MARK, "value", "set in the parent")
    with Pool(2, fork=True) as pool:
        assert pool.map(_mark, [0, 1, 2, 3]) == ["set in the parent"] * 4
    with Pool(2) as pool:  # spawned: a fresh interpreter imports the module again
        assert pool.map(_mark, [0, 1]) == ["imported"] * 2


def test_where_fork_is_not_safe_the_pool_spawns(monkeypatch):
    monkeypatch.setitem(_MARK, "value", "set in the parent")
    monkeypatch.setattr(parallel, "forks", lambda: False)
    with Pool(2, fork=True) as pool:
        assert pool.map(_mark, [0, 1]) == ["imported"] * 2


def test_the_worker_pool_loads_its_tokenizers_once_before_forking():
    _load.cache_clear()
    with worker_pool(2, ["deepseek-v4", "deepseek-v4"]) as pool:
        assert _load.cache_info().currsize == 1  # loaded here, once
        seen = pool.map(_tokenizers_loaded, [0, 1, 2, 3])
    # every worker found it loaded and never loaded it again (the one miss is this
    # process's, inherited)
    assert seen == [(1, 1)] * 4


def _compiles_in_worker(_: int) -> tuple[str, int, int]:
    """(a render of the bundled template in this worker, the marked and the plain
    compiles this process has done, its parent's included)."""
    from prefixscope.prompt.marks import Marker
    from prefixscope.prompt.template import _compiled_marked, render_marked, render_plain
    from prefixscope.tokenizers.jinja_env import compile_chat_template

    tok = load_tokenizer("deepseek-v4")
    messages = [{"role": "user", "content": "hi"}]
    marked = render_marked(tok.chat_template, messages, None, Marker(enabled=False),
                           tok.template_vars)
    assert marked == render_plain(tok.chat_template, messages, None, tok.template_vars)
    return (marked, _compiled_marked.cache_info().misses,
            compile_chat_template.cache_info().misses)


def test_the_workers_render_with_the_template_compiled_before_the_fork():
    from prefixscope.prompt.template import _compiled_marked
    from prefixscope.tokenizers.jinja_env import compile_chat_template

    _compiled_marked.cache_clear()
    compile_chat_template.cache_clear()
    alone = _compiles_in_worker(0)[0]  # this process compiles, and renders the same
    _compiled_marked.cache_clear()
    compile_chat_template.cache_clear()
    with worker_pool(2, ["deepseek-v4"]) as pool:
        assert (_compiled_marked.cache_info().misses,
                compile_chat_template.cache_info().misses) == (1, 1)  # here, once each
        seen = pool.map(_compiles_in_worker, [0, 1, 2, 3])
    assert seen == [(alone, 1, 1)] * 4  # no worker compiled it again


def _word_bpe_in_worker(_: int) -> tuple[int, int, list[int]]:
    """(the id of this process's word BPE and of its Python path for non-ASCII texts,
    after tokenizing a text that needs both here: new words, accents, CJK)."""
    tok = load_tokenizer("deepseek-v4")
    assert isinstance(tok, HFTokenizer)
    ids = [int(i) for i in tok.encode(WARM_TEXT).ids]
    return id(tok._ascii_model._bpe), id(tok._unicode_bpe), ids


WARM_TEXT = "zqxwv frobnicated wibblewobble café naïve — “quoted” 日本語"


def test_the_workers_tokenize_with_the_parts_built_before_the_fork(warm_deepseek: Any):
    warm_deepseek()  # the cache entry made: the next load does not load the library
    _load.cache_clear()  # loaded afresh: nothing built lazily yet
    fresh = load_tokenizer("deepseek-v4")
    assert isinstance(fresh, HFTokenizer)
    assert fresh._rust is None
    assert fresh._ascii_model._bpe is None and fresh._unicode_bpe is None
    with worker_pool(2, ["deepseek-v4"]) as pool:
        built = (id(fresh._ascii_model._bpe), id(fresh._unicode_bpe))
        assert fresh._ascii_model._bpe is not None and fresh._unicode_bpe is not None
        seen = pool.map(_word_bpe_in_worker, [0, 1, 2, 3])
    here = _word_bpe_in_worker(0)
    _load.cache_clear()  # (the entry's directory is this test's)
    assert here[:2] == built  # this process's, built once (ids of live objects)
    assert seen == [here] * 4  # the same objects in every worker, and the same ids


def test_a_tokenizer_that_cannot_load_is_left_to_the_workers():
    with worker_pool(2, ["/nonexistent/model-dir"]) as pool:
        assert pool.map(_mark, [0]) == ["imported"]


# what a forked child's environment held at the fork, before its initializer ran
_AT_FORK: dict[str, str | None] = {}
os.register_at_fork(after_in_child=lambda: _AT_FORK.update(
    parallelism=os.environ.get("TOKENIZERS_PARALLELISM")))


def _at_fork(_: int) -> str | None:
    return _AT_FORK.get("parallelism", "no fork seen")


def test_a_forked_worker_starts_with_the_tokenizers_library_on_one_thread(
        monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]):
    # the library reads the variable in the child at the fork: set, it starts the child
    # without a thread pool the fork did not copy, and says nothing on stderr
    monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
    before = dict(os.environ)
    with Pool(2, fork=True) as pool:
        assert pool.map(_at_fork, [0, 1]) == ["false", "false"]
    assert dict(os.environ) == before  # this process keeps its own
    assert "huggingface/tokenizers" not in capfd.readouterr().err


def test_a_forked_worker_tokenizes_as_this_process_does():
    texts = ["naïve café über straße", "日本語のテキスト", "emoji 🙂 and ümlauts", "Ωμέγα",
             "plain ASCII text, the word loop's"]
    here = [e.ids.tolist() for e in load_tokenizer("deepseek-v4").encode_many(texts)]
    assert all(here)
    with Pool(2, fork=True) as pool:
        assert pool.map(_encode, [texts, texts[::-1]]) == [(here, "false"),
                                                           (here[::-1], "false")]


def _frozen(_: int) -> int:
    return gc.get_freeze_count()


def test_a_forked_worker_leaves_this_process_objects_out_of_its_collections():
    frozen = gc.get_freeze_count()
    with Pool(2, fork=True) as pool:
        # every object this process held at the fork: a collection in the worker does not
        # write to them (and copy their pages)
        assert min(pool.map(_frozen, [0, 1])) > 1000
        # nor one in this process while the workers live (it would copy the pages too)
        assert gc.get_freeze_count() > 1000
    assert gc.get_freeze_count() == frozen  # this process collects its own as before


def test_this_process_collects_its_objects_again_once_every_forked_pool_closed():
    frozen = gc.get_freeze_count()
    outer = Pool(2, fork=True)
    assert outer.map(_frozen, [0])[0] > 1000
    with Pool(2, fork=True) as inner:
        inner.map(_frozen, [0])
    assert gc.get_freeze_count() > 1000  # (the outer pool's workers live on)
    outer.close()
    assert gc.get_freeze_count() == frozen
    outer.close()  # (twice: nothing more to do)
    assert gc.get_freeze_count() == frozen
