"""The vllm and sglang engines against the engines' own code (differential, opt-in; kept in
bench/ because it needs the two engines' wheels, which the test suite never downloads).

vLLM 0.33.0's ``BlockPool`` (``vllm/v1/core/block_pool.py`` + ``kv_cache_utils.py``)
and SGLang's ``RadixCache`` (``srt/mem_cache/radix_cache.py`` + ``evict_policy.py``) of
0.5.10.post1 and of 0.5.23 are pure Python; their heavy imports (torch, config, events,
metrics) are stubbed, and they are driven the way ``KVCacheManager`` and SGLang's
scheduler drive them, one request at a time. Random prefix-sharing traces must give
identical hits, identical vLLM free-queue order (block ids) and identical SGLang tree
sizes. The stubs cover both SGLang trees: 0.5.23 imports ``mem_cache.events`` (the KV
event recorder), ``mem_cache.utils.get_eviction_strategy`` (built here from the real
``evict_policy.py``) and ``utils.common.ceil_align``, frees evicted pages with
``free_segment`` and reports a match as ``device_prefix_len`` instead of
``device_indices``. The check runs in a subprocess (the stubs must not leak into other
tests) and only when ``PREFIXSCOPE_UPSTREAM`` names the folders (separated by ``:``)
holding the wheels' sources; each engine is checked against every folder that has its
sources::

    pip download --no-deps vllm==0.33.0 sglang==0.5.10.post1 -d W && cd W
    unzip -oq 'vllm-*.whl' 'vllm/v1/core/*' && unzip -oq 'sglang-*.whl' 'sglang/srt/mem_cache/*'
    pip download --no-deps sglang==0.5.23 -d W2 && (cd W2 && unzip -oq 'sglang-*.whl' \
        'sglang/srt/mem_cache/*')
    PREFIXSCOPE_UPSTREAM=$PWD:$PWD/W2 pytest bench/check_engines_upstream.py
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
import random
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

UPSTREAM = os.environ.get("PREFIXSCOPE_UPSTREAM")
ROOT = Path(__file__).resolve().parent.parent
SOURCES = {"vllm": Path("vllm/v1/core/block_pool.py"),
           "sglang": Path("sglang/srt/mem_cache/radix_cache.py")}
CHECKS = [(engine, folder) for folder in (UPSTREAM or "").split(os.pathsep) if folder
          for engine, source in SOURCES.items() if (Path(folder) / source).is_file()]


@pytest.mark.skipif(not CHECKS, reason="PREFIXSCOPE_UPSTREAM not set (see module docstring)")
@pytest.mark.parametrize(("engine", "folder"), CHECKS or [("vllm", "")])
def test_engine_equals_upstream_code(engine, folder):
    done = subprocess.run([sys.executable, __file__, engine], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT),
                                            "PREFIXSCOPE_UPSTREAM": folder})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "identical" in done.stdout


# -- the subprocess side ----------------------------------------------------------------

def _stub(name: str, **attrs: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    module.__path__ = []  # type: ignore[attr-defined]
    sys.modules[name] = module
    return module


def _load(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _traces(seed: int, alphabet: int, length: int) -> list[list[list[int]]]:
    rng = random.Random(seed)
    trunks = [[rng.randrange(alphabet) for _ in range(length)] for _ in range(4)]
    return [[rng.choice(trunks)[: rng.randrange(length)]
             + [rng.randrange(alphabet) for _ in range(rng.randrange(1, 30))]
             for _ in range(rng.randrange(3, 30))] for _ in range(300)]


def vllm_main(upstream: Path) -> None:
    class Stub(types.ModuleType):
        def __getattr__(self, name: str) -> Any:
            if name.startswith("__"):
                raise AttributeError(name)
            obj = type(name, (), {"__init__": lambda self, *a, **k: None,
                                  "__class_getitem__": classmethod(lambda c, i: c)})
            setattr(self, name, obj)
            return obj

    for name in ["vllm", "vllm.envs", "vllm.config", "vllm.logger", "vllm.multimodal",
                 "vllm.multimodal.utils", "vllm.utils", "vllm.utils.hashing",
                 "vllm.utils.math_utils", "vllm.v1", "vllm.v1.kv_cache_interface",
                 "vllm.v1.kv_cache_spec_registry", "vllm.v1.request", "vllm.v1.utils",
                 "vllm.distributed", "vllm.distributed.kv_events", "vllm.v1.core",
                 "vllm.v1.core.kv_cache_metrics"]:
        module = Stub(name)
        module.__path__ = []  # type: ignore[attr-defined]
        sys.modules[name] = module
    sys.modules["vllm.logger"].init_logger = logging.getLogger  # type: ignore[attr-defined]
    sys.modules["vllm.utils.math_utils"].cdiv = lambda a, b: -(-a // b)  # type: ignore[attr-defined]
    core = upstream / "vllm" / "v1" / "core"
    _load("vllm.v1.core.kv_cache_utils", core / "kv_cache_utils.py")
    block_pool = _load("vllm.v1.core.block_pool", core / "block_pool.py")

    from prefixscope.engines import Units
    from prefixscope.engines.base import block_keys
    from prefixscope.engines.sweep import VllmSweep
    from prefixscope.engines.vllm import VllmEngine

    rng = random.Random(0)
    checked = swept = 0
    for trace in _traces(11, 20, 120):
        bs = rng.choice([1, 2, 4, 16])
        reqs = [(block_keys(t, bs).tolist(), len(t)) for t in trace]
        num_blocks = max(-(-n // bs) for _, n in reqs) + rng.randrange(40)
        sweep = VllmSweep(block_size=bs)
        for keys, n in reqs:
            sweep.step(Units(np.array(keys, dtype=np.uint64), n, bs))
        every = sweep.result()  # every capacity at once, held to upstream at three of them
        hashed = [([k.to_bytes(8, "little") for k in keys], n) for keys, n in reqs]
        for capacity in (num_blocks, max(1, num_blocks // 3), max(1, num_blocks // 8)):
            got = _upstream_hits(block_pool, hashed, bs, capacity)
            if every.follows(capacity):
                assert every.cached_tokens(capacity) == got
                swept += 1
        ours = VllmEngine(block_size=bs, capacity_blocks=num_blocks)
        for (keys, n), (cached, pool) in zip(reqs, _upstream_steps(block_pool, hashed, bs,
                                                                   num_blocks), strict=True):
            mine = ours.step(Units(np.array(keys, dtype=np.uint64), n, bs))
            theirs = [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]
            assert mine.cached_tokens == cached
            assert ours.free_queue() == theirs
            checked += 1
    salted = _check_extra_keys(sys.modules["vllm.v1.core.kv_cache_utils"], block_pool)
    print(f"identical hits and free-queue order on {checked} requests; the one-pass sweep "
          f"identical at {swept} (trace, capacity) replays; {salted} requests hashed by "
          "vLLM's own extra keys (cache_salt, LoRA) hit as their namespaces do")


def _check_extra_keys(utils: types.ModuleType, block_pool: types.ModuleType) -> int:
    """Requests with a random ``cache_salt`` and LoRA adapter, hashed by vLLM's own
    `generate_block_hash_extra_keys` + `hash_block_tokens` (sha256 of pickle) and replayed
    through its pool, hit as prefixscope's keys with the same namespace on the first block
    (`block_keys(namespace=)`, what simulate gives a logged model name and ``cache_salt``)
    hit."""
    import hashlib
    import pickle

    from prefixscope.engines import Units
    from prefixscope.engines.base import block_keys
    from prefixscope.engines.vllm import VllmEngine

    def sha256(value: Any) -> bytes:
        return hashlib.sha256(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)).digest()

    utils.init_none_hash(sha256)

    class Lora:
        def __init__(self, name: str) -> None:
            self.lora_name, self.lora_path = name, f"/adapters/{name}"

    class Request:
        def __init__(self, salt: str | None, lora: str | None) -> None:
            self.cache_salt, self.mm_features, self.prompt_embeds = salt, [], None
            self.lora_request = Lora(lora) if lora else None

    rng = random.Random(3)
    checked = 0
    for trace in _traces(5, 10, 80)[:80]:
        bs = rng.choice([1, 4, 16])
        capacity = max(-(-len(t) // bs) for t in trace) + rng.randrange(30)
        ours = VllmEngine(block_size=bs, capacity_blocks=capacity)
        theirs, mine = [], []
        for tokens in trace:
            salt, lora = rng.choice([None, "s1", "s2"]), rng.choice([None, None, "ad"])
            request, parent, hashes = Request(salt, lora), None, []
            for start in range(0, len(tokens) // bs * bs, bs):
                extra, _ = utils.generate_block_hash_extra_keys(request, start, start + bs, 0)
                parent = utils.hash_block_tokens(sha256, parent, tokens[start:start + bs], extra)
                hashes.append(parent)
            theirs.append((hashes, len(tokens)))
            names = [f"lora:{lora}" if lora else "", f"cache_salt:{salt}" if salt else ""]
            keys = block_keys(tokens, bs, namespace="|".join(names) if any(names) else None)
            mine.append(ours.step(Units(keys, len(tokens), bs)).cached_tokens)
        assert mine == _upstream_hits(block_pool, theirs, bs, capacity)
        checked += len(trace)
    return checked


def _upstream_steps(block_pool: types.ModuleType, reqs: list[tuple[list[bytes], int]],
                    bs: int, capacity: int) -> Iterator[tuple[int, Any]]:
    """Each request (its full blocks' hashes, its length) through upstream's BlockPool of
    `capacity` blocks, one after another, the way KVCacheManager drives it
    (get_computed_blocks with max_cache_hit_length = n - 1, allocate_slots, free): its
    cached tokens and the pool after it."""
    class Req:
        def __init__(self, hashes: list[bytes]) -> None:
            self.block_hashes = hashes

    pool = block_pool.BlockPool(num_gpu_blocks=capacity + 1, enable_caching=True,
                                hash_block_size=bs)
    for hashes, n in reqs:
        hit = []
        for h in hashes[: (n - 1) // bs]:
            got = pool.get_cached_block(h, [0])
            if not got:
                break
            hit.append(got[0])
        pool.touch(hit)
        want = -(-n // bs) - len(hit)
        blocks = hit + pool.get_new_blocks(min(want, pool.get_num_free_blocks()))
        pool.cache_full_blocks(Req(hashes), blocks, len(hit), min(len(hashes), len(blocks)),
                               bs, 0)
        pool.free_blocks(reversed(blocks))
        yield len(hit) * bs, pool


def _upstream_hits(block_pool: types.ModuleType, reqs: list[tuple[list[bytes], int]],
                   bs: int, capacity: int) -> list[int]:
    """Cached tokens of each request through upstream's pool (`_upstream_steps`)."""
    return [cached for cached, _ in _upstream_steps(block_pool, reqs, bs, capacity)]


def sglang_main(upstream: Path) -> None:
    class Tensor(np.ndarray):
        def clone(self) -> Tensor:
            return self.copy().view(Tensor)

        def to(self, *args: Any, **kwargs: Any) -> Tensor:
            return self

    def tensor(x: Any, dtype: Any = None, **kwargs: Any) -> Tensor:
        return np.asarray(x, dtype=np.int64).view(Tensor)

    class Device(str):
        def __new__(cls, *args: Any) -> Device:
            return super().__new__(cls, "cpu")

    _stub("torch", Tensor=Tensor, int64=np.int64, device=Device, tensor=tensor,
          cat=lambda xs: np.concatenate([np.asarray(x) for x in xs]).view(Tensor),
          empty=lambda shape, dtype=None, device=None: np.empty(shape, np.int64).view(Tensor))
    for name in ["sglang", "sglang.srt", "sglang.srt.mem_cache", "sglang.srt.disaggregation",
                 "sglang.srt.utils"]:
        _stub(name)
    _stub("sglang.srt.utils.common", ceil_align=lambda x, n: -(-x // n) * n)

    class KVCacheEventRecorder:  # 0.5.23: KV events off, as in the scheduler's default
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def record_store(self, *args: Any) -> None:
            pass

        record_remove = record_all_cleared = record_store

    _stub("sglang.srt.mem_cache.events", KVCacheEventRecorder=KVCacheEventRecorder,
          LoRANameTable=dict, KvEventLoraNames=dict)

    @dataclasses.dataclass
    class CacheInitParams:
        disable: bool = False
        req_to_token_pool: Any = None
        token_to_kv_pool_allocator: Any = None
        page_size: int = 1
        enable_kv_cache_events: bool = False
        is_eagle: bool = False
        disable_finished_insert: bool = False
        eviction_policy: str = "lru"
        enable_metrics: bool = False
        dynamo_kv_event_format: bool = False  # 0.5.23
        kv_event_lora_names: Any = None
        eviction_policy_config: Any = None

    class MatchResult(NamedTuple):  # 0.5.10.post1's fields, then 0.5.23's
        device_indices: Any = None
        last_device_node: Any = None
        last_host_node: Any = None
        host_hit_length: int = 0
        device_prefix_len: int | None = None
        best_match_node: Any = None

    def params(name: str, **fields: Any) -> type:
        return dataclasses.make_dataclass(name, [(k, Any, dataclasses.field(default=v))
                                                 for k, v in fields.items()])

    class BasePrefixCache:
        metrics_collector = None

        def update_eviction_metrics(self, *args: Any) -> None:
            pass

    evict_params = params("EvictParams", num_tokens=0, swa_num_tokens=0, mamba_num=0)
    mem_cache = upstream / "sglang" / "srt" / "mem_cache"
    policy = _load("sglang.srt.mem_cache.evict_policy", mem_cache / "evict_policy.py")
    strategies = {name[: -len("Strategy")].lower(): cls for name, cls in vars(policy).items()
                  if name.endswith("Strategy") and name != "EvictionStrategy"}

    def get_eviction_strategy(name: str, config: Any = None) -> Any:
        return strategies[name.lower()](**(config or {}))

    def split_node_hash_value(values: Any, split_len: int, page_size: int) -> tuple[Any, Any]:
        if values is None:
            return None, None
        cut = split_len if page_size == 1 else split_len // page_size
        return values[:cut], values[cut:]

    _stub("sglang.srt.mem_cache.cache_init_params", CacheInitParams=CacheInitParams)
    _stub("sglang.srt.mem_cache.utils", convert_to_bigram_key=lambda k: k,
          get_eviction_strategy=get_eviction_strategy,
          split_node_hash_value=split_node_hash_value)
    _stub("sglang.srt.disaggregation.kv_events", MEDIUM_GPU="gpu", AllBlocksCleared=object,
          BlockRemoved=object, BlockStored=object)
    _stub("sglang.srt.mem_cache.hicache_storage", get_hash_str=None, hash_str_to_int64=None)
    _stub("sglang.srt.mem_cache.base_prefix_cache", BasePrefixCache=BasePrefixCache,
          MatchResult=MatchResult,
          MatchPrefixParams=params("MatchPrefixParams", key=None, cow_mamba=False, req=None),
          InsertParams=params("InsertParams", key=None, value=None, mamba_value=None,
                              prev_prefix_len=0, swa_evicted_seqlen=0, chunked=False,
                              priority=0, inserted_len=0),
          InsertResult=params("InsertResult", prefix_len=0, mamba_exist=False, total_len=0,
                              last_device_node=None, swa_branch_inserted=False),
          EvictParams=evict_params,
          EvictResult=params("EvictResult", num_tokens_evicted=0, swa_num_tokens_evicted=0,
                             mamba_num_evicted=0),
          IncLockRefResult=params("IncLockRefResult", delta=None, swa_uuid_for_lock=None),
          DecLockRefParams=params("DecLockRefParams", swa_uuid_for_lock=None),
          DecLockRefResult=params("DecLockRefResult", delta=None))
    radix = _load("sglang.srt.mem_cache.radix_cache", mem_cache / "radix_cache.py")
    base = sys.modules["sglang.srt.mem_cache.base_prefix_cache"]

    from prefixscope.engines.sglang import SglangEngine

    class Allocator:
        device = "cpu"

        def free(self, indices: Any) -> None:
            pass

        def free_segment(self, indices: Any, start_pos: int = 0) -> None:  # 0.5.23
            pass

    rng = random.Random(0)
    checked = evicted = 0
    for trace in _traces(7, 50, 200):
        page = rng.choice([1, 1, 4, 16])
        cap = max(len(t) for t in trace) + rng.randrange(400)
        cap = -(-cap // page) * page
        tree = radix.RadixCache.create_simulated(mock_allocator=Allocator(), page_size=page)
        ours = SglangEngine(page_size=page, capacity_tokens=cap)
        for tokens in trace:
            n = len(tokens)
            # scheduler: match fill_ids[:n-1], lock, allocate (evict(n) when short),
            # cache_finished_req (insert page-aligned), unlock
            got = tree.match_prefix(base.MatchPrefixParams(key=radix.RadixKey(tokens[: n - 1])))
            hit = (got.device_prefix_len if got.device_prefix_len is not None
                   else len(got.device_indices))
            last = got.last_device_node
            tree.inc_lock_ref(last)
            need = n - hit + (page if page > 1 else 0)
            if cap - tree.evictable_size() - tree.protected_size() < need:
                evicted += tree.evict(evict_params(num_tokens=need)).num_tokens_evicted
            aligned = n // page * page
            tree.insert(base.InsertParams(key=radix.RadixKey(tokens[:aligned]),
                                          value=np.arange(aligned).view(Tensor)))
            tree.dec_lock_ref(last)
            assert ours.step(ours.units(tokens)).cached_tokens == hit
            assert len(ours) == tree.evictable_size() + tree.protected_size()
            checked += 1
    assert evicted > 0
    print(f"identical hits and tree sizes on {checked} requests ({evicted} tokens evicted)")


if __name__ == "__main__":
    upstream = Path(os.environ["PREFIXSCOPE_UPSTREAM"])
    {"vllm": vllm_main, "sglang": sglang_main}[sys.argv[1]](upstream)
