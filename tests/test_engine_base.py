"""The engines' shared pieces: chained block keys, `Units`, the registry."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixscope.engines import ENGINES, Engine, Units, block_keys, get_engine


class TestBlockKeys:
    def test_only_full_blocks_are_hashed(self):
        assert len(block_keys(list(range(15)), 4)) == 3
        assert len(block_keys(list(range(16)), 4)) == 4
        assert len(block_keys(list(range(3)), 4)) == 0

    def test_a_change_breaks_its_block_and_every_later_one(self):
        a = list(range(16))
        b = list(a)
        b[9] = 99  # block 2 of 4-token blocks
        ka, kb = block_keys(a, 4).tolist(), block_keys(b, 4).tolist()
        assert ka[:2] == kb[:2]
        assert all(x != y for x, y in zip(ka[2:], kb[2:], strict=True))

    def test_chained_not_positional(self):
        # Same block content after different parents gives different keys.
        k1 = block_keys([1, 1, 1, 1, 7, 7, 7, 7], 4).tolist()
        k2 = block_keys([2, 2, 2, 2, 7, 7, 7, 7], 4).tolist()
        assert k1[1] != k2[1]

    def test_namespace_separates_the_whole_chain(self):
        tokens = list(range(12))
        plain = block_keys(tokens, 4).tolist()
        salted = block_keys(tokens, 4, namespace="salt").tolist()
        assert all(x != y for x, y in zip(plain, salted, strict=True))
        assert salted == block_keys(tokens, 4, namespace="salt").tolist()

    def test_keys_are_read_only_uint64(self):
        keys = block_keys(list(range(8)), 4)
        assert keys.dtype == np.uint64
        with pytest.raises(ValueError):
            keys[0] = 1

    @given(st.lists(st.integers(0, 3), max_size=40), st.lists(st.integers(0, 3), max_size=40),
           st.integers(1, 6))
    def test_equal_keys_iff_equal_prefix(self, a, b, bs):
        ka, kb = block_keys(a, bs).tolist(), block_keys(b, bs).tolist()
        for i in range(min(len(ka), len(kb))):
            assert (ka[i] == kb[i]) == (a[: (i + 1) * bs] == b[: (i + 1) * bs])


    @given(st.lists(st.integers(-2**40, 2**40), max_size=60), st.integers(1, 9),
           st.one_of(st.none(), st.text(min_size=1, max_size=8)), st.integers(0, 8))
    def test_keys_follow_the_hash_contract(self, tokens, bs, namespace, known):
        """The contract in engines/base.py, computed one block at a time with Python's
        integers (the oracle, `_contract_keys`); the keys given as known are continued
        exactly."""
        expected = _contract_keys(tokens, bs, namespace)
        assert block_keys(tokens, bs, namespace=namespace).tolist() == expected
        prefix = np.array(expected[:known], dtype=np.uint64)
        assert block_keys(tokens, bs, namespace=namespace,
                          prefix_keys=prefix).tolist() == expected

    @settings(max_examples=25, deadline=None)
    @given(st.sampled_from(["int32", "int64", "uint32", "int16", "uint64"]),
           st.integers(0, 2**32 - 1), st.sampled_from([16, 64, 256]), st.integers(-3, 3),
           st.integers(0, 40))
    def test_long_arrays_of_every_integer_dtype_follow_the_contract(self, dtype, seed, bs,
                                                                     extra, known):
        """Arrays long enough that the blocks' sums are taken in one pass (`_contents`,
        from `_EINSUM_TOKENS` ids), of each integer dtype a prompt's ids come in, with
        values at both ends of the dtype's range (negative ids are their int64 two's
        complement): the same keys as the contract's oracle."""
        from prefixscope.engines import base

        info = np.iinfo(dtype)
        n = base._EINSUM_TOKENS + extra * bs + (seed % bs)
        rng = np.random.default_rng(seed)
        ids = rng.integers(info.min, info.max, size=n, dtype=dtype, endpoint=True)
        ids[: 4] = [info.min, info.max, 0, 1]
        tokens = [int(t) for t in ids]
        expected = _contract_keys(tokens, bs, None)
        assert block_keys(ids, bs).tolist() == expected
        assert block_keys(ids[::-1].copy()[::-1], bs).tolist() == expected  # (a strided view)
        prefix = np.array(expected[:known], dtype=np.uint64)
        assert block_keys(ids, bs, prefix_keys=prefix).tolist() == expected


