"""Cache capacities as the options give them: tokens, "N blocks", "2M", or bytes ("8GiB")
with the KV bytes of one token."""

from __future__ import annotations

from prefixscope.model.errors import Error

UNITS = {"k": 10**3, "m": 10**6, "g": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30,
         "tib": 2**40, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


def capacity_tokens(value: int | str | None, block_size: int | None,
                     bytes_per_token: int | None) -> int | None:
    """A capacity in tokens: ``500000``, ``"1e6"``, ``"2M"`` (tokens), ``"4096 blocks"``,
    ``"8GiB"`` / ``"500MB"`` (bytes, with `bytes_per_token`). None stays unlimited."""
    import re

    if value is None or isinstance(value, int):
        return value
    text = value
    if text.strip().lower() in ("", "unlimited", "none"):
        return None
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-z]*)\s*", text.lower())
    if match is None:
        raise Error(f"--capacity {text!r}: expected N, 'N blocks' or N with a byte unit "
                    "(GiB, MB, ...)", usage=True)
    number, unit = float(match[1]), match[2]
    if unit in ("", "tokens", "token"):
        return int(number)
    if unit in ("k", "m", "g"):
        return int(number * UNITS[unit])
    if unit in ("blocks", "block"):
        if block_size is None:
            raise Error(f"--capacity {text}: blocks of how many tokens? Give --block-size "
                        "(the engine's block, e.g. 16 for vLLM)", usage=True)
        return int(number) * block_size
    if unit in UNITS or unit == "b":
        if bytes_per_token is None:
            raise Error(f"--capacity {text}: a size in bytes needs --bytes-per-token (the KV "
                        "cache bytes of one token of this model)", usage=True)
        return int(number * UNITS.get(unit, 1)) // bytes_per_token
    raise Error(f"--capacity {text!r}: unknown unit {unit!r}", usage=True)
