"""Running the per-session analyses on many machines (issue 11): a pure stage over Arrow
tables of one session's pairs (`stage`), and a runner that maps it over `export
--parquet`'s output on Ray Data (`ray_runner`). The local path stays in `analyses`."""


class DistributedError(Exception):
    """A distributed run cannot start (Ray missing, a bad directory) or failed: one line
    for a person."""
