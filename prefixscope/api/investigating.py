"""``bucket`` and ``segments``: the investigations that group or census the requests."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from os import PathLike
from typing import TYPE_CHECKING

from prefixscope.api.handle import Store, store_of
from prefixscope.api.masking import masked
from prefixscope.api.options import dimensions, what_ifs
from prefixscope.api.reporting import report
from prefixscope.api.scope import reading, scope_of_options
from prefixscope.model.errors import Error

if TYPE_CHECKING:
    from prefixscope.views.results import BucketResult, SegmentsResult


def bucket(store: Store | str | PathLike[str], *, by: str | Sequence[str] | None = None,
           bins: int = 20, block_size: int | None = None, price_per_mtok: float | None = None,
           explain: bool = True, gateway: str = "auto", tokenizer: str = "auto",
           what_if: str | Sequence[str] = (), since: str | None = None,
           until: str | None = None, project: str | None = None) -> BucketResult:
    """Token-weighted hit rate per group, the cached-token histogram, spikes at exact
    constants, the block size and the template boundary each constant is: what
    ``prefixscope bucket`` prints (docs/investigate.md).

    Args:
        store: a `Store`, or the path of a store file.
        by: group by these dimensions (``"endpoint"``, ``["endpoint", "day"]``); with
            them, also the report's ledger by the same dimensions (``spend``).
        bins: histogram bins.
        block_size: the engine's block size (None: inferred from the cached tokens).
        price_per_mtok: dollars per million uncached prompt tokens of a self-hosted engine.
        explain: render requests to explain the spikes.
        gateway, tokenizer, what_if: how to rebuild the prompts (``prefixscope render``).
        since, until, project: only these requests.

    Raises:
        Error: a bad option (``usage``), unreadable input, or an empty scope.
    """
    from prefixscope.analyses.bucket import bucket_store
    from prefixscope.prompt import RenderOptions
    from prefixscope.tokenizers import TokenizerError
    from prefixscope.views.results import BucketResult

    dims = dimensions(by)
    asked = what_ifs(what_if)
    options = RenderOptions(gateway=gateway, tokenizer=tokenizer, what_if=asked)
    with store_of(store) as handle:
        try:
            with reading(handle, scope_of_options(since, until, project)) as st:
                found = bucket_store(st, dims, bins=bins, block_size=block_size,
                                     options=options, explain=explain)
            # ccusage's view, usage and dollars by the same dimensions: the report's own
            # ledger (prompts diffed, every missed token attributed), so both commands
            # name the same cause for the same loss
            spend = None if not dims else report(
                handle, by=dims, block_size=block_size, price_per_mtok=price_per_mtok,
                gateway=gateway, tokenizer=tokenizer, what_if=asked, since=since,
                until=until, project=project).breakdown
        except ValueError as exc:
            raise Error(str(exc), usage=True) from None
        except TokenizerError as exc:
            raise Error(str(exc)) from None
    # masked once, before any view or plot cuts text
    return masked(BucketResult(found, spend, dims))


def segments(store: Store | str | PathLike[str], *, by: str | Sequence[str] | None = None,
             tokens: bool = True, show_text: bool = False, gateway: str = "auto",
             tokenizer: str = "auto", what_if: str | Sequence[str] = (),
             workers: int | None = None, since: str | None = None, until: str | None = None,
             project: str | None = None,
             progress: Callable[[int, int], None] | None = None) -> SegmentsResult:
    """Census of every request segment: how often it changes between turns and how many
    tokens a change there invalidates (``prefixscope segments``, docs/segments.md).

    Args:
        store: a `Store`, or the path of a store file.
        by: one census per group of these dimensions.
        tokens: render and tokenize the requests (False: change rates only).
        show_text: longer previews of each segment's text (masked all the same).
        gateway, tokenizer, what_if: how to rebuild the prompts (``prefixscope render``).
        workers: processes (None: the machine's cores on a large store; 1: this process).
        since, until, project: only these requests.
        progress: called with (sessions done, sessions in all).

    Raises:
        Error: a bad option (``usage``), unreadable input, or an empty scope.
    """
    from prefixscope.analyses.segments import segments_store
    from prefixscope.parallel import WorkerError
    from prefixscope.prompt import RenderOptions
    from prefixscope.tokenizers import TokenizerError
    from prefixscope.views.results import SegmentsResult

    dims = dimensions(by)
    options = RenderOptions(gateway=gateway, tokenizer=tokenizer, what_if=what_ifs(what_if))
    scoped = scope_of_options(since, until, project)
    with store_of(store) as handle, reading(handle, scoped) as st:
        try:
            found = segments_store(st, dims, options=options, with_tokens=tokens,
                                   show_text=show_text, progress=progress, workers=workers)
        except ValueError as exc:
            raise Error(str(exc), usage=True) from None
        except (TokenizerError, WorkerError) as exc:
            raise Error(str(exc)) from None
    # masked once, before any view cuts text
    return masked(SegmentsResult(tuple(found), dims))