def _contract_keys(tokens: list[int], bs: int, namespace: str | None) -> list[int]:
    """The hash contract of engines/base.py with Python's integers: key[i] = key[i-1] * P
    + mix(sum of weight * token) mod 2**64, a token taken mod 2**64 (two's complement)."""
    import xxhash

    from prefixscope.engines import base

    mask = (1 << 64) - 1

    def mix(z: int) -> int:
        z = (z + 0x9E3779B97F4A7C15) & mask
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        return z ^ (z >> 31)

    weights = [mix(k) | 1 for k in range(1, bs + 1)]
    key = xxhash.xxh3_64_intdigest(namespace.encode()) if namespace else base._ROOT
    expected = []
    for i in range(len(tokens) // bs):
        block = tokens[i * bs:(i + 1) * bs]
        content = mix(sum((t & mask) * w for t, w in zip(block, weights, strict=True)) & mask)
        key = (key * 0xD6E8FEB86659FD93 + content) & mask
        expected.append(key)
    return expected


class TestUnits:
    def test_trace_blocks_may_end_partial(self):
        u = Units.blocks([5, 6, 7], n_tokens=1100, unit=512)  # 512 + 512 + 76
        assert u.n_full == 2
        assert u.full_keys() == [5, 6]

    def test_trace_ids_above_int64_are_folded(self):
        u = Units.blocks([2**64 - 1, 3], n_tokens=1024, unit=512)
        assert u.full_keys() == [2**64 - 1, 3]

    def test_segments_chain_their_hashes(self):
        a = Units.segments(["tools", "system", "hi"], [100, 400, 410], n_tokens=412,
                           breakpoints={1: 300.0})
        b = Units.segments(["tools", "system", "bye"], [100, 400, 415])
        c = Units.segments(["TOOLS", "system", "hi"], [100, 400, 410])
        assert a.full_keys()[:2] == b.full_keys()[:2] != c.full_keys()[:2]
        assert a.full_keys()[2] != b.full_keys()[2]
        assert a.full_keys()[1] != c.full_keys()[1]  # chained: the prefix changed
        assert (a.n_full, a.end(1), a.n_tokens, dict(a.breakpoints)) == (3, 400, 412, {1: 300.0})

    def test_raw_tokens(self):
        u = Units.tokens([4, 5, 6])
        assert (u.unit, u.n_tokens, u.chained, u.full_keys()) == (1, 3, False, [4, 5, 6])


class TestRegistry:
    def test_every_engine_is_one_line_and_satisfies_the_interface(self):
        for name in ENGINES:
            engine = get_engine(name)
            assert isinstance(engine, Engine)
            assert engine.name == name
            hit = engine.lookup(engine.units([1, 2, 3]))
            assert (hit.cached_tokens, hit.matched_units, hit.unit) == (0, 0, engine.unit)

    def test_unknown_engine_names_the_known_ones(self):
        with pytest.raises(ValueError, match="vllm"):
            get_engine("nope")

    def test_params_reach_the_engine(self):
        assert get_engine("vllm", block_size=32).unit == 32
        assert get_engine("sglang", page_size=16).unit == 16
        assert get_engine("lmcache", chunk_size=64).unit == 64
        assert get_engine("blocktrace", block_size=16).unit == 16
        assert get_engine("openai", step=64).unit == 64

    def test_capacity_in_blocks_or_tokens_not_both(self):
        assert get_engine("vllm", block_size=16, capacity_tokens=100).capacity == 6
        with pytest.raises(ValueError):
            get_engine("vllm", capacity_tokens=100, capacity_blocks=6)

    def test_units_of_another_size_are_refused(self):
        engine = get_engine("vllm", block_size=16)
        with pytest.raises(ValueError, match="16"):
            engine.lookup(Units.chain(list(range(64)), 32))


class TestKeySet:
    """`KeySet.leading` against a plain Python set, across merges of its two parts."""

    @given(st.lists(st.tuples(st.booleans(), st.lists(st.integers(0, 40), max_size=30)),
                    max_size=40),
           st.integers(1, 8))
    def test_leading_counts_the_keys_before_the_first_one_never_added(
            self, steps: list[tuple[bool, list[int]]], pending: int) -> None:
        from prefixscope.engines.base import KeySet

        keys, oracle = KeySet(), set()
        keys._MIN_PENDING = pending  # merge into the sorted part often
        for add, values in steps:
            arr = np.array(values, dtype=np.uint64)
            if add:
                keys.add(arr)
                oracle.update(values)
            expected = next((i for i, v in enumerate(values) if v not in oracle), len(values))
            assert keys.leading(arr) == expected
            assert len(keys) == len(oracle)

    @given(st.lists(st.tuples(st.booleans(), st.lists(st.integers(0, 3), max_size=40)),
                    max_size=40),
           st.integers(1, 8), st.integers(1, 4))
    def test_a_prefix_closed_set_of_chained_keys_bisects_to_the_same_count(
            self, steps: list[tuple[bool, list[int]]], pending: int, block: int) -> None:
        """Keys of token chains (`block_keys`) added as vLLM's unlimited cache adds them,
        the rest of a chain after its leading match: bisecting equals scanning a set."""
        from prefixscope.engines.base import KeySet, block_keys

        keys, oracle = KeySet(prefix_closed=True), set()
        keys._MIN_PENDING = pending
        for add, tokens in steps:
            chain = block_keys(tokens, block)
            values = chain.tolist()
            expected = next((i for i, v in enumerate(values) if v not in oracle), len(values))
            assert keys.leading(chain) == expected
            if add:
                keys.add(chain[expected:])
                oracle.update(values)
            assert len(keys) == len(oracle)
