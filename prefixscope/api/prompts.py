"""``diff`` and ``render``: what the upstream saw, one request at a time or pair by pair."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

from prefixscope.api.handle import Store, maybe_store, store_of
from prefixscope.api.masking import masked
from prefixscope.api.options import checked, is_file, what_ifs
from prefixscope.api.scope import reading, scope_of_options
from prefixscope.model.errors import Error

if TYPE_CHECKING:
    from prefixscope.views.diffed import DiffReport
    from prefixscope.views.results import RenderResult


def diff(store: Store | str | PathLike[str] | None, *requests: str, session: str | None = None,
         gateway: str = "auto", tokenizer: str = "auto", what_if: str | Sequence[str] = (),
         block_size: int | None = None, context: int = 40, workers: int | None = None,
         runner: str = "local", parquet_in: str | None = None, parquet_out: str | None = None,
         since: str | None = None, until: str | None = None, project: str | None = None,
         progress: Callable[[int, int], None] | None = None) -> DiffReport:
    """Where consecutive turns first diverge, in which segment, and why (``prefixscope
    diff``): two requests, every pair of one session, or every pair of every session.

    Args:
        store: a `Store`, the path of a store file, or None (two request files).
        requests: two requests A B: store ids, id prefixes or native ids, or files holding
            one request body; none: the pairs of `session`, else of every session.
        session: a session id (or a unique prefix of one).
        gateway, tokenizer, what_if: how to rebuild the prompts (``prefixscope render``).
        block_size: the cache block size (None: inferred per group, else 16).
        context: characters of text kept around each divergence.
        workers: processes diffing whole sessions (None: the machine's cores once there
            are 500 pairs; 1: this process). The report does not depend on it.
        runner: ``local``, or ``ray`` (every session on Ray Data, docs/scale.md).
        parquet_in, parquet_out: with ``ray``: the store's ``export --parquet`` directory
            and a new directory for the results.
        since, until, project: only these requests (sessions, not two requests).
        progress: called with (pairs done, pairs in all).

    Raises:
        Error: a bad option (``usage``), no such request or session, a render failure.
    """
    from prefixscope.analyses.diff import diff_sessions, diff_two
    from prefixscope.distributed import DistributedError
    from prefixscope.parallel import WorkerError
    from prefixscope.prompt import RenderError, RenderOptions
    from prefixscope.tokenizers import TokenizerError
    from prefixscope.views.diffed import DiffReport

    options = checked(RenderOptions(gateway=gateway, tokenizer=tokenizer,
                                     what_if=what_ifs(what_if)))
    if session is not None and not session.strip():
        raise Error("--session needs a session id (see: prefixscope sql \"select "
                    "distinct session from sessions\")", usage=True)
    if (requests and (len(requests) != 2 or session is not None)):
        raise Error("give two requests A B, or --session S, or --all", usage=True)
    if runner not in ("local", "ray"):
        raise Error(f"unknown runner {runner!r} (known: local, ray)", usage=True)
    if (runner == "ray" and (session is not None or requests)) or \
            (runner == "local" and (parquet_in or parquet_out)):
        raise Error("--runner ray runs --all (without --session); --parquet-in and "
                    "--parquet-out go with it", usage=True)
    try:
        if requests:
            # here, not with the others: finding a request in a file reads it as a log, and
            # `store.lookup` imports every log format for that, which `--all` never uses
            from prefixscope.store.lookup import resolve_request

            with maybe_store(store) as handle:
                # the store's block sizes are read for two files too
                core = handle._open() if handle is not None else None
                a, b = (resolve_request(r, core) for r in requests)
                result = diff_two(a, b, options, core, block_size=block_size, context=context)
        else:
            if store is None:
                raise Error("diff of sessions needs a store (prefixscope.open or "
                            "prefixscope.ingest)", usage=True)
            scoped = scope_of_options(since, until, project)
            with store_of(store) as handle, reading(handle, scoped) as st:
                if runner == "ray":
                    from prefixscope.distributed.ray_runner import diff_all_ray

                    result = diff_all_ray(st, options, block_size=block_size, context=context,
                                          parquet_in=parquet_in, parquet_out=parquet_out)
                else:
                    result = diff_sessions(st, session, options, block_size=block_size,
                                           context=context, progress=progress,
                                           workers=workers)
    except (LookupError, RenderError, TokenizerError, WorkerError,  # (store.lookup's
            DistributedError) as exc:                                 # LookupError_ too)
        raise Error(str(exc).splitlines()[0]) from None
    return masked(DiffReport._of(result))  # secrets masked before any view cuts text


def render(store: Store | str | PathLike[str] | None, request: str, *, gateway: str = "auto",
           tokenizer: str = "auto", what_if: str | Sequence[str] = ()) -> RenderResult:
    """The prompt one request became upstream: gateway conversion, chat template and the
    model's tokenizer, with its tokens and every segment's character and token span
    (``prefixscope render``, docs/render.md).

    Args:
        store: a `Store`, the path of a store file, or None (`request` is a file).
        request: a request id, a unique prefix of one, or the source's own id; or a file
            holding one request body (``"-"``: stdin).
        gateway, tokenizer, what_if: how to rebuild the prompt.

    Raises:
        Error: a bad option (``usage``), no such request, or one that cannot be rendered.
    """
    from prefixscope.analyses.prompt_spans import render_report
    from prefixscope.prompt import RenderError, RenderOptions
    from prefixscope.store.lookup import LookupError_, request_from_file, resolve_request
    from prefixscope.tokenizers import TokenizerError
    from prefixscope.views.results import RenderResult

    options = checked(RenderOptions(gateway=gateway, tokenizer=tokenizer,
                                     what_if=what_ifs(what_if)))
    try:
        if is_file(request):
            req = request_from_file(Path(request))
        else:
            with maybe_store(store) as handle:
                req = resolve_request(request, handle._open() if handle is not None else None)
        result = render_report(req, options)
    except (LookupError_, RenderError, TokenizerError) as exc:
        raise Error(str(exc).splitlines()[0]) from None
    return masked(RenderResult._of(result))  # secrets masked before any view cuts text
