"""`diff --all --runner ray`: the per-session stage mapped over `export --parquet`'s
pairs.parquet on Ray Data, its results written as Parquet and read back into the report.

Ray is imported here only, when this runner is asked for (`pip install
'prefixscope[ray]'`); without it the command says so in one line. What runs where is in
docs/scale.md: the workers render, tokenize and diff; the driver infers block sizes from
the store (one pass over usage, no bodies), exports the pairs unless given them, and
assembles the report.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import Any

from prefixscope.analyses.diff import DEFAULT_CONTEXT, DiffReport, resolve_block_sizes
from prefixscope.distributed import DistributedError
from prefixscope.distributed.stage import RESULT_SCHEMA, DiffSetup, diff_stage, report_from_tables
from prefixscope.model.redaction import active
from prefixscope.prompt import RenderOptions
from prefixscope.store import Store
from prefixscope.store.export import PAIRS, export_pairs

INSTALL_HINT = "pip install 'prefixscope[ray]'"


def import_ray() -> Any:
    """The `ray` module (usage statistics off unless the environment says otherwise).

    Raises:
        DistributedError: Ray is not installed.
    """
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        import ray
        import ray.data  # noqa: F401  (the [data] extra)
    except ImportError as exc:
        raise DistributedError(f"--runner ray needs Ray Data ({exc.name or 'ray'} is not "
                               f"installed): {INSTALL_HINT}") from None
    return ray


@contextmanager
def ray_session(ray: Any) -> Iterator[None]:
    """Ray running while the context is open: the cluster RAY_ADDRESS names, else a local
    instance on loopback only (or the one this process already started, left running).

    stdout carries the command's data alone: what Ray prints meanwhile (its raylet's
    warnings reach the driver even with ``log_to_driver=False``) goes to stderr."""
    started = not ray.is_initialized()
    with redirect_stdout(sys.stderr):
        if started:
            local = {} if os.environ.get("RAY_ADDRESS") else {"_node_ip_address": "127.0.0.1"}
            ray.init(include_dashboard=False, log_to_driver=False, **local)
        try:
            yield
        finally:
            if started:
                ray.shutdown()


def diff_all_ray(store: Store, options: RenderOptions, *, block_size: int | None = None,
                 context: int = DEFAULT_CONTEXT, parquet_in: str | None = None,
                 parquet_out: str | None = None) -> DiffReport:
    """`diff_sessions(store, None, ...)` computed on Ray: the same report.

    `parquet_in`: a directory holding `export --parquet`'s pairs.parquet of this store
    (a path or a URI every worker can read); None exports it to a temporary directory
    (a local Ray instance only). `parquet_out`: a new or empty directory the workers write
    their results to; None: a temporary one.

    Raises:
        DistributedError: Ray missing, a bad directory, or the run failed.
        RenderError, TokenizerError: a bad option (checked before Ray starts).
    """
    from prefixscope.prompt import check_options
    from prefixscope.tokenizers import AUTO, load_tokenizer

    ray = import_ray()
    check_options(options)
    if options.tokenizer != AUTO:
        load_tokenizer(options.tokenizer)
    sizes = resolve_block_sizes(block_size, store)
    setup = DiffSetup(options, sizes, context, active())
    if parquet_out is not None:
        _check_empty(parquet_out)
    with tempfile.TemporaryDirectory(prefix="prefixscope-ray-") as tmp:
        parquet_in, parquet_out = _absolute(parquet_in), _absolute(parquet_out)
        if parquet_in is None:
            source = str(export_pairs(store, Path(tmp)))
        else:
            source = f"{parquet_in.rstrip('/')}/{PAIRS}.parquet"
            if "://" not in source and not Path(source).is_file():
                raise DistributedError(f"no {PAIRS}.parquet in {parquet_in}: write it with "
                                       f"prefixscope export --parquet {parquet_in}")
        target = parquet_out or str(Path(tmp) / "out")
        results = _run(ray, source, target, setup)
    return report_from_tables([results], options, sizes)


def _absolute(directory: str | None) -> str | None:
    """A local directory as an absolute path (a worker's working directory is not the
    driver's); a URI as it is."""
    if directory is None or "://" in directory:
        return directory
    return str(Path(directory).resolve())


def _check_empty(directory: str) -> None:
    if "://" in directory:
        return
    path = Path(directory)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise DistributedError(f"--parquet-out {directory} must be a new or empty directory "
                               "(the workers add files to it)")


def _run(ray: Any, source: str, target: str, setup: DiffSetup) -> Any:
    """Map the stage over `source`'s sessions, write the results to `target`, read them."""
    import pyarrow.parquet as pq

    if "://" not in source and pq.ParquetFile(source).metadata.num_rows == 0:
        empty = RESULT_SCHEMA.empty_table()  # no pair: nothing for Ray to do
        Path(target).mkdir(parents=True, exist_ok=True)
        pq.write_table(empty, Path(target) / "empty.parquet")
        return empty
    with ray_session(ray):
        try:
            pairs = ray.data.read_parquet(source)
            # a few sessions per partition per CPU: Ray's default (200) costs seconds of
            # scheduling on a small log, and one partition is diffed by one worker
            partitions = max(1, 4 * int(ray.cluster_resources().get("CPU", 1)))
            results = pairs.groupby("session", num_partitions=partitions).map_groups(
                diff_stage, batch_format="pyarrow", fn_kwargs={"setup": setup})
            results.write_parquet(target)
            return pq.read_table(target, schema=RESULT_SCHEMA)
        except ray.exceptions.RayError as exc:
            raise DistributedError(f"the Ray run failed: {_last_line(exc)}") from None


def _last_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__
