"""``simulate``: the requests replayed through a cache model, with the same engine, block and
capacity defaults as ``report`` (`engines.choose`, `analyses.simulate.defaults`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from os import PathLike
from typing import TYPE_CHECKING

from prefixscope.api.capacity import capacity_tokens
from prefixscope.api.handle import Store, store_of
from prefixscope.api.masking import masked
from prefixscope.api.notes import note
from prefixscope.api.options import checked, what_ifs
from prefixscope.api.scope import reading, scope_of_options
from prefixscope.model.errors import Error

if TYPE_CHECKING:
    from prefixscope.views.results import SimulateReport


def simulate(store: Store | str | PathLike[str], *, engine: str = "auto",
             block_size: int | None = None, capacity: int | str | None = None,
             bytes_per_token: int | None = None, trace_block_size: int | None = None,
             cache_output: bool = False,
             ttl: float | None = None, concurrent: bool = False, fit: bool = False,
             capacities: Sequence[int | str | None] = (), save: bool = False,
             gateway: str = "auto", tokenizer: str = "auto", what_if: str | Sequence[str] = (),
             workers: int | None = None, since: str | None = None, until: str | None = None,
             project: str | None = None,
             progress: Callable[[int, int], None] | None = None) -> SimulateReport:
    """Replay the requests through a cache model: observed vs predicted vs ideal cached
    tokens, the class of every uncached token, what a fix would gain (``prefixscope
    simulate``, docs/simulate.md).

    Args:
        store: a `Store`, or the path of a store file.
        engine: the cache model; ``auto`` chooses it as `report` does, and replays a log
            of usage alone with its models' hosted API.
        block_size: the engine's unit (vLLM block, SGLang page, LMCache chunk, OpenAI step;
            None: inferred from the cached values for a self-hosted engine, else the
            engine's own).
        capacity: the cache size (as `report` reads it; ``"unlimited"``); None: fitted to
            the observed cached tokens when a self-hosted engine got less than an
            unlimited cache predicts (as `report` does), else unlimited.
        bytes_per_token: KV bytes per token, for a capacity in bytes.
        trace_block_size: tokens per id of a block-hash trace (None: the trace's own).
        cache_output: also cache the logged output's tokens.
        ttl: hosted engines' retention in seconds (None: the engine's own).
        concurrent: overlapping requests overlap (needs logged durations).
        fit: search the block size and capacity that best reproduce the observed cache,
            and replay at the fit (those not given).
        capacities: the capacity curve: each capacity to replay (like `capacity`).
        save: also store the per-request results in the store's ``simulated`` table (a
            store file only: not a temporary store, nor a scope). Off by default: an
            analysis does not write into the user's store unasked.
        gateway, tokenizer, what_if: how to rebuild the prompts; each what-if is replayed.
        workers: processes running the independent replays (None: the machine's cores on
            500 requests or more; 1: this process). The result does not depend on it.
        since, until, project: only these requests (a scoped copy; nothing is saved).
        progress: called with (requests prepared, requests in all).

    Raises:
        Error: a bad option (``usage``), or nothing to replay.
    """
    from prefixscope.analyses.simulate import (
        AUTO_MIN_REPLAY_REQUESTS,
        SimulateError,
        SimulateOptions,
        stored_rows,
    )
    from prefixscope.analyses.simulate.defaults import replay_with_defaults
    from prefixscope.engines import ENGINES
    from prefixscope.engines.choose import USAGE_ONLY, choose_engine, usage_only_fix
    from prefixscope.parallel import effective_workers
    from prefixscope.prompt import RenderError, RenderOptions
    from prefixscope.tokenizers import TokenizerError
    from prefixscope.views.results import SimulateReport

    if engine != "auto" and engine not in ENGINES:
        raise Error(f"unknown engine {engine!r}; known: auto, {', '.join(ENGINES)}",
                    usage=True)
    render_options = checked(RenderOptions(gateway=gateway, tokenizer=tokenizer))
    scoped = scope_of_options(since, until, project)
    with store_of(store) as handle:
        # a temporary store (of logs, or a scope's copy) is gone after the call
        keep = save and not handle.temporary and scoped is None
        with reading(handle, scoped, writable=keep) as st:
            # the one set of defaults (`engines.choose`, `analyses.simulate.defaults`): the
            # engine and block from the log, the capacity fitted when a self-hosted engine
            # got less than unlimited
            records = st.usage_records()
            chosen = choose_engine(records, engine, block_size,
                                   with_bodies=bool(st.body_count()))
            if chosen.engine is None:  # the log's fault, not the options': exit 1
                fix = "" if "--engine" in chosen.why else (
                    f"; pass --engine (one of {', '.join(ENGINES)})")
                raise Error(f"nothing to replay with --engine auto: {chosen.why}{fix}")
            spec = ENGINES[chosen.engine]
            if engine == "auto":
                note(f"replaying with {chosen.engine}"
                      + (f" (block {chosen.unit})" if chosen.unit and spec.block_parameter
                         and not spec.hosted else "")
                      + f": {chosen.why}")
            # 'N blocks' are the engine's blocks: the block size given (or inferred),
            # else the engine's default
            block = chosen.unit or spec.block_size
            options = SimulateOptions(
                engine=chosen.engine, unit=chosen.unit, trace_block_size=trace_block_size,
                capacity_tokens=capacity_tokens(capacity, block, bytes_per_token),
                cache_output=cache_output, render=render_options, concurrent=concurrent,
                ttl_seconds=ttl)
            curve = [capacity_tokens(c.strip() if isinstance(c, str) else c, block,
                                      bytes_per_token) for c in capacities]
            try:
                n = effective_workers(workers, st.count(),
                                      auto_minimum=AUTO_MIN_REPLAY_REQUESTS)
                result = replay_with_defaults(
                    st, options, unit_source=chosen.unit_source,
                    capacity_given=capacity is not None, fit=fit, what_if=what_ifs(what_if),
                    capacity_curve=curve, progress=progress, workers=n)
            except SimulateError as exc:
                raise Error(str(exc), usage=True) from None
            except (RenderError, TokenizerError) as exc:
                raise Error(str(exc).splitlines()[0]) from None
            if not result.requests:
                if not spec.hosted and st.count() and not st.body_count():
                    raise Error(f"{USAGE_ONLY}: {chosen.engine} has no prompt to replay; "
                                f"replay it from its usage with {usage_only_fix(records)}")
                reasons = "; ".join(f"{n:,} {why}" for why, n in result.skipped.items())
                raise Error(f"nothing to replay ({reasons or 'no requests'})")
            if keep:
                st.save_simulation(result.engine, result.unit, result.capacity_tokens,
                                   stored_rows(result))
                note(f"saved {result.requests:,} results in {st.path} (table simulated)")
    return masked(SimulateReport._of(result))  # masked before any view or plot cuts text
